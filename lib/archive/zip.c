/*
 * zip.c - the zip container of PyTorch checkpoints, read strictly and cross-checked with minizip.
 *
 * The reader parses the container itself and accepts only files in which every reader would see
 * the same records at the same offsets (threat model P6). It then opens the same bytes with
 * minizip and rejects the file when minizip sees anything else: two independent parsers agreeing
 * is the check that our own parser has no blind spot an attacker could use.
 *
 * On-disk format (all integers little-endian; the layout torch 2.6 writes, docs/internals/zip.md):
 *
 *   [local record]*  central directory  [zip64 end record  zip64 locator]  end record [comment]
 *
 *   local record   = local header (30 bytes: sig 0x04034b50, version, flags, method, time, date,
 *                    crc32, compressed size u32, size u32, name length u16, extra length u16),
 *                    name, extra fields, data, and when flag bit 3 is set a data descriptor
 *                    ([sig 0x08074b50] crc32, compressed size, size: u32 each, or u64 sizes when
 *                    the local header carries a zip64 extra field);
 *   central entry  = 46 bytes (sig 0x02014b50, version made by, version needed, flags, method,
 *                    time, date, crc32, compressed size u32, size u32, name length, extra length,
 *                    comment length, disk start u16, internal attrs, external attrs u32, local
 *                    header offset u32), name, extra fields, comment; a field holding 0xFFFFFFFF
 *                    takes its value from the zip64 extra field (id 0x0001), which holds u64
 *                    values for exactly those fields, in the order size, compressed size, offset;
 *   zip64 end      = 56 bytes (sig 0x06064b50, record size u64 = 44, versions, disk u32, cd disk
 *                    u32, entries on disk u64, entries u64, cd size u64, cd offset u64);
 *   zip64 locator  = 20 bytes (sig 0x07064b50, disk u32, zip64 end offset u64, disks u32 = 1);
 *   end record     = 22 bytes (sig 0x06054b50, disk u16, cd disk u16, entries on disk u16,
 *                    entries u16, cd size u32, cd offset u32, comment length u16).
 *
 * torch pads each local header with an extra field 'FB' so that data starts on a 64-byte
 * boundary; that field is in the local header only, so the data offset is always computed from
 * the local header's own name and extra lengths, never from the central directory's.
 *
 * Beyond the rules archive.h lists, these are rejected too, each a place where readers differ:
 * a non-ASCII name without flag bit 11 (Python decodes it as cp437), C1 control characters and
 * empty path components in names, extra areas that are not a whole number of (id, length, data)
 * fields, a zip64 extra field longer than its 0xFFFFFFFF fields call for, a local header with one
 * 0xFFFFFFFF size whose readings differ (some readers take both sizes from the zip64 field, some
 * only the sentinel's), anything but the contiguous sequence central directory, zip64 end record
 * (44-byte body), locator, end record, a zip record signature inside the archive comment,
 * classic sentinels without zip64 records, central directory encryption (flag bit 13), and
 * deflate data that ends before or after its compressed size. Local and central sizes are
 * compared by the values they resolve to, so zip64 sizes in only one of the two headers are
 * accepted when equal (Python's zipfile writes them into the local header alone with
 * force_zip64). With a descriptor, the local CRC and sizes may also equal the real values, and
 * the sizes may be 0xFFFFFFFF beside a local zip64 field (Python's zipfile writes that when
 * streaming).
 *
 * What torch 2.6 checks (PTC_ERR_STRICTER marks every refusal it would not make): torch reads the
 * archive with miniz 3.0.2, built without CRC checks. When it opens the archive miniz finds the
 * last end-record signature (ignoring what follows it), follows a zip64 locator only to a zip64
 * end record that has its signature, and checks the counts, disks, sizes and extra fields it needs
 * in the central directory; torch then requires every name (up to a NUL) to lie under the prefix of
 * the first and to be valid UTF-8 (names become Python strings). Of the records it reads it checks
 * the local header's signature and whether the data lies in the file, nothing else; a deflate
 * stream that fails or runs long is not an error to it. Overlaps, gaps, descriptors, duplicate
 * names and the local copies of the central fields it never looks at.
 *
 * This file parses the container and answers lookups; zip_minizip.c holds the cross-check with
 * minizip and zip_data.c the reading of record bytes (zip_int.h lists what they share).
 *
 * Invariants of an open ptc__zip (the rules themselves are listed in archive.h):
 *   - entries[] is in central-directory order, names[] holds every name NUL-terminated, and
 *     by_name[] holds every entry sorted by its ASCII-case-folded record name, so a lookup is a
 *     binary search and no two entries compare equal there; by_hash[], when there is one, finds
 *     an exact record name in a few probes (the lookup of every storage's record);
 *   - every entry's [header_offset, end_offset) lies inside [0, cd_offset), and together these
 *     ranges tile it exactly;
 *   - every byte of table memory is charged to the budget given at open until close, and every
 *     temporary buffer sized by the file is charged while it lives.
 *
 * minizip and zlib allocate for themselves: zlib's inflate state goes through ptc__malloc (its
 * allocation hooks), minizip's small per-archive and per-record buffers through the C library,
 * because minizip 1.1 offers no allocation hooks. Those are fixed sizes, never sized by the file.
 */
#include "archive/zip_int.h"

#include <stdio.h>
#include <string.h>

/* ---- memory charged to the budget ------------------------------------------------------------ */

/* Allocates n bytes (n sized by the file) after charging them to the budget; NULL with *rc and
 * err set when the budget or the allocator refuses. */
void *ptc__zip_take(ptc__zip *z, uint64_t n, int *rc, ptc_error *err)
{
    *rc = ptc__budget_take(z->budget, n, err, "", -1);
    if (*rc < 0)
        return NULL;
    void *p = n <= SIZE_MAX ? ptc__malloc((size_t)n) : NULL;
    if (!p) {
        ptc__budget_give(z->budget, n);
        *rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory allocating %llu bytes",
                       (unsigned long long)n);
    }
    return p;
}

void ptc__zip_give(ptc__zip *z, void *p, uint64_t n)
{
    if (!p)
        return;
    ptc__free(p);
    ptc__budget_give(z->budget, n);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static int64_t off64(uint64_t off)
{
    return off <= INT64_MAX ? (int64_t)off : INT64_MAX;
}

/* ptc__err, or ptc__err_stricter when stricter says that torch 2.6 accepts what is refused. */
#define ERR_IF(stricter, ...)                                                                      \
    ((stricter) ? ptc__err_stricter(err, __VA_ARGS__) : ptc__err(err, __VA_ARGS__))

/* An error about one record: the member is its name after the prefix (the full name for the
 * directory entry "prefix/", whose record name is empty), escaped. rec_stricter marks a rule torch
 * 2.6 does not apply when stricter is true. */
static int vrec_err(ptc_error *err, bool stricter, int code, const ptc__zip_entry *e,
                    const char *fmt, va_list ap) PTC_PRINTF(5, 0);
static int vrec_err(ptc_error *err, bool stricter, int code, const ptc__zip_entry *e,
                    const char *fmt, va_list ap)
{
    char member[sizeof((ptc_error *)NULL)->member], msg[sizeof((ptc_error *)NULL)->message];
    const char *s = e->record[0] ? e->record : e->name;
    ptc__escape(member, sizeof member, s, strlen(s), true);
    vsnprintf(msg, sizeof msg, fmt, ap);
    return ERR_IF(stricter, code, member, -1, "%s", msg);
}

int ptc__zip_rec_err(ptc_error *err, int code, const ptc__zip_entry *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vrec_err(err, false, code, e, fmt, ap);
    va_end(ap);
    return code;
}

int ptc__zip_rec_stricter(ptc_error *err, bool stricter, int code, const ptc__zip_entry *e,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vrec_err(err, stricter, code, e, fmt, ap);
    va_end(ap);
    return code;
}

/* An error about a central entry whose name has not been accepted yet: the member is the raw
 * name, escaped (it may hold NUL or control bytes), with every non-ASCII byte as \xNN because the
 * name may hold C1 controls encoded as UTF-8. */
static int name_err(ptc_error *err, bool stricter, int code, const uint8_t *name, size_t n,
                    const char *fmt, ...) PTC_PRINTF(6, 7);
static int name_err(ptc_error *err, bool stricter, int code, const uint8_t *name, size_t n,
                    const char *fmt, ...)
{
    char member[sizeof((ptc_error *)NULL)->member], msg[sizeof((ptc_error *)NULL)->message];
    ptc__escape(member, sizeof member, name, n, false);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ERR_IF(stricter, code, member, -1, "%s", msg);
}

/* ---- what torch reads ------------------------------------------------------------------------ */

static unsigned char fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* Compares two names the way miniz looks them up: ASCII letters without regard to case. Equal
 * bytes fold equal, so only differing bytes are folded (names share long prefixes: "data/1234"). */
static int fold_cmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned char ra = (unsigned char)*a, rb = (unsigned char)*b;
        if (ra == rb) {
            if (ra == 0)
                return 0;
            continue;
        }
        unsigned char ca = fold(ra), cb = fold(rb);
        if (ca != cb)
            return (ca > cb) - (ca < cb);
    }
}

static bool fold_prefix(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++)
        if (fold((unsigned char)*s) != fold((unsigned char)*prefix))
            return false;
    return true;
}

/* Records whose bytes torch 2.6 interprets (a damaged one can make it fail in any way). */
bool ptc__zip_torch_parses(const ptc__zip_entry *e)
{
    return fold_cmp(e->record, "data.pkl") == 0 || fold_cmp(e->record, "version") == 0 ||
           fold_cmp(e->record, ".data/version") == 0 || fold_cmp(e->record, "byteorder") == 0;
}

/* Records torch 2.6 may read at all: those, the serialization id, and the storages (which of them
 * the pickle names is not known here). miniz refuses an unreadable one only when it is read. */
bool ptc__zip_torch_reads(const ptc__zip_entry *e)
{
    return ptc__zip_torch_parses(e) || fold_cmp(e->record, ".data/serialization_id") == 0 ||
           fold_prefix(e->record, "data/");
}

/* ---- reading --------------------------------------------------------------------------------- */

/* Makes [off, off+len) of the file available at *p: in place when the source is addressable,
 * otherwise read into buf, which holds at least len bytes. */
static int view(ptc__zip *z, uint64_t off, size_t len, uint8_t *buf, const uint8_t **p,
                ptc_error *err)
{
    if (z->map) {
        if (!ptc__range_ok(off, len, z->size))
            return ptc__err(err, PTC_EFORMAT, "", off64(off),
                            "truncated: %zu bytes at offset 0x%llx lie beyond the end of the "
                            "file (%llu bytes)",
                            len, (unsigned long long)off, (unsigned long long)z->size);
        *p = z->map + off;
        return 0;
    }
    int rc = ptc__source_read(z->src, off, buf, len, err);
    if (rc < 0)
        return rc;
    *p = buf;
    return 0;
}

/* Whether [off, off + a + b) lies inside the file. */
static bool in_file(const ptc__zip *z, uint64_t off, uint64_t a, uint64_t b)
{
    uint64_t end;
    return ptc__add_u64_ok(off, a, &end) && ptc__add_u64_ok(end, b, &end) && end <= z->size;
}

/* ---- end records ----------------------------------------------------------------------------- */

/* Finds the end record, follows the zip64 locator when there is one, and sets n, cd_offset and
 * cd_size after checking every count and offset against the other records. */
static int read_end(ptc__zip *z, ptc_error *err)
{
    if (z->size < END_LEN)
        return ptc__err(err, PTC_EFORMAT, "", 0,
                        "truncated: %llu bytes cannot hold a zip end-of-central-directory record",
                        (unsigned long long)z->size);

    /* The end record is at most MAX_COMMENT + END_LEN bytes from the end. */
    uint64_t win_len = z->size < MAX_COMMENT + END_LEN ? z->size : MAX_COMMENT + END_LEN;
    uint64_t win_off = z->size - win_len;
    uint8_t *owned = NULL;
    const uint8_t *win;
    int rc;
    if (!z->map && !(owned = ptc__zip_take(z, win_len, &rc, err)))
        return rc;
    if ((rc = view(z, win_off, (size_t)win_len, owned, &win, err)) < 0)
        goto done;

    /* Scan backwards: the last signature in the file must be the end record and its comment
     * must reach exactly to the end of the file. */
    size_t pos = (size_t)win_len - END_LEN;
    bool found = false;
    for (;;) {
        if (ptc__le32(win + pos) == SIG_END) {
            found = true;
            break;
        }
        if (pos == 0)
            break;
        pos--;
    }
    if (!found) {
        rc = ptc__err(err, PTC_EFORMAT, "", off64(win_off),
                      "no end-of-central-directory record in the last %llu bytes (not a zip "
                      "archive, or truncated)",
                      (unsigned long long)win_len);
        goto done;
    }
    const uint8_t *end = win + pos;
    uint64_t end_off = win_off + pos;
    uint64_t comment = ptc__le16(end + 20);
    uint64_t tail = z->size - end_off - END_LEN;
    /* miniz takes the last signature with room for a record after it, whatever follows. */
    if (comment != tail) {
        if (comment < tail)
            rc = ptc__err_stricter(err, PTC_EFORMAT, "", off64(end_off + END_LEN + comment),
                                   "%llu bytes follow the end of the archive",
                                   (unsigned long long)(tail - comment));
        else
            rc = ptc__err_stricter(err, PTC_EFORMAT, "", off64(end_off),
                                   "truncated: the archive comment of %llu bytes runs past the end "
                                   "of the file",
                                   (unsigned long long)comment);
        goto done;
    }
    /* A second end record whose comment also reaches the end of the file would let another
     * reader pick a different central directory; so would zip64 records inside the comment. */
    for (size_t k = 0; k < pos; k++) {
        if (ptc__le32(win + k) == SIG_END &&
            ptc__le16(win + k + 20) == (uint64_t)(win_len - k - END_LEN)) {
            rc = ptc__err_stricter(err, PTC_EFORMAT, "", off64(win_off + k),
                                   "a second end-of-central-directory record also ends the file");
            goto done;
        }
    }
    for (uint64_t k = 0; k + 4 <= comment; k++) {
        uint32_t sig = ptc__le32(end + END_LEN + k);
        if (sig == SIG_END64 || sig == SIG_LOCATOR64 || sig == SIG_CENTRAL) {
            rc = ptc__err_stricter(err, PTC_EFORMAT, "", off64(end_off + END_LEN + k),
                                   "the archive comment holds a zip record signature");
            goto done;
        }
    }

    uint16_t disk = ptc__le16(end + 4), cd_disk = ptc__le16(end + 6);
    uint16_t n_disk16 = ptc__le16(end + 8), n16 = ptc__le16(end + 10);
    uint32_t cd_size32 = ptc__le32(end + 12), cd_off32 = ptc__le32(end + 16);
    uint64_t n = n16, cd_size = cd_size32, cd_off = cd_off32, cd_end = end_off;
    uint8_t loc_buf[LOCATOR64_LEN], e64_buf[END64_LEN];
    const uint8_t *loc = NULL;
    bool zip64 = false;
    if (end_off >= LOCATOR64_LEN) {
        if ((rc = view(z, end_off - LOCATOR64_LEN, LOCATOR64_LEN, loc_buf, &loc, err)) < 0)
            goto done;
        zip64 = ptc__le32(loc) == SIG_LOCATOR64;
    }
    /* How miniz reads the same records: it follows a locator (when the locator and a zip64 end
     * record fit before the end record) wherever it points, refuses a pointer past the file, and
     * reads the zip64 record instead of the classic fields when it finds its signature there. */
    bool mz_refuses = false, mz_zip64 = false;
    if (zip64 && end_off >= LOCATOR64_LEN + END64_LEN) {
        uint64_t at = ptc__le64(loc + 8);
        const uint8_t *sig;
        mz_refuses = z->size < END64_LEN || at > z->size - END64_LEN;
        if (!mz_refuses && (rc = view(z, at, 4, e64_buf, &sig, err)) < 0)
            goto done;
        mz_zip64 = !mz_refuses && ptc__le32(sig) == SIG_END64;
    }
    if (zip64) {
        uint64_t loc_off = end_off - LOCATOR64_LEN;
        uint32_t e64_disk = ptc__le32(loc + 4), disks = ptc__le32(loc + 16);
        uint64_t e64_off = ptc__le64(loc + 8);
        if (e64_disk != 0 || disks != 1) {
            rc = ERR_IF(!mz_refuses && (disks == 1 || !mz_zip64), PTC_EFORMAT, "", off64(loc_off),
                        "zip64 locator names disk %u of %u disks", e64_disk, disks);
            goto done;
        }
        if (loc_off < END64_LEN || e64_off != loc_off - END64_LEN) {
            rc = ERR_IF(!mz_refuses, PTC_EFORMAT, "", off64(loc_off),
                        "zip64 locator points at 0x%llx, not at the zip64 end record right "
                        "before it",
                        (unsigned long long)e64_off);
            goto done;
        }
        const uint8_t *e64;
        if ((rc = view(z, e64_off, END64_LEN, e64_buf, &e64, err)) < 0)
            goto done;
        if (ptc__le32(e64) != SIG_END64 || ptc__le64(e64 + 4) != END64_RECORD_SIZE) {
            /* miniz refuses a record size below 44 only; without the signature it ignores the
             * locator. */
            rc = ERR_IF(!mz_zip64 || ptc__le64(e64 + 4) > END64_RECORD_SIZE, PTC_EFORMAT, "",
                        off64(e64_off),
                        "no zip64 end record (of %u bytes) where the locator points", END64_LEN);
            goto done;
        }
        uint32_t disk64 = ptc__le32(e64 + 16), cd_disk64 = ptc__le32(e64 + 20);
        uint64_t n_disk64 = ptc__le64(e64 + 24), n64 = ptc__le64(e64 + 32);
        uint64_t cd_size64 = ptc__le64(e64 + 40), cd_off64 = ptc__le64(e64 + 48);
        if (disk64 != 0 || cd_disk64 != 0) {
            rc = ERR_IF(disk64 == 1 && cd_disk64 == 1, PTC_EFORMAT, "", off64(e64_off),
                        "multi-disk zip64 archive (disk %u, central directory on disk %u)", disk64,
                        cd_disk64);
            goto done;
        }
        if (n_disk64 != n64) {
            rc = ptc__err(err, PTC_EFORMAT, "", off64(e64_off),
                          "zip64 end record counts %llu entries on this disk but %llu in total",
                          (unsigned long long)n_disk64, (unsigned long long)n64);
            goto done;
        }
        /* Each classic field is either the sentinel or the same value as the zip64 one (miniz
         * reads only the zip64 one). */
        if ((n16 != U16_SENTINEL && n16 != n64) ||
            (cd_size32 != U32_SENTINEL && cd_size32 != cd_size64) ||
            (cd_off32 != U32_SENTINEL && cd_off32 != cd_off64)) {
            rc = ptc__err_stricter(err, PTC_EFORMAT, "", off64(end_off),
                                   "end record (%u entries, directory of %u bytes at 0x%x) "
                                   "disagrees with the zip64 end record (%llu entries, %llu "
                                   "bytes at 0x%llx)",
                                   n16, cd_size32, cd_off32, (unsigned long long)n64,
                                   (unsigned long long)cd_size64, (unsigned long long)cd_off64);
            goto done;
        }
        n = n64;
        cd_size = cd_size64;
        cd_off = cd_off64;
        cd_end = e64_off;
    } else if (n16 == U16_SENTINEL || cd_size32 == U32_SENTINEL || cd_off32 == U32_SENTINEL) {
        rc = ptc__err(err, PTC_EFORMAT, "", off64(end_off),
                      "end record holds zip64 sentinels but there is no zip64 end record");
        goto done;
    }
    /* The classic disk fields, checked after the zip64 ones, which miniz reads instead when they
     * are there; without them it takes the only disk numbered 0 or 1. */
    if (disk != 0 || cd_disk != 0) {
        rc = ERR_IF(zip64 || (disk == 1 && cd_disk == 1), PTC_EFORMAT, "", off64(end_off),
                    "multi-disk archive (disk %u, central directory on disk %u)", disk, cd_disk);
        goto done;
    }
    if (n_disk16 != n16) {
        rc = ERR_IF(zip64, PTC_EFORMAT, "", off64(end_off),
                    "end record counts %u entries on this disk but %u in total", n_disk16, n16);
        goto done;
    }

    /* miniz needs the directory inside the file, big enough for the count, and both within
     * 32 bits; where it ends is no concern of it. */
    uint64_t cd_stop;
    bool cd_add_ok = ptc__add_u64_ok(cd_off, cd_size, &cd_stop);
    if (!cd_add_ok || cd_stop != cd_end) {
        bool mz_ok = cd_add_ok && cd_stop <= z->size && n <= cd_size / CENTRAL_LEN &&
                     cd_size <= UINT32_MAX && n <= UINT32_MAX;
        rc = ERR_IF(mz_ok, PTC_EFORMAT, "", off64(cd_end),
                    "central directory of %llu bytes at 0x%llx does not end where the end "
                    "records begin (0x%llx)",
                    (unsigned long long)cd_size, (unsigned long long)cd_off,
                    (unsigned long long)cd_end);
        goto done;
    }
    if (n == 0) {
        rc = ptc__err(err, PTC_EFORMAT, "", off64(end_off), "the archive holds no records");
        goto done;
    }
    /* A count the directory cannot hold is a broken file, not a large one: check it first. */
    if (n > cd_size / CENTRAL_LEN) {
        rc = ptc__err(err, PTC_EFORMAT, "", off64(cd_off),
                      "a central directory of %llu bytes cannot hold %llu entries",
                      (unsigned long long)cd_size, (unsigned long long)n);
        goto done;
    }
    if (n > z->limits.max_records || n > SIZE_MAX / sizeof(ptc__zip_entry)) {
        rc = ERR_IF(n <= UINT32_MAX, PTC_ELIMIT, "", off64(end_off),
                    "the archive holds %llu records, more than the limit of %llu",
                    (unsigned long long)n, (unsigned long long)z->limits.max_records);
        goto done;
    }
    z->n = (size_t)n;
    z->cd_offset = cd_off;
    z->cd_size = cd_size;
    z->comment_offset = end_off + END_LEN;
    z->comment_len = comment;
    rc = 0;
done:
    ptc__zip_give(z, owned, win_len);
    return rc;
}

/* ---- extra fields ---------------------------------------------------------------------------- */

typedef struct extra_fields {
    const uint8_t *zip64; /* payload of the zip64 field, NULL when absent */
    uint16_t zip64_len;
} extra_fields;

/* Splits an extra area into its (id, length, data) fields, which must tile it exactly: a field
 * cut short is a place where readers could disagree about what follows. Returns a reason, or
 * NULL when the area is well formed. */
static const char *parse_extra(const uint8_t *x, size_t n, extra_fields *out)
{
    out->zip64 = NULL;
    out->zip64_len = 0;
    while (n > 0) {
        if (n < 4)
            return "an extra field header is cut short";
        uint16_t id = ptc__le16(x), len = ptc__le16(x + 2);
        if (len > n - 4)
            return "an extra field runs past the end of the extra area";
        if (id == EXTRA_ZIP64) {
            if (out->zip64)
                return "two zip64 extra fields";
            out->zip64 = x + 4;
            out->zip64_len = len;
        }
        x += 4u + len;
        n -= 4u + len;
    }
    return NULL;
}

/* ---- names ----------------------------------------------------------------------------------- */

static int cmp_by_name(const ptc__zip_entry *a, const ptc__zip_entry *b)
{
    return fold_cmp(a->record, b->record);
}

static int cmp_by_offset(const ptc__zip_entry *a, const ptc__zip_entry *b)
{
    return (a->header_offset > b->header_offset) - (a->header_offset < b->header_offset);
}

typedef int (*entry_cmp)(const ptc__zip_entry *, const ptc__zip_entry *);

/* Sorts a[n] with a bottom-up merge sort through tmp[n]: O(n log n) in the worst case, whatever
 * an attacker chooses, and stable. The C library's qsort is avoided because it may allocate a
 * copy of the array behind the budget's back. */
static void sort_entries(const ptc__zip_entry **a, const ptc__zip_entry **tmp, size_t n,
                         entry_cmp cmp)
{
    const ptc__zip_entry **src = a, **dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n;
            size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = cmp(src[j], src[i]) < 0 ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        const ptc__zip_entry **t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}

/* Whether torch 2.6 takes the idx-th central name: miniz hands it out up to its first NUL,
 * torch requires "<prefix>/" in front (the prefix is the first name up to its first '/'), and
 * Python decodes it as strict UTF-8. Every other rule of check_name is ptc's own. */
static bool torch_takes_name(const ptc__zip *z, const uint8_t *s, size_t n, size_t idx)
{
    const uint8_t *nul = memchr(s, 0, n);
    size_t cn = nul ? (size_t)(nul - s) : n;
    if (!ptc__utf8_valid(s, cn))
        return false;
    if (idx == 0)
        return memchr(s, '/', cn) != NULL;
    return cn > z->prefix_len && memcmp(s, z->prefix, z->prefix_len) == 0 &&
           s[z->prefix_len] == '/';
}

/* Applies the name rules of archive.h to the idx-th central name; the first one also fixes the
 * prefix. at is the entry's file offset, for messages. */
static int check_name(ptc__zip *z, const uint8_t *s, size_t n, uint16_t flags, size_t idx,
                      uint64_t at, ptc_error *err)
{
    if (n == 0)
        return ptc__err(err, PTC_EFORMAT, "", off64(at),
                        "central directory entry %zu has an empty name", idx + 1);
    bool torch_ok = torch_takes_name(z, s, n, idx), ascii = true;
    for (size_t k = 0; k < n; k++) {
        uint8_t c = s[k];
        if (c == 0)
            return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: name holds a NUL byte", idx + 1,
                            (unsigned long long)at);
        if (c < 0x20 || c == 0x7F)
            return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: name holds control byte 0x%02x", idx + 1,
                            (unsigned long long)at, c);
        if (c == '\\' || c == ':')
            return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: name holds '%c' (a path separator or drive on "
                            "some systems)",
                            idx + 1, (unsigned long long)at, c);
        if (c >= 0x80)
            ascii = false;
    }
    if (!ascii) {
        /* Without bit 11, Python's zipfile decodes names as cp437 and miniz keeps raw bytes. */
        if (!(flags & FLAG_UTF8))
            return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: non-ASCII name without the UTF-8 flag (bit 11)",
                            idx + 1, (unsigned long long)at);
        if (!ptc__utf8_valid(s, n))
            return name_err(err, false, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: name is not valid UTF-8", idx + 1,
                            (unsigned long long)at);
        for (size_t k = 0; k + 1 < n; k++)
            if (s[k] == 0xC2 && s[k + 1] >= 0x80 && s[k + 1] <= 0x9F)
                return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                                "entry %zu at 0x%llx: name holds a C1 control character", idx + 1,
                                (unsigned long long)at);
    }
    if (s[0] == '/')
        return name_err(err, torch_ok, PTC_EFORMAT, s, n, "entry %zu at 0x%llx: absolute name",
                        idx + 1, (unsigned long long)at);
    size_t start = 0;
    for (size_t k = 0; k <= n; k++) {
        if (k < n && s[k] != '/')
            continue;
        size_t len = k - start;
        /* Only the last component may be empty, and only after a '/': a directory entry. */
        if (len == 0 && !(k == n && start > 0))
            return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: name has an empty path component", idx + 1,
                            (unsigned long long)at);
        if ((len == 1 && s[start] == '.') || (len == 2 && s[start] == '.' && s[start + 1] == '.'))
            return name_err(err, torch_ok, PTC_EFORMAT, s, n,
                            "entry %zu at 0x%llx: name has a '.' or '..' component", idx + 1,
                            (unsigned long long)at);
        start = k + 1;
    }

    if (idx == 0) {
        /* torch takes the prefix from the first central entry, up to its first '/'. */
        const uint8_t *slash = memchr(s, '/', n);
        if (!slash)
            return name_err(err, false, PTC_EFORMAT, s, n,
                            "the first entry is not in a subdirectory: records must be named "
                            "<prefix>/<record>");
        size_t plen = (size_t)(slash - s);
        int rc;
        if (!(z->prefix = ptc__zip_take(z, plen + 1, &rc, err)))
            return rc;
        memcpy(z->prefix, s, plen);
        z->prefix[plen] = '\0';
        z->prefix_len = plen;
        return 0;
    }
    if (n <= z->prefix_len || memcmp(s, z->prefix, z->prefix_len) != 0 || s[z->prefix_len] != '/') {
        char shown[96];
        ptc__escape(shown, sizeof shown, z->prefix, z->prefix_len, true);
        return name_err(err, false, PTC_EFORMAT, s, n,
                        "entry %zu at 0x%llx: name lies outside the archive prefix \"%s/\" "
                        "(taken from the first entry)",
                        idx + 1, (unsigned long long)at, shown);
    }
    return 0;
}

/* ---- central directory ----------------------------------------------------------------------- */

/* Parses the n central entries of cd (cd_size bytes) into entries[] and names[], and aux[]. */
static int read_central(ptc__zip *z, const uint8_t *cd, central_aux *aux, ptc_error *err)
{
    uint64_t p = 0, used = 0;
    for (size_t i = 0; i < z->n; i++) {
        uint64_t at = z->cd_offset + p;
        if (z->cd_size - p < CENTRAL_LEN)
            return ptc__err(err, PTC_EFORMAT, "", off64(at),
                            "the central directory ends inside entry %zu of the %zu the end "
                            "record counts",
                            i + 1, z->n);
        const uint8_t *h = cd + p;
        if (ptc__le32(h) != SIG_CENTRAL)
            return ptc__err(err, PTC_EFORMAT, "", off64(at),
                            "no central directory header for entry %zu of %zu (signature "
                            "0x%08x)",
                            i + 1, z->n, ptc__le32(h));
        uint16_t flags = ptc__le16(h + 8), method = ptc__le16(h + 10);
        uint32_t crc = ptc__le32(h + 16), csize32 = ptc__le32(h + 20), usize32 = ptc__le32(h + 24);
        uint16_t nlen = ptc__le16(h + 28), xlen = ptc__le16(h + 30), clen = ptc__le16(h + 32);
        uint16_t disk = ptc__le16(h + 34);
        uint32_t hoff32 = ptc__le32(h + 42);
        uint64_t len = (uint64_t)CENTRAL_LEN + nlen + xlen + clen;
        if (len > z->cd_size - p)
            return ptc__err(err, PTC_EFORMAT, "", off64(at),
                            "central directory entry %zu runs past the end of the directory",
                            i + 1);
        /* The entries still to come need CENTRAL_LEN bytes each; this also keeps the names
         * inside names[], which was sized on that assumption. */
        if ((uint64_t)(z->n - i - 1) > (z->cd_size - p - len) / CENTRAL_LEN)
            return ptc__err(err, PTC_EFORMAT, "", off64(at),
                            "after entry %zu the central directory has no room for the %zu "
                            "entries the end record counts",
                            i + 1, z->n);
        const uint8_t *name = h + CENTRAL_LEN;
        int rc = check_name(z, name, nlen, flags, i, at, err);
        if (rc < 0)
            return rc;

        ptc__zip_entry *e = &z->entries[i];
        char *dst = z->names + used;
        memcpy(dst, name, nlen);
        dst[nlen] = '\0';
        used += (uint64_t)nlen + 1;
        e->name = dst;
        e->record = dst + z->prefix_len + 1;
        e->method = method;
        e->flags = flags;
        e->crc32 = crc;
        e->central_offset = at;
        e->name_len = nlen;
        e->central_extra_len = xlen;
        e->comment_len = clen;
        aux[i].pos = at;

        /* miniz takes disk 1 for the only disk too. */
        if (disk != 0)
            return ptc__zip_rec_stricter(err, disk == 1, PTC_EFORMAT, e,
                                         "central entry at 0x%llx starts on disk %u",
                                         (unsigned long long)at, disk);
        /* The zip64 field holds a u64 for each 32-bit field that is 0xFFFFFFFF, in this order,
         * and nothing else: extra values would be read by some readers and ignored by others.
         * miniz reads the extra fields only when there is such a field, and only up to the first
         * zip64 one, and reads no more of that than it needs. */
        unsigned need =
            (usize32 == U32_SENTINEL) + (csize32 == U32_SENTINEL) + (hoff32 == U32_SENTINEL);
        extra_fields x;
        const char *why = parse_extra(name + nlen, xlen, &x);
        if (why)
            return ptc__zip_rec_stricter(err, need == 0 || x.zip64, PTC_EFORMAT, e,
                                         "central entry at 0x%llx: %s", (unsigned long long)at,
                                         why);
        if (need > 0 && !x.zip64)
            return ptc__zip_rec_err(
                err, PTC_EFORMAT, e,
                "central entry at 0x%llx has a 0xFFFFFFFF size or offset but no "
                "zip64 extra field",
                (unsigned long long)at);
        if (x.zip64 && x.zip64_len != 8u * need)
            return ptc__zip_rec_stricter(
                err, x.zip64_len > 8u * need, PTC_EFORMAT, e,
                "central entry at 0x%llx: zip64 extra field of %u bytes, but its "
                "0xFFFFFFFF fields call for %u",
                (unsigned long long)at, x.zip64_len, 8u * need);
        const uint8_t *q = x.zip64;
        e->size = usize32;
        e->comp_size = csize32;
        e->header_offset = hoff32;
        if (usize32 == U32_SENTINEL) {
            e->size = ptc__le64(q);
            q += 8;
        }
        if (csize32 == U32_SENTINEL) {
            e->comp_size = ptc__le64(q);
            q += 8;
        }
        if (hoff32 == U32_SENTINEL)
            e->header_offset = ptc__le64(q);
        aux[i].sentinels = (uint8_t)((usize32 == U32_SENTINEL ? SENT_SIZE : 0) |
                                     (csize32 == U32_SENTINEL ? SENT_COMP_SIZE : 0) |
                                     (hoff32 == U32_SENTINEL ? SENT_OFFSET : 0));

        /* miniz refuses an encrypted central directory when it opens the archive, and an
         * encrypted, patch or otherwise compressed record when torch reads it. */
        bool unread = !ptc__zip_torch_reads(e);
        if (flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION | FLAG_CD_ENCRYPTED))
            return ptc__zip_rec_stricter(err, unread && !(flags & FLAG_CD_ENCRYPTED), PTC_EFORMAT,
                                         e, "encrypted record (flags 0x%04x)", flags);
        if (flags & FLAG_PATCH)
            return ptc__zip_rec_stricter(err, unread, PTC_EFORMAT, e,
                                         "patch data record (flags 0x%04x)", flags);
        if (method != METHOD_STORED && method != METHOD_DEFLATED)
            return ptc__zip_rec_stricter(
                err, unread, PTC_EFORMAT, e,
                "compression method %u is not supported (only 0 stored and 8 "
                "deflated)",
                method);
        if (method == METHOD_STORED && e->comp_size != e->size)
            return ptc__zip_rec_err(err, PTC_EFORMAT, e,
                                    "stored record with %llu bytes in the file but a size of %llu",
                                    (unsigned long long)e->comp_size, (unsigned long long)e->size);
        /* Limits are ptc's own; miniz refuses only a size without compressed bytes. */
        bool mz_sizes_ok = e->size == 0 || e->comp_size != 0;
        if (method == METHOD_DEFLATED) {
            uint64_t cap;
            if (e->size > z->limits.max_inflated_bytes)
                return ptc__zip_rec_stricter(err, mz_sizes_ok, PTC_ELIMIT, e,
                                             "inflates to %llu bytes, more than the limit of %llu",
                                             (unsigned long long)e->size,
                                             (unsigned long long)z->limits.max_inflated_bytes);
            if (ptc__mul_u64_ok(e->comp_size, z->limits.max_inflate_ratio, &cap) && e->size > cap)
                return ptc__zip_rec_stricter(
                    err, mz_sizes_ok, PTC_ELIMIT, e,
                    "inflates %llu bytes to %llu, beyond the ratio limit of %u",
                    (unsigned long long)e->comp_size, (unsigned long long)e->size,
                    z->limits.max_inflate_ratio);
        }
        /* miniz reads nothing of a directory entry. */
        if (nlen > 0 && name[nlen - 1] == '/' && (e->size != 0 || e->comp_size != 0))
            return ptc__zip_rec_stricter(err, mz_sizes_ok, PTC_EFORMAT, e,
                                         "directory entry holds %llu bytes",
                                         (unsigned long long)e->comp_size);
        /* miniz only needs the local header and the data inside the file. */
        if (e->header_offset >= z->cd_offset || e->comp_size > z->cd_offset)
            return ptc__zip_rec_stricter(
                err, in_file(z, e->header_offset, LOCAL_LEN, e->comp_size), PTC_EFORMAT, e,
                "local header at 0x%llx with %llu bytes of data does not lie "
                "before the central directory at 0x%llx",
                (unsigned long long)e->header_offset, (unsigned long long)e->comp_size,
                (unsigned long long)z->cd_offset);
        p += len;
    }
    if (p != z->cd_size) /* miniz reads the entries the end record counts, and no further */
        return ptc__err_stricter(err, PTC_EFORMAT, "", off64(z->cd_offset + p),
                                 "%llu bytes follow the %zu central directory entries the end "
                                 "record counts",
                                 (unsigned long long)(z->cd_size - p), z->n);
    return 0;
}

/* Sorts the name index and rejects names that are equal, or equal but for ASCII case (miniz keeps
 * them all and finds one of them, torch does not ask which). */
static int index_names(ptc__zip *z, ptc_error *err)
{
    uint64_t tmp_len = (uint64_t)z->n * sizeof *z->by_name;
    int rc;
    const ptc__zip_entry **tmp = ptc__zip_take(z, tmp_len, &rc, err);
    if (!tmp)
        return rc;
    for (size_t i = 0; i < z->n; i++)
        z->by_name[i] = &z->entries[i];
    sort_entries(z->by_name, tmp, z->n, cmp_by_name);
    ptc__zip_give(z, tmp, tmp_len);
    for (size_t i = 1; i < z->n; i++) {
        const ptc__zip_entry *a = z->by_name[i - 1], *b = z->by_name[i];
        if (fold_cmp(a->record, b->record) != 0)
            continue;
        if (strcmp(a->name, b->name) == 0)
            return ptc__zip_rec_stricter(err, true, PTC_EFORMAT, b,
                                         "the archive holds this name twice");
        char other[96];
        ptc__escape(other, sizeof other, a->record, strlen(a->record), true);
        return ptc__zip_rec_stricter(err, true, PTC_EFORMAT, b,
                                     "name differs only in letter case from \"%s\"", other);
    }
    return 0;
}

/* The exact-name hash of the lookups (FNV-1a). Names are the file's, so a crafted set can collide:
 * a probe longer than HASH_MAX_PROBE gives the table up and lookups fall back to by_name's
 * binary search, which no choice of names slows down. */
#define HASH_MAX_PROBE 64

static size_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return (size_t)(h ^ (h >> 29));
}

/* Builds by_hash; when the budget or the allocator refuses, or the names collide too much, there
 * is none, and lookups search by_name (so this never fails the open). */
static void index_hash(ptc__zip *z)
{
    size_t cap = 16;
    while (cap < 2 * z->n)
        cap *= 2;
    if (z->n > UINT32_MAX - 1 ||
        ptc__budget_take(z->budget, (uint64_t)cap * sizeof *z->by_hash, NULL, "", -1) < 0)
        return;
    uint32_t *t = ptc__calloc(cap, sizeof *t);
    if (!t) {
        ptc__budget_give(z->budget, (uint64_t)cap * sizeof *t);
        return;
    }
    for (size_t i = 0; i < z->n; i++) {
        size_t h = name_hash(z->entries[i].record) & (cap - 1), probe = 0;
        while (t[h] && ++probe <= HASH_MAX_PROBE)
            h = (h + 1) & (cap - 1);
        if (probe > HASH_MAX_PROBE) {
            ptc__free(t);
            ptc__budget_give(z->budget, (uint64_t)cap * sizeof *t);
            return;
        }
        t[h] = (uint32_t)(i + 1);
    }
    z->by_hash = t;
    z->hash_cap = cap;
}

/* ---- local records --------------------------------------------------------------------------- */

/* One 32-bit local field of a record with a data descriptor: zero, the real value, or the zip64
 * sentinel when the local header has a zip64 field. */
static bool deferred_ok(uint32_t local, uint64_t value, bool local_zip64)
{
    return local == 0 || local == value || (local == U32_SENTINEL && local_zip64);
}

/* Checks the local header of e against its central entry (whose 32-bit fields held the
 * sentinels in sent), finds the data and the descriptor, and sets data_offset and end_offset.
 * scratch holds LOCAL_MAX bytes (callback sources only). Of all this, torch (miniz) checks only
 * the signature and that the data lies in the file, and only for the records it reads. */
static int read_local(ptc__zip *z, ptc__zip_entry *e, unsigned sent, uint8_t *scratch,
                      ptc_error *err)
{
    uint64_t at = e->header_offset;
    const uint8_t *h;
    bool unread = !ptc__zip_torch_reads(e);
    if (z->cd_offset < LOCAL_LEN || at > z->cd_offset - LOCAL_LEN)
        return ptc__zip_rec_stricter(err, unread, PTC_EFORMAT, e,
                                     "local header at 0x%llx runs into the central directory",
                                     (unsigned long long)at);
    int rc = view(z, at, LOCAL_LEN, scratch, &h, err);
    if (rc < 0)
        return rc;
    if (ptc__le32(h) != SIG_LOCAL)
        return ptc__zip_rec_stricter(err, unread, PTC_EFORMAT, e,
                                     "no local header at 0x%llx (signature 0x%08x)",
                                     (unsigned long long)at, ptc__le32(h));
    uint16_t flags = ptc__le16(h + 6), method = ptc__le16(h + 8);
    uint32_t crc = ptc__le32(h + 14), csize = ptc__le32(h + 18), usize = ptc__le32(h + 22);
    uint16_t nlen = ptc__le16(h + 26), xlen = ptc__le16(h + 28);
    if (flags != e->flags)
        return ptc__zip_rec_stricter(
            err, true, PTC_EFORMAT, e,
            "local header flags 0x%04x differ from the central directory's "
            "0x%04x",
            flags, e->flags);
    if (method != e->method)
        return ptc__zip_rec_stricter(
            err, true, PTC_EFORMAT, e,
            "local header method %u differs from the central directory's %u", method, e->method);
    uint64_t data;
    if (!ptc__add_u64_ok(at, (uint64_t)LOCAL_LEN + nlen + xlen, &data) || data > z->cd_offset)
        return ptc__zip_rec_stricter(
            err, unread || in_file(z, at, LOCAL_LEN + nlen + xlen, e->comp_size), PTC_EFORMAT, e,
            "local header at 0x%llx runs into the central directory", (unsigned long long)at);
    const uint8_t *var;
    uint8_t *var_buf = scratch ? scratch + LOCAL_LEN : NULL;
    if ((rc = view(z, at + LOCAL_LEN, (size_t)nlen + xlen, var_buf, &var, err)) < 0)
        return rc;
    size_t central_nlen = strlen(e->name);
    if (nlen != central_nlen || memcmp(var, e->name, nlen) != 0) {
        /* The local name passed no rule, so it is shown with every non-ASCII byte escaped. */
        char shown[96];
        ptc__escape(shown, sizeof shown, var, nlen, false);
        return ptc__zip_rec_stricter(
            err, true, PTC_EFORMAT, e,
            "local header at 0x%llx names \"%s\", the central directory another "
            "name",
            (unsigned long long)at, shown);
    }
    extra_fields x;
    const char *why = parse_extra(var + nlen, xlen, &x);
    if (why)
        return ptc__zip_rec_stricter(err, true, PTC_EFORMAT, e, "local header at 0x%llx: %s",
                                     (unsigned long long)at, why);
    bool local_zip64 = x.zip64 != NULL;
    e->local_extra_len = xlen;

    uint64_t data_end;
    if (!ptc__add_u64_ok(data, e->comp_size, &data_end) || data_end > z->cd_offset)
        return ptc__zip_rec_stricter(err, unread || in_file(z, data, e->comp_size, 0), PTC_EFORMAT,
                                     e,
                                     "%llu bytes of data at 0x%llx run into the central directory",
                                     (unsigned long long)e->comp_size, (unsigned long long)data);
    e->data_offset = data;

    if (!(flags & FLAG_DESCRIPTOR)) {
        /* Sizes in the local header, compared with the central ones by value: whether either
         * header spells them as zip64 changes no reading (Python's zipfile writes zip64 sizes
         * into the local header alone for members of unknown size). A 0xFFFFFFFF field takes
         * its value from the local zip64 field, which holds both sizes, size first: readers
         * that follow the format take both from there (lu, lc), others take only the sentinel
         * fields from it, in order (ku, kc). With one sentinel these readings can differ, and
         * each must give the central values. */
        bool lz_u = usize == U32_SENTINEL, lz_c = csize == U32_SENTINEL;
        uint64_t lu = usize, lc = csize, ku = usize, kc = csize;
        if (lz_u || lz_c) {
            if (!local_zip64 || x.zip64_len < 16)
                return ptc__zip_rec_stricter(
                    err, true, PTC_EFORMAT, e,
                    "local header at 0x%llx has a 0xFFFFFFFF size but no zip64 "
                    "sizes",
                    (unsigned long long)at);
            lu = ptc__le64(x.zip64);
            lc = ptc__le64(x.zip64 + 8);
            ku = lz_u ? lu : usize;
            kc = !lz_c ? csize : lz_u ? lc : lu;
        }
        bool cz = (sent & (SENT_SIZE | SENT_COMP_SIZE)) != 0;
        if (crc != e->crc32 || lu != e->size || lc != e->comp_size)
            return ptc__zip_rec_stricter(
                err, true, PTC_EFORMAT, e,
                "local header at 0x%llx (crc 0x%08x, %llu/%llu bytes%s) disagrees "
                "with the central directory (crc 0x%08x, %llu/%llu bytes%s)",
                (unsigned long long)at, crc, (unsigned long long)lc, (unsigned long long)lu,
                lz_u || lz_c ? " from its zip64 field" : "", e->crc32,
                (unsigned long long)e->comp_size, (unsigned long long)e->size,
                cz ? " with zip64 sizes" : "");
        if (ku != lu || kc != lc)
            return ptc__zip_rec_stricter(
                err, true, PTC_EFORMAT, e,
                "local header at 0x%llx reads as %llu/%llu bytes or as %llu/%llu: "
                "one size is 0xFFFFFFFF, the other not, and readers take the "
                "zip64 field differently",
                (unsigned long long)at, (unsigned long long)lc, (unsigned long long)lu,
                (unsigned long long)kc, (unsigned long long)ku);
        e->end_offset = data_end;
        return 0;
    }

    /* With a descriptor the local zip64 field's values are not compared: torch writes 0 for the
     * compressed size there (it is written before the data), and every reader takes the sizes
     * from the descriptor or the central directory. Its presence only widens the descriptor. */
    if (!deferred_ok(crc, e->crc32, false) || !deferred_ok(csize, e->comp_size, local_zip64) ||
        !deferred_ok(usize, e->size, local_zip64))
        return ptc__zip_rec_stricter(
            err, true, PTC_EFORMAT, e,
            "local header at 0x%llx (crc 0x%08x, %u/%u bytes, with a data "
            "descriptor) disagrees with the central directory (crc 0x%08x, "
            "%llu/%llu bytes)",
            (unsigned long long)at, crc, csize, usize, e->crc32, (unsigned long long)e->comp_size,
            (unsigned long long)e->size);
    /* The descriptor: crc32 and both sizes, u64 sizes when the local header has a zip64 field,
     * optionally preceded by its signature. */
    size_t body = local_zip64 ? 20u : 12u;
    uint64_t room = z->cd_offset - data_end;
    uint8_t dbuf[28];
    const uint8_t *d;
    size_t dlen = room < 4u + body ? (size_t)room : 4u + body;
    if ((rc = view(z, data_end, dlen, dbuf, &d, err)) < 0)
        return rc;
    for (int with_sig = 1; with_sig >= 0; with_sig--) {
        size_t skip = with_sig ? 4u : 0u;
        if (dlen < skip + body || (with_sig && ptc__le32(d) != SIG_DESCRIPTOR))
            continue;
        const uint8_t *b = d + skip;
        uint64_t dc = local_zip64 ? ptc__le64(b + 4) : ptc__le32(b + 4);
        uint64_t du = local_zip64 ? ptc__le64(b + 12) : ptc__le32(b + 8);
        if (ptc__le32(b) == e->crc32 && dc == e->comp_size && du == e->size) {
            e->end_offset = data_end + skip + body;
            return 0;
        }
    }
    return ptc__zip_rec_stricter(
        err, true, PTC_EFORMAT, e,
        "no data descriptor at 0x%llx that matches the central directory (crc "
        "0x%08x, %llu/%llu bytes)",
        (unsigned long long)data_end, e->crc32, (unsigned long long)e->comp_size,
        (unsigned long long)e->size);
}

/* Reads every local header in file order and checks that the records tile [0, cd_offset).
 * miniz cares about neither overlaps nor gaps. */
static int read_locals(ptc__zip *z, const central_aux *aux, ptc_error *err)
{
    const ptc__zip_entry **order, **tmp = NULL;
    uint8_t *scratch = NULL;
    uint64_t order_len = (uint64_t)z->n * sizeof *order;
    int rc;
    if (!(order = ptc__zip_take(z, order_len, &rc, err)))
        return rc;
    if (!(tmp = ptc__zip_take(z, order_len, &rc, err)) ||
        (!z->map && !(scratch = ptc__zip_take(z, LOCAL_MAX, &rc, err))))
        goto done;
    for (size_t i = 0; i < z->n; i++)
        order[i] = &z->entries[i];
    sort_entries(order, tmp, z->n, cmp_by_offset);

    uint64_t expect = 0;
    for (size_t i = 0; i < z->n; i++) {
        ptc__zip_entry *e = &z->entries[order[i] - z->entries];
        if (e->header_offset < expect) {
            rc = ptc__zip_rec_stricter(
                err, true, PTC_EFORMAT, e,
                "local record at 0x%llx overlaps the record before it, which ends "
                "at 0x%llx",
                (unsigned long long)e->header_offset, (unsigned long long)expect);
            goto done;
        }
        if (e->header_offset > expect) {
            rc = ptc__zip_rec_stricter(
                err, true, PTC_EFORMAT, e,
                "%llu unaccounted bytes at 0x%llx before this record's local "
                "header",
                (unsigned long long)(e->header_offset - expect), (unsigned long long)expect);
            goto done;
        }
        if ((rc = read_local(z, e, aux[e - z->entries].sentinels, scratch, err)) < 0)
            goto done;
        expect = e->end_offset;
    }
    if (expect != z->cd_offset) {
        rc = ptc__err_stricter(err, PTC_EFORMAT, "", off64(expect),
                               "%llu unaccounted bytes between the last record and the central "
                               "directory",
                               (unsigned long long)(z->cd_offset - expect));
        goto done;
    }
    rc = 0;
done:
    ptc__zip_give(z, scratch, LOCAL_MAX);
    ptc__zip_give(z, tmp, order_len);
    ptc__zip_give(z, order, order_len);
    return rc;
}

/* ---- public ---------------------------------------------------------------------------------- */

int ptc__zip_open(ptc__zip **out, ptc__source *src, const ptc_limits *limits, ptc__budget *budget,
                  unsigned flags, ptc_error *err)
{
    if (!out || !src || !limits)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__zip_open: NULL argument");
    *out = NULL;
    ptc__zip *z = ptc__calloc(1, sizeof *z);
    if (!z)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory opening the archive");
    z->src = src;
    z->map = ptc__source_map(src);
    z->size = ptc__source_size(src);
    z->budget = budget;
    z->limits = *limits;
    z->keep_pickle = (flags & PTC__ZIP_KEEP_PICKLE) != 0;

    uint8_t *cd_owned = NULL;
    central_aux *aux = NULL;
    uint64_t aux_len = 0;
    const uint8_t *cd;
    int rc = read_end(z, err);
    if (rc < 0)
        goto fail;

    /* Tables, sized by the entry count the end records declare (already checked against the
     * central directory's size). Each entry is at least CENTRAL_LEN bytes there and contributes
     * its name plus a NUL here, so names fit in cd_size - (CENTRAL_LEN - 1) * n bytes. */
    z->names_len = z->cd_size - (uint64_t)(CENTRAL_LEN - 1) * z->n;
    aux_len = (uint64_t)z->n * sizeof *aux;
    if (!(z->entries = ptc__zip_take(z, (uint64_t)z->n * sizeof *z->entries, &rc, err)) ||
        !(z->names = ptc__zip_take(z, z->names_len, &rc, err)) ||
        !(z->by_name = ptc__zip_take(z, (uint64_t)z->n * sizeof *z->by_name, &rc, err)) ||
        !(aux = ptc__zip_take(z, aux_len, &rc, err)))
        goto fail;
    memset(z->entries, 0, z->n * sizeof *z->entries);
    if (!z->map && !(cd_owned = ptc__zip_take(z, z->cd_size, &rc, err)))
        goto fail;
    if ((rc = view(z, z->cd_offset, (size_t)z->cd_size, cd_owned, &cd, err)) < 0)
        goto fail;
    if ((rc = read_central(z, cd, aux, err)) < 0)
        goto fail;
    ptc__zip_give(z, cd_owned, z->cd_size);
    cd_owned = NULL;
    if ((rc = index_names(z, err)) < 0 || (rc = read_locals(z, aux, err)) < 0 ||
        (rc = ptc__zip_cross_check(z, aux, err)) < 0)
        goto fail;
    ptc__zip_give(z, aux, aux_len);
    aux = NULL;
    index_hash(z);
    if (flags & PTC_OPEN_VERIFY_CRC) {
        for (size_t i = 0; i < z->n; i++)
            if ((rc = ptc__zip_check_crc(z, &z->entries[i], err)) < 0)
                goto fail;
    }
    *out = z;
    return 0;
fail:
    ptc__zip_give(z, cd_owned, z->cd_size);
    ptc__zip_give(z, aux, aux_len);
    ptc__zip_close(z);
    return rc;
}

void ptc__zip_close(ptc__zip *z)
{
    if (!z)
        return;
    ptc__zip_give(z, z->entries, (uint64_t)z->n * sizeof *z->entries);
    ptc__zip_give(z, z->names, z->names_len);
    ptc__zip_give(z, (void *)z->by_name, (uint64_t)z->n * sizeof *z->by_name);
    ptc__zip_give(z, z->by_hash, (uint64_t)z->hash_cap * sizeof *z->by_hash);
    ptc__zip_give(z, z->prefix, (uint64_t)z->prefix_len + 1);
    ptc__free(z->kept); /* charged only while a reader held it (ptc__zip_read) */
    ptc__free(z);
}

const char *ptc__zip_prefix(const ptc__zip *z)
{
    return z ? z->prefix : NULL;
}

size_t ptc__zip_count(const ptc__zip *z)
{
    return z ? z->n : 0;
}

void ptc__zip_comment(const ptc__zip *z, uint64_t *offset, uint64_t *len)
{
    *offset = z ? z->comment_offset : 0;
    *len = z ? z->comment_len : 0;
}

const ptc__zip_entry *ptc__zip_entry_at(const ptc__zip *z, size_t i)
{
    return z && i < z->n ? &z->entries[i] : NULL;
}

const ptc__zip_entry *ptc__zip_find(const ptc__zip *z, const char *record)
{
    if (!z || !record)
        return NULL;
    if (z->by_hash) {
        /* Entries are unique under case folding, hence unique exactly: the match is the one. */
        size_t h = name_hash(record) & (z->hash_cap - 1);
        for (size_t probe = 0; z->by_hash[h] && probe <= HASH_MAX_PROBE; probe++) {
            const ptc__zip_entry *e = &z->entries[z->by_hash[h] - 1];
            if (strcmp(record, e->record) == 0)
                return e;
            h = (h + 1) & (z->hash_cap - 1);
        }
        /* Every entry lies within HASH_MAX_PROBE slots of its own: one not met is not there. */
        return NULL;
    }
    /* by_name has no two entries equal under case folding, so at most one candidate exists. */
    size_t lo = 0, hi = z->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = fold_cmp(record, z->by_name[mid]->record);
        if (c == 0)
            return strcmp(record, z->by_name[mid]->record) == 0 ? z->by_name[mid] : NULL;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}
