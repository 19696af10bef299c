/*
 * test_image.c - lib/data/image.c and the image-codecs module: the resize's arithmetic on cases
 * worked by hand, its limits; decoding a known PNG; every refusal of a hostile or broken input
 * (code and message); dataset records as RGB; the module missing; and each allocation failing in
 * turn (ENOMEM, nothing leaked). The comparison with torchvision on real images is
 * tests/interop/check_predict.py's.
 *
 * make check sets PTC_PLUGIN_PATH to the build tree's lib/.libs, where image-codecs.so is.
 */
#include "config.h"

#include "data/image.h"

#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_resize(void)
{
    ptc_error err;
    /* one row 0 0 140 140 to two pixels: weights (0.75 0.75 0.25)/1.75 and
     * (0.25 0.75 0.75)/1.75 (the triangle widened by the scale 2), so 20 and 120 */
    uint8_t row[4 * 3], out[2 * 3];
    for (int x = 0; x < 4; x++)
        for (int c = 0; c < 3; c++)
            row[x * 3 + c] = x < 2 ? 0 : 140;
    CHECK_INT(ptc_image_resize(row, 1, 4, out, 1, 2, &err), 0);
    CHECK_INT(out[0], 20);
    CHECK_INT(out[3], 120);
    CHECK_INT(out[5], 120);
    /* a constant image stays constant, up and down, odd sizes */
    static const int sizes[][4] = {
        {1, 1, 32, 32}, {7, 9, 32, 32}, {100, 80, 32, 33}, {32, 32, 224, 200}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int h = sizes[s][0], w = sizes[s][1], oh = sizes[s][2], ow = sizes[s][3];
        uint8_t *a = malloc((size_t)h * w * 3), *b = malloc((size_t)oh * ow * 3);
        for (int i = 0; i < h * w * 3; i++)
            a[i] = (uint8_t)(i % 3 == 0 ? 201 : i % 3 == 1 ? 7 : 255);
        CHECK_INT(ptc_image_resize(a, h, w, b, oh, ow, &err), 0);
        int off = 0;
        for (int i = 0; i < oh * ow * 3; i++)
            off += b[i] != (i % 3 == 0 ? 201 : i % 3 == 1 ? 7 : 255);
        CHECK_INT(off, 0);
        free(a);
        free(b);
    }
    /* the same size copies */
    uint8_t same[4 * 3];
    CHECK_INT(ptc_image_resize(row, 1, 4, same, 1, 4, &err), 0);
    CHECK(memcmp(same, row, sizeof row) == 0);
    /* refusals, before any allocation */
    CHECK_CODE(ptc_image_resize(row, 0, 4, out, 1, 2, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_image_resize(row, 1, 4, out, 1, -2, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_image_resize(NULL, 1, 4, out, 1, 2, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_image_resize(row, 1 << 20, 1 << 10, out, 1, 2, &err), PTC_ELIMIT, &err);
    CHECK_CODE(ptc_image_resize(row, 1, 4, out, 1 << 15, 1 << 15, &err), PTC_ELIMIT, &err);
}

static void test_records(void)
{
    char dir[] = "/tmp/ptc-test-image.XXXXXX", path[64], ipath[64];
    ptc_error err;
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    /* two CIFAR-10 records: label, then R, G, B planes */
    snprintf(path, sizeof path, "%s/batch.bin", dir);
    FILE *f = fopen(path, "wb");
    for (int r = 0; r < 2; r++) {
        fputc(7 + r, f);
        for (int i = 0; i < 3072; i++)
            fputc((i / 1024) * 50 + r + (i % 1024) % 7, f);
    }
    fclose(f);
    uint8_t rgb[32 * 32 * 3];
    int label;
    CHECK_INT(ptc_image_record(path, 1, rgb, &label, &err), 0);
    CHECK_INT(label, 8);
    CHECK_INT(rgb[0], 1);           /* pixel 0, R */
    CHECK_INT(rgb[1], 51);          /* pixel 0, G */
    CHECK_INT(rgb[3 * 5 + 2], 106); /* pixel 5, B: 100 + 1 + 5 */
    CHECK_CODE(ptc_image_record(path, 2, rgb, &label, &err), PTC_ERANGE, &err);
    CHECK(strstr(err.message, "the file has 2 records") != NULL);
    CHECK_CODE(ptc_image_record(path, -1, rgb, &label, &err), PTC_EINVAL, &err);
    /* an IDX file of one 28x28 image: padded by 2, grey replicated */
    snprintf(ipath, sizeof ipath, "%s/images-idx3-ubyte", dir);
    f = fopen(ipath, "wb");
    static const uint8_t hdr[16] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28};
    fwrite(hdr, 1, sizeof hdr, f);
    for (int i = 0; i < 784; i++)
        fputc(i % 251 + 1, f);
    fclose(f);
    CHECK_INT(ptc_image_record(ipath, 0, rgb, &label, &err), 0);
    CHECK_INT(label, -1);
    CHECK_INT(rgb[0], 0);                    /* padding */
    CHECK_INT(rgb[(2 * 32 + 2) * 3 + 0], 1); /* the image's first pixel, R */
    CHECK_INT(rgb[(2 * 32 + 2) * 3 + 2], 1); /* ... B */
    CHECK_INT(rgb[(2 * 32 + 3) * 3 + 1], 2);
    CHECK_CODE(ptc_image_record(ipath, 1, rgb, &label, &err), PTC_ERANGE, &err);
    /* a file of no known length: 100 bytes is not a multiple of 3073 */
    f = fopen(path, "wb");
    for (int i = 0; i < 100; i++)
        fputc(0, f);
    fclose(f);
    CHECK_CODE(ptc_image_record(path, 0, rgb, &label, &err), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "batch.bin") != NULL);
    /* the reader's own message follows the prefix after ": ", not glued to it */
    if (!strstr(err.message, "(read as CIFAR-10 binary): "))
        fprintf(stderr, "message: %s\n", err.message);
    CHECK(strstr(err.message, "(read as CIFAR-10 binary): ") != NULL);
    unlink(path);
    unlink(ipath);
    rmdir(dir);
}

#ifdef PTC_HAVE_CODECS
/* A 1x1 RGB PNG of the pixel (0x10, 0x80, 0xf0). */
static const uint8_t png1[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
    0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00,
    0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78,
    0x9c, 0x63, 0x10, 0x68, 0xf8, 0x00, 0x00, 0x02, 0x24, 0x01, 0x81, 0x6f, 0x91, 0xe4,
    0x64, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

static int decode(const void *d, size_t n, ptc_error *err, int *h, int *w, uint8_t px[3])
{
    uint8_t *rgb = NULL;
    int rc = ptc_image_decode(d, n, "test.png", &rgb, h, w, err);
    if (rc == 0 && px)
        memcpy(px, rgb, 3);
    CHECK(rc == 0 ? rgb != NULL : rgb == NULL);
    ptc_image_free(rgb);
    return rc;
}

static void test_decode(void)
{
    ptc_error err;
    int h, w;
    uint8_t px[3], buf[sizeof png1];
    CHECK_INT(decode(png1, sizeof png1, &err, &h, &w, px), 0);
    CHECK_INT(h, 1);
    CHECK_INT(w, 1);
    CHECK_INT(px[0], 0x10);
    CHECK_INT(px[1], 0x80);
    CHECK_INT(px[2], 0xf0);
    /* every truncation is refused, none crashes */
    int refused = 0;
    for (size_t n = 0; n < sizeof png1; n++)
        refused += decode(png1, n, &err, &h, &w, NULL) < 0;
    CHECK_INT(refused, (int)sizeof png1);
    CHECK_CODE(decode(png1, 40, &err, &h, &w, NULL), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "test.png: corrupt PNG") != NULL);
    /* a damaged CRC of IHDR */
    memcpy(buf, png1, sizeof buf);
    buf[30] ^= 1;
    CHECK_CODE(decode(buf, sizeof buf, &err, &h, &w, NULL), PTC_EFORMAT, &err);
    /* IHDR declaring 65535 x 65535 (CRC made right): refused before any pixel is allocated */
    memcpy(buf, png1, sizeof buf);
    memcpy(buf + 16, "\0\0\xff\xff\0\0\xff\xff", 8);
    uint32_t crc = ptc__crc32(0, buf + 12, 17);
    buf[29] = (uint8_t)(crc >> 24), buf[30] = (uint8_t)(crc >> 16);
    buf[31] = (uint8_t)(crc >> 8), buf[32] = (uint8_t)crc;
    CHECK_CODE(decode(buf, sizeof buf, &err, &h, &w, NULL), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "65535x65535") != NULL);
    CHECK_CODE(decode("GIF89a", 6, &err, &h, &w, NULL), PTC_EUNSUPPORTED, &err);
    CHECK(strstr(err.message, "not a PNG or JPEG") != NULL);
    CHECK_CODE(decode("\xff\xd8\xff", 3, &err, &h, &w, NULL), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "corrupt JPEG") != NULL);
    uint8_t *rgb;
    CHECK_CODE(ptc_image_decode(NULL, 1, "x", &rgb, &h, &w, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_image_read(NULL, &rgb, &h, &w, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_image_read("/nonexistent/x.png", &rgb, &h, &w, &err), PTC_ENOTFOUND, &err);
    CHECK(strstr(err.message, "x.png") != NULL);
    CHECK_CODE(ptc_image_read("/", &rgb, &h, &w, &err), PTC_EIO, &err);
    CHECK_CODE(ptc_image_read("/dev/null", &rgb, &h, &w, &err), PTC_EIO, &err);
}

/* The allocator of the sweep: fails the allocation numbered fail_at, counts what is live. */
static long n_allocs, fail_at = -1, live;

static void *sweep_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size == 0) {
        if (ptr)
            live--;
        free(ptr);
        return NULL;
    }
    if (n_allocs++ == fail_at)
        return NULL;
    void *p = realloc(ptr, size);
    if (p && !ptr)
        live++;
    return p;
}

static void test_alloc_fail(void)
{
    ptc_error err;
    int h, w, ok = 0, nomem = 0, other = 0;
    uint8_t a[10 * 12 * 3], b[5 * 7 * 3];
    memset(a, 9, sizeof a);
    ptc_set_allocator(sweep_realloc, NULL);
    for (fail_at = 0; fail_at < 40; fail_at++) {
        n_allocs = 0;
        live = 0;
        int rc = decode(png1, sizeof png1, &err, &h, &w, NULL);
        int rc2 = ptc_image_resize(a, 10, 12, b, 5, 7, &err);
        CHECK_INT(live, 0);
        if (rc == 0 && rc2 == 0)
            ok++;
        else if ((rc == 0 || rc == PTC_ENOMEM) && (rc2 == 0 || rc2 == PTC_ENOMEM))
            nomem++;
        else
            other++;
    }
    ptc_set_allocator(NULL, NULL);
    CHECK(nomem > 0);
    CHECK(ok > 0); /* past the last allocation everything succeeds */
    CHECK_INT(other, 0);
    printf("allocation sweep: %d runs with a failure refused as ENOMEM, %d past the last "
           "allocation, nothing leaked\n",
           nomem, ok);
}

#endif /* PTC_HAVE_CODECS */

int main(void)
{
    test_resize();
    test_records();
#ifdef PTC_HAVE_CODECS
    /* the module, first from nowhere: a clear refusal; then from make check's PTC_PLUGIN_PATH */
    const char *path = getenv("PTC_PLUGIN_PATH");
    char *saved = path ? strdup(path) : NULL;
    ptc_error err;
    int h, w;
    setenv("PTC_PLUGIN_PATH", "/nonexistent", 1);
    CHECK_CODE(decode(png1, sizeof png1, &err, &h, &w, NULL), PTC_ENOTFOUND, &err);
    CHECK(strstr(err.message, "test.png: cannot decode images") != NULL);
    CHECK(strstr(err.message, "image-codecs.so") != NULL);
    if (saved)
        setenv("PTC_PLUGIN_PATH", saved, 1);
    else
        unsetenv("PTC_PLUGIN_PATH");
    free(saved);
    test_decode();
    test_alloc_fail();
#else
    printf("configured without libpng/libjpeg: decoding is not tested (the module is not built)\n");
#endif
    return check_exit("test_image");
}
