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
 * A file that starts with the gzip magic (1f 8b) is inflated here with zlib's inflate (its
 * allocations go through ptc's allocator), any other is read as it is. A gzip file may hold
 * several members (gzip -c a b > c writes them, gunzip reads them as one stream, and so do we);
 * after the last member the file must end: any other byte there is refused with its offset in
 * the compressed file. (zlib's gz* functions, used before, silently ignored such bytes.)
 *
 * Nothing large is allocated before the header is proven against the file, whose size is bytes
 * really on disk (a file with holes is refused at open, ptc__data_check_dense):
 *   - a plain file must be exactly as long as its header declares;
 *   - a gzip file may declare at most PTC__DATA_GZ_RATIO times its compressed size (or
 *     PTC__DATA_GZ_FLOOR bytes when that is more), and it is held to that bound while it inflates;
 *   - the image and label counts must be equal, non-zero and at most max_samples.
 * The data is then read in chunks into arrays that grow with what has actually been read
 * (doubling, capped at what the header declares and at the samples kept). When the whole file is
 * read, one byte more is asked for: it proves that the file ends where the header says (bytes after
 * it are refused), and for a gzip file reaching the end makes zlib check every member's CRC and
 * length. Without statistics to gather, reading stops after the kept samples.
 */
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define CHUNK_IMAGES     1024  /* images inflated per step */
#define CHUNK_LABELS     65536 /* labels inflated per step */
#define IN_BUFFER        (128 * 1024)

typedef struct idx_file {
    int fd;
    char shown[128];   /* the path as errors name it */
    uint64_t offset;   /* of the next byte of (inflated) content */
    uint64_t size;     /* of the file on disk */
    uint64_t limit;    /* the most content it may deliver: size, or size x the gzip ratio */
    uint8_t *in;       /* [IN_BUFFER] bytes read from the file, not yet used */
    uint64_t consumed; /* bytes read from the file into in */
    bool eof;          /* read() said the file ends */
    bool gz;           /* the file starts with the gzip magic */
    bool zinit;        /* zs is initialised */
    bool member_end;   /* the current gzip member ended (Z_STREAM_END) */
    bool done;         /* no content is left */
    z_stream zs;       /* next_in / avail_in also describe `in` for a plain file */
} idx_file;

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return ptc__calloc(items, size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    ptc__free(p);
}

/* The compressed-file offset of the next unused byte. */
static uint64_t in_offset(const idx_file *f)
{
    return f->consumed - f->zs.avail_in;
}

/* Moves the unused input to the front of the buffer and reads more after it (until the buffer
 * is full or the file ends). */
static int fill_in(idx_file *f, ptc_error *err)
{
    if (f->eof)
        return 0;
    if (f->zs.avail_in && f->zs.next_in != f->in)
        memmove(f->in, f->zs.next_in, f->zs.avail_in);
    f->zs.next_in = f->in;
    while (f->zs.avail_in < IN_BUFFER) {
        ssize_t r = read(f->fd, f->in + f->zs.avail_in, IN_BUFFER - f->zs.avail_in);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ptc__err(err, PTC_EIO, f->shown, (int64_t)f->consumed, "cannot read: %s",
                            strerror(errno));
        if (r == 0) {
            f->eof = true;
            break;
        }
        f->zs.avail_in += (uInt)r;
        f->consumed += (uint64_t)r;
    }
    return 0;
}

static int idx_open(idx_file *f, const char *path, ptc_error *err)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    ptc__data_member(f->shown, sizeof f->shown, path);
    /* O_NONBLOCK: a FIFO in the file's place is refused below instead of waiting for a writer
     * (it changes nothing for a regular file). */
    do {
        f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    } while (f->fd < 0 && errno == EINTR);
    if (f->fd < 0)
        return ptc__err(err, errno == ENOENT ? PTC_ENOTFOUND : PTC_EIO, f->shown, -1,
                        "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return ptc__err(err, PTC_EIO, f->shown, -1, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ptc__err(err, PTC_EIO, f->shown, -1, "not a regular file");
    f->size = (uint64_t)st.st_size;
    int rc = ptc__data_check_dense(f->fd, f->size, f->shown, err);
    if (rc < 0)
        return rc;
    f->in = ptc__malloc(IN_BUFFER);
    if (!f->in)
        return ptc__err(err, PTC_ENOMEM, f->shown, -1, "out of memory for a read buffer");
    f->zs.next_in = f->in;
    if ((rc = fill_in(f, err)) < 0)
        return rc;
    f->gz = f->zs.avail_in >= 2 && f->in[0] == 0x1f && f->in[1] == 0x8b;
    f->limit = f->size;
    if (f->gz) {
        if (!ptc__mul_u64_ok(f->size, PTC__DATA_GZ_RATIO, &f->limit))
            f->limit = UINT64_MAX;
        if (f->limit < PTC__DATA_GZ_FLOOR)
            f->limit = PTC__DATA_GZ_FLOOR;
        f->zs.zalloc = z_alloc;
        f->zs.zfree = z_free;
        int zr = inflateInit2(&f->zs, 15 + 16); /* gzip wrapper only */
        if (zr != Z_OK)
            return ptc__err(err, zr == Z_MEM_ERROR ? PTC_ENOMEM : PTC_EIO, f->shown, -1,
                            "zlib: cannot start inflating (%d)", zr);
        f->zinit = true;
    }
    return 0;
}

static void idx_close(idx_file *f)
{
    if (f->zinit)
        inflateEnd(&f->zs);
    if (f->fd >= 0)
        close(f->fd);
    ptc__free(f->in);
    f->zinit = false;
    f->fd = -1;
    f->in = NULL;
}

/* After a member's end: the next member starts here, or the file ends. */
static int next_member(idx_file *f, ptc_error *err)
{
    int rc;
    if (f->zs.avail_in < 2 && (rc = fill_in(f, err)) < 0)
        return rc;
    if (f->zs.avail_in == 0) {
        f->done = true;
        return 0;
    }
    if (f->zs.avail_in < 2 || f->zs.next_in[0] != 0x1f || f->zs.next_in[1] != 0x8b)
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)in_offset(f),
                        "%llu bytes after the gzip stream (at this offset of the compressed "
                        "file) are not a gzip member",
                        (unsigned long long)(f->size - in_offset(f)));
    if (inflateReset(&f->zs) != Z_OK)
        return ptc__err(err, PTC_EIO, f->shown, (int64_t)in_offset(f), "zlib: cannot reset");
    f->member_end = false;
    return 0;
}

/* Inflates into buf up to n bytes (n < 2^32), adding to *got. */
static int gz_step(idx_file *f, uint8_t *buf, size_t n, size_t *got, ptc_error *err)
{
    int rc;
    if (f->member_end)
        return next_member(f, err);
    if (f->zs.avail_in == 0 && (rc = fill_in(f, err)) < 0)
        return rc;
    f->zs.next_out = buf + *got;
    f->zs.avail_out = (uInt)(n - *got);
    int zr = inflate(&f->zs, Z_NO_FLUSH);
    size_t produced = (n - *got) - f->zs.avail_out;
    *got += produced;
    f->offset += produced;
    if (f->offset > f->limit)
        return ptc__err(err, PTC_ELIMIT, f->shown, (int64_t)f->limit,
                        "inflates to more than %llu bytes, %d times its %llu compressed bytes "
                        "(the limit on the compression ratio)",
                        (unsigned long long)f->limit, PTC__DATA_GZ_RATIO,
                        (unsigned long long)f->size);
    switch (zr) {
    case Z_OK:
        return 0;
    case Z_STREAM_END:
        f->member_end = true;
        return 0;
    case Z_BUF_ERROR: /* no progress: the input is used up */
        if (f->eof && f->zs.avail_in == 0)
            return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset,
                            "gzip stream truncated: the file ends at compressed byte %llu inside "
                            "a member",
                            (unsigned long long)f->size);
        return 0;
    case Z_MEM_ERROR:
        return ptc__err(err, PTC_ENOMEM, f->shown, (int64_t)f->offset, "zlib: out of memory");
    default: /* Z_DATA_ERROR, Z_NEED_DICT: a corrupt stream, a bad CRC or length */
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->offset,
                        "corrupt gzip data at compressed byte %llu: %s",
                        (unsigned long long)in_offset(f), f->zs.msg ? f->zs.msg : "inflate failed");
    }
}

/* Reads up to n bytes (n < 2^31); *got tells how many (fewer only at the end of the content). */
static int idx_read(idx_file *f, void *buf, size_t n, size_t *got, ptc_error *err)
{
    *got = 0;
    int rc;
    while (*got < n && !f->done) {
        if (f->gz) {
            if ((rc = gz_step(f, buf, n, got, err)) < 0)
                return rc;
            continue;
        }
        if (f->zs.avail_in == 0 && (rc = fill_in(f, err)) < 0)
            return rc;
        if (f->zs.avail_in == 0) {
            f->done = true;
            break;
        }
        size_t k = n - *got < f->zs.avail_in ? n - *got : f->zs.avail_in;
        memcpy((uint8_t *)buf + *got, f->zs.next_in, k);
        f->zs.next_in += k;
        f->zs.avail_in -= (uInt)k;
        *got += k;
        f->offset += k;
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

/* The content the header declares (hdr + n * item bytes) against what the file can hold: exactly
 * its size for a plain file, at most the ratio bound for a gzip one. Before any data is read. */
static int check_declared(const idx_file *f, uint64_t hdr, uint64_t n, uint64_t item,
                          const char *what, ptc_error *err)
{
    uint64_t want = n * item + hdr; /* n < 2^32, item <= 784: no overflow */
    if (f->gz) {
        if (want > f->limit)
            return ptc__err(err, PTC_ELIMIT, f->shown, 4,
                            "the header declares %llu %s (%llu bytes), more than %d times the "
                            "%llu bytes of the compressed file (the limit on the compression "
                            "ratio; real IDX files compress less than 3:1)",
                            (unsigned long long)n, what, (unsigned long long)want,
                            PTC__DATA_GZ_RATIO, (unsigned long long)f->size);
        return 0;
    }
    if (f->size < want) {
        if (item == 1)
            return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->size,
                            "truncated: the header declares %llu labels, the file holds %llu",
                            (unsigned long long)n, (unsigned long long)(f->size - hdr));
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)f->size,
                        "truncated: the header declares %llu images, the file ends inside "
                        "image %llu",
                        (unsigned long long)n, (unsigned long long)((f->size - hdr) / item));
    }
    if (f->size > want)
        return ptc__err(err, PTC_EFORMAT, f->shown, (int64_t)want,
                        "bytes after the %s the header declares (%llu bytes, the file holds "
                        "%llu)",
                        what, (unsigned long long)want, (unsigned long long)f->size);
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
    if ((rc = check_declared(im, 16, ni, PTC__IDX_SIDE * PTC__IDX_SIDE, "images", err)) < 0)
        return rc;
    *n = ni;
    if (!lb)
        return 0;

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
    return check_declared(lb, 8, nl, 1, "labels", err);
}

/* Reads the first nread of the n images the header declares, keeping the first keep (presented)
 * in s and counting every pixel into hist (when not NULL). */
static int read_images(idx_file *im, int64_t n, int64_t nread, int64_t keep, uint64_t (*hist)[256],
                       ptc__split *s, ptc_error *err)
{
    const size_t RAW = PTC__IDX_SIDE * PTC__IDX_SIDE;
    uint8_t *raw = ptc__malloc(CHUNK_IMAGES * RAW);
    if (!raw)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory reading images");
    uint64_t gray[256] = {0};
    int64_t cap = 0, done = 0;
    int rc = 0;
    while (done < nread) {
        int64_t k = nread - done < CHUNK_IMAGES ? nread - done : CHUNK_IMAGES;
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
        if (hist)
            for (size_t q = 0; q < (size_t)k * RAW; q++)
                gray[raw[q]]++;
        int64_t kk = done + k <= keep ? k : done < keep ? keep - done : 0; /* kept of these */
        if (kk > 0 && grow(&s->images, &cap, done + kk, keep, PTC__DATA_PIXELS) < 0) {
            rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %lld images",
                          (long long)(done + kk));
            break;
        }
        for (int64_t i = 0; i < kk; i++)
            present(raw + (size_t)i * RAW, s->images + (size_t)(done + i) * PTC__DATA_PIXELS);
        done += k;
    }
    ptc__free(raw);
    if (rc == 0 && nread == n)
        rc = idx_expect_end(im, "images", err);
    if (rc == 0 && hist) {
        /* What ptc__split_stats counts of the presented images: the gray plane in each channel,
         * and the 32x32 - 28x28 padding pixels of every image as zeros. */
        const uint64_t pad = (uint64_t)(PTC__DATA_H * PTC__DATA_W - RAW) * (uint64_t)nread;
        for (int c = 0; c < 3; c++) {
            for (int v = 0; v < 256; v++)
                hist[c][v] += gray[v];
            hist[c][0] += pad;
        }
    }
    return rc;
}

static int read_labels(idx_file *lb, int64_t n, int64_t nread, int64_t keep, ptc__split *s,
                       ptc_error *err)
{
    uint8_t *chunk = ptc__malloc(CHUNK_LABELS);
    if (!chunk)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory reading labels");
    int64_t cap = 0, done = 0;
    int rc = 0;
    while (done < nread) {
        int64_t k = nread - done < CHUNK_LABELS ? nread - done : CHUNK_LABELS;
        size_t got;
        if ((rc = idx_read(lb, chunk, (size_t)k, &got, err)) < 0)
            break;
        for (size_t i = 0; i < got && rc == 0; i++)
            if (chunk[i] >= PTC__DATA_CLASSES)
                rc = ptc__err(err, PTC_EFORMAT, lb->shown, 8 + done + (int64_t)i,
                              "label %lld is %u, not below %d", (long long)(done + (int64_t)i),
                              chunk[i], PTC__DATA_CLASSES);
        if (rc < 0)
            break;
        if (got < (size_t)k) {
            rc = ptc__err(err, PTC_EFORMAT, lb->shown, (int64_t)lb->offset,
                          "truncated: the header declares %lld labels, the file holds %lld",
                          (long long)n, (long long)(done + (int64_t)got));
            break;
        }
        int64_t kk = done + k <= keep ? k : done < keep ? keep - done : 0;
        if (kk > 0 && grow(&s->labels, &cap, done + kk, keep, 1) < 0) {
            rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %lld labels",
                          (long long)(done + kk));
            break;
        }
        if (kk > 0)
            memcpy(s->labels + done, chunk, (size_t)kk);
        done += k;
    }
    ptc__free(chunk);
    if (rc == 0 && nread == n)
        rc = idx_expect_end(lb, "labels", err);
    return rc;
}

int ptc__idx_read(ptc__split *out, const char *images_path, const char *labels_path,
                  int64_t max_samples, ptc_error *err)
{
    ptc__read_params rp = {.max_samples = max_samples, .keep = -1, .hist = NULL};
    return ptc__idx_read_ex(out, images_path, labels_path, &rp, err);
}

int ptc__idx_read_ex(ptc__split *out, const char *images_path, const char *labels_path,
                     const ptc__read_params *rp, ptc_error *err)
{
    if (!out || !images_path || !rp || rp->max_samples < 1 || (!labels_path && rp->keep != 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__idx_read: invalid argument");
    memset(out, 0, sizeof *out);
    idx_file im = {.fd = -1}, lb = {.fd = -1};
    ptc__split s = {0};
    int64_t n = 0;
    int rc;
    if ((rc = idx_open(&im, images_path, err)) < 0 ||
        (labels_path && (rc = idx_open(&lb, labels_path, err)) < 0) ||
        (rc = read_headers(&im, labels_path ? &lb : NULL, rp->max_samples, &n, err)) < 0)
        goto fail;
    int64_t keep = rp->keep >= 0 && rp->keep < n ? rp->keep : n;
    int64_t nread = rp->hist ? n : keep; /* statistics need every image */
    if ((rc = read_images(&im, n, nread, keep, rp->hist, &s, err)) < 0 ||
        (labels_path && (rc = read_labels(&lb, n, nread, keep, &s, err)) < 0))
        goto fail;
    idx_close(&im);
    idx_close(&lb);
    s.n = keep;
    *out = s;
    return 0;
fail:
    idx_close(&im);
    idx_close(&lb);
    ptc__split_free(&s);
    return rc;
}
