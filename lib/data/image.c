/*
 * image.c - images for classification: reading a PNG or JPEG file through the image-codecs
 * module, reading one record of a CIFAR-10 binary or IDX file as an RGB image, and resizing as
 * torchvision's Resize does (lib/data/image.h has the exact definitions).
 *
 * Layout: every image crossing the public API is interleaved 8-bit RGB, [h][w][3], rows top to
 * bottom: what a C program gets from any decoder. The datasets' CHW planes are interleaved here.
 *
 * The resize is float32 arithmetic in a fixed order, as ATen's separable antialiased kernel does
 * it, so that the rounded bytes equal torchvision's (tests/interop/check_predict.py compares them
 * on many sizes, up and down).
 */
#include "data/image.h"

#include "base/plugin.h"
#include "data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- decoding ---------------------------------------------------------------------------------
 */

static int decode(const uint8_t *data, size_t size, const char *shown, uint8_t **rgb, int *h,
                  int *w, ptc_error *err)
{
    const ptc__plugin *mod;
    int rc = ptc__plugin_load(PTC__PLUGIN_IMAGE, "codecs", &mod, err);
    if (rc < 0) {
        ptc__err_prefix(err, "%s: cannot decode images: ", shown);
        return rc;
    }
    const ptc__image_ops *ops = mod->ops;
    return ops->decode(data, size, shown, PTC__IMAGE_MAX_PIXELS, rgb, h, w, err);
}

int ptc_image_decode(const void *data, size_t size, const char *name, uint8_t **rgb, int *h, int *w,
                     ptc_error *err)
{
    ptc__err_clear(err);
    if (rgb)
        *rgb = NULL;
    if (!data || !rgb || !h || !w)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_image_decode: NULL argument");
    char shown[256];
    const char *nm = name ? name : "(image)";
    ptc__escape(shown, sizeof shown, nm, strlen(nm), true);
    return decode(data, size, shown, rgb, h, w, err);
}

int ptc_image_read(const char *path, uint8_t **rgb, int *h, int *w, ptc_error *err)
{
    ptc__err_clear(err);
    if (rgb)
        *rgb = NULL;
    if (!path || !rgb || !h || !w)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_image_read: NULL argument");
    char shown[256];
    ptc__data_member(shown, sizeof shown, path);
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return ptc__err(err, errno == ENOENT ? PTC_ENOTFOUND : PTC_EIO, "", -1,
                        "%s: cannot open: %s", shown, strerror(errno));
    struct stat st;
    uint8_t *buf = NULL;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: cannot stat: %s", shown, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: not a regular file", shown);
        goto done;
    }
    if (st.st_size == 0) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: empty file (0 bytes)", shown);
        goto done;
    }
    if ((uint64_t)st.st_size > PTC__IMAGE_MAX_FILE) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1,
                      "%s: %llu bytes, more than the %llu an image file "
                      "may have",
                      shown, (unsigned long long)st.st_size,
                      (unsigned long long)PTC__IMAGE_MAX_FILE);
        goto done;
    }
    size_t size = (size_t)st.st_size, got = 0;
    if (!(buf = ptc__malloc(size))) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "%s: out of memory for %zu bytes", shown, size);
        goto done;
    }
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = ptc__err(err, PTC_EIO, "", (int64_t)got, "%s: %s", shown,
                          r < 0 ? strerror(errno) : "the file shrank while it was read");
            goto done;
        }
        got += (size_t)r;
    }
    rc = decode(buf, size, shown, rgb, h, w, err);
done:
    ptc__free(buf);
    close(fd);
    return rc;
}

void ptc_image_free(uint8_t *rgb)
{
    ptc__free(rgb);
}

/* ---- dataset records --------------------------------------------------------------------------
 */

/* An IDX images file: its magic (0x00000803, u32 BE), or gzip's, which only an IDX file is here. */
static int looks_idx(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return 0;
    uint8_t m[4];
    ssize_t n = read(fd, m, sizeof m);
    close(fd);
    return n == 4 &&
           ((m[0] == 0 && m[1] == 0 && m[2] == 8 && m[3] == 3) || (m[0] == 0x1f && m[1] == 0x8b));
}

int ptc_image_record(const char *path, int64_t index, uint8_t *rgb, int *label, ptc_error *err)
{
    ptc__err_clear(err);
    if (label)
        *label = -1;
    if (!path || !rgb)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_image_record: NULL argument");
    char shown[256];
    ptc__data_member(shown, sizeof shown, path);
    if (index < 0 || index >= PTC__DATA_MAX_SAMPLES)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: record %lld is out of range", shown,
                        (long long)index);
    int idx = looks_idx(path);
    ptc__read_params rp = {.max_samples = PTC__DATA_MAX_SAMPLES, .keep = index + 1, .hist = NULL};
    ptc__split s = {0};
    int rc = idx ? ptc__idx_read_ex(&s, path, NULL, &rp, err)
                 : ptc__cifar10_read_ex(&s, &path, 1, &rp, err);
    if (rc < 0) {
        /* The readers name the file in err->member; the message says it too. */
        ptc__err_prefix(err, "%s (read as %s): ", shown, idx ? "IDX images" : "CIFAR-10 binary");
        return rc;
    }
    if (s.n <= index) {
        rc = ptc__err(err, PTC_ERANGE, "", -1, "%s: no record %lld: the file has %lld records",
                      shown, (long long)index, (long long)s.n);
        ptc__split_free(&s);
        return rc;
    }
    const uint8_t *im = s.images + (size_t)index * PTC__DATA_PIXELS;
    const int HW = PTC__DATA_H * PTC__DATA_W;
    for (int p = 0; p < HW; p++)
        for (int c = 0; c < 3; c++)
            rgb[p * 3 + c] = im[c * HW + p];
    if (label && s.labels)
        *label = s.labels[index];
    ptc__split_free(&s);
    return 0;
}

/* ---- resize -----------------------------------------------------------------------------------
 */

/* One dimension's taps: output i reads in[min[i] .. min[i] + size[i]) with weights
 * w[i * maxsize ..]. */
typedef struct taps {
    int maxsize;
    int *min, *size;
    float *w;
} taps;

static void taps_free(taps *t)
{
    ptc__free(t->min);
    ptc__free(t->size);
    ptc__free(t->w);
    memset(t, 0, sizeof *t); /* freeing twice (taps_make's failure, then the caller's) is safe */
}

static float aa_filter(float x)
{
    if (x < 0.0f)
        x = -x;
    return x < 1.0f ? (float)(1.0 - x) : 0.0f;
}

/* ATen's HelperInterpBase::_compute_index_ranges_weights for the antialiased linear filter
 * (interp_size 2) in float32, with its mixture of float and double: C's promotion rules give the
 * same roundings as the C++ it is written in (center and the filter's argument are computed in
 * double from float operands and rounded to float once). */
static int taps_make(taps *t, int in, int out)
{
    memset(t, 0, sizeof *t);
    float scale = (float)in / (float)out; /* area_pixel_compute_scale, align_corners = false */
    float support = scale >= 1.0f ? (float)((2 * 0.5) * scale) : (float)(2 * 0.5);
    int maxsize = (int)ceil(support) * 2 + 1;
    float invscale = scale >= 1.0f ? (float)(1.0 / scale) : 1.0f;
    t->maxsize = maxsize;
    t->min = ptc__malloc((size_t)out * sizeof *t->min);
    t->size = ptc__malloc((size_t)out * sizeof *t->size);
    t->w = ptc__calloc((size_t)out * (size_t)maxsize, sizeof *t->w);
    if (!t->min || !t->size || !t->w) {
        taps_free(t);
        return PTC_ENOMEM;
    }
    for (int i = 0; i < out; i++) {
        float center = (float)(scale * (i + 0.5));
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in)
            xmax = in;
        int64_t xsize = xmax - xmin;
        if (xsize < 0)
            xsize = 0;
        if (xsize > maxsize)
            xsize = maxsize;
        float *w = t->w + (size_t)i * maxsize, total = 0.0f;
        for (int64_t j = 0; j < xsize; j++) {
            float arg = (float)(((double)((float)(j + xmin) - center) + 0.5) * invscale);
            w[j] = aa_filter(arg);
            total += w[j];
        }
        if (total != 0.0f)
            for (int64_t j = 0; j < xsize; j++)
                w[j] /= total;
        t->min[i] = (int)xmin;
        t->size[i] = (int)xsize;
    }
    return 0;
}

/* One pass over one dimension: nlines lines of samples, sample k of line l at
 * l * slstride + k * kstride (3 channels interleaved after that) of s8 (the uint8 image, read as
 * floats, which they are exactly: torchvision converts it to float32 first) or of sf, written
 * with out samples per line at l * dlstride + i * dkstride of dst. Reading the bytes in place
 * spares a float copy of the whole input (12 bytes a pixel: 3 GB for a 16000x16000 image). */
static void pass(const uint8_t *s8, const float *sf, float *dst, const taps *t, int nlines,
                 size_t slstride, size_t dlstride, size_t kstride, size_t dkstride, int out)
{
    for (int l = 0; l < nlines; l++)
        for (int i = 0; i < out; i++) {
            const float *w = t->w + (size_t)i * t->maxsize;
            size_t base = (size_t)l * slstride + (size_t)t->min[i] * kstride;
            float *d = dst + (size_t)l * dlstride + (size_t)i * dkstride;
            for (int c = 0; c < 3; c++) {
                /* output = t * w0; output += t * wj: ATen's kernel is compiled for the CPU's
                 * capability (AVX2 / AVX512, with FMA), where the compiler contracts each
                 * += into a fused multiply-add; fmaf gives the same roundings. */
                size_t k0 = base + (size_t)c;
                float acc = (s8 ? (float)s8[k0] : sf[k0]) * w[0];
                for (int j = 1; j < t->size[i]; j++) {
                    size_t k = k0 + (size_t)j * kstride;
                    acc = fmaf(s8 ? (float)s8[k] : sf[k], w[j], acc);
                }
                d[c] = acc;
            }
        }
}

int ptc__image_resize(const uint8_t *src, int h, int w, uint8_t *dst, int oh, int ow,
                      ptc_error *err)
{
    if (!src || !dst || h < 1 || w < 1 || oh < 1 || ow < 1)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "resize: %dx%d to %dx%d: sizes must be at least 1 and images non-NULL", h,
                        w, oh, ow);
    uint64_t in_px = (uint64_t)h * (uint64_t)w, mid_px = (uint64_t)h * (uint64_t)ow,
             out_px = (uint64_t)oh * (uint64_t)ow;
    if (in_px > PTC__IMAGE_MAX_PIXELS || out_px > PTC__IMAGE_MAX_PIXELS ||
        mid_px > PTC__IMAGE_MAX_PIXELS)
        return ptc__err(err, PTC_ELIMIT, "", -1, "resize: %dx%d to %dx%d: more than %llu pixels", h,
                        w, oh, ow, (unsigned long long)PTC__IMAGE_MAX_PIXELS);
    if (h == oh && w == ow) {
        memcpy(dst, src, (size_t)in_px * 3);
        return 0;
    }
    taps tw = {0}, th = {0};
    /* the width pass's result [h][ow][3] and the height pass's [oh][ow][3], each only when that
     * dimension changes */
    float *b = w != ow ? ptc__malloc((size_t)mid_px * 3 * sizeof *b) : NULL;
    float *c = h != oh ? ptc__malloc((size_t)out_px * 3 * sizeof *c) : NULL;
    int rc = 0;
    if ((w != ow && (!b || taps_make(&tw, w, ow) < 0)) ||
        (h != oh && (!c || taps_make(&th, h, oh) < 0))) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "resize: out of memory for %dx%d to %dx%d", h, w, oh,
                      ow);
        goto done;
    }
    /* The width first (the contiguous dimension of a CHW tensor), then the height. */
    const float *cur = NULL;
    if (w != ow) {
        pass(src, NULL, b, &tw, h, (size_t)w * 3, (size_t)ow * 3, 3, 3, ow);
        cur = b;
    }
    if (h != oh) {
        /* lines are columns: sample k of column l at l * 3 + k * ow * 3 */
        pass(cur ? NULL : src, cur, c, &th, ow, 3, 3, (size_t)ow * 3, (size_t)ow * 3, oh);
        cur = c;
    }
    for (size_t i = 0; i < (size_t)out_px * 3; i++) {
        float v = nearbyintf(cur[i]); /* torch.round: half to even */
        dst[i] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
    }
done:
    taps_free(&tw);
    taps_free(&th);
    ptc__free(b);
    ptc__free(c);
    return rc;
}

int ptc_image_resize(const uint8_t *src, int h, int w, uint8_t *dst, int oh, int ow, ptc_error *err)
{
    ptc__err_clear(err);
    return ptc__image_resize(src, h, w, dst, oh, ow, err);
}
