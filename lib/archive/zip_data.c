/*
 * zip_data.c - the bytes of one zip record: stored data in place or copied, deflated data
 * inflated with zlib, and CRC-32 checks.
 *
 * Inflation is strict where torch's miniz is lenient (see inflate_record): the stream must end
 * exactly at its compressed size and at its declared size, with the declared CRC. Every buffer
 * sized by the file is charged to the archive's budget while it lives; zlib's own state goes
 * through the replaceable allocator by its allocation hooks.
 */
#define ZLIB_CONST
#include "archive/zip_int.h"

#include <string.h>

#include <zlib.h>

/* zlib's allocation hooks, so that inflate's state goes through the replaceable allocator. */
static voidpf zlib_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    size_t total;
    if (__builtin_mul_overflow((size_t)items, (size_t)size, &total))
        return Z_NULL;
    return ptc__malloc(total);
}

static void zlib_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    ptc__free(p);
}

/* ---- record bytes ---------------------------------------------------------------------------- */

/* Inflates e's raw deflate data. With dst (e->size bytes) the output lands there; without it the
 * output only feeds the CRC. Fails unless the stream ends exactly at e->size bytes of output and
 * exactly at the end of its compressed bytes, and unless the CRC-32 matches. miniz (as torch
 * calls it) stops at the declared size, ignores what follows the stream, checks no CRC, and
 * reports no error for a stream that breaks off or is corrupt (torch then uses what came out); it
 * refuses only a stream that ends short of the declared size, in a record it reads. */
static int inflate_record(ptc__zip *z, const ptc__zip_entry *e, uint8_t *dst, ptc_error *err)
{
    uint8_t *in = NULL, *out = NULL, probe[1];
    z_stream s;
    memset(&s, 0, sizeof s);
    s.zalloc = zlib_alloc;
    s.zfree = zlib_free;
    bool live = false;
    int rc;
    if (!z->map && !(in = ptc__zip_take(z, IO_CHUNK, &rc, err)))
        goto done;
    if (!dst && !(out = ptc__zip_take(z, IO_CHUNK, &rc, err)))
        goto done;
    int zrc = inflateInit2(&s, -MAX_WBITS);
    if (zrc != Z_OK) {
        rc = ptc__zip_rec_err(err, zrc == Z_MEM_ERROR ? PTC_ENOMEM : PTC_EFORMAT, e,
                              "cannot start inflating (zlib error %d)", zrc);
        goto done;
    }
    live = true;

    uint64_t in_pos = e->data_offset, in_left = e->comp_size, total = 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    for (;;) {
        if (s.avail_in == 0 && in_left > 0) {
            uint64_t span = z->map ? ZLIB_SPAN : IO_CHUNK;
            size_t n = (size_t)(in_left < span ? in_left : span);
            if (z->map) {
                s.next_in = z->map + in_pos;
            } else {
                if ((rc = ptc__source_read(z->src, in_pos, in, n, err)) < 0)
                    goto done;
                s.next_in = in;
            }
            s.avail_in = (uInt)n;
            in_pos += n;
            in_left -= n;
        }
        if (s.avail_out == 0) {
            /* Once the declared size is reached, one more byte of room tells whether the stream
             * would produce more. */
            uint64_t room = e->size - total;
            if (room == 0) {
                s.next_out = probe;
                s.avail_out = 1;
            } else {
                uint64_t span = dst ? ZLIB_SPAN : IO_CHUNK;
                s.next_out = dst ? dst + total : out;
                s.avail_out = (uInt)(room < span ? room : span);
            }
        }
        uint8_t *start = s.next_out;
        uInt before = s.avail_out;
        zrc = inflate(&s, Z_NO_FLUSH);
        size_t made = before - s.avail_out;
        if (made > 0) {
            if (start == probe) {
                rc = ptc__zip_rec_stricter(err, true, PTC_EFORMAT, e,
                                           "inflates to more than the declared %llu bytes",
                                           (unsigned long long)e->size);
                goto done;
            }
            crc = ptc__crc32((uint32_t)crc, start, made);
            total += made;
        }
        if (zrc == Z_STREAM_END)
            break;
        if (zrc == Z_OK)
            continue;
        if (zrc == Z_MEM_ERROR)
            rc = ptc__zip_rec_err(err, PTC_ENOMEM, e, "out of memory inflating");
        else if (zrc == Z_BUF_ERROR && s.avail_in == 0 && in_left == 0)
            rc = ptc__zip_rec_stricter(err, !ptc__zip_torch_parses(e), PTC_EFORMAT, e,
                                       "deflate stream is cut short after %llu of %llu bytes",
                                       (unsigned long long)total, (unsigned long long)e->size);
        else
            rc = ptc__zip_rec_stricter(err, !ptc__zip_torch_parses(e), PTC_EFORMAT, e,
                                       "corrupt deflate data: %s", s.msg ? s.msg : "zlib error");
        goto done;
    }
    if (total != e->size) {
        rc = ptc__zip_rec_stricter(err, !ptc__zip_torch_reads(e), PTC_EFORMAT, e,
                                   "inflates to %llu bytes, but the declared size is %llu",
                                   (unsigned long long)total, (unsigned long long)e->size);
        goto done;
    }
    if (s.avail_in > 0 || in_left > 0) {
        rc = ptc__zip_rec_stricter(err, true, PTC_EFORMAT, e,
                                   "%llu bytes follow the end of the deflate stream",
                                   (unsigned long long)(s.avail_in + in_left));
        goto done;
    }
    if ((uint32_t)crc != e->crc32) {
        rc = ptc__zip_rec_stricter(err, true, PTC_ECRC, e,
                                   "CRC-32 of the data is 0x%08x, the archive says 0x%08x",
                                   (uint32_t)crc, e->crc32);
        goto done;
    }
    rc = 0;
done:
    if (live)
        inflateEnd(&s);
    ptc__zip_give(z, out, IO_CHUNK);
    ptc__zip_give(z, in, IO_CHUNK);
    return rc;
}

/* The CRC-32 of a stored record, read in place or in chunks. */
static int crc_stored(ptc__zip *z, const ptc__zip_entry *e, uint32_t *out, ptc_error *err)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    if (z->map) {
        *out = ptc__crc32((uint32_t)crc, z->map + e->data_offset, (size_t)e->comp_size);
        return 0;
    }
    int rc;
    uint8_t *buf = ptc__zip_take(z, IO_CHUNK, &rc, err);
    if (!buf)
        return rc;
    for (uint64_t done = 0; done < e->comp_size;) {
        size_t n = (size_t)(e->comp_size - done < IO_CHUNK ? e->comp_size - done : IO_CHUNK);
        if ((rc = ptc__source_read(z->src, e->data_offset + done, buf, n, err)) < 0)
            break;
        crc = ptc__crc32((uint32_t)crc, buf, n);
        done += n;
    }
    ptc__zip_give(z, buf, IO_CHUNK);
    *out = (uint32_t)crc;
    return rc;
}

/* ---- reading records ------------------------------------------------------------------------- */

int ptc__zip_read(ptc__zip *z, const ptc__zip_entry *e, const uint8_t **data, void **owned,
                  ptc_error *err)
{
    if (!z || !e || !data || !owned)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__zip_read: NULL argument");
    *data = NULL;
    *owned = NULL;
    if (e->method == METHOD_STORED && z->map) {
        *data = z->map + e->data_offset;
        return 0;
    }
    uint8_t *buf = NULL;
    int rc;
    if (ptc__budget_take(z->budget, e->size, NULL, "", -1) < 0) /* torch has no such limit */
        return ptc__zip_rec_stricter(
            err, true, PTC_ELIMIT, e,
            "reading its %llu bytes would exceed the heap limit of %llu bytes",
            (unsigned long long)e->size, (unsigned long long)z->budget->limit);
    if (z->kept && z->kept_entry == e) {
        /* Read before, in full and checked (PTC__ZIP_KEEP_PICKLE): the same bytes again. */
        *data = z->kept;
        *owned = z->kept;
        return 0;
    }
    /* ptc__malloc never allocates 0 bytes on purpose; an empty record still gets a buffer. */
    if (e->size > SIZE_MAX - 1 || !(buf = ptc__malloc((size_t)e->size + 1))) {
        ptc__budget_give(z->budget, e->size);
        return ptc__zip_rec_err(err, PTC_ENOMEM, e, "out of memory for %llu bytes",
                                (unsigned long long)e->size);
    }
    if (e->method == METHOD_STORED)
        rc = ptc__source_read(z->src, e->data_offset, buf, (size_t)e->size, err);
    else
        rc = inflate_record(z, e, buf, err);
    if (rc < 0) {
        ptc__free(buf);
        ptc__budget_give(z->budget, e->size);
        return rc;
    }
    *data = buf;
    *owned = buf;
    if (z->keep_pickle && !z->kept && strcmp(e->record, "data.pkl") == 0) {
        z->kept = buf;
        z->kept_entry = e;
    }
    return 0;
}

void ptc__zip_release(ptc__zip *z, const ptc__zip_entry *e, void *owned)
{
    if (!z || !e || !owned)
        return;
    if (owned != z->kept) /* the kept bytes are freed by ptc__zip_close */
        ptc__free(owned);
    ptc__budget_give(z->budget, e->size);
}

int ptc__zip_check_crc(ptc__zip *z, const ptc__zip_entry *e, ptc_error *err)
{
    if (!z || !e)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__zip_check_crc: NULL argument");
    if (e->method != METHOD_STORED)
        return inflate_record(z, e, NULL, err);
    uint32_t crc = 0;
    int rc = crc_stored(z, e, &crc, err);
    if (rc < 0)
        return rc;
    if (crc != e->crc32) /* torch builds miniz without CRC checks */
        return ptc__zip_rec_stricter(err, true, PTC_ECRC, e,
                                     "CRC-32 of the data is 0x%08x, the archive says 0x%08x", crc,
                                     e->crc32);
    return 0;
}
