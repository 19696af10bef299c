/*
 * xent.cu - softmax cross-entropy with mean reduction on the device, so that a training step
 * needs neither the logits on the host nor the gradient sent back: one block computes every row
 * through kmath.h (ptc__cross_entropy's arithmetic), writes dlogits, and its first thread sums
 * the rows' losses and hits in row order (the host's order, and no float atomics).
 *
 * One block is enough: a row is `classes` exps (10 for CIFAR-10), a batch a few hundred rows.
 */
#include "kcommon.cuh"

static __global__ void xent_kernel(const float *logits, const int64_t *labels, int n, int classes,
                                   float *dlogits, double *row_loss, int32_t *row_right,
                                   double *loss, int64_t *correct)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float *z = logits + (int64_t)i * classes;
        float *g = dlogits ? dlogits + (int64_t)i * classes : NULL;
        const int64_t y = labels[i];
        if (y < 0 || y >= classes) {
            row_loss[i] = nan("");
            row_right[i] = 0;
            if (g)
                for (int c = 0; c < classes; c++)
                    g[c] = nanf("");
            continue;
        }
        const int best = ptc_km_xent_argmax(z, classes);
        const double lse = ptc_km_xent_lse(z, classes, best);
        row_loss[i] = ptc_km_xent_row_loss(z, lse, y);
        row_right[i] = best == y;
        if (g)
            for (int c = 0; c < classes; c++)
                g[c] = ptc_km_xent_grad(z[c], lse, c == y, n);
    }
    /* the block's global writes are visible to thread 0 after the barrier */
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        int64_t right = 0;
        for (int i = 0; i < n; i++) {
            total += row_loss[i];
            right += row_right[i];
        }
        *loss = total / n;
        *correct = right;
    }
}

extern "C" int ptc_k_xent(const float *logits, const int64_t *labels, int n, int classes,
                          float *dlogits, double *row_loss, int32_t *row_right, double *loss,
                          int64_t *correct, void *stream)
{
    if (n <= 0)
        return 0;
    if (classes < 1)
        return (int)cudaErrorInvalidValue;
    const unsigned threads = n < PTC_K_THREADS ? (unsigned)((n + 31) / 32 * 32) : PTC_K_THREADS;
    xent_kernel<<<1, threads, 0, ptc_k_stream(stream)>>>(logits, labels, n, classes, dlogits,
                                                         row_loss, row_right, loss, correct);
    return ptc_k_status();
}
