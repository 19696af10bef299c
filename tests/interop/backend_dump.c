/*
 * backend_dump.c - runs one layer of a backend (ref unless told otherwise) forward and backward
 * on inputs read from files, for tests/interop/check_backend_ref.py to compare with torch.
 *
 *   backend_dump [--backend NAME] f32|f64 DIR OP ARGS...
 *
 * DIR holds every input as a raw array of the element type (host byte order, plain layout:
 * row-major [n][c][h][w], [k][c][r][s] for convolution weights), one file per tensor, named as
 * below; the outputs are written to DIR the same way.
 *
 *   conv N C H W K R S STRIDE PAD      in: x w dy                    out: y dx dw
 *   bn N C H W EPS MOMENTUM RELU       in: x gamma beta rmean rvar dy
 *        out: y save_mean save_invstd rmean_out rvar_out dx dgamma dbeta
 *             y_eval (eval mode with the updated running statistics, same relu)
 *   maxpool N C H W R STRIDE PAD       in: x dy                      out: y dx
 *   avgpool N C H W                    in: x dy ([N][C])             out: y dx
 *   linear N K M                       in: x w b dy                  out: y dx dw db
 *   add N RELU                         in: a b dy                    out: y, and with RELU
 *                                                                     dx = relu_bwd(y, dy)
 *   sgd N STEPS LR MOMENTUM DAMPENING WEIGHT_DECAY NESTEROV
 *        in: p g (STEPS gradients of N values, one after the other)  out: p_out buf_out
 *        (buf_out only when MOMENTUM != 0)
 *
 * Exit status 0, 1 on a backend or file error (with the message), 2 on a usage error.
 */
#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dump {
    const ptc__backend_ops *B;
    ptc__be *be;
    size_t esize;
    const char *dir;
    ptc_error err;
    ptc__bt *tensors[32];
    int ntensors;
    ptc__op *plan;
} dump;

static void die(dump *d, const char *what)
{
    fprintf(stderr, "backend_dump: %s: %s\n", what, d->err.message);
    exit(1);
}

static void path_of(const dump *d, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", d->dir, name);
}

static ptc__bt *tensor(dump *d, ptc__role role, int n, int c, int h, int w)
{
    ptc__bt *t = NULL;
    if (d->ntensors == (int)(sizeof d->tensors / sizeof d->tensors[0])) {
        fprintf(stderr, "backend_dump: too many tensors\n");
        exit(1);
    }
    if (d->B->tensor_new(d->be, &t, role, (int[]){n, c, h, w}, &d->err) < 0)
        die(d, "tensor_new");
    d->tensors[d->ntensors++] = t;
    return t;
}

/* Reads count elements from DIR/name (the file must hold exactly that many). */
static void *read_file(dump *d, const char *name, size_t count)
{
    char path[4096];
    path_of(d, name, path, sizeof path);
    FILE *f = fopen(path, "rb");
    void *buf = malloc(count * d->esize + 1);
    if (!f || !buf || fread(buf, d->esize, count, f) != count || fgetc(f) != EOF) {
        fprintf(stderr, "backend_dump: %s: cannot read %zu elements of %zu bytes\n", path, count,
                d->esize);
        exit(1);
    }
    fclose(f);
    return buf;
}

static ptc__bt *input(dump *d, const char *name, ptc__role role, int n, int c, int h, int w)
{
    ptc__bt *t = tensor(d, role, n, c, h, w);
    void *buf = read_file(d, name, (size_t)n * c * h * w);
    if (d->B->tensor_write(d->be, t, buf, &d->err) < 0)
        die(d, name);
    free(buf);
    return t;
}

static void output(dump *d, const char *name, const ptc__bt *t, size_t count)
{
    char path[4096];
    void *buf = malloc(count * d->esize);
    if (!buf || d->B->tensor_read(d->be, t, buf, &d->err) < 0)
        die(d, name);
    path_of(d, name, path, sizeof path);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, d->esize, count, f) != count || fclose(f) != 0) {
        fprintf(stderr, "backend_dump: cannot write %s\n", path);
        exit(1);
    }
    free(buf);
}

#define RUN(d, call, what)                                                                         \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            die((d), (what));                                                                      \
    } while (0)

static int run_conv(dump *d, const int *a)
{
    int n = a[0], c = a[1], h = a[2], w = a[3], k = a[4], r = a[5], s = a[6], st = a[7], p = a[8];
    ptc__conv_shape cs = {
        n, c, h, w, k, r, s, st, p, ptc__conv_out(h, r, st, p), ptc__conv_out(w, s, st, p)};
    RUN(d, d->B->conv_plan(d->be, &d->plan, &cs, &d->err), "conv_plan");
    ptc__bt *x = input(d, "x", PTC__ROLE_ACT, n, c, h, w);
    ptc__bt *wt = input(d, "w", PTC__ROLE_CONV_W, k, c, r, s);
    ptc__bt *dy = input(d, "dy", PTC__ROLE_ACT, n, k, cs.oh, cs.ow);
    ptc__bt *y = tensor(d, PTC__ROLE_ACT, n, k, cs.oh, cs.ow);
    ptc__bt *dx = tensor(d, PTC__ROLE_ACT, n, c, h, w),
            *dw = tensor(d, PTC__ROLE_CONV_W, k, c, r, s);
    RUN(d, d->B->conv_fwd(d->be, d->plan, x, wt, y, &d->err), "conv_fwd");
    RUN(d, d->B->conv_bwd_data(d->be, d->plan, dy, wt, dx, &d->err), "conv_bwd_data");
    RUN(d, d->B->conv_bwd_weight(d->be, d->plan, x, dy, dw, &d->err), "conv_bwd_weight");
    output(d, "y", y, (size_t)n * k * cs.oh * cs.ow);
    output(d, "dx", dx, (size_t)n * c * h * w);
    output(d, "dw", dw, (size_t)k * c * r * s);
    return 0;
}

static int run_bn(dump *d, const int *a, double eps, double momentum, int relu)
{
    int n = a[0], c = a[1], h = a[2], w = a[3];
    size_t nx = (size_t)n * c * h * w;
    RUN(d, d->B->bn_plan(d->be, &d->plan, a, eps, &d->err), "bn_plan");
    ptc__bt *x = input(d, "x", PTC__ROLE_ACT, n, c, h, w);
    ptc__bt *g = input(d, "gamma", PTC__ROLE_VEC, 1, c, 1, 1);
    ptc__bt *b = input(d, "beta", PTC__ROLE_VEC, 1, c, 1, 1);
    ptc__bt *rm = input(d, "rmean", PTC__ROLE_VEC, 1, c, 1, 1);
    ptc__bt *rv = input(d, "rvar", PTC__ROLE_VEC, 1, c, 1, 1);
    ptc__bt *dy = input(d, "dy", PTC__ROLE_ACT, n, c, h, w);
    ptc__bt *y = tensor(d, PTC__ROLE_ACT, n, c, h, w), *dx = tensor(d, PTC__ROLE_ACT, n, c, h, w);
    ptc__bt *sm = tensor(d, PTC__ROLE_VEC, 1, c, 1, 1), *si = tensor(d, PTC__ROLE_VEC, 1, c, 1, 1);
    ptc__bt *dg = tensor(d, PTC__ROLE_VEC, 1, c, 1, 1), *db = tensor(d, PTC__ROLE_VEC, 1, c, 1, 1);
    ptc__bt *ye = tensor(d, PTC__ROLE_ACT, n, c, h, w);
    RUN(d, d->B->bn_fwd_train(d->be, d->plan, x, g, b, y, sm, si, rm, rv, momentum, relu, &d->err),
        "bn_fwd_train");
    RUN(d, d->B->bn_bwd(d->be, d->plan, x, relu ? y : NULL, dy, g, sm, si, dx, dg, db, &d->err),
        "bn_bwd");
    RUN(d, d->B->bn_fwd_eval(d->be, d->plan, x, g, b, rm, rv, ye, relu, &d->err), "bn_fwd_eval");
    output(d, "y", y, nx);
    output(d, "save_mean", sm, (size_t)c);
    output(d, "save_invstd", si, (size_t)c);
    output(d, "rmean_out", rm, (size_t)c);
    output(d, "rvar_out", rv, (size_t)c);
    output(d, "dx", dx, nx);
    output(d, "dgamma", dg, (size_t)c);
    output(d, "dbeta", db, (size_t)c);
    output(d, "y_eval", ye, nx);
    return 0;
}

static int run_maxpool(dump *d, const int *a)
{
    int n = a[0], c = a[1], h = a[2], w = a[3], r = a[4], st = a[5], p = a[6];
    ptc__pool_shape ps = {
        n, c, h, w, r, r, st, p, ptc__conv_out(h, r, st, p), ptc__conv_out(w, r, st, p)};
    RUN(d, d->B->maxpool_plan(d->be, &d->plan, &ps, &d->err), "maxpool_plan");
    ptc__bt *x = input(d, "x", PTC__ROLE_ACT, n, c, h, w);
    ptc__bt *dy = input(d, "dy", PTC__ROLE_ACT, n, c, ps.oh, ps.ow);
    ptc__bt *y = tensor(d, PTC__ROLE_ACT, n, c, ps.oh, ps.ow),
            *dx = tensor(d, PTC__ROLE_ACT, n, c, h, w);
    RUN(d, d->B->maxpool_fwd(d->be, d->plan, x, y, &d->err), "maxpool_fwd");
    RUN(d, d->B->maxpool_bwd(d->be, d->plan, x, y, dy, dx, &d->err), "maxpool_bwd");
    output(d, "y", y, (size_t)n * c * ps.oh * ps.ow);
    output(d, "dx", dx, (size_t)n * c * h * w);
    return 0;
}

static int run_avgpool(dump *d, const int *a)
{
    int n = a[0], c = a[1], h = a[2], w = a[3];
    ptc__bt *x = input(d, "x", PTC__ROLE_ACT, n, c, h, w);
    ptc__bt *dy = input(d, "dy", PTC__ROLE_MAT, n, c, 1, 1);
    ptc__bt *y = tensor(d, PTC__ROLE_MAT, n, c, 1, 1), *dx = tensor(d, PTC__ROLE_ACT, n, c, h, w);
    RUN(d, d->B->avgpool_fwd(d->be, x, y, &d->err), "avgpool_fwd");
    RUN(d, d->B->avgpool_bwd(d->be, dy, dx, &d->err), "avgpool_bwd");
    output(d, "y", y, (size_t)n * c);
    output(d, "dx", dx, (size_t)n * c * h * w);
    return 0;
}

static int run_linear(dump *d, const int *a)
{
    int n = a[0], k = a[1], m = a[2];
    ptc__bt *x = input(d, "x", PTC__ROLE_MAT, n, k, 1, 1);
    ptc__bt *w = input(d, "w", PTC__ROLE_MAT, m, k, 1, 1);
    ptc__bt *b = input(d, "b", PTC__ROLE_VEC, 1, m, 1, 1);
    ptc__bt *dy = input(d, "dy", PTC__ROLE_MAT, n, m, 1, 1);
    ptc__bt *y = tensor(d, PTC__ROLE_MAT, n, m, 1, 1), *dx = tensor(d, PTC__ROLE_MAT, n, k, 1, 1);
    ptc__bt *dw = tensor(d, PTC__ROLE_MAT, m, k, 1, 1), *db = tensor(d, PTC__ROLE_VEC, 1, m, 1, 1);
    RUN(d, d->B->linear_fwd(d->be, x, w, b, y, &d->err), "linear_fwd");
    RUN(d, d->B->linear_bwd(d->be, x, w, dy, dx, dw, db, &d->err), "linear_bwd");
    output(d, "y", y, (size_t)n * m);
    output(d, "dx", dx, (size_t)n * k);
    output(d, "dw", dw, (size_t)m * k);
    output(d, "db", db, (size_t)m);
    return 0;
}

static int run_add(dump *d, int n, int relu)
{
    ptc__bt *a = input(d, "a", PTC__ROLE_ACT, 1, n, 1, 1);
    ptc__bt *b = input(d, "b", PTC__ROLE_ACT, 1, n, 1, 1);
    ptc__bt *dy = input(d, "dy", PTC__ROLE_ACT, 1, n, 1, 1);
    ptc__bt *y = tensor(d, PTC__ROLE_ACT, 1, n, 1, 1), *dx = tensor(d, PTC__ROLE_ACT, 1, n, 1, 1);
    RUN(d, d->B->add(d->be, a, b, y, relu, &d->err), "add");
    output(d, "y", y, (size_t)n);
    if (relu) {
        RUN(d, d->B->relu_bwd(d->be, y, dy, dx, &d->err), "relu_bwd");
        output(d, "dx", dx, (size_t)n);
    }
    return 0;
}

static int run_sgd(dump *d, int n, int steps, const ptc__sgd *hp)
{
    ptc__sgd h = *hp;
    ptc__bt *p = input(d, "p", PTC__ROLE_VEC, 1, n, 1, 1);
    ptc__bt *g = tensor(d, PTC__ROLE_VEC, 1, n, 1, 1), *buf = tensor(d, PTC__ROLE_VEC, 1, n, 1, 1);
    char *gs = read_file(d, "g", (size_t)n * steps);
    for (int s = 0; s < steps; s++) {
        h.first_step = s == 0;
        RUN(d, d->B->tensor_write(d->be, g, gs + (size_t)s * n * d->esize, &d->err), "g");
        RUN(d, d->B->sgd_step(d->be, p, g, buf, &h, &d->err), "sgd_step");
    }
    free(gs);
    output(d, "p_out", p, (size_t)n);
    if (h.momentum != 0)
        output(d, "buf_out", buf, (size_t)n);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: backend_dump [--backend NAME] f32|f64 DIR OP ARGS...\n"
                    "  conv N C H W K R S STRIDE PAD | bn N C H W EPS MOMENTUM RELU |\n"
                    "  maxpool N C H W R STRIDE PAD | avgpool N C H W | linear N K M |\n"
                    "  add N RELU | sgd N STEPS LR MOMENTUM DAMPENING WEIGHT_DECAY NESTEROV\n");
    return 2;
}

/* Parses argc integers from argv into out (each at least 0). */
static int ints(int argc, char **argv, int *out)
{
    for (int i = 0; i < argc; i++) {
        char *end;
        long v = strtol(argv[i], &end, 10);
        if (*end || end == argv[i] || v < 0 || v > 1 << 30)
            return -1;
        out[i] = (int)v;
    }
    return 0;
}

static int dbl(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return *end || end == s ? -1 : 0;
}

int main(int argc, char **argv)
{
    dump d = {0};
    const char *backend = "ref";
    int i = 1;
    if (argc > 2 && strcmp(argv[1], "--backend") == 0) {
        backend = argv[2];
        i = 3;
    }
    if (argc - i < 3)
        return usage();
    d.B = ptc__backend_find(backend);
    if (!d.B) {
        fprintf(stderr, "backend_dump: no backend \"%s\" in this build\n", backend);
        return 1;
    }
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 0};
    if (strcmp(argv[i], "f64") == 0)
        bp.dtype = PTC__BE_F64;
    else if (strcmp(argv[i], "f32") != 0)
        return usage();
    d.esize = (size_t)bp.dtype;
    d.dir = argv[i + 1];
    const char *op = argv[i + 2];
    char **av = argv + i + 3;
    int ac = argc - i - 3, a[9], rc = 2;
    double e1, e2;
    if (d.B->open(&d.be, &bp, &d.err) < 0)
        die(&d, "open");
    if (strcmp(op, "conv") == 0 && ac == 9 && ints(9, av, a) == 0) {
        rc = run_conv(&d, a);
    } else if (strcmp(op, "bn") == 0 && ac == 7 && ints(4, av, a) == 0 && dbl(av[4], &e1) == 0 &&
               dbl(av[5], &e2) == 0 && ints(1, av + 6, a + 4) == 0) {
        rc = run_bn(&d, a, e1, e2, a[4]);
    } else if (strcmp(op, "maxpool") == 0 && ac == 7 && ints(7, av, a) == 0) {
        rc = run_maxpool(&d, a);
    } else if (strcmp(op, "avgpool") == 0 && ac == 4 && ints(4, av, a) == 0) {
        rc = run_avgpool(&d, a);
    } else if (strcmp(op, "linear") == 0 && ac == 3 && ints(3, av, a) == 0) {
        rc = run_linear(&d, a);
    } else if (strcmp(op, "add") == 0 && ac == 2 && ints(2, av, a) == 0) {
        rc = run_add(&d, a[0], a[1]);
    } else if (strcmp(op, "sgd") == 0 && ac == 7 && ints(2, av, a) == 0 &&
               ints(1, av + 6, a + 2) == 0) {
        ptc__sgd h = {0, 0, 0, 0, a[2], 1};
        if (dbl(av[2], &h.lr) == 0 && dbl(av[3], &h.momentum) == 0 &&
            dbl(av[4], &h.dampening) == 0 && dbl(av[5], &h.weight_decay) == 0)
            rc = run_sgd(&d, a[0], a[1], &h);
    }
    for (int t = 0; t < d.ntensors; t++)
        d.B->tensor_free(d.be, d.tensors[t]);
    d.B->plan_free(d.be, d.plan);
    d.B->close(d.be);
    return rc == 2 ? usage() : rc;
}
