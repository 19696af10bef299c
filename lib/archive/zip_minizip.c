/*
 * zip_minizip.c - the second opinion on a zip container: minizip opens the same bytes and must see
 * exactly what ptc's own parser (zip.c) saw.
 *
 * Two independent parsers agreeing is the check that ptc's parser has no blind spot an attacker
 * could use (threat model P6 in docs/security.md): any archive on which they disagree about an
 * entry's name, sizes, method, flags, CRC, central position or data offset is refused. minizip
 * reads through callbacks over the ptc source; its small per-archive buffers come from the C
 * library (minizip 1.1 offers no allocation hooks), never sized by the file.
 */
#include "archive/zip_int.h"

#include <string.h>

#include <minizip/unzip.h>

/* minizip reads through these callbacks; a callback source is served from a window so that
 * minizip's many small reads do not each become a call to the caller's function. */
typedef struct mz_io {
    ptc__zip *z;
    uint64_t pos;
    uint8_t *win; /* IO_CHUNK bytes, callback sources only */
    uint64_t win_off;
    size_t win_len;
    int failed; /* a source read failed; its detail is in io_err */
    ptc_error io_err;
} mz_io;

static voidpf ZCALLBACK mz_open(voidpf opaque, const void *filename, int mode)
{
    (void)filename;
    (void)mode;
    return opaque;
}

/* Kept out of line so that mz_read's short way needs no stack frame. */
#if defined(__GNUC__)
#define MZ_NOINLINE __attribute__((noinline))
#else
#define MZ_NOINLINE
#endif

static MZ_NOINLINE uLong mz_read_any(mz_io *io, void *buf, uLong size)
{
    ptc__zip *z = io->z;
    if (io->failed || io->pos >= z->size)
        return 0;
    uint64_t n = z->size - io->pos < size ? z->size - io->pos : size;
    if (z->map) {
        memcpy(buf, z->map + io->pos, (size_t)n);
    } else if (io->pos >= io->win_off && io->pos - io->win_off + n <= io->win_len) {
        memcpy(buf, io->win + (io->pos - io->win_off), (size_t)n);
    } else if (n >= IO_CHUNK) {
        if (ptc__source_read(z->src, io->pos, buf, (size_t)n, &io->io_err) < 0) {
            io->failed = 1;
            return 0;
        }
    } else {
        uint64_t fill = z->size - io->pos < IO_CHUNK ? z->size - io->pos : IO_CHUNK;
        io->win_len = 0;
        if (ptc__source_read(z->src, io->pos, io->win, (size_t)fill, &io->io_err) < 0) {
            io->failed = 1;
            return 0;
        }
        io->win_off = io->pos;
        io->win_len = (size_t)fill;
        memcpy(buf, io->win, (size_t)n);
    }
    io->pos += n;
    return (uLong)n;
}

/* minizip 1.1 reads headers one byte at a time (about 120 calls per entry): those calls, on a
 * mapped source (which never fails), take this short way; every other goes to mz_read_any. */
static uLong ZCALLBACK mz_read(voidpf opaque, voidpf stream, void *buf, uLong size)
{
    (void)stream;
    mz_io *io = opaque;
    const ptc__zip *z = io->z;
    if (size == 1 && z->map && io->pos < z->size) {
        *(uint8_t *)buf = z->map[io->pos++];
        return 1;
    }
    return mz_read_any(io, buf, size);
}

static uLong ZCALLBACK mz_write(voidpf opaque, voidpf stream, const void *buf, uLong size)
{
    (void)opaque;
    (void)stream;
    (void)buf;
    (void)size;
    return 0;
}

static ZPOS64_T ZCALLBACK mz_tell(voidpf opaque, voidpf stream)
{
    (void)stream;
    return ((mz_io *)opaque)->pos;
}

static long ZCALLBACK mz_seek(voidpf opaque, voidpf stream, ZPOS64_T offset, int origin)
{
    (void)stream;
    mz_io *io = opaque;
    /* minizip moves backwards with SEEK_CUR by passing a negative offset cast to unsigned, so
     * the position is computed modulo 2^64 on purpose. */
    switch (origin) {
    case ZLIB_FILEFUNC_SEEK_SET:
        io->pos = offset;
        return 0;
    case ZLIB_FILEFUNC_SEEK_CUR:
        io->pos += offset;
        return 0;
    case ZLIB_FILEFUNC_SEEK_END:
        io->pos = io->z->size + offset;
        return 0;
    default:
        return -1;
    }
}

static int ZCALLBACK mz_close(voidpf opaque, voidpf stream)
{
    (void)opaque;
    (void)stream;
    return 0;
}

static int ZCALLBACK mz_error(voidpf opaque, voidpf stream)
{
    (void)stream;
    return ((mz_io *)opaque)->failed;
}

static int disagree(ptc_error *err, const ptc__zip_entry *e, const char *what)
{
    if (e)
        return ptc__zip_rec_err(err, PTC_EFORMAT, e, "ptc and minizip disagree: %s", what);
    return ptc__err(err, PTC_EFORMAT, "", -1, "ptc and minizip disagree: %s", what);
}

/* A value minizip read for a 32-bit central field. minizip 1.1 as Debian ships it does not apply
 * zip64 extra fields on LP64 hosts (it compares the field with (unsigned long)-1, not with
 * 0xFFFFFFFF), so for a field that held the sentinel it reports the sentinel itself; newer
 * minizip reports the real value. Either is agreement; any other value is not. */
static bool mz_same(uint64_t theirs, uint64_t ours, bool sentinel)
{
    return theirs == ours || (sentinel && theirs == U32_SENTINEL);
}

/* Opens the archive with minizip and requires the same entries, in the same order, with the same
 * names, sizes, methods, flags, CRCs, central positions and data offsets. Where a local header
 * lies beyond 4 GiB, a minizip that ignores zip64 fields cannot find it (see mz_same), and where
 * it kept a size's sentinel it refuses a plain local size; for those entries the data offset is
 * compared only when minizip does accept the header. */
int ptc__zip_cross_check(ptc__zip *z, const central_aux *aux, ptc_error *err)
{
    mz_io io;
    memset(&io, 0, sizeof io);
    io.z = z;
    const uint64_t name_cap = 65536u;
    int rc;
    char *name = ptc__zip_take(z, name_cap, &rc, err);
    if (!name)
        return rc;
    if (!z->map && !(io.win = ptc__zip_take(z, IO_CHUNK, &rc, err))) {
        ptc__zip_give(z, name, name_cap);
        return rc;
    }
    zlib_filefunc64_def fns = {mz_open, mz_read,  mz_write, mz_tell,
                               mz_seek, mz_close, mz_error, &io};
    unzFile uf = unzOpen2_64("", &fns);
    if (!uf) {
        rc = disagree(err, NULL, "minizip cannot open the archive");
        goto done;
    }
    unz_global_info64 gi;
    if (unzGetGlobalInfo64(uf, &gi) != UNZ_OK || gi.number_entry != z->n) {
        rc = disagree(err, NULL, "minizip counts a different number of entries");
        goto done;
    }
    int mrc = unzGoToFirstFile(uf);
    for (size_t i = 0; i < z->n; i++) {
        const ptc__zip_entry *e = &z->entries[i];
        if (mrc != UNZ_OK) {
            rc = disagree(err, e, "minizip cannot read this central directory entry");
            goto done;
        }
        unz_file_info64 info;
        if (unzGetCurrentFileInfo64(uf, &info, name, (uLong)name_cap, NULL, 0, NULL, 0) != UNZ_OK) {
            rc = disagree(err, e, "minizip cannot read this central directory entry");
            goto done;
        }
        size_t nlen = strlen(e->name);
        if (info.size_filename != nlen || memcmp(name, e->name, nlen) != 0) {
            rc = disagree(err, e, "minizip reads another name here");
            goto done;
        }
        unsigned sent = aux[i].sentinels;
        if (!mz_same(info.compressed_size, e->comp_size, sent & SENT_COMP_SIZE) ||
            !mz_same(info.uncompressed_size, e->size, sent & SENT_SIZE) ||
            info.compression_method != e->method || info.flag != e->flags || info.crc != e->crc32) {
            rc = disagree(err, e, "minizip reads other sizes, method, flags or CRC");
            goto done;
        }
        if (unzGetOffset64(uf) != aux[i].pos) {
            rc = disagree(err, e, "minizip finds this entry elsewhere in the central directory");
            goto done;
        }
        /* A minizip that kept a size's sentinel (see mz_same) compares the local size with the
         * sentinel when there is no descriptor, and so rejects plain local sizes beside zip64
         * central ones, which read_local found equal by value. */
        bool mz_kept = !(e->flags & FLAG_DESCRIPTOR) &&
                       (((sent & SENT_COMP_SIZE) && info.compressed_size == U32_SENTINEL) ||
                        ((sent & SENT_SIZE) && info.uncompressed_size == U32_SENTINEL));
        int method = 0, level = 0;
        /* Opening in raw mode reads the local header (as minizip checks it) without inflating. */
        if (unzOpenCurrentFile2(uf, &method, &level, 1) != UNZ_OK) {
            if ((sent & SENT_OFFSET) || mz_kept) {
                mrc = unzGoToNextFile(uf);
                continue;
            }
            rc = disagree(err, e, "minizip rejects the local header");
            goto done;
        }
        ZPOS64_T data = unzGetCurrentFileZStreamPos64(uf);
        unzCloseCurrentFile(uf);
        if (data != e->data_offset) {
            rc = disagree(err, e, "minizip finds the data at another offset");
            goto done;
        }
        mrc = unzGoToNextFile(uf);
    }
    if (mrc == UNZ_OK) {
        rc = disagree(err, NULL, "minizip reads more entries");
        goto done;
    }
    rc = 0;
done:
    if (uf)
        unzClose(uf);
    /* A failing read callback is an I/O error, not a disagreement; report it as such. */
    if (rc < 0 && io.failed && err)
        *err = io.io_err;
    if (rc < 0 && io.failed)
        rc = io.io_err.code ? io.io_err.code : PTC_EIO;
    ptc__zip_give(z, io.win, IO_CHUNK);
    ptc__zip_give(z, name, name_cap);
    return rc;
}
