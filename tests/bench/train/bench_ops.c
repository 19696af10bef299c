/*
 * bench_ops.c - how fast the dnnl backend runs the ops of a ResNet-18 training step, layer by
 * layer, against the fp32 GEMM ceiling of the same machine measured in the same run.
 *
 *   bench_ops [--threads N] [--batch N] [--stem tv|cifar] [--min-ms T] [--stat median|min]
 *             [--precision f32|bf16]
 *
 * For every convolution shape of ResNet-18 on 32x32 inputs (torchvision's stem, or the CIFAR
 * stem), times conv_fwd, conv_bwd_data and conv_bwd_weight (median of repeated calls) and prints
 * GFLOP/s (2 N K C R S OH OW per call, padding taps included) and the fraction of the ceiling, a
 * dnnl_sgemm of 1024^3 on the same threads. Then the other ops of a step (batchnorm with fused
 * relu, residual add, maxpool, avgpool, linear, SGD over all parameters) and the sum over the
 * network with each layer counted as often as ResNet-18 has it: the time of one training step and
 * one inference batch spent in the backend, and the images/s that bounds. Loss, data loading and
 * the model code are not in it.
 *
 * Not part of make check; numbers are reported, never asserted. Compare with bench_ops_torch.py
 * (the PyTorch peer, same shapes, same threads) run right before or after.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "backend/backend.h"
#include "backend/dnnl.h"

static const ptc__backend_ops *D = &ptc__backend_dnnl;
static ptc__be *be;
static ptc_error err;
static double min_ms = 300; /* time spent per measurement */
static int use_min;         /* report the fastest call instead of the median (noisy machines) */

static void die_if(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "bench_ops: %s: %s\n", what, err.message);
        exit(1);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- what is timed --------------------------------------------------------------------------- */

enum {
    OP_CONV_FWD,
    OP_CONV_BWD_D,
    OP_CONV_BWD_W,
    OP_BN_TRAIN,
    OP_BN_BWD,
    OP_BN_EVAL,
    OP_ADD_RELU,
    OP_RELU_BWD,
    OP_ACC,
    OP_POOL_FWD,
    OP_POOL_BWD,
    OP_AVG_FWD,
    OP_AVG_BWD,
    OP_LIN_FWD,
    OP_LIN_BWD,
    OP_SGD
};

typedef struct job {
    int op;
    ptc__op *plan;
    ptc__bt *t[12];
    int relu;
    ptc__bt **params, **grads, **bufs; /* OP_SGD */
    int nparams;
} job;

static void run_job(const job *j, int first)
{
    ptc__bt *const *t = j->t;
    switch (j->op) {
    case OP_CONV_FWD:
        die_if(D->conv_fwd(be, j->plan, t[0], t[1], t[2], &err), "conv_fwd");
        break;
    case OP_CONV_BWD_D: /* the weights changed since the last call, as in training */
        ptc__dnnl_touch(be, t[1]);
        die_if(D->conv_bwd_data(be, j->plan, t[2], t[1], t[0], &err), "conv_bwd_data");
        break;
    case OP_CONV_BWD_W:
        die_if(D->conv_bwd_weight(be, j->plan, t[0], t[2], t[1], &err), "conv_bwd_weight");
        break;
    case OP_BN_TRAIN:
        die_if(D->bn_fwd_train(be, j->plan, t[0], t[2], t[3], t[1], t[4], t[5], t[6], t[7], 0.1,
                               j->relu, &err),
               "bn_fwd_train");
        break;
    case OP_BN_BWD:
        die_if(D->bn_bwd(be, j->plan, t[0], j->relu ? t[1] : NULL, t[8], t[2], t[4], t[5], t[9],
                         t[10], t[11], &err),
               "bn_bwd");
        break;
    case OP_BN_EVAL:
        die_if(D->bn_fwd_eval(be, j->plan, t[0], t[2], t[3], t[6], t[7], t[1], j->relu, &err),
               "bn_fwd_eval");
        break;
    case OP_ADD_RELU:
        die_if(D->add(be, t[0], t[1], t[1], 1, &err), "add");
        break;
    case OP_RELU_BWD:
        die_if(D->relu_bwd(be, t[0], t[1], t[2], &err), "relu_bwd");
        break;
    case OP_ACC:
        die_if(D->accumulate(be, t[0], t[1], &err), "accumulate");
        break;
    case OP_POOL_FWD:
        die_if(D->maxpool_fwd(be, j->plan, t[0], t[1], &err), "maxpool_fwd");
        break;
    case OP_POOL_BWD:
        die_if(D->maxpool_bwd(be, j->plan, t[0], t[1], t[2], t[3], &err), "maxpool_bwd");
        break;
    case OP_AVG_FWD:
        die_if(D->avgpool_fwd(be, t[0], t[1], &err), "avgpool_fwd");
        break;
    case OP_AVG_BWD:
        die_if(D->avgpool_bwd(be, t[1], t[0], &err), "avgpool_bwd");
        break;
    case OP_LIN_FWD:
        die_if(D->linear_fwd(be, t[0], t[1], t[2], t[3], &err), "linear_fwd");
        break;
    case OP_LIN_BWD:
        die_if(D->linear_bwd(be, t[0], t[1], t[3], t[4], t[5], t[6], &err), "linear_bwd");
        break;
    case OP_SGD:
        for (int i = 0; i < j->nparams; i++) {
            ptc__sgd h = {0.01, 0.9, 0, 5e-4, 0, first};
            die_if(D->sgd_step(be, j->params[i], j->grads[i], j->bufs[i], &h, &err), "sgd_step");
        }
        break;
    }
}

/* Median (or fastest) milliseconds per call over at least min_ms of calls, after two warm-up
 * calls. */
static double time_job(const job *j)
{
    run_job(j, 1);
    run_job(j, 0);
    double t[2000];
    int n = 0;
    double start = now();
    while (n < 2000 && (n < 5 || (now() - start) * 1e3 < min_ms)) {
        double t0 = now();
        run_job(j, 0);
        t[n++] = (now() - t0) * 1e3;
    }
    qsort(t, n, sizeof t[0], cmp_d);
    return use_min ? t[0] : t[n / 2];
}

static ptc__bt *tnew(ptc__role role, int n, int c, int h, int w, double fill)
{
    ptc__bt *t;
    die_if(D->tensor_new(be, &t, role, (const int[4]){n, c, h, w}, &err), "tensor_new");
    /* Deterministic, non-trivial values: a ramp, so that relu masks and pool argmaxes vary. */
    int64_t numel = (int64_t)n * c * h * w;
    float *v = malloc((size_t)numel * sizeof *v);
    for (int64_t i = 0; i < numel; i++)
        v[i] = (float)(fill * (((i * 7919) % 1000) / 500.0 - 0.9));
    die_if(D->tensor_write(be, t, v, &err), "tensor_write");
    free(v);
    return t;
}

/* ---- the network ----------------------------------------------------------------------------- */

typedef struct conv_layer {
    const char *name;
    int c, hw, k, r, stride, pad, count;
} conv_layer;

static const conv_layer tv_layers[] = {
    {"conv1 7x7/2", 3, 32, 64, 7, 2, 3, 1},
    {"layer1 3x3", 64, 8, 64, 3, 1, 1, 4},
    {"layer2.0 3x3/2", 64, 8, 128, 3, 2, 1, 1},
    {"layer2 3x3", 128, 4, 128, 3, 1, 1, 3},
    {"layer2.0 down 1x1/2", 64, 8, 128, 1, 2, 0, 1},
    {"layer3.0 3x3/2", 128, 4, 256, 3, 2, 1, 1},
    {"layer3 3x3", 256, 2, 256, 3, 1, 1, 3},
    {"layer3.0 down 1x1/2", 128, 4, 256, 1, 2, 0, 1},
    {"layer4.0 3x3/2", 256, 2, 512, 3, 2, 1, 1},
    {"layer4 3x3", 512, 1, 512, 3, 1, 1, 3},
    {"layer4.0 down 1x1/2", 256, 2, 512, 1, 2, 0, 1},
};
static const conv_layer cifar_layers[] = {
    {"conv1 3x3", 3, 32, 64, 3, 1, 1, 1},
    {"layer1 3x3", 64, 32, 64, 3, 1, 1, 4},
    {"layer2.0 3x3/2", 64, 32, 128, 3, 2, 1, 1},
    {"layer2 3x3", 128, 16, 128, 3, 1, 1, 3},
    {"layer2.0 down 1x1/2", 64, 32, 128, 1, 2, 0, 1},
    {"layer3.0 3x3/2", 128, 16, 256, 3, 2, 1, 1},
    {"layer3 3x3", 256, 8, 256, 3, 1, 1, 3},
    {"layer3.0 down 1x1/2", 128, 16, 256, 1, 2, 0, 1},
    {"layer4.0 3x3/2", 256, 8, 512, 3, 2, 1, 1},
    {"layer4 3x3", 512, 4, 512, 3, 1, 1, 3},
    {"layer4.0 down 1x1/2", 256, 8, 512, 1, 2, 0, 1},
};

/* The activation shapes after each stage: {c, hw, batchnorms with relu fused, without, residual
 * adds}. */
typedef struct stage {
    int c, hw, bn_relu, bn_plain, adds;
} stage;

/* dnnl_sgemm on the OpenMP threads the backend has set up (main runs a convolution first). */
static double gemm_ceiling(void)
{
    const int n = 1024;
    float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b);
    float *c = malloc((size_t)n * n * sizeof *c);
    for (int64_t i = 0; i < (int64_t)n * n; i++) {
        a[i] = (float)((i % 17) * 0.01);
        b[i] = (float)((i % 13) * 0.02);
    }
    double best = 1e9;
    for (int rep = 0; rep < 12; rep++) {
        double t0 = now();
        if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) != dnnl_success) {
            fprintf(stderr, "bench_ops: dnnl_sgemm failed\n");
            exit(1);
        }
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * n / best * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 2, N = 128, cifar = 0, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            N = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--stem") && i + 1 < argc)
            cifar = !strcmp(argv[++i], "cifar");
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            min_ms = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--stat") && i + 1 < argc)
            use_min = !strcmp(argv[++i], "min");
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc)
            bf16 = !strcmp(argv[++i], "bf16"); /* the backend's bf16 (the ceiling stays fp32) */
        else {
            fprintf(stderr, "usage: bench_ops [--threads N] [--batch N] [--stem tv|cifar] "
                            "[--min-ms T] [--stat median|min] [--precision f32|bf16]\n");
            return 2;
        }
    }
    /* The library reads no environment for this switch (lib/base/env.h): the program passes it. */
    const char *wg = getenv("PTC_DNNL_WINOGRAD");
    ptc__be_params p = {.dtype = PTC__BE_F32,
                        .threads = threads,
                        .winograd = wg && strcmp(wg, "1") == 0,
                        .precision = bf16 ? PTC__PREC_BF16 : PTC__PREC_F32};
    die_if(D->open(&be, &p, &err), "open");

    /* The ceiling: run a conv first so that OpenMP's threads exist and are set. */
    const conv_layer *L = cifar ? cifar_layers : tv_layers;
    const int nl = (int)(sizeof tv_layers / sizeof tv_layers[0]);
    double ceil_gf;
    {
        ptc__bt *a = tnew(PTC__ROLE_ACT, 2, 16, 4, 4, 1), *b = tnew(PTC__ROLE_ACT, 2, 16, 4, 4, 1);
        die_if(D->add(be, a, b, b, 0, &err), "add"); /* applies the thread count */
        D->tensor_free(be, a), D->tensor_free(be, b);
        ceil_gf = gemm_ceiling();
    }
    printf("ResNet-18 (%s stem) on 32x32, batch %d, %d threads, oneDNN %d.%d.%d\n",
           cifar ? "CIFAR 3x3" : "torchvision 7x7", N, threads, dnnl_version()->major,
           dnnl_version()->minor, dnnl_version()->patch);
    printf("fp32 GEMM ceiling (dnnl_sgemm 1024^3, best of 12): %.1f GFLOP/s\n\n", ceil_gf);
    printf("%-20s %3s | %8s %7s %5s | %8s %7s %5s | %8s %7s %5s\n", "conv layer", "x", "fwd ms",
           "GF/s", "ceil", "bwd_d ms", "GF/s", "ceil", "bwd_w ms", "GF/s", "ceil");

    double step_conv = 0, infer_conv = 0, step_flop = 0;
    for (int i = 0; i < nl; i++) {
        const conv_layer *l = &L[i];
        int oh = (l->hw + 2 * l->pad - l->r) / l->stride + 1;
        ptc__conv_shape s = {N, l->c, l->hw, l->hw, l->k, l->r, l->r, l->stride, l->pad, oh, oh};
        job j = {.op = OP_CONV_FWD};
        die_if(D->conv_plan(be, &j.plan, &s, &err), "conv_plan");
        j.t[0] = tnew(PTC__ROLE_ACT, N, l->c, l->hw, l->hw, 1);
        j.t[1] = tnew(PTC__ROLE_CONV_W, l->k, l->c, l->r, l->r, 0.05);
        j.t[2] = tnew(PTC__ROLE_ACT, N, l->k, oh, oh, 1);
        double flop = 2.0 * N * l->k * l->c * l->r * l->r * oh * oh, ms[3];
        for (int o = 0; o < 3; o++) {
            j.op = OP_CONV_FWD + o;
            ms[o] = time_job(&j);
        }
        printf("%-20s %3d |", l->name, l->count);
        for (int o = 0; o < 3; o++) {
            double gf = flop / (ms[o] * 1e-3) * 1e-9;
            printf(" %8.3f %7.1f %4.0f%% %s", ms[o], gf, 100 * gf / ceil_gf, o < 2 ? "|" : "");
        }
        printf("%s\n", i == 0 ? "  (bwd_d not needed)" : "");
        infer_conv += l->count * ms[0];
        step_conv += l->count * (ms[0] + ms[2] + (i == 0 ? 0 : ms[1]));
        step_flop += l->count * flop * (i == 0 ? 2 : 3);
        for (int k = 0; k < 3; k++)
            D->tensor_free(be, j.t[k]);
        D->plan_free(be, j.plan);
    }
    ptc__dnnl_stats st;
    ptc__dnnl_stats_get(be, &st);
    printf("convolutions of one step: %.1f ms for %.1f GFLOP = %.1f GFLOP/s (%.0f%% of the "
           "ceiling); inference: %.1f ms\n",
           step_conv, step_flop * 1e-9, step_flop / (step_conv * 1e-3) * 1e-9,
           100 * step_flop / (step_conv * 1e-3) * 1e-9 / ceil_gf, infer_conv);
    printf("reorders inside ops so far: %llu activation, %llu weight (backward data)\n\n",
           (unsigned long long)st.act_reorders, (unsigned long long)st.weight_reorders);

    /* ---- the other ops ---- */
    const stage tv_stages[] = {{64, 16, 1, 0, 0},
                               {64, 8, 2, 2, 2},
                               {128, 4, 2, 3, 2},
                               {256, 2, 2, 3, 2},
                               {512, 1, 2, 3, 2}};
    const stage cifar_stages[] = {
        {64, 32, 3, 2, 2}, {128, 16, 2, 3, 2}, {256, 8, 2, 3, 2}, {512, 4, 2, 3, 2}};
    const stage *S = cifar ? cifar_stages : tv_stages;
    const int ns = cifar ? 4 : 5;
    double step_other = 0, infer_other = 0;
    printf("%-34s %9s %9s %9s %9s\n", "other ops (per call, ms)", "bn+relu", "bn", "bn bwd",
           "bn eval");
    for (int i = 0; i < ns; i++) {
        const stage *g = &S[i];
        job j = {.op = OP_BN_TRAIN};
        die_if(D->bn_plan(be, &j.plan, (const int[4]){N, g->c, g->hw, g->hw}, 1e-5, &err),
               "bn_plan");
        j.t[0] = tnew(PTC__ROLE_ACT, N, g->c, g->hw, g->hw, 1);
        j.t[1] = tnew(PTC__ROLE_ACT, N, g->c, g->hw, g->hw, 1);
        for (int k = 2; k < 8; k++)
            j.t[k] = tnew(PTC__ROLE_VEC, 1, g->c, 1, 1, k == 7 || k == 2 ? -1 : 0.1);
        j.t[8] = tnew(PTC__ROLE_ACT, N, g->c, g->hw, g->hw, 1);
        j.t[9] = tnew(PTC__ROLE_ACT, N, g->c, g->hw, g->hw, 1);
        j.t[10] = tnew(PTC__ROLE_VEC, 1, g->c, 1, 1, 1);
        j.t[11] = tnew(PTC__ROLE_VEC, 1, g->c, 1, 1, 1);
        D->tensor_fill(be, j.t[7], 1, &err), D->tensor_fill(be, j.t[2], 1, &err);
        j.relu = 1;
        double t_relu = time_job(&j);
        j.op = OP_BN_BWD; /* after a forward with relu: the fused workspace path */
        run_job(&(job){.op = OP_BN_TRAIN,
                       .plan = j.plan,
                       .relu = 1,
                       .t = {j.t[0], j.t[1], j.t[2], j.t[3], j.t[4], j.t[5], j.t[6], j.t[7]}},
                0);
        double t_bwd = time_job(&j);
        j.op = OP_BN_TRAIN;
        j.relu = 0;
        double t_plain = time_job(&j);
        j.op = OP_BN_EVAL;
        j.relu = 1;
        double t_eval = time_job(&j);
        char name[64];
        snprintf(name, sizeof name, "batchnorm [%d][%d][%d][%d] x%d", N, g->c, g->hw, g->hw,
                 g->bn_relu + g->bn_plain);
        printf("%-34s %9.3f %9.3f %9.3f %9.3f\n", name, t_relu, t_plain, t_bwd, t_eval);
        step_other +=
            g->bn_relu * t_relu + g->bn_plain * t_plain + (g->bn_relu + g->bn_plain) * t_bwd;
        infer_other += (g->bn_relu + g->bn_plain) * t_eval;
        /* residual: add + relu forward; relu backward and the fork's accumulate backward */
        job a = {.op = OP_ADD_RELU, .t = {j.t[0], j.t[1], j.t[8]}};
        double t_add = time_job(&a);
        a.op = OP_RELU_BWD;
        double t_rb = time_job(&a);
        a.op = OP_ACC;
        double t_acc = time_job(&a);
        if (g->adds)
            printf("%-34s add+relu %.3f, relu bwd %.3f, accumulate %.3f\n", "  residual x2", t_add,
                   t_rb, t_acc);
        step_other += g->adds * (t_add + t_rb + t_acc);
        infer_other += g->adds * t_add;
        for (int k = 0; k < 12; k++)
            D->tensor_free(be, j.t[k]);
        D->plan_free(be, j.plan);
    }
    if (!cifar) {
        ptc__pool_shape ps = {N, 64, 16, 16, 3, 3, 2, 1, 8, 8};
        job j = {.op = OP_POOL_FWD};
        die_if(D->maxpool_plan(be, &j.plan, &ps, &err), "maxpool_plan");
        j.t[0] = tnew(PTC__ROLE_ACT, N, 64, 16, 16, 1);
        j.t[1] = tnew(PTC__ROLE_ACT, N, 64, 8, 8, 1);
        j.t[2] = tnew(PTC__ROLE_ACT, N, 64, 8, 8, 1);
        j.t[3] = tnew(PTC__ROLE_ACT, N, 64, 16, 16, 1);
        double f = time_job(&j);
        run_job(&(job){.op = OP_POOL_FWD, .plan = j.plan, .t = {j.t[0], j.t[1]}}, 0);
        j.op = OP_POOL_BWD;
        double b = time_job(&j);
        printf("%-34s fwd %.3f, bwd %.3f\n", "maxpool 3x3/2", f, b);
        step_other += f + b;
        infer_other += f;
        for (int k = 0; k < 4; k++)
            D->tensor_free(be, j.t[k]);
        D->plan_free(be, j.plan);
    }
    {
        int hw = cifar ? 4 : 1;
        job j = {.op = OP_AVG_FWD};
        j.t[0] = tnew(PTC__ROLE_ACT, N, 512, hw, hw, 1);
        j.t[1] = tnew(PTC__ROLE_MAT, N, 512, 1, 1, 1);
        double f = time_job(&j);
        j.op = OP_AVG_BWD;
        double b = time_job(&j);
        job l = {.op = OP_LIN_FWD};
        l.t[0] = j.t[1];
        l.t[1] = tnew(PTC__ROLE_MAT, 10, 512, 1, 1, 0.05);
        l.t[2] = tnew(PTC__ROLE_VEC, 1, 10, 1, 1, 0.05);
        l.t[3] = tnew(PTC__ROLE_MAT, N, 10, 1, 1, 1);
        l.t[4] = tnew(PTC__ROLE_MAT, N, 512, 1, 1, 1);
        l.t[5] = tnew(PTC__ROLE_MAT, 10, 512, 1, 1, 1);
        l.t[6] = tnew(PTC__ROLE_VEC, 1, 10, 1, 1, 1);
        double lf = time_job(&l);
        l.op = OP_LIN_BWD;
        double lb = time_job(&l);
        printf("%-34s fwd %.3f, bwd %.3f; linear 512->10 fwd %.3f, bwd %.3f\n", "avgpool", f, b, lf,
               lb);
        step_other += f + b + lf + lb;
        infer_other += f + lf;
        D->tensor_free(be, j.t[0]), D->tensor_free(be, j.t[1]);
        for (int k = 1; k < 7; k++)
            D->tensor_free(be, l.t[k]);
    }
    {
        /* SGD over every parameter of ResNet-18 (the same count for both stems but conv1). */
        ptc__bt *ps[64], *gs[64], *bs[64];
        int np = 0;
        for (int i = 0; i < nl; i++)
            for (int c = 0; c < L[i].count; c++) {
                const conv_layer *l = &L[i];
                ps[np] = tnew(PTC__ROLE_CONV_W, l->k, l->c, l->r, l->r, 0.1);
                gs[np] = tnew(PTC__ROLE_CONV_W, l->k, l->c, l->r, l->r, 0.1);
                bs[np] = tnew(PTC__ROLE_CONV_W, l->k, l->c, l->r, l->r, 0.1);
                np++;
                ps[np] = tnew(PTC__ROLE_VEC, 1, 2 * l->k, 1, 1, 0.1); /* its bn: gamma, beta */
                gs[np] = tnew(PTC__ROLE_VEC, 1, 2 * l->k, 1, 1, 0.1);
                bs[np] = tnew(PTC__ROLE_VEC, 1, 2 * l->k, 1, 1, 0.1);
                np++;
            }
        ps[np] = tnew(PTC__ROLE_MAT, 10, 513, 1, 1, 0.1); /* fc weight and bias */
        gs[np] = tnew(PTC__ROLE_MAT, 10, 513, 1, 1, 0.1);
        bs[np] = tnew(PTC__ROLE_MAT, 10, 513, 1, 1, 0.1);
        np++;
        job j = {.op = OP_SGD, .params = ps, .grads = gs, .bufs = bs, .nparams = np};
        double t = time_job(&j);
        printf("%-34s %.3f\n", "sgd_step over all parameters", t);
        step_other += t;
        for (int i = 0; i < np; i++)
            D->tensor_free(be, ps[i]), D->tensor_free(be, gs[i]), D->tensor_free(be, bs[i]);
    }
    double step = step_conv + step_other, infer = infer_conv + infer_other;
    printf("\none training step in the backend: %.1f ms (convolutions %.1f, other %.1f) -> "
           "%.0f img/s bound\n",
           step, step_conv, step_other, N / (step * 1e-3));
    printf("one inference batch in the backend: %.1f ms (convolutions %.1f, other %.1f) -> "
           "%.0f img/s bound\n",
           infer, infer_conv, infer_other, N / (infer * 1e-3));
    printf("gemm_gflops=%.1f step_ms=%.2f step_conv_ms=%.2f infer_ms=%.2f train_img_s=%.0f "
           "infer_img_s=%.0f\n",
           ceil_gf, step, step_conv, infer, N / (step * 1e-3), N / (infer * 1e-3));
    D->close(be);
    return 0;
}
