/*
 * dnnl_bn_pool.c - the oneDNN backend's batch normalization and pooling. Batchnorm is this
 * backend's own code over the blocked layouts (statistics and gradient sums in double, as torch
 * computes them: oneDNN's float statistics are too coarse for the ReLU that follows); max pooling
 * is oneDNN's primitive with its argmax workspace kept per plan; the global average pool is a loop.
 */
#include "backend/dnnl_impl.h"

/* ---- batch normalization ----------------------------------------------------------------------
 * Written here, not with oneDNN's primitive: oneDNN 2.6 sums the statistics in float, which puts
 * errors of a few 1e-6 into the normalised output (3.7e-6 absolute, measured on channels of 2048
 * values with means up to 3), ten to fifty times what torch's double sums leave. A ReLU follows
 * most batchnorms, and an output that lies within that error of zero gets the other mask: the
 * element's gradient then enters its channel's bias gradient, and through it every gradient below,
 * or not. One such element moved the gradients of ResNet-18's first layers by 1e-2 (relative) in
 * a second training step, while the same step from the same state in torch float32 stayed within
 * 2e-6 of a float64 oracle; a run then leaves torch's trajectory from its second step on.
 *
 * So the statistics and the gradient sums are accumulated in double, in two passes (the mean,
 * then the squared deviations from it), and each output is computed in double and rounded once:
 * the formulas of the ref backend (ref_kernels.h) and of torch's CPU kernels, whose accumulation
 * type for float is double. The two backends then differ only in the order of their sums.
 *
 * Layout: an activation is nChwBc (B = the tensor's block) or nchw, and element (n, c, p) of both
 * is at ((n CB + c / B) HW + p) B + c % B, with B = 1 and CB = C for nchw. A reduction is split
 * into items of one channel block and a fixed range of images; the partial sums are combined in
 * item order, so results do not depend on the number of threads. */

enum { BN_SUM, BN_SSD, BN_GRAD };                         /* what a reduction sums */
enum { BN_MEAN, BN_INVSTD, BN_GAMMA, BN_SHIFT, BN_PROJ }; /* rows of the per-channel constants */

/* One pass of a batchnorm over an activation: its buffers and the per-channel constants. */
typedef struct bn_pass {
    int N, CB, B, ranges;
    int64_t HW;
    const float *x, *y, *dy; /* y: the forward output whose mask applies to dy (NULL: none) */
    float *out;              /* y (normalise) or dx */
    int relu;
    const double *k; /* [5][C]: mean, invstd, gamma, then beta or the mean gradient, proj */
    double *part;    /* [C][ranges][2] */
} bn_pass;

static void bn_range(const bn_pass *q, int r, int *n0, int *n1)
{
    *n0 = (int)((int64_t)q->N * r / q->ranges);
    *n1 = (int)((int64_t)q->N * (r + 1) / q->ranges);
}

/* Partial sums of channel block cb over range r, in double: BN_SUM x; BN_SSD (x - mean)^2;
 * BN_GRAD d and (x - mean) d with d = dy masked by y <= 0. */
static void bn_reduce_scalar(const bn_pass *q, int what, int cb, int r)
{
    const int B = q->B, C = q->CB * B;
    const double *mean = q->k + BN_MEAN * C + cb * B;
    double a[16] = {0}, s[16] = {0};
    int n0, n1;
    bn_range(q, r, &n0, &n1);
    for (int n = n0; n < n1; n++) {
        const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * B;
        for (int64_t i = 0; i < q->HW * B; i++) {
            const int l = (int)(i % B);
            const double x = q->x[o + i];
            if (what == BN_SUM) {
                a[l] += x;
            } else if (what == BN_SSD) {
                double d = x - mean[l];
                a[l] += d * d;
            } else {
                double d = q->y && q->y[o + i] <= 0 ? 0.0 : (double)q->dy[o + i];
                a[l] += d;
                s[l] += (x - mean[l]) * d;
            }
        }
    }
    for (int l = 0; l < B; l++) {
        double *p = q->part + (((int64_t)cb * B + l) * q->ranges + r) * 2;
        p[0] = a[l];
        p[1] = s[l];
    }
}

/* Image n of channel block cb: the normalised output, or dx. */
static void bn_map_scalar(const bn_pass *q, int grad, int cb, int n)
{
    const int B = q->B, C = q->CB * B;
    const double *k = q->k;
    const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * B;
    for (int64_t i = 0; i < q->HW * B; i++) {
        const int c = cb * B + (int)(i % B);
        const double xc = (double)q->x[o + i] - k[BN_MEAN * C + c];
        if (!grad) {
            float v =
                (float)(xc * k[BN_INVSTD * C + c] * k[BN_GAMMA * C + c] + k[BN_SHIFT * C + c]);
            q->out[o + i] = q->relu && v < 0 ? 0.0f : v;
        } else {
            double d = q->y && q->y[o + i] <= 0 ? 0.0 : (double)q->dy[o + i];
            q->out[o + i] = (float)((d - k[BN_SHIFT * C + c] - xc * k[BN_PROJ * C + c]) *
                                    k[BN_INVSTD * C + c] * k[BN_GAMMA * C + c]);
        }
    }
}

#ifdef PTC_DNNL_X86
/* The same for B = 16 with AVX-512: each position of a channel block is 16 floats, two vectors of
 * 8 doubles; two positions at a time on separate accumulators, added in a fixed order. */
__attribute__((target("avx512f"))) static void bn_reduce16(const bn_pass *q, int what, int cb,
                                                           int r)
{
    const int C = q->CB * 16;
    const double *mean = q->k + BN_MEAN * C + cb * 16;
    const __m512d m0 = _mm512_loadu_pd(mean), m1 = _mm512_loadu_pd(mean + 8);
    const __m256 zero = _mm256_setzero_ps();
    __m512d a[2][2], s[2][2];
    for (int j = 0; j < 2; j++)
        a[j][0] = a[j][1] = s[j][0] = s[j][1] = _mm512_setzero_pd();
    int n0, n1;
    bn_range(q, r, &n0, &n1);
    for (int n = n0; n < n1; n++) {
        const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * 16;
        for (int64_t p = 0; p < q->HW; p++) {
            const int j = (int)(p & 1);
            const float *xp = q->x + o + p * 16;
            __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(xp)),
                    x1 = _mm512_cvtps_pd(_mm256_loadu_ps(xp + 8));
            if (what == BN_SUM) {
                a[j][0] = _mm512_add_pd(a[j][0], x0);
                a[j][1] = _mm512_add_pd(a[j][1], x1);
                continue;
            }
            x0 = _mm512_sub_pd(x0, m0);
            x1 = _mm512_sub_pd(x1, m1);
            if (what == BN_SSD) {
                a[j][0] = _mm512_add_pd(a[j][0], _mm512_mul_pd(x0, x0));
                a[j][1] = _mm512_add_pd(a[j][1], _mm512_mul_pd(x1, x1));
                continue;
            }
            __m256 d0 = _mm256_loadu_ps(q->dy + o + p * 16),
                   d1 = _mm256_loadu_ps(q->dy + o + p * 16 + 8);
            if (q->y) { /* y <= 0 drops the gradient; a NaN y lets it through */
                d0 = _mm256_and_ps(
                    d0, _mm256_cmp_ps(_mm256_loadu_ps(q->y + o + p * 16), zero, _CMP_NLE_UQ));
                d1 = _mm256_and_ps(
                    d1, _mm256_cmp_ps(_mm256_loadu_ps(q->y + o + p * 16 + 8), zero, _CMP_NLE_UQ));
            }
            const __m512d e0 = _mm512_cvtps_pd(d0), e1 = _mm512_cvtps_pd(d1);
            a[j][0] = _mm512_add_pd(a[j][0], e0);
            a[j][1] = _mm512_add_pd(a[j][1], e1);
            s[j][0] = _mm512_add_pd(s[j][0], _mm512_mul_pd(x0, e0));
            s[j][1] = _mm512_add_pd(s[j][1], _mm512_mul_pd(x1, e1));
        }
    }
    double av[16], sv[16];
    _mm512_storeu_pd(av, _mm512_add_pd(a[0][0], a[1][0]));
    _mm512_storeu_pd(av + 8, _mm512_add_pd(a[0][1], a[1][1]));
    _mm512_storeu_pd(sv, _mm512_add_pd(s[0][0], s[1][0]));
    _mm512_storeu_pd(sv + 8, _mm512_add_pd(s[0][1], s[1][1]));
    for (int l = 0; l < 16; l++) {
        double *pp = q->part + (((int64_t)cb * 16 + l) * q->ranges + r) * 2;
        pp[0] = av[l];
        pp[1] = sv[l];
    }
}

__attribute__((target("avx512f"))) static void bn_map16(const bn_pass *q, int grad, int cb, int n)
{
    const int C = q->CB * 16;
    const double *k = q->k;
    __m512d K[5][2];
    for (int row = 0; row < 5; row++)
        for (int h = 0; h < 2; h++)
            K[row][h] = _mm512_loadu_pd(k + row * C + cb * 16 + h * 8);
    const __m256 zero = _mm256_setzero_ps();
    const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * 16;
    for (int64_t p = 0; p < q->HW; p++) {
        for (int h = 0; h < 2; h++) {
            const int64_t e = o + p * 16 + h * 8;
            const __m512d xc =
                _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(q->x + e)), K[BN_MEAN][h]);
            __m256 v;
            if (!grad) {
                v = _mm512_cvtpd_ps(
                    _mm512_add_pd(_mm512_mul_pd(_mm512_mul_pd(xc, K[BN_INVSTD][h]), K[BN_GAMMA][h]),
                                  K[BN_SHIFT][h]));
                if (q->relu) /* v < 0 becomes 0; -0.0 and NaN pass, as torch's relu */
                    v = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
            } else {
                __m256 d = _mm256_loadu_ps(q->dy + e);
                if (q->y)
                    d = _mm256_and_ps(d,
                                      _mm256_cmp_ps(_mm256_loadu_ps(q->y + e), zero, _CMP_NLE_UQ));
                __m512d t = _mm512_sub_pd(_mm512_sub_pd(_mm512_cvtps_pd(d), K[BN_SHIFT][h]),
                                          _mm512_mul_pd(xc, K[BN_PROJ][h]));
                v = _mm512_cvtpd_ps(
                    _mm512_mul_pd(_mm512_mul_pd(t, K[BN_INVSTD][h]), K[BN_GAMMA][h]));
            }
            _mm256_storeu_ps(q->out + e, v);
        }
    }
}
#endif

static int bn_wide(const bn_pass *q)
{
#ifdef PTC_DNNL_X86
    return q->B == 16 && __builtin_cpu_supports("avx512f");
#else
    (void)q;
    return 0;
#endif
}

/* Runs a reduction over every (channel block, range) item and combines the partial sums of
 * channel c into sum[c] and dot[c] (dot may be NULL), in range order. */
static void bn_reduce(const ptc__be *be, const bn_pass *q, int what, double *sum, double *dot)
{
    const int items = q->CB * q->ranges, wide = bn_wide(q);
    (void)be;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ptc__dn_nthreads(be)) schedule(static) if (items > 1)
#endif
    for (int it = 0; it < items; it++) {
#ifdef PTC_DNNL_X86
        if (wide) {
            bn_reduce16(q, what, it / q->ranges, it % q->ranges);
            continue;
        }
#endif
        bn_reduce_scalar(q, what, it / q->ranges, it % q->ranges);
    }
    (void)wide;
    const int C = q->CB * q->B;
    for (int c = 0; c < C; c++) {
        const double *p = q->part + (int64_t)c * q->ranges * 2;
        double a = 0, s = 0;
        for (int r = 0; r < q->ranges; r++) {
            a += p[2 * r];
            s += p[2 * r + 1];
        }
        sum[c] = a;
        if (dot)
            dot[c] = s;
    }
}

/* The elementwise pass over every (channel block, image) item: output or dx. */
static void bn_map(const ptc__be *be, const bn_pass *q, int grad)
{
    const int items = q->CB * q->N, wide = bn_wide(q);
    (void)be;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ptc__dn_nthreads(be)) schedule(static) if (items > 1)
#endif
    for (int it = 0; it < items; it++) {
#ifdef PTC_DNNL_X86
        if (wide) {
            bn_map16(q, grad, it % q->CB, it / q->CB);
            continue;
        }
#endif
        bn_map_scalar(q, grad, it % q->CB, it / q->CB);
    }
    (void)wide;
}

int ptc__dn_bn_plan(ptc__be *be, ptc__op **out, const int dims[4], double eps, ptc_error *err)
{
    *out = NULL;
    if (!dims || dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[3] < 1 || !(eps >= 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: bn_plan: bad shape or eps");
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    op->owner = be;
    op->kind = PLAN_BN;
    bn_part *b = &op->u.bn;
    memcpy(b->dims, dims, sizeof b->dims);
    b->eps = eps;
    b->ranges = dims[0] < BN_RANGES ? dims[0] : BN_RANGES;
    if (!(b->buf = ptc__malloc((size_t)dims[1] * ((size_t)b->ranges * 2 + 5) * sizeof(double)))) {
        ptc__free(op);
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    }
    *out = op;
    return 0;
}

static int bn_check(const ptc__be *be, const ptc__op *op, const ptc__bt *x, const char *what,
                    ptc_error *err)
{
    if (!op || op->kind != PLAN_BN || op->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s needs a bn plan of this instance", what);
    const int *d = op->u.bn.dims;
    return ptc__dn_expect(be, x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3], what, err);
}

int ptc__dn_vec_check(const ptc__be *be, const ptc__bt *t, int c, const char *what, ptc_error *err)
{
    return ptc__dn_expect(be, t, PTC__ROLE_VEC, 1, c, 1, 1, what, err);
}

/* The pass over x with the plan's buffers; k rows are filled by the caller. */
static bn_pass bn_pass_of(const bn_part *b, const ptc__bt *x, float *out)
{
    const int B = x->blk ? x->blk : 1, C = b->dims[1];
    return (bn_pass){.N = b->dims[0],
                     .CB = C / B,
                     .B = B,
                     .ranges = b->ranges,
                     .HW = (int64_t)b->dims[2] * b->dims[3],
                     .x = x->m.data,
                     .out = out,
                     .k = b->buf + (size_t)C * b->ranges * 2,
                     .part = b->buf};
}

int ptc__dn_bn_fwd_train(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                         const ptc__bt *beta, ptc__bt *y, ptc__bt *save_mean, ptc__bt *save_invstd,
                         ptc__bt *running_mean, ptc__bt *running_var, double momentum, int relu,
                         ptc_error *err)
{
    TRY(bn_check(be, op, x, "bn_fwd_train: x", err));
    bn_part *b = &op->u.bn;
    const int C = b->dims[1];
    TRY(ptc__dn_expect_like(be, y, x, "bn_fwd_train: y", err));
    TRY(ptc__dn_vec_check(be, gamma, C, "bn_fwd_train: gamma", err));
    TRY(ptc__dn_vec_check(be, beta, C, "bn_fwd_train: beta", err));
    TRY(ptc__dn_vec_check(be, save_mean, C, "bn_fwd_train: save_mean", err));
    TRY(ptc__dn_vec_check(be, save_invstd, C, "bn_fwd_train: save_invstd", err));
    TRY(ptc__dn_vec_check(be, running_mean, C, "bn_fwd_train: running_mean", err));
    TRY(ptc__dn_vec_check(be, running_var, C, "bn_fwd_train: running_var", err));
    const int64_t M = (int64_t)b->dims[0] * b->dims[2] * b->dims[3];
    if (M < 2) /* torch: "Expected more than 1 value per channel when training" */
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: bn_fwd_train needs more than 1 value per channel");
    bn_pass q = bn_pass_of(b, x, y->m.data);
    q.relu = relu != 0;
    double *k = (double *)q.k, *mean = k + BN_MEAN * C, *invstd = k + BN_INVSTD * C;
    bn_reduce(be, &q, BN_SUM, mean, NULL);
    for (int c = 0; c < C; c++)
        mean[c] /= (double)M;
    bn_reduce(be, &q, BN_SSD, invstd, NULL); /* the sums of squared deviations, for now */
    float *rm = running_mean->m.data, *rv = running_var->m.data;
    for (int c = 0; c < C; c++) {
        const double ssd = invstd[c];
        invstd[c] = 1.0 / sqrt(ssd / (double)M + b->eps);
        k[BN_GAMMA * C + c] = gamma->m.data[c];
        k[BN_SHIFT * C + c] = beta->m.data[c];
        save_mean->m.data[c] = (float)mean[c];
        save_invstd->m.data[c] = (float)invstd[c];
        /* torch: momentum x + (1 - momentum) r in double, with the unbiased variance */
        rm[c] = (float)(momentum * mean[c] + (1.0 - momentum) * (double)rm[c]);
        rv[c] = (float)(momentum * (ssd / (double)(M - 1)) + (1.0 - momentum) * (double)rv[c]);
    }
    bn_map(be, &q, 0);
    ptc__dn_touch(be, y);
    ptc__dn_touch(be, save_mean);
    ptc__dn_touch(be, save_invstd);
    ptc__dn_touch(be, running_mean);
    ptc__dn_touch(be, running_var);
    return 0;
}

int ptc__dn_bn_fwd_eval(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                        const ptc__bt *beta, const ptc__bt *running_mean,
                        const ptc__bt *running_var, ptc__bt *y, int relu, ptc_error *err)
{
    TRY(bn_check(be, op, x, "bn_fwd_eval: x", err));
    bn_part *b = &op->u.bn;
    const int C = b->dims[1];
    TRY(ptc__dn_expect_like(be, y, x, "bn_fwd_eval: y", err));
    TRY(ptc__dn_vec_check(be, gamma, C, "bn_fwd_eval: gamma", err));
    TRY(ptc__dn_vec_check(be, beta, C, "bn_fwd_eval: beta", err));
    TRY(ptc__dn_vec_check(be, running_mean, C, "bn_fwd_eval: running_mean", err));
    TRY(ptc__dn_vec_check(be, running_var, C, "bn_fwd_eval: running_var", err));
    bn_pass q = bn_pass_of(b, x, y->m.data);
    q.relu = relu != 0;
    double *k = (double *)q.k;
    for (int c = 0; c < C; c++) {
        k[BN_MEAN * C + c] = running_mean->m.data[c];
        k[BN_INVSTD * C + c] = 1.0 / sqrt((double)running_var->m.data[c] + b->eps);
        k[BN_GAMMA * C + c] = gamma->m.data[c];
        k[BN_SHIFT * C + c] = beta->m.data[c];
    }
    bn_map(be, &q, 0);
    ptc__dn_touch(be, y);
    return 0;
}

/* torch's batch_norm_backward in training mode, with d = dy masked by y <= 0 when y is given:
 *     dbeta = sum(d), dgamma = sum(d (x - mean)) invstd,
 *     dx = (d - sum(d) / M - (x - mean) sum(d (x - mean)) invstd^2 / M) invstd gamma. */
int ptc__dn_bn_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y, const ptc__bt *dy,
                   const ptc__bt *gamma, const ptc__bt *save_mean, const ptc__bt *save_invstd,
                   ptc__bt *dx, ptc__bt *dgamma, ptc__bt *dbeta, ptc_error *err)
{
    TRY(bn_check(be, op, x, "bn_bwd: x", err));
    bn_part *b = &op->u.bn;
    const int C = b->dims[1];
    if (y)
        TRY(ptc__dn_expect_like(be, y, x, "bn_bwd: y", err));
    TRY(ptc__dn_expect_like(be, dy, x, "bn_bwd: dy", err));
    TRY(ptc__dn_expect_like(be, dx, x, "bn_bwd: dx", err));
    TRY(ptc__dn_vec_check(be, gamma, C, "bn_bwd: gamma", err));
    TRY(ptc__dn_vec_check(be, save_mean, C, "bn_bwd: save_mean", err));
    TRY(ptc__dn_vec_check(be, save_invstd, C, "bn_bwd: save_invstd", err));
    if (dgamma)
        TRY(ptc__dn_vec_check(be, dgamma, C, "bn_bwd: dgamma", err));
    if (dbeta)
        TRY(ptc__dn_vec_check(be, dbeta, C, "bn_bwd: dbeta", err));
    const int64_t M = (int64_t)b->dims[0] * b->dims[2] * b->dims[3];
    bn_pass q = bn_pass_of(b, x, dx->m.data);
    q.y = y ? y->m.data : NULL;
    q.dy = dy->m.data;
    double *k = (double *)q.k, *sum = k + BN_SHIFT * C, *dot = k + BN_PROJ * C;
    for (int c = 0; c < C; c++) {
        k[BN_MEAN * C + c] = save_mean->m.data[c];
        k[BN_INVSTD * C + c] = save_invstd->m.data[c];
        k[BN_GAMMA * C + c] = gamma->m.data[c];
    }
    bn_reduce(be, &q, BN_GRAD, sum, dot);
    for (int c = 0; c < C; c++) {
        const double is = k[BN_INVSTD * C + c];
        if (dbeta)
            dbeta->m.data[c] = (float)sum[c];
        if (dgamma)
            dgamma->m.data[c] = (float)(dot[c] * is);
        sum[c] /= (double)M;                   /* the mean gradient */
        dot[c] = dot[c] * is * is / (double)M; /* the projection on x - mean */
    }
    bn_map(be, &q, 1);
    ptc__dn_touch(be, dx);
    if (dgamma)
        ptc__dn_touch(be, dgamma);
    if (dbeta)
        ptc__dn_touch(be, dbeta);
    return 0;
}

/* ---- pooling --------------------------------------------------------------------------------- */

int ptc__dn_maxpool_plan(ptc__be *be, ptc__op **out, const ptc__pool_shape *s, ptc_error *err)
{
    *out = NULL;
    if (!s || s->n < 1 || s->c < 1 || s->h < 1 || s->w < 1 || s->r < 1 || s->s < 1 ||
        s->stride < 1 || s->pad < 0 || 2 * s->pad > s->r || 2 * s->pad > s->s)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: maxpool_plan: bad shape (pad must be at most half the window)");
    int64_t oh = (int64_t)s->h + 2 * (int64_t)s->pad - s->r,
            ow = (int64_t)s->w + 2 * (int64_t)s->pad - s->s;
    if (oh < 0 || ow < 0 || oh / s->stride + 1 != s->oh || ow / s->stride + 1 != s->ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: maxpool_plan: output %dx%d does not follow from the input", s->oh,
                        s->ow);
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    op->owner = be;
    op->kind = PLAN_POOL;
    pool_part *pp = &op->u.pool;
    pp->s = *s;
    const int dx[4] = {s->n, s->c, s->h, s->w}, dy[4] = {s->n, s->c, s->oh, s->ow};
    const dnnl_dims_t strides = {s->stride, s->stride}, kernel = {s->r, s->s},
                      pad = {s->pad, s->pad};
    dnnl_pooling_desc_t fd, bd;
    dnnl_status_t st;
    int rc = ptc__dn_layout_md(be, &pp->xmd, PTC__ROLE_ACT, dx, 0, NULL, err);
    if (rc == 0)
        rc = ptc__dn_layout_md(be, &pp->ymd, PTC__ROLE_ACT, dy, 0, NULL, err);
    if (rc < 0)
        goto fail;
    ptc__dn_set_threads(be);
    /* oneDNN's max pooling skips padding and keeps the first maximum of the window in row-major
     * order (strictly greater replaces), as torch does; the workspace holds that argmax. */
    st = dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &pp->xmd,
                                        &pp->ymd, strides, kernel, pad, pad);
    if (st != dnnl_success) {
        rc = ptc__dn_fail(err, st, "dnnl_pooling_forward_desc_init", __FILE__, __LINE__);
        goto fail;
    }
    rc = ptc__dn_dprim_make(be, &pp->fwd, &fd, NULL, NULL, err);
    if (rc == 0)
        rc = ptc__dn_dmem_new(
            be, &pp->ws, dnnl_primitive_desc_query_md(pp->fwd.pd, dnnl_query_workspace_md, 0), err);
    if (rc < 0)
        goto fail;
    st = dnnl_pooling_backward_desc_init(&bd, dnnl_pooling_max, &pp->xmd, &pp->ymd, strides, kernel,
                                         pad, pad);
    if (st != dnnl_success) {
        rc = ptc__dn_fail(err, st, "dnnl_pooling_backward_desc_init", __FILE__, __LINE__);
        goto fail;
    }
    rc = ptc__dn_dprim_make(be, &pp->bwd, &bd, NULL, pp->fwd.pd, err);
    if (rc < 0)
        goto fail;
    *out = op;
    return 0;
fail:
    ptc__dn_plan_free(be, op);
    return rc;
}

static int pool_check(const ptc__be *be, const ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                      const char *what, ptc_error *err)
{
    if (!op || op->kind != PLAN_POOL || op->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s needs a maxpool plan of this instance",
                        what);
    const ptc__pool_shape *s = &op->u.pool.s;
    TRY(ptc__dn_expect(be, x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, what, err));
    return ptc__dn_expect(be, y, PTC__ROLE_ACT, s->n, s->c, s->oh, s->ow, what, err);
}

int ptc__dn_maxpool_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(pool_check(be, op, x, y, "maxpool_fwd", err));
    pool_part *pp = &op->u.pool;
    ptc__dn_set_threads(be);
    dnnl_exec_arg_t a[3] = {
        {DNNL_ARG_SRC, x->m.mem}, {DNNL_ARG_DST, y->m.mem}, {DNNL_ARG_WORKSPACE, pp->ws.mem}};
    TRY(ptc__dn_run(be, pp->fwd.p, 3, a, err));
    TRY(ptc__dn_finish(be, err));
    ptc__dn_touch(be, y);
    pp->x_stamp = x->version;
    pp->y_stamp = y->version;
    return 0;
}

int ptc__dn_maxpool_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                        const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    TRY(pool_check(be, op, x, y, "maxpool_bwd", err));
    TRY(ptc__dn_expect_like(be, dy, y, "maxpool_bwd: dy", err));
    TRY(ptc__dn_expect_like(be, dx, x, "maxpool_bwd: dx", err));
    pool_part *pp = &op->u.pool;
    ptc__dn_set_threads(be);
    if (pp->x_stamp != x->version || pp->y_stamp != y->version) {
        /* The workspace is another forward's: find the argmax of this x again. */
        if (!pp->yscratch.mem)
            TRY(ptc__dn_dmem_new(be, &pp->yscratch, &pp->ymd, err));
        dnnl_exec_arg_t f[3] = {{DNNL_ARG_SRC, x->m.mem},
                                {DNNL_ARG_DST, pp->yscratch.mem},
                                {DNNL_ARG_WORKSPACE, pp->ws.mem}};
        TRY(ptc__dn_run(be, pp->fwd.p, 3, f, err));
        pp->x_stamp = pp->y_stamp = 0;
    }
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, dy->m.mem},
                            {DNNL_ARG_WORKSPACE, pp->ws.mem},
                            {DNNL_ARG_DIFF_SRC, dx->m.mem}};
    TRY(ptc__dn_run(be, pp->bwd.p, 3, a, err));
    TRY(ptc__dn_finish(be, err));
    ptc__dn_touch(be, dx);
    return 0;
}

/* Global average pool over the blocked or plain activation layout, in float like torch's mean:
 * the sum over h x w in row-major order, divided by h * w. */
int ptc__dn_avgpool_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, x, "avgpool_fwd: x", err));
    if (x->role != PTC__ROLE_ACT)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: avgpool_fwd: x must be an ACT tensor");
    const int N = x->dims[0], C = x->dims[1];
    const int64_t HW = (int64_t)x->dims[2] * x->dims[3];
    TRY(ptc__dn_expect(be, y, PTC__ROLE_MAT, N, C, 1, 1, "avgpool_fwd: y", err));
    const float *xd = x->m.data;
    float *yd = y->m.data;
    const float div = (float)HW;
    const int B = x->blk;
    if (B) {
        const int CB = C / B;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ptc__dn_nthreads(be)) if (N * C * HW > 65536)
#endif
        for (int i = 0; i < N * CB; i++) {
            const float *xp = xd + (int64_t)i * HW * B;
            float acc[16] = {0};
            for (int64_t p = 0; p < HW; p++)
                for (int ci = 0; ci < B; ci++)
                    acc[ci] += xp[p * B + ci];
            for (int ci = 0; ci < B; ci++)
                yd[(int64_t)i * B + ci] = acc[ci] / div; /* n, cb, ci -> n * C + cb * B + ci */
        }
    } else {
        for (int64_t pl = 0; pl < (int64_t)N * C; pl++) {
            float acc = 0;
            for (int64_t p = 0; p < HW; p++)
                acc += xd[pl * HW + p];
            yd[pl] = acc / div;
        }
    }
    ptc__dn_touch(be, y);
    return 0;
}

int ptc__dn_avgpool_bwd(ptc__be *be, const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, dx, "avgpool_bwd: dx", err));
    if (dx->role != PTC__ROLE_ACT)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: avgpool_bwd: dx must be an ACT tensor");
    const int N = dx->dims[0], C = dx->dims[1];
    const int64_t HW = (int64_t)dx->dims[2] * dx->dims[3];
    TRY(ptc__dn_expect(be, dy, PTC__ROLE_MAT, N, C, 1, 1, "avgpool_bwd: dy", err));
    const float *g = dy->m.data;
    float *d = dx->m.data;
    const float div = (float)HW;
    const int B = dx->blk;
    if (B) {
        const int CB = C / B;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ptc__dn_nthreads(be)) if (N * C * HW > 65536)
#endif
        for (int i = 0; i < N * CB; i++) {
            float v[16];
            for (int ci = 0; ci < B; ci++)
                v[ci] = g[(int64_t)i * B + ci] / div;
            float *dp = d + (int64_t)i * HW * B;
            for (int64_t p = 0; p < HW; p++)
                for (int ci = 0; ci < B; ci++)
                    dp[p * B + ci] = v[ci];
        }
    } else {
        for (int64_t pl = 0; pl < (int64_t)N * C; pl++) {
            const float v = g[pl] / div;
            for (int64_t p = 0; p < HW; p++)
                d[pl * HW + p] = v;
        }
    }
    ptc__dn_touch(be, dx);
    return 0;
}
