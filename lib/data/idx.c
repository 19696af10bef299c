/*
 * idx.c - the IDX format of MNIST and Fashion-MNIST (plain or gzip-compressed), read into one
 * split presented as 3x32x32 images.
 *
 * On disk (all integers u32 big-endian):
 *     images  magic 0x00000803 (0, 0, type 0x08 = unsigned byte, 3 dimensions), n, rows, cols,
 *             then n * rows * cols pixel bytes, image after image, row-major
 *     labels  magic 0x00000801 (unsigned byte, 1 dimension), n, then n label bytes (< 10)
 * Only rows = cols = 28 are accepted. Each 28x28 image becomes a 32x32 one by 2 zero pixels on
 * every side, and its gray plane is copied to the three channels.
 *
 * Both files go through zlib's gz* functions, which read a plain file as it is and inflate a gzip
 * one (several members, as gzip -c a b > c writes, are read as one stream). Their headers are read
 * and compared before any data: the image and label counts must be equal, non-zero and at most
 * max_samples. The data is then read in chunks into arrays that grow with what has actually been
 * read (doubling, capped at what the header declares), so a header that lies about n costs at most
 * twice the memory of the bytes really present, and nothing beyond the declared size plus one byte
 * is ever inflated: that byte proves that the file ends where the header says (bytes after it are
 * refused, and reaching the end makes zlib check the gzip trailer's CRC and length).
 *
 * zlib's gz state (buffers of about 160 KiB per file) is allocated by zlib with the C library's
 * malloc, not through ptc's allocator: the gz* API offers no hook for it.
 */
#include "data/data.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define CHUNK_IMAGES     1024  /* images inflated per step */
#define CHUNK_LABELS     65536 /* labels inflated per step */
#define GZ_BUFFER        (128 * 1024)

typedef struct idx_file {
    gzFile gz;
    char shown[128]; /* the path as errors name it */
    uint64_t offset; /* of the next byte of (inflated) content */
} idx_file;

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int idx_open(idx_file *f, const char *path, ptc_error *err)
{
    ptc__data_member(f->shown, sizeof f->shown, path);
    f->offset = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return ptc__err(err, errno == ENOENT ? PTC_ENOTFOUND : PTC_EIO, f->shown, -1,
                        "cannot open: %s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ptc__err(err, PTC_EIO, f->shown, -1, "not a regular file");
    errno = 0;
    f->gz = gzopen(path, "rbe");
    if (!f->gz)
        return ptc__err(err, errno ? PTC_EIO : PTC_ENOMEM, f->shown, -1, "cannot open: %s",
                        errno ? strerror(errno) : "out of memory");
    gzbuffer(f->gz, GZ_BUFFER);
    return 0;
}

static void idx_close(idx_file *f)
{
    if (f->gz)
        gzclose_r(f->gz);
    f->gz = NULL;
}

/* The error zlib recorded on f, or PTC_EFORMAT "what" when it recorded none (a plain end of
 * file). */
static int gz_fail(idx_file *f, const char *what, ptc_error *err)
{
    int zerr = Z_OK;
    const char *msg = gzerror(f->gz, &zerr);
    switch (zerr) {
    case Z_OK:
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset, "%s", what);
    case Z_BUF_ERROR: /* zlib's "unexpected end of file": the gzip stream is cut short */
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset,
                        "%s (gzip stream truncated: %s)", what, msg);
    case Z_MEM_ERROR:
        return ptc__err(err, PTC_ENOMEM, f->shown, (int64_t)f->offset, "zlib: %s", msg);
    case Z_ERRNO:
        return ptc__err(err, PTC_EIO, f->shown, (int64_t)f->offset, "cannot read: %s",
                        strerror(errno));
    default: /* Z_DATA_ERROR and friends: a corrupt stream, a bad CRC */
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset, "corrupt gzip data: %s",
                        msg);
    }
}

/* Reads up to n bytes (n < 2^31); *got tells how many. Negative only on a zlib or I/O error. */
static int idx_read(idx_file *f, void *buf, size_t n, size_t *got, ptc_error *err)
{
    *got = 0;
    while (*got < n) {
        int r = gzread(f->gz, (uint8_t *)buf + *got, (unsigned)(n - *got));
        if (r < 0)
            return gz_fail(f, "read error", err);
        if (r == 0)
            break;
        *got += (size_t)r;
        f->offset += (uint64_t)r;
    }
    if (*got < n) {
        int zerr = Z_OK;
        gzerror(f->gz, &zerr);
        if (zerr != Z_OK)
            return gz_fail(f, "read error", err);
    }
    return 0;
}

/* Reads exactly n bytes; a short file is PTC_EFORMAT "truncated <what>". */
static int idx_read_exact(idx_file *f, void *buf, size_t n, const char *what, ptc_error *err)
{
    size_t got;
    int rc = idx_read(f, buf, n, &got, err);
    if (rc < 0)
        return rc;
    if (got < n)
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset,
                        "truncated %s: the file ends %zu bytes short", what, n - got);
    return 0;
}

/* After the declared content: the file must end here. */
static int idx_expect_end(idx_file *f, const char *declared, ptc_error *err)
{
    uint8_t extra[1];
    size_t got;
    int rc = idx_read(f, extra, 1, &got, err);
    if (rc < 0)
        return rc;
    if (got)
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset - 1,
                        "bytes after the %s the header declares", declared);
    return 0;
}

/* Grows *buf of *cap units to hold at least need units (never more than max). */
static int grow(uint8_t **buf, int64_t *cap, int64_t need, int64_t max, size_t unit)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap < 1024 ? 1024 : *cap * 2;
    if (c < need)
        c = need;
    if (c > max)
        c = max;
    uint8_t *p = ptc__realloc(*buf, (size_t)c * unit);
    if (!p)
        return PTC_ENOMEM;
    *buf = p;
    *cap = c;
    return 0;
}

/* 28x28 gray -> 3x32x32, zero border of 2. */
static void present(const uint8_t *src, uint8_t *dst)
{
    const int HW = PTC__DATA_H * PTC__DATA_W;
    memset(dst, 0, HW);
    for (int y = 0; y < PTC__IDX_SIDE; y++)
        memcpy(dst + (y + PTC__IDX_PAD) * PTC__DATA_W + PTC__IDX_PAD, src + y * PTC__IDX_SIDE,
               PTC__IDX_SIDE);
    memcpy(dst + HW, dst, HW);
    memcpy(dst + 2 * HW, dst, HW);
}

static int read_headers(idx_file *im, idx_file *lb, int64_t max_samples, int64_t *n, ptc_error *err)
{
    uint8_t h[16];
    int rc;
    /* The magic first, so that a wrong file is named as such even when it is short. */
    if ((rc = idx_read_exact(im, h, 4, "header", err)) < 0)
        return rc;
    uint32_t magic = be32(h);
    if (magic != IDX_IMAGES_MAGIC)
        return ptc__err(err, PTC_EFORMAT, im->shown, 0,
                        "magic 0x%08x is not 0x%08x (IDX images: unsigned bytes, 3 dimensions)",
                        magic, IDX_IMAGES_MAGIC);
    if ((rc = idx_read_exact(im, h + 4, 12, "header", err)) < 0)
        return rc;
    uint32_t ni = be32(h + 4), rows = be32(h + 8), cols = be32(h + 12);
    if (rows != PTC__IDX_SIDE || cols != PTC__IDX_SIDE)
        return ptc__err(err, PTC_EUNSUPPORTED, im->shown, 8,
                        "images are %ux%u; only %dx%d images are supported", rows, cols,
                        PTC__IDX_SIDE, PTC__IDX_SIDE);
    if (ni == 0)
        return ptc__err(err, PTC_EFORMAT, im->shown, 4, "the file declares no images");
    if ((int64_t)ni > max_samples)
        return ptc__err(err, PTC_ELIMIT, im->shown, 4, "%u images exceed the limit of %lld samples",
                        ni, (long long)max_samples);

    if ((rc = idx_read_exact(lb, h, 4, "header", err)) < 0)
        return rc;
    magic = be32(h);
    if (magic != IDX_LABELS_MAGIC)
        return ptc__err(err, PTC_EFORMAT, lb->shown, 0,
                        "magic 0x%08x is not 0x%08x (IDX labels: unsigned bytes, 1 dimension)",
                        magic, IDX_LABELS_MAGIC);
    if ((rc = idx_read_exact(lb, h + 4, 4, "header", err)) < 0)
        return rc;
    uint32_t nl = be32(h + 4);
    if (nl != ni)
        return ptc__err(err, PTC_EFORMAT, lb->shown, 4, "%u labels, but %s declares %u images", nl,
                        im->shown, ni);
    *n = ni;
    return 0;
}

static int read_images(idx_file *im, int64_t n, ptc__split *s, ptc_error *err)
{
    const size_t RAW = PTC__IDX_SIDE * PTC__IDX_SIDE;
    uint8_t *raw = ptc__malloc(CHUNK_IMAGES * RAW);
    if (!raw)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory reading images");
    int64_t cap = 0, done = 0;
    int rc = 0;
    while (done < n) {
        int64_t k = n - done < CHUNK_IMAGES ? n - done : CHUNK_IMAGES;
        size_t got;
        if ((rc = idx_read(im, raw, (size_t)k * RAW, &got, err)) < 0)
            break;
        if (got < (size_t)k * RAW) {
            rc = ptc__err(err, PTC_EFORMAT, im->shown, (int64_t)im->offset,
                          "truncated: the header declares %lld images, the file ends inside "
                          "image %lld",
                          (long long)n, (long long)(done + (int64_t)(got / RAW)));
            break;
        }
        if (grow(&s->images, &cap, done + k, n, PTC__DATA_PIXELS) < 0) {
            rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %lld images",
                          (long long)(done + k));
            break;
        }
        for (int64_t i = 0; i < k; i++)
            present(raw + (size_t)i * RAW, s->images + (size_t)(done + i) * PTC__DATA_PIXELS);
        done += k;
    }
    ptc__free(raw);
    if (rc == 0)
        rc = idx_expect_end(im, "images", err);
    return rc;
}

static int read_labels(idx_file *lb, int64_t n, ptc__split *s, ptc_error *err)
{
    int64_t cap = 0, done = 0;
    while (done < n) {
        int64_t k = n - done < CHUNK_LABELS ? n - done : CHUNK_LABELS;
        if (grow(&s->labels, &cap, done + k, n, 1) < 0)
            return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %lld labels",
                            (long long)(done + k));
        size_t got;
        int rc = idx_read(lb, s->labels + done, (size_t)k, &got, err);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < got; i++)
            if (s->labels[done + (int64_t)i] >= PTC__DATA_CLASSES)
                return ptc__err(err, PTC_EFORMAT, lb->shown, 8 + done + (int64_t)i,
                                "label %lld is %u, not below %d", (long long)(done + (int64_t)i),
                                s->labels[done + (int64_t)i], PTC__DATA_CLASSES);
        if (got < (size_t)k)
            return ptc__err(err, PTC_EFORMAT, lb->shown, (int64_t)lb->offset,
                            "truncated: the header declares %lld labels, the file holds %lld",
                            (long long)n, (long long)(done + (int64_t)got));
        done += k;
    }
    return idx_expect_end(lb, "labels", err);
}

int ptc__idx_read(ptc__split *out, const char *images_path, const char *labels_path,
                  int64_t max_samples, ptc_error *err)
{
    if (!out || !images_path || !labels_path || max_samples < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__idx_read: invalid argument");
    memset(out, 0, sizeof *out);
    idx_file im = {0}, lb = {0};
    ptc__split s = {0};
    int64_t n = 0;
    int rc;
    if ((rc = idx_open(&im, images_path, err)) < 0 || (rc = idx_open(&lb, labels_path, err)) < 0 ||
        (rc = read_headers(&im, &lb, max_samples, &n, err)) < 0 ||
        (rc = read_images(&im, n, &s, err)) < 0 || (rc = read_labels(&lb, n, &s, err)) < 0) {
        idx_close(&im);
        idx_close(&lb);
        ptc__split_free(&s);
        return rc;
    }
    idx_close(&im);
    idx_close(&lb);
    s.n = n;
    *out = s;
    return 0;
}
