/*
 * augment.c - RandomCrop(32, padding=4) + RandomHorizontalFlip() + ToTensor() + Normalize() of the
 * PyTorch CIFAR-10 tutorial, on one 3x32x32 uint8 image (the contract is in data.h).
 *
 * Normalization goes through a table of 256 floats per channel, each computed exactly as torch
 * computes it for a tensor element: ToTensor divides the float32 value by 255 in float32, and
 * Normalize subtracts the float32 mean and divides by the float32 std (sub_ then div_, two
 * correctly rounded float32 operations; no reciprocal, no fused multiply-add). A pixel of the
 * zero padding is the table's entry for 0.
 */
#include "data/data.h"

void ptc__normalizer_init(ptc__normalizer *nz, const double mean[3], const double std[3])
{
    for (int c = 0; c < 3; c++) {
        /* torch.as_tensor(mean, dtype=float32): each constant rounded to float32 first. */
        volatile float m = (float)mean[c], s = (float)std[c];
        for (int v = 0; v < 256; v++) {
            /* volatile keeps each step a separate float32 operation whatever the compiler's
             * contraction or excess-precision settings. */
            volatile float x = (float)v / 255.0f;
            volatile float d = x - m;
            nz->lut[c][v] = d / s;
        }
    }
}

void ptc__augment_image(const ptc__normalizer *nz, const uint8_t *src, int top, int left, bool flip,
                        float *dst)
{
    enum { H = PTC__DATA_H, W = PTC__DATA_W, PAD = 4 };
    /* Output pixel (y, x) shows padded pixel (y + top, x + left), i.e. source pixel
     * (y + top - 4, x + left - 4) when that lies inside the image, else padding. With flip the
     * window column x shows output column W - 1 - x. */
    int dy = top - PAD, dx = left - PAD;
    for (int c = 0; c < 3; c++) {
        const float *lut = nz->lut[c];
        const uint8_t *plane = src + c * H * W;
        float *out = dst + c * H * W;
        for (int y = 0; y < H; y++) {
            float *row = out + y * W;
            int sy = y + dy;
            if (sy < 0 || sy >= H) {
                for (int x = 0; x < W; x++)
                    row[x] = lut[0];
                continue;
            }
            const uint8_t *srow = plane + sy * W;
            for (int x = 0; x < W; x++) {
                int sx = x + dx;
                float v = (sx >= 0 && sx < W) ? lut[srow[sx]] : lut[0];
                row[flip ? W - 1 - x : x] = v;
            }
        }
    }
}

void ptc__augment_draw(uint64_t seed, uint64_t rank, uint64_t epoch, int64_t index, int *top,
                       int *left, bool *flip)
{
    ptc__rng r;
    uint64_t words[4] = {seed, rank, epoch, (uint64_t)index};
    ptc__rng_init(&r, PTC__RNG_TAG_AUGMENT, words, 4);
    *top = (int)ptc__rng_below(&r, 9);
    *left = (int)ptc__rng_below(&r, 9);
    *flip = (ptc__rng_next(&r) >> 63) != 0;
}
