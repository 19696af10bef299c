/*
 * codecs.c - the module image-codecs.so: PNG (libpng) and JPEG (libjpeg-turbo) decoding into 8-bit
 * RGB, with the conversions torchvision.io.decode_image(mode=RGB) applies (lib/data/image.h).
 *
 * It is a module, not part of libptc, so that only a program that decodes images maps libpng and
 * libjpeg (DESIGN.md decision 11). It decodes from memory: libptc reads the file.
 *
 * Hostile input: both libraries report errors by calling a function that must not return; here it
 * records the library's message and longjmp()s back to the one exit of the decoder, which frees
 * everything. Every size is checked before allocation: the pixel count against max_pixels and,
 * for PNG, the decompressed size against what deflate can make of the file's bytes (at most 1032
 * bytes per input byte), so that a 100-byte file declaring 16000 x 16000 pixels is refused before
 * the 768 MB it would need are allocated. libjpeg's own working memory is capped too
 * (max_memory_to_use), and a JPEG that ends before its last scan (libjpeg's "Premature end of JPEG
 * file" warning, after which it would fill the rest with grey) is an error, as are corrupt-data
 * warnings, which libjpeg would otherwise only print, and so is a progressive JPEG of more than
 * JPEG_MAX_SCANS scans (each scan is a pass over the whole image: a small file could hold enough
 * of them to keep a decoder busy for minutes).
 */
#include "config.h"

#include "base/module.h"
#include "data/image.h"

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

/* How much libjpeg may allocate for its own tables and coefficient buffers: 1 GiB. A progressive
 * image keeps all its coefficients, 2 bytes per pixel per component (6 bytes per pixel at 4:4:4,
 * 3 at 4:2:0), and a file of a few hundred kilobytes can declare enough pixels to need gigabytes:
 * past this, libjpeg stops with JERR_NO_BACKING_STORE, reported as the limit it is. Every
 * baseline image and progressive ones up to 170 M pixels at 4:4:4 (340 M at 4:2:0) fit. */
#define JPEG_MAX_MEMORY ((long)1 << 30)
/* The most scans a progressive JPEG may have (libjpeg-turbo's own advice for untrusted input, as
 * djpeg -maxscan): a file of a few kilobytes can otherwise hold tens of thousands of tiny scans,
 * each of which costs a pass over the whole image. Real encoders write about ten. */
#define JPEG_MAX_SCANS 1000

static int is_png(const uint8_t *d, size_t n)
{
    return n >= 8 && png_sig_cmp((png_const_bytep)d, 0, 8) == 0;
}

static int is_jpeg(const uint8_t *d, size_t n)
{
    return n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff;
}

/* ---- PNG --------------------------------------------------------------------------------------
 */

typedef struct png_ctx {
    jmp_buf jb;
    const uint8_t *data;
    size_t size, pos;
    char msg[200];
} png_ctx;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg ? msg : "error");
    longjmp(c->jb, 1);
}

/* Warnings (an unknown critical-looking chunk, a bad CRC in an ancillary chunk libpng skips) do
 * not change the pixels torchvision gets either; they are not printed. */
static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
    png_ctx *c = png_get_io_ptr(png);
    if (n > c->size - c->pos)
        png_error(png, "the file ends early (truncated)");
    memcpy(out, c->data + c->pos, n);
    c->pos += n;
}

static int decode_png(const uint8_t *data, size_t size, const char *name, uint64_t max_pixels,
                      uint8_t **rgb, int *ph, int *pw, ptc_error *err)
{
    /* volatile: they change between setjmp and a longjmp back to it. */
    png_ctx c = {.data = data, .size = size, .pos = 0};
    png_structp volatile png = NULL;
    png_infop volatile info = NULL;
    uint8_t *volatile out = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = 0;
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, png_on_error, png_on_warning);
    if (!png || !(info = png_create_info_struct(png))) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "%s: out of memory starting libpng", name);
        goto done;
    }
    if (setjmp(c.jb)) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: corrupt PNG (at byte %zu): %s", name, c.pos,
                      c.msg);
        goto done;
    }
    png_set_read_fn(png, &c, png_read_mem);
    /* libpng's own limits: no dimension beyond what max_pixels allows in a row, no ancillary chunk
     * (text, ICC profile) above 8 MiB. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_malloc_max(png, (png_alloc_size_t)8 << 20);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
    int interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;
    uint64_t pixels = (uint64_t)w * h;
    if (w == 0 || h == 0) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: PNG of %ux%u pixels (an empty image)", name,
                      (unsigned)w, (unsigned)h);
        goto done;
    }
    if (pixels > max_pixels || w > 0x7fffffff || h > 0x7fffffff) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1,
                      "%s: PNG of %ux%u pixels: more than the %llu pixels an image may have", name,
                      (unsigned)w, (unsigned)h, (unsigned long long)max_pixels);
        goto done;
    }
    /* The filtered data that the IDAT stream must inflate to: a filter byte and the packed samples
     * per row (per pass when interlaced: a few rows more, bounded by the 1.1 below). */
    int channels = png_get_channels(png, info);
    uint64_t raw = (uint64_t)h * (1 + ((uint64_t)w * (uint64_t)channels * (uint64_t)depth + 7) / 8);
    if (raw / 1100 > (uint64_t)size + 65536) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1,
                      "%s: PNG of %ux%u pixels cannot be held by a file of %zu bytes (deflate "
                      "expands at most 1032:1): truncated or corrupt",
                      name, (unsigned)w, (unsigned)h, size);
        goto done;
    }
    if (type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    if (depth == 16)
        png_set_strip_16(png); /* the high byte: ToDtype(uint8, scale=True) shifts right by 8 */
    /* Alpha is dropped, not composited; png_set_palette_to_rgb expands a tRNS chunk to alpha,
     * which goes the same way. */
    png_set_strip_alpha(png);
    if (interlaced)
        (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
        png_get_rowbytes(png, info) != (size_t)w * 3) {
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: PNG colour type %d at %d bits did not convert to 8-bit RGB", name, type,
                      depth);
        goto done;
    }
    out = ptc__malloc((size_t)pixels * 3);
    rows = ptc__malloc((size_t)h * sizeof *rows);
    if (!out || !rows) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "%s: out of memory for %ux%u pixels", name,
                      (unsigned)w, (unsigned)h);
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = out + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    *rgb = out;
    out = NULL;
    *ph = (int)h;
    *pw = (int)w;
done:
    ptc__free(rows);
    ptc__free(out);
    if (png) {
        png_structp p = png;
        png_infop i = info;
        png_destroy_read_struct(&p, i ? &i : NULL, NULL);
    }
    return rc;
}

/* ---- JPEG -------------------------------------------------------------------------------------
 */

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub;
    struct jpeg_progress_mgr progress;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_ctx;

static void jpeg_on_error(j_common_ptr cinfo)
{
    jpeg_ctx *c = (jpeg_ctx *)cinfo->err;
    c->pub.format_message(cinfo, c->msg);
    longjmp(c->jb, 1);
}

/* Warnings (level -1) are corrupt data that libjpeg papers over: a file that ends early (the rest
 * of the image grey), a damaged entropy-coded segment. They are errors here; trace messages
 * (level >= 0) are ignored. */
static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    if (level < 0)
        jpeg_on_error(cinfo);
}

static void jpeg_on_progress(j_common_ptr cinfo)
{
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > JPEG_MAX_SCANS) {
        jpeg_ctx *c = (jpeg_ctx *)cinfo->err;
        snprintf(c->msg, sizeof c->msg, "more than %d scans (a scan bomb?)", JPEG_MAX_SCANS);
        longjmp(c->jb, 1);
    }
}

static int decode_jpeg(const uint8_t *data, size_t size, const char *name, uint64_t max_pixels,
                       uint8_t **rgb, int *ph, int *pw, ptc_error *err)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_ctx c;
    uint8_t *volatile out = NULL;
    uint8_t *volatile line = NULL;
    volatile int created = 0;
    volatile int rc = 0;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&c.pub);
    c.pub.error_exit = jpeg_on_error;
    c.pub.emit_message = jpeg_on_message;
    if (setjmp(c.jb)) {
        if (c.pub.msg_code == JERR_NO_BACKING_STORE)
            rc = ptc__err(err, PTC_ELIMIT, "", -1,
                          "%s: JPEG of %ux%u pixels: decoding it needs more than the %ld MiB of "
                          "working memory a JPEG may use (a progressive file keeps every "
                          "coefficient)",
                          name, (unsigned)cinfo.image_width, (unsigned)cinfo.image_height,
                          JPEG_MAX_MEMORY >> 20);
        else
            rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: corrupt JPEG: %s", name, c.msg);
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    cinfo.mem->max_memory_to_use = JPEG_MAX_MEMORY;
    c.progress.progress_monitor = jpeg_on_progress;
    cinfo.progress = &c.progress;
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    uint64_t pixels = (uint64_t)cinfo.image_width * cinfo.image_height;
    if (pixels == 0) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: JPEG of %ux%u pixels (an empty image)", name,
                      (unsigned)cinfo.image_width, (unsigned)cinfo.image_height);
        goto done;
    }
    if (pixels > max_pixels) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1,
                      "%s: JPEG of %ux%u pixels: more than the %llu pixels an image may have", name,
                      (unsigned)cinfo.image_width, (unsigned)cinfo.image_height,
                      (unsigned long long)max_pixels);
        goto done;
    }
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    int comps = cinfo.output_components;
    if (comps != (cmyk ? 4 : 3)) {
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                      "%s: JPEG colour space %d gives %d components, not RGB", name,
                      (int)cinfo.jpeg_color_space, comps);
        goto done;
    }
    size_t w = cinfo.output_width, h = cinfo.output_height;
    out = ptc__malloc(w * h * 3);
    line = ptc__malloc(w * (size_t)comps);
    if (!out || !line) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "%s: out of memory for %zux%zu pixels", name, w, h);
        goto done;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        size_t y = cinfo.output_scanline;
        JSAMPROW row = cmyk ? line : out + y * w * 3;
        if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
            rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: corrupt JPEG: no data for row %zu", name,
                          y);
            goto done;
        }
        if (cmyk) /* torchvision's convert_line_cmyk_to_rgb: Adobe's inverted CMYK */
            for (size_t x = 0; x < w; x++) {
                int k = line[4 * x + 3];
                for (int ch = 0; ch < 3; ch++)
                    out[(y * w + x) * 3 + ch] = (uint8_t)(line[4 * x + ch] * k / 255);
            }
    }
    jpeg_finish_decompress(&cinfo);
    *rgb = out;
    out = NULL;
    *ph = (int)h;
    *pw = (int)w;
done:
    if (created)
        jpeg_destroy_decompress(&cinfo);
    ptc__free(line);
    ptc__free(out);
    return rc;
}

/* ---- the module -------------------------------------------------------------------------------
 */

static int decode(const uint8_t *data, size_t size, const char *name, uint64_t max_pixels,
                  uint8_t **rgb, int *h, int *w, ptc_error *err)
{
    *rgb = NULL;
    *h = *w = 0;
    ptc__err_clear(err);
    if (is_png(data, size))
        return decode_png(data, size, name, max_pixels, rgb, h, w, err);
    if (is_jpeg(data, size))
        return decode_jpeg(data, size, name, max_pixels, rgb, h, w, err);
    return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                    "%s: not a PNG or JPEG file (its first bytes are neither signature)", name);
}

static const ptc__image_ops ops = {.decode = decode};

static const ptc__plugin desc = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_IMAGE,
    .name = "codecs",
    .summary = "PNG (libpng) and JPEG (libjpeg-turbo) decoding",
    .experimental = 0,
    .ops = &ops,
    .probe = NULL,
};

PTC__DEFINE_PLUGIN_ENTRY(desc)
