/*
 * batchnorm.cu - batch normalisation over x [rows][c] (NHWC activations), training statistics,
 * the apply step (with relu), eval's invstd, and training's backward.
 *
 * Reductions are deterministic and in double: the rows are cut into chunks whose size depends
 * only on `rows` (never on the device), a block of 32 channels x 8 row lanes sums one chunk of 32
 * channels (a warp reads 32 consecutive floats of a row), the 8 lanes are added in lane order,
 * and a second kernel adds the chunks of each channel in chunk order. The per-chunk partial sums
 * live in scratch memory taken from the stream's memory pool (cudaMallocAsync / cudaFreeAsync:
 * stream ordered, so nothing blocks and a CUDA graph can capture it).
 */
#include "kcommon.cuh"

#define BN_LANES 8
#define BN_SLAB  32

/* Rows per chunk: at least 64, and at most ~256 chunks however large the batch. */
static int64_t chunk_rows(int64_t rows)
{
    int64_t r = (rows + 255) / 256;
    return r < 64 ? 64 : r;
}

/* Mode 0 (statistics): s1 = sum (x - k), s2 = sum (x - k)^2 with k = x[0][ch].
 * Mode 1 (backward): s1 = sum dy', s2 = sum dy' (x - mean). */
template <int MODE>
static __global__ void
bn_partial_kernel(const float *__restrict__ x, const float *__restrict__ y,
                  const float *__restrict__ dy, const float *__restrict__ mean, int64_t rows, int c,
                  int64_t crow, double *__restrict__ p1, double *__restrict__ p2)
{
    __shared__ double sh1[BN_LANES][BN_SLAB], sh2[BN_LANES][BN_SLAB];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int ch = blockIdx.x * BN_SLAB + tx;
    const int64_t chunk = blockIdx.y;
    const int64_t r0 = chunk * crow, r1 = r0 + crow < rows ? r0 + crow : rows;
    double a1 = 0.0, a2 = 0.0;
    if (ch < c) {
        const double k = MODE == 0 ? (double)x[ch] : (double)mean[ch];
        for (int64_t r = r0 + ty; r < r1; r += BN_LANES) {
            const int64_t i = r * c + ch;
            const double d = (double)x[i] - k;
            if (MODE == 0) {
                a1 += d;
                a2 += d * d;
            } else {
                const double g = ptc_km_bn_dy(y, dy, i);
                a1 += g;
                a2 += d * g;
            }
        }
    }
    sh1[ty][tx] = a1;
    sh2[ty][tx] = a2;
    __syncthreads();
    if (ty == 0 && ch < c) {
        double t1 = 0.0, t2 = 0.0;
        for (int l = 0; l < BN_LANES; l++) {
            t1 += sh1[l][tx];
            t2 += sh2[l][tx];
        }
        p1[chunk * c + ch] = t1;
        p2[chunk * c + ch] = t2;
    }
}

/* Adds the chunks of each channel in order into s1[ch], s2[ch]. */
static __global__ void bn_chunks_kernel(const double *__restrict__ p1,
                                        const double *__restrict__ p2, int64_t nchunks, int c,
                                        double *__restrict__ s1, double *__restrict__ s2)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c)
        return;
    double t1 = 0.0, t2 = 0.0;
    for (int64_t k = 0; k < nchunks; k++) {
        t1 += p1[k * c + ch];
        t2 += p2[k * c + ch];
    }
    s1[ch] = t1;
    s2[ch] = t2;
}

static __global__ void bn_moments_kernel(const double *__restrict__ s1,
                                         const double *__restrict__ s2, const float *__restrict__ x,
                                         int64_t rows, int c, float *__restrict__ mean,
                                         float *__restrict__ var)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        ptc_km_bn_moments(s1[ch], s2[ch], (double)x[ch], rows, &mean[ch], &var[ch]);
}

static __global__ void bn_finish_kernel(const float *mean, const float *var, int c, int64_t rows,
                                        float eps, float momentum, float *save_mean,
                                        float *save_invstd, float *running_mean, float *running_var)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c) {
        /* read both before writing: save_mean may alias mean */
        const float m = mean[ch], v = var[ch];
        ptc_km_bn_finish(m, v, rows, eps, momentum, &save_mean[ch], &save_invstd[ch],
                         &running_mean[ch], &running_var[ch]);
    }
}

static __global__ void bn_invstd_kernel(const float *var, float *invstd, int c, float eps)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        invstd[ch] = ptc_km_bn_invstd(var[ch], eps);
}

static __global__ void bn_apply_kernel(const float *x, const float *__restrict__ mean,
                                       const float *__restrict__ invstd,
                                       const float *__restrict__ gamma,
                                       const float *__restrict__ beta, float *__restrict__ y,
                                       int64_t total, int c, int relu)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        y[i] = ptc_km_bn_apply(x[i], mean[ch], invstd[ch], gamma[ch], beta[ch], relu);
    }
}

static __global__ void bn_params_kernel(const double *__restrict__ sum,
                                        const double *__restrict__ dotp,
                                        const float *__restrict__ invstd, int c,
                                        float *__restrict__ dgamma, float *__restrict__ dbeta)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch < c)
        ptc_km_bn_bwd_params(sum[ch], dotp[ch], invstd[ch], &dgamma[ch], &dbeta[ch]);
}

/* dx may alias dy (each element read, then written, by one thread). */
static __global__ void bn_dx_kernel(const float *x, const float *y, const float *dy,
                                    const float *gamma, const float *mean, const float *invstd,
                                    const double *sum, const double *dotp, float *dx, int64_t rows,
                                    int c)
{
    const int64_t total = rows * c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        const double d = ptc_km_bn_dy(y, dy, i);
        dx[i] = ptc_km_bn_dx(d, x[i], mean[ch], invstd[ch], gamma[ch], sum[ch], dotp[ch], rows);
    }
}

static unsigned chan_blocks(int c)
{
    return (unsigned)((c + PTC_K_THREADS - 1) / PTC_K_THREADS);
}

/* The stream-ordered pool of the current device returns its memory to the system at every
 * synchronisation by default (release threshold 0), so that each training step would map the
 * scratch again; keeping up to 64 MiB cached (the scratch is under 1.1 MiB for ResNet-18) makes the
 * allocation a pool hit. Only ever raises the threshold, never lowers what the program set. */
static void keep_pool_memory(void)
{
    int dev;
    cudaMemPool_t pool;
    uint64_t keep = 0, want = 64ull << 20;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess ||
        (keep < want &&
         cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &want) != cudaSuccess))
        (void)cudaGetLastError(); /* a mere optimisation: its failure is not the launch's */
}

/* Queues the two-level reduction; on success s1 and s2 (c doubles each, inside *scratch, which
 * the caller frees with cudaFreeAsync) hold the per-channel sums. */
template <int MODE>
static int bn_reduce(const float *x, const float *y, const float *dy, const float *mean,
                     int64_t rows, int c, cudaStream_t st, double **scratch, double **s1,
                     double **s2)
{
    const int64_t crow = chunk_rows(rows), nchunks = (rows + crow - 1) / crow;
    const int slabs = (c + BN_SLAB - 1) / BN_SLAB;
    if (nchunks > 65535)
        return (int)cudaErrorInvalidValue;
    double *buf = NULL;
    keep_pool_memory();
    cudaError_t e =
        cudaMallocAsync((void **)&buf, sizeof(double) * (size_t)c * (size_t)(2 * nchunks + 2), st);
    if (e != cudaSuccess)
        return (int)e;
    double *p1 = buf, *p2 = buf + nchunks * c;
    *scratch = buf;
    *s1 = p2 + nchunks * c;
    *s2 = *s1 + c;
    dim3 grid((unsigned)slabs, (unsigned)nchunks), block(BN_SLAB, BN_LANES);
    bn_partial_kernel<MODE><<<grid, block, 0, st>>>(x, y, dy, mean, rows, c, crow, p1, p2);
    int rc = ptc_k_status();
    if (rc == 0) {
        bn_chunks_kernel<<<chan_blocks(c), PTC_K_THREADS, 0, st>>>(p1, p2, nchunks, c, *s1, *s2);
        rc = ptc_k_status();
    }
    return rc;
}

extern "C" int ptc_k_bn_stats(const float *x, int64_t rows, int c, float *mean, float *var,
                              void *stream)
{
    if (rows <= 0 || c <= 0)
        return 0;
    cudaStream_t st = ptc_k_stream(stream);
    double *scratch = NULL, *s1, *s2;
    int rc = bn_reduce<0>(x, NULL, NULL, NULL, rows, c, st, &scratch, &s1, &s2);
    if (rc == 0) {
        bn_moments_kernel<<<chan_blocks(c), PTC_K_THREADS, 0, st>>>(s1, s2, x, rows, c, mean, var);
        rc = ptc_k_status();
    }
    if (scratch) {
        cudaError_t e = cudaFreeAsync(scratch, st);
        if (rc == 0 && e != cudaSuccess)
            rc = (int)e;
    }
    return rc;
}

extern "C" int ptc_k_bn_finish_stats(const float *mean, const float *var, int c, int64_t rows,
                                     float eps, float momentum, float *save_mean,
                                     float *save_invstd, float *running_mean, float *running_var,
                                     void *stream)
{
    if (c <= 0)
        return 0;
    bn_finish_kernel<<<chan_blocks(c), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(
        mean, var, c, rows, eps, momentum, save_mean, save_invstd, running_mean, running_var);
    return ptc_k_status();
}

extern "C" int ptc_k_bn_apply(const float *x, const float *mean, const float *invstd,
                              const float *gamma, const float *beta, float *y, int64_t rows, int c,
                              int relu, void *stream)
{
    const int64_t total = rows * c;
    if (rows <= 0 || c <= 0)
        return 0;
    bn_apply_kernel<<<ptc_k_blocks(total), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(
        x, mean, invstd, gamma, beta, y, total, c, relu);
    return ptc_k_status();
}

extern "C" int ptc_k_bn_invstd(const float *var, float *invstd, int c, float eps, void *stream)
{
    if (c <= 0)
        return 0;
    bn_invstd_kernel<<<chan_blocks(c), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(var, invstd, c,
                                                                                 eps);
    return ptc_k_status();
}

extern "C" int ptc_k_bn_bwd(const float *x, const float *y, const float *dy, const float *gamma,
                            const float *mean, const float *invstd, float *dx, float *dgamma,
                            float *dbeta, int64_t rows, int c, void *stream)
{
    if (rows <= 0 || c <= 0)
        return 0;
    cudaStream_t st = ptc_k_stream(stream);
    double *scratch = NULL, *sum, *dotp;
    int rc = bn_reduce<1>(x, y, dy, mean, rows, c, st, &scratch, &sum, &dotp);
    if (rc == 0) {
        bn_params_kernel<<<chan_blocks(c), PTC_K_THREADS, 0, st>>>(sum, dotp, invstd, c, dgamma,
                                                                   dbeta);
        rc = ptc_k_status();
    }
    if (rc == 0) {
        bn_dx_kernel<<<ptc_k_blocks(rows * c), PTC_K_THREADS, 0, st>>>(
            x, y, dy, gamma, mean, invstd, sum, dotp, dx, rows, c);
        rc = ptc_k_status();
    }
    if (scratch) {
        cudaError_t e = cudaFreeAsync(scratch, st);
        if (rc == 0 && e != cudaSuccess)
            rc = (int)e;
    }
    return rc;
}
