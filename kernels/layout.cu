/*
 * layout.cu - [n][c][hw] <-> [n][hw][c] transposes (activations, and convolution weights with
 * n = k, hw = r x s), through a 32 x 32 tile in shared memory so that both the reads and the
 * writes are coalesced.
 */
#include "kcommon.cuh"

#define TILE 32
#define ROWS 8

/* Per image b (blockIdx.z): src [a][bb] -> dst [bb][a], a the tile's rows, bb its columns. */
static __global__ void transpose_kernel(const float *__restrict__ src, float *__restrict__ dst,
                                        int64_t A, int64_t B)
{
    __shared__ float tile[TILE][TILE + 1]; /* +1: no bank conflicts on the transposed read */
    const int64_t img = blockIdx.z;
    const float *s = src + img * A * B;
    float *d = dst + img * A * B;
    const int64_t a0 = (int64_t)blockIdx.y * TILE, b0 = (int64_t)blockIdx.x * TILE;
    for (int i = threadIdx.y; i < TILE; i += ROWS) {
        int64_t a = a0 + i, b = b0 + threadIdx.x;
        if (a < A && b < B)
            tile[i][threadIdx.x] = s[a * B + b];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += ROWS) {
        int64_t b = b0 + i, a = a0 + threadIdx.x;
        if (a < A && b < B)
            d[b * A + a] = tile[threadIdx.x][i];
    }
}

static int transpose(const float *src, float *dst, int64_t n, int64_t A, int64_t B, void *stream)
{
    if (n <= 0 || A <= 0 || B <= 0)
        return 0;
    const int64_t gy = (A + TILE - 1) / TILE, gx = (B + TILE - 1) / TILE;
    if (gy > 65535 || n > 65535 || gx > 0x7FFFFFFF)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)n), block(TILE, ROWS);
    transpose_kernel<<<grid, block, 0, ptc_k_stream(stream)>>>(src, dst, A, B);
    return ptc_k_status();
}

extern "C" int ptc_k_nchw_to_nhwc(const float *src, float *dst, int64_t n, int64_t c, int64_t hw,
                                  void *stream)
{
    return transpose(src, dst, n, c, hw, stream);
}

extern "C" int ptc_k_nhwc_to_nchw(const float *src, float *dst, int64_t n, int64_t c, int64_t hw,
                                  void *stream)
{
    return transpose(src, dst, n, hw, c, stream);
}
