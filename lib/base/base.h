/*
 * base.h - the lowest layer of libptc: error detail, checked arithmetic, allocation with limits,
 * growable buffers, string escaping and SHA-256. Every other layer includes this; it includes no
 * other layer.
 *
 * Invariants:
 *   - every allocation goes through ptc__realloc (the replaceable allocator);
 *   - every size derived from a file is computed with the ptc__*_ok helpers, which report overflow
 *     instead of wrapping;
 *   - text that came from a file reaches a message only through ptc__escape.
 *
 * Cleanup (one idiom in lib/): a function that holds resources releases them at one label at its
 * end. The resources start NULL (or -1), every release accepts that, and each failure sets rc and
 * jumps: `goto fail` when only failure releases (success hands the resources to the caller and
 * returns before the label), `goto out` when success passes through the label too. A label
 * before it (`nomem:`) may set the error a run of failures shares. No early return once a
 * resource is held, no do { } while (0) breaks, no "ok" flags carried down the function.
 */
#ifndef PTC_BASE_BASE_H
#define PTC_BASE_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ptc/ptc.h"

#if defined(__GNUC__)
#define PTC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define PTC_UNUSED       __attribute__((unused))
#define PTC_LIKELY(x)    __builtin_expect(!!(x), 1)
#define PTC_UNLIKELY(x)  __builtin_expect(!!(x), 0)
#else
#define PTC_PRINTF(f, a)
#define PTC_UNUSED
#define PTC_LIKELY(x)   (x)
#define PTC_UNLIKELY(x) (x)
#endif

/* PTC_ASSERT is for programmer errors only, never for anything a file can cause. */
#ifdef NDEBUG
#define PTC_ASSERT(x) ((void)0)
#else
#define PTC_ASSERT(x) ((x) ? (void)0 : ptc__assert_fail(#x, __FILE__, __LINE__))
#endif
void ptc__assert_fail(const char *expr, const char *file, int line);

/* ---- errors ----------------------------------------------------------------------------------
 * ptc__err sets err (if non-NULL) and returns code, so call sites read
 *     return ptc__err(err, PTC_EFORMAT, "data.pkl", off, "BINGET %u before BINPUT", idx);
 * The message becomes "<member>+0x<offset>: <text>" (member and offset omitted when empty / -1).
 * Arguments that came from the file must be escaped first (ptc__escape). */
int ptc__err(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt, ...)
    PTC_PRINTF(5, 6);
/* The same for a rule where ptc is stricter than torch 2.6 (sets PTC_ERR_STRICTER): torch's
 * weights-only load would accept what this refuses. */
int ptc__err_stricter(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt,
                      ...) PTC_PRINTF(5, 6);
int ptc__verr(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt,
              va_list ap) PTC_PRINTF(5, 0);
void ptc__err_clear(ptc_error *err);
/* Adds context in front of an existing message ("model.pth: " + message); keeps the code. */
void ptc__err_prefix(ptc_error *err, const char *fmt, ...) PTC_PRINTF(2, 3);
void ptc__verr_prefix(ptc_error *err, const char *fmt, va_list ap) PTC_PRINTF(2, 0);

/* ---- parameter structs ------------------------------------------------------------------------
 * Every public parameter struct starts with size_t size (set by its *_default()). dst holds the
 * library's defaults (dst_size bytes, a struct of this library); src is the caller's struct or
 * NULL (the defaults stay). The first src->size bytes of src are copied over dst and dst->size
 * becomes dst_size, so a smaller struct from a caller built against an older ptc.h keeps the
 * defaults of the fields added since. PTC_EINVAL, naming the struct (name: "ptc_open_params"),
 * when src->size is 0, smaller than the size field itself, or larger than dst_size. */
int ptc__params_read(void *dst, size_t dst_size, const void *src, const char *name, ptc_error *err);

/* ---- state-dict keys ---------------------------------------------------------------------------
 * 1 when key is a str that starts with prefix, as ptc_state_dict_rename tests a key before it
 * strips it (lib/pth/rename.c, the one place prefixes are handled); 0 otherwise (NULL, not a str).
 */
int ptc__key_has_prefix(const ptc_value *key, const char *prefix);

/* ---- checked arithmetic ------------------------------------------------------------------------
 * Each returns true when the result fits, false on overflow (then *out is unspecified). */
static inline bool ptc__add_u64_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool ptc__mul_u64_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ptc__add_i64_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool ptc__mul_i64_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
/* true when [off, off+len) lies inside [0, total) */
static inline bool ptc__range_ok(uint64_t off, uint64_t len, uint64_t total)
{
    return off <= total && len <= total - off;
}

/* Little-endian loads from unaligned memory. */
static inline uint16_t ptc__le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t ptc__le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ptc__le64(const uint8_t *p)
{
    return (uint64_t)ptc__le32(p) | ((uint64_t)ptc__le32(p + 4) << 32);
}
static inline void ptc__put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void ptc__put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void ptc__put_le64(uint8_t *p, uint64_t v)
{
    ptc__put_le32(p, (uint32_t)v);
    ptc__put_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---- allocation -----------------------------------------------------------------------------
 * ptc__realloc goes through the allocator set with ptc_set_allocator. ptc__malloc(0) returns a
 * unique non-NULL pointer or NULL; callers never allocate 0 bytes on purpose. */
void *ptc__realloc(void *ptr, size_t size);
void *ptc__malloc(size_t size);
void *ptc__calloc(size_t n, size_t size); /* zeroed; NULL on overflow */
void ptc__free(void *ptr);
char *ptc__strdup(const char *s);
char *ptc__strndup(const char *s, size_t n); /* copies n bytes and adds a NUL */

/* A budget of heap bytes shared by everything one load allocates (the limit max_heap_bytes).
 * ptc__budget_take fails with PTC_ELIMIT when the budget would be exceeded. */
typedef struct ptc__budget {
    uint64_t used;
    uint64_t limit;
} ptc__budget;
int ptc__budget_take(ptc__budget *b, uint64_t n, ptc_error *err, const char *member,
                     int64_t offset);
void ptc__budget_give(ptc__budget *b, uint64_t n);

/* ---- arena ----------------------------------------------------------------------------------
 * Bump allocator for the many small objects of a value tree: everything is freed at once. Charges a
 * budget (may be NULL). Returned memory is zeroed and aligned to 16 bytes. */
typedef struct ptc__arena ptc__arena;
int ptc__arena_new(ptc__arena **out, ptc__budget *budget);
void ptc__arena_free(ptc__arena *a);
void *ptc__arena_alloc(ptc__arena *a, size_t size);
char *ptc__arena_strndup(ptc__arena *a, const char *s, size_t n);

/* ---- growable byte buffer ---------------------------------------------------------------------
 * Zero-initialised it is empty and may grow to PTC__BUF_MAX_DEFAULT bytes; a user that needs
 * another cap sets max before the first append. Growing past the cap is PTC_ELIMIT (out of memory
 * is PTC_ENOMEM); the functions fill no ptc_error, their callers name what grew. */
#define PTC__BUF_MAX_DEFAULT ((size_t)1 << 30) /* 1 GiB: no text or pickle ptc builds is larger */
typedef struct ptc__buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t max; /* the most bytes it may hold; 0 means PTC__BUF_MAX_DEFAULT */
} ptc__buf;
int ptc__buf_reserve(ptc__buf *b, size_t extra);
int ptc__buf_append(ptc__buf *b, const void *p, size_t n);
int ptc__buf_printf(ptc__buf *b, const char *fmt, ...) PTC_PRINTF(2, 3);
void ptc__buf_free(ptc__buf *b);

/* ---- escaping ---------------------------------------------------------------------------------
 * Writes a printable rendering of n bytes into dst (size dstsz, always NUL-terminated): printable
 * ASCII is kept, backslash and quote are escaped, other bytes become \xNN, valid UTF-8 sequences
 * of two or more bytes are kept only when keep_utf8 is true. Output is truncated with "..." when it
 * does not fit. Returns dst. */
char *ptc__escape(char *dst, size_t dstsz, const void *src, size_t n, bool keep_utf8);

/* true when s[0..n) is valid UTF-8 (no overlongs, no surrogates, max U+10FFFF). */
bool ptc__utf8_valid(const uint8_t *s, size_t n);

/* ---- atomic files ------------------------------------------------------------------------------
 * A file written without a name (O_TMPFILE) in the destination's folder, or where the file system
 * cannot, under a temporary name there (".<name>.ptc-XXXXXX"), and put under the final name only
 * when complete: commit flushes, fsyncs the file, links it as the final name when none exists or
 * else under a temporary name renamed over the final one, and fsyncs the folder; abort (or any
 * failure inside commit) removes the temporary file. Either way the handle is freed. A crash at
 * any point leaves the previous file under the final name intact; an unnamed file leaves nothing,
 * a named one at worst a stray temporary file (ptc_save_remove_temporaries, for signal handlers,
 * unlinks those that exist). Writes are buffered. */
typedef struct ptc__afile ptc__afile;
int ptc__afile_open(ptc__afile **out, const char *path, ptc_error *err);
int ptc__afile_write(ptc__afile *f, const void *p, size_t n, ptc_error *err);
uint64_t ptc__afile_offset(const ptc__afile *f); /* bytes written so far */
int ptc__afile_commit(ptc__afile *f, ptc_error *err);
void ptc__afile_abort(ptc__afile *f);
bool ptc__afile_unnamed(const ptc__afile *f); /* true while the file has no name (O_TMPFILE) */
void ptc__afile_force_named(bool on);         /* tests: always the named temporary file */

/* ---- CRC-32 ------------------------------------------------------------------------------------
 * The zip checksum, with zlib's conventions (start from 0; feed pieces in order): ISA-L's
 * crc32_gzip_refl, folded with carry-less multiplication, 5.8x zlib's here (crc32.c). */
uint32_t ptc__crc32(uint32_t crc, const void *data, size_t n);

/* ---- SHA-256 (digest.c: OpenSSL's libcrypto, loaded on first use) -------------------------------
 * init, any number of updates, then final (which releases the digest) or discard (to abandon
 * it). init: 0, PTC_EUNSUPPORTED (libcrypto cannot be loaded; the message says why) or
 * PTC_ENOMEM; after a failed init, update does nothing and discard is safe. final: 0, or
 * PTC_ENOMEM when libcrypto failed (an update included). A context is one thread's. */
typedef struct ptc__sha256 {
    void *ctx; /* EVP_MD_CTX *, NULL when not started */
    bool failed;
} ptc__sha256;
int ptc__sha256_init(ptc__sha256 *s, ptc_error *err);
void ptc__sha256_update(ptc__sha256 *s, const void *data, size_t n);
int ptc__sha256_final(ptc__sha256 *s, uint8_t digest[32], ptc_error *err);
void ptc__sha256_discard(ptc__sha256 *s);

#endif /* PTC_BASE_BASE_H */
