/*
 * kcommon.cuh - what every .cu file of kernels/ shares: the launch shape of the grid-stride loops
 * and the conversion of a launch's status into the launchers' return value (kernels/ptc_kernels.h).
 */
#ifndef PTC_KCOMMON_CUH
#define PTC_KCOMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kmath.h"
#include "ptc_kernels.h"

#define PTC_K_THREADS 256

/* Blocks for n elements handled by a grid-stride loop: enough to fill any current GPU many times
 * over, capped so that huge tensors loop instead of launching millions of blocks. */
static inline unsigned ptc_k_blocks(int64_t n)
{
    int64_t b = (n + PTC_K_THREADS - 1) / PTC_K_THREADS;
    const int64_t cap = 4096;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

static inline cudaStream_t ptc_k_stream(void *s)
{
    return (cudaStream_t)s;
}

/* The status of the launch just queued: 0, or the cudaError_t as a positive int. */
static inline int ptc_k_status(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : (int)e;
}

#endif /* PTC_KCOMMON_CUH */
