/*
 * zip_write.c - writes the zip container of a checkpoint byte for byte as torch 2.6 does.
 *
 * torch 2.6 writes through miniz 3.0.2 in zip64 mode (MZ_ZIP_FLAG_WRITE_ZIP64), storing every
 * record and padding each local header so that the record's data starts on a 64-byte boundary
 * (docs/internals/zip.md). Matching it exactly, rather than writing any
 * valid zip, is what lets a rewritten checkpoint compare equal to torch's own file, and lets tools
 * that rely on torch's layout (mmap of aligned storages, getRecordOffset) treat our files the same.
 *
 * On-disk format written (all integers little-endian):
 *
 *   per record, in the order added:
 *     local header   50 4B 03 04, version needed u16 = 0, flags u16 = 0x0808 (0x0800 when the
 *                    record is empty), method u16 = 0, time u16 = 0, date u16 = 0, crc u32 = 0,
 *                    compressed size u32 = 0, size u32 = 0, name length u16, extra length u16
 *     name           "<prefix>/<record>", no NUL
 *     [zip64 extra]  only when size >= 0xFFFFFFFF or header offset >= 0xFFFFFFFF:
 *                    01 00, length u16, then [size u64, compressed size u64 = 0 (miniz writes it
 *                    before the data is known)] when the size needs it, [header offset u64] when
 *                    the offset needs it
 *     FB field       46 42, P u16, P bytes 'Z', where P = (64 - start % 64) % 64 and start is the
 *                    offset of the first byte after the field if P were 0 (torch's getPadding)
 *     data           size bytes, starting on a multiple of 64
 *     [descriptor]   only when size > 0: 50 4B 07 08, crc u32, compressed size, size: u32 each,
 *                    or u64 each when this local header has a zip64 extra
 *   central directory, one entry per record, in the same order:
 *                    50 4B 01 02, version made by u16 = 0, version needed u16 = 0, flags (as in
 *                    the local header), method 0, time 0, date 0, crc u32, compressed size u32,
 *                    size u32 (both 0xFFFFFFFF when size >= 0xFFFFFFFF), name length, extra
 *                    length, comment length 0, disk 0, internal attrs 0, external attrs u32 0,
 *                    header offset u32 (0xFFFFFFFF when >= 0xFFFFFFFF), name, and a zip64 extra
 *                    holding size u64, compressed size u64, header offset u64, each only when its
 *                    32-bit field holds 0xFFFFFFFF
 *   zip64 end      50 4B 06 06, record size u64 = 44, made by u16 = 0x031E, needed u16 = 0x002D,
 *                    disk u32 0, cd disk u32 0, entries on disk u64, entries u64, cd size u64,
 *                    cd offset u64 (always written: miniz in zip64 mode always does)
 *   zip64 locator  50 4B 06 07, disk u32 0, zip64 end offset u64, disks u32 = 1
 *   end record     50 4B 05 06, disk u16 0, cd disk u16 0, entries on disk u16, entries u16
 *                    (both capped at 0xFFFF), cd size u32, cd offset u32 (capped at 0xFFFFFFFF),
 *                    comment length u16 0
 *
 * Invariants:
 *   - ptc__zipw_add is ptc__zipw_begin + ptc__zipw_write + ptc__zipw_end, so whole and streamed
 *     records are the same bytes by construction;
 *   - recs[0, nrecs) are complete records; while a record is open, recs[nrecs] holds its header
 *     fields and its name is already in names;
 *   - cd_size is the size of the central directory of the complete records, kept below
 *     0xFFFFFFFF (miniz's limit too), checked when a record begins;
 *   - after any failure the writer is poisoned: every later call fails, and finish removes the
 *     temporary file, so a half-written record can never become part of a committed file. Only
 *     ptc__zipw_abort or ptc__zipw_finish (which then fails) remain useful.
 *
 * Names are checked only for what the container itself needs (non-empty record, a prefix without
 * '/', a name that fits 16 bits); uniqueness and torch's record order are the caller's job.
 */
#include "archive/archive.h"

#include <string.h>
#include <zlib.h>

#define ZIPW_LOCAL_SIG   0x04034b50u
#define ZIPW_DESC_SIG    0x08074b50u
#define ZIPW_CENTRAL_SIG 0x02014b50u
#define ZIPW_Z64_END_SIG 0x06064b50u
#define ZIPW_Z64_LOC_SIG 0x07064b50u
#define ZIPW_END_SIG     0x06054b50u

#define ZIPW_FLAG_DESCRIPTOR 0x0008u
#define ZIPW_FLAG_UTF8       0x0800u
#define ZIPW_MAX32           0xFFFFFFFFu
#define ZIPW_ALIGN           64u

typedef struct zipw_rec {
    size_t name_off; /* into names */
    uint16_t name_len;
    uint16_t flags;
    uint32_t crc;
    uint64_t size;
    uint64_t header_offset;
} zipw_rec;

struct ptc__zipw {
    ptc__afile *f;
    char *prefix;
    size_t nprefix;
    ptc__buf names; /* every full name, back to back, no terminators */
    zipw_rec *recs;
    size_t nrecs, caprecs;
    uint64_t cd_size;
    bool failed;
    bool in_record;
    uint64_t left; /* bytes the open record still expects */
    uint32_t crc;  /* of the open record so far */
};

/* Records a failure: poisons the writer and passes the code through. */
static int poison(ptc__zipw *w, int rc)
{
    w->failed = true;
    return rc;
}

static int check_usable(ptc__zipw *w, ptc_error *err)
{
    if (w->failed)
        return ptc__err(err, PTC_EINVAL, "", -1, "zip writer: an earlier call failed");
    return 0;
}

/* Bytes of a central directory entry's zip64 extra (0 when none is needed). */
static uint32_t central_z64_len(uint64_t size, uint64_t header_offset)
{
    uint32_t n = 0;
    if (size >= ZIPW_MAX32)
        n += 16; /* size and compressed size */
    if (header_offset >= ZIPW_MAX32)
        n += 8;
    return n ? 4 + n : 0;
}

/* A record's data is checksummed and written ZIPW_CHUNK bytes at a time: the CRC reads a piece
 * into the cache and the write(2) right after copies it from there into the page cache, so each
 * byte comes from memory once (one pass), where checksumming a whole storage first and writing it
 * after would read it from memory twice. Small enough to stay in a 1 MiB L2 cache, large enough
 * that the system call per piece costs nothing beside the copy (tests/bench/save/README.md). */
#define ZIPW_CHUNK ((size_t)256 << 10)

int ptc__zipw_open(ptc__zipw **out, const char *path, const char *prefix, ptc_error *err)
{
    if (!out || !path || !prefix)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__zipw_open: NULL argument");
    *out = NULL;
    /* torch's reader takes the prefix up to the first '/' of the first name, so a prefix with a
     * slash would not be found again; an empty one gives names starting with '/'. */
    if (prefix[0] == '\0' || strchr(prefix, '/')) {
        char shown[128];
        ptc__escape(shown, sizeof shown, prefix, strlen(prefix), true);
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "archive prefix \"%s\" must be non-empty and contain no '/'", shown);
    }
    ptc__zipw *w = ptc__calloc(1, sizeof *w);
    if (!w)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory opening a zip writer");
    w->nprefix = strlen(prefix);
    w->names.max = ZIPW_MAX32; /* the names live in the central directory, capped at 4 GiB */
    w->prefix = ptc__strdup(prefix);
    if (!w->prefix) {
        ptc__zipw_abort(w);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory opening a zip writer");
    }
    int rc = ptc__afile_open(&w->f, path, err);
    if (rc < 0) {
        ptc__zipw_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

int ptc__zipw_begin(ptc__zipw *w, const char *record, uint64_t len, ptc_error *err)
{
    int rc = check_usable(w, err);
    if (rc < 0)
        return rc;
    if (w->in_record)
        return poison(w,
                      ptc__err(err, PTC_EINVAL, record, -1, "zip writer: a record is still open"));
    size_t nrecord = strlen(record);
    size_t name_len = w->nprefix + 1 + nrecord;
    if (nrecord == 0 || name_len > 0xFFFF)
        return poison(w, ptc__err(err, PTC_EINVAL, record, -1,
                                  "zip writer: record name is empty or longer than 65535 bytes"));

    uint64_t off = ptc__afile_offset(w->f);
    uint32_t cd_entry = 46 + (uint32_t)name_len + central_z64_len(len, off);
    if (w->cd_size + cd_entry >= ZIPW_MAX32)
        return poison(w, ptc__err(err, PTC_ELIMIT, record, -1,
                                  "zip writer: central directory would reach 4 GiB"));

    if (w->nrecs >= PTC__ZIPW_MAX_RECORDS)
        return poison(w, ptc__err(err, PTC_ELIMIT, record, -1, "zip writer: more than %zu records",
                                  (size_t)PTC__ZIPW_MAX_RECORDS));
    if (w->nrecs == w->caprecs) {
        size_t cap = w->caprecs ? w->caprecs * 2 : 16;
        zipw_rec *r = cap <= SIZE_MAX / sizeof *r ? ptc__realloc(w->recs, cap * sizeof *r) : NULL;
        if (!r)
            return poison(w, ptc__err(err, PTC_ENOMEM, record, -1, "out of memory"));
        w->recs = r;
        w->caprecs = cap;
    }
    zipw_rec *r = &w->recs[w->nrecs];
    r->name_off = w->names.len;
    r->name_len = (uint16_t)name_len;
    r->flags = (uint16_t)(ZIPW_FLAG_UTF8 | (len ? ZIPW_FLAG_DESCRIPTOR : 0));
    r->crc = 0;
    r->size = len;
    r->header_offset = off;
    int brc;
    if ((brc = ptc__buf_append(&w->names, w->prefix, w->nprefix)) < 0 ||
        (brc = ptc__buf_append(&w->names, "/", 1)) < 0 ||
        (brc = ptc__buf_append(&w->names, record, nrecord)) < 0)
        return poison(w,
                      brc == PTC_ELIMIT
                          ? ptc__err(err, PTC_ELIMIT, record, -1,
                                     "zip writer: names would exceed %zu bytes", (size_t)ZIPW_MAX32)
                          : ptc__err(err, PTC_ENOMEM, record, -1, "out of memory"));

    /* zip64 extra, then the FB field; "start" is where the data would begin with P = 0. */
    uint8_t extra[4 + 24 + 4 + ZIPW_ALIGN];
    size_t nextra = 0;
    bool big = len >= ZIPW_MAX32, far = off >= ZIPW_MAX32;
    if (big || far) {
        uint16_t n = (uint16_t)((big ? 16 : 0) + (far ? 8 : 0));
        ptc__put_le16(extra, 0x0001);
        ptc__put_le16(extra + 2, n);
        nextra = 4;
        if (big) {
            ptc__put_le64(extra + nextra, len);
            ptc__put_le64(extra + nextra + 8, 0);
            nextra += 16;
        }
        if (far) {
            ptc__put_le64(extra + nextra, off);
            nextra += 8;
        }
    }
    uint64_t start = off + 30 + name_len + nextra + 4;
    uint16_t pad = (uint16_t)((ZIPW_ALIGN - start % ZIPW_ALIGN) % ZIPW_ALIGN);
    extra[nextra] = 'F';
    extra[nextra + 1] = 'B';
    ptc__put_le16(extra + nextra + 2, pad);
    memset(extra + nextra + 4, 'Z', pad);
    nextra += 4 + pad;

    uint8_t h[30];
    ptc__put_le32(h, ZIPW_LOCAL_SIG);
    ptc__put_le16(h + 4, 0); /* version needed */
    ptc__put_le16(h + 6, r->flags);
    ptc__put_le16(h + 8, 0);  /* method: stored */
    ptc__put_le16(h + 10, 0); /* time */
    ptc__put_le16(h + 12, 0); /* date */
    ptc__put_le32(h + 14, 0); /* crc: in the descriptor */
    ptc__put_le32(h + 18, 0); /* compressed size: in the descriptor */
    ptc__put_le32(h + 22, 0); /* size: in the descriptor */
    ptc__put_le16(h + 26, (uint16_t)name_len);
    ptc__put_le16(h + 28, (uint16_t)nextra);
    if ((rc = ptc__afile_write(w->f, h, sizeof h, err)) < 0 ||
        (rc = ptc__afile_write(w->f, w->names.data + r->name_off, name_len, err)) < 0 ||
        (rc = ptc__afile_write(w->f, extra, nextra, err)) < 0)
        return poison(w, rc);

    w->in_record = true;
    w->left = len;
    w->crc = (uint32_t)crc32(0L, Z_NULL, 0);
    return 0;
}

int ptc__zipw_write(ptc__zipw *w, const void *data, size_t n, ptc_error *err)
{
    int rc = check_usable(w, err);
    if (rc < 0)
        return rc;
    if (!w->in_record)
        return poison(w, ptc__err(err, PTC_EINVAL, "", -1, "zip writer: no record is open"));
    if (n > w->left)
        return poison(w, ptc__err(err, PTC_EINVAL, "", -1,
                                  "zip writer: %zu bytes written where %llu remain", n,
                                  (unsigned long long)w->left));
    const uint8_t *p = data;
    while (n > 0) {
        size_t k = n < ZIPW_CHUNK ? n : ZIPW_CHUNK;
        w->crc = ptc__crc32(w->crc, p, k);
        if ((rc = ptc__afile_write(w->f, p, k, err)) < 0)
            return poison(w, rc);
        w->left -= k;
        p += k;
        n -= k;
    }
    return 0;
}

int ptc__zipw_end(ptc__zipw *w, ptc_error *err)
{
    int rc = check_usable(w, err);
    if (rc < 0)
        return rc;
    if (!w->in_record)
        return poison(w, ptc__err(err, PTC_EINVAL, "", -1, "zip writer: no record is open"));
    if (w->left)
        return poison(w, ptc__err(err, PTC_EINVAL, "", -1,
                                  "zip writer: record ended with %llu bytes missing",
                                  (unsigned long long)w->left));
    zipw_rec *r = &w->recs[w->nrecs];
    r->crc = w->crc;
    if (r->size > 0) {
        /* The descriptor is 64-bit exactly when the local header carried a zip64 extra. */
        bool z64 = r->size >= ZIPW_MAX32 || r->header_offset >= ZIPW_MAX32;
        uint8_t d[24];
        ptc__put_le32(d, ZIPW_DESC_SIG);
        ptc__put_le32(d + 4, r->crc);
        if (z64) {
            ptc__put_le64(d + 8, r->size);
            ptc__put_le64(d + 16, r->size);
        } else {
            ptc__put_le32(d + 8, (uint32_t)r->size);
            ptc__put_le32(d + 12, (uint32_t)r->size);
        }
        if ((rc = ptc__afile_write(w->f, d, z64 ? 24 : 16, err)) < 0)
            return poison(w, rc);
    }
    w->cd_size += 46 + r->name_len + central_z64_len(r->size, r->header_offset);
    w->nrecs++;
    w->in_record = false;
    return 0;
}

int ptc__zipw_add(ptc__zipw *w, const char *record, const void *data, uint64_t len, ptc_error *err)
{
    int rc = ptc__zipw_begin(w, record, len, err);
    if (rc < 0)
        return rc;
    const uint8_t *p = data;
    while (len > 0) {
        size_t n = len < (uint64_t)SIZE_MAX ? (size_t)len : SIZE_MAX;
        if ((rc = ptc__zipw_write(w, p, n, err)) < 0)
            return rc;
        p += n;
        len -= n;
    }
    return ptc__zipw_end(w, err);
}

size_t ptc__zipw_count(const ptc__zipw *w)
{
    return w->nrecs;
}

uint32_t ptc__zipw_crc(const ptc__zipw *w, size_t i)
{
    PTC_ASSERT(i < w->nrecs);
    return w->recs[i].crc;
}

static int write_central(ptc__zipw *w, const zipw_rec *r, ptc_error *err)
{
    bool big = r->size >= ZIPW_MAX32, far = r->header_offset >= ZIPW_MAX32;
    uint32_t size32 = big ? ZIPW_MAX32 : (uint32_t)r->size;
    uint8_t h[46 + 4 + 24];
    ptc__put_le32(h, ZIPW_CENTRAL_SIG);
    ptc__put_le16(h + 4, 0); /* version made by */
    ptc__put_le16(h + 6, 0); /* version needed */
    ptc__put_le16(h + 8, r->flags);
    ptc__put_le16(h + 10, 0); /* method */
    ptc__put_le16(h + 12, 0); /* time */
    ptc__put_le16(h + 14, 0); /* date */
    ptc__put_le32(h + 16, r->crc);
    ptc__put_le32(h + 20, size32);
    ptc__put_le32(h + 24, size32);
    ptc__put_le16(h + 28, r->name_len);
    ptc__put_le16(h + 30, (uint16_t)central_z64_len(r->size, r->header_offset));
    ptc__put_le16(h + 32, 0); /* comment length */
    ptc__put_le16(h + 34, 0); /* disk */
    ptc__put_le16(h + 36, 0); /* internal attributes */
    ptc__put_le32(h + 38, 0); /* external attributes */
    ptc__put_le32(h + 42, far ? ZIPW_MAX32 : (uint32_t)r->header_offset);
    size_t nz = 0;
    if (big || far) {
        uint8_t *z = h + 46;
        ptc__put_le16(z, 0x0001);
        ptc__put_le16(z + 2, (uint16_t)((big ? 16 : 0) + (far ? 8 : 0)));
        nz = 4;
        if (big) {
            ptc__put_le64(z + nz, r->size);
            ptc__put_le64(z + nz + 8, r->size);
            nz += 16;
        }
        if (far) {
            ptc__put_le64(z + nz, r->header_offset);
            nz += 8;
        }
    }
    /* The name sits between the fixed part and the extra, so they go out in three writes. */
    int rc;
    if ((rc = ptc__afile_write(w->f, h, 46, err)) < 0 ||
        (rc = ptc__afile_write(w->f, w->names.data + r->name_off, r->name_len, err)) < 0 ||
        (rc = ptc__afile_write(w->f, h + 46, nz, err)) < 0)
        return rc;
    return 0;
}

int ptc__zipw_finish(ptc__zipw *w, ptc_error *err)
{
    if (!w)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__zipw_finish: NULL argument");
    int rc = check_usable(w, err);
    if (rc == 0 && w->in_record)
        rc = ptc__err(err, PTC_EINVAL, "", -1, "zip writer: finished with a record open");
    if (rc < 0)
        goto fail;

    uint64_t cd_offset = ptc__afile_offset(w->f);
    for (size_t i = 0; i < w->nrecs; i++)
        if ((rc = write_central(w, &w->recs[i], err)) < 0)
            goto fail;
    uint64_t cd_size = ptc__afile_offset(w->f) - cd_offset;
    PTC_ASSERT(cd_size == w->cd_size);
    uint64_t z64_offset = ptc__afile_offset(w->f);
    uint64_t n = w->nrecs;

    uint8_t t[56 + 20 + 22];
    uint8_t *e = t;
    ptc__put_le32(e, ZIPW_Z64_END_SIG);
    ptc__put_le64(e + 4, 44);      /* size of the rest of this record */
    ptc__put_le16(e + 12, 0x031E); /* made by: miniz always claims Unix, spec 3.0 */
    ptc__put_le16(e + 14, 0x002D); /* needed: 4.5, zip64 */
    ptc__put_le32(e + 16, 0);      /* this disk */
    ptc__put_le32(e + 20, 0);      /* disk of the central directory */
    ptc__put_le64(e + 24, n);
    ptc__put_le64(e + 32, n);
    ptc__put_le64(e + 40, cd_size);
    ptc__put_le64(e + 48, cd_offset);
    e += 56;
    ptc__put_le32(e, ZIPW_Z64_LOC_SIG);
    ptc__put_le32(e + 4, 0); /* disk of the zip64 end record */
    ptc__put_le64(e + 8, z64_offset);
    ptc__put_le32(e + 16, 1); /* total disks */
    e += 20;
    uint16_t n16 = n > 0xFFFF ? 0xFFFF : (uint16_t)n;
    ptc__put_le32(e, ZIPW_END_SIG);
    ptc__put_le16(e + 4, 0);
    ptc__put_le16(e + 6, 0);
    ptc__put_le16(e + 8, n16);
    ptc__put_le16(e + 10, n16);
    ptc__put_le32(e + 12, cd_size >= ZIPW_MAX32 ? ZIPW_MAX32 : (uint32_t)cd_size);
    ptc__put_le32(e + 16, cd_offset >= ZIPW_MAX32 ? ZIPW_MAX32 : (uint32_t)cd_offset);
    ptc__put_le16(e + 20, 0); /* comment length */
    if ((rc = ptc__afile_write(w->f, t, sizeof t, err)) < 0)
        goto fail;

    /* commit frees the atomic file whatever it returns. */
    rc = ptc__afile_commit(w->f, err);
    w->f = NULL;
fail:
    ptc__zipw_abort(w);
    return rc;
}

void ptc__zipw_abort(ptc__zipw *w)
{
    if (!w)
        return;
    ptc__afile_abort(w->f);
    ptc__buf_free(&w->names);
    ptc__free(w->recs);
    ptc__free(w->prefix);
    ptc__free(w);
}
