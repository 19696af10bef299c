/*
 * pool.cu - max pooling (forward with argmax, backward as a gather) and the global average pool,
 * NHWC. One thread per output element (per input element for max pool's backward), the channel
 * innermost so that a warp reads consecutive addresses; the arithmetic is kmath.h's, ref's bits.
 */
#include "kcommon.cuh"

static __global__ void maxpool_fwd_kernel(const float *__restrict__ x, float *__restrict__ y,
                                          int32_t *__restrict__ argmax, ptc_km_pool s,
                                          int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int ch = (int)(i % s.c);
        int64_t r = i / s.c;
        int ow = (int)(r % s.ow);
        r /= s.ow;
        int oh = (int)(r % s.oh);
        int n = (int)(r / s.oh);
        float m;
        argmax[i] = ptc_km_maxpool_win(&s, x, n, oh, ow, ch, &m);
        y[i] = m;
    }
}

static __global__ void maxpool_bwd_kernel(const float *__restrict__ dy,
                                          const int32_t *__restrict__ argmax,
                                          float *__restrict__ dx, ptc_km_pool s, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int ch = (int)(i % s.c);
        int64_t r = i / s.c;
        int ix = (int)(r % s.w);
        r /= s.w;
        int iy = (int)(r % s.h);
        int n = (int)(r / s.h);
        dx[i] = ptc_km_maxpool_bwd_elem(&s, dy, argmax, n, iy, ix, ch);
    }
}

static __global__ void avgpool_fwd_kernel(const float *__restrict__ x, float *__restrict__ y, int n,
                                          int c, int hw)
{
    const int64_t total = (int64_t)n * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_avgpool(x, (int)(i / c), c, hw, (int)(i % c));
}

static __global__ void avgpool_bwd_kernel(const float *__restrict__ dy, float *__restrict__ dx,
                                          int c, int hw, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / ((int64_t)hw * c);
        int ch = (int)(i % c);
        dx[i] = ptc_km_avgpool_bwd(dy[n * c + ch], hw);
    }
}

static ptc_km_pool pool_shape(int n, int c, int h, int w, int r, int s, int stride, int pad, int oh,
                              int ow)
{
    ptc_km_pool p;
    p.n = n;
    p.c = c;
    p.h = h;
    p.w = w;
    p.r = r;
    p.s = s;
    p.stride = stride;
    p.pad = pad;
    p.oh = oh;
    p.ow = ow;
    return p;
}

extern "C" int ptc_k_maxpool_fwd(const float *x, float *y, int32_t *argmax, int n, int c, int h,
                                 int w, int r, int s, int stride, int pad, int oh, int ow,
                                 void *stream)
{
    const int64_t total = (int64_t)n * oh * ow * c;
    if (total <= 0)
        return 0;
    if (stride <= 0 || pad < 0)
        return (int)cudaErrorInvalidValue;
    maxpool_fwd_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(
        x, y, argmax, pool_shape(n, c, h, w, r, s, stride, pad, oh, ow), total);
    return ptc_k_status();
}

extern "C" int ptc_k_maxpool_bwd(const float *dy, const int32_t *argmax, float *dx, int n, int c,
                                 int h, int w, int r, int s, int stride, int pad, int oh, int ow,
                                 void *stream)
{
    const int64_t total = (int64_t)n * h * w * c;
    if (total <= 0)
        return 0;
    if (stride <= 0 || pad < 0)
        return (int)cudaErrorInvalidValue;
    maxpool_bwd_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(
        dy, argmax, dx, pool_shape(n, c, h, w, r, s, stride, pad, oh, ow), total);
    return ptc_k_status();
}

extern "C" int ptc_k_avgpool_fwd(const float *x, float *y, int n, int c, int hw, void *stream)
{
    const int64_t total = (int64_t)n * c;
    if (total <= 0 || hw <= 0)
        return 0;
    avgpool_fwd_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(x, y, n, c,
                                                                                        hw);
    return ptc_k_status();
}

extern "C" int ptc_k_avgpool_bwd(const float *dy, float *dx, int n, int c, int hw, void *stream)
{
    const int64_t total = (int64_t)n * hw * c;
    if (total <= 0)
        return 0;
    avgpool_bwd_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(dy, dx, c,
                                                                                        hw, total);
    return ptc_k_status();
}
