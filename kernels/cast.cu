/*
 * cast.cu - float32 <-> bfloat16 (as uint16_t bits), element by element through kmath.h, which
 * rounds exactly as torch's Tensor.to(torch.bfloat16) does.
 */
#include "kcommon.cuh"

static __global__ void f32_to_bf16_kernel(const float *__restrict__ x, uint16_t *__restrict__ y,
                                          int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_f32_to_bf16(x[i]);
}

static __global__ void bf16_to_f32_kernel(const uint16_t *__restrict__ x, float *__restrict__ y,
                                          int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_bf16_to_f32(x[i]);
}

extern "C" int ptc_k_f32_to_bf16(const float *x, uint16_t *y, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    f32_to_bf16_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(x, y, n);
    return ptc_k_status();
}

extern "C" int ptc_k_bf16_to_f32(const uint16_t *x, float *y, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    bf16_to_f32_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(x, y, n);
    return ptc_k_status();
}
