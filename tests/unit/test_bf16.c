/*
 * test_bf16.c - the dnnl backend's bf16 precision (PTC__PREC_BF16, torch.autocast's CPU rules).
 *
 * Layers: a bf16 instance's convolution (the stem with its 3 input channels, a direct 3x3, and a
 * 3x3 that runs as a matrix product) and linear layer, forward and backward, against the ref
 * backend's float32 result on bf16-rounded operands: outputs and input gradients must be bf16
 * values (autocast returns bf16) within one bf16 rounding (2^-8 relative) plus float32 summation
 * noise of the reference; weight gradients float32 within that noise. A training step: a
 * ResNet-18 through the public model API with precision "bf16" on dnnl trains (finite loss, the
 * weights move, the loss is within 5% of the float32 model's and not equal to it) and its state
 * dict is float32 in every floating entry (float32 master weights). The ref backend refuses bf16
 * with PTC_EUNSUPPORTED. On a processor without bf16 instructions the dnnl refusal must name
 * AVX512_BF16, and the rest is skipped (77). Needs the dnnl module (PTC_PLUGIN_PATH, as make check
 * sets it); without oneDNN in the build: 77.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "ptc/ptc.h"

static ptc_error err;
#define OK(x) CHECK_CODE((x), 0, &err)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static float bf16(float v) /* to nearest, ties to even (finite inputs) */
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

static const ptc__backend_ops *D, *R;
static ptc__be *db, *rb;

/* A tensor in both backends: dnnl gets v, ref gets v rounded to bf16 when round. */
typedef struct pair {
    ptc__bt *d, *r;
    int64_t n;
} pair;

static pair mk(ptc__role role, int n, int c, int h, int w, const float *v, int round)
{
    const int dims[4] = {n, c, h, w};
    pair p = {NULL, NULL, (int64_t)n * c * h * w};
    OK(D->tensor_new(db, &p.d, role, dims, &err));
    OK(R->tensor_new(rb, &p.r, role, dims, &err));
    if (!v)
        return p;
    float *r = malloc((size_t)p.n * sizeof *r);
    for (int64_t i = 0; i < p.n; i++)
        r[i] = round ? bf16(v[i]) : v[i];
    OK(D->tensor_write(db, p.d, v, &err));
    OK(R->tensor_write(rb, p.r, r, &err));
    free(r);
    return p;
}

static pair mk_rand(ptc__role role, int n, int c, int h, int w)
{
    int64_t k = (int64_t)n * c * h * w;
    float *v = malloc((size_t)k * sizeof *v);
    for (int64_t i = 0; i < k; i++)
        v[i] = frand();
    pair p = mk(role, n, c, h, w, v, 1);
    free(v);
    return p;
}

static void pfree(pair *p)
{
    D->tensor_free(db, p->d);
    R->tensor_free(rb, p->r);
}

/* dnnl's output against ref's: out_bf16 says the output must hold bf16 values. */
static void compare(const char *what, const pair *p, int out_bf16)
{
    float *d = malloc((size_t)p->n * sizeof *d), *r = malloc((size_t)p->n * sizeof *r);
    OK(D->tensor_read(db, p->d, d, &err));
    OK(R->tensor_read(rb, p->r, r, &err));
    double big = 0, worst = 0;
    int64_t not_bf16 = 0, at = -1;
    for (int64_t i = 0; i < p->n; i++)
        big = fmax(big, fabs(r[i]));
    for (int64_t i = 0; i < p->n; i++) {
        /* one bf16 rounding of the output, and float32 summation noise of the reference */
        double tol = (out_bf16 ? fabs(r[i]) / 256 : 0) + 2e-5 * big;
        double e = fabs((double)d[i] - r[i]) / (tol > 0 ? tol : 1);
        if (e > worst)
            worst = e, at = i;
        if (out_bf16 && bf16(d[i]) != d[i])
            not_bf16++;
    }
    CHECK(worst <= 1.0);
    CHECK(not_bf16 == 0);
    if (worst > 1.0 || not_bf16 || getenv("PTC_TEST_VERBOSE"))
        fprintf(stderr,
                "  %-28s worst |dnnl - ref| / tolerance %.3f (at %lld: dnnl %.8g ref %.8g), "
                "%lld values not bf16, max |ref| %.4g\n",
                what, worst, (long long)at, at >= 0 ? d[at] : 0.0, at >= 0 ? r[at] : 0.0,
                (long long)not_bf16, big);
    free(d);
    free(r);
}

static void test_conv(const char *name, int n, int c, int h, int k, int r, int stride, int pad)
{
    ptc__conv_shape s = {n, c, h, h, k, r, r, stride, pad, 0, 0};
    s.oh = s.ow = (h + 2 * pad - r) / stride + 1;
    ptc__op *dop, *rop;
    OK(D->conv_plan(db, &dop, &s, &err));
    OK(R->conv_plan(rb, &rop, &s, &err));
    pair x = mk_rand(PTC__ROLE_ACT, n, c, h, h), w = mk_rand(PTC__ROLE_CONV_W, k, c, r, r);
    pair y = mk(PTC__ROLE_ACT, n, k, s.oh, s.ow, NULL, 0);
    pair dy = mk_rand(PTC__ROLE_ACT, n, k, s.oh, s.ow);
    pair dx = mk(PTC__ROLE_ACT, n, c, h, h, NULL, 0),
         dw = mk(PTC__ROLE_CONV_W, k, c, r, r, NULL, 0);
    char what[96];
    OK(D->conv_fwd(db, dop, x.d, w.d, y.d, &err));
    OK(R->conv_fwd(rb, rop, x.r, w.r, y.r, &err));
    snprintf(what, sizeof what, "%s conv_fwd", name);
    compare(what, &y, 1);
    OK(D->conv_bwd_data(db, dop, dy.d, w.d, dx.d, &err));
    OK(R->conv_bwd_data(rb, rop, dy.r, w.r, dx.r, &err));
    snprintf(what, sizeof what, "%s conv_bwd_data", name);
    compare(what, &dx, 1);
    OK(D->conv_bwd_weight(db, dop, x.d, dy.d, dw.d, &err));
    OK(R->conv_bwd_weight(rb, rop, x.r, dy.r, dw.r, &err));
    snprintf(what, sizeof what, "%s conv_bwd_weight", name);
    compare(what, &dw, 0);
    pair *all[] = {&x, &w, &y, &dy, &dx, &dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pfree(all[i]);
    D->plan_free(db, dop);
    R->plan_free(rb, rop);
}

static void test_linear(int n, int kk, int m)
{
    pair x = mk_rand(PTC__ROLE_MAT, n, kk, 1, 1), w = mk_rand(PTC__ROLE_MAT, m, kk, 1, 1);
    pair b = mk_rand(PTC__ROLE_VEC, 1, m, 1, 1), dy = mk_rand(PTC__ROLE_MAT, n, m, 1, 1);
    pair y = mk(PTC__ROLE_MAT, n, m, 1, 1, NULL, 0), dx = mk(PTC__ROLE_MAT, n, kk, 1, 1, NULL, 0);
    pair dw = mk(PTC__ROLE_MAT, m, kk, 1, 1, NULL, 0), db_ = mk(PTC__ROLE_VEC, 1, m, 1, 1, NULL, 0);
    OK(D->linear_fwd(db, x.d, w.d, b.d, y.d, &err));
    OK(R->linear_fwd(rb, x.r, w.r, b.r, y.r, &err));
    compare("linear_fwd", &y, 1);
    OK(D->linear_bwd(db, x.d, w.d, dy.d, dx.d, dw.d, db_.d, &err));
    OK(R->linear_bwd(rb, x.r, w.r, dy.r, dx.r, dw.r, db_.r, &err));
    compare("linear_bwd dx", &dx, 1);
    compare("linear_bwd dw", &dw, 0);
    compare("linear_bwd db", &db_, 0);
    pair *all[] = {&x, &w, &b, &dy, &y, &dx, &dw, &db_};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pfree(all[i]);
}

/* One step of a ResNet-18 on random images at the given precision: the loss, and whether every
 * floating entry of the state dict after it is float32 (*all_f32) and differs from before
 * somewhere (*moved). */
static int train_step(const char *precision, double *loss, int *all_f32, int *moved)
{
    enum { N = 8 };
    static float x[N * 3 * 32 * 32];
    int64_t labels[N];
    uint64_t keep = rng;
    rng = 12345; /* the same images for both precisions */
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    for (int i = 0; i < N; i++)
        labels[i] = i % 10;
    rng = keep;
    ptc_model_params p;
    ptc_model_params_default(&p);
    p.backend = "dnnl";
    p.precision = precision;
    p.threads = 2;
    ptc_model *m = NULL;
    ptc_sgd *opt = NULL;
    ptc_doc *doc = NULL;
    ptc_value *before = NULL, *after = NULL;
    int rc = ptc_model_new(&m, &p, &err);
    if (rc == 0)
        rc = ptc_doc_new(&doc, &err);
    if (rc == 0)
        rc = ptc_model_state_dict(m, doc, &before, &err);
    if (rc == 0)
        rc = ptc_sgd_new(&opt, m, 0.1, 0.9, 0, 5e-4, 0, &err);
    if (rc == 0)
        rc = ptc_model_train_step(m, opt, x, labels, N, 32, 32, loss, &err);
    if (rc == 0)
        rc = ptc_model_state_dict(m, doc, &after, &err);
    if (rc == 0) {
        ptc_model_params q;
        ptc_model_params_default(&q);
        OK(ptc_model_get_params(m, &q, &err));
        CHECK_STR(q.precision, precision);
        *all_f32 = 1;
        *moved = 0;
        size_t n = ptc_value_len(after);
        CHECK(n > 100);
        for (size_t i = 0; i < n; i++) {
            const ptc_tensor *t = ptc_value_tensor(ptc_dict_value(after, i)),
                             *t0 = ptc_value_tensor(ptc_dict_value(before, i));
            if (!t || !t0 || ptc_tensor_dtype(t) == PTC_INT64)
                continue;
            if (ptc_tensor_dtype(t) != PTC_FLOAT32) {
                *all_f32 = 0;
                continue;
            }
            if (memcmp(ptc_tensor_data(t), ptc_tensor_data(t0), (size_t)ptc_tensor_nbytes(t)))
                *moved = 1;
        }
    }
    ptc_doc_free(doc);
    ptc_sgd_free(opt);
    ptc_model_free(m);
    return rc;
}

int main(void)
{
#ifndef PTC_HAVE_DNNL
    printf("test_bf16: SKIP: built without oneDNN\n");
    return 77;
#endif
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 2, .precision = PTC__PREC_BF16};
    /* ref refuses bf16: its float32 would not be what was asked for */
    R = &ptc__backend_ref;
    CHECK_CODE(R->open(&rb, &bp, &err), PTC_EUNSUPPORTED, &err);
    CHECK(strstr(err.message, "bf16") != NULL);
    OK(ptc__backend_get("dnnl", &D, &err));
    if (!D)
        return check_exit("test_bf16");
    int rc = D->open(&db, &bp, &err);
    if (rc == PTC_EUNSUPPORTED) {
        CHECK(strstr(err.message, "AVX512_BF16") != NULL);
        printf("test_bf16: SKIP: %s\n", err.message);
        return check_failures ? 1 : 77;
    }
    OK(rc);
    bp.precision = PTC__PREC_F32;
    OK(R->open(&rb, &bp, &err));
    if (!db || !rb)
        return check_exit("test_bf16");

    test_conv("stem 7x7/2", 4, 3, 32, 64, 7, 2, 3);
    test_conv("3x3 64->64 8x8", 4, 64, 8, 64, 3, 1, 1);
    test_conv("3x3/2 128->256 4x4", 4, 128, 4, 256, 3, 2, 1);
    test_conv("3x3 256->256 2x2 (GEMM)", 4, 256, 2, 256, 3, 1, 1);
    test_linear(4, 512, 10);
    D->close(db);
    R->close(rb);

    double l16 = 0, l32 = 0;
    int f32_16 = 0, moved16 = 0, f32_32 = 0, moved32 = 0;
    OK(train_step("bf16", &l16, &f32_16, &moved16));
    OK(train_step("f32", &l32, &f32_32, &moved32));
    printf("test_bf16: training step loss bf16 %.6f, f32 %.6f\n", l16, l32);
    CHECK(isfinite(l16) && l16 > 0);
    CHECK(f32_16 && moved16);
    CHECK(f32_32 && moved32);
    CHECK(fabs(l16 - l32) <= 0.05 * l32);
    CHECK(l16 != l32); /* bf16 arithmetic did happen */
    return check_exit("test_bf16");
}
