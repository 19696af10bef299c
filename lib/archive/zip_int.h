/*
 * zip_int.h - what the three parts of the zip reader share: the on-disk constants of the format,
 * the open archive (struct ptc__zip) and the helpers for budgeted memory and record errors.
 *
 * The reader is split along its seams: zip.c parses the container (end records, central
 * directory, names, local records) and answers lookups; zip_minizip.c is the second opinion that
 * opens the same bytes with minizip and requires it to agree; zip_data.c produces a record's
 * bytes (stored or inflated) and checks CRCs. The format itself is described in
 * docs/internals/zip.md. Nothing here leaves lib/archive.
 */
#ifndef PTC_ARCHIVE_ZIP_INT_H
#define PTC_ARCHIVE_ZIP_INT_H

#include "archive/archive.h"

/* ---- format constants ------------------------------------------------------------------------ */

#define SIG_LOCAL      0x04034b50u
#define SIG_CENTRAL    0x02014b50u
#define SIG_DESCRIPTOR 0x08074b50u
#define SIG_END        0x06054b50u
#define SIG_END64      0x06064b50u
#define SIG_LOCATOR64  0x07064b50u

#define LOCAL_LEN         30u
#define CENTRAL_LEN       46u
#define END_LEN           22u
#define END64_LEN         56u
#define END64_RECORD_SIZE 44u /* the record size field counts the bytes after itself */
#define LOCATOR64_LEN     20u
#define MAX_COMMENT       65535u

#define EXTRA_ZIP64  0x0001u
#define U32_SENTINEL 0xFFFFFFFFu
#define U16_SENTINEL 0xFFFFu

#define FLAG_ENCRYPTED         0x0001u
#define FLAG_DESCRIPTOR        0x0008u
#define FLAG_PATCH             0x0020u
#define FLAG_STRONG_ENCRYPTION 0x0040u
#define FLAG_UTF8              0x0800u
#define FLAG_CD_ENCRYPTED      0x2000u

#define METHOD_STORED   0u
#define METHOD_DEFLATED 8u

/* Streaming buffers for callback sources and for CRC checks that keep no output. */
#define IO_CHUNK (64u * 1024u)
/* zlib counts input and output in uInt; larger spans are fed in pieces of this size. */
#define ZLIB_SPAN (1u << 30)
/* A local header with the longest name and extra field the 16-bit lengths allow. */
#define LOCAL_MAX (LOCAL_LEN + 2u * 65535u)

struct ptc__zip {
    ptc__source *src;
    const uint8_t *map;  /* the whole file when addressable, else NULL */
    uint64_t size;       /* of the file */
    ptc__budget *budget; /* may be NULL */
    ptc_limits limits;
    uint64_t cd_offset; /* first byte of the central directory */
    uint64_t cd_size;
    uint64_t comment_offset; /* the archive comment */
    uint64_t comment_len;
    size_t n;                /* entries */
    ptc__zip_entry *entries; /* [n], central-directory order */
    char *names;             /* names_len bytes: every name, NUL-terminated */
    uint64_t names_len;
    char *prefix; /* without the trailing '/' */
    size_t prefix_len;
    const ptc__zip_entry **by_name; /* [n], sorted by case-folded record name */
    /* PTC__ZIP_KEEP_PICKLE: data.pkl as the first read inflated (or copied) it, kept until close
     * so that a later read (verify's static pass after the load) need not inflate it again. */
    bool keep_pickle;
    const ptc__zip_entry *kept_entry;
    uint8_t *kept;
    /* Exact record names hashed: by_hash[hash_cap] holds entry indices + 1 (0: empty), for the
     * lookups of every storage's record; NULL when a probe ran too long (then by_name serves). */
    uint32_t *by_hash;
    size_t hash_cap; /* 0 or a power of two, at least 2n */
};

/* What the open needs to remember about each central entry beyond ptc__zip_entry, only while it
 * checks the local headers and compares with minizip. */
typedef struct central_aux {
    uint64_t pos;      /* file offset of the central entry */
    uint8_t sentinels; /* SENT_* bits: 32-bit fields that held 0xFFFFFFFF */
} central_aux;

#define SENT_SIZE      1u
#define SENT_COMP_SIZE 2u
#define SENT_OFFSET    4u

/* ---- shared helpers (zip.c) ---------------------------------------------------------------- */

/* Allocates n bytes (n sized by the file) after charging them to the budget; NULL with *rc and
 * err set when the budget or the allocator refuses. */
void *ptc__zip_take(ptc__zip *z, uint64_t n, int *rc, ptc_error *err);
/* Frees what ptc__zip_take returned (NULL is fine) and gives its n bytes back to the budget. */
void ptc__zip_give(ptc__zip *z, void *p, uint64_t n);
/* An error about one record: the member is its name after the prefix, escaped; returns code.
 * ptc__zip_rec_stricter marks a rule torch 2.6 does not apply when stricter is true. */
int ptc__zip_rec_err(ptc_error *err, int code, const ptc__zip_entry *e, const char *fmt, ...)
    PTC_PRINTF(4, 5);
int ptc__zip_rec_stricter(ptc_error *err, bool stricter, int code, const ptc__zip_entry *e,
                          const char *fmt, ...) PTC_PRINTF(5, 6);
/* Records whose bytes torch 2.6 interprets, and records it may read at all. */
bool ptc__zip_torch_parses(const ptc__zip_entry *e);
bool ptc__zip_torch_reads(const ptc__zip_entry *e);

/* ---- the second opinion (zip_minizip.c) ------------------------------------------------------ */

/* Opens the archive with minizip and requires it to see the same entries as ptc (see there). */
int ptc__zip_cross_check(ptc__zip *z, const central_aux *aux, ptc_error *err);

#endif /* PTC_ARCHIVE_ZIP_INT_H */
