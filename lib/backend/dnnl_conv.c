/*
 * dnnl_conv.c - the oneDNN backend's convolutions (conv_plan, conv_fwd, conv_bwd_data,
 * conv_bwd_weight): a plan per layer holding its oneDNN primitives, made in the layouts the
 * tensors already have where oneDNN gives the same implementation (see "Plans" in dnnl.c), and the
 * convolutions whose every window covers the whole input, run as matrix products (below).
 * In bf16 precision (dnnl.c) the primitives are oneDNN's bf16 ones, in the layouts oneDNN picks
 * for them, and the matrix products take bf16-rounded operands.
 */
#include "backend/dnnl_impl.h"

/* ---- convolution ----------------------------------------------------------------------------- */

enum { CONV_FWD, CONV_BWD_D, CONV_BWD_W };

static dnnl_status_t conv_desc(dnnl_convolution_desc_t *cd, int kind, dnnl_alg_kind_t alg,
                               const ptc__conv_shape *s, const dnnl_memory_desc_t *x,
                               const dnnl_memory_desc_t *w, const dnnl_memory_desc_t *y)
{
    /* torch's output size is floor((h + 2 pad - r) / stride) + 1; oneDNN accepts the same pad
     * on the right and checks the same floor. */
    const dnnl_dims_t strides = {s->stride, s->stride}, pad = {s->pad, s->pad};
    switch (kind) {
    case CONV_FWD:
        return dnnl_convolution_forward_desc_init(cd, dnnl_forward_training, alg, x, w, NULL, y,
                                                  strides, pad, pad);
    case CONV_BWD_D:
        return dnnl_convolution_backward_data_desc_init(cd, alg, x, w, y, strides, pad, pad);
    default:
        return dnnl_convolution_backward_weights_desc_init(cd, alg, x, w, NULL, y, strides, pad,
                                                           pad);
    }
}

static const char *pd_impl(const_dnnl_primitive_desc_t pd)
{
    const char *s = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "";
    return s;
}

/* Creates one convolution primitive. Candidates, in order: the tensors' layouts; the tensors'
 * activation layouts with the weights' left to oneDNN; everything left to oneDNN. The first that
 * oneDNN implements with the implementation it picks for the last is kept, so that layouts are
 * pinned to the tensors' wherever that costs nothing. The plan's algorithm (Winograd when asked
 * for and oneDNN has it for the shape) falls back to direct where oneDNN has no implementation. */
static int conv_make(ptc__be *be, conv_part *cv, int kind, dprim *d, ptc_error *err)
{
    const ptc__conv_shape *s = &cv->s;
    dnnl_memory_desc_t ax, aw, ay;
    dnnl_dims_t dx = {s->n, s->c, s->h, s->w}, dw = {s->k, s->c, s->r, s->s},
                dy = {s->n, s->k, s->oh, s->ow};
    /* bf16: torch.autocast's convolution reads bf16 copies of x and w and returns bf16, and its
     * backward gives bf16 dx; the weight gradient stays float32 (oneDNN accumulates it in
     * float32; torch rounds it to bf16 on its way to the float32 weight: ours is closer to
     * exact). The binds convert between these and the float32 tensors. */
    const dnnl_data_type_t act = be->bf16 ? dnnl_bf16 : dnnl_f32,
                           wt = be->bf16 && kind != CONV_BWD_W ? dnnl_bf16 : dnnl_f32;
    DN(dnnl_memory_desc_init_by_tag, &ax, 4, dx, act, dnnl_format_tag_any);
    DN(dnnl_memory_desc_init_by_tag, &aw, 4, dw, wt, dnnl_format_tag_any);
    DN(dnnl_memory_desc_init_by_tag, &ay, 4, dy, act, dnnl_format_tag_any);
    const_dnnl_primitive_desc_t hint = kind == CONV_FWD ? NULL : cv->fwd.pd;

    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t best;
    dnnl_alg_kind_t alg = cv->alg;
    if (alg == dnnl_convolution_winograd &&
        (conv_desc(&cd, kind, alg, s, &ax, &aw, &ay) != dnnl_success ||
         dnnl_primitive_desc_create(&best, &cd, NULL, be->eng, hint) != dnnl_success))
        alg = dnnl_convolution_direct;
    if (alg == dnnl_convolution_direct) {
        DN(conv_desc, &cd, kind, alg, s, &ax, &aw, &ay);
        DN(dnnl_primitive_desc_create, &best, &cd, NULL, be->eng, hint);
    }
    const char *want = pd_impl(best);
    const dnnl_memory_desc_t *cand[2][3] = {{&cv->xmd, &cv->wmd, &cv->ymd},
                                            {&cv->xmd, &aw, &cv->ymd}};
    for (int i = 0; i < (be->bf16 ? 0 : 2); i++) { /* float32 tensors never fit bf16 operands */
        dnnl_primitive_desc_t pd;
        if (conv_desc(&cd, kind, alg, s, cand[i][0], cand[i][1], cand[i][2]) != dnnl_success ||
            dnnl_primitive_desc_create(&pd, &cd, NULL, be->eng, hint) != dnnl_success)
            continue;
        if (strcmp(pd_impl(pd), want) == 0) {
            dnnl_primitive_desc_destroy(best);
            best = pd;
            break;
        }
        dnnl_primitive_desc_destroy(pd);
    }
    TRY(ptc__dn_dprim_from_pd(be, d, best, err));

    /* The three operands: the bind, the tensor's layout, the primitive's, output?, weights? */
    const struct {
        bind *b;
        const dnnl_memory_desc_t *tmd;
        dnnl_query_t q;
        int out, weight;
    } ops[3][3] = {
        {{&cv->f_x, &cv->xmd, dnnl_query_src_md, 0, 0},
         {&cv->f_w, &cv->wmd, dnnl_query_weights_md, 0, 0},
         {&cv->f_y, &cv->ymd, dnnl_query_dst_md, 1, 0}},
        {{&cv->d_dy, &cv->ymd, dnnl_query_diff_dst_md, 0, 0},
         {&cv->d_w, &cv->wmd, dnnl_query_weights_md, 0, 1},
         {&cv->d_dx, &cv->xmd, dnnl_query_diff_src_md, 1, 0}},
        {{&cv->w_x, &cv->xmd, dnnl_query_src_md, 0, 0},
         {&cv->w_dy, &cv->ymd, dnnl_query_diff_dst_md, 0, 0},
         {&cv->w_dw, &cv->wmd, dnnl_query_diff_weights_md, 1, 0}},
    };
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = ptc__dn_bind_init(be, ops[kind][i].b, ops[kind][i].tmd,
                               dnnl_primitive_desc_query_md(d->pd, ops[kind][i].q, 0),
                               ops[kind][i].out, ops[kind][i].weight, err);
    if (rc == 0)
        return 0;
    for (int i = 0; i < 3; i++) /* leave the plan as if this primitive had never been made */
        ptc__dn_bind_free(ops[kind][i].b);
    ptc__dn_dprim_free(d);
    return rc;
}

void ptc__dn_conv_free(conv_part *cv)
{
    ptc__free(cv->wt_raw);
    ptc__free(cv->dwt_raw);
    ptc__free(cv->rx_raw);
    ptc__free(cv->rdy_raw);
    ptc__dn_dprim_free(&cv->bwd_d);
    ptc__dn_dprim_free(&cv->bwd_w);
    ptc__dn_dprim_free(&cv->fwd);
    bind *b[] = {&cv->f_x,  &cv->f_w, &cv->f_y,  &cv->d_dy, &cv->d_w,
                 &cv->d_dx, &cv->w_x, &cv->w_dy, &cv->w_dw};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        ptc__dn_bind_free(b[i]);
}

/* ---- convolutions that are dense layers -------------------------------------------------------
 * When the window of every output covers the whole input (ResNet-18's layer3 and layer4 on 32x32
 * inputs: 3x3 convolutions over 2x2 and 1x1 maps, and the 3x3/2 one from 2x2 to 1x1), a
 * convolution is one matrix product over the raw blocked buffers,
 *     Y [N][K OH OW] = X [N][C H W] Wt,    Wt [C H W][K OH OW],
 * with rows and columns in the element order of the nChwBc layouts. Wt is made of the B x B tap
 * blocks of the OIhwBiBo weights, whose inner order [i][o] is already Wt's; each output sums only
 * the taps that read input, never padding. Backward: dX = dY Wt^T, and dWt = X^T dY folded back
 * onto the taps (a tap met at several output positions sums them). oneDNN's direct kernels spend
 * most of their time on padding at these shapes; sgemm runs them near the GEMM ceiling, and the
 * weights are gathered once per version for both forward and backward data. */

static int fc_eligible(const ptc__be *be, const ptc__conv_shape *s)
{
    const int B = be->blk;
    if (s->c % B || s->k % B)
        return 0;
    for (int o = 0; o < s->oh; o++)
        if ((int64_t)o * s->stride - s->pad > 0 || (int64_t)o * s->stride - s->pad + s->r < s->h)
            return 0;
    for (int o = 0; o < s->ow; o++)
        if ((int64_t)o * s->stride - s->pad > 0 || (int64_t)o * s->stride - s->pad + s->s < s->w)
            return 0;
    int64_t fin = (int64_t)s->c * s->h * s->w, fout = (int64_t)s->k * s->oh * s->ow;
    return fin * fout <= ((int64_t)1 << 24); /* up to 64 MiB per matrix */
}

static float *falloc(int64_t n, void **raw)
{
    *raw = ptc__malloc((size_t)n * sizeof(float) + 64);
    return *raw ? (float *)(((uintptr_t)*raw + 63) & ~(uintptr_t)63) : NULL;
}

/* Wt from the OIhwBiBo weights: block (cb, ih, iw) x (kb, oh, ow) is tap (ih - oh st + pad,
 * iw - ow st + pad) of weight block (kb, cb). */
static void fc_build(const conv_part *cv, int B, const float *w, float *wt, int nt)
{
    const ptc__conv_shape *s = &cv->s;
    const int CB = s->c / B, KB = s->k / B;
    const int64_t fout = cv->fout;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) if (cv->fin * fout > (1 << 16))
#endif
    for (int cb = 0; cb < CB; cb++)
        for (int ih = 0; ih < s->h; ih++)
            for (int iw = 0; iw < s->w; iw++)
                for (int kb = 0; kb < KB; kb++)
                    for (int oh = 0; oh < s->oh; oh++)
                        for (int ow = 0; ow < s->ow; ow++) {
                            int r = ih - oh * s->stride + s->pad, q = iw - ow * s->stride + s->pad;
                            const float *src =
                                w + ((((int64_t)kb * CB + cb) * s->r + r) * s->s + q) * B * B;
                            float *dst = wt + (((int64_t)cb * s->h + ih) * s->w + iw) * B * fout +
                                         (((int64_t)kb * s->oh + oh) * s->ow + ow) * B;
                            for (int ci = 0; ci < B; ci++)
                                memcpy(dst + ci * fout, src + ci * B, (size_t)B * sizeof(float));
                        }
}

/* dw from dWt: every tap (kb, cb, r, q) gets the sum of its blocks over the output positions that
 * meet it; taps no position meets are zeroed when zero_rest (else they are zero already). */
static void fc_fold(const conv_part *cv, int B, const float *dwt, float *dw, int zero_rest, int nt)
{
    const ptc__conv_shape *s = &cv->s;
    const int CB = s->c / B, KB = s->k / B, BB = B * B;
    const int64_t fout = cv->fout;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) if (cv->fin * fout > (1 << 16))
#endif
    for (int kb = 0; kb < KB; kb++)
        for (int cb = 0; cb < CB; cb++)
            for (int r = 0; r < s->r; r++)
                for (int q = 0; q < s->s; q++) {
                    float acc[256];
                    int hits = 0;
                    for (int i = 0; i < BB; i++)
                        acc[i] = 0;
                    for (int oh = 0; oh < s->oh; oh++)
                        for (int ow = 0; ow < s->ow; ow++) {
                            int ih = oh * s->stride - s->pad + r, iw = ow * s->stride - s->pad + q;
                            if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                continue;
                            const float *src = dwt +
                                               (((int64_t)cb * s->h + ih) * s->w + iw) * B * fout +
                                               (((int64_t)kb * s->oh + oh) * s->ow + ow) * B;
                            for (int ci = 0; ci < B; ci++)
                                for (int ki = 0; ki < B; ki++)
                                    acc[ci * B + ki] += src[ci * fout + ki];
                            hits++;
                        }
                    if (hits || zero_rest)
                        memcpy(dw + ((((int64_t)kb * CB + cb) * s->r + r) * s->s + q) * BB, acc,
                               (size_t)BB * sizeof(float));
                }
}

static void fc_weights(ptc__be *be, conv_part *cv, const ptc__bt *w)
{
    if (cv->wt_stamp != w->version) {
        fc_build(cv, be->blk, w->m.data, cv->wt, ptc__dn_nthreads(be));
        if (be->bf16) /* the weights' bf16 copy */
            ptc__dn_round_bf16(be, cv->wt, cv->wt, cv->fin * cv->fout);
        cv->wt_stamp = w->version;
        be->stats.weight_reorders++;
    }
}

/* bf16: the bf16 copy of an operand of the matrix products ([N][cols], into *dst, allocated on
 * first use); float32: the operand itself. */
static int fc_operand(ptc__be *be, const conv_part *cv, const float *src, int64_t cols, float **dst,
                      void **raw, const float **use, ptc_error *err)
{
    *use = src;
    if (!be->bf16)
        return 0;
    if (!*dst && !(*dst = falloc(cv->s.n * cols, raw)))
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    ptc__dn_round_bf16(be, src, *dst, cv->s.n * cols);
    *use = *dst;
    return 0;
}

int ptc__dn_conv_plan(ptc__be *be, ptc__op **out, const ptc__conv_shape *s, ptc_error *err)
{
    *out = NULL;
    if (!s || s->n < 1 || s->c < 1 || s->h < 1 || s->w < 1 || s->k < 1 || s->r < 1 || s->s < 1 ||
        s->stride < 1 || s->pad < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: conv_plan: bad shape");
    int64_t oh = ((int64_t)s->h + 2 * (int64_t)s->pad - s->r),
            ow = ((int64_t)s->w + 2 * (int64_t)s->pad - s->s);
    if (oh < 0 || ow < 0 || oh / s->stride + 1 != s->oh || ow / s->stride + 1 != s->ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: conv_plan: output %dx%d does not follow from input %dx%d, kernel "
                        "%dx%d, stride %d, pad %d",
                        s->oh, s->ow, s->h, s->w, s->r, s->s, s->stride, s->pad);
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    op->owner = be;
    op->kind = PLAN_CONV;
    conv_part *cv = &op->u.conv;
    cv->s = *s;
    const int dx[4] = {s->n, s->c, s->h, s->w}, dw[4] = {s->k, s->c, s->r, s->s},
              dy[4] = {s->n, s->k, s->oh, s->ow};
    int rc = ptc__dn_layout_md(be, &cv->xmd, PTC__ROLE_ACT, dx, 0, NULL, err);
    if (rc == 0)
        rc = ptc__dn_layout_md(be, &cv->wmd, PTC__ROLE_CONV_W, dw, 0, NULL, err);
    if (rc == 0)
        rc = ptc__dn_layout_md(be, &cv->ymd, PTC__ROLE_ACT, dy, 0, NULL, err);
    if (rc == 0 && fc_eligible(be, s)) {
        cv->fc = 1;
        cv->fin = (int64_t)s->c * s->h * s->w;
        cv->fout = (int64_t)s->k * s->oh * s->ow;
        if (!(cv->wt = falloc(cv->fin * cv->fout, &cv->wt_raw)))
            rc = ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    } else if (rc == 0) {
        /* Winograd F(4x4, 3x3) only where asked for: its rounding differs more from torch's. */
        cv->alg = be->winograd && s->r == 3 && s->s == 3 && s->stride == 1 && s->c % be->blk == 0 &&
                          s->k % be->blk == 0
                      ? dnnl_convolution_winograd
                      : dnnl_convolution_direct;
        ptc__dn_set_threads(be);
        rc = conv_make(be, cv, CONV_FWD, &cv->fwd, err);
    }
    if (rc < 0) {
        ptc__dn_plan_free(be, op);
        return rc;
    }
    *out = op;
    return 0;
}

static int conv_check(const ptc__be *be, const ptc__op *op, const char *what, ptc_error *err)
{
    if (!op || op->kind != PLAN_CONV || op->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s needs a conv plan of this instance",
                        what);
    return 0;
}

int ptc__dn_conv_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *w, ptc__bt *y,
                     ptc_error *err)
{
    TRY(conv_check(be, op, "conv_fwd", err));
    conv_part *cv = &op->u.conv;
    const ptc__conv_shape *s = &cv->s;
    TRY(ptc__dn_expect(be, x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, "conv_fwd: x", err));
    TRY(ptc__dn_expect(be, w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s, "conv_fwd: w", err));
    TRY(ptc__dn_expect(be, y, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow, "conv_fwd: y", err));
    ptc__dn_set_threads(be);
    if (cv->fc) {
        const float *xd;
        TRY(fc_operand(be, cv, x->m.data, cv->fin, &cv->rx, &cv->rx_raw, &xd, err));
        fc_weights(be, cv, w);
        DN(dnnl_sgemm, 'N', 'N', s->n, cv->fout, cv->fin, 1.0f, xd, cv->fin, cv->wt, cv->fout, 0.0f,
           y->m.data, cv->fout);
        if (be->bf16)
            ptc__dn_round_bf16(be, y->m.data, y->m.data, s->n * cv->fout);
        ptc__dn_touch(be, y);
        return 0;
    }
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, NULL},
                            {DNNL_ARG_WEIGHTS, NULL},
                            {DNNL_ARG_DST, ptc__dn_bind_out(&cv->f_y, y)}};
    TRY(ptc__dn_bind_in(be, &cv->f_x, x, &a[0].memory, err));
    TRY(ptc__dn_bind_in(be, &cv->f_w, w, &a[1].memory, err));
    TRY(ptc__dn_run(be, cv->fwd.p, 3, a, err));
    TRY(ptc__dn_bind_out_done(be, &cv->f_y, y, err));
    return ptc__dn_finish(be, err);
}

int ptc__dn_conv_bwd_data(ptc__be *be, ptc__op *op, const ptc__bt *dy, const ptc__bt *w,
                          ptc__bt *dx, ptc_error *err)
{
    TRY(conv_check(be, op, "conv_bwd_data", err));
    conv_part *cv = &op->u.conv;
    const ptc__conv_shape *s = &cv->s;
    TRY(ptc__dn_expect(be, dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow, "conv_bwd_data: dy", err));
    TRY(ptc__dn_expect(be, w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s, "conv_bwd_data: w", err));
    TRY(ptc__dn_expect(be, dx, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, "conv_bwd_data: dx", err));
    ptc__dn_set_threads(be);
    if (cv->fc) {
        const float *dyd;
        TRY(fc_operand(be, cv, dy->m.data, cv->fout, &cv->rdy, &cv->rdy_raw, &dyd, err));
        fc_weights(be, cv, w);
        DN(dnnl_sgemm, 'N', 'T', s->n, cv->fin, cv->fout, 1.0f, dyd, cv->fout, cv->wt, cv->fout,
           0.0f, dx->m.data, cv->fin);
        if (be->bf16)
            ptc__dn_round_bf16(be, dx->m.data, dx->m.data, s->n * cv->fin);
        ptc__dn_touch(be, dx);
        return 0;
    }
    if (!cv->bwd_d.p)
        TRY(conv_make(be, cv, CONV_BWD_D, &cv->bwd_d, err));
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, NULL},
                            {DNNL_ARG_WEIGHTS, NULL},
                            {DNNL_ARG_DIFF_SRC, ptc__dn_bind_out(&cv->d_dx, dx)}};
    TRY(ptc__dn_bind_in(be, &cv->d_dy, dy, &a[0].memory, err));
    TRY(ptc__dn_bind_in(be, &cv->d_w, w, &a[1].memory, err));
    TRY(ptc__dn_run(be, cv->bwd_d.p, 3, a, err));
    TRY(ptc__dn_bind_out_done(be, &cv->d_dx, dx, err));
    return ptc__dn_finish(be, err);
}

int ptc__dn_conv_bwd_weight(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *dy,
                            ptc__bt *dw, ptc_error *err)
{
    TRY(conv_check(be, op, "conv_bwd_weight", err));
    conv_part *cv = &op->u.conv;
    const ptc__conv_shape *s = &cv->s;
    TRY(ptc__dn_expect(be, x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, "conv_bwd_weight: x", err));
    TRY(ptc__dn_expect(be, dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow, "conv_bwd_weight: dy",
                       err));
    TRY(ptc__dn_expect(be, dw, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s, "conv_bwd_weight: dw",
                       err));
    ptc__dn_set_threads(be);
    if (cv->fc) {
        if (!cv->dwt && !(cv->dwt = falloc(cv->fin * cv->fout, &cv->dwt_raw)))
            return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
        const float *xd, *dyd;
        TRY(fc_operand(be, cv, x->m.data, cv->fin, &cv->rx, &cv->rx_raw, &xd, err));
        TRY(fc_operand(be, cv, dy->m.data, cv->fout, &cv->rdy, &cv->rdy_raw, &dyd, err));
        DN(dnnl_sgemm, 'T', 'N', cv->fin, cv->fout, s->n, 1.0f, xd, cv->fin, dyd, cv->fout, 0.0f,
           cv->dwt, cv->fout);
        fc_fold(cv, be->blk, cv->dwt, dw->m.data, dw->version != cv->dw_stamp,
                ptc__dn_nthreads(be));
        ptc__dn_touch(be, dw);
        cv->dw_stamp = dw->version;
        return 0;
    }
    if (!cv->bwd_w.p)
        TRY(conv_make(be, cv, CONV_BWD_W, &cv->bwd_w, err));
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, NULL},
                            {DNNL_ARG_DIFF_DST, NULL},
                            {DNNL_ARG_DIFF_WEIGHTS, ptc__dn_bind_out(&cv->w_dw, dw)}};
    TRY(ptc__dn_bind_in(be, &cv->w_x, x, &a[0].memory, err));
    TRY(ptc__dn_bind_in(be, &cv->w_dy, dy, &a[1].memory, err));
    TRY(ptc__dn_run(be, cv->bwd_w.p, 3, a, err));
    TRY(ptc__dn_bind_out_done(be, &cv->w_dw, dw, err));
    return ptc__dn_finish(be, err);
}
