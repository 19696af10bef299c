/*
 * augment.cu - the tutorial's augmentation on the device: random crop with zero padding,
 * horizontal flip and normalisation (through the host's table), from the uint8 dataset held in
 * GPU memory into an NHWC float batch. One thread per output float, the 3 channels innermost as
 * the output is laid out; the element is kmath.h's ptc_km_augment (ptc__augment_image's bits).
 */
#include "kcommon.cuh"

static __global__ void
augment_kernel(const uint8_t *__restrict__ images, int h, int w, int pad,
               const int32_t *__restrict__ idx, const int8_t *__restrict__ top,
               const int8_t *__restrict__ left, const uint8_t *__restrict__ flip,
               const float *__restrict__ lut, float *__restrict__ out, int64_t total)
{
    const int64_t plane = (int64_t)h * w * 3;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int ch = (int)(i % 3);
        int64_t r = i / 3;
        const int ox = (int)(r % w);
        r /= w;
        const int y = (int)(r % h);
        const int64_t s = r / h;
        const uint8_t *img = images + (int64_t)idx[s] * plane;
        out[i] = ptc_km_augment(img, h, w, pad, top[s], left[s], flip[s] != 0, lut, y, ox, ch);
    }
}

extern "C" int ptc_k_augment(const uint8_t *images, int h, int w, int pad, const int32_t *idx,
                             const int8_t *top, const int8_t *left, const uint8_t *flip, int n,
                             const float *lut, float *out, void *stream)
{
    const int64_t total = (int64_t)n * h * w * 3;
    if (total <= 0)
        return 0;
    augment_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(
        images, h, w, pad, idx, top, left, flip, lut, out, total);
    return ptc_k_status();
}
