/*
 * cuda_layers.c - every op of the cuda backend's table against the ref backend, at the shapes of
 * ResNet-18 (batch 2), on random data: float32 with TF32 off, the error of each output being
 * max |cuda - ref| / max(1, max |ref|), which must be at most 1e-4; an instance opened with
 * deterministic = 1 must give the same bits twice; and an instance in bf16 precision runs the
 * convolutions and the linear layer within a loose 2e-2 of ref's float32 (rounding to bf16 alone
 * gives about 4e-3 at these shapes; the comparison with autocast is --bf16-dump's job). Prints one
 * table line per output (op, shape, error, PASS/FAIL; for images_batch, checked bit for bit
 * against ref, the count of differing elements) and a last line "cuda_layers: N checks, M
 * failed"; exits 1 on any failure, 77 (skipped) with the reason when this machine has no usable
 * NVIDIA GPU.
 *
 * cuda_layers --bf16-dump DIR
 *   Runs a few layers with the cuda backend in bf16 precision (PTC__PREC_BF16, autocast's rules)
 *   and writes their inputs and outputs to DIR (created if missing), for a script that runs the
 *   same layers under torch.autocast(dtype=torch.bfloat16) on the same GPU and compares both with
 *   a float64 oracle. Files:
 *     DIR/manifest.json   {"format": "ptc-bf16-dump-1", "layers": [LAYER, ...]} where LAYER is
 *         {"name": "conv3x3", "kind": "conv", "stride": 1, "pad": 1,
 *          "tensors": {"x": {"file": "conv3x3.x.f32", "shape": [n, c, h, w]}, ...}}
 *       or {"name": "linear", "kind": "linear", "tensors": {...}};
 *     DIR/<layer>.<tensor>.f32   the tensor's elements, raw little-endian float32, in torch's own
 *         layout for the shape given: NCHW for activations, [k][c][r][s] for convolution
 *         weights, [n][features] for linear inputs and outputs, [out][in] for linear weights,
 *         [out] for the bias (shape [m]).
 *   Tensors per layer (inputs first, all float32; outputs are the bf16-precision results widened
 *   to float32 exactly as the backend hands them to the next layer):
 *     conv   x, w, dy (inputs); y = conv(x, w), dx, dw (outputs: autocast's conv forward and
 *            both backward passes given dy as the gradient of y; no bias);
 *     linear x, w, b, dy (inputs); y = x w^T + b, dx, dw, db (outputs).
 *   Exit 0 when written, 1 on error, 77 without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "data/data.h"

#define TOL 1e-4
/* The bf16 instance against ref's float32: a sanity bound only (inputs and outputs rounded to 8
 * significant bits); the real bf16 check compares with torch autocast (--bf16-dump). */
#define TOL_BF16 2e-2

static const ptc__backend_ops *const R = &ptc__backend_ref;
static const ptc__backend_ops *const C = &ptc__backend_cuda;
static ptc__be *rb, *cb;
static ptc_error err;
static int n_checks, n_failed;
static double tol = TOL; /* TOL_BF16 while cb is the bf16 instance */

/* A tensor made on both backends from the same plain data. */
typedef struct pair {
    ptc__bt *r, *c;
    int dims[4];
    int64_t n;
    float *host; /* the plain data written, then scratch for reads */
    float *host2;
} pair;

enum fill { RAND, POS, ZERO, TIES };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void fail_op(const char *what)
{
    n_checks++;
    n_failed++;
    printf("%-38s %-26s %10s  FAIL (%s: %s)\n", what, "-", "-", ptc_err_name(err.code),
           err.message);
}

/* Runs a backend call; on error prints a FAIL line and returns from the calling check. */
#define DO(call, what)                                                                             \
    do {                                                                                           \
        if ((call) < 0) {                                                                          \
            fail_op(what);                                                                         \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "cuda_layers: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill_host(float *h, int64_t n, enum fill f)
{
    for (int64_t i = 0; i < n; i++) {
        switch (f) {
        case RAND:
            h[i] = (float)(2 * urand() - 1);
            break;
        case POS:
            h[i] = (float)(0.5 + urand());
            break;
        case ZERO:
            h[i] = 0;
            break;
        case TIES:
            h[i] = (float)(int)(4 * urand()); /* 0..3: many equal maxima in a window */
            break;
        }
    }
}

/* Makes the pair; 0, or -1 after a FAIL line. */
static int pnew(pair *p, const char *what, ptc__role role, int n, int c, int h, int w, enum fill f)
{
    memset(p, 0, sizeof *p);
    p->dims[0] = n, p->dims[1] = c, p->dims[2] = h, p->dims[3] = w;
    p->n = (int64_t)n * c * h * w;
    p->host = xmalloc((size_t)p->n * sizeof(float));
    p->host2 = xmalloc((size_t)p->n * sizeof(float));
    fill_host(p->host, p->n, f);
    if (R->tensor_new(rb, &p->r, role, p->dims, &err) < 0 ||
        C->tensor_new(cb, &p->c, role, p->dims, &err) < 0 ||
        R->tensor_write(rb, p->r, p->host, &err) < 0 ||
        C->tensor_write(cb, p->c, p->host, &err) < 0) {
        fail_op(what);
        return -1;
    }
    return 0;
}

static void pfree(pair *p)
{
    R->tensor_free(rb, p->r);
    C->tensor_free(cb, p->c);
    free(p->host);
    free(p->host2);
    memset(p, 0, sizeof *p);
}

/* Compares the cuda tensor with the ref tensor of the pair and prints the table line. */
static void cmp(const char *what, const pair *p)
{
    char shape[64];
    snprintf(shape, sizeof shape, "[%d][%d][%d][%d]", p->dims[0], p->dims[1], p->dims[2],
             p->dims[3]);
    if (R->tensor_read(rb, p->r, p->host, &err) < 0 ||
        C->tensor_read(cb, p->c, p->host2, &err) < 0) {
        fail_op(what);
        return;
    }
    double maxref = 0, maxdiff = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < p->n; i++) {
        double r = p->host[i], c = p->host2[i], d = fabs(c - r);
        if (fabs(r) > maxref)
            maxref = fabs(r);
        if (!(d <= maxdiff)) { /* NaN counts as the worst */
            maxdiff = isnan(d) ? INFINITY : d;
            worst = i;
        }
    }
    double e = maxdiff / (maxref > 1 ? maxref : 1);
    int ok = e <= tol;
    n_checks++;
    n_failed += !ok;
    printf("%-38s %-26s %10.3e  %s", what, shape, e, ok ? "PASS" : "FAIL");
    if (tol != TOL)
        printf(" (tolerance %.0e)", tol);
    if (!ok)
        printf(" (element %lld: cuda %.9g, ref %.9g)", (long long)worst, (double)p->host2[worst],
               (double)p->host[worst]);
    printf("\n");
}

/* ---- the checks ------------------------------------------------------------------------------ */

static void check_conv(const char *name, int n, int c, int h, int w, int k, int r, int stride,
                       int pad)
{
    ptc__conv_shape s = {n, c, h, w, k, r, r, stride, pad, 0, 0};
    s.oh = ptc__conv_out(h, r, stride, pad);
    s.ow = ptc__conv_out(w, r, stride, pad);
    ptc__op *ro = NULL, *co = NULL;
    char what[64];
    pair x, wt, y, dy, dx, dw;
    snprintf(what, sizeof what, "%s plan", name);
    DO(R->conv_plan(rb, &ro, &s, &err), what);
    DO(C->conv_plan(cb, &co, &s, &err), what);
    if (pnew(&x, name, PTC__ROLE_ACT, n, c, h, w, RAND) < 0 ||
        pnew(&wt, name, PTC__ROLE_CONV_W, k, c, r, r, RAND) < 0 ||
        pnew(&y, name, PTC__ROLE_ACT, n, k, s.oh, s.ow, ZERO) < 0 ||
        pnew(&dy, name, PTC__ROLE_ACT, n, k, s.oh, s.ow, RAND) < 0 ||
        pnew(&dx, name, PTC__ROLE_ACT, n, c, h, w, ZERO) < 0 ||
        pnew(&dw, name, PTC__ROLE_CONV_W, k, c, r, r, ZERO) < 0)
        return;
    snprintf(what, sizeof what, "%s fwd y", name);
    DO(R->conv_fwd(rb, ro, x.r, wt.r, y.r, &err), what);
    DO(C->conv_fwd(cb, co, x.c, wt.c, y.c, &err), what);
    cmp(what, &y);
    snprintf(what, sizeof what, "%s bwd_data dx", name);
    DO(R->conv_bwd_data(rb, ro, dy.r, wt.r, dx.r, &err), what);
    DO(C->conv_bwd_data(cb, co, dy.c, wt.c, dx.c, &err), what);
    cmp(what, &dx);
    snprintf(what, sizeof what, "%s bwd_weight dw", name);
    DO(R->conv_bwd_weight(rb, ro, x.r, dy.r, dw.r, &err), what);
    DO(C->conv_bwd_weight(cb, co, x.c, dy.c, dw.c, &err), what);
    cmp(what, &dw);
    pfree(&x), pfree(&wt), pfree(&y), pfree(&dy), pfree(&dx), pfree(&dw);
    R->plan_free(rb, ro);
    C->plan_free(cb, co);
}

static void check_bn(const char *name, int n, int c, int h, int w, int relu)
{
    const int d[4] = {n, c, h, w};
    ptc__op *ro = NULL, *co = NULL;
    char what[64];
    pair x, g, b, y, sm, si, rm, rv, dy, dx, dg, db;
    snprintf(what, sizeof what, "%s plan", name);
    DO(R->bn_plan(rb, &ro, d, 1e-5, &err), what);
    DO(C->bn_plan(cb, &co, d, 1e-5, &err), what);
    if (pnew(&x, name, PTC__ROLE_ACT, n, c, h, w, RAND) < 0 ||
        pnew(&g, name, PTC__ROLE_VEC, 1, c, 1, 1, POS) < 0 ||
        pnew(&b, name, PTC__ROLE_VEC, 1, c, 1, 1, RAND) < 0 ||
        pnew(&y, name, PTC__ROLE_ACT, n, c, h, w, ZERO) < 0 ||
        pnew(&sm, name, PTC__ROLE_VEC, 1, c, 1, 1, ZERO) < 0 ||
        pnew(&si, name, PTC__ROLE_VEC, 1, c, 1, 1, ZERO) < 0 ||
        pnew(&rm, name, PTC__ROLE_VEC, 1, c, 1, 1, RAND) < 0 ||
        pnew(&rv, name, PTC__ROLE_VEC, 1, c, 1, 1, POS) < 0 ||
        pnew(&dy, name, PTC__ROLE_ACT, n, c, h, w, RAND) < 0 ||
        pnew(&dx, name, PTC__ROLE_ACT, n, c, h, w, ZERO) < 0 ||
        pnew(&dg, name, PTC__ROLE_VEC, 1, c, 1, 1, ZERO) < 0 ||
        pnew(&db, name, PTC__ROLE_VEC, 1, c, 1, 1, ZERO) < 0)
        return;
    /* eval first, on the initial running statistics */
    snprintf(what, sizeof what, "%s eval y", name);
    DO(R->bn_fwd_eval(rb, ro, x.r, g.r, b.r, rm.r, rv.r, y.r, relu, &err), what);
    DO(C->bn_fwd_eval(cb, co, x.c, g.c, b.c, rm.c, rv.c, y.c, relu, &err), what);
    cmp(what, &y);
    snprintf(what, sizeof what, "%s train", name);
    DO(R->bn_fwd_train(rb, ro, x.r, g.r, b.r, y.r, sm.r, si.r, rm.r, rv.r, 0.1, relu, &err), what);
    DO(C->bn_fwd_train(cb, co, x.c, g.c, b.c, y.c, sm.c, si.c, rm.c, rv.c, 0.1, relu, &err), what);
    snprintf(what, sizeof what, "%s train y", name);
    cmp(what, &y);
    snprintf(what, sizeof what, "%s train save_mean", name);
    cmp(what, &sm);
    snprintf(what, sizeof what, "%s train save_invstd", name);
    cmp(what, &si);
    snprintf(what, sizeof what, "%s train running_mean", name);
    cmp(what, &rm);
    snprintf(what, sizeof what, "%s train running_var", name);
    cmp(what, &rv);
    snprintf(what, sizeof what, "%s bwd", name);
    DO(R->bn_bwd(rb, ro, x.r, relu ? y.r : NULL, dy.r, g.r, sm.r, si.r, dx.r, dg.r, db.r, &err),
       what);
    DO(C->bn_bwd(cb, co, x.c, relu ? y.c : NULL, dy.c, g.c, sm.c, si.c, dx.c, dg.c, db.c, &err),
       what);
    snprintf(what, sizeof what, "%s bwd dx", name);
    cmp(what, &dx);
    snprintf(what, sizeof what, "%s bwd dgamma", name);
    cmp(what, &dg);
    snprintf(what, sizeof what, "%s bwd dbeta", name);
    cmp(what, &db);
    pfree(&x), pfree(&g), pfree(&b), pfree(&y), pfree(&sm), pfree(&si), pfree(&rm), pfree(&rv);
    pfree(&dy), pfree(&dx), pfree(&dg), pfree(&db);
    R->plan_free(rb, ro);
    C->plan_free(cb, co);
}

static void check_maxpool(const char *name, enum fill f)
{
    ptc__pool_shape s = {2, 64, 112, 112, 3, 3, 2, 1, 56, 56};
    ptc__op *ro = NULL, *co = NULL;
    char what[64];
    pair x, x2, y, y2, dy, dx;
    snprintf(what, sizeof what, "%s plan", name);
    DO(R->maxpool_plan(rb, &ro, &s, &err), what);
    DO(C->maxpool_plan(cb, &co, &s, &err), what);
    if (pnew(&x, name, PTC__ROLE_ACT, s.n, s.c, s.h, s.w, f) < 0 ||
        pnew(&x2, name, PTC__ROLE_ACT, s.n, s.c, s.h, s.w, f) < 0 ||
        pnew(&y, name, PTC__ROLE_ACT, s.n, s.c, s.oh, s.ow, ZERO) < 0 ||
        pnew(&y2, name, PTC__ROLE_ACT, s.n, s.c, s.oh, s.ow, ZERO) < 0 ||
        pnew(&dy, name, PTC__ROLE_ACT, s.n, s.c, s.oh, s.ow, RAND) < 0 ||
        pnew(&dx, name, PTC__ROLE_ACT, s.n, s.c, s.h, s.w, ZERO) < 0)
        return;
    snprintf(what, sizeof what, "%s fwd y", name);
    DO(R->maxpool_fwd(rb, ro, x.r, y.r, &err), what);
    DO(C->maxpool_fwd(cb, co, x.c, y.c, &err), what);
    cmp(what, &y);
    snprintf(what, sizeof what, "%s bwd dx", name);
    DO(R->maxpool_bwd(rb, ro, x.r, y.r, dy.r, dx.r, &err), what);
    DO(C->maxpool_bwd(cb, co, x.c, y.c, dy.c, dx.c, &err), what);
    cmp(what, &dx);
    /* A forward on another input in between: the plan's argmax is x2's, backward of x must not
     * use it. */
    snprintf(what, sizeof what, "%s bwd after other fwd", name);
    DO(R->maxpool_fwd(rb, ro, x2.r, y2.r, &err), what);
    DO(C->maxpool_fwd(cb, co, x2.c, y2.c, &err), what);
    DO(R->maxpool_bwd(rb, ro, x.r, y.r, dy.r, dx.r, &err), what);
    DO(C->maxpool_bwd(cb, co, x.c, y.c, dy.c, dx.c, &err), what);
    cmp(what, &dx);
    pfree(&x), pfree(&x2), pfree(&y), pfree(&y2), pfree(&dy), pfree(&dx);
    R->plan_free(rb, ro);
    C->plan_free(cb, co);
}

static void check_avgpool(void)
{
    pair x, y, dy, dx;
    if (pnew(&x, "avgpool", PTC__ROLE_ACT, 2, 512, 7, 7, RAND) < 0 ||
        pnew(&y, "avgpool", PTC__ROLE_MAT, 2, 512, 1, 1, ZERO) < 0 ||
        pnew(&dy, "avgpool", PTC__ROLE_MAT, 2, 512, 1, 1, RAND) < 0 ||
        pnew(&dx, "avgpool", PTC__ROLE_ACT, 2, 512, 7, 7, ZERO) < 0)
        return;
    DO(R->avgpool_fwd(rb, x.r, y.r, &err), "avgpool fwd");
    DO(C->avgpool_fwd(cb, x.c, y.c, &err), "avgpool fwd");
    cmp("avgpool fwd y", &y);
    DO(R->avgpool_bwd(rb, dy.r, dx.r, &err), "avgpool bwd");
    DO(C->avgpool_bwd(cb, dy.c, dx.c, &err), "avgpool bwd");
    cmp("avgpool bwd dx", &dx);
    pfree(&x), pfree(&y), pfree(&dy), pfree(&dx);
}

static void check_linear(int N, int K, int M, const char *name)
{
    char what[64];
    pair x, w, b, y, dy, dx, dw, db;
    if (pnew(&x, name, PTC__ROLE_MAT, N, K, 1, 1, RAND) < 0 ||
        pnew(&w, name, PTC__ROLE_MAT, M, K, 1, 1, RAND) < 0 ||
        pnew(&b, name, PTC__ROLE_VEC, 1, M, 1, 1, RAND) < 0 ||
        pnew(&y, name, PTC__ROLE_MAT, N, M, 1, 1, ZERO) < 0 ||
        pnew(&dy, name, PTC__ROLE_MAT, N, M, 1, 1, RAND) < 0 ||
        pnew(&dx, name, PTC__ROLE_MAT, N, K, 1, 1, ZERO) < 0 ||
        pnew(&dw, name, PTC__ROLE_MAT, M, K, 1, 1, ZERO) < 0 ||
        pnew(&db, name, PTC__ROLE_VEC, 1, M, 1, 1, ZERO) < 0)
        return;
    snprintf(what, sizeof what, "%s fwd y", name);
    DO(R->linear_fwd(rb, x.r, w.r, b.r, y.r, &err), what);
    DO(C->linear_fwd(cb, x.c, w.c, b.c, y.c, &err), what);
    cmp(what, &y);
    snprintf(what, sizeof what, "%s bwd", name);
    DO(R->linear_bwd(rb, x.r, w.r, dy.r, dx.r, dw.r, db.r, &err), what);
    DO(C->linear_bwd(cb, x.c, w.c, dy.c, dx.c, dw.c, db.c, &err), what);
    snprintf(what, sizeof what, "%s bwd dx", name);
    cmp(what, &dx);
    snprintf(what, sizeof what, "%s bwd dw", name);
    cmp(what, &dw);
    snprintf(what, sizeof what, "%s bwd db", name);
    cmp(what, &db);
    /* dx NULL (a first layer's input needs no gradient): dw and db alone */
    snprintf(what, sizeof what, "%s bwd (no dx) dw", name);
    DO(R->tensor_fill(rb, dw.r, 0, &err), what);
    DO(C->tensor_fill(cb, dw.c, 0, &err), what);
    DO(R->linear_bwd(rb, x.r, w.r, dy.r, NULL, dw.r, db.r, &err), what);
    DO(C->linear_bwd(cb, x.c, w.c, dy.c, NULL, dw.c, db.c, &err), what);
    cmp(what, &dw);
    pfree(&x), pfree(&w), pfree(&b), pfree(&y), pfree(&dy), pfree(&dx), pfree(&dw), pfree(&db);
}

static void check_elementwise(void)
{
    pair a, b, y;
    if (pnew(&a, "elementwise", PTC__ROLE_ACT, 2, 64, 56, 56, RAND) < 0 ||
        pnew(&b, "elementwise", PTC__ROLE_ACT, 2, 64, 56, 56, RAND) < 0 ||
        pnew(&y, "elementwise", PTC__ROLE_ACT, 2, 64, 56, 56, ZERO) < 0)
        return;
    cmp("tensor_write/read", &a);
    DO(R->add(rb, a.r, b.r, y.r, 0, &err), "add");
    DO(C->add(cb, a.c, b.c, y.c, 0, &err), "add");
    cmp("add y", &y);
    DO(R->add(rb, a.r, b.r, y.r, 1, &err), "add relu");
    DO(C->add(cb, a.c, b.c, y.c, 1, &err), "add relu");
    cmp("add relu y", &y);
    DO(R->accumulate(rb, a.r, y.r, &err), "accumulate");
    DO(C->accumulate(cb, a.c, y.c, &err), "accumulate");
    cmp("accumulate y", &y);
    DO(R->relu_fwd(rb, b.r, y.r, &err), "relu_fwd");
    DO(C->relu_fwd(cb, b.c, y.c, &err), "relu_fwd");
    cmp("relu_fwd y", &y);
    DO(R->relu_bwd(rb, y.r, a.r, b.r, &err), "relu_bwd");
    DO(C->relu_bwd(cb, y.c, a.c, b.c, &err), "relu_bwd");
    cmp("relu_bwd dx", &b);
    DO(R->relu_bwd(rb, y.r, a.r, a.r, &err), "relu_bwd in place");
    DO(C->relu_bwd(cb, y.c, a.c, a.c, &err), "relu_bwd in place");
    cmp("relu_bwd in place dx", &a);
    DO(R->tensor_fill(rb, y.r, -0.375, &err), "tensor_fill");
    DO(C->tensor_fill(cb, y.c, -0.375, &err), "tensor_fill");
    cmp("tensor_fill", &y);
    pfree(&a), pfree(&b), pfree(&y);
}

static void check_sgd(const char *name, ptc__role role, int k, int c, int r, ptc__sgd h)
{
    pair p, g, buf;
    char what[64];
    if (pnew(&p, name, role, k, c, r, r, RAND) < 0 || pnew(&g, name, role, k, c, r, r, RAND) < 0 ||
        pnew(&buf, name, role, k, c, r, r, RAND) < 0)
        return;
    /* two steps: the first one (h.first_step as given), then one with the buffer in place */
    for (int step = 0; step < 2; step++) {
        DO(R->sgd_step(rb, p.r, g.r, buf.r, &h, &err), name);
        DO(C->sgd_step(cb, p.c, g.c, buf.c, &h, &err), name);
        snprintf(what, sizeof what, "%s step %d p", name, step + 1);
        cmp(what, &p);
        if (h.momentum != 0) {
            snprintf(what, sizeof what, "%s step %d buf", name, step + 1);
            cmp(what, &buf);
        }
        h.first_step = 0;
    }
    pfree(&p), pfree(&g), pfree(&buf);
}

/* The optional loss op: dlogits within the tolerance (CUDA's double exp and log against glibc's:
 * in practice the same bits or one ulp), the loss within 1e-12 relative and the correct count
 * equal, read through xent_result; batches of growing size (the label and scratch buffers grow)
 * and a result read only after the next xent replaced it; a bad label refused. */
static void check_xent(int n, int classes, enum fill f)
{
    char what[64];
    snprintf(what, sizeof what, "xent %s%d x %d", f == TIES ? "ties " : "", n, classes);
    pair z, g;
    if (pnew(&z, what, PTC__ROLE_MAT, n, classes, 1, 1, f) < 0 ||
        pnew(&g, what, PTC__ROLE_MAT, n, classes, 1, 1, ZERO) < 0)
        return;
    int64_t *y = xmalloc((size_t)n * sizeof *y);
    for (int i = 0; i < n; i++)
        y[i] = (int64_t)(urand() * classes);
    double lr = 0, lc = 0;
    int64_t cr = -1, cc = -2;
    DO(R->xent(rb, z.r, y, n, classes, g.r, &err), what);
    DO(C->xent(cb, z.c, y, n, classes, g.c, &err), what);
    for (int i = 0; i < n; i++)
        y[i] = -1; /* the backend copied the labels: the caller may reuse the array */
    DO(R->xent_result(rb, &lr, &cr, &err), what);
    DO(C->xent_result(cb, &lc, &cc, &err), what);
    char wl[80];
    snprintf(wl, sizeof wl, "%s dlogits", what);
    cmp(wl, &g);
    n_checks++;
    int ok = fabs(lc - lr) <= 1e-12 * fabs(lr) && cc == cr;
    n_failed += !ok;
    printf("%-38s %-26s %10.3e  %s (loss cuda %.17g ref %.17g, correct %lld / %lld)\n", what,
           "loss, correct", lr != 0 ? fabs(lc - lr) / fabs(lr) : fabs(lc), ok ? "PASS" : "FAIL", lc,
           lr, (long long)cc, (long long)cr);
    free(y);
    pfree(&z), pfree(&g);
}

static void check_xent_queue(void)
{
    const char *what = "xent queued twice";
    pair z, g;
    if (pnew(&z, what, PTC__ROLE_MAT, 16, 10, 1, 1, RAND) < 0 ||
        pnew(&g, what, PTC__ROLE_MAT, 16, 10, 1, 1, ZERO) < 0)
        return;
    int64_t y[16], bad[16];
    for (int i = 0; i < 16; i++)
        y[i] = bad[i] = i % 10;
    bad[5] = 10;
    double l1, l2, lr;
    int64_t c1, c2, cr;
    DO(C->xent(cb, z.c, y, 16, 10, g.c, &err), what);
    DO(C->xent_result(cb, &l1, &c1, &err), what);
    y[0] = (y[0] + 1) % 10; /* a different result for the second xent */
    DO(C->xent(cb, z.c, y, 16, 10, g.c, &err), what);
    DO(C->xent_result(cb, &l2, &c2, &err), what);
    DO(R->xent(rb, z.r, y, 16, 10, g.r, &err), what);
    DO(R->xent_result(rb, &lr, &cr, &err), what);
    int refused = C->xent(cb, z.c, bad, 16, 10, g.c, &err) == PTC_EINVAL &&
                  strstr(err.message, "label 10 of sample 5") != NULL;
    n_checks++;
    int ok = l1 != l2 && fabs(l2 - lr) <= 1e-12 * fabs(lr) && c2 == cr && refused;
    n_failed += !ok;
    printf("%-38s %-26s %10s  %s (latest result %.17g, ref %.17g; bad label %s)\n", what,
           "[16][10]", "-", ok ? "PASS" : "FAIL", l2, lr, refused ? "refused" : "NOT refused");
    pfree(&z), pfree(&g);
}

/* sgd_multi over parameters of three roles and sizes against ref's sgd_step one at a time, two
 * steps (the first one creating the buffers when h.first_step). */
static void check_sgd_multi(const char *name, ptc__sgd h)
{
    enum { T = 3 };
    static const int dims[T][5] = {{PTC__ROLE_CONV_W, 64, 32, 3, 3},
                                   {PTC__ROLE_VEC, 1, 512, 1, 1},
                                   {PTC__ROLE_MAT, 10, 512, 1, 1}};
    pair p[T], g[T], buf[T];
    ptc__bt *cp[T], *cg[T], *cbuf[T];
    char what[64];
    for (int i = 0; i < T; i++) {
        if (pnew(&p[i], name, (ptc__role)dims[i][0], dims[i][1], dims[i][2], dims[i][3], dims[i][4],
                 RAND) < 0 ||
            pnew(&g[i], name, (ptc__role)dims[i][0], dims[i][1], dims[i][2], dims[i][3], dims[i][4],
                 RAND) < 0 ||
            pnew(&buf[i], name, (ptc__role)dims[i][0], dims[i][1], dims[i][2], dims[i][3],
                 dims[i][4], RAND) < 0)
            return;
        cp[i] = p[i].c, cg[i] = g[i].c, cbuf[i] = buf[i].c;
    }
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < T; i++)
            DO(R->sgd_step(rb, p[i].r, g[i].r, buf[i].r, &h, &err), name);
        DO(C->sgd_multi(cb, T, cp, cg, cbuf, &h, &err), name);
        for (int i = 0; i < T; i++) {
            snprintf(what, sizeof what, "%s step %d p%d", name, step + 1, i);
            cmp(what, &p[i]);
            if (h.momentum != 0) {
                snprintf(what, sizeof what, "%s step %d buf%d", name, step + 1, i);
                cmp(what, &buf[i]);
            }
        }
        h.first_step = 0;
    }
    for (int i = 0; i < T; i++)
        pfree(&p[i]), pfree(&g[i]), pfree(&buf[i]);
}

static void check_raw(void)
{
    pair t, back;
    if (pnew(&t, "raw", PTC__ROLE_ACT, 2, 64, 56, 56, RAND) < 0 ||
        pnew(&back, "raw", PTC__ROLE_ACT, 2, 64, 56, 56, ZERO) < 0)
        return;
    size_t rbytes, cbytes;
    uint64_t rlay, clay;
    DO(R->tensor_raw_size(rb, t.r, &rbytes, &rlay, &err), "tensor_raw_size");
    DO(C->tensor_raw_size(cb, t.c, &cbytes, &clay, &err), "tensor_raw_size");
    n_checks++;
    if (cbytes != (size_t)t.n * 4 || rbytes != cbytes || clay == rlay) {
        n_failed++;
        printf("%-38s %-26s %10s  FAIL (cuda %zu bytes, ref %zu; layouts %016llx, %016llx: the "
               "sizes must agree and the layouts differ)\n",
               "tensor_raw_size", "[2][64][56][56]", "-", cbytes, rbytes, (unsigned long long)clay,
               (unsigned long long)rlay);
    } else {
        printf("%-38s %-26s %10.3e  PASS\n", "tensor_raw_size", "[2][64][56][56]", 0.0);
    }
    /* ref's raw form is the plain layout: after pack (scale) + unpack into another tensor, the
     * cuda tensor reads back as ref's packed bytes. Host memory first, then device memory. */
    float *ref_raw = xmalloc(rbytes), *host_raw = xmalloc(cbytes);
    DO(R->tensor_pack(rb, t.r, ref_raw, 0.25, &err), "tensor_pack ref");
    DO(R->tensor_write(rb, back.r, ref_raw, &err), "tensor_pack ref");
    DO(C->tensor_pack(cb, t.c, host_raw, 0.25, &err), "tensor_pack host");
    DO(C->tensor_unpack(cb, back.c, host_raw, &err), "tensor_unpack host");
    cmp("pack/unpack host x0.25", &back);
    void *dev = NULL;
    DO(C->raw_alloc(cb, &dev, cbytes, &err), "raw_alloc");
    DO(C->tensor_fill(cb, back.c, 0, &err), "tensor_fill");
    DO(C->tensor_pack(cb, t.c, dev, 0.25, &err), "tensor_pack device");
    DO(C->tensor_unpack(cb, back.c, dev, &err), "tensor_unpack device");
    cmp("pack/unpack device x0.25", &back);
    DO(R->tensor_pack(rb, t.r, ref_raw, 1.0, &err), "tensor_pack ref");
    DO(R->tensor_write(rb, back.r, ref_raw, &err), "tensor_pack ref");
    DO(C->tensor_pack(cb, t.c, dev, 1.0, &err), "tensor_pack device");
    DO(C->tensor_unpack(cb, back.c, dev, &err), "tensor_unpack device");
    cmp("pack/unpack device x1", &back);
    C->raw_free(cb, dev);
    void *stream = NULL;
    int device = -1;
    DO(C->device_info(cb, &stream, &device, &err), "device_info");
    DO(C->sync(cb, &err), "sync");
    n_checks++;
    if (!stream || device != 0) {
        n_failed++;
        printf("%-38s %-26s %10s  FAIL (stream %p, device %d; expected a stream and 0)\n",
               "device_info", "-", "-", stream, device);
    } else {
        printf("%-38s %-26s %10.3e  PASS\n", "device_info", "-", 0.0);
    }
    free(ref_raw);
    free(host_raw);
    pfree(&t), pfree(&back);
}

/* Argument checks give ref's messages: one mismatch, the code and the text. */
static void check_errors(void)
{
    pair a, b;
    if (pnew(&a, "errors", PTC__ROLE_ACT, 2, 3, 4, 5, RAND) < 0 ||
        pnew(&b, "errors", PTC__ROLE_ACT, 2, 3, 4, 6, RAND) < 0)
        return;
    ptc_error e1, e2;
    int r1 = R->add(rb, a.r, b.r, a.r, 0, &e1), r2 = C->add(cb, a.c, b.c, a.c, 0, &e2);
    n_checks++;
    if (r1 != PTC_EINVAL || r2 != PTC_EINVAL || strcmp(e1.message, e2.message) != 0) {
        n_failed++;
        printf("%-38s %-26s %10s  FAIL (ref %d \"%s\", cuda %d \"%s\")\n", "add shape mismatch",
               "-", "-", r1, e1.message, r2, e2.message);
    } else {
        printf("%-38s %-26s %10.3e  PASS\n", "add shape mismatch", "-", 0.0);
    }
    ptc__be *bad = NULL;
    ptc__be_params p = {.dtype = PTC__BE_F32, .device = 1 << 20};
    r2 = C->open(&bad, &p, &e2);
    n_checks++;
    if (r2 >= 0 || !strstr(e2.message, "no device cuda:1048576")) {
        n_failed++;
        printf("%-38s %-26s %10s  FAIL (%d \"%s\")\n", "open cuda:1048576", "-", "-", r2,
               e2.message);
        C->close(bad);
    } else {
        printf("%-38s %-26s %10.3e  PASS (%s)\n", "open cuda:1048576", "-", 0.0, e2.message);
    }
    pfree(&a), pfree(&b);
}

/* An instance opened with deterministic = 1 (only CUDNN_DETERMINISTIC algorithms): the three
 * passes of a convolution, run twice, give the same bits; and they agree with ref. */
static void check_deterministic(const char *name, int n, int c, int h, int w, int k, int r,
                                int stride, int pad)
{
    ptc__be_params p = {.dtype = PTC__BE_F32, .deterministic = 1};
    ptc__be *save = cb;
    if (C->open(&cb, &p, &err) < 0) {
        cb = save;
        fail_op(name);
        return;
    }
    ptc__conv_shape s = {n, c, h, w, k, r, r, stride, pad, 0, 0};
    s.oh = ptc__conv_out(h, r, stride, pad);
    s.ow = ptc__conv_out(w, r, stride, pad);
    ptc__op *ro = NULL, *co = NULL;
    pair x, wt, y, dy, dx, dw;
    char what[80];
    int ok = 0;
    if (R->conv_plan(rb, &ro, &s, &err) < 0 || C->conv_plan(cb, &co, &s, &err) < 0) {
        fail_op(name);
        goto out;
    }
    if (pnew(&x, name, PTC__ROLE_ACT, n, c, h, w, RAND) < 0 ||
        pnew(&wt, name, PTC__ROLE_CONV_W, k, c, r, r, RAND) < 0 ||
        pnew(&y, name, PTC__ROLE_ACT, n, k, s.oh, s.ow, ZERO) < 0 ||
        pnew(&dy, name, PTC__ROLE_ACT, n, k, s.oh, s.ow, RAND) < 0 ||
        pnew(&dx, name, PTC__ROLE_ACT, n, c, h, w, ZERO) < 0 ||
        pnew(&dw, name, PTC__ROLE_CONV_W, k, c, r, r, ZERO) < 0)
        goto out;
    pair *outs[3] = {&y, &dx, &dw};
    float *first[3];
    for (int run = 0; run < 2; run++) {
        if (C->conv_fwd(cb, co, x.c, wt.c, y.c, &err) < 0 ||
            C->conv_bwd_data(cb, co, dy.c, wt.c, dx.c, &err) < 0 ||
            C->conv_bwd_weight(cb, co, x.c, dy.c, dw.c, &err) < 0) {
            fail_op(name);
            goto out;
        }
        for (int i = 0; i < 3; i++) {
            float *h2 = xmalloc((size_t)outs[i]->n * sizeof(float));
            if (C->tensor_read(cb, outs[i]->c, h2, &err) < 0) {
                free(h2);
                fail_op(name);
                goto out;
            }
            if (run == 0) {
                first[i] = h2;
                continue;
            }
            static const char *const names[3] = {"y", "dx", "dw"};
            int same = memcmp(first[i], h2, (size_t)outs[i]->n * sizeof(float)) == 0;
            snprintf(what, sizeof what, "%s %s bits of 2 runs", name, names[i]);
            n_checks++;
            n_failed += !same;
            printf("%-38s %-26s %10s  %s\n", what, "-", same ? "equal" : "differ",
                   same ? "PASS" : "FAIL");
            free(first[i]);
            free(h2);
        }
    }
    if (R->conv_fwd(rb, ro, x.r, wt.r, y.r, &err) < 0 ||
        R->conv_bwd_data(rb, ro, dy.r, wt.r, dx.r, &err) < 0 ||
        R->conv_bwd_weight(rb, ro, x.r, dy.r, dw.r, &err) < 0) {
        fail_op(name);
        goto out;
    }
    snprintf(what, sizeof what, "%s y", name);
    cmp(what, &y);
    snprintf(what, sizeof what, "%s dx", name);
    cmp(what, &dx);
    snprintf(what, sizeof what, "%s dw", name);
    cmp(what, &dw);
    ok = 1;
out:
    /* the pairs live on this instance: freed before it closes (on failure they leak) */
    if (ok)
        pfree(&x), pfree(&wt), pfree(&y), pfree(&dy), pfree(&dx), pfree(&dw);
    R->plan_free(rb, ro);
    C->plan_free(cb, co);
    C->close(cb);
    cb = save;
}

/* Device input: images_batch of both backends from the same uint8 dataset and draws, bit for bit
 * (the per-element math is kmath.h's ptc_km_augment, which test_kmath holds to
 * ptc__augment_image); three batches in a row, the second larger (the staging grows) and the third
 * queued right behind the second (the pinned staging is reused while the stream may still run),
 * each compared after the next one is queued; then an index outside the dataset is refused. */
static void check_images(void)
{
    enum { COUNT = 300, PIX = 3 * 32 * 32 };
    const int sizes[3] = {64, 512, 512};
    uint8_t *images = xmalloc((size_t)COUNT * PIX);
    for (int64_t i = 0; i < (int64_t)COUNT * PIX; i++)
        images[i] = (uint8_t)(urand() * 256);
    /* ToTensor + Normalize with the tutorial's constants */
    const double mean[3] = PTC__CIFAR10_MEAN, sd[3] = PTC__CIFAR10_STD;
    ptc__normalizer nz;
    ptc__normalizer_init(&nz, mean, sd);
    const float(*lut)[256] = nz.lut;
    ptc__bimg *ri = NULL, *ci = NULL;
    ptc__bt *rx[3] = {NULL, NULL, NULL}, *cx[3] = {NULL, NULL, NULL};
    int32_t *idx[3];
    int8_t *top[3], *left[3];
    uint8_t *flip[3];
    float *a = xmalloc((size_t)512 * PIX * sizeof *a), *b = xmalloc((size_t)512 * PIX * sizeof *b);
    int ok = R->images_upload(rb, &ri, images, COUNT, &err) == 0 &&
             C->images_upload(cb, &ci, images, COUNT, &err) == 0;
    memset(images, 0, (size_t)COUNT * PIX); /* the backends hold their own copies */
    for (int k = 0; k < 3; k++) {
        int n = sizes[k];
        idx[k] = xmalloc((size_t)n * sizeof **idx);
        top[k] = xmalloc((size_t)n);
        left[k] = xmalloc((size_t)n);
        flip[k] = xmalloc((size_t)n);
        for (int i = 0; i < n; i++) {
            idx[k][i] = (int32_t)(urand() * COUNT);
            top[k][i] = (int8_t)(urand() * 9);
            left[k][i] = (int8_t)(urand() * 9);
            flip[k][i] = urand() < 0.5;
        }
        const int dims[4] = {n, 3, 32, 32};
        ok = ok && R->tensor_new(rb, &rx[k], PTC__ROLE_ACT, dims, &err) == 0 &&
             C->tensor_new(cb, &cx[k], PTC__ROLE_ACT, dims, &err) == 0 &&
             R->images_batch(rb, ri, idx[k], top[k], left[k], flip[k], n, &lut[0][0], rx[k],
                             &err) == 0 &&
             C->images_batch(cb, ci, idx[k], top[k], left[k], flip[k], n, &lut[0][0], cx[k],
                             &err) == 0;
        /* the host arrays may be reused as soon as the call returns */
        memset(idx[k], 0, (size_t)n * sizeof **idx);
        memset(flip[k], 1, (size_t)n);
    }
    if (!ok)
        fail_op("images_upload / images_batch");
    for (int k = 0; ok && k < 3; k++) {
        int n = sizes[k];
        char what[64], shape[64];
        snprintf(what, sizeof what, "images_batch %d (bit for bit)", k + 1);
        snprintf(shape, sizeof shape, "[%d][3][32][32]", n);
        if (R->tensor_read(rb, rx[k], a, &err) < 0 || C->tensor_read(cb, cx[k], b, &err) < 0) {
            fail_op(what);
            break;
        }
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < (int64_t)n * PIX; i++)
            if (memcmp(&a[i], &b[i], sizeof *a) != 0 && bad++ == 0)
                first = i;
        n_checks++;
        n_failed += bad != 0;
        printf("%-38s %-26s %10lld  %s", what, shape, (long long)bad, bad ? "FAIL" : "PASS");
        if (bad)
            printf(" (%lld elements differ; first %lld: cuda %.9g, ref %.9g)", (long long)bad,
                   (long long)first, (double)b[first], (double)a[first]);
        printf("\n");
    }
    if (ok) {
        int32_t out[1] = {COUNT};
        int8_t four[1] = {4};
        uint8_t no[1] = {0};
        ptc__bt *x1 = NULL;
        const int d1[4] = {1, 3, 32, 32};
        int refused =
            C->tensor_new(cb, &x1, PTC__ROLE_ACT, d1, &err) == 0 &&
            C->images_batch(cb, ci, out, four, four, no, 1, &lut[0][0], x1, &err) == PTC_EINVAL;
        n_checks++;
        n_failed += !refused;
        printf("%-38s %-26s %10s  %s\n", "images_batch index out of range", "[1][3][32][32]", "-",
               refused ? "PASS (refused)" : "FAIL (not refused)");
        C->tensor_free(cb, x1);
    }
    for (int k = 0; k < 3; k++) {
        R->tensor_free(rb, rx[k]);
        C->tensor_free(cb, cx[k]);
        free(idx[k]);
        free(top[k]);
        free(left[k]);
        free(flip[k]);
    }
    R->images_free(rb, ri);
    C->images_free(cb, ci);
    free(a);
    free(b);
    free(images);
}

/* ---- bf16 dump ------------------------------------------------------------------------------- */

static int write_f32(const char *dir, const char *file, const float *v, int64_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cuda_layers: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* Little-endian float32: this program runs on x86-64 and aarch64 hosts, both little-endian. */
    size_t w = fwrite(v, sizeof(float), (size_t)n, f);
    if (fclose(f) != 0 || w != (size_t)n) {
        fprintf(stderr, "cuda_layers: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

/* A tensor of the bf16 instance, its plain data on the host. */
typedef struct dt {
    const char *name;
    ptc__bt *t;
    int dims[4];
    int nd; /* the shape written to the manifest: 4 (act, conv_w), 2 (matrices), 1 (bias) */
    int64_t n;
    float *h;
} dt;

static int dnew(dt *d, const char *name, ptc__role role, int n, int c, int h, int w, int nd,
                enum fill f)
{
    d->name = name;
    d->dims[0] = n, d->dims[1] = c, d->dims[2] = h, d->dims[3] = w;
    d->nd = nd;
    d->n = (int64_t)n * c * h * w;
    d->h = xmalloc((size_t)d->n * sizeof(float));
    fill_host(d->h, d->n, f);
    if (C->tensor_new(cb, &d->t, role, d->dims, &err) < 0 ||
        C->tensor_write(cb, d->t, d->h, &err) < 0)
        return -1;
    return 0;
}

/* Reads d back, writes DIR/<layer>.<name>.f32 and its manifest entry. */
static int dsave(FILE *man, const char *dir, const char *layer, dt *d, int first)
{
    char file[256];
    if (C->tensor_read(cb, d->t, d->h, &err) < 0)
        return -1;
    snprintf(file, sizeof file, "%s.%s.f32", layer, d->name);
    if (write_f32(dir, file, d->h, d->n) < 0)
        return -1;
    fprintf(man, "%s\n        \"%s\": {\"file\": \"%s\", \"shape\": [", first ? "" : ",", d->name,
            file);
    if (d->nd == 1)
        fprintf(man, "%d", d->dims[1]);
    else if (d->nd == 2)
        fprintf(man, "%d, %d", d->dims[0], d->dims[1]);
    else
        fprintf(man, "%d, %d, %d, %d", d->dims[0], d->dims[1], d->dims[2], d->dims[3]);
    fprintf(man, "]}");
    C->tensor_free(cb, d->t);
    free(d->h);
    return 0;
}

static int bf16_dump(const char *dir)
{
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "cuda_layers: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *man = fopen(path, "w");
    if (!man) {
        fprintf(stderr, "cuda_layers: cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(man, "{\"format\": \"ptc-bf16-dump-1\", \"layers\": [\n");

    /* conv 3x3 stride 1 pad 1 at layer1's shape (batch 4) */
    const int n = 4, c = 64, h = 56, w = 56, k = 64;
    ptc__conv_shape s = {n, c, h, w, k, 3, 3, 1, 1, h, w};
    ptc__op *op = NULL;
    dt x, wt, dy, y, dx, dw;
    if (C->conv_plan(cb, &op, &s, &err) < 0 || dnew(&x, "x", PTC__ROLE_ACT, n, c, h, w, 4, RAND) ||
        dnew(&wt, "w", PTC__ROLE_CONV_W, k, c, 3, 3, 4, RAND) ||
        dnew(&dy, "dy", PTC__ROLE_ACT, n, k, h, w, 4, RAND) ||
        dnew(&y, "y", PTC__ROLE_ACT, n, k, h, w, 4, ZERO) ||
        dnew(&dx, "dx", PTC__ROLE_ACT, n, c, h, w, 4, ZERO) ||
        dnew(&dw, "dw", PTC__ROLE_CONV_W, k, c, 3, 3, 4, ZERO) ||
        C->conv_fwd(cb, op, x.t, wt.t, y.t, &err) < 0 ||
        C->conv_bwd_data(cb, op, dy.t, wt.t, dx.t, &err) < 0 ||
        C->conv_bwd_weight(cb, op, x.t, dy.t, dw.t, &err) < 0)
        goto fail;
    fprintf(man, "  {\"name\": \"conv3x3\", \"kind\": \"conv\", \"stride\": 1, \"pad\": 1, "
                 "\"tensors\": {");
    if (dsave(man, dir, "conv3x3", &x, 1) || dsave(man, dir, "conv3x3", &wt, 0) ||
        dsave(man, dir, "conv3x3", &dy, 0) || dsave(man, dir, "conv3x3", &y, 0) ||
        dsave(man, dir, "conv3x3", &dx, 0) || dsave(man, dir, "conv3x3", &dw, 0))
        goto fail;
    fprintf(man, "}},\n");
    C->plan_free(cb, op);

    /* the fc layer: 512 -> 1000 at batch 32 */
    const int N = 32, K = 512, M = 1000;
    dt lx, lw, lb, ldy, ly, ldx, ldw, ldb;
    if (dnew(&lx, "x", PTC__ROLE_MAT, N, K, 1, 1, 2, RAND) ||
        dnew(&lw, "w", PTC__ROLE_MAT, M, K, 1, 1, 2, RAND) ||
        dnew(&lb, "b", PTC__ROLE_VEC, 1, M, 1, 1, 1, RAND) ||
        dnew(&ldy, "dy", PTC__ROLE_MAT, N, M, 1, 1, 2, RAND) ||
        dnew(&ly, "y", PTC__ROLE_MAT, N, M, 1, 1, 2, ZERO) ||
        dnew(&ldx, "dx", PTC__ROLE_MAT, N, K, 1, 1, 2, ZERO) ||
        dnew(&ldw, "dw", PTC__ROLE_MAT, M, K, 1, 1, 2, ZERO) ||
        dnew(&ldb, "db", PTC__ROLE_VEC, 1, M, 1, 1, 1, ZERO) ||
        C->linear_fwd(cb, lx.t, lw.t, lb.t, ly.t, &err) < 0 ||
        C->linear_bwd(cb, lx.t, lw.t, ldy.t, ldx.t, ldw.t, ldb.t, &err) < 0)
        goto fail;
    fprintf(man, "  {\"name\": \"linear\", \"kind\": \"linear\", \"tensors\": {");
    if (dsave(man, dir, "linear", &lx, 1) || dsave(man, dir, "linear", &lw, 0) ||
        dsave(man, dir, "linear", &lb, 0) || dsave(man, dir, "linear", &ldy, 0) ||
        dsave(man, dir, "linear", &ly, 0) || dsave(man, dir, "linear", &ldx, 0) ||
        dsave(man, dir, "linear", &ldw, 0) || dsave(man, dir, "linear", &ldb, 0))
        goto fail;
    fprintf(man, "}}\n]}\n");
    if (fclose(man) != 0) {
        fprintf(stderr, "cuda_layers: cannot write %s\n", path);
        return 1;
    }
    printf("cuda_layers: bf16 dump of conv3x3 and linear written to %s\n", dir);
    return 0;
fail:
    if (err.code)
        fprintf(stderr, "cuda_layers: bf16 dump: %s\n", err.message);
    fclose(man);
    return 1;
}

int main(int argc, char **argv)
{
    const char *dump = NULL;
    if (argc == 3 && strcmp(argv[1], "--bf16-dump") == 0) {
        dump = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: cuda_layers [--bf16-dump DIR]\n");
        return 2;
    }
    if (ptc__cuda_probe(&err) < 0) {
        printf("cuda_layers: no NVIDIA GPU found: %s (skipped)\n", err.message);
        return 77;
    }
    ptc__be_params cp = {
        .dtype = PTC__BE_F32, .device = 0, .precision = dump ? PTC__PREC_BF16 : PTC__PREC_F32};
    if (C->open(&cb, &cp, &err) < 0) {
        fprintf(stderr, "cuda_layers: cannot open the cuda backend: %s\n", err.message);
        return 1;
    }
    if (dump) {
        int rc = bf16_dump(dump);
        C->close(cb);
        return rc;
    }
    ptc__be_params rp = {.dtype = PTC__BE_F32};
    if (R->open(&rb, &rp, &err) < 0) {
        fprintf(stderr, "cuda_layers: cannot open the ref backend: %s\n", err.message);
        return 1;
    }
    printf("%-38s %-26s %10s  %s\n", "op", "shape", "error", "result (tolerance 1e-4, TF32 off)");
    check_errors();
    check_elementwise();
    check_images();
    check_raw();
    check_conv("conv 7x7/2 stem", 2, 3, 224, 224, 64, 7, 2, 3);
    check_conv("conv 3x3/1 64", 2, 64, 56, 56, 64, 3, 1, 1);
    check_conv("conv 3x3/2 64->128", 2, 64, 56, 56, 128, 3, 2, 1);
    check_conv("conv 1x1/2 downsample", 2, 64, 56, 56, 128, 1, 2, 0);
    check_conv("conv 3x3/1 512", 2, 512, 7, 7, 512, 3, 1, 1);
    check_deterministic("det conv 7x7/2 stem", 2, 3, 224, 224, 64, 7, 2, 3);
    check_deterministic("det conv 3x3/1 64", 2, 64, 56, 56, 64, 3, 1, 1);
    check_bn("bn relu 64@112", 2, 64, 112, 112, 1);
    check_bn("bn 128@28", 2, 128, 28, 28, 0);
    check_bn("bn relu 512@7", 2, 512, 7, 7, 1);
    check_maxpool("maxpool 3x3/2", RAND);
    check_maxpool("maxpool 3x3/2 ties", TIES);
    check_avgpool();
    check_linear(8, 512, 1000, "linear");
    ptc__sgd h = {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .first_step = 1};
    check_sgd("sgd mom wd", PTC__ROLE_CONV_W, 64, 64, 3, h);
    h.nesterov = 1;
    check_sgd("sgd nesterov", PTC__ROLE_CONV_W, 64, 64, 3, h);
    h.nesterov = 0, h.dampening = 0.1;
    check_sgd("sgd dampening", PTC__ROLE_VEC, 1, 512, 1, h);
    ptc__sgd plain = {.lr = 0.05, .weight_decay = 1e-4};
    check_sgd("sgd no momentum", PTC__ROLE_CONV_W, 128, 64, 3, plain);
    ptc__sgd hm = {.lr = 0.1,
                   .momentum = 0.9,
                   .dampening = 0.1,
                   .weight_decay = 5e-4,
                   .nesterov = 1,
                   .first_step = 1};
    check_sgd_multi("sgd_multi nesterov damp wd", hm);
    check_sgd_multi("sgd_multi no momentum", plain);
    check_xent(8, 10, RAND);
    check_xent(512, 10, RAND);
    check_xent(300, 10, TIES);
    check_xent(64, 1000, RAND);
    check_xent_queue();
    C->close(cb);
    /* bf16 precision (autocast's rules) against ref's float32, loosely: the path runs and its
     * results are the layer's */
    cp.precision = PTC__PREC_BF16;
    if (C->open(&cb, &cp, &err) < 0) {
        fail_op("open bf16");
    } else {
        tol = TOL_BF16;
        check_conv("bf16 conv 3x3/1 64", 2, 64, 56, 56, 64, 3, 1, 1);
        check_conv("bf16 conv 7x7/2 stem", 2, 3, 224, 224, 64, 7, 2, 3);
        check_linear(8, 512, 1000, "bf16 linear");
        C->close(cb);
    }
    R->close(rb);
    printf("cuda_layers: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
