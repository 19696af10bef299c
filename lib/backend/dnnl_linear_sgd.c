/*
 * dnnl_linear_sgd.c - the oneDNN backend's linear layer (row-major sgemm on the plain MAT layout,
 * torch's order of operations), its SGD step (torch's sequence of fused multiply-adds in float,
 * one pass over the raw buffers a parameter, its gradient and momentum share), and what bf16
 * precision needs besides oneDNN's bf16 convolutions: the check that the processor has bfloat16
 * instructions, and rounding to bfloat16 for the products that run as sgemm.
 */
#include "backend/dnnl_impl.h"

/* ---- bf16 precision ----------------------------------------------------------------------------
 * torch.autocast("cpu", dtype=torch.bfloat16) runs convolutions and linear layers on bf16 copies
 * of their inputs and weights, accumulates in float32 and returns bf16. oneDNN's bf16
 * convolutions do exactly that (dnnl_conv.c); the products this backend runs as sgemm (linear,
 * and the convolutions that are dense layers) get the same numbers from float32 operands that
 * hold bf16 values: a product of two bf16 values is exact in float32, and the sums are float32
 * either way. Everything else (batchnorm, relu, pooling, residual adds, the loss, SGD) computes in
 * float32 on float32 tensors: never less precise than torch's bf16 tensors there. */

/* oneDNN emulates bf16 on plain AVX-512 at a fraction of float32's speed; only processors with
 * bf16 dot products (AVX512_BF16, or AMX) make bf16 worth asking for. */
int ptc__dn_bf16_check(ptc_error *err)
{
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(),
                   want = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    if ((isa & want) == want)
        return 0;
    return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                    "dnnl backend: --precision bf16 needs a processor with the AVX512_BF16 (or "
                    "AMX-BF16) instructions; oneDNN finds %s here (or DNNL_MAX_CPU_ISA caps it): "
                    "use --precision f32",
                    (isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core
                        ? "AVX-512 without AVX512_BF16"
                    : (isa & (unsigned)dnnl_cpu_isa_avx2) == (unsigned)dnnl_cpu_isa_avx2
                        ? "AVX2 at most"
                        : "neither AVX2 nor AVX-512");
}

static inline float bf16_round(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u; /* NaN: quiet, payload kept in the high half */
    else
        u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even; overflow gives inf */
    u &= 0xffff0000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

typedef struct round_k {
    const float *src;
    float *dst;
} round_k;

static void round_range(void *ctx, int64_t i0, int64_t i1)
{
    const round_k *k = ctx;
    for (int64_t i = i0; i < i1; i++)
        k->dst[i] = bf16_round(k->src[i]);
}

void ptc__dn_round_bf16(const ptc__be *be, const float *src, float *dst, int64_t n)
{
    round_k k = {src, dst};
    ptc__dn_par_range(be, n, round_range, &k);
}

/* ---- linear (row-major GEMMs on the plain MAT layout) ---------------------------------------- */

/* bf16 precision: float32 copies of up to three operands rounded to bf16, in one allocation that
 * the caller frees with ptc__free(*raw). */
static int bf16_copies(const ptc__be *be, void **raw, float *out[3], const float *src[3],
                       const int64_t n[3], ptc_error *err)
{
    size_t total = 0;
    for (int i = 0; i < 3; i++)
        total += src[i] ? (size_t)n[i] : 0;
    *raw = ptc__malloc(total * sizeof(float) + 1);
    if (!*raw)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory for bf16 operands");
    float *p = *raw;
    for (int i = 0; i < 3; i++) {
        out[i] = NULL;
        if (!src[i])
            continue;
        out[i] = p;
        ptc__dn_round_bf16(be, src[i], p, n[i]);
        p += n[i];
    }
    return 0;
}

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
    const float *xd = x->m.data, *wd = w->m.data, *bd = b ? b->m.data : NULL;
    void *raw = NULL;
    if (be->bf16) { /* torch's bf16 addmm: x, w and the bias rounded, the result rounded */
        float *r[3];
        const float *src[3] = {xd, wd, bd};
        const int64_t n[3] = {(int64_t)N * K, (int64_t)M * K, M};
        TRY(bf16_copies(be, &raw, r, src, n, err));
        xd = r[0], wd = r[1], bd = r[2];
    }
    float *yd = y->m.data;
    if (bd)
        for (int n = 0; n < N; n++)
            memcpy(yd + (int64_t)n * M, bd, (size_t)M * sizeof(float));
    dnnl_status_t st = dnnl_sgemm('N', 'T', N, M, K, 1.0f, xd, K, wd, K, bd ? 1.0f : 0.0f, yd, M);
    ptc__free(raw);
    if (st != dnnl_success)
        return ptc__dn_fail(err, st, "dnnl_sgemm", __FILE__, __LINE__);
    if (be->bf16)
        ptc__dn_round_bf16(be, yd, yd, (int64_t)N * M);
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
    const float *xd = x->m.data, *wd = w->m.data, *dyd = dy->m.data;
    void *raw = NULL;
    if (be->bf16) { /* the gradient reaches the bf16 output rounded (the backward of the cast of
                       the logits to float32), and meets the bf16 copies of x and w */
        float *r[3];
        const float *src[3] = {xd, dx ? wd : NULL, dyd};
        const int64_t n[3] = {(int64_t)N * K, (int64_t)M * K, (int64_t)N * M};
        TRY(bf16_copies(be, &raw, r, src, n, err));
        xd = r[0], wd = dx ? r[1] : wd, dyd = r[2];
    }
    dnnl_status_t st = dnnl_success;
    if (dx) { /* dx [N][K] = dy [N][M] w [M][K] */
        st = dnnl_sgemm('N', 'N', N, K, M, 1.0f, dyd, M, wd, K, 0.0f, dx->m.data, K);
        if (st == dnnl_success && be->bf16) /* autocast's dx is bf16 */
            ptc__dn_round_bf16(be, dx->m.data, dx->m.data, (int64_t)N * K);
        ptc__dn_touch(be, dx);
    }
    /* dw [M][K] = dy^T x (float32: torch rounds this bf16 product's result to bf16 before it
     * reaches the float32 weight; keeping it float32 is a little closer to exact) */
    if (st == dnnl_success)
        st = dnnl_sgemm('T', 'N', M, K, N, 1.0f, dyd, M, xd, K, 0.0f, dw->m.data, K);
    if (st != dnnl_success) {
        ptc__free(raw);
        return ptc__dn_fail(err, st, "dnnl_sgemm", __FILE__, __LINE__);
    }
    ptc__dn_touch(be, dw);
    if (db) {
        for (int m = 0; m < M; m++) {
            double acc = 0;
            for (int n = 0; n < N; n++)
                acc += dyd[(int64_t)n * M + m];
            db->m.data[m] = (float)acc;
        }
        ptc__dn_touch(be, db);
    }
    ptc__free(raw);
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
