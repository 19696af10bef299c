/*
 * elementwise.cu - fill, scale, add (+ relu), accumulate, relu forward and backward: grid-stride
 * loops over the elements, each element computed by kmath.h (the same bits as ref). Where every
 * pointer is 16-byte aligned the loop moves float4s (one load per 4 elements), the tail and the
 * unaligned case go element by element; the arithmetic is per element either way.
 */
#include "kcommon.cuh"

static inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

static __global__ void fill_kernel(float *y, int64_t n, float v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = v;
}

static __global__ void scale_kernel(const float *x, float *y, int64_t n, float s)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_scale(x[i], s);
}

/* a, b and y may alias (y = a or y = b): each element is read before it is written, by the same
 * thread, so no __restrict__ here. */
static __global__ void add_kernel(const float *a, const float *b, float *y, int64_t n, int relu)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_add(a[i], b[i], relu);
}

static __global__ void add4_kernel(const float4 *a, const float4 *b, float4 *y, int64_t n4,
                                   int relu)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 u = a[i], v = b[i], r;
        r.x = ptc_km_add(u.x, v.x, relu);
        r.y = ptc_km_add(u.y, v.y, relu);
        r.z = ptc_km_add(u.z, v.z, relu);
        r.w = ptc_km_add(u.w, v.w, relu);
        y[i] = r;
    }
}

static __global__ void accumulate_kernel(const float *x, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_accumulate(y[i], x[i]);
}

static __global__ void relu_kernel(const float *x, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = ptc_km_relu(x[i]);
}

static __global__ void relu4_kernel(const float4 *x, float4 *y, int64_t n4)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 u = x[i];
        u.x = ptc_km_relu(u.x);
        u.y = ptc_km_relu(u.y);
        u.z = ptc_km_relu(u.z);
        u.w = ptc_km_relu(u.w);
        y[i] = u;
    }
}

static __global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = ptc_km_relu_bwd(y[i], dy[i]);
}

extern "C" int ptc_k_fill(float *y, int64_t n, float value, void *stream)
{
    if (n <= 0)
        return 0;
    fill_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(y, n, value);
    return ptc_k_status();
}

extern "C" int ptc_k_scale(const float *x, float *y, int64_t n, float s, void *stream)
{
    if (n <= 0)
        return 0;
    scale_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(x, y, n, s);
    return ptc_k_status();
}

extern "C" int ptc_k_add(const float *a, const float *b, float *y, int64_t n, int relu,
                         void *stream)
{
    if (n <= 0)
        return 0;
    cudaStream_t st = ptc_k_stream(stream);
    int64_t n4 = 0;
    if (aligned16(a) && aligned16(b) && aligned16(y)) {
        n4 = n / 4;
        if (n4 > 0) {
            add4_kernel<<<ptc_k_blocks(n4), PTC_K_THREADS, 0, st>>>(
                (const float4 *)a, (const float4 *)b, (float4 *)y, n4, relu);
            int rc = ptc_k_status();
            if (rc)
                return rc;
        }
    }
    int64_t done = n4 * 4;
    if (done == n)
        return 0;
    add_kernel<<<ptc_k_blocks(n - done), PTC_K_THREADS, 0, st>>>(a + done, b + done, y + done,
                                                                 n - done, relu);
    return ptc_k_status();
}

extern "C" int ptc_k_accumulate(const float *x, float *y, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    accumulate_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(x, y, n);
    return ptc_k_status();
}

extern "C" int ptc_k_relu_fwd(const float *x, float *y, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    cudaStream_t st = ptc_k_stream(stream);
    int64_t n4 = 0;
    if (aligned16(x) && aligned16(y)) {
        n4 = n / 4;
        if (n4 > 0) {
            relu4_kernel<<<ptc_k_blocks(n4), PTC_K_THREADS, 0, st>>>((const float4 *)x, (float4 *)y,
                                                                     n4);
            int rc = ptc_k_status();
            if (rc)
                return rc;
        }
    }
    int64_t done = n4 * 4;
    if (done == n)
        return 0;
    relu_kernel<<<ptc_k_blocks(n - done), PTC_K_THREADS, 0, st>>>(x + done, y + done, n - done);
    return ptc_k_status();
}

extern "C" int ptc_k_relu_bwd(const float *y, const float *dy, float *dx, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    relu_bwd_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(y, dy, dx, n);
    return ptc_k_status();
}
