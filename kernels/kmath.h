/*
 * kmath.h - the per-element arithmetic of the CUDA kernels (the .cu files of kernels/), written
 * once as __host__ __device__ inline functions so that tests/unit/test_kmath runs the very same
 * code on the host against the ref backend (lib/backend/ref_kernels.h) and lib/data/augment.c.
 *
 * Compiled by nvcc (C++17, --fmad=false) for the device and by the C11 compiler for the host test.
 * --fmad=false keeps every a * b + c as two roundings unless written fmaf(), as ref writes it; the
 * host compiler does the same (the build passes no -ffast-math and x86-64 has no implicit FMA),
 * so both sides round step for step alike. Where ref is exact (elementwise ops, SGD, pooling,
 * casts, the augmentation) these functions give ref's bits; batch normalisation sums in double,
 * but in a different order on the device (a fixed tree), so it matches ref to ~1e-7 relative.
 *
 * Layouts follow kernels/ptc_kernels.h: activations NHWC, [rows][c] with rows = n x h x w.
 */
#ifndef PTC_KMATH_H
#define PTC_KMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PTC_HD __host__ __device__
#else
#define PTC_HD
#endif

/* ---- bits ------------------------------------------------------------------------------------ */

PTC_HD static inline uint32_t ptc_km_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

PTC_HD static inline float ptc_km_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ---- casts --------------------------------------------------------------------------------------
 * float32 -> bfloat16 as torch 2.6's Tensor.to(torch.bfloat16) on the CPU (and
 * lib/tensor/convert.c): round to nearest even on the bit pattern (a carry steps the exponent and,
 * from the largest finite values, reaches infinity, which is IEEE overflow); subnormals round like
 * any value; every NaN becomes 0xFFFF (a quiet NaN: torch's vectorised kernel blends that pattern
 * in whatever the sign or payload; the scalar c10::BFloat16 would give 0x7FC0, never reached by
 * Tensor.to). */
PTC_HD static inline uint16_t ptc_km_f32_to_bf16(float f)
{
    uint32_t u = ptc_km_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return 0xFFFFu;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Exact: the 16 bits on top, NaN payloads untouched (as torch). */
PTC_HD static inline float ptc_km_bf16_to_f32(uint16_t h)
{
    return ptc_km_bits_f32((uint32_t)h << 16);
}

/* ---- elementwise ----------------------------------------------------------------------------- */

/* torch.relu is clamp_min(x, 0): negatives become +0; -0.0 and NaN pass unchanged. */
PTC_HD static inline float ptc_km_relu(float v)
{
    return v < 0.0f ? 0.0f : v;
}

/* threshold_backward(dy, y, 0): a NaN output lets the gradient through. */
PTC_HD static inline float ptc_km_relu_bwd(float y, float dy)
{
    return y <= 0.0f ? 0.0f : dy;
}

PTC_HD static inline float ptc_km_add(float a, float b, int relu)
{
    float v = a + b;
    return relu ? ptc_km_relu(v) : v;
}

PTC_HD static inline float ptc_km_accumulate(float y, float x)
{
    return y + x;
}

PTC_HD static inline float ptc_km_scale(float x, float s)
{
    return s * x;
}

/* ---- SGD ---------------------------------------------------------------------------------------
 * torch.optim.SGD (foreach off) for one element, exactly ref's sgd_step: the hyperparameters are
 * rounded to float first (keep = 1 - dampening and -lr computed in double, then rounded), and
 * a.add(b, alpha=s) is one fused multiply-add fmaf(b, s, a), as torch's CPU kernels compute it. */
typedef struct ptc_km_sgd_hp {
    float wd, mom, keep, neg_lr;
    int use_wd, use_mom; /* weight_decay != 0, momentum != 0 (tested on the unrounded values) */
    int nesterov, first_step;
} ptc_km_sgd_hp;

PTC_HD static inline ptc_km_sgd_hp ptc_km_sgd_prepare(double lr, double momentum, double dampening,
                                                      double weight_decay, int nesterov,
                                                      int first_step)
{
    ptc_km_sgd_hp h;
    h.wd = (float)weight_decay;
    h.mom = (float)momentum;
    h.keep = (float)(1.0 - dampening);
    h.neg_lr = (float)(-lr);
    h.use_wd = weight_decay != 0;
    h.use_mom = momentum != 0;
    h.nesterov = nesterov != 0;
    h.first_step = first_step != 0;
    return h;
}

/* One element: p and (when momentum is on) buf updated in place. */
PTC_HD static inline void ptc_km_sgd(float *p, float g, float *buf, const ptc_km_sgd_hp *h)
{
    float d = g;
    if (h->use_wd)
        d = fmaf(*p, h->wd, d);
    if (h->use_mom) {
        float b;
        if (h->first_step)
            b = d;
        else {
            float kept = *buf * h->mom; /* rounded on its own, as ref's buf[i] * mom */
            b = fmaf(d, h->keep, kept);
        }
        *buf = b;
        d = h->nesterov ? fmaf(b, h->mom, d) : b;
    }
    *p = fmaf(d, h->neg_lr, *p);
}

/* ---- pooling, NHWC -------------------------------------------------------------------------- */

typedef struct ptc_km_pool {
    int n, c, h, w;
    int r, s, stride, pad;
    int oh, ow;
} ptc_km_pool;

/* torch's max_pool2d window (n, oh, ow, ch): the maximum starts at -inf and is replaced by a
 * larger value or a NaN, scanning the in-bounds part of the window in row-major order, so a tie
 * keeps the first maximum and padding never wins. Returns the winner's position iy * w + ix
 * (the window's first in-bounds position when nothing beats -inf), the maximum in *max. */
PTC_HD static inline int32_t ptc_km_maxpool_win(const ptc_km_pool *s, const float *x, int n, int oh,
                                                int ow, int ch, float *max)
{
    int ih0 = oh * s->stride - s->pad, iw0 = ow * s->stride - s->pad;
    int ih1 = ih0 + s->r < s->h ? ih0 + s->r : s->h;
    int iw1 = iw0 + s->s < s->w ? iw0 + s->s : s->w;
    if (ih0 < 0)
        ih0 = 0;
    if (iw0 < 0)
        iw0 = 0;
    const float *xn = x + (int64_t)n * s->h * s->w * s->c;
    int32_t best = ih0 * s->w + iw0;
    float m = -INFINITY;
    for (int ih = ih0; ih < ih1; ih++)
        for (int iw = iw0; iw < iw1; iw++) {
            float v = xn[((int64_t)ih * s->w + iw) * s->c + ch];
            if (v > m || v != v) {
                m = v;
                best = ih * s->w + iw;
            }
        }
    *max = m;
    return best;
}

/* The gradient of input (n, iy, ix, ch): starting from +0, the dy of every window whose winner
 * it was, added in float in row-major order of the windows. ref scatters dy[window] into
 * dx[argmax] in that same order from a zeroed dx, so each input sees the same additions. */
PTC_HD static inline float ptc_km_maxpool_bwd_elem(const ptc_km_pool *s, const float *dy,
                                                   const int32_t *argmax, int n, int iy, int ix,
                                                   int ch)
{
    /* Windows containing iy: oh * stride - pad <= iy <= oh * stride - pad + r - 1. */
    int lo_h = iy + s->pad - s->r + 1, hi_h = iy + s->pad;
    int lo_w = ix + s->pad - s->s + 1, hi_w = ix + s->pad;
    int oh0 = lo_h <= 0 ? 0 : (lo_h + s->stride - 1) / s->stride;
    int oh1 = hi_h / s->stride; /* hi_h >= 0 */
    int ow0 = lo_w <= 0 ? 0 : (lo_w + s->stride - 1) / s->stride;
    int ow1 = hi_w / s->stride;
    if (oh1 > s->oh - 1)
        oh1 = s->oh - 1;
    if (ow1 > s->ow - 1)
        ow1 = s->ow - 1;
    const int32_t me = iy * s->w + ix;
    const int64_t base = (int64_t)n * s->oh * s->ow;
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++) {
            int64_t o = ((base + (int64_t)oh * s->ow + ow) * s->c) + ch;
            if (argmax[o] == me)
                acc += dy[o];
        }
    return acc;
}

/* Global average pool of (n, ch) over hw positions: the sum in double in position order, divided
 * in double and rounded once (ref's avgpool_fwd). */
PTC_HD static inline float ptc_km_avgpool(const float *x, int n, int c, int hw, int ch)
{
    const float *p = x + (int64_t)n * hw * c + ch;
    double sum = 0.0;
    for (int i = 0; i < hw; i++)
        sum += p[(int64_t)i * c];
    return (float)(sum / (double)hw);
}

/* Backward: dy / hw in float. */
PTC_HD static inline float ptc_km_avgpool_bwd(float dy, int hw)
{
    return dy / (float)hw;
}

/* ---- batch normalisation ---------------------------------------------------------------------
 * Statistics from per-channel sums over rows taken about a shift k (the channel's first value):
 * s1 = sum (x - k), s2 = sum (x - k)^2, both in double. Then mean = k + s1 / M and the biased
 * variance (s2 - s1^2 / M) / M, which keeps double's precision even when |mean| >> std (ref
 * makes two passes; the results agree to rounding). */
PTC_HD static inline void ptc_km_bn_moments(double s1, double s2, double k, int64_t rows,
                                            float *mean, float *var)
{
    const double m = (double)rows;
    double v = (s2 - s1 * s1 / m) / m;
    *mean = (float)(k + s1 / m);
    *var = (float)(v > 0.0 ? v : 0.0);
}

/* save_mean, save_invstd = 1 / sqrt(var + eps), and torch's running update in double:
 * momentum x stat + (1 - momentum) x running, with the unbiased variance var x M / (M - 1). */
PTC_HD static inline void ptc_km_bn_finish(float mean, float var, int64_t rows, float eps,
                                           float momentum, float *save_mean, float *save_invstd,
                                           float *running_mean, float *running_var)
{
    const double mo = momentum;
    const double unbiased =
        rows > 1 ? (double)var * (double)rows / (double)(rows - 1) : (double)var;
    *save_mean = mean;
    *save_invstd = (float)(1.0 / sqrt((double)var + (double)eps));
    *running_mean = (float)(mo * (double)mean + (1.0 - mo) * (double)*running_mean);
    *running_var = (float)(mo * unbiased + (1.0 - mo) * (double)*running_var);
}

PTC_HD static inline float ptc_km_bn_invstd(float var, float eps)
{
    return (float)(1.0 / sqrt((double)var + (double)eps));
}

/* y = (x - mean) x invstd x gamma + beta in double, rounded once (ref's formula), relu fused. */
PTC_HD static inline float ptc_km_bn_apply(float x, float mean, float invstd, float gamma,
                                           float beta, int relu)
{
    float v = (float)(((double)x - (double)mean) * (double)invstd * (double)gamma + (double)beta);
    return relu ? ptc_km_relu(v) : v;
}

/* dy' : dy masked where the fused relu's output y <= 0 (y NULL: no relu). */
PTC_HD static inline double ptc_km_bn_dy(const float *y, const float *dy, int64_t i)
{
    return (y && y[i] <= 0.0f) ? 0.0 : (double)dy[i];
}

/* From the channel's sums sum = sum dy', dotp = sum dy' (x - mean) (double): dgamma, dbeta. */
PTC_HD static inline void ptc_km_bn_bwd_params(double sum, double dotp, float invstd, float *dgamma,
                                               float *dbeta)
{
    *dgamma = (float)(dotp * (double)invstd);
    *dbeta = (float)sum;
}

/* dx = (dy' - sum / M - (x - mean) dotp invstd^2 / M) invstd gamma, in double (ref's bn_bwd). */
PTC_HD static inline float ptc_km_bn_dx(double d, float x, float mean, float invstd, float gamma,
                                        double sum, double dotp, int64_t rows)
{
    const double is = invstd, m = (double)rows;
    const double proj = dotp * is * is / m, grad_mean = sum / m;
    return (float)((d - grad_mean - ((double)x - (double)mean) * proj) * is * (double)gamma);
}

/* ---- softmax cross-entropy --------------------------------------------------------------------
 * One row z[classes] of float32 logits with label y, exactly as ptc__cross_entropy (lib/nn/state.c)
 * computes it, step for step in double: the first maximum (strict >, so ties go to the lowest
 * class), lse = max + log(sum exp(z - max)), the row's loss lse - z[y] (the caller sums the rows in
 * row order and divides by n), and the gradient (exp(z - lse) - onehot) / n rounded to float.
 * On the host these are ptc__cross_entropy's bits; on the device exp and log are CUDA's double
 * versions (at most 1 ulp from glibc's), so the device loss and gradients can differ from the
 * host's in the last bit of a double before rounding. */
PTC_HD static inline int ptc_km_xent_argmax(const float *z, int classes)
{
    int best = 0;
    for (int c = 1; c < classes; c++)
        if (z[c] > z[best])
            best = c;
    return best;
}

PTC_HD static inline double ptc_km_xent_lse(const float *z, int classes, int best)
{
    const double mx = z[best];
    double sum = 0;
    for (int c = 0; c < classes; c++)
        sum += exp((double)z[c] - mx);
    return mx + log(sum);
}

PTC_HD static inline double ptc_km_xent_row_loss(const float *z, double lse, int64_t y)
{
    return lse - (double)z[y];
}

PTC_HD static inline float ptc_km_xent_grad(float z, double lse, int is_label, int n)
{
    return (float)((exp((double)z - lse) - (is_label ? 1.0 : 0.0)) / n);
}

/* ---- augmentation -----------------------------------------------------------------------------
 * Output element (y, ox, ch) of a sample, NHWC: ptc__augment_image's window column
 * x = flip ? w - 1 - ox : ox shows padded pixel (y + top, x + left), i.e. source pixel
 * (y + top - pad, x + left - pad) when inside the image, else a zero of the padding; the byte goes
 * through lut[ch][v] (lut: [3][256]). img: the source image, uint8 [3][h][w]. */
PTC_HD static inline float ptc_km_augment(const uint8_t *img, int h, int w, int pad, int top,
                                          int left, int flip, const float *lut, int y, int ox,
                                          int ch)
{
    int x = flip ? w - 1 - ox : ox;
    int sy = y + top - pad, sx = x + left - pad;
    unsigned v = 0;
    if (sy >= 0 && sy < h && sx >= 0 && sx < w)
        v = img[((int64_t)ch * h + sy) * w + sx];
    return lut[ch * 256 + (int)v];
}

#endif /* PTC_KMATH_H */
