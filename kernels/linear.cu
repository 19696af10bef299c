/*
 * linear.cu - the bias of the fully connected layer: y[i][j] += b[j], and db[j] = sum_i dy[i][j]
 * (one thread per column summing the rows in order in double, rounded once: ref's bits, and
 * deterministic; the layer has 10 columns and a batch of rows, so a thread per column is enough).
 */
#include "kcommon.cuh"

static __global__ void bias_add_kernel(float *y, const float *__restrict__ b, int m, int64_t total)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = y[i] + b[i % m];
}

static __global__ void bias_grad_kernel(const float *__restrict__ dy, float *__restrict__ db, int n,
                                        int m)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= m)
        return;
    double acc = 0.0;
    for (int i = 0; i < n; i++)
        acc += dy[(int64_t)i * m + j];
    db[j] = (float)acc;
}

extern "C" int ptc_k_bias_add(float *y, const float *b, int n, int m, void *stream)
{
    const int64_t total = (int64_t)n * m;
    if (n <= 0 || m <= 0)
        return 0;
    bias_add_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(y, b, m,
                                                                                     total);
    return ptc_k_status();
}

extern "C" int ptc_k_bias_grad(const float *dy, float *db, int n, int m, void *stream)
{
    if (m <= 0)
        return 0;
    if (n <= 0)
        return ptc_k_fill(db, m, 0.0f, stream);
    bias_grad_kernel<<<(unsigned)((m + 127) / 128), 128, 0, ptc_k_stream(stream)>>>(dy, db, n, m);
    return ptc_k_status();
}
