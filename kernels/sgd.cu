/*
 * sgd.cu - torch.optim.SGD's update, element by element through kmath.h (ref's bits), for one
 * parameter or for up to 64 parameters in one launch (ResNet-18 has 62). The multi-tensor launch
 * passes its lists as a kernel parameter (about 2.7 KB, under the 4 KB limit of every CUDA
 * version), marked __grid_constant__ so that the kernel indexes it in place; more than 64
 * parameters take one launch per 64.
 */
#include "kcommon.cuh"

#define SGD_MAX   64
#define SGD_ELEMS 4 /* elements per thread in a tile */
#define SGD_TILE  (PTC_K_THREADS * SGD_ELEMS)

struct sgd_list {
    float *p[SGD_MAX];
    const float *g[SGD_MAX];
    float *buf[SGD_MAX];
    int64_t n[SGD_MAX];
    int64_t first_tile[SGD_MAX + 1]; /* tiles of parameters before i; [count] = all tiles */
    int count;
};

static __global__ void sgd_kernel(float *p, const float *g, float *buf, int64_t n, ptc_km_sgd_hp h)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ptc_km_sgd(&p[i], g[i], h.use_mom ? &buf[i] : NULL, &h);
}

static __global__ void sgd_multi_kernel(const __grid_constant__ sgd_list L, ptc_km_sgd_hp h)
{
    const int64_t tile = blockIdx.x;
    /* the parameter of this tile: the last t with first_tile[t] <= tile */
    int lo = 0, hi = L.count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L.first_tile[mid] <= tile)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int t = lo;
    const int64_t n = L.n[t], base = (tile - L.first_tile[t]) * SGD_TILE;
    float *p = L.p[t], *buf = L.buf[t];
    const float *g = L.g[t];
    for (int k = 0; k < SGD_ELEMS; k++) {
        const int64_t i = base + k * PTC_K_THREADS + threadIdx.x;
        if (i < n)
            ptc_km_sgd(&p[i], g[i], h.use_mom ? &buf[i] : NULL, &h);
    }
}

extern "C" int ptc_k_sgd(float *p, const float *g, float *buf, int64_t n, double lr,
                         double momentum, double dampening, double weight_decay, int nesterov,
                         int first_step, void *stream)
{
    if (n <= 0)
        return 0;
    ptc_km_sgd_hp h =
        ptc_km_sgd_prepare(lr, momentum, dampening, weight_decay, nesterov, first_step);
    if (h.use_mom && !buf)
        return (int)cudaErrorInvalidValue;
    sgd_kernel<<<ptc_k_blocks(n), PTC_K_THREADS, 0, ptc_k_stream(stream)>>>(p, g, buf, n, h);
    return ptc_k_status();
}

extern "C" int ptc_k_sgd_multi(int count, float *const *p, const float *const *g,
                               float *const *bufs, const int64_t *n, double lr, double momentum,
                               double dampening, double weight_decay, int nesterov, int first_step,
                               void *stream)
{
    ptc_km_sgd_hp h =
        ptc_km_sgd_prepare(lr, momentum, dampening, weight_decay, nesterov, first_step);
    cudaStream_t st = ptc_k_stream(stream);
    for (int done = 0; done < count; done += SGD_MAX) {
        sgd_list L;
        int m = 0;
        int64_t tiles = 0;
        for (int i = done; i < count && i < done + SGD_MAX; i++) {
            if (n[i] <= 0)
                continue;
            if (h.use_mom && !bufs[i])
                return (int)cudaErrorInvalidValue;
            L.p[m] = p[i];
            L.g[m] = g[i];
            L.buf[m] = h.use_mom ? bufs[i] : NULL;
            L.n[m] = n[i];
            L.first_tile[m] = tiles;
            tiles += (n[i] + SGD_TILE - 1) / SGD_TILE;
            m++;
        }
        if (m == 0)
            continue;
        L.first_tile[m] = tiles;
        L.count = m;
        if (tiles > 0x7FFFFFFF)
            return (int)cudaErrorInvalidValue;
        sgd_multi_kernel<<<(unsigned)tiles, PTC_K_THREADS, 0, st>>>(L, h);
        int rc = ptc_k_status();
        if (rc)
            return rc;
    }
    return 0;
}
