/*
 * dnnl_linear_sgd.c - the oneDNN backend's linear layer (row-major sgemm on the plain MAT layout,
 * torch's order of operations) and its SGD step (torch's sequence of fused multiply-adds in
 * float, one pass over the raw buffers a parameter, its gradient and momentum share).
 */
#include "backend/dnnl_impl.h"

/* ---- linear (row-major GEMMs on the plain MAT layout) ---------------------------------------- */

int ptc__dn_linear_fwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *b,
                       ptc__bt *y, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, x, "linear_fwd: x", err));
    TRY(ptc__dn_nonnull(be, w, "linear_fwd: w", err));
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(ptc__dn_expect(be, x, PTC__ROLE_MAT, N, K, 1, 1, "linear_fwd: x", err));
    TRY(ptc__dn_expect(be, w, PTC__ROLE_MAT, M, K, 1, 1, "linear_fwd: w", err));
    if (b)
        TRY(ptc__dn_vec_check(be, b, M, "linear_fwd: b", err));
    TRY(ptc__dn_expect(be, y, PTC__ROLE_MAT, N, M, 1, 1, "linear_fwd: y", err));
    ptc__dn_set_threads(be);
    float *yd = y->m.data;
    if (b)
        for (int n = 0; n < N; n++)
            memcpy(yd + (int64_t)n * M, b->m.data, (size_t)M * sizeof(float));
    DN(dnnl_sgemm, 'N', 'T', N, M, K, 1.0f, x->m.data, K, w->m.data, K, b ? 1.0f : 0.0f, yd, M);
    ptc__dn_touch(be, y);
    return 0;
}

int ptc__dn_linear_bwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *dy,
                       ptc__bt *dx, ptc__bt *dw, ptc__bt *db, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, x, "linear_bwd: x", err));
    TRY(ptc__dn_nonnull(be, w, "linear_bwd: w", err));
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(ptc__dn_expect(be, x, PTC__ROLE_MAT, N, K, 1, 1, "linear_bwd: x", err));
    TRY(ptc__dn_expect(be, w, PTC__ROLE_MAT, M, K, 1, 1, "linear_bwd: w", err));
    TRY(ptc__dn_expect(be, dy, PTC__ROLE_MAT, N, M, 1, 1, "linear_bwd: dy", err));
    if (dx)
        TRY(ptc__dn_expect(be, dx, PTC__ROLE_MAT, N, K, 1, 1, "linear_bwd: dx", err));
    TRY(ptc__dn_expect(be, dw, PTC__ROLE_MAT, M, K, 1, 1, "linear_bwd: dw", err));
    if (db)
        TRY(ptc__dn_vec_check(be, db, M, "linear_bwd: db", err));
    ptc__dn_set_threads(be);
    if (dx) { /* dx [N][K] = dy [N][M] w [M][K] */
        DN(dnnl_sgemm, 'N', 'N', N, K, M, 1.0f, dy->m.data, M, w->m.data, K, 0.0f, dx->m.data, K);
        ptc__dn_touch(be, dx);
    }
    /* dw [M][K] = dy^T x */
    DN(dnnl_sgemm, 'T', 'N', M, K, N, 1.0f, dy->m.data, M, x->m.data, K, 0.0f, dw->m.data, K);
    ptc__dn_touch(be, dw);
    if (db) {
        for (int m = 0; m < M; m++) {
            double acc = 0;
            for (int n = 0; n < N; n++)
                acc += dy->m.data[(int64_t)n * M + m];
            db->m.data[m] = (float)acc;
        }
        ptc__dn_touch(be, db);
    }
    return 0;
}

/* ---- SGD ----------------------------------------------------------------------------------------
 * torch.optim.SGD for one parameter, in float with torch's fused multiply-adds (a.add(b, alpha=s)
 * is fma(b, s, a) in torch's vectorized kernels; the Python floats are cast to float first):
 *     d = fma(p, wd, g)                               if wd != 0
 *     buf = d on the first step, else fma(d, 1 - dampening, buf * momentum)
 *     d = nesterov ? fma(buf, momentum, d) : buf      if momentum != 0
 *     p = fma(d, -lr, p)
 * The same bits whatever the vector width, since fma rounds once either way. */
typedef struct sgd_k {
    float *p, *buf;
    const float *g;
    float wd, mom, keep, neg_lr;
    int use_wd, use_mom, first, nesterov;
} sgd_k;

static void sgd_scalar(void *ctx, int64_t i0, int64_t i1)
{
    const sgd_k *k = ctx;
    float *p = k->p, *buf = k->buf;
    const float *g = k->g;
    for (int64_t i = i0; i < i1; i++) {
        float d = g[i];
        if (k->use_wd)
            d = fmaf(p[i], k->wd, d);
        if (k->use_mom) {
            float bv = k->first ? d : fmaf(d, k->keep, buf[i] * k->mom);
            buf[i] = bv;
            d = k->nesterov ? fmaf(bv, k->mom, d) : bv;
        }
        p[i] = fmaf(d, k->neg_lr, p[i]);
    }
}

#ifdef PTC_DNNL_X86
__attribute__((target("avx512f"))) static void sgd_avx512(void *ctx, int64_t i0, int64_t i1)
{
    const sgd_k *k = ctx;
    float *p = k->p, *buf = k->buf;
    const float *g = k->g;
    const __m512 wd = _mm512_set1_ps(k->wd), mom = _mm512_set1_ps(k->mom),
                 keep = _mm512_set1_ps(k->keep), nlr = _mm512_set1_ps(k->neg_lr);
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        __m512 pv = _mm512_loadu_ps(p + i), d = _mm512_loadu_ps(g + i);
        if (k->use_wd)
            d = _mm512_fmadd_ps(pv, wd, d);
        if (k->use_mom) {
            __m512 bv =
                k->first ? d
                         : _mm512_fmadd_ps(d, keep, _mm512_mul_ps(_mm512_loadu_ps(buf + i), mom));
            _mm512_storeu_ps(buf + i, bv);
            d = k->nesterov ? _mm512_fmadd_ps(bv, mom, d) : bv;
        }
        _mm512_storeu_ps(p + i, _mm512_fmadd_ps(d, nlr, pv));
    }
    sgd_scalar(ctx, i, i1);
}

__attribute__((target("avx2,fma"))) static void sgd_avx2(void *ctx, int64_t i0, int64_t i1)
{
    const sgd_k *k = ctx;
    float *p = k->p, *buf = k->buf;
    const float *g = k->g;
    const __m256 wd = _mm256_set1_ps(k->wd), mom = _mm256_set1_ps(k->mom),
                 keep = _mm256_set1_ps(k->keep), nlr = _mm256_set1_ps(k->neg_lr);
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        __m256 pv = _mm256_loadu_ps(p + i), d = _mm256_loadu_ps(g + i);
        if (k->use_wd)
            d = _mm256_fmadd_ps(pv, wd, d);
        if (k->use_mom) {
            __m256 bv =
                k->first ? d
                         : _mm256_fmadd_ps(d, keep, _mm256_mul_ps(_mm256_loadu_ps(buf + i), mom));
            _mm256_storeu_ps(buf + i, bv);
            d = k->nesterov ? _mm256_fmadd_ps(bv, mom, d) : bv;
        }
        _mm256_storeu_ps(p + i, _mm256_fmadd_ps(d, nlr, pv));
    }
    sgd_scalar(ctx, i, i1);
}
#endif

int ptc__dn_sgd_step(ptc__be *be, ptc__bt *p, const ptc__bt *g, ptc__bt *buf, const ptc__sgd *h,
                     ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, p, "sgd_step: p", err));
    if (!h)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: sgd_step: hyperparameters are NULL");
    TRY(ptc__dn_expect_like(be, g, p, "sgd_step: g", err));
    const int use_mom = h->momentum != 0;
    if (use_mom)
        TRY(ptc__dn_expect_like(be, buf, p, "sgd_step: buf", err));
    /* Whole raw buffers: the layouts are equal, and padding (zero in all three) stays zero. */
    sgd_k k = {p->m.data,
               use_mom ? buf->m.data : NULL,
               g->m.data,
               (float)h->weight_decay,
               (float)h->momentum,
               (float)(1.0 - h->dampening),
               (float)(-h->lr),
               h->weight_decay != 0,
               use_mom,
               h->first_step != 0,
               h->nesterov != 0};
    range_fn fn = sgd_scalar;
#ifdef PTC_DNNL_X86
    if (__builtin_cpu_supports("avx512f"))
        fn = sgd_avx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        fn = sgd_avx2;
#endif
    ptc__dn_par_range(be, (int64_t)(p->m.nbytes / sizeof(float)), fn, &k);
    ptc__dn_touch(be, p);
    if (k.use_mom)
        ptc__dn_touch(be, buf);
    return 0;
}
