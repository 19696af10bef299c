/*
 * test_backend_dnnl.c - the oneDNN backend against the reference backend (the oracle).
 *
 * Every op runs on the same random data in both backends, at the ResNet-18 layer shapes with batch
 * 4 (torchvision's stem on 32x32 inputs: 7x7/2 conv, maxpool, then 8/4/2/1 spatial; and the CIFAR
 * stem: 3x3/1 conv, no maxpool, 32/16/8/4), and each output is compared as
 *     max |dnnl - ref| / max |ref|  <=  1e-5    (per tensor).
 * The convolutions run twice: direct (the default) and with Winograd allowed (params.winograd).
 * SGD is compared bit for bit (both compute torch's fused multiply-adds). PTC_TEST_VERBOSE=1
 * prints every comparison. Also: tensor_write -> tensor_read is exact for every role and layout;
 * maxpool breaks ties and treats padding like torch; the fused-relu workspace and the maxpool argmax are not
 * trusted once their tensor changed; NaN goes through relu and batchnorm as in torch; tensors and
 * plans of another instance are refused; every allocation failure is a clean PTC_ENOMEM; and a
 * conv -> bn+relu -> conv training step runs without any activation reorder in the steady state
 * (the only reorders left: each conv's weights into oneDNN's backward-data layout, or into the
 * matrix of a convolution that runs as a matrix product, once per weight update).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"

#ifndef PTC_HAVE_DNNL
int main(void)
{
    printf("test_backend_dnnl: SKIP: built without oneDNN\n");
    return 77;
}
#else
#include "backend/dnnl.h"

#include <oneapi/dnnl/dnnl.h>

#define TOL 1e-5

static const ptc__backend_ops *R = &ptc__backend_ref, *D = &ptc__backend_dnnl;
static ptc__be *rb, *db;
static int wino; /* db is the instance opened with params.winograd = 1 */
/* oneDNN runs AVX2 or AVX-512 kernels here, the processors the layouts are chosen for: the tests
 * of "no reorder" apply (older ones run backward convolutions as GEMMs on plain layouts). */
static int tuned;
static ptc_error err;

#define OK(x) CHECK_CODE((x), 0, &err)

/* ---- data ------------------------------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void) /* [0, 1), splitmix64 */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

/* The same logical tensor in both backends. */
typedef struct pair {
    ptc__bt *r, *d;
    ptc__role role;
    int dims[4];
    int64_t n;
} pair;

static pair pnew(ptc__role role, int n, int c, int h, int w)
{
    pair p = {NULL, NULL, role, {n, c, h, w}, (int64_t)n * c * h * w};
    OK(R->tensor_new(rb, &p.r, role, p.dims, &err));
    OK(D->tensor_new(db, &p.d, role, p.dims, &err));
    return p;
}

static void pfree(pair *p)
{
    R->tensor_free(rb, p->r);
    D->tensor_free(db, p->d);
    p->r = p->d = NULL;
}

static void pwrite(pair *p, const float *v)
{
    OK(R->tensor_write(rb, p->r, v, &err));
    OK(D->tensor_write(db, p->d, v, &err));
}

/* Fills with lo + (hi - lo) * uniform. */
static void prand(pair *p, double lo, double hi)
{
    float *v = malloc((size_t)p->n * sizeof *v);
    for (int64_t i = 0; i < p->n; i++)
        v[i] = (float)(lo + (hi - lo) * urand());
    pwrite(p, v);
    free(v);
}

static float *pread(const ptc__backend_ops *ops, ptc__be *be, ptc__bt *t, int64_t n)
{
    float *v = malloc((size_t)n * sizeof *v);
    OK(ops->tensor_read(be, t, v, &err));
    return v;
}

/* Compares both sides: relative error max|d - r| / max|r| must be <= TOL. */
static double pcheck(pair *p, const char *what)
{
    float *r = pread(R, rb, p->r, p->n), *d = pread(D, db, p->d, p->n);
    double maxr = 0, maxd = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < p->n; i++) {
        double e = fabs((double)d[i] - r[i]);
        if (fabs(r[i]) > maxr)
            maxr = fabs(r[i]);
        if (e > maxd || isnan(e)) {
            maxd = e;
            at = i;
        }
    }
    double rel = maxr > 0 ? maxd / maxr : maxd;
    if (getenv("PTC_TEST_VERBOSE"))
        printf("%-70s %.3g\n", what, rel);
    check_count++;
    if (!(rel <= TOL)) {
        check_failures++;
        fprintf(stderr,
                "FAIL %s: relative error %.3g (at %lld: dnnl %.9g, ref %.9g, max |ref| %.6g)\n",
                what, rel, (long long)at, d[at], r[at], maxr);
    }
    free(r);
    free(d);
    return rel;
}

static double worst[2]; /* the largest relative error seen: direct, Winograd convolutions */
#define PC(p, ...)                                                                                 \
    do {                                                                                           \
        char what_[160];                                                                           \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                                \
        double rel_ = pcheck(&(p), what_);                                                         \
        if (rel_ > worst[wino])                                                                    \
            worst[wino] = rel_;                                                                    \
    } while (0)

static ptc__dnnl_stats stats(void)
{
    ptc__dnnl_stats s;
    ptc__dnnl_stats_get(db, &s);
    return s;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static void test_roundtrip(void)
{
    static const struct {
        ptc__role role;
        int d[4];
    } cases[] = {
        {PTC__ROLE_ACT, {4, 3, 32, 32}},    {PTC__ROLE_ACT, {4, 64, 8, 8}},
        {PTC__ROLE_ACT, {2, 20, 5, 3}},     {PTC__ROLE_ACT, {3, 512, 1, 1}},
        {PTC__ROLE_ACT, {2, 24, 3, 3}},     {PTC__ROLE_CONV_W, {64, 3, 7, 7}},
        {PTC__ROLE_CONV_W, {64, 64, 3, 3}}, {PTC__ROLE_CONV_W, {128, 64, 1, 1}},
        {PTC__ROLE_CONV_W, {10, 3, 3, 3}},  {PTC__ROLE_CONV_W, {24, 40, 3, 3}},
        {PTC__ROLE_VEC, {1, 64, 1, 1}},     {PTC__ROLE_VEC, {1, 10, 1, 1}},
        {PTC__ROLE_MAT, {4, 512, 1, 1}},    {PTC__ROLE_MAT, {10, 512, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ptc__bt *t;
        const int *d = cases[i].d;
        int64_t n = (int64_t)d[0] * d[1] * d[2] * d[3];
        OK(D->tensor_new(db, &t, cases[i].role, d, &err));
        float *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out);
        for (int64_t j = 0; j < n; j++)
            in[j] = (float)(urand() * 2 - 1);
        in[0] = -0.0f;
        OK(D->tensor_write(db, t, in, &err));
        OK(D->tensor_read(db, t, out, &err));
        int same = memcmp(in, out, (size_t)n * sizeof *in) == 0;
        if (!same)
            fprintf(stderr, "round trip of role %d [%d][%d][%d][%d] is not exact\n",
                    (int)cases[i].role, d[0], d[1], d[2], d[3]);
        CHECK(same);
        /* fill: every logical element, nothing else (padding stays zero, so reads are exact) */
        OK(D->tensor_fill(db, t, 0.375, &err));
        OK(D->tensor_read(db, t, out, &err));
        int all = 1;
        for (int64_t j = 0; j < n; j++)
            all &= out[j] == 0.375f;
        CHECK(all);
        OK(D->tensor_fill(db, t, 0.0, &err));
        OK(D->tensor_read(db, t, out, &err));
        all = 1;
        for (int64_t j = 0; j < n; j++)
            all &= out[j] == 0.0f;
        CHECK(all);
        free(in);
        free(out);
        D->tensor_free(db, t);
    }
    D->tensor_free(db, NULL);
    D->plan_free(db, NULL);

    ptc__bt *t = NULL;
    CHECK_CODE(D->tensor_new(db, &t, PTC__ROLE_VEC, (const int[4]){2, 3, 1, 1}, &err), PTC_EINVAL,
               &err);
    CHECK_CODE(D->tensor_new(db, &t, PTC__ROLE_ACT, (const int[4]){2, 0, 1, 1}, &err), PTC_EINVAL,
               &err);
    CHECK(t == NULL);
}

/* ---- convolution ----------------------------------------------------------------------------- */

typedef struct cshape {
    int c, hw, k, r, stride, pad;
} cshape;

/* ResNet-18 at 32x32 inputs, torchvision's stem then the CIFAR stem. */
static const cshape tv_convs[] = {
    {3, 32, 64, 7, 2, 3},   {64, 8, 64, 3, 1, 1},   {64, 8, 128, 3, 2, 1},  {64, 8, 128, 1, 2, 0},
    {128, 4, 128, 3, 1, 1}, {128, 4, 256, 3, 2, 1}, {128, 4, 256, 1, 2, 0}, {256, 2, 256, 3, 1, 1},
    {256, 2, 512, 3, 2, 1}, {256, 2, 512, 1, 2, 0}, {512, 1, 512, 3, 1, 1},
};
static const cshape cifar_convs[] = {
    {3, 32, 64, 3, 1, 1},    {64, 32, 64, 3, 1, 1},   {64, 32, 128, 3, 2, 1},
    {64, 32, 128, 1, 2, 0},  {128, 16, 128, 3, 1, 1}, {128, 16, 256, 3, 2, 1},
    {128, 16, 256, 1, 2, 0}, {256, 8, 256, 3, 1, 1},  {256, 8, 512, 3, 2, 1},
    {256, 8, 512, 1, 2, 0},  {512, 4, 512, 3, 1, 1},
};

static ptc__conv_shape conv_shape(int n, const cshape *c)
{
    ptc__conv_shape s = {n, c->c, c->hw, c->hw, c->k, c->r, c->r, c->stride, c->pad, 0, 0};
    s.oh = s.ow = (c->hw + 2 * c->pad - c->r) / c->stride + 1;
    return s;
}

static void test_conv(const cshape *c, const char *stem, int n)
{
    ptc__conv_shape s = conv_shape(n, c);
    ptc__op *ro, *dop;
    OK(R->conv_plan(rb, &ro, &s, &err));
    OK(D->conv_plan(db, &dop, &s, &err));
    pair x = pnew(PTC__ROLE_ACT, s.n, s.c, s.h, s.w),
         w = pnew(PTC__ROLE_CONV_W, s.k, s.c, s.r, s.s);
    pair y = pnew(PTC__ROLE_ACT, s.n, s.k, s.oh, s.ow),
         dy = pnew(PTC__ROLE_ACT, s.n, s.k, s.oh, s.ow);
    pair dx = pnew(PTC__ROLE_ACT, s.n, s.c, s.h, s.w),
         dw = pnew(PTC__ROLE_CONV_W, s.k, s.c, s.r, s.s);
    prand(&x, -1, 1);
    prand(&w, -0.1, 0.1);
    prand(&dy, -1, 1);
    ptc__dnnl_stats s0 = stats();
    OK(R->conv_fwd(rb, ro, x.r, w.r, y.r, &err));
    OK(D->conv_fwd(db, dop, x.d, w.d, y.d, &err));
    OK(R->conv_bwd_weight(rb, ro, x.r, dy.r, dw.r, &err));
    OK(D->conv_bwd_weight(db, dop, x.d, dy.d, dw.d, &err));
    ptc__dnnl_stats s1 = stats();
    OK(R->conv_bwd_data(rb, ro, dy.r, w.r, dx.r, &err));
    OK(D->conv_bwd_data(db, dop, dy.d, w.d, dx.d, &err));
    ptc__dnnl_stats s2 = stats();
    char tag[64];
    snprintf(tag, sizeof tag, "%s%s n%d", wino ? "winograd " : "", stem, n);
    PC(y, "%s conv %d->%d %dx%d/%d on %d: y", tag, s.c, s.k, s.r, s.r, s.stride, s.h);
    PC(dw, "%s conv %d->%d %dx%d/%d on %d: dw", tag, s.c, s.k, s.r, s.r, s.stride, s.h);
    PC(dx, "%s conv %d->%d %dx%d/%d on %d: dx", tag, s.c, s.k, s.r, s.r, s.stride, s.h);
    /* Activations never reorder in forward and weight gradients; in backward data only the
     * weights do, and the 3-channel input's gradient (the stem's, which training never asks for:
     * oneDNN writes it blocked). */
    if (tuned) {
        CHECK_INT(s1.act_reorders - s0.act_reorders, 0);
        CHECK_INT(s2.act_reorders - s1.act_reorders, s.c % 8 == 0 ? 0 : 1);
    }
    /* One weight reorder per version of w: into the backward-data layout, or (for the shapes that
     * run as matrix products) into the matrix that forward and backward share. */
    if (wino || !tuned) /* Winograd's backward data takes the forward's weights */
        CHECK(s2.weight_reorders - s0.weight_reorders <= 1);
    else
        CHECK_INT(s2.weight_reorders - s0.weight_reorders, 1);
    /* The reordered weights are reused while w is unchanged. */
    OK(D->conv_bwd_data(db, dop, dy.d, w.d, dx.d, &err));
    CHECK_INT(stats().weight_reorders, s2.weight_reorders);
    PC(dx, "%s conv %d->%d %dx%d/%d on %d: dx again", tag, s.c, s.k, s.r, s.r, s.stride, s.h);
    pfree(&x), pfree(&w), pfree(&y), pfree(&dy), pfree(&dx), pfree(&dw);
    R->plan_free(rb, ro);
    D->plan_free(db, dop);
}

/* At batch 128 (what training runs) the plans must keep the tensors' layouts too. */
static void test_conv_layouts_128(void)
{
    for (size_t i = 0; i < sizeof tv_convs / sizeof tv_convs[0]; i++) {
        ptc__conv_shape s = conv_shape(128, &tv_convs[i]);
        ptc__op *op;
        ptc__bt *x, *w, *y, *dx, *dw;
        OK(D->conv_plan(db, &op, &s, &err));
        OK(D->tensor_new(db, &x, PTC__ROLE_ACT, (const int[4]){s.n, s.c, s.h, s.w}, &err));
        OK(D->tensor_new(db, &dx, PTC__ROLE_ACT, (const int[4]){s.n, s.c, s.h, s.w}, &err));
        OK(D->tensor_new(db, &y, PTC__ROLE_ACT, (const int[4]){s.n, s.k, s.oh, s.ow}, &err));
        OK(D->tensor_new(db, &w, PTC__ROLE_CONV_W, (const int[4]){s.k, s.c, s.r, s.s}, &err));
        OK(D->tensor_new(db, &dw, PTC__ROLE_CONV_W, (const int[4]){s.k, s.c, s.r, s.s}, &err));
        ptc__dnnl_stats s0 = stats();
        OK(D->conv_fwd(db, op, x, w, y, &err));
        OK(D->conv_bwd_weight(db, op, x, y, dw, &err));
        if (s.c % 8 == 0)
            OK(D->conv_bwd_data(db, op, y, w, dx, &err));
        ptc__dnnl_stats s1 = stats();
        if (tuned)
            CHECK_INT(s1.act_reorders - s0.act_reorders, 0);
        D->tensor_free(db, x), D->tensor_free(db, dx), D->tensor_free(db, y);
        D->tensor_free(db, w), D->tensor_free(db, dw);
        D->plan_free(db, op);
    }
}

/* ---- batch normalization --------------------------------------------------------------------- */

static void test_bn(int n, int c, int hw, int relu)
{
    const int dims[4] = {n, c, hw, hw};
    const double eps = 1e-5, momentum = 0.1;
    ptc__op *ro, *dop;
    OK(R->bn_plan(rb, &ro, dims, eps, &err));
    OK(D->bn_plan(db, &dop, dims, eps, &err));
    pair x = pnew(PTC__ROLE_ACT, n, c, hw, hw), y = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    pair dy = pnew(PTC__ROLE_ACT, n, c, hw, hw), dx = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    pair g = pnew(PTC__ROLE_VEC, 1, c, 1, 1), b = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    pair sm = pnew(PTC__ROLE_VEC, 1, c, 1, 1), si = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    pair rm = pnew(PTC__ROLE_VEC, 1, c, 1, 1), rv = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    pair dg = pnew(PTC__ROLE_VEC, 1, c, 1, 1), dbt = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    prand(&x, 0.5, 3.0); /* a mean away from 0 and a spread: the statistics matter */
    prand(&g, 0.5, 1.5);
    prand(&b, -0.5, 0.5);
    prand(&rm, -0.2, 0.2);
    prand(&rv, 0.5, 1.5);
    prand(&dy, -1, 1);
    char tag[64];
    snprintf(tag, sizeof tag, "bn [%d][%d][%d][%d]%s", n, c, hw, hw, relu ? "+relu" : "");

    for (int step = 0; step < 2; step++) { /* twice: the running statistics move twice */
        OK(R->bn_fwd_train(rb, ro, x.r, g.r, b.r, y.r, sm.r, si.r, rm.r, rv.r, momentum, relu,
                           &err));
        OK(D->bn_fwd_train(db, dop, x.d, g.d, b.d, y.d, sm.d, si.d, rm.d, rv.d, momentum, relu,
                           &err));
    }
    PC(y, "%s train: y", tag);
    PC(sm, "%s train: save_mean", tag);
    PC(si, "%s train: save_invstd", tag);
    PC(rm, "%s train: running_mean", tag);
    PC(rv, "%s train: running_var", tag);

    OK(R->bn_bwd(rb, ro, x.r, relu ? y.r : NULL, dy.r, g.r, sm.r, si.r, dx.r, dg.r, dbt.r, &err));
    OK(D->bn_bwd(db, dop, x.d, relu ? y.d : NULL, dy.d, g.d, sm.d, si.d, dx.d, dg.d, dbt.d, &err));
    PC(dx, "%s bwd: dx", tag);
    PC(dg, "%s bwd: dgamma", tag);
    PC(dbt, "%s bwd: dbeta", tag);

    if (relu) { /* y rewritten (same values, new version): the workspace is not used, y is */
        float *v = pread(D, db, y.d, y.n);
        OK(D->tensor_write(db, y.d, v, &err));
        free(v);
        OK(D->tensor_fill(db, dx.d, 0, &err));
        OK(D->bn_bwd(db, dop, x.d, y.d, dy.d, g.d, sm.d, si.d, dx.d, dg.d, dbt.d, &err));
        PC(dx, "%s bwd (relu mask from y): dx", tag);
        PC(dg, "%s bwd (relu mask from y): dgamma", tag);
    }
    /* Statistics that the dnnl plan did not compute (its variance comes from save_invstd). */
    {
        ptc__op *d2;
        OK(D->bn_plan(db, &d2, dims, eps, &err));
        OK(D->bn_bwd(db, d2, x.d, relu ? y.d : NULL, dy.d, g.d, sm.d, si.d, dx.d, dg.d, dbt.d,
                     &err));
        PC(dx, "%s bwd (fresh plan): dx", tag);
        PC(dbt, "%s bwd (fresh plan): dbeta", tag);
        D->plan_free(db, d2);
    }

    OK(R->bn_fwd_eval(rb, ro, x.r, g.r, b.r, rm.r, rv.r, y.r, relu, &err));
    OK(D->bn_fwd_eval(db, dop, x.d, g.d, b.d, rm.d, rv.d, y.d, relu, &err));
    PC(y, "%s eval: y", tag);

    pair *all[] = {&x, &y, &dy, &dx, &g, &b, &sm, &si, &rm, &rv, &dg, &dbt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pfree(all[i]);
    R->plan_free(rb, ro);
    D->plan_free(db, dop);
}

/* ---- pooling --------------------------------------------------------------------------------- */

/* mode 0: uniform; 1: few distinct values (ties everywhere); 2: all negative (padding never wins).
 */
static void test_maxpool(int n, int c, int hw, int mode)
{
    ptc__pool_shape s = {n, c, hw, hw, 3, 3, 2, 1, 0, 0};
    s.oh = s.ow = (hw + 2 - 3) / 2 + 1;
    ptc__op *ro, *dop;
    OK(R->maxpool_plan(rb, &ro, &s, &err));
    OK(D->maxpool_plan(db, &dop, &s, &err));
    pair x = pnew(PTC__ROLE_ACT, n, c, hw, hw), y = pnew(PTC__ROLE_ACT, n, c, s.oh, s.ow);
    pair dy = pnew(PTC__ROLE_ACT, n, c, s.oh, s.ow), dx = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    float *v = malloc((size_t)x.n * sizeof *v);
    for (int64_t i = 0; i < x.n; i++)
        v[i] = mode == 1   ? (float)floor(urand() * 3)
               : mode == 2 ? (float)(-1 - urand())
                           : (float)(urand() * 2 - 1);
    pwrite(&x, v);
    prand(&dy, 0.5, 1.5);
    OK(R->maxpool_fwd(rb, ro, x.r, y.r, &err));
    OK(D->maxpool_fwd(db, dop, x.d, y.d, &err));
    OK(R->maxpool_bwd(rb, ro, x.r, y.r, dy.r, dx.r, &err));
    OK(D->maxpool_bwd(db, dop, x.d, y.d, dy.d, dx.d, &err));
    static const char *modes[] = {"uniform", "ties", "negative"};
    PC(y, "maxpool [%d][%d][%d][%d] %s: y", n, c, hw, hw, modes[mode]);
    PC(dx, "maxpool [%d][%d][%d][%d] %s: dx", n, c, hw, hw, modes[mode]);

    /* Another forward in between: the plan's argmax is another x's, backward must not use it. */
    pair x2 = pnew(PTC__ROLE_ACT, n, c, hw, hw), y2 = pnew(PTC__ROLE_ACT, n, c, s.oh, s.ow);
    prand(&x2, -1, 1);
    OK(D->maxpool_fwd(db, dop, x2.d, y2.d, &err));
    OK(D->tensor_fill(db, dx.d, 0, &err));
    OK(D->maxpool_bwd(db, dop, x.d, y.d, dy.d, dx.d, &err));
    PC(dx, "maxpool [%d][%d][%d][%d] %s: dx after another forward", n, c, hw, hw, modes[mode]);
    free(v);
    pfree(&x), pfree(&y), pfree(&dy), pfree(&dx), pfree(&x2), pfree(&y2);
    R->plan_free(rb, ro);
    D->plan_free(db, dop);
}

static void test_avgpool(int n, int c, int hw)
{
    pair x = pnew(PTC__ROLE_ACT, n, c, hw, hw), y = pnew(PTC__ROLE_MAT, n, c, 1, 1);
    pair dy = pnew(PTC__ROLE_MAT, n, c, 1, 1), dx = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    prand(&x, -1, 1);
    prand(&dy, -1, 1);
    OK(R->avgpool_fwd(rb, x.r, y.r, &err));
    OK(D->avgpool_fwd(db, x.d, y.d, &err));
    OK(R->avgpool_bwd(rb, dy.r, dx.r, &err));
    OK(D->avgpool_bwd(db, dy.d, dx.d, &err));
    PC(y, "avgpool [%d][%d][%d][%d]: y", n, c, hw, hw);
    PC(dx, "avgpool [%d][%d][%d][%d]: dx", n, c, hw, hw);
    pfree(&x), pfree(&y), pfree(&dy), pfree(&dx);
}

/* ---- linear, elementwise, SGD ---------------------------------------------------------------- */

static void test_linear(int n, int k, int m)
{
    pair x = pnew(PTC__ROLE_MAT, n, k, 1, 1), w = pnew(PTC__ROLE_MAT, m, k, 1, 1);
    pair b = pnew(PTC__ROLE_VEC, 1, m, 1, 1), y = pnew(PTC__ROLE_MAT, n, m, 1, 1);
    pair dy = pnew(PTC__ROLE_MAT, n, m, 1, 1), dx = pnew(PTC__ROLE_MAT, n, k, 1, 1);
    pair dw = pnew(PTC__ROLE_MAT, m, k, 1, 1), dbias = pnew(PTC__ROLE_VEC, 1, m, 1, 1);
    prand(&x, 0, 2);
    prand(&w, -0.05, 0.05);
    prand(&b, -0.05, 0.05);
    prand(&dy, -1, 1);
    OK(R->linear_fwd(rb, x.r, w.r, b.r, y.r, &err));
    OK(D->linear_fwd(db, x.d, w.d, b.d, y.d, &err));
    OK(R->linear_bwd(rb, x.r, w.r, dy.r, dx.r, dw.r, dbias.r, &err));
    OK(D->linear_bwd(db, x.d, w.d, dy.d, dx.d, dw.d, dbias.d, &err));
    PC(y, "linear %d->%d n %d: y", k, m, n);
    PC(dx, "linear %d->%d n %d: dx", k, m, n);
    PC(dw, "linear %d->%d n %d: dw", k, m, n);
    PC(dbias, "linear %d->%d n %d: db", k, m, n);
    OK(D->tensor_fill(db, dw.d, 0, &err));
    OK(D->linear_bwd(db, x.d, w.d, dy.d, NULL, dw.d, dbias.d, &err));
    PC(dw, "linear %d->%d n %d: dw without dx", k, m, n);
    pfree(&x), pfree(&w), pfree(&b), pfree(&y), pfree(&dy), pfree(&dx), pfree(&dw), pfree(&dbias);
}

static void test_elementwise(int n, int c, int hw)
{
    pair a = pnew(PTC__ROLE_ACT, n, c, hw, hw), b = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    pair y = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    char tag[64];
    snprintf(tag, sizeof tag, "[%d][%d][%d][%d]", n, c, hw, hw);
    for (int relu = 0; relu < 2; relu++) {
        prand(&a, -1, 1);
        prand(&b, -1, 1);
        OK(R->add(rb, a.r, b.r, y.r, relu, &err));
        OK(D->add(db, a.d, b.d, y.d, relu, &err));
        PC(y, "add%s %s", relu ? "+relu" : "", tag);
        OK(R->add(rb, a.r, b.r, a.r, relu, &err)); /* y aliases a */
        OK(D->add(db, a.d, b.d, a.d, relu, &err));
        PC(a, "add%s %s, y = a", relu ? "+relu" : "", tag);
        OK(R->add(rb, a.r, b.r, b.r, relu, &err)); /* y aliases b */
        OK(D->add(db, a.d, b.d, b.d, relu, &err));
        PC(b, "add%s %s, y = b", relu ? "+relu" : "", tag);
    }
    prand(&a, -1, 1);
    prand(&y, -1, 1);
    OK(R->accumulate(rb, a.r, y.r, &err));
    OK(D->accumulate(db, a.d, y.d, &err));
    PC(y, "accumulate %s", tag);

    prand(&a, -1, 1);
    OK(R->relu_fwd(rb, a.r, y.r, &err));
    OK(D->relu_fwd(db, a.d, y.d, &err));
    PC(y, "relu_fwd %s", tag);
    prand(&b, -1, 1);
    OK(R->relu_bwd(rb, y.r, b.r, a.r, &err));
    OK(D->relu_bwd(db, y.d, b.d, a.d, &err));
    PC(a, "relu_bwd %s", tag);
    OK(R->relu_bwd(rb, y.r, b.r, b.r, &err)); /* dx aliases dy */
    OK(D->relu_bwd(db, y.d, b.d, b.d, &err));
    PC(b, "relu_bwd %s, dx = dy", tag);
    OK(R->relu_fwd(rb, a.r, a.r, &err)); /* in place */
    prand(&a, -1, 1);
    OK(R->relu_fwd(rb, a.r, a.r, &err));
    OK(D->relu_fwd(db, a.d, a.d, &err));
    PC(a, "relu_fwd %s in place", tag);
    pfree(&a), pfree(&b), pfree(&y);
}

static void test_sgd(ptc__role role, int d0, int d1, int d2, int d3)
{
    static const ptc__sgd hs[] = {
        {0.01, 0.9, 0.0, 5e-4, 0, 0}, /* the tutorial's recipe */
        {0.1, 0.9, 0.1, 1e-4, 1, 0},  /* nesterov with dampening */
        {0.05, 0.0, 0.0, 0.0, 0, 0},  /* plain */
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        pair p = pnew(role, d0, d1, d2, d3), g = pnew(role, d0, d1, d2, d3);
        pair buf = pnew(role, d0, d1, d2, d3);
        prand(&p, -1, 1);
        for (int step = 0; step < 3; step++) {
            ptc__sgd h = hs[i];
            h.first_step = step == 0;
            prand(&g, -1, 1);
            OK(R->sgd_step(rb, p.r, g.r, buf.r, &h, &err));
            OK(D->sgd_step(db, p.d, g.d, buf.d, &h, &err));
        }
        PC(p, "sgd %zu role %d [%d][%d][%d][%d]: p", i, (int)role, d0, d1, d2, d3);
        if (hs[i].momentum != 0)
            PC(buf, "sgd %zu role %d [%d][%d][%d][%d]: buf", i, (int)role, d0, d1, d2, d3);
        /* Both compute torch's fused multiply-adds in float: the same bits. */
        float *r = pread(R, rb, p.r, p.n), *d = pread(D, db, p.d, p.n);
        CHECK(memcmp(r, d, (size_t)p.n * sizeof *r) == 0);
        free(r);
        free(d);
        pfree(&p), pfree(&g), pfree(&buf);
    }
}

/* ---- the steady state of a training step ----------------------------------------------------- */

/* conv (c->c 3x3) -> bn + relu -> conv (c->c 3x3), forward and backward, then SGD on both
 * convs' weights; after a first step, further steps reorder no activation, and reorder each conv's
 * weights into the backward-data layout once per step. */
static void test_steady_state(int n, int c, int hw)
{
    ptc__conv_shape s = {n, c, hw, hw, c, 3, 3, 1, 1, hw, hw};
    const int a[4] = {n, c, hw, hw}, wd[4] = {c, c, 3, 3}, v[4] = {1, c, 1, 1};
    ptc__op *c1, *c2, *bn;
    ptc__bt *x, *h1, *h2, *h3, *dh3, *dh2, *dh1, *w1, *w2, *dw1, *dw2, *m1, *m2;
    ptc__bt *g, *b, *sm, *si, *rm, *rv, *dg, *dbt;
    OK(D->conv_plan(db, &c1, &s, &err));
    OK(D->conv_plan(db, &c2, &s, &err));
    OK(D->bn_plan(db, &bn, a, 1e-5, &err));
    ptc__bt **acts[] = {&x, &h1, &h2, &h3, &dh3, &dh2, &dh1};
    for (size_t i = 0; i < 7; i++)
        OK(D->tensor_new(db, acts[i], PTC__ROLE_ACT, a, &err));
    ptc__bt **ws[] = {&w1, &w2, &dw1, &dw2, &m1, &m2};
    for (size_t i = 0; i < 6; i++)
        OK(D->tensor_new(db, ws[i], PTC__ROLE_CONV_W, wd, &err));
    ptc__bt **vs[] = {&g, &b, &sm, &si, &rm, &rv, &dg, &dbt};
    for (size_t i = 0; i < 8; i++)
        OK(D->tensor_new(db, vs[i], PTC__ROLE_VEC, v, &err));
    OK(D->tensor_fill(db, x, 0.5, &err));
    OK(D->tensor_fill(db, w1, 0.01, &err));
    OK(D->tensor_fill(db, w2, -0.02, &err));
    OK(D->tensor_fill(db, g, 1, &err));
    OK(D->tensor_fill(db, rv, 1, &err));
    OK(D->tensor_fill(db, dh3, 0.1, &err));
    ptc__dnnl_stats s0 = {0};
    const int steps = 4;
    for (int step = 0; step < steps; step++) {
        if (step == 1)
            s0 = stats();
        ptc__sgd h = {0.01, 0.9, 0, 5e-4, 0, step == 0};
        OK(D->conv_fwd(db, c1, x, w1, h1, &err));
        OK(D->bn_fwd_train(db, bn, h1, g, b, h2, sm, si, rm, rv, 0.1, 1, &err));
        OK(D->conv_fwd(db, c2, h2, w2, h3, &err));
        OK(D->conv_bwd_weight(db, c2, h2, dh3, dw2, &err));
        OK(D->conv_bwd_data(db, c2, dh3, w2, dh2, &err));
        OK(D->bn_bwd(db, bn, h1, h2, dh2, g, sm, si, dh1, dg, dbt, &err));
        OK(D->conv_bwd_weight(db, c1, x, dh1, dw1, &err));
        OK(D->sgd_step(db, w1, dw1, m1, &h, &err));
        OK(D->sgd_step(db, w2, dw2, m2, &h, &err));
    }
    ptc__dnnl_stats s1 = stats();
    printf("steady state [%d][%d][%d][%d]: %llu activation reorders, %llu weight reorders in %d "
           "steps\n",
           n, c, hw, hw, (unsigned long long)(s1.act_reorders - s0.act_reorders),
           (unsigned long long)(s1.weight_reorders - s0.weight_reorders), steps - 1);
    if (tuned)
        CHECK_INT(s1.act_reorders - s0.act_reorders, 0);
    /* w2 into the backward-data layout once per step; or, where the convolutions are matrix
     * products, w1 and w2 into their matrices once per step */
    if (!wino && tuned)
        CHECK_INT(s1.weight_reorders - s0.weight_reorders, (steps - 1) * (hw <= 2 ? 2 : 1));
    CHECK_INT(s1.edge_reorders - s0.edge_reorders, 0);
    CHECK_INT(s1.primitives - s0.primitives, 0);
    for (size_t i = 0; i < 7; i++)
        D->tensor_free(db, *acts[i]);
    for (size_t i = 0; i < 6; i++)
        D->tensor_free(db, *ws[i]);
    for (size_t i = 0; i < 8; i++)
        D->tensor_free(db, *vs[i]);
    D->plan_free(db, c1);
    D->plan_free(db, c2);
    D->plan_free(db, bn);
}

/* ---- NaN ------------------------------------------------------------------------------------- */

/* The NaNs of both sides are at the same places, and the other values agree. */
static void pcheck_nan(pair *p, const char *what)
{
    float *r = pread(R, rb, p->r, p->n), *d = pread(D, db, p->d, p->n);
    int64_t bad = -1, nans = 0;
    double maxr = 0, maxd = 0;
    for (int64_t i = 0; i < p->n; i++) {
        if (isnan(r[i]) != isnan(d[i])) {
            if (bad < 0)
                bad = i;
            continue;
        }
        if (isnan(r[i])) {
            nans++;
            continue;
        }
        maxr = fmax(maxr, fabs(r[i]));
        maxd = fmax(maxd, fabs((double)d[i] - r[i]));
    }
    if (bad >= 0)
        fprintf(stderr, "FAIL %s: at %lld dnnl %g, ref %g\n", what, (long long)bad, d[bad], r[bad]);
    CHECK(bad < 0);
    CHECK(nans > 0);
    CHECK(maxd <= TOL * maxr);
    free(r);
    free(d);
}

/* A diverged step shows as NaN, as in torch: relu keeps NaN, and a batchnorm whose input holds a
 * NaN makes that channel NaN (oneDNN's own relu would turn NaN into 0). */
static void test_nan(void)
{
    const int n = 2, c = 32, hw = 3, dims[4] = {n, c, hw, hw};
    pair x = pnew(PTC__ROLE_ACT, n, c, hw, hw), y = pnew(PTC__ROLE_ACT, n, c, hw, hw);
    float *v = malloc((size_t)x.n * sizeof *v);
    for (int64_t i = 0; i < x.n; i++)
        v[i] = (float)(urand() * 2 - 1);
    v[5] = NAN;                             /* image 0, channel 0 */
    v[(int64_t)(c + 17) * hw * hw] = -0.0f; /* image 1, channel 17 */
    pwrite(&x, v);
    OK(R->relu_fwd(rb, x.r, y.r, &err));
    OK(D->relu_fwd(db, x.d, y.d, &err));
    pcheck_nan(&y, "relu_fwd with a NaN");
    OK(R->add(rb, x.r, x.r, y.r, 1, &err));
    OK(D->add(db, x.d, x.d, y.d, 1, &err));
    pcheck_nan(&y, "add+relu with a NaN");
    ptc__op *ro, *dop;
    OK(R->bn_plan(rb, &ro, dims, 1e-5, &err));
    OK(D->bn_plan(db, &dop, dims, 1e-5, &err));
    pair g = pnew(PTC__ROLE_VEC, 1, c, 1, 1), b = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    pair sm = pnew(PTC__ROLE_VEC, 1, c, 1, 1), si = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    pair rm = pnew(PTC__ROLE_VEC, 1, c, 1, 1), rv = pnew(PTC__ROLE_VEC, 1, c, 1, 1);
    prand(&g, 0.5, 1.5);
    prand(&b, -0.5, 0.5);
    prand(&rv, 0.5, 1.5);
    OK(R->tensor_fill(rb, rm.r, 0, &err));
    OK(D->tensor_fill(db, rm.d, 0, &err));
    for (int relu = 0; relu < 2; relu++) {
        OK(R->bn_fwd_train(rb, ro, x.r, g.r, b.r, y.r, sm.r, si.r, rm.r, rv.r, 0.1, relu, &err));
        OK(D->bn_fwd_train(db, dop, x.d, g.d, b.d, y.d, sm.d, si.d, rm.d, rv.d, 0.1, relu, &err));
        pcheck_nan(&y, relu ? "bn_fwd_train+relu with a NaN: y" : "bn_fwd_train with a NaN: y");
        pcheck_nan(&rm, "bn_fwd_train with a NaN: running_mean");
    }
    free(v);
    pair *all[] = {&x, &y, &g, &b, &sm, &si, &rm, &rv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pfree(all[i]);
    R->plan_free(rb, ro);
    D->plan_free(db, dop);
}

/* ---- allocation failures --------------------------------------------------------------------- */

/* The allocator that fails the fail_at-th allocation (counting from 1) and all after it. */
static long alloc_count, fail_at;

static void *failing_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    if (fail_at > 0 && ++alloc_count >= fail_at)
        return NULL;
    return realloc(ptr, size);
}

/* Every op on a fresh instance, freeing everything on the way out; returns the first error. */
static int alloc_scenario(void)
{
    ptc__be *be = NULL;
    ptc__bt *t[16] = {0};
    ptc__op *op[4] = {0};
    ptc__be_params p = {.dtype = PTC__BE_F32, .threads = 1};
    ptc_error e;
    int rc = D->open(&be, &p, &e);
    if (rc < 0)
        return rc;
    const int a8[4] = {2, 16, 8, 8};
    /* role, then dims: activations 0, 1, 12 [2][16][8][8]; weights 2, 3, 13; vectors 4 to 7;
     * pooled 8, 9 [2][16][4][4]; 10, 11 [2][16][1][1] for the dense-layer convolution */
    const int dims[][5] = {{0, 2, 16, 8, 8}, {0, 2, 16, 8, 8}, {1, 16, 16, 3, 3}, {1, 16, 16, 3, 3},
                           {2, 1, 16, 1, 1}, {2, 1, 16, 1, 1}, {2, 1, 16, 1, 1},  {2, 1, 16, 1, 1},
                           {0, 2, 16, 4, 4}, {0, 2, 16, 4, 4}, {0, 2, 16, 1, 1},  {0, 2, 16, 1, 1},
                           {0, 2, 16, 8, 8}, {1, 16, 16, 3, 3}};
    for (int i = 0; i < 14 && rc == 0; i++)
        rc = D->tensor_new(be, &t[i], (ptc__role)dims[i][0], &dims[i][1], &e);
    ptc__conv_shape cs = {2, 16, 8, 8, 16, 3, 3, 1, 1, 8, 8};
    ptc__conv_shape fc = {2, 16, 1, 1, 16, 3, 3, 1, 1, 1, 1}; /* a dense layer */
    ptc__pool_shape ps = {2, 16, 8, 8, 3, 3, 2, 1, 4, 4};
    ptc__sgd h = {0.1, 0.9, 0, 1e-4, 0, 1};
    if (rc == 0)
        rc = D->conv_plan(be, &op[0], &cs, &e);
    if (rc == 0)
        rc = D->conv_plan(be, &op[1], &fc, &e);
    if (rc == 0)
        rc = D->bn_plan(be, &op[2], a8, 1e-5, &e);
    if (rc == 0)
        rc = D->maxpool_plan(be, &op[3], &ps, &e);
    if (rc == 0)
        rc = D->tensor_fill(be, t[0], 0.5, &e);
    if (rc == 0)
        rc = D->tensor_fill(be, t[2], 0.1, &e);
    if (rc == 0)
        rc = D->tensor_fill(be, t[4], 1, &e);
    if (rc == 0)
        rc = D->tensor_fill(be, t[7], 1, &e);
    if (rc == 0)
        rc = D->conv_fwd(be, op[0], t[0], t[2], t[1], &e);
    if (rc == 0)
        rc = D->conv_bwd_data(be, op[0], t[1], t[2], t[12], &e);
    if (rc == 0)
        rc = D->conv_bwd_weight(be, op[0], t[0], t[1], t[3], &e);
    if (rc == 0)
        rc = D->conv_fwd(be, op[1], t[10], t[2], t[11], &e);
    if (rc == 0)
        rc = D->conv_bwd_data(be, op[1], t[11], t[2], t[10], &e);
    if (rc == 0)
        rc = D->conv_bwd_weight(be, op[1], t[10], t[11], t[13], &e);
    if (rc == 0)
        rc = D->bn_fwd_train(be, op[2], t[1], t[4], t[5], t[0], t[6], t[7], t[5], t[7], 0.1, 1, &e);
    if (rc == 0)
        rc = D->bn_bwd(be, op[2], t[1], t[0], t[12], t[4], t[6], t[7], t[1], NULL, NULL, &e);
    if (rc == 0)
        rc = D->tensor_fill(be, t[0], 0.25, &e); /* the relu workspace no longer belongs to y */
    if (rc == 0)
        rc = D->bn_bwd(be, op[2], t[1], t[0], t[12], t[4], t[6], t[7], t[1], t[5], t[6], &e);
    if (rc == 0)
        rc = D->maxpool_fwd(be, op[3], t[0], t[8], &e);
    if (rc == 0)
        rc = D->maxpool_bwd(be, op[3], t[1], t[8], t[9], t[0], &e); /* argmax made again */
    if (rc == 0)
        rc = D->add(be, t[0], t[1], t[12], 1, &e);
    if (rc == 0)
        rc = D->accumulate(be, t[0], t[12], &e);
    if (rc == 0)
        rc = D->sgd_step(be, t[2], t[3], t[13], &h, &e);
    for (int i = 0; i < 4; i++)
        D->plan_free(be, op[i]);
    for (int i = 0; i < 16; i++)
        D->tensor_free(be, t[i]);
    D->close(be);
    return rc;
}

/* Failing each allocation in turn: every failure is a clean PTC_ENOMEM (ASan builds check that
 * nothing leaks), and once no allocation fails the scenario runs through. */
static void test_alloc_failures(void)
{
    int ok = 0, n;
    for (n = 1; n < 2000 && !ok; n++) {
        alloc_count = 0;
        fail_at = n;
        ptc_set_allocator(failing_realloc, NULL);
        int rc = alloc_scenario();
        ptc_set_allocator(NULL, NULL);
        if (rc == 0)
            ok = 1;
        else if (rc != PTC_ENOMEM) {
            fprintf(stderr, "allocation %d failed: %s instead of ENOMEM\n", n, ptc_err_name(rc));
            CHECK(rc == PTC_ENOMEM);
        }
    }
    fail_at = 0;
    printf("allocation failures: %d allocations failed one at a time, all clean\n", n - 2);
    CHECK(ok);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void)
{
    ptc__be *b = NULL;
    ptc__be_params p64 = {.dtype = PTC__BE_F64, .threads = 1};
    CHECK_CODE(D->open(&b, &p64, &err), PTC_EUNSUPPORTED, &err);
    CHECK(b == NULL);
    D->close(NULL);

    ptc__conv_shape bad = {4, 64, 8, 8, 64, 3, 3, 1, 1, 9, 9};
    ptc__op *op = NULL;
    CHECK_CODE(D->conv_plan(db, &op, &bad, &err), PTC_EINVAL, &err);
    ptc__conv_shape s = {4, 64, 8, 8, 64, 3, 3, 1, 1, 8, 8};
    OK(D->conv_plan(db, &op, &s, &err));
    ptc__bt *x, *w;
    OK(D->tensor_new(db, &x, PTC__ROLE_ACT, (const int[4]){4, 64, 8, 8}, &err));
    OK(D->tensor_new(db, &w, PTC__ROLE_CONV_W, (const int[4]){64, 64, 3, 3}, &err));
    CHECK_CODE(D->conv_fwd(db, op, x, x, x, &err), PTC_EINVAL, &err); /* w of role ACT */
    CHECK(strstr(err.message, "conv_fwd: w") != NULL);
    /* a conv plan where a bn plan is due */
    CHECK_CODE(D->bn_fwd_eval(db, op, x, x, x, x, x, x, 0, &err), PTC_EINVAL, &err);
    /* Tensors and plans belong to the instance that made them. */
    ptc__be *other;
    ptc__be_params p1 = {.dtype = PTC__BE_F32, .threads = 1};
    OK(D->open(&other, &p1, &err));
    ptc__bt *y2;
    OK(D->tensor_new(other, &y2, PTC__ROLE_ACT, (const int[4]){4, 64, 8, 8}, &err));
    CHECK_CODE(D->conv_fwd(db, op, x, w, y2, &err), PTC_EINVAL, &err);
    CHECK_CODE(D->conv_fwd(other, op, x, w, y2, &err), PTC_EINVAL, &err);
    CHECK_CODE(D->relu_fwd(db, y2, x, &err), PTC_EINVAL, &err);
    D->tensor_free(other, y2);
    D->close(other);
    D->tensor_free(db, x);
    D->tensor_free(db, w);
    D->plan_free(db, op);
}

int main(void)
{
    ptc__be_params p = {.dtype = PTC__BE_F32, .threads = 2};
    tuned = ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)dnnl_cpu_isa_avx2) ==
            (unsigned)dnnl_cpu_isa_avx2;
    if (!tuned)
        printf("oneDNN runs neither AVX2 nor AVX-512 kernels here: reorder counts not checked\n");
    if (R->open(&rb, &p, &err) < 0 || D->open(&db, &p, &err) < 0) {
        fprintf(stderr, "test_backend_dnnl: cannot open the backends: %s\n", err.message);
        return 1;
    }

    test_errors();
    test_alloc_failures();
    test_roundtrip();
    /* Convolutions, direct (the default), then with Winograd allowed for 3x3 stride 1. */
    ptc__be *direct = db, *wdb;
    ptc__be_params wp = p;
    wp.winograd = 1;
    int wrc = D->open(&wdb, &wp, &err);
    CHECK_CODE(wrc, 0, &err);
    for (wino = 0; wino < 2 && (wino == 0 || wrc == 0); wino++) {
        db = wino ? wdb : direct;
        for (size_t i = 0; i < sizeof tv_convs / sizeof tv_convs[0]; i++)
            test_conv(&tv_convs[i], "torchvision", 4);
        for (size_t i = 0; i < sizeof cifar_convs / sizeof cifar_convs[0]; i++)
            test_conv(&cifar_convs[i], "cifar", 4);
        test_conv(&tv_convs[1], "torchvision", 32); /* weight gradients summed over more images */
        test_conv(&cifar_convs[4], "cifar", 32);
        test_conv_layouts_128();
        test_steady_state(4, 64, 8);
    }
    wino = 0;
    db = direct;
    if (wrc == 0)
        D->close(wdb);
    static const int bns[][3] = {{4, 64, 16}, {4, 64, 8},  {4, 128, 4}, {4, 256, 2},
                                 {4, 512, 1}, {4, 64, 32}, {4, 512, 4}};
    for (size_t i = 0; i < sizeof bns / sizeof bns[0]; i++)
        for (int relu = 0; relu < 2; relu++)
            test_bn(bns[i][0], bns[i][1], bns[i][2], relu);
    for (int mode = 0; mode < 3; mode++)
        test_maxpool(4, 64, 16, mode);
    test_maxpool(2, 16, 7, 1); /* odd size: windows cut by the border on both sides */
    test_avgpool(4, 512, 1);
    test_avgpool(4, 512, 4);
    test_avgpool(4, 20, 3); /* plain layout */
    test_linear(4, 512, 10);
    test_linear(128, 512, 10);
    test_elementwise(4, 64, 8);
    test_nan();
    test_elementwise(4, 3, 5); /* plain layout */
    test_sgd(PTC__ROLE_CONV_W, 64, 64, 3, 3);
    test_sgd(PTC__ROLE_CONV_W, 64, 3, 7, 7);
    test_sgd(PTC__ROLE_CONV_W, 24, 40, 3, 3); /* blocked with padding */
    test_sgd(PTC__ROLE_VEC, 1, 64, 1, 1);
    test_sgd(PTC__ROLE_MAT, 10, 512, 1, 1);
    test_steady_state(4, 64, 32);
    test_steady_state(4, 256, 2); /* convolutions that run as matrix products */
    test_steady_state(4, 512, 1);

    ptc__dnnl_stats st = stats();
    printf("largest relative error %.3g, %.3g in the Winograd convolutions (tolerance %.0e); %llu "
           "primitives created\n",
           worst[0], worst[1], TOL, (unsigned long long)st.primitives);
    D->close(db);
    R->close(rb);
    return check_exit("test_backend_dnnl");
}
#endif
