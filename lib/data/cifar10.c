/*
 * cifar10.c - the CIFAR-10 binary format ("CIFAR-10 binary version", as distributed in
 * cifar-10-binary.tar.gz), read into one split.
 *
 * On disk: a file is a sequence of 3073-byte records, nothing else (no header):
 *     u8   label            < 10
 *     u8   pixels[3][32][32] red plane, green plane, blue plane; each row-major, top row first
 * which is already the presented CHW layout, so a record's pixels are copied as they are.
 *
 * Checks, all before the first byte of data is used: each file is a regular file without holes
 * (a sparse file's size is not bytes on disk: ptc__data_check_dense) whose size is a positive
 * multiple of 3073; the sample count over all files fits max_samples; then while reading, every
 * label is < 10. One allocation per array, sized from the files' sizes (which are real bytes on
 * disk, not a header's claim) and the number of samples kept. Without statistics to gather,
 * reading stops after the kept samples. A file that shrinks while it is read is reported as
 * truncated; one that grows is read up to the size it had when it was measured.
 *
 * The size of a file is not bounded by the 10,000 records of the distributed batches: synthetic
 * CIFAR-10 folders (the benchmarks write one data_batch_1.bin of any length) are legitimate, and a
 * file that is really that long on disk costs memory in proportion to its size only as far as
 * the caller keeps its samples (--max-samples).
 */
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_RECORDS 256 /* records per read() */

static int open_measured(const char *path, int *fd_out, int64_t *nrec, ptc_error *err)
{
    char shown[128];
    ptc__data_member(shown, sizeof shown, path);
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return ptc__err(err, errno == ENOENT ? PTC_ENOTFOUND : PTC_EIO, shown, -1,
                        "cannot open: %s", strerror(errno));
    struct stat st;
    int rc;
    if (fstat(fd, &st) != 0) {
        rc = ptc__err(err, PTC_EIO, shown, -1, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ptc__err(err, PTC_EIO, shown, -1, "not a regular file");
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if ((rc = ptc__data_check_dense(fd, size, shown, err)) < 0)
        goto fail;
    if (size == 0) {
        rc = ptc__err(err, PTC_EFORMAT, shown, 0,
                      "empty file (a CIFAR-10 file holds records of %d bytes)", PTC__CIFAR_RECORD);
        goto fail;
    }
    if (size % PTC__CIFAR_RECORD != 0) {
        uint64_t whole = size / PTC__CIFAR_RECORD * PTC__CIFAR_RECORD;
        rc = ptc__err(err, PTC_EFORMAT, shown, (int64_t)whole,
                      "incomplete record: size %llu is not a multiple of the record size %d "
                      "(%llu bytes left after %llu whole records)",
                      (unsigned long long)size, PTC__CIFAR_RECORD,
                      (unsigned long long)(size - whole),
                      (unsigned long long)(size / PTC__CIFAR_RECORD));
        goto fail;
    }
    *fd_out = fd;
    *nrec = (int64_t)(size / PTC__CIFAR_RECORD);
    return 0;
fail:
    close(fd);
    return rc;
}

/* Reads exactly n bytes at the current position; PTC_EFORMAT if the file ends first. */
static int read_full(int fd, uint8_t *buf, size_t n, const char *shown, uint64_t offset,
                     ptc_error *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ptc__err(err, PTC_EIO, shown, (int64_t)(offset + got), "cannot read: %s",
                            strerror(errno));
        }
        if (r == 0)
            return ptc__err(err, PTC_EFORMAT, shown, (int64_t)(offset + got),
                            "truncated while reading (the file shrank after it was measured)");
        got += (size_t)r;
    }
    return 0;
}

/* Reads the records of one open file from sample `base` on: the first `keep` samples of the split
 * are copied into out, every record's pixels counted into hist (when not NULL). Reads no record
 * past the kept ones without hist. */
static int read_records(int fd, const char *path, int64_t nrec, uint8_t *chunk, ptc__split *out,
                        int64_t base, int64_t keep, uint64_t (*hist)[256], ptc_error *err)
{
    char shown[128];
    ptc__data_member(shown, sizeof shown, path);
    const int HW = PTC__DATA_H * PTC__DATA_W;
    if (!hist && nrec > keep - base)
        nrec = keep - base > 0 ? keep - base : 0;
    for (int64_t r0 = 0; r0 < nrec; r0 += CHUNK_RECORDS) {
        int64_t k = nrec - r0 < CHUNK_RECORDS ? nrec - r0 : CHUNK_RECORDS;
        uint64_t offset = (uint64_t)r0 * PTC__CIFAR_RECORD;
        int rc = read_full(fd, chunk, (size_t)k * PTC__CIFAR_RECORD, shown, offset, err);
        if (rc < 0)
            return rc;
        for (int64_t i = 0; i < k; i++) {
            const uint8_t *rec = chunk + (size_t)i * PTC__CIFAR_RECORD;
            if (rec[0] >= PTC__DATA_CLASSES)
                return ptc__err(err, PTC_EFORMAT, shown,
                                (int64_t)(offset + (uint64_t)i * PTC__CIFAR_RECORD),
                                "record %lld: label %u is not below %d", (long long)(r0 + i),
                                rec[0], PTC__DATA_CLASSES);
            if (hist)
                for (int c = 0; c < 3; c++)
                    for (int q = 0; q < HW; q++)
                        hist[c][rec[1 + c * HW + q]]++;
            int64_t s = base + r0 + i;
            if (s >= keep)
                continue;
            out->labels[s] = rec[0];
            memcpy(out->images + (size_t)s * PTC__DATA_PIXELS, rec + 1, PTC__DATA_PIXELS);
        }
    }
    return 0;
}

int ptc__cifar10_read(ptc__split *out, const char *const *paths, int npaths, int64_t max_samples,
                      ptc_error *err)
{
    ptc__read_params rp = {.max_samples = max_samples, .keep = -1, .hist = NULL};
    return ptc__cifar10_read_ex(out, paths, npaths, &rp, err);
}

int ptc__cifar10_read_ex(ptc__split *out, const char *const *paths, int npaths,
                         const ptc__read_params *rp, ptc_error *err)
{
    if (!out || !paths || npaths < 1 || npaths > 64 || !rp)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__cifar10_read: invalid argument");
    memset(out, 0, sizeof *out);
    const int64_t max_samples = rp->max_samples;
    int fds[64];
    int64_t counts[64];
    int nopen = 0, rc = 0;
    uint8_t *chunk = NULL;
    ptc__split s = {0};

    /* Measure every file first: nothing is allocated for data before every size is proven. */
    int64_t total = 0;
    for (; nopen < npaths; nopen++) {
        if ((rc = open_measured(paths[nopen], &fds[nopen], &counts[nopen], err)) < 0)
            goto fail;
        if (!ptc__add_i64_ok(total, counts[nopen], &total) || total > max_samples) {
            char shown[128];
            nopen++; /* this one is open too */
            rc = ptc__err(err, PTC_ELIMIT, ptc__data_member(shown, sizeof shown, paths[nopen - 1]),
                          -1, "the split would hold more than %lld samples (the limit)",
                          (long long)max_samples);
            goto fail;
        }
    }
    int64_t keep = rp->keep >= 0 && rp->keep < total ? rp->keep : total;
    uint64_t nbytes;
    if (!ptc__mul_u64_ok((uint64_t)keep, PTC__DATA_PIXELS, &nbytes) || nbytes > SIZE_MAX) {
        rc =
            ptc__err(err, PTC_ELIMIT, "", -1, "%lld samples do not fit in memory", (long long)keep);
        goto fail;
    }
    s.n = keep;
    if (keep > 0) {
        s.images = ptc__malloc((size_t)nbytes);
        s.labels = ptc__malloc((size_t)keep);
    }
    chunk = ptc__malloc((size_t)CHUNK_RECORDS * PTC__CIFAR_RECORD);
    if ((keep > 0 && (!s.images || !s.labels)) || !chunk) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %lld CIFAR-10 samples",
                      (long long)keep);
        goto fail;
    }
    int64_t base = 0;
    for (int f = 0; f < npaths; f++) {
        if ((rc = read_records(fds[f], paths[f], counts[f], chunk, &s, base, keep, rp->hist, err)) <
            0)
            goto fail;
        base += counts[f];
    }
    ptc__free(chunk);
    for (int f = 0; f < nopen; f++)
        close(fds[f]);
    *out = s;
    return 0;

fail:
    ptc__free(chunk);
    ptc__split_free(&s);
    for (int f = 0; f < nopen; f++)
        close(fds[f]);
    return rc;
}
