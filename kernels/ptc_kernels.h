/*
 * ptc_kernels.h - the CUDA kernels of the cuda backend, as C-callable launchers.
 *
 * One .cu file per op family (elementwise.cu, layout.cu, pool.cu, batchnorm.cu, linear.cu,
 * sgd.cu, cast.cu, augment.cu, xent.cu), each with static __global__ kernels and the extern "C"
 * launchers declared here. The per-element arithmetic lives in kernels/kmath.h as __host__
 * __device__ inline functions, so that tests/unit/test_kmath runs it on the host against the ref
 * backend; the .cu files are compiled with --fmad=false so that the device rounds as kmath.h is
 * written.
 *
 * Conventions:
 *   - every pointer is device memory; `stream` is a cudaStream_t passed as void *;
 *   - each launcher queues its work on the stream and returns 0, or the cudaError_t of the launch
 *     (cudaGetLastError() after every launch) as a positive int; nothing here blocks;
 *   - counts are int64_t elements; a count of 0 launches nothing and returns 0;
 *   - activations are channels-last: [n][h][w][c], "rows" = n x h x w, c the innermost axis;
 *     convolution weights are [k][r][s][c] (cuDNN's NHWC filter layout);
 *   - results are deterministic: reductions have a fixed shape and order (no atomics on floats).
 */
#ifndef PTC_KERNELS_H
#define PTC_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layout (layout.cu) ---- */
/* [n][c][hw] -> [n][hw][c] and back (activations; conv weights with n = k, hw = r x s). */
int ptc_k_nchw_to_nhwc(const float *src, float *dst, int64_t n, int64_t c, int64_t hw,
                       void *stream);
int ptc_k_nhwc_to_nchw(const float *src, float *dst, int64_t n, int64_t c, int64_t hw,
                       void *stream);

/* ---- elementwise (elementwise.cu) ---- */
int ptc_k_fill(float *y, int64_t n, float value, void *stream);
/* y = s x x (s already rounded to float: the raw form of DDP's gradient / world) */
int ptc_k_scale(const float *x, float *y, int64_t n, float s, void *stream);
/* y = a + b, or max(a + b, 0) with relu; y may alias a or b */
int ptc_k_add(const float *a, const float *b, float *y, int64_t n, int relu, void *stream);
/* y += x */
int ptc_k_accumulate(const float *x, float *y, int64_t n, void *stream);
int ptc_k_relu_fwd(const float *x, float *y, int64_t n, void *stream);
/* dx = y > 0 ? dy : 0; dx may alias dy */
int ptc_k_relu_bwd(const float *y, const float *dy, float *dx, int64_t n, void *stream);

/* ---- casts (cast.cu): bfloat16 as uint16_t, round to nearest even as torch rounds ---- */
int ptc_k_f32_to_bf16(const float *x, uint16_t *y, int64_t n, void *stream);
int ptc_k_bf16_to_f32(const uint16_t *x, float *y, int64_t n, void *stream);

/* ---- pooling (pool.cu), NHWC ---- */
/* Max pool: padding never wins, ties go to the first maximum in row-major window order (as
 * ref). argmax[n][oh][ow][c] receives the input position iy x w + ix of the winner. */
int ptc_k_maxpool_fwd(const float *x, float *y, int32_t *argmax, int n, int c, int h, int w, int r,
                      int s, int stride, int pad, int oh, int ow, void *stream);
/* dx (all of it written) from dy and the forward's argmax: each input element gathers the dy of
 * every window whose winner it was, in window order (no atomics). */
int ptc_k_maxpool_bwd(const float *dy, const int32_t *argmax, float *dx, int n, int c, int h, int w,
                      int r, int s, int stride, int pad, int oh, int ow, void *stream);
/* Global average pool: y[n][c] = mean over hw of x[n][hw][c]; backward dx = dy / hw. */
int ptc_k_avgpool_fwd(const float *x, float *y, int n, int c, int hw, void *stream);
int ptc_k_avgpool_bwd(const float *dy, float *dx, int n, int c, int hw, void *stream);

/* ---- batch normalization (batchnorm.cu), x [rows][c] ---- */
/* Per channel: mean and biased variance over rows (accumulated in double). */
int ptc_k_bn_stats(const float *x, int64_t rows, int c, float *mean, float *var, void *stream);
/* save_mean = mean, save_invstd = 1 / sqrt(var + eps); running = (1 - m) running + m x (mean,
 * var x rows / (rows - 1)), as torch updates them. */
int ptc_k_bn_finish_stats(const float *mean, const float *var, int c, int64_t rows, float eps,
                          float momentum, float *save_mean, float *save_invstd, float *running_mean,
                          float *running_var, void *stream);
/* y = (x - mean) x invstd x gamma + beta (max(., 0) with relu). Eval passes the running mean and
 * invstd computed by ptc_k_bn_invstd. */
int ptc_k_bn_apply(const float *x, const float *mean, const float *invstd, const float *gamma,
                   const float *beta, float *y, int64_t rows, int c, int relu, void *stream);
/* invstd = 1 / sqrt(var + eps) */
int ptc_k_bn_invstd(const float *var, float *invstd, int c, float eps, void *stream);
/* Backward of training mode. y: the forward output when relu was fused (dy masked where
 * y <= 0), else NULL. dgamma = sum dy' (x - mean) invstd, dbeta = sum dy'; then
 * dx = gamma invstd (dy' - dbeta / rows - (x - mean) invstd dgamma / rows). */
int ptc_k_bn_bwd(const float *x, const float *y, const float *dy, const float *gamma,
                 const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta,
                 int64_t rows, int c, void *stream);

/* ---- linear helpers (linear.cu): y [n][m] ---- */
int ptc_k_bias_add(float *y, const float *b, int n, int m, void *stream); /* y[i][j] += b[j] */
int ptc_k_bias_grad(const float *dy, float *db, int n, int m,
                    void *stream); /* db[j] = sum_i dy[i][j] */

/* ---- optimizer (sgd.cu) ---- */
/* torch.optim.SGD on one parameter, the per-element formula of kmath.h (the same as the ref
 * backend's). buf may be NULL when momentum is 0. The hyperparameters are doubles, as the caller
 * holds them: ptc_km_sgd_prepare rounds 1 - dampening from the double (as ref and torch do);
 * rounding dampening to float first changes that factor for many values (0.9 among them). */
int ptc_k_sgd(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
              double dampening, double weight_decay, int nesterov, int first_step, void *stream);
/* The same over many parameters in one launch (the lists are host arrays of device pointers;
 * bufs[i] may be NULL when momentum is 0). */
int ptc_k_sgd_multi(int count, float *const *p, const float *const *g, float *const *bufs,
                    const int64_t *n, double lr, double momentum, double dampening,
                    double weight_decay, int nesterov, int first_step, void *stream);

/* ---- softmax cross-entropy (xent.cu) ----
 * The mean cross-entropy of logits [n][classes] against labels[n] (int64, device memory, each in
 * [0, classes): the caller checks them), as ptc__cross_entropy: dlogits [n][classes] =
 * (softmax - onehot) / n (float32; dlogits may be NULL), *loss = the mean over rows (double),
 * *correct = the rows whose first maximum is the label. row_loss[n] and row_right[n] are scratch
 * (the per-row contributions), summed in row order by one thread so that the loss does not
 * depend on the launch shape. One launch of one block. A label out of range gives a NaN loss and
 * NaN gradients for its row instead of reading out of bounds. */
int ptc_k_xent(const float *logits, const int64_t *labels, int n, int classes, float *dlogits,
               double *row_loss, int32_t *row_right, double *loss, int64_t *correct, void *stream);

/* ---- augmentation on the device (augment.cu) ----
 * images: the dataset as the loader holds it, uint8 [count][3][h][w], kept on the GPU. For sample
 * i of the batch: source image idx[i], window (top[i], left[i]) in the image padded by pad pixels
 * of zeros (transforms.RandomCrop(h, padding=pad)), mirrored when flip[i]
 * (RandomHorizontalFlip), each value v mapped through lut[ch][v] (ToTensor + Normalize, the
 * table of lib/data/augment.c, so that the device gives the host's bits); out NHWC [n][h][w][3].
 * The same as ptc__augment_image in lib/data/augment.c, element for element. */
int ptc_k_augment(const uint8_t *images, int h, int w, int pad, const int32_t *idx,
                  const int8_t *top, const int8_t *left, const uint8_t *flip, int n,
                  const float *lut, float *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* PTC_KERNELS_H */
