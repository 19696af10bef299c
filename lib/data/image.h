/*
 * image.h - decoding PNG and JPEG files into 8-bit RGB, and resizing RGB images as torchvision's
 * Resize does: the internal side of ptc_image_read / ptc_image_decode / ptc_image_resize
 * (lib/ptc/ptc.h).
 *
 * The decoders need libpng and libjpeg-turbo, which libptc does not link (DESIGN.md decision 11):
 * they live in the module image-codecs.so (lib/data/codecs.c), which lib/data/image.c loads on the
 * first decode through lib/base/plugin.h. A program that never decodes an image never maps either
 * library. The module gets the file's bytes, never its path: reading the file, and the cap on its
 * size, stay in libptc.
 *
 * What "decode" means is torchvision.io.decode_image(data, mode=ImageReadMode.RGB) of torchvision
 * 0.21 followed, for 16-bit PNGs, by ToDtype(torch.uint8, scale=True) (the high byte):
 *   PNG   grey (1, 2, 4, 8, 16 bits) replicated to three channels; palette expanded to RGB; alpha
 *         (and a tRNS chunk) dropped, never composited; 16-bit samples reduced to their high
 *         byte; interlaced images de-interlaced; no gamma or colour-profile correction.
 *   JPEG  libjpeg-turbo's defaults (the islow integer IDCT, fancy upsampling) with output in RGB
 *         (grey replicated, YCbCr converted by the library); CMYK/YCCK converted as torchvision
 *         does (r = c * k / 255, truncating; Adobe's inverted storage, which is what every
 *         CMYK JPEG writer emits); EXIF orientation is not applied (torchvision's default).
 */
#ifndef PTC_DATA_IMAGE_H
#define PTC_DATA_IMAGE_H

#include "base/base.h"

/* The most pixels a decoded image may have (2^28: 768 MiB of RGB); a header declaring more is
 * refused with PTC_ELIMIT before anything is allocated for it. */
#define PTC__IMAGE_MAX_PIXELS ((uint64_t)1 << 28)
/* The largest file ptc_image_read reads (1 GiB): more is refused with PTC_ELIMIT. */
#define PTC__IMAGE_MAX_FILE ((uint64_t)1 << 30)

/* The module's operations (ptc__plugin.ops of the module PTC__PLUGIN_IMAGE "codecs"). */
typedef struct ptc__image_ops {
    /* Decodes the PNG or JPEG in data[0..size) (told apart by their signatures) into a new
     * [h][w][3] uint8 array (ptc__malloc: free with ptc__free). name: what messages call the
     * input (escaped by the caller). Refuses, with the reason in err:
     *   PTC_EUNSUPPORTED  neither a PNG nor a JPEG signature; a colour space it cannot convert
     *   PTC_EFORMAT       a corrupt or truncated file (libpng's or libjpeg's message)
     *   PTC_ELIMIT        more than max_pixels pixels, or (PNG) more pixel data than the file's
     *                     size can hold (deflate cannot expand more than 1032:1), or (JPEG) more
     *                     than 1 GiB of libjpeg's working memory (a huge progressive image)
     *   PTC_ENOMEM
     * On failure *rgb is NULL. Several threads may decode at once. */
    int (*decode)(const uint8_t *data, size_t size, const char *name, uint64_t max_pixels,
                  uint8_t **rgb, int *h, int *w, ptc_error *err);
} ptc__image_ops;

/* Resizes src [h][w][3] to dst [oh][ow][3] as torchvision 0.21's Resize((oh, ow),
 * InterpolationMode.BILINEAR, antialias=True) does to a uint8 CHW tensor on a CPU whose
 * torch.backends.cpu.get_cpu_capability() is not "AVX2" (it is "AVX512" on current servers, and
 * "DEFAULT" elsewhere): the image is converted to float32, resampled by torch's separable
 * antialiased bilinear kernel (a triangle filter widened by the scale when shrinking, weights
 * normalised to sum 1, computed in float32 exactly as ATen's UpSampleKernel.cpp does; width first,
 * then height, a dimension whose size does not change is not touched), rounded half to even and
 * stored as uint8. (On an AVX2-only CPU torchvision takes ATen's native uint8 path instead, whose
 * fixed-point weights can differ from this by one level.) Equal sizes copy. PTC_EINVAL for sizes
 * < 1; PTC_ENOMEM. */
int ptc__image_resize(const uint8_t *src, int h, int w, uint8_t *dst, int oh, int ow,
                      ptc_error *err);

#endif /* PTC_DATA_IMAGE_H */
