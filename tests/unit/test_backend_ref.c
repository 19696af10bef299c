/*
 * test_backend_ref.c - the reference backend (lib/backend/ref.c), the oracle of every other
 * backend, checked against mathematics rather than against itself:
 *
 *   1. Small forwards and backwards computed by hand, exactly: convolution (stride, padding,
 *      several channels), batchnorm training (batch mean, biased variance to normalise, unbiased
 *      variance and momentum for the running statistics, fused relu) and eval, max pool (ties go
 *      to the first maximum, padding never wins, -inf and NaN as torch treats them, overlapping
 *      windows add up), average pool, linear, relu, add, accumulate, fill.
 *   2. Gradient checks in float64: every backward against central finite differences of
 *      L = sum(y * r) for random r, on random inputs built so that no perturbation crosses a kink
 *      of relu or max pool. Convolutions with kernels 1/3/7 (and 3x2), strides 1/2, padding
 *      0/1/3, non-square inputs.
 *   3. float32 against float64: the same inputs (representable in float) through both instances
 *      agree to float32 precision, forward and backward.
 *   4. SGD: several steps with momentum, dampening, nesterov and weight decay against a
 *      re-implementation of torch.optim.SGD written here, bit for bit in both element types.
 *   5. Threads: results are the same bits with 1 and 3 threads (when built with OpenMP).
 *   6. Argument errors: shapes, roles, plans, instances, allocation failure, ptc__conv_out.
 *
 * The worst relative error of each gradient check is printed.
 */
#include "config.h" /* PTC_HAVE_DNNL */

#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const ptc__backend_ops *B;
static ptc__be *be64, *be32;
static ptc__be *be32_t1, *be32_t3; /* float32 with 1 and 3 threads */
static ptc_error err;

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi), rounded to a float so that float32 and float64 see the same values. */
static double uniform(double lo, double hi)
{
    double u = (double)(rng_next() >> 11) * 0x1p-53;
    return (double)(float)(lo + (hi - lo) * u);
}

static void fill_uniform(double *v, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = uniform(lo, hi);
}

static double *dalloc(int64_t n)
{
    double *p = calloc((size_t)n, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(99);
    }
    return p;
}

static int is32(const ptc__be *be)
{
    return be == be32 || be == be32_t1 || be == be32_t3;
}

static ptc__bt *mk(ptc__be *be, ptc__role role, int n, int c, int h, int w)
{
    ptc__bt *t = NULL;
    int dims[4] = {n, c, h, w};
    CHECK_CODE(B->tensor_new(be, &t, role, dims, &err), 0, &err);
    return t;
}

/* Writes / reads n doubles to / from t, converting to / from float for the float32 instance. */
static void put(ptc__be *be, ptc__bt *t, const double *v, int64_t n)
{
    if (is32(be)) {
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)v[i];
        CHECK_CODE(B->tensor_write(be, t, f, &err), 0, &err);
        free(f);
    } else {
        CHECK_CODE(B->tensor_write(be, t, v, &err), 0, &err);
    }
}

static void get(ptc__be *be, const ptc__bt *t, double *v, int64_t n)
{
    if (is32(be)) {
        float *f = malloc((size_t)n * sizeof *f);
        CHECK_CODE(B->tensor_read(be, t, f, &err), 0, &err);
        for (int64_t i = 0; i < n; i++)
            v[i] = f[i];
        free(f);
    } else {
        CHECK_CODE(B->tensor_read(be, t, v, &err), 0, &err);
    }
}

static ptc__bt *mk_put(ptc__be *be, ptc__role role, int n, int c, int h, int w, const double *v)
{
    ptc__bt *t = mk(be, role, n, c, h, w);
    put(be, t, v, (int64_t)n * c * h * w);
    return t;
}

/* Compares n values exactly (within rel relative to the larger magnitude, 0 for bit equality
 * of doubles); prints the first few differences. */
static void check_vals(const char *what, const double *got, const double *want, int64_t n,
                       double rel)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        int same = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= rel * fmax(fabs(g), fabs(w));
        if (same && g == 0 && w == 0 && rel == 0)
            same = signbit(g) == signbit(w);
        if (!same && bad++ < 5)
            fprintf(stderr, "  %s[%lld]: got %.17g, want %.17g\n", what, (long long)i, g, w);
    }
    check_count++;
    if (bad) {
        check_failures++;
        fprintf(stderr, "%s: %d of %lld values differ\n", what, bad, (long long)n);
    }
}

static void check_tensor(const char *what, ptc__be *be, const ptc__bt *t, const double *want,
                         int64_t n, double rel)
{
    double *got = dalloc(n);
    get(be, t, got, n);
    check_vals(what, got, want, n, rel);
    free(got);
}

/* ---- 1. exact small cases -------------------------------------------------------------------- */

static void test_conv_exact(void)
{
    ptc__be *be = be64;
    ptc__op *op = NULL;
    double x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

    /* 2x2 kernel, stride 1, no padding, on a 3x3 image. */
    double w[4] = {1, 2, 3, 4};
    ptc__conv_shape s = {1, 1, 3, 3, 1, 2, 2, 1, 0, 2, 2};
    CHECK_CODE(B->conv_plan(be, &op, &s, &err), 0, &err);
    ptc__bt *tx = mk_put(be, PTC__ROLE_ACT, 1, 1, 3, 3, x);
    ptc__bt *tw = mk_put(be, PTC__ROLE_CONV_W, 1, 1, 2, 2, w);
    ptc__bt *ty = mk(be, PTC__ROLE_ACT, 1, 1, 2, 2), *tdx = mk(be, PTC__ROLE_ACT, 1, 1, 3, 3);
    ptc__bt *tdw = mk(be, PTC__ROLE_CONV_W, 1, 1, 2, 2);
    CHECK_CODE(B->conv_fwd(be, op, tx, tw, ty, &err), 0, &err);
    check_tensor("conv 2x2 y", be, ty, (double[]){37, 47, 67, 77}, 4, 0);
    CHECK_CODE(B->tensor_fill(be, ty, 1.0, &err), 0, &err); /* ty now serves as dy = 1 */
    CHECK_CODE(B->conv_bwd_data(be, op, ty, tw, tdx, &err), 0, &err);
    check_tensor("conv 2x2 dx", be, tdx, (double[]){1, 3, 2, 4, 10, 6, 3, 7, 4}, 9, 0);
    CHECK_CODE(B->conv_bwd_weight(be, op, tx, ty, tdw, &err), 0, &err);
    check_tensor("conv 2x2 dw", be, tdw, (double[]){12, 16, 24, 28}, 4, 0);
    B->plan_free(be, op);
    B->tensor_free(be, tw);
    B->tensor_free(be, ty);
    B->tensor_free(be, tdw);

    /* 3x3 ones, stride 2, padding 1: each output sums the part of its window inside the image. */
    double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ptc__conv_shape s2 = {1, 1, 3, 3, 1, 3, 3, 2, 1, 2, 2};
    CHECK_CODE(B->conv_plan(be, &op, &s2, &err), 0, &err);
    tw = mk_put(be, PTC__ROLE_CONV_W, 1, 1, 3, 3, ones);
    ty = mk(be, PTC__ROLE_ACT, 1, 1, 2, 2);
    CHECK_CODE(B->conv_fwd(be, op, tx, tw, ty, &err), 0, &err);
    check_tensor("conv s2 p1 y", be, ty, (double[]){12, 16, 24, 28}, 4, 0);
    CHECK_CODE(B->tensor_write(be, ty, (double[]){1, 10, 100, 1000}, &err), 0, &err);
    CHECK_CODE(B->conv_bwd_data(be, op, ty, tw, tdx, &err), 0, &err);
    check_tensor("conv s2 p1 dx", be, tdx, (double[]){1, 11, 10, 101, 1111, 1010, 100, 1100, 1000},
                 9, 0);
    B->plan_free(be, op);
    B->tensor_free(be, tx);
    B->tensor_free(be, tw);
    B->tensor_free(be, ty);
    B->tensor_free(be, tdx);

    /* 1x1 kernel mixing two channels into two, batch of two 1x2 images. */
    ptc__conv_shape s3 = {2, 2, 1, 2, 2, 1, 1, 1, 0, 1, 2};
    CHECK_CODE(B->conv_plan(be, &op, &s3, &err), 0, &err);
    tx = mk_put(be, PTC__ROLE_ACT, 2, 2, 1, 2, (double[]){1, 2, 3, 4, 5, 6, 7, 8});
    tw = mk_put(be, PTC__ROLE_CONV_W, 2, 2, 1, 1, (double[]){1, 10, 100, 1000});
    ty = mk(be, PTC__ROLE_ACT, 2, 2, 1, 2);
    CHECK_CODE(B->conv_fwd(be, op, tx, tw, ty, &err), 0, &err);
    check_tensor("conv 1x1 y", be, ty, (double[]){31, 42, 3100, 4200, 75, 86, 7500, 8600}, 8, 0);
    tdw = mk(be, PTC__ROLE_CONV_W, 2, 2, 1, 1);
    CHECK_CODE(B->tensor_write(be, ty, (double[]){1, 0, 0, 0, 0, 0, 0, 1}, &err), 0, &err);
    CHECK_CODE(B->conv_bwd_weight(be, op, tx, ty, tdw, &err), 0, &err);
    /* dw[k][c] = sum_n,p dy[n][k][p] x[n][c][p]: k=0 sees x[0][.][0] = (1, 3), k=1 sees
     * x[1][.][1] = (6, 8). */
    check_tensor("conv 1x1 dw", be, tdw, (double[]){1, 3, 6, 8}, 4, 0);
    B->plan_free(be, op);
    B->tensor_free(be, tx);
    B->tensor_free(be, tw);
    B->tensor_free(be, ty);
    B->tensor_free(be, tdw);
}

static void test_bn_exact(void)
{
    ptc__be *be = be64;
    ptc__op *op = NULL;
    const double eps = 1e-5, m = 0.1;
    int dims[4] = {2, 2, 1, 2};
    CHECK_CODE(B->bn_plan(be, &op, dims, eps, &err), 0, &err);
    /* channel 0 holds 1 2 | 3 4 (mean 2.5, biased variance 1.25, unbiased 5/3);
     * channel 1 holds 10 10 | 10 14 (mean 11, squared deviations 12: variance 3, unbiased 4). */
    double x[8] = {1, 2, 10, 10, 3, 4, 10, 14};
    ptc__bt *tx = mk_put(be, PTC__ROLE_ACT, 2, 2, 1, 2, x);
    ptc__bt *tg = mk_put(be, PTC__ROLE_VEC, 1, 2, 1, 1, (double[]){2, -1});
    ptc__bt *tb = mk_put(be, PTC__ROLE_VEC, 1, 2, 1, 1, (double[]){0.5, 3});
    ptc__bt *ty = mk(be, PTC__ROLE_ACT, 2, 2, 1, 2);
    ptc__bt *sm = mk(be, PTC__ROLE_VEC, 1, 2, 1, 1), *si = mk(be, PTC__ROLE_VEC, 1, 2, 1, 1);
    ptc__bt *rm = mk_put(be, PTC__ROLE_VEC, 1, 2, 1, 1, (double[]){0, 1});
    ptc__bt *rv = mk_put(be, PTC__ROLE_VEC, 1, 2, 1, 1, (double[]){1, 2});

    double mean[2] = {2.5, 11}, var[2] = {1.25, 3}, uvar[2] = {5.0 / 3.0, 4}, g[2] = {2, -1},
           b[2] = {0.5, 3};
    double is[2] = {1 / sqrt(var[0] + eps), 1 / sqrt(var[1] + eps)};
    double want[8], want_relu[8];
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        want[i] = (x[i] - mean[c]) * is[c] * g[c] + b[c];
        want_relu[i] = want[i] < 0 ? 0 : want[i];
    }
    CHECK_CODE(B->bn_fwd_train(be, op, tx, tg, tb, ty, sm, si, rm, rv, m, 0, &err), 0, &err);
    check_tensor("bn train y", be, ty, want, 8, 1e-15);
    check_tensor("bn save_mean", be, sm, mean, 2, 0);
    check_tensor("bn save_invstd", be, si, is, 2, 1e-15);
    double rm1[2] = {m * mean[0] + (1 - m) * 0, m * mean[1] + (1 - m) * 1};
    double rv1[2] = {m * uvar[0] + (1 - m) * 1, m * uvar[1] + (1 - m) * 2};
    check_tensor("bn running_mean", be, rm, rm1, 2, 1e-15);
    check_tensor("bn running_var (unbiased)", be, rv, rv1, 2, 1e-15);

    /* A second step moves the running statistics again: r = (1 - m) r + m x. */
    CHECK_CODE(B->bn_fwd_train(be, op, tx, tg, tb, ty, sm, si, rm, rv, m, 1, &err), 0, &err);
    check_tensor("bn train+relu y", be, ty, want_relu, 8, 1e-15);
    double rm2[2] = {m * mean[0] + (1 - m) * rm1[0], m * mean[1] + (1 - m) * rm1[1]};
    double rv2[2] = {m * uvar[0] + (1 - m) * rv1[0], m * uvar[1] + (1 - m) * rv1[1]};
    check_tensor("bn running_mean step 2", be, rm, rm2, 2, 1e-15);
    check_tensor("bn running_var step 2", be, rv, rv2, 2, 1e-15);

    /* Eval normalises with the running statistics. */
    double we[8], we_relu[8];
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        we[i] = (x[i] - rm2[c]) / sqrt(rv2[c] + eps) * g[c] + b[c];
        we_relu[i] = we[i] < 0 ? 0 : we[i];
    }
    CHECK_CODE(B->bn_fwd_eval(be, op, tx, tg, tb, rm, rv, ty, 0, &err), 0, &err);
    check_tensor("bn eval y", be, ty, we, 8, 1e-14);
    CHECK_CODE(B->bn_fwd_eval(be, op, tx, tg, tb, rm, rv, ty, 1, &err), 0, &err);
    check_tensor("bn eval+relu y", be, ty, we_relu, 8, 1e-14);

    /* Backward with dy = e_0 (first element of channel 0) and no relu:
     * dbeta = sum dy, dgamma = sum dy xhat, dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)).
     */
    CHECK_CODE(B->bn_fwd_train(be, op, tx, tg, tb, ty, sm, si, rm, rv, m, 0, &err), 0, &err);
    double dy[8] = {1, 0, 0, 0, 0, 0, 0, 0}, dx[8];
    ptc__bt *tdy = mk_put(be, PTC__ROLE_ACT, 2, 2, 1, 2, dy),
            *tdx = mk(be, PTC__ROLE_ACT, 2, 2, 1, 2);
    ptc__bt *tdg = mk(be, PTC__ROLE_VEC, 1, 2, 1, 1), *tdb = mk(be, PTC__ROLE_VEC, 1, 2, 1, 1);
    double xhat0 = (1 - 2.5) * is[0];
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        double xh = (x[i] - mean[c]) * is[c];
        dx[i] = c == 0 ? g[0] * is[0] * (dy[i] - 0.25 - xh * xhat0 / 4) : 0;
    }
    CHECK_CODE(B->bn_bwd(be, op, tx, NULL, tdy, tg, sm, si, tdx, tdg, tdb, &err), 0, &err);
    check_tensor("bn bwd dx", be, tdx, dx, 8, 1e-14);
    check_tensor("bn bwd dgamma", be, tdg, (double[]){xhat0, 0}, 2, 1e-15);
    check_tensor("bn bwd dbeta", be, tdb, (double[]){1, 0}, 2, 0);

    /* With relu fused, the gradient of an output that relu zeroed does not flow: dy masked where
     * y <= 0. Channel 0's first output is negative, so everything vanishes (the sign of the
     * zeros is not compared: gamma < 0 makes some of them -0). */
    CHECK_CODE(B->bn_fwd_train(be, op, tx, tg, tb, ty, sm, si, rm, rv, m, 1, &err), 0, &err);
    CHECK_CODE(B->bn_bwd(be, op, tx, ty, tdy, tg, sm, si, tdx, tdg, tdb, &err), 0, &err);
    check_tensor("bn+relu bwd dx", be, tdx, (double[]){0, 0, 0, 0, 0, 0, 0, 0}, 8, 1e-300);
    check_tensor("bn+relu bwd dbeta", be, tdb, (double[]){0, 0}, 2, 1e-300);

    ptc__bt *all[] = {tx, tg, tb, ty, sm, si, rm, rv, tdy, tdx, tdg, tdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        B->tensor_free(be, all[i]);
    B->plan_free(be, op);
}

/* Max pool of one plane h x w with the given window; checks y and the routing of dy = 1, 2, 3... */
static void pool_case(const char *name, int h, int w, int r, int stride, int pad, const double *x,
                      const double *want_y, const double *want_dx)
{
    ptc__be *be = be64;
    ptc__op *op = NULL;
    int oh = ptc__conv_out(h, r, stride, pad), ow = ptc__conv_out(w, r, stride, pad);
    ptc__pool_shape s = {1, 1, h, w, r, r, stride, pad, oh, ow};
    CHECK_CODE(B->maxpool_plan(be, &op, &s, &err), 0, &err);
    ptc__bt *tx = mk_put(be, PTC__ROLE_ACT, 1, 1, h, w, x),
            *ty = mk(be, PTC__ROLE_ACT, 1, 1, oh, ow);
    ptc__bt *tdy = mk(be, PTC__ROLE_ACT, 1, 1, oh, ow), *tdx = mk(be, PTC__ROLE_ACT, 1, 1, h, w);
    CHECK_CODE(B->maxpool_fwd(be, op, tx, ty, &err), 0, &err);
    char what[96];
    snprintf(what, sizeof what, "maxpool %s y", name);
    check_tensor(what, be, ty, want_y, oh * ow, 0);
    double dy[64];
    for (int i = 0; i < oh * ow; i++)
        dy[i] = i + 1;
    put(be, tdy, dy, oh * ow);
    CHECK_CODE(B->maxpool_bwd(be, op, tx, ty, tdy, tdx, &err), 0, &err);
    snprintf(what, sizeof what, "maxpool %s dx", name);
    check_tensor(what, be, tdx, want_dx, h * w, 0);
    B->tensor_free(be, tx);
    B->tensor_free(be, ty);
    B->tensor_free(be, tdy);
    B->tensor_free(be, tdx);
    B->plan_free(be, op);
}

static void test_pool_exact(void)
{
    const double inf = INFINITY, nan = NAN;
    /* Ties: the first maximum in row-major order of the window takes the gradient. */
    pool_case("ties", 2, 2, 2, 2, 0, (double[]){5, 5, 5, 5}, (double[]){5}, (double[]){1, 0, 0, 0});
    pool_case("ties 2", 2, 2, 2, 2, 0, (double[]){1, 7, 7, 2}, (double[]){7},
              (double[]){0, 1, 0, 0});
    /* Padding never wins, even over negative values. */
    pool_case("negative, padded", 2, 2, 3, 2, 1, (double[]){-3, -2, -5, -4}, (double[]){-2},
              (double[]){0, 1, 0, 0});
    /* All -inf: the output is -inf and the gradient goes to the window's first in-bounds
     * element (torch's initial argmax). */
    pool_case("-inf", 2, 2, 3, 2, 1, (double[]){-inf, -inf, -inf, -inf}, (double[]){-inf},
              (double[]){1, 0, 0, 0});
    /* NaN wins, and a later NaN replaces an earlier one (torch: val > max || isnan(val)). */
    pool_case("NaN", 2, 2, 2, 2, 0, (double[]){1, nan, 3, nan}, (double[]){nan},
              (double[]){0, 0, 0, 1});
    /* ResNet's 3x3 stride 2 padding 1 on 5x5 (output 3x3): the maximum in the middle is in four
     * overlapping windows and collects 1 + 2 + 4 + 5 (outputs numbered 1..9 row-major). */
    double x[25];
    for (int i = 0; i < 25; i++)
        x[i] = -i;
    x[6] = 100; /* (1, 1): in the windows of outputs (0,0) (0,1) (1,0) (1,1) */
    pool_case(
        "overlap", 5, 5, 3, 2, 1, x, (double[]){100, 100, -3, 100, 100, -8, -15, -16, -18},
        (double[]){0, 0, 0, 3, 0, 0, 12, 0, 6, 0, 0, 0, 0, 0, 0, 7, 8, 0, 9, 0, 0, 0, 0, 0, 0});
}

static void test_small_ops_exact(void)
{
    ptc__be *be = be64;
    /* Global average pool and its backward dy / (h w). */
    ptc__bt *tx = mk_put(be, PTC__ROLE_ACT, 1, 2, 2, 2, (double[]){1, 2, 3, 4, 10, 20, 30, 41});
    ptc__bt *ty = mk(be, PTC__ROLE_MAT, 1, 2, 1, 1);
    CHECK_CODE(B->avgpool_fwd(be, tx, ty, &err), 0, &err);
    check_tensor("avgpool y", be, ty, (double[]){2.5, 25.25}, 2, 0);
    put(be, ty, (double[]){4, -8}, 2);
    CHECK_CODE(B->avgpool_bwd(be, ty, tx, &err), 0, &err);
    check_tensor("avgpool dx", be, tx, (double[]){1, 1, 1, 1, -2, -2, -2, -2}, 8, 0);
    B->tensor_free(be, tx);
    B->tensor_free(be, ty);

    /* Linear: x [2][2], w [3][2], b [3]. */
    ptc__bt *lx = mk_put(be, PTC__ROLE_MAT, 2, 2, 1, 1, (double[]){1, 2, 3, 4});
    ptc__bt *lw = mk_put(be, PTC__ROLE_MAT, 3, 2, 1, 1, (double[]){1, 0, 0, 1, 1, 1});
    ptc__bt *lb = mk_put(be, PTC__ROLE_VEC, 1, 3, 1, 1, (double[]){10, 20, 30});
    ptc__bt *ly = mk(be, PTC__ROLE_MAT, 2, 3, 1, 1);
    CHECK_CODE(B->linear_fwd(be, lx, lw, lb, ly, &err), 0, &err);
    check_tensor("linear y", be, ly, (double[]){11, 22, 33, 13, 24, 37}, 6, 0);
    ptc__bt *ldx = mk(be, PTC__ROLE_MAT, 2, 2, 1, 1), *ldw = mk(be, PTC__ROLE_MAT, 3, 2, 1, 1);
    ptc__bt *ldb = mk(be, PTC__ROLE_VEC, 1, 3, 1, 1);
    put(be, ly, (double[]){1, 0, 0, 0, 0, 1}, 6);
    CHECK_CODE(B->linear_bwd(be, lx, lw, ly, ldx, ldw, ldb, &err), 0, &err);
    check_tensor("linear dx", be, ldx, (double[]){1, 0, 1, 1}, 4, 0);
    check_tensor("linear dw", be, ldw, (double[]){1, 2, 0, 0, 3, 4}, 6, 0);
    check_tensor("linear db", be, ldb, (double[]){1, 0, 1}, 3, 0);
    CHECK_CODE(B->linear_bwd(be, lx, lw, ly, NULL, ldw, ldb, &err), 0, &err); /* dx optional */
    check_tensor("linear dw (no dx)", be, ldw, (double[]){1, 2, 0, 0, 3, 4}, 6, 0);
    ptc__bt *lall[] = {lx, lw, lb, ly, ldx, ldw, ldb};
    for (size_t i = 0; i < sizeof lall / sizeof lall[0]; i++)
        B->tensor_free(be, lall[i]);

    /* relu: clamp_min(x, 0), so -0.0 and NaN pass; its backward passes dy where y > 0 (and
     * where y is NaN, as torch's threshold_backward does). */
    const double nan = NAN;
    ptc__bt *a = mk_put(be, PTC__ROLE_ACT, 1, 1, 1, 5, (double[]){-1, 0, 2, -0.0, nan});
    ptc__bt *y = mk(be, PTC__ROLE_ACT, 1, 1, 1, 5);
    CHECK_CODE(B->relu_fwd(be, a, y, &err), 0, &err);
    check_tensor("relu y", be, y, (double[]){0, 0, 2, -0.0, nan}, 5, 0);
    ptc__bt *d = mk_put(be, PTC__ROLE_ACT, 1, 1, 1, 5, (double[]){1, 2, 3, 4, 5});
    CHECK_CODE(B->relu_bwd(be, y, d, d, &err), 0, &err); /* dx may be dy */
    check_tensor("relu dx", be, d, (double[]){0, 0, 3, 0, 5}, 5, 0);
    CHECK_CODE(B->relu_fwd(be, a, a, &err), 0, &err); /* in place */
    check_tensor("relu in place", be, a, (double[]){0, 0, 2, -0.0, nan}, 5, 0);

    /* add, add + relu (y aliasing a), accumulate, fill. */
    put(be, a, (double[]){1, -2, 0.5, 3, -1}, 5);
    put(be, d, (double[]){-3, 1, 0.25, -3, 1}, 5);
    CHECK_CODE(B->add(be, a, d, y, 0, &err), 0, &err);
    check_tensor("add y", be, y, (double[]){-2, -1, 0.75, 0, 0}, 5, 0);
    CHECK_CODE(B->add(be, a, d, a, 1, &err), 0, &err);
    check_tensor("add+relu y", be, a, (double[]){0, 0, 0.75, 0, 0}, 5, 0);
    CHECK_CODE(B->accumulate(be, d, y, &err), 0, &err);
    check_tensor("accumulate", be, y, (double[]){-5, 0, 1, -3, 1}, 5, 0);
    CHECK_CODE(B->tensor_fill(be, y, -1.5, &err), 0, &err);
    check_tensor("fill", be, y, (double[]){-1.5, -1.5, -1.5, -1.5, -1.5}, 5, 0);
    B->tensor_free(be, a);
    B->tensor_free(be, y);
    B->tensor_free(be, d);
}

/* ---- 2. gradient checks ------------------------------------------------------------------------
 * A layer under test: inputs (with their values and gradient tensors), one output, and the calls
 * that run it forward and backward. The loss is L = sum(y * r). */

typedef struct layer layer;
struct layer {
    char name[96];
    ptc__be *be;
    ptc__op *op;
    int nin;
    const char *in_name[3];
    ptc__bt *in[3], *din[3];
    double *x[3]; /* input values */
    int64_t nx[3];
    ptc__bt *y, *dy;
    int64_t ny;
    ptc__bt *aux[4]; /* batchnorm's save_mean, save_invstd, running_mean, running_var */
    int relu;
    int (*fwd)(layer *L);
    int (*bwd)(layer *L); /* after fwd, with dy set */
};

static void layer_input(layer *L, const char *name, ptc__role role, int n, int c, int h, int w)
{
    int i = L->nin++;
    L->in_name[i] = name;
    L->in[i] = mk(L->be, role, n, c, h, w);
    L->din[i] = mk(L->be, role, n, c, h, w);
    L->nx[i] = (int64_t)n * c * h * w;
    L->x[i] = dalloc(L->nx[i]);
    fill_uniform(L->x[i], L->nx[i], -1, 1);
}

static void layer_output(layer *L, ptc__role role, int n, int c, int h, int w)
{
    L->y = mk(L->be, role, n, c, h, w);
    L->dy = mk(L->be, role, n, c, h, w);
    L->ny = (int64_t)n * c * h * w;
}

static void layer_free(layer *L)
{
    for (int i = 0; i < L->nin; i++) {
        B->tensor_free(L->be, L->in[i]);
        B->tensor_free(L->be, L->din[i]);
        free(L->x[i]);
    }
    B->tensor_free(L->be, L->y);
    B->tensor_free(L->be, L->dy);
    for (int i = 0; i < 4; i++)
        B->tensor_free(L->be, L->aux[i]);
    B->plan_free(L->be, L->op);
}

/* Runs forward on the current input values; returns y in out (L->ny values). */
static void layer_forward(layer *L, double *out)
{
    for (int i = 0; i < L->nin; i++)
        put(L->be, L->in[i], L->x[i], L->nx[i]);
    CHECK_CODE(L->fwd(L), 0, &err);
    get(L->be, L->y, out, L->ny);
}

/* Forward then backward with dy = r; gradients into g[i]. */
static void layer_backward(layer *L, const double *r, double *g[3])
{
    double *y = dalloc(L->ny);
    layer_forward(L, y);
    free(y);
    put(L->be, L->dy, r, L->ny);
    CHECK_CODE(L->bwd(L), 0, &err);
    for (int i = 0; i < L->nin; i++)
        get(L->be, L->din[i], g[i], L->nx[i]);
}

static double layer_loss(layer *L, const double *r)
{
    double *y = dalloc(L->ny), sum = 0;
    layer_forward(L, y);
    for (int64_t i = 0; i < L->ny; i++)
        sum += y[i] * r[i];
    free(y);
    return sum;
}

/* Central differences with step h for (at most 400 sampled) elements of every input; the error of
 * an input is max |analytic - numeric| / max |numeric|. Returns the worst over the inputs. */
static double gradcheck(layer *L, double tol)
{
    const double h = 1e-5;
    double *r = dalloc(L->ny), *g[3] = {NULL, NULL, NULL}, worst = 0;
    fill_uniform(r, L->ny, -1, 1);
    for (int i = 0; i < L->nin; i++)
        g[i] = dalloc(L->nx[i]);
    layer_backward(L, r, g);
    for (int i = 0; i < L->nin; i++) {
        int64_t step = L->nx[i] > 400 ? L->nx[i] / 400 + 1 : 1;
        double maxdiff = 0, maxnum = 0;
        for (int64_t j = (int64_t)(rng_next() % (uint64_t)step); j < L->nx[i]; j += step) {
            double v = L->x[i][j];
            L->x[i][j] = v + h;
            double lp = layer_loss(L, r);
            L->x[i][j] = v - h;
            double lm = layer_loss(L, r);
            L->x[i][j] = v;
            double num = (lp - lm) / (2 * h);
            maxdiff = fmax(maxdiff, fabs(num - g[i][j]));
            maxnum = fmax(maxnum, fabs(num));
        }
        double rel = maxdiff / fmax(maxnum, 1e-300);
        check_count++;
        if (!(rel <= tol)) {
            check_failures++;
            fprintf(stderr, "gradcheck %s d%s: relative error %.3g > %.3g (max |grad| %.3g)\n",
                    L->name, L->in_name[i], rel, tol, maxnum);
        }
        worst = fmax(worst, rel);
    }
    printf("  gradcheck %-44s worst relative error %.2e\n", L->name, worst);
    for (int i = 0; i < L->nin; i++)
        free(g[i]);
    free(r);
    return worst;
}

/* -- the layers -- */

static int conv_fwd(layer *L)
{
    return B->conv_fwd(L->be, L->op, L->in[0], L->in[1], L->y, &err);
}
static int conv_bwd(layer *L)
{
    int rc = B->conv_bwd_data(L->be, L->op, L->dy, L->in[1], L->din[0], &err);
    return rc < 0 ? rc : B->conv_bwd_weight(L->be, L->op, L->in[0], L->dy, L->din[1], &err);
}

static void build_conv(layer *L, ptc__be *be, int n, int c, int h, int w, int k, int r, int s,
                       int stride, int pad)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    ptc__conv_shape cs = {n,
                          c,
                          h,
                          w,
                          k,
                          r,
                          s,
                          stride,
                          pad,
                          ptc__conv_out(h, r, stride, pad),
                          ptc__conv_out(w, s, stride, pad)};
    snprintf(L->name, sizeof L->name, "conv [%d][%d][%d][%d] k%d %dx%d s%d p%d", n, c, h, w, k, r,
             s, stride, pad);
    CHECK_CODE(B->conv_plan(be, &L->op, &cs, &err), 0, &err);
    layer_input(L, "x", PTC__ROLE_ACT, n, c, h, w);
    layer_input(L, "w", PTC__ROLE_CONV_W, k, c, r, s);
    layer_output(L, PTC__ROLE_ACT, n, k, cs.oh, cs.ow);
    L->fwd = conv_fwd;
    L->bwd = conv_bwd;
}

static int bn_fwd(layer *L)
{
    return B->bn_fwd_train(L->be, L->op, L->in[0], L->in[1], L->in[2], L->y, L->aux[0], L->aux[1],
                           L->aux[2], L->aux[3], 0.1, L->relu, &err);
}
static int bn_bwd(layer *L)
{
    return B->bn_bwd(L->be, L->op, L->in[0], L->relu ? L->y : NULL, L->dy, L->in[1], L->aux[0],
                     L->aux[1], L->din[0], L->din[1], L->din[2], &err);
}

/* The pre-relu outputs stay at least margin away from 0 for the chosen inputs (the caller retries
 * other random inputs otherwise), so that no finite difference crosses relu's kink. */
static double bn_min_abs_preact(layer *L)
{
    int relu = L->relu;
    double *y = dalloc(L->ny), m = INFINITY;
    L->relu = 0;
    layer_forward(L, y);
    L->relu = relu;
    for (int64_t i = 0; i < L->ny; i++)
        m = fmin(m, fabs(y[i]));
    free(y);
    return m;
}

static void build_bn(layer *L, ptc__be *be, int n, int c, int h, int w, int relu)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    L->relu = relu;
    int dims[4] = {n, c, h, w};
    snprintf(L->name, sizeof L->name, "bn train [%d][%d][%d][%d]%s", n, c, h, w,
             relu ? " + relu" : "");
    CHECK_CODE(B->bn_plan(be, &L->op, dims, 1e-5, &err), 0, &err);
    layer_input(L, "x", PTC__ROLE_ACT, n, c, h, w);
    layer_input(L, "gamma", PTC__ROLE_VEC, 1, c, 1, 1);
    layer_input(L, "beta", PTC__ROLE_VEC, 1, c, 1, 1);
    for (int i = 0; i < 4; i++)
        L->aux[i] = mk(be, PTC__ROLE_VEC, 1, c, 1, 1);
    layer_output(L, PTC__ROLE_ACT, n, c, h, w);
    for (int64_t j = 0; j < L->nx[0]; j++) /* a spread of scales and offsets per channel */
        L->x[0][j] =
            (double)(float)(L->x[0][j] * (1 + (j / (h * w)) % c) + 0.5 * ((j / (h * w)) % c));
    for (int j = 0; j < c; j++)
        L->x[1][j] = uniform(0.5, 2) * (j % 2 ? -1 : 1);
    L->fwd = bn_fwd;
    L->bwd = bn_bwd;
    for (int tries = 0; relu && bn_min_abs_preact(L) < 1e-3 && tries < 100; tries++)
        fill_uniform(L->x[2], c, -1, 1);
}

static int relu_fwd(layer *L)
{
    return B->relu_fwd(L->be, L->in[0], L->y, &err);
}
static int relu_bwd(layer *L)
{
    return B->relu_bwd(L->be, L->y, L->dy, L->din[0], &err);
}

static void build_relu(layer *L, ptc__be *be)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    snprintf(L->name, sizeof L->name, "relu [2][3][4][5]");
    layer_input(L, "x", PTC__ROLE_ACT, 2, 3, 4, 5);
    for (int64_t j = 0; j < L->nx[0]; j++) /* at least 0.05 away from the kink */
        L->x[0][j] = (double)(float)((L->x[0][j] < 0 ? -0.05 : 0.05) + L->x[0][j]);
    layer_output(L, PTC__ROLE_ACT, 2, 3, 4, 5);
    L->fwd = relu_fwd;
    L->bwd = relu_bwd;
}

static int add_relu_fwd(layer *L)
{
    return B->add(L->be, L->in[0], L->in[1], L->y, 1, &err);
}
static int add_relu_bwd(layer *L)
{
    /* What a residual block does: the gradient through relu goes to both branches. */
    int rc = B->relu_bwd(L->be, L->y, L->dy, L->din[0], &err);
    return rc < 0 ? rc : B->relu_bwd(L->be, L->y, L->dy, L->din[1], &err);
}

static void build_add_relu(layer *L, ptc__be *be)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    snprintf(L->name, sizeof L->name, "add + relu [2][3][4][4]");
    layer_input(L, "a", PTC__ROLE_ACT, 2, 3, 4, 4);
    layer_input(L, "b", PTC__ROLE_ACT, 2, 3, 4, 4);
    for (int64_t j = 0; j < L->nx[0]; j++) { /* a + b at least 0.05 away from 0 */
        double s = L->x[0][j] + L->x[1][j];
        if (fabs(s) < 0.05)
            L->x[0][j] = (double)(float)(L->x[0][j] + (s < 0 ? -0.1 : 0.1));
    }
    layer_output(L, PTC__ROLE_ACT, 2, 3, 4, 4);
    L->fwd = add_relu_fwd;
    L->bwd = add_relu_bwd;
}

static int maxpool_fwd(layer *L)
{
    return B->maxpool_fwd(L->be, L->op, L->in[0], L->y, &err);
}
static int maxpool_bwd(layer *L)
{
    return B->maxpool_bwd(L->be, L->op, L->in[0], L->y, L->dy, L->din[0], &err);
}

static void build_maxpool(layer *L, ptc__be *be, int n, int c, int h, int w, int r, int stride,
                          int pad)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    ptc__pool_shape s = {n,
                         c,
                         h,
                         w,
                         r,
                         r,
                         stride,
                         pad,
                         ptc__conv_out(h, r, stride, pad),
                         ptc__conv_out(w, r, stride, pad)};
    snprintf(L->name, sizeof L->name, "maxpool [%d][%d][%d][%d] %dx%d s%d p%d", n, c, h, w, r, r,
             stride, pad);
    CHECK_CODE(B->maxpool_plan(be, &L->op, &s, &err), 0, &err);
    layer_input(L, "x", PTC__ROLE_ACT, n, c, h, w);
    /* Distinct values 0.01 apart, shuffled: no ties, and a step of 1e-5 changes no argmax. */
    int64_t nx = L->nx[0];
    for (int64_t j = 0; j < nx; j++)
        L->x[0][j] = (double)(float)(0.01 * (double)(j - nx / 2));
    for (int64_t j = nx - 1; j > 0; j--) {
        int64_t k = (int64_t)(rng_next() % (uint64_t)(j + 1));
        double t = L->x[0][j];
        L->x[0][j] = L->x[0][k];
        L->x[0][k] = t;
    }
    layer_output(L, PTC__ROLE_ACT, n, c, s.oh, s.ow);
    L->fwd = maxpool_fwd;
    L->bwd = maxpool_bwd;
}

static int avgpool_fwd(layer *L)
{
    return B->avgpool_fwd(L->be, L->in[0], L->y, &err);
}
static int avgpool_bwd(layer *L)
{
    return B->avgpool_bwd(L->be, L->dy, L->din[0], &err);
}

static void build_avgpool(layer *L, ptc__be *be)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    snprintf(L->name, sizeof L->name, "avgpool [2][3][4][5]");
    layer_input(L, "x", PTC__ROLE_ACT, 2, 3, 4, 5);
    layer_output(L, PTC__ROLE_MAT, 2, 3, 1, 1);
    L->fwd = avgpool_fwd;
    L->bwd = avgpool_bwd;
}

static int linear_fwd(layer *L)
{
    return B->linear_fwd(L->be, L->in[0], L->in[1], L->in[2], L->y, &err);
}
static int linear_bwd(layer *L)
{
    return B->linear_bwd(L->be, L->in[0], L->in[1], L->dy, L->din[0], L->din[1], L->din[2], &err);
}

static void build_linear(layer *L, ptc__be *be, int n, int k, int m)
{
    memset(L, 0, sizeof *L);
    L->be = be;
    snprintf(L->name, sizeof L->name, "linear x [%d][%d] w [%d][%d]", n, k, m, k);
    layer_input(L, "x", PTC__ROLE_MAT, n, k, 1, 1);
    layer_input(L, "w", PTC__ROLE_MAT, m, k, 1, 1);
    layer_input(L, "b", PTC__ROLE_VEC, 1, m, 1, 1);
    layer_output(L, PTC__ROLE_MAT, n, m, 1, 1);
    L->fwd = linear_fwd;
    L->bwd = linear_bwd;
}

/* The layers both gradient checks and the float32/float64 comparison run over. */
#define NLAYERS 21
static void build_nth(layer *L, ptc__be *be, int i)
{
    switch (i) {
    case 0:
        build_conv(L, be, 2, 3, 5, 4, 4, 1, 1, 1, 0);
        break;
    case 1:
        build_conv(L, be, 2, 3, 6, 5, 4, 3, 3, 1, 1);
        break;
    case 2:
        build_conv(L, be, 2, 3, 7, 6, 4, 3, 3, 2, 1);
        break;
    case 3:
        build_conv(L, be, 1, 3, 13, 11, 4, 7, 7, 2, 3);
        break;
    case 4:
        build_conv(L, be, 2, 4, 7, 5, 3, 1, 1, 2, 0);
        break;
    case 5:
        build_conv(L, be, 2, 2, 6, 7, 3, 3, 3, 1, 0);
        break;
    case 6:
        build_conv(L, be, 1, 2, 6, 9, 3, 3, 2, 2, 1);
        break;
    case 7:
        build_conv(L, be, 1, 2, 4, 4, 2, 3, 3, 3, 1);
        break; /* stride 3: some rows unread */
    case 8:
        build_bn(L, be, 4, 3, 3, 2, 0);
        break;
    case 9:
        build_bn(L, be, 4, 3, 3, 2, 1);
        break;
    case 10:
        build_bn(L, be, 3, 2, 1, 1, 0);
        break;
    case 11:
        build_bn(L, be, 2, 5, 4, 3, 1);
        break;
    case 12:
        build_relu(L, be);
        break;
    case 13:
        build_add_relu(L, be);
        break;
    case 14:
        build_maxpool(L, be, 2, 3, 7, 6, 3, 2, 1);
        break;
    case 15:
        build_maxpool(L, be, 1, 2, 8, 8, 3, 2, 1);
        break;
    case 16:
        build_maxpool(L, be, 1, 2, 5, 6, 2, 2, 0);
        break;
    case 17:
        build_avgpool(L, be);
        break;
    case 18:
        build_linear(L, be, 5, 7, 4);
        break;
    /* Several blocks of images in the convolution kernels (about 256 output pixels a block):
     * one image a block, and blocks of 3 with a partial last block. */
    case 19:
        build_conv(L, be, 3, 2, 16, 18, 3, 3, 3, 1, 1);
        break;
    case 20:
        build_conv(L, be, 4, 2, 10, 10, 3, 3, 3, 1, 1);
        break;
    }
}

static void test_gradients(void)
{
    printf("gradient checks (float64, central differences, step 1e-5):\n");
    for (int i = 0; i < NLAYERS; i++) {
        layer L;
        build_nth(&L, be64, i);
        gradcheck(&L, 1e-6);
        layer_free(&L);
    }
}

/* ---- 3. float32 against float64 -------------------------------------------------------------- */

static double rel_diff(const double *a, const double *b, int64_t n)
{
    double maxdiff = 0, maxabs = 0;
    for (int64_t i = 0; i < n; i++) {
        maxdiff = fmax(maxdiff, fabs(a[i] - b[i]));
        maxabs = fmax(maxabs, fabs(b[i]));
    }
    return maxdiff / fmax(maxabs, 1e-300);
}

static void test_f32_vs_f64(void)
{
    printf("float32 against float64 (same inputs):\n");
    for (int i = 0; i < NLAYERS; i++) {
        layer L32, L64;
        uint64_t seed = rng_state;
        build_nth(&L64, be64, i);
        rng_state = seed; /* the same inputs */
        build_nth(&L32, be32, i);
        double *r = dalloc(L64.ny), *y32 = dalloc(L64.ny), *y64 = dalloc(L64.ny);
        fill_uniform(r, L64.ny, -1, 1);
        double *g32[3] = {0}, *g64[3] = {0};
        for (int j = 0; j < L64.nin; j++) {
            g32[j] = dalloc(L64.nx[j]);
            g64[j] = dalloc(L64.nx[j]);
        }
        layer_forward(&L32, y32);
        layer_forward(&L64, y64);
        double worst = rel_diff(y32, y64, L64.ny);
        layer_backward(&L32, r, g32);
        layer_backward(&L64, r, g64);
        for (int j = 0; j < L64.nin; j++)
            worst = fmax(worst, rel_diff(g32[j], g64[j], L64.nx[j]));
        check_count++;
        if (!(worst <= 1e-5)) {
            check_failures++;
            fprintf(stderr, "f32 vs f64 %s: relative difference %.3g\n", L64.name, worst);
        }
        printf("  %-54s max relative difference %.2e\n", L64.name, worst);
        for (int j = 0; j < L64.nin; j++) {
            free(g32[j]);
            free(g64[j]);
        }
        free(r);
        free(y32);
        free(y64);
        layer_free(&L32);
        layer_free(&L64);
    }
}

/* ---- 4. SGD ---------------------------------------------------------------------------------- */

/* torch.optim.SGD's _single_tensor_sgd for one parameter, written out with torch's operations
 * (a.add(b, alpha=s) is fma(b, s, a) in torch's CPU kernels; hyperparameters are cast to the
 * element type). */
static void sgd_torch_f64(double *p, const double *g, double *buf, int n, const ptc__sgd *h)
{
    for (int i = 0; i < n; i++) {
        double grad = g[i];
        if (h->weight_decay != 0)
            grad = fma(p[i], h->weight_decay, grad);
        if (h->momentum != 0) {
            buf[i] = h->first_step ? grad : fma(grad, 1 - h->dampening, buf[i] * h->momentum);
            grad = h->nesterov ? fma(buf[i], h->momentum, grad) : buf[i];
        }
        p[i] = fma(grad, -h->lr, p[i]);
    }
}

static void sgd_torch_f32(float *p, const float *g, float *buf, int n, const ptc__sgd *h)
{
    for (int i = 0; i < n; i++) {
        float grad = g[i];
        if (h->weight_decay != 0)
            grad = fmaf(p[i], (float)h->weight_decay, grad);
        if (h->momentum != 0) {
            buf[i] = h->first_step
                         ? grad
                         : fmaf(grad, (float)(1 - h->dampening), buf[i] * (float)h->momentum);
            grad = h->nesterov ? fmaf(buf[i], (float)h->momentum, grad) : buf[i];
        }
        p[i] = fmaf(grad, (float)-h->lr, p[i]);
    }
}

static void test_sgd(void)
{
    const ptc__sgd configs[] = {
        {0.1, 0, 0, 0, 0, 0},         {0.05, 0.9, 0, 0, 0, 0},  {0.05, 0.9, 0, 5e-4, 1, 0},
        {0.01, 0.9, 0.1, 1e-4, 0, 0}, {0.2, 0.5, 0.5, 0, 0, 0}, {0.1, 0, 0, 1e-2, 0, 0},
    };
    enum { N = 37, STEPS = 5 };
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        ptc__sgd h = configs[ci];
        double p[N], g[N], buf[N], pw[N], bufw[N];
        float pf[N], gf[N], buff[N], pfw[N], buffw[N];
        fill_uniform(p, N, -1, 1);
        memcpy(pw, p, sizeof p);
        for (int i = 0; i < N; i++)
            pf[i] = pfw[i] = (float)p[i];
        ptc__bt *tp = mk_put(be64, PTC__ROLE_CONV_W, 1, 1, 1, N, p);
        ptc__bt *tg = mk(be64, PTC__ROLE_CONV_W, 1, 1, 1, N),
                *tb = mk(be64, PTC__ROLE_CONV_W, 1, 1, 1, N);
        ptc__bt *sp = mk(be32, PTC__ROLE_CONV_W, 1, 1, 1, N),
                *sg = mk(be32, PTC__ROLE_CONV_W, 1, 1, 1, N);
        ptc__bt *sb = mk(be32, PTC__ROLE_CONV_W, 1, 1, 1, N);
        CHECK_CODE(B->tensor_write(be32, sp, pf, &err), 0, &err);
        for (int step = 0; step < STEPS; step++) {
            h.first_step = step == 0;
            fill_uniform(g, N, -1, 1);
            for (int i = 0; i < N; i++)
                gf[i] = (float)g[i];
            put(be64, tg, g, N);
            CHECK_CODE(B->sgd_step(be64, tp, tg, h.momentum != 0 ? tb : NULL, &h, &err), 0, &err);
            sgd_torch_f64(pw, g, bufw, N, &h);
            CHECK_CODE(B->tensor_write(be32, sg, gf, &err), 0, &err);
            CHECK_CODE(B->sgd_step(be32, sp, sg, h.momentum != 0 ? sb : NULL, &h, &err), 0, &err);
            sgd_torch_f32(pfw, gf, buffw, N, &h);
        }
        char what[64];
        get(be64, tp, p, N);
        snprintf(what, sizeof what, "sgd config %zu f64 p", ci);
        check_vals(what, p, pw, N, 0);
        CHECK_CODE(B->tensor_read(be32, sp, pf, &err), 0, &err);
        double a[N], b[N];
        for (int i = 0; i < N; i++) {
            a[i] = pf[i];
            b[i] = pfw[i];
        }
        snprintf(what, sizeof what, "sgd config %zu f32 p", ci);
        check_vals(what, a, b, N, 0);
        if (h.momentum != 0) {
            get(be64, tb, buf, N);
            snprintf(what, sizeof what, "sgd config %zu f64 buf", ci);
            check_vals(what, buf, bufw, N, 0);
            CHECK_CODE(B->tensor_read(be32, sb, buff, &err), 0, &err);
            for (int i = 0; i < N; i++) {
                a[i] = buff[i];
                b[i] = buffw[i];
            }
            snprintf(what, sizeof what, "sgd config %zu f32 buf", ci);
            check_vals(what, a, b, N, 0);
        }
        /* float32 follows float64 within float32 precision (the formula is the same). */
        for (int i = 0; i < N; i++)
            a[i] = pf[i];
        CHECK(rel_diff(a, p, N) < 1e-5);
        ptc__bt *all[] = {tp, tg, tb, sp, sg, sb};
        for (size_t i = 0; i < 6; i++)
            B->tensor_free(i < 3 ? be64 : be32, all[i]);
    }

    /* One step by hand: p = 1, g = 0.5, wd = 0.1, momentum 0.9, first step, nesterov:
     * d = 0.5 + 0.1 = 0.6, buf = 0.6, d = 0.6 + 0.9 * 0.6 = 1.14, p = 1 - 0.1 * 1.14 = 0.886. */
    ptc__sgd h = {0.1, 0.9, 0, 0.1, 1, 1};
    ptc__bt *tp = mk_put(be64, PTC__ROLE_VEC, 1, 1, 1, 1, (double[]){1});
    ptc__bt *tg = mk_put(be64, PTC__ROLE_VEC, 1, 1, 1, 1, (double[]){0.5});
    ptc__bt *tb = mk(be64, PTC__ROLE_VEC, 1, 1, 1, 1);
    CHECK_CODE(B->sgd_step(be64, tp, tg, tb, &h, &err), 0, &err);
    check_tensor("sgd by hand p", be64, tp, (double[]){0.886}, 1, 1e-15);
    check_tensor("sgd by hand buf", be64, tb, (double[]){0.6}, 1, 1e-15);
    B->tensor_free(be64, tp);
    B->tensor_free(be64, tg);
    B->tensor_free(be64, tb);
}

/* ---- 5. threads ------------------------------------------------------------------------------ */

static void test_threads(void)
{
    int cases[] = {2, 3, 9, 14, 20};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        layer L1, L3;
        uint64_t seed = rng_state;
        build_nth(&L1, be32_t1, cases[ci]);
        rng_state = seed;
        build_nth(&L3, be32_t3, cases[ci]);
        double *r = dalloc(L1.ny), *g1[3] = {0}, *g3[3] = {0};
        fill_uniform(r, L1.ny, -1, 1);
        for (int j = 0; j < L1.nin; j++) {
            g1[j] = dalloc(L1.nx[j]);
            g3[j] = dalloc(L1.nx[j]);
        }
        layer_backward(&L1, r, g1);
        layer_backward(&L3, r, g3);
        for (int j = 0; j < L1.nin; j++) {
            char what[160];
            snprintf(what, sizeof what, "%s d%s, 1 vs 3 threads", L1.name, L1.in_name[j]);
            check_vals(what, g1[j], g3[j], L1.nx[j], 0);
            free(g1[j]);
            free(g3[j]);
        }
        free(r);
        layer_free(&L1);
        layer_free(&L3);
    }
}

/* ---- 6. errors ------------------------------------------------------------------------------- */

static int fail_after = -1;
static void *failing_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    if (fail_after == 0)
        return NULL;
    if (fail_after > 0)
        fail_after--;
    return realloc(ptr, size);
}

static void check_msg(const char *needle)
{
    check_count++;
    if (!strstr(err.message, needle)) {
        check_failures++;
        fprintf(stderr, "error message \"%s\" does not contain \"%s\"\n", err.message, needle);
    }
}

static void test_errors(void)
{
    ptc__be *be = be64;
    ptc__op *op = NULL, *bn = NULL;
    CHECK(ptc__backend_find("ref") == &ptc__backend_ref);
    CHECK(ptc__backend_find("nope") == NULL);
#ifdef PTC_HAVE_DNNL
    /* dnnl is a module (backend-dnnl.so), found through PTC_PLUGIN_PATH under make check. */
    {
        const ptc__backend_ops *d = ptc__backend_find("dnnl");
        CHECK(d != NULL && strcmp(d->name, "dnnl") == 0);
    }
#endif
    CHECK(ptc__backend_find(NULL) == NULL);
    CHECK_INT(ptc__conv_out(32, 7, 2, 3), 16);
    CHECK_INT(ptc__conv_out(16, 3, 2, 1), 8);
    CHECK_INT(ptc__conv_out(8, 1, 2, 0), 4);
    CHECK_INT(ptc__conv_out(1, 1, 1, 0), 1);
    CHECK_INT(ptc__conv_out(2, 3, 1, 0), -1);
    CHECK_INT(ptc__conv_out(0, 1, 1, 0), -1);
    CHECK_INT(ptc__conv_out(4, 3, 0, 1), -1);
    CHECK_INT(ptc__conv_out(4, 3, 1, -1), -1);
    CHECK_INT(ptc__conv_out(2147483647, 1, 1, 1), -1);
    CHECK_INT(ptc__conv_out(2147483647, 1, 2, 0), 1073741824);
    CHECK_INT(ptc__conv_out(2147483647, 2147483647, 1, 1073741823), 2147483647);
    CHECK_INT(ptc__conv_out(2147483647, 2147483647, 1, 1073741824), -1);

    ptc__be *bad = NULL;
    CHECK_CODE(B->open(&bad, &(ptc__be_params){.dtype = (ptc__dtype_be)2, .threads = 0}, &err),
               PTC_EINVAL, &err);
    CHECK_CODE(B->open(&bad, &(ptc__be_params){.dtype = PTC__BE_F32, .threads = -1}, &err),
               PTC_EINVAL, &err);
    CHECK(bad == NULL);

    ptc__bt *t = NULL;
    CHECK_CODE(B->tensor_new(be, &t, PTC__ROLE_VEC, (int[]){2, 3, 1, 1}, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->tensor_new(be, &t, PTC__ROLE_MAT, (int[]){2, 3, 2, 1}, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->tensor_new(be, &t, PTC__ROLE_ACT, (int[]){2, 0, 2, 1}, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->tensor_new(be, &t, PTC__ROLE_ACT, (int[]){65536, 65536, 65536, 65536}, &err),
               PTC_EINVAL, &err);
    CHECK_CODE(B->tensor_new(be, &t, PTC__ROLE_ACT, (int[]){1 << 30, 1 << 30, 4, 1}, &err),
               PTC_ENOMEM, &err);
    CHECK_CODE(B->tensor_new(be, &t, (ptc__role)9, (int[]){1, 1, 1, 1}, &err), PTC_EINVAL, &err);
    CHECK(t == NULL);

    /* Impossible plans. */
    ptc__conv_shape cs = {2, 3, 8, 8, 4, 3, 3, 1, 1, 8, 8};
    ptc__conv_shape wrong = cs;
    wrong.oh = 7;
    CHECK_CODE(B->conv_plan(be, &op, &wrong, &err), PTC_EINVAL, &err);
    check_msg("conv_plan");
    ptc__pool_shape ps = {2, 3, 8, 8, 3, 3, 2, 2, 5, 5}; /* pad 2 > 3 / 2 */
    CHECK_CODE(B->maxpool_plan(be, &op, &ps, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->bn_plan(be, &bn, (int[]){2, 3, 4, 4}, -1, &err), PTC_EINVAL, &err);
    CHECK(op == NULL && bn == NULL);

    /* Shapes and roles that do not match the plan. */
    CHECK_CODE(B->conv_plan(be, &op, &cs, &err), 0, &err);
    ptc__bt *x = mk(be, PTC__ROLE_ACT, 2, 3, 8, 8), *w = mk(be, PTC__ROLE_CONV_W, 4, 3, 3, 3);
    ptc__bt *y = mk(be, PTC__ROLE_ACT, 2, 4, 8, 8), *y7 = mk(be, PTC__ROLE_ACT, 2, 4, 7, 8);
    ptc__bt *wact = mk(be, PTC__ROLE_ACT, 4, 3, 3, 3);
    CHECK_CODE(B->conv_fwd(be, op, x, w, y, &err), 0, &err);
    CHECK_CODE(B->conv_fwd(be, op, x, w, y7, &err), PTC_EINVAL, &err);
    check_msg("conv_fwd: y is act [2][4][7][8], expected act [2][4][8][8]");
    CHECK_CODE(B->conv_fwd(be, op, x, wact, y, &err), PTC_EINVAL, &err);
    check_msg("conv_fwd: w is act");
    CHECK_CODE(B->conv_bwd_data(be, op, y, w, y, &err), PTC_EINVAL, &err);
    check_msg("conv_bwd_data: dx");
    CHECK_CODE(B->conv_bwd_weight(be, op, x, y, wact, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->conv_fwd(be, op, NULL, w, y, &err), PTC_EINVAL, &err);
    check_msg("x is NULL");

    /* A tensor of another instance, a plan of another kind. */
    ptc__bt *x32 = mk(be32, PTC__ROLE_ACT, 2, 3, 8, 8);
    CHECK_CODE(B->conv_fwd(be, op, x32, w, y, &err), PTC_EINVAL, &err);
    check_msg("another backend instance");
    CHECK_CODE(B->relu_fwd(be, x32, x32, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->maxpool_fwd(be, op, x, y, &err), PTC_EINVAL, &err);
    check_msg("another kind of layer");

    /* Batchnorm: vectors of the wrong length; one value per channel in training. */
    ptc__bt *v3 = mk(be, PTC__ROLE_VEC, 1, 3, 1, 1), *v4 = mk(be, PTC__ROLE_VEC, 1, 4, 1, 1);
    ptc__bt *xb = mk(be, PTC__ROLE_ACT, 2, 3, 8, 8);
    CHECK_CODE(B->bn_plan(be, &bn, (int[]){2, 3, 8, 8}, 1e-5, &err), 0, &err);
    CHECK_CODE(B->bn_fwd_train(be, bn, x, v3, v3, xb, v3, v3, v3, v3, 0.1, 0, &err), 0, &err);
    CHECK_CODE(B->bn_fwd_train(be, bn, x, v3, v4, xb, v3, v3, v3, v3, 0.1, 0, &err), PTC_EINVAL,
               &err);
    check_msg("bn_fwd_train: beta is vec [1][4][1][1], expected vec [1][3][1][1]");
    CHECK_CODE(B->bn_bwd(be, bn, x, y, x, v3, v3, v3, xb, v3, v3, &err), PTC_EINVAL, &err);
    check_msg("bn_bwd: y");
    ptc__op *bn1 = NULL;
    ptc__bt *x1 = mk(be, PTC__ROLE_ACT, 1, 3, 1, 1);
    CHECK_CODE(B->bn_plan(be, &bn1, (int[]){1, 3, 1, 1}, 1e-5, &err), 0, &err);
    CHECK_CODE(B->bn_fwd_train(be, bn1, x1, v3, v3, x1, v3, v3, v3, v3, 0.1, 0, &err), PTC_EINVAL,
               &err);
    check_msg("more than 1 value per channel");
    CHECK_CODE(B->bn_fwd_eval(be, bn1, x1, v3, v3, v3, v3, x1, 0, &err), 0, &err);

    /* Elementwise ops, linear, pools, SGD. */
    CHECK_CODE(B->add(be, x, y, x, 0, &err), PTC_EINVAL, &err);
    check_msg("add: b");
    CHECK_CODE(B->accumulate(be, x, y, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->relu_bwd(be, x, x, y, &err), PTC_EINVAL, &err);
    ptc__bt *m23 = mk(be, PTC__ROLE_MAT, 2, 3, 1, 1), *m43 = mk(be, PTC__ROLE_MAT, 4, 3, 1, 1);
    ptc__bt *m24 = mk(be, PTC__ROLE_MAT, 2, 4, 1, 1);
    CHECK_CODE(B->linear_fwd(be, m23, m43, v4, m24, &err), 0, &err);
    CHECK_CODE(B->linear_fwd(be, m23, m43, v3, m24, &err), PTC_EINVAL, &err);
    check_msg("linear_fwd: b");
    CHECK_CODE(B->linear_fwd(be, m23, m43, v4, m23, &err), PTC_EINVAL, &err);
    CHECK_CODE(B->avgpool_fwd(be, x, m24, &err), PTC_EINVAL, &err);
    check_msg("avgpool_fwd: y is mat [2][4][1][1], expected mat [2][3][1][1]");
    ptc__bt *m23x = mk(be, PTC__ROLE_ACT, 2, 3, 1, 1);
    CHECK_CODE(B->avgpool_fwd(be, x, m23x, &err), PTC_EINVAL, &err);
    ptc__sgd h = {0.1, 0.9, 0, 0, 0, 1};
    CHECK_CODE(B->sgd_step(be, w, w, NULL, &h, &err), PTC_EINVAL, &err);
    check_msg("sgd_step: buf is NULL");
    h.momentum = 0;
    CHECK_CODE(B->sgd_step(be, w, w, NULL, &h, &err), 0, &err);
    CHECK_CODE(B->sgd_step(be, w, x, NULL, &h, &err), PTC_EINVAL, &err);

    /* Allocation failure: clean PTC_ENOMEM, nothing half made. conv_fwd keeps its scratch in the
     * instance, so the failure is met by a fresh instance's first forward (be's own scratch is
     * already large enough: its forward needs no allocation and succeeds). */
    ptc__be *fresh = NULL;
    ptc__op *fresh_op = NULL;
    CHECK_CODE(B->open(&fresh, &(ptc__be_params){.dtype = PTC__BE_F64, .threads = 0}, &err), 0,
               &err);
    CHECK_CODE(B->conv_plan(fresh, &fresh_op, &cs, &err), 0, &err);
    ptc__bt *fx = mk(fresh, PTC__ROLE_ACT, 2, 3, 8, 8),
            *fw = mk(fresh, PTC__ROLE_CONV_W, 4, 3, 3, 3);
    ptc__bt *fy = mk(fresh, PTC__ROLE_ACT, 2, 4, 8, 8);
    ptc_set_allocator(failing_realloc, NULL);
    for (int k = 0; k < 2; k++) {
        fail_after = k;
        t = NULL;
        CHECK_CODE(B->tensor_new(be, &t, PTC__ROLE_ACT, (int[]){1, 2, 3, 4}, &err), PTC_ENOMEM,
                   &err);
        CHECK(t == NULL);
    }
    fail_after = 0;
    CHECK_CODE(B->conv_fwd(fresh, fresh_op, fx, fw, fy, &err), PTC_ENOMEM, &err);
    check_msg("conv_fwd: cannot allocate");
    CHECK_CODE(B->conv_fwd(be, op, x, w, y, &err), 0, &err);
    CHECK_CODE(B->conv_bwd_data(be, op, y, w, x, &err), PTC_ENOMEM, &err);
    CHECK_CODE(B->conv_bwd_weight(be, op, x, y, w, &err), PTC_ENOMEM, &err);
    fail_after = -1;
    ptc_set_allocator(NULL, NULL);
    CHECK_CODE(B->conv_fwd(fresh, fresh_op, fx, fw, fy, &err), 0, &err); /* and it recovers */
    B->tensor_free(fresh, fx);
    B->tensor_free(fresh, fw);
    B->tensor_free(fresh, fy);
    B->plan_free(fresh, fresh_op);
    B->close(fresh);

    ptc__bt *all[] = {x, w, y, y7, wact, v3, v4, xb, x1, m23, m43, m24, m23x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        B->tensor_free(be, all[i]);
    B->tensor_free(be32, x32);
    B->plan_free(be, op);
    B->plan_free(be, bn);
    B->plan_free(be, bn1);
    B->tensor_free(be, NULL);
    B->plan_free(be, NULL);
    B->close(NULL);
}

int main(void)
{
    B = ptc__backend_find("ref");
    if (!B) {
        fprintf(stderr, "no ref backend\n");
        return 1;
    }
    CHECK_CODE(B->open(&be64, &(ptc__be_params){.dtype = PTC__BE_F64, .threads = 0}, &err), 0,
               &err);
    CHECK_CODE(B->open(&be32, &(ptc__be_params){.dtype = PTC__BE_F32, .threads = 0}, &err), 0,
               &err);
    CHECK_CODE(B->open(&be32_t1, &(ptc__be_params){.dtype = PTC__BE_F32, .threads = 1}, &err), 0,
               &err);
    CHECK_CODE(B->open(&be32_t3, &(ptc__be_params){.dtype = PTC__BE_F32, .threads = 3}, &err), 0,
               &err);
    if (!be64 || !be32 || !be32_t1 || !be32_t3)
        return check_exit("test_backend_ref");

    test_conv_exact();
    test_bn_exact();
    test_pool_exact();
    test_small_ops_exact();
    test_gradients();
    test_f32_vs_f64();
    test_sgd();
    test_threads();
    test_errors();

    B->close(be64);
    B->close(be32);
    B->close(be32_t1);
    B->close(be32_t3);
    return check_exit("test_backend_ref");
}
