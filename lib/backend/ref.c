/*
 * ref.c - the reference backend: plain C, float32 and float64, the oracle every other backend is
 * tested against and the one gradient checks run on.
 *
 * Layout: every role keeps the plain layout (row-major [n][c][h][w], [k][c][r][s] for convolution
 * weights), so tensor_write and tensor_read are copies and a tensor's data is what torch would
 * hold for the same logical shape.
 *
 * This file checks every argument (backend instance, plan kind, role and shape of every tensor)
 * and turns a mismatch into PTC_EINVAL with a message naming the op, the argument and both
 * shapes; the arithmetic is in ref_kernels.h, instantiated here once for float and once for
 * double. Precision and determinism are described there: reductions accumulate in double,
 * elementwise updates (add, accumulate, SGD) are done in the element type in torch's order, and
 * the results do not depend on the number of threads.
 *
 * Threads: when compiled with OpenMP (-fopenmp), the kernels split images, channels or planes
 * between be_params.threads threads (0: OpenMP's default); otherwise they run on the calling
 * thread. Scratch memory is allocated per call through ptc__malloc, outside parallel regions.
 */
#include "backend/backend.h"
#include "data/data.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

struct ptc__be {
    ptc__dtype_be dtype;
    int nt; /* threads the kernels may use (1 without OpenMP) */
    /* the result slot of the latest xent (computed at once: ref has nothing to wait for) */
    int xent_done;
    double xent_loss;
    int64_t xent_correct;
    /* conv_fwd's scratch, kept and grown: a forward of one image would otherwise map and fault
     * in fresh pages for each of its twenty convolutions (the instance is one thread's) */
    double *conv_scratch;
    int64_t conv_scratch_n;
};

struct ptc__bt {
    ptc__be *be; /* the instance that made it */
    ptc__role role;
    int dims[4];   /* [n][c][h][w] */
    int64_t numel; /* the product of dims */
    void *data;    /* numel elements of be->dtype, plain layout */
    void *own;     /* the storage it was made with: data, or tensor_bind_raw moved data away */
};

typedef enum op_kind { OP_CONV = 1, OP_BN, OP_MAXPOOL } op_kind;

struct ptc__op {
    ptc__be *be;
    op_kind kind;
    ptc__conv_shape conv; /* OP_CONV */
    ptc__pool_shape pool; /* OP_MAXPOOL */
    int dims[4];          /* OP_BN: the input [n][c][h][w] */
    double eps;           /* OP_BN */
};

/* PAR_FOR(nt) splits the iterations of the loop that follows between nt threads; SIMD() marks an
 * axpy loop (no loop-carried dependency, so vector code computes the same bits). */
#ifdef _OPENMP
#define PTC_PRAGMA(x) _Pragma(#x)
#define PAR_FOR(nt) PTC_PRAGMA(omp parallel for num_threads(nt) schedule(static))
#define SIMD()      PTC_PRAGMA(omp simd)
#define THREAD_ID() omp_get_thread_num()
#else
#define PAR_FOR(nt) (void)(nt);
#define SIMD()
#define THREAD_ID() 0
#endif

#define REAL     float
#define FN(name) name##_f32
#define FMA      fmaf
#include "backend/ref_kernels.h"
#undef REAL
#undef FN
#undef FMA

#define REAL     double
#define FN(name) name##_f64
#define FMA      fma
#include "backend/ref_kernels.h"
#undef REAL
#undef FN
#undef FMA

/* Calls the float or the double instance of a kernel (all kernels return void). */
#define KERNEL(be, fn, ...)                                                                        \
    ((be)->dtype == PTC__BE_F32 ? fn##_f32(__VA_ARGS__) : fn##_f64(__VA_ARGS__))

static int min_nt(const ptc__be *be, int64_t work)
{
    return work < be->nt ? (int)work : be->nt;
}

/* ---- argument checks ------------------------------------------------------------------------- */

/* t must be a tensor of be with the given role and dims [n][c][h][w] (shape.c's rules). */
static int check_t(const ptc__be *be, ptc_error *err, const char *op, const char *arg,
                   const ptc__bt *t, ptc__role role, int64_t n, int64_t c, int64_t h, int64_t w)
{
    ptc__be_seen seen = {.have_be = be != NULL, .null = !t};
    if (t) {
        seen.foreign = t->be != be;
        seen.role = t->role;
        memcpy(seen.dims, t->dims, sizeof seen.dims);
    }
    return ptc__be_check_tensor(err, op, arg, &seen, role, n, c, h, w);
}

static int check_like(const ptc__be *be, ptc_error *err, const char *op, const char *arg,
                      const ptc__bt *t, const ptc__bt *like)
{
    return check_t(be, err, op, arg, t, like->role, like->dims[0], like->dims[1], like->dims[2],
                   like->dims[3]);
}

static int check_vec(const ptc__be *be, ptc_error *err, const char *op, const char *arg,
                     const ptc__bt *t, int64_t c)
{
    return check_t(be, err, op, arg, t, PTC__ROLE_VEC, 1, c, 1, 1);
}

static int check_plan(const ptc__be *be, ptc_error *err, const char *op, const ptc__op *plan,
                      op_kind kind)
{
    return ptc__be_check_plan(err, op, be && plan, plan && plan->be != be,
                              plan && plan->kind != kind);
}

/* count += a * b, false on overflow. */
static bool madd_ok(int64_t *count, int64_t a, int64_t b)
{
    int64_t ab;
    return ptc__mul_i64_ok(a, b, &ab) && ptc__add_i64_ok(*count, ab, count);
}

/* Scratch of count doubles (ok false: the count overflowed), or PTC_ENOMEM. */
static int scratch_new(ptc_error *err, const char *op, bool ok, int64_t count, double **out)
{
    int64_t bytes;
    *out = NULL;
    if (!ok || !ptc__mul_i64_ok(count, (int64_t)sizeof(double), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return ptc__err(err, PTC_ENOMEM, "", -1, "%s: scratch size overflows", op);
    *out = ptc__malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!*out)
        return ptc__err(err, PTC_ENOMEM, "", -1, "%s: cannot allocate %lld bytes of scratch", op,
                        (long long)bytes);
    return 0;
}

/* Images per block of the convolution kernels: enough for about 256 output pixels a block (long
 * inner loops), few enough to keep the unfolded block small. Depends on the shape only, so the
 * order of every sum is fixed. */
static int64_t conv_block(const ptc__conv_shape *s)
{
    int64_t P = (int64_t)s->oh * s->ow, nb = (256 + P - 1) / P;
    return nb < s->n ? nb : s->n;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* ---- instance -------------------------------------------------------------------------------- */

static int ref_open(ptc__be **out, const ptc__be_params *p, ptc_error *err)
{
    ptc__be_params def = {.dtype = PTC__BE_F32, .threads = 0};
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ref open: out is NULL");
    *out = NULL;
    if (!p)
        p = &def;
    if (p->dtype != PTC__BE_F32 && p->dtype != PTC__BE_F64)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ref open: dtype %d is neither float32 nor float64", (int)p->dtype);
    if (p->threads < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "ref open: threads %d is negative", p->threads);
    /* The oracle computes in its element type only: bf16 would silently be float32. */
    if (p->precision != PTC__PREC_F32)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "ref backend: --precision bf16 is not available here (the reference "
                        "backend computes in float32 or float64 only); use the dnnl backend "
                        "(a CPU with AVX512_BF16) or cuda");
    ptc__be *be = ptc__calloc(1, sizeof *be);
    if (!be)
        return ptc__err(err, PTC_ENOMEM, "", -1, "ref open: out of memory");
    be->dtype = p->dtype;
#ifdef _OPENMP
    be->nt = p->threads > 0 ? p->threads : omp_get_max_threads();
#else
    be->nt = 1;
#endif
    if (be->nt < 1)
        be->nt = 1;
    *out = be;
    return 0;
}

static void ref_close(ptc__be *be)
{
    if (be)
        ptc__free(be->conv_scratch);
    ptc__free(be);
}

/* ---- tensors --------------------------------------------------------------------------------- */

static int ref_tensor_new(ptc__be *be, ptc__bt **out, ptc__role role, const int dims[4],
                          ptc_error *err)
{
    if (!be || !out || !dims)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_new: NULL argument");
    *out = NULL;
    if (role != PTC__ROLE_ACT && role != PTC__ROLE_CONV_W && role != PTC__ROLE_VEC &&
        role != PTC__ROLE_MAT)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_new: unknown role %d", (int)role);
    int64_t numel = 1, nbytes;
    for (int i = 0; i < 4; i++) {
        if (dims[i] < 1 || !ptc__mul_i64_ok(numel, dims[i], &numel))
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "tensor_new: %s [%d][%d][%d][%d] is not a shape", ptc__role_name(role),
                            dims[0], dims[1], dims[2], dims[3]);
    }
    if ((role == PTC__ROLE_VEC && (dims[0] != 1 || dims[2] != 1 || dims[3] != 1)) ||
        (role == PTC__ROLE_MAT && (dims[2] != 1 || dims[3] != 1)))
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "tensor_new: %s [%d][%d][%d][%d]: vectors are [1][c][1][1], matrices "
                        "[n][c][1][1]",
                        ptc__role_name(role), dims[0], dims[1], dims[2], dims[3]);
    if (!ptc__mul_i64_ok(numel, (int64_t)be->dtype, &nbytes) || (uint64_t)nbytes > SIZE_MAX)
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensor_new: %s [%d][%d][%d][%d] is too large",
                        ptc__role_name(role), dims[0], dims[1], dims[2], dims[3]);
    ptc__bt *t = ptc__calloc(1, sizeof *t);
    void *data = ptc__calloc((size_t)numel, (size_t)be->dtype);
    if (!t || !data) {
        ptc__free(t);
        ptc__free(data);
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensor_new: cannot allocate %lld bytes",
                        (long long)nbytes);
    }
    t->be = be;
    t->role = role;
    memcpy(t->dims, dims, sizeof t->dims);
    t->numel = numel;
    t->data = data;
    t->own = data;
    *out = t;
    return 0;
}

static void ref_tensor_free(ptc__be *be, ptc__bt *t)
{
    (void)be;
    if (!t)
        return;
    ptc__free(t->own);
    ptc__free(t);
}

static void ref_tensor_dims(const ptc__bt *t, int dims[4])
{
    memcpy(dims, t->dims, sizeof t->dims);
}

static int ref_tensor_write(ptc__be *be, ptc__bt *t, const void *plain, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_write: t is NULL");
    TRY(check_like(be, err, "tensor_write", "t", t, t));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_write: plain is NULL");
    memcpy(t->data, plain, (size_t)t->numel * (size_t)be->dtype);
    return 0;
}

static int ref_tensor_read(ptc__be *be, const ptc__bt *t, void *plain, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_read: t is NULL");
    TRY(check_like(be, err, "tensor_read", "t", t, t));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_read: plain is NULL");
    memcpy(plain, t->data, (size_t)t->numel * (size_t)be->dtype);
    return 0;
}

/* Raw form: the plain layout itself. */
static int ref_tensor_raw_size(ptc__be *be, const ptc__bt *t, size_t *bytes, uint64_t *layout,
                               ptc_error *err)
{
    if (!t || !bytes || !layout)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_raw_size: NULL argument");
    TRY(check_like(be, err, "tensor_raw_size", "t", t, t));
    const int64_t tag[6] = {'r', be->dtype, t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
    *bytes = (size_t)t->numel * (size_t)be->dtype;
    *layout = ptc__fnv1a(PTC__FNV_START, tag, sizeof tag);
    return 0;
}

static int ref_tensor_pack(ptc__be *be, const ptc__bt *t, void *dst, double scale, ptc_error *err)
{
    if (!t || !dst)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_pack: NULL argument");
    TRY(check_like(be, err, "tensor_pack", "t", t, t));
    if (scale == 1.0) {
        memcpy(dst, t->data, (size_t)t->numel * (size_t)be->dtype);
    } else if (be->dtype == PTC__BE_F32) {
        const float *x = t->data, s = (float)scale;
        float *y = dst;
        for (int64_t i = 0; i < t->numel; i++)
            y[i] = x[i] * s;
    } else {
        const double *x = t->data;
        double *y = dst;
        for (int64_t i = 0; i < t->numel; i++)
            y[i] = x[i] * scale;
    }
    return 0;
}

static int ref_tensor_unpack(ptc__be *be, ptc__bt *t, const void *src, ptc_error *err)
{
    if (!t || !src)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_unpack: NULL argument");
    TRY(check_like(be, err, "tensor_unpack", "t", t, t));
    memcpy(t->data, src, (size_t)t->numel * (size_t)be->dtype);
    return 0;
}

/* The raw form is the plain layout: t->data moves to raw (or back to t->own), values with it. */
static int ref_tensor_bind_raw(ptc__be *be, ptc__bt *t, void *raw, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_bind_raw: t is NULL");
    TRY(check_like(be, err, "tensor_bind_raw", "t", t, t));
    if ((uintptr_t)raw % 64)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_bind_raw: %p is not 64-byte aligned", raw);
    void *to = raw ? raw : t->own;
    if (to != t->data) {
        memcpy(to, t->data, (size_t)t->numel * (size_t)be->dtype);
        t->data = to;
    }
    return 0;
}

static int ref_tensor_fill(ptc__be *be, ptc__bt *t, double value, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_fill: t is NULL");
    TRY(check_like(be, err, "tensor_fill", "t", t, t));
    KERNEL(be, fill, t->data, t->numel, value);
    return 0;
}

static int ref_add(ptc__be *be, const ptc__bt *a, const ptc__bt *b, ptc__bt *y, int relu,
                   ptc_error *err)
{
    if (!a)
        return ptc__err(err, PTC_EINVAL, "", -1, "add: a is NULL");
    TRY(check_like(be, err, "add", "a", a, a));
    TRY(check_like(be, err, "add", "b", b, a));
    TRY(check_like(be, err, "add", "y", y, a));
    KERNEL(be, add, a->data, b->data, y->data, a->numel, relu);
    return 0;
}

static int ref_accumulate(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    if (!y)
        return ptc__err(err, PTC_EINVAL, "", -1, "accumulate: y is NULL");
    TRY(check_like(be, err, "accumulate", "y", y, y));
    TRY(check_like(be, err, "accumulate", "x", x, y));
    KERNEL(be, accumulate, x->data, y->data, y->numel);
    return 0;
}

/* ---- convolution ----------------------------------------------------------------------------- */

static int ref_conv_plan(ptc__be *be, ptc__op **out, const ptc__conv_shape *s, ptc_error *err)
{
    if (!be || !out || !s)
        return ptc__err(err, PTC_EINVAL, "", -1, "conv_plan: NULL argument");
    *out = NULL;
    int oh = ptc__conv_out(s->h, s->r, s->stride, s->pad);
    int ow = ptc__conv_out(s->w, s->s, s->stride, s->pad);
    if (s->n < 1 || s->c < 1 || s->k < 1 || oh < 1 || ow < 1 || s->oh != oh || s->ow != ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "conv_plan: input [%d][%d][%d][%d], weight [%d][%d][%d][%d], stride %d, "
                        "pad %d, output %dx%d is not a convolution (output would be %dx%d)",
                        s->n, s->c, s->h, s->w, s->k, s->c, s->r, s->s, s->stride, s->pad, s->oh,
                        s->ow, oh, ow);
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "conv_plan: out of memory");
    op->be = be;
    op->kind = OP_CONV;
    op->conv = *s;
    *out = op;
    return 0;
}

static int ref_conv_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *w, ptc__bt *y,
                        ptc_error *err)
{
    TRY(check_plan(be, err, "conv_fwd", op, OP_CONV));
    const ptc__conv_shape *s = &op->conv;
    TRY(check_t(be, err, "conv_fwd", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "conv_fwd", "w", w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s));
    TRY(check_t(be, err, "conv_fwd", "y", y, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow));
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow;
    const int64_t nb = conv_block(s);
    int nt = min_nt(be, s->k);
    int64_t count = 0;
    bool ok = madd_ok(&count, Q, nb * P + CONV_JT); /* the unfolding, in panels (ref_kernels.h) */
    if (!ok || count > be->conv_scratch_n) {
        double *scratch;
        TRY(scratch_new(err, "conv_fwd", ok, count, &scratch));
        ptc__free(be->conv_scratch);
        be->conv_scratch = scratch;
        be->conv_scratch_n = count;
    }
    KERNEL(be, conv_fwd, s, x->data, w->data, y->data, nb, be->conv_scratch, nt);
    return 0;
}

static int ref_conv_bwd_data(ptc__be *be, ptc__op *op, const ptc__bt *dy, const ptc__bt *w,
                             ptc__bt *dx, ptc_error *err)
{
    TRY(check_plan(be, err, "conv_bwd_data", op, OP_CONV));
    const ptc__conv_shape *s = &op->conv;
    TRY(check_t(be, err, "conv_bwd_data", "dy", dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow));
    TRY(check_t(be, err, "conv_bwd_data", "w", w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s));
    TRY(check_t(be, err, "conv_bwd_data", "dx", dx, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow;
    const int64_t nb = conv_block(s);
    int nt = min_nt(be, Q > nb * s->c ? Q : nb * s->c);
    int64_t count = 0;
    bool ok = madd_ok(&count, s->k + Q, nb * P) && madd_ok(&count, nt, (int64_t)s->h * s->w);
    double *scratch;
    TRY(scratch_new(err, "conv_bwd_data", ok, count, &scratch));
    KERNEL(be, conv_bwd_data, s, dy->data, w->data, dx->data, nb, scratch, nt);
    ptc__free(scratch);
    return 0;
}

static int ref_conv_bwd_weight(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *dy,
                               ptc__bt *dw, ptc_error *err)
{
    TRY(check_plan(be, err, "conv_bwd_weight", op, OP_CONV));
    const ptc__conv_shape *s = &op->conv;
    TRY(check_t(be, err, "conv_bwd_weight", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "conv_bwd_weight", "dy", dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow));
    TRY(check_t(be, err, "conv_bwd_weight", "dw", dw, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s));
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow;
    const int64_t nb = conv_block(s);
    int64_t count = 0;
    bool ok =
        madd_ok(&count, s->k, Q) && madd_ok(&count, nb * P, Q) && madd_ok(&count, s->k, nb * P);
    double *scratch;
    TRY(scratch_new(err, "conv_bwd_weight", ok, count, &scratch));
    KERNEL(be, conv_bwd_weight, s, x->data, dy->data, dw->data, nb, scratch, min_nt(be, s->k));
    ptc__free(scratch);
    return 0;
}

/* ---- batch normalization --------------------------------------------------------------------- */

static int ref_bn_plan(ptc__be *be, ptc__op **out, const int dims[4], double eps, ptc_error *err)
{
    if (!be || !out || !dims)
        return ptc__err(err, PTC_EINVAL, "", -1, "bn_plan: NULL argument");
    *out = NULL;
    if (dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[3] < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "bn_plan: [%d][%d][%d][%d] is not a shape",
                        dims[0], dims[1], dims[2], dims[3]);
    if (!(eps >= 0) || !isfinite(eps))
        return ptc__err(err, PTC_EINVAL, "", -1, "bn_plan: eps %g is not a finite value >= 0", eps);
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "bn_plan: out of memory");
    op->be = be;
    op->kind = OP_BN;
    memcpy(op->dims, dims, sizeof op->dims);
    op->eps = eps;
    *out = op;
    return 0;
}

static int ref_bn_fwd_train(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                            const ptc__bt *beta, ptc__bt *y, ptc__bt *save_mean,
                            ptc__bt *save_invstd, ptc__bt *running_mean, ptc__bt *running_var,
                            double momentum, int relu, ptc_error *err)
{
    static const char fn[] = "bn_fwd_train";
    TRY(check_plan(be, err, fn, op, OP_BN));
    const int *d = op->dims;
    TRY(check_t(be, err, fn, "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_vec(be, err, fn, "gamma", gamma, d[1]));
    TRY(check_vec(be, err, fn, "beta", beta, d[1]));
    TRY(check_like(be, err, fn, "y", y, x));
    TRY(check_vec(be, err, fn, "save_mean", save_mean, d[1]));
    TRY(check_vec(be, err, fn, "save_invstd", save_invstd, d[1]));
    TRY(check_vec(be, err, fn, "running_mean", running_mean, d[1]));
    TRY(check_vec(be, err, fn, "running_var", running_var, d[1]));
    const int64_t HW = (int64_t)d[2] * d[3];
    /* torch refuses too: the unbiased variance of one value divides by zero. */
    if ((int64_t)d[0] * HW < 2)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%s: expected more than 1 value per channel when training, got input "
                        "[%d][%d][%d][%d]",
                        fn, d[0], d[1], d[2], d[3]);
    KERNEL(be, bn_fwd_train, d[0], d[1], HW, op->eps, momentum, relu, x->data, gamma->data,
           beta->data, y->data, save_mean->data, save_invstd->data, running_mean->data,
           running_var->data, min_nt(be, d[1]));
    return 0;
}

static int ref_bn_fwd_eval(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                           const ptc__bt *beta, const ptc__bt *running_mean,
                           const ptc__bt *running_var, ptc__bt *y, int relu, ptc_error *err)
{
    static const char fn[] = "bn_fwd_eval";
    TRY(check_plan(be, err, fn, op, OP_BN));
    const int *d = op->dims;
    TRY(check_t(be, err, fn, "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_vec(be, err, fn, "gamma", gamma, d[1]));
    TRY(check_vec(be, err, fn, "beta", beta, d[1]));
    TRY(check_vec(be, err, fn, "running_mean", running_mean, d[1]));
    TRY(check_vec(be, err, fn, "running_var", running_var, d[1]));
    TRY(check_like(be, err, fn, "y", y, x));
    KERNEL(be, bn_fwd_eval, d[0], d[1], (int64_t)d[2] * d[3], op->eps, relu, x->data, gamma->data,
           beta->data, running_mean->data, running_var->data, y->data, min_nt(be, d[1]));
    return 0;
}

static int ref_bn_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                      const ptc__bt *dy, const ptc__bt *gamma, const ptc__bt *save_mean,
                      const ptc__bt *save_invstd, ptc__bt *dx, ptc__bt *dgamma, ptc__bt *dbeta,
                      ptc_error *err)
{
    static const char fn[] = "bn_bwd";
    TRY(check_plan(be, err, fn, op, OP_BN));
    const int *d = op->dims;
    TRY(check_t(be, err, fn, "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    if (y)
        TRY(check_like(be, err, fn, "y", y, x));
    TRY(check_like(be, err, fn, "dy", dy, x));
    TRY(check_vec(be, err, fn, "gamma", gamma, d[1]));
    TRY(check_vec(be, err, fn, "save_mean", save_mean, d[1]));
    TRY(check_vec(be, err, fn, "save_invstd", save_invstd, d[1]));
    TRY(check_like(be, err, fn, "dx", dx, x));
    TRY(check_vec(be, err, fn, "dgamma", dgamma, d[1]));
    TRY(check_vec(be, err, fn, "dbeta", dbeta, d[1]));
    KERNEL(be, bn_bwd, d[0], d[1], (int64_t)d[2] * d[3], x->data, y ? y->data : NULL, dy->data,
           gamma->data, save_mean->data, save_invstd->data, dx->data, dgamma->data, dbeta->data,
           min_nt(be, d[1]));
    return 0;
}

/* ---- activations and pooling ----------------------------------------------------------------- */

static int ref_relu_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    if (!x)
        return ptc__err(err, PTC_EINVAL, "", -1, "relu_fwd: x is NULL");
    TRY(check_like(be, err, "relu_fwd", "x", x, x));
    TRY(check_like(be, err, "relu_fwd", "y", y, x));
    KERNEL(be, relu_fwd, x->data, y->data, x->numel);
    return 0;
}

static int ref_relu_bwd(ptc__be *be, const ptc__bt *y, const ptc__bt *dy, ptc__bt *dx,
                        ptc_error *err)
{
    if (!y)
        return ptc__err(err, PTC_EINVAL, "", -1, "relu_bwd: y is NULL");
    TRY(check_like(be, err, "relu_bwd", "y", y, y));
    TRY(check_like(be, err, "relu_bwd", "dy", dy, y));
    TRY(check_like(be, err, "relu_bwd", "dx", dx, y));
    KERNEL(be, relu_bwd, y->data, dy->data, dx->data, y->numel);
    return 0;
}

static int ref_maxpool_plan(ptc__be *be, ptc__op **out, const ptc__pool_shape *s, ptc_error *err)
{
    if (!be || !out || !s)
        return ptc__err(err, PTC_EINVAL, "", -1, "maxpool_plan: NULL argument");
    *out = NULL;
    int oh = ptc__conv_out(s->h, s->r, s->stride, s->pad);
    int ow = ptc__conv_out(s->w, s->s, s->stride, s->pad);
    /* torch: "pad should be at most half of effective kernel size", which also keeps every
     * window on at least one input element. */
    if (s->n < 1 || s->c < 1 || oh < 1 || ow < 1 || s->pad > s->r / 2 || s->pad > s->s / 2 ||
        s->oh != oh || s->ow != ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "maxpool_plan: input [%d][%d][%d][%d], window %dx%d, stride %d, pad %d, "
                        "output %dx%d is not a max pool (output would be %dx%d; pad at most half "
                        "the window)",
                        s->n, s->c, s->h, s->w, s->r, s->s, s->stride, s->pad, s->oh, s->ow, oh,
                        ow);
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "maxpool_plan: out of memory");
    op->be = be;
    op->kind = OP_MAXPOOL;
    op->pool = *s;
    *out = op;
    return 0;
}

static int ref_maxpool_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(check_plan(be, err, "maxpool_fwd", op, OP_MAXPOOL));
    const ptc__pool_shape *s = &op->pool;
    TRY(check_t(be, err, "maxpool_fwd", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "maxpool_fwd", "y", y, PTC__ROLE_ACT, s->n, s->c, s->oh, s->ow));
    KERNEL(be, maxpool_fwd, s, x->data, y->data, min_nt(be, (int64_t)s->n * s->c));
    return 0;
}

static int ref_maxpool_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                           const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    TRY(check_plan(be, err, "maxpool_bwd", op, OP_MAXPOOL));
    const ptc__pool_shape *s = &op->pool;
    TRY(check_t(be, err, "maxpool_bwd", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "maxpool_bwd", "y", y, PTC__ROLE_ACT, s->n, s->c, s->oh, s->ow));
    TRY(check_like(be, err, "maxpool_bwd", "dy", dy, y));
    TRY(check_like(be, err, "maxpool_bwd", "dx", dx, x));
    KERNEL(be, maxpool_bwd, s, x->data, dy->data, dx->data, min_nt(be, (int64_t)s->n * s->c));
    return 0;
}

static int ref_avgpool_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    if (!x)
        return ptc__err(err, PTC_EINVAL, "", -1, "avgpool_fwd: x is NULL");
    const int *d = x->dims;
    TRY(check_t(be, err, "avgpool_fwd", "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_t(be, err, "avgpool_fwd", "y", y, PTC__ROLE_MAT, d[0], d[1], 1, 1));
    KERNEL(be, avgpool_fwd, (int64_t)d[0] * d[1], (int64_t)d[2] * d[3], x->data, y->data);
    return 0;
}

static int ref_avgpool_bwd(ptc__be *be, const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    if (!dx)
        return ptc__err(err, PTC_EINVAL, "", -1, "avgpool_bwd: dx is NULL");
    const int *d = dx->dims;
    TRY(check_t(be, err, "avgpool_bwd", "dx", dx, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_t(be, err, "avgpool_bwd", "dy", dy, PTC__ROLE_MAT, d[0], d[1], 1, 1));
    KERNEL(be, avgpool_bwd, (int64_t)d[0] * d[1], (int64_t)d[2] * d[3], dy->data, dx->data);
    return 0;
}

/* ---- linear ---------------------------------------------------------------------------------- */

static int ref_linear_fwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *b,
                          ptc__bt *y, ptc_error *err)
{
    if (!x || !w)
        return ptc__err(err, PTC_EINVAL, "", -1, "linear_fwd: x or w is NULL");
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(check_t(be, err, "linear_fwd", "x", x, PTC__ROLE_MAT, N, K, 1, 1));
    TRY(check_t(be, err, "linear_fwd", "w", w, PTC__ROLE_MAT, M, K, 1, 1));
    TRY(check_vec(be, err, "linear_fwd", "b", b, M));
    TRY(check_t(be, err, "linear_fwd", "y", y, PTC__ROLE_MAT, N, M, 1, 1));
    KERNEL(be, linear_fwd, N, K, M, x->data, w->data, b->data, y->data);
    return 0;
}

static int ref_linear_bwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *dy,
                          ptc__bt *dx, ptc__bt *dw, ptc__bt *db, ptc_error *err)
{
    if (!x || !w)
        return ptc__err(err, PTC_EINVAL, "", -1, "linear_bwd: x or w is NULL");
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(check_t(be, err, "linear_bwd", "x", x, PTC__ROLE_MAT, N, K, 1, 1));
    TRY(check_t(be, err, "linear_bwd", "w", w, PTC__ROLE_MAT, M, K, 1, 1));
    TRY(check_t(be, err, "linear_bwd", "dy", dy, PTC__ROLE_MAT, N, M, 1, 1));
    if (dx)
        TRY(check_like(be, err, "linear_bwd", "dx", dx, x));
    TRY(check_like(be, err, "linear_bwd", "dw", dw, w));
    TRY(check_vec(be, err, "linear_bwd", "db", db, M));
    KERNEL(be, linear_bwd, N, K, M, x->data, w->data, dy->data, dx ? dx->data : NULL, dw->data,
           db->data);
    return 0;
}

/* ---- optimizer ------------------------------------------------------------------------------- */

static int ref_sgd_step(ptc__be *be, ptc__bt *p, const ptc__bt *g, ptc__bt *buf, const ptc__sgd *h,
                        ptc_error *err)
{
    if (!p || !h)
        return ptc__err(err, PTC_EINVAL, "", -1, "sgd_step: p or the hyperparameters are NULL");
    TRY(check_like(be, err, "sgd_step", "p", p, p));
    TRY(check_like(be, err, "sgd_step", "g", g, p));
    if (h->momentum != 0)
        TRY(check_like(be, err, "sgd_step", "buf", buf, p));
    KERNEL(be, sgd_step, p->data, g->data, h->momentum != 0 ? buf->data : NULL, p->numel, h);
    return 0;
}

/* ---- device input ----------------------------------------------------------------------------
 * For ref the "device" is host memory: the dataset is copied (the caller may free its own), and a
 * batch is ptc__augment_image per sample straight into x, which keeps the plain layout. It exists
 * so that the trainer's device-input path runs, and is held to the host path, without a GPU. */

struct ptc__bimg {
    ptc__be *be;
    int64_t count;
    uint8_t *data; /* [count][3][32][32] */
};

static int ref_images_upload(ptc__be *be, ptc__bimg **out, const uint8_t *images, int64_t count,
                             ptc_error *err)
{
    if (!be || !out || count < 0 || (count > 0 && !images))
        return ptc__err(err, PTC_EINVAL, "", -1, "images_upload: invalid arguments");
    *out = NULL;
    int64_t bytes;
    if (!ptc__mul_i64_ok(count, PTC__DATA_PIXELS, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return ptc__err(err, PTC_ENOMEM, "", -1, "images_upload: %lld images are too many",
                        (long long)count);
    ptc__bimg *im = ptc__calloc(1, sizeof *im);
    uint8_t *data = ptc__malloc(bytes ? (size_t)bytes : 1);
    if (!im || !data) {
        ptc__free(im);
        ptc__free(data);
        return ptc__err(err, PTC_ENOMEM, "", -1,
                        "images_upload: cannot allocate %lld bytes for %lld images",
                        (long long)bytes, (long long)count);
    }
    if (bytes)
        memcpy(data, images, (size_t)bytes);
    im->be = be;
    im->count = count;
    im->data = data;
    *out = im;
    return 0;
}

static void ref_images_free(ptc__be *be, ptc__bimg *im)
{
    (void)be;
    if (!im)
        return;
    ptc__free(im->data);
    ptc__free(im);
}

static int ref_images_batch(ptc__be *be, const ptc__bimg *im, const int32_t *idx, const int8_t *top,
                            const int8_t *left, const uint8_t *flip, int n, const float *lut,
                            ptc__bt *x, ptc_error *err)
{
    if (!im || !idx || !top || !left || !flip || !lut || n < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "images_batch: invalid arguments");
    if (im->be != be)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "images_batch: the images belong to another backend instance");
    TRY(check_t(be, err, "images_batch", "x", x, PTC__ROLE_ACT, n, PTC__DATA_C, PTC__DATA_H,
                PTC__DATA_W));
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= im->count)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "images_batch: sample %d: image %d is outside the %lld images", i,
                            (int)idx[i], (long long)im->count);
        if (top[i] < 0 || top[i] > 8 || left[i] < 0 || left[i] > 8)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "images_batch: sample %d: window (%d, %d) is outside 0..8", i,
                            (int)top[i], (int)left[i]);
    }
    ptc__normalizer nz;
    memcpy(nz.lut, lut, sizeof nz.lut);
    if (be->dtype == PTC__BE_F32) {
        float *xd = x->data;
        PAR_FOR(be->nt)
        for (int i = 0; i < n; i++)
            ptc__augment_image(&nz, im->data + (size_t)idx[i] * PTC__DATA_PIXELS, top[i], left[i],
                               flip[i] != 0, xd + (size_t)i * PTC__DATA_PIXELS);
        return 0;
    }
    /* float64: the float32 image widened, as tensor_write of a float batch would hold it */
    float *buf = ptc__malloc(PTC__DATA_PIXELS * sizeof *buf);
    if (!buf)
        return ptc__err(err, PTC_ENOMEM, "", -1, "images_batch: out of memory");
    double *xd = x->data;
    for (int i = 0; i < n; i++) {
        ptc__augment_image(&nz, im->data + (size_t)idx[i] * PTC__DATA_PIXELS, top[i], left[i],
                           flip[i] != 0, buf);
        for (int j = 0; j < PTC__DATA_PIXELS; j++)
            xd[(size_t)i * PTC__DATA_PIXELS + j] = buf[j];
    }
    ptc__free(buf);
    return 0;
}

/* Every parameter in turn through the same kernel as sgd_step: the bits of count sgd_step calls. */
static int ref_sgd_multi(ptc__be *be, int count, ptc__bt *const *p, ptc__bt *const *g,
                         ptc__bt *const *buf, const ptc__sgd *h, ptc_error *err)
{
    if (count < 0 || (count > 0 && (!p || !g)) || !h)
        return ptc__err(err, PTC_EINVAL, "", -1, "sgd_multi: invalid arguments");
    const bool mom = h->momentum != 0;
    if (mom && count > 0 && !buf)
        return ptc__err(err, PTC_EINVAL, "", -1, "sgd_multi: momentum %g needs buffers",
                        h->momentum);
    /* every argument checked before anything is updated: a bad list changes nothing */
    for (int i = 0; i < count; i++) {
        if (!p[i])
            return ptc__err(err, PTC_EINVAL, "", -1, "sgd_multi: parameter %d is NULL", i);
        TRY(check_like(be, err, "sgd_multi", "p", p[i], p[i]));
        TRY(check_like(be, err, "sgd_multi", "g", g[i], p[i]));
        if (mom)
            TRY(check_like(be, err, "sgd_multi", "buf", buf[i], p[i]));
    }
    for (int i = 0; i < count; i++)
        KERNEL(be, sgd_step, p[i]->data, g[i]->data, mom ? buf[i]->data : NULL, p[i]->numel, h);
    return 0;
}

/* ---- loss ------------------------------------------------------------------------------------ */

static int ref_xent(ptc__be *be, const ptc__bt *logits, const int64_t *labels, int n, int classes,
                    ptc__bt *dlogits, ptc_error *err)
{
    if (n < 1 || classes < 1 || !labels)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "xent: %d rows of %d classes (at least 1 of each) and labels %s", n,
                        classes, labels ? "given" : "NULL");
    TRY(check_t(be, err, "xent", "logits", logits, PTC__ROLE_MAT, n, classes, 1, 1));
    TRY(check_t(be, err, "xent", "dlogits", dlogits, PTC__ROLE_MAT, n, classes, 1, 1));
    be->xent_done = 0;
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return ptc__err(err, PTC_EINVAL, "", -1, "label %lld of sample %d is not a class",
                            (long long)labels[i], i);
    KERNEL(be, xent, logits->data, labels, n, classes, dlogits->data, &be->xent_loss,
           &be->xent_correct);
    be->xent_done = 1;
    return 0;
}

static int ref_xent_result(ptc__be *be, double *loss, int64_t *correct, ptc_error *err)
{
    if (!be || !be->xent_done)
        return ptc__err(err, PTC_EINVAL, "", -1, "xent_result: no xent has been computed");
    if (loss)
        *loss = be->xent_loss;
    if (correct)
        *correct = be->xent_correct;
    return 0;
}

static void ref_plan_free(ptc__be *be, ptc__op *op)
{
    (void)be;
    ptc__free(op);
}

const ptc__backend_ops ptc__backend_ref = {
    .name = "ref",
    .open = ref_open,
    .close = ref_close,
    .tensor_new = ref_tensor_new,
    .tensor_free = ref_tensor_free,
    .tensor_dims = ref_tensor_dims,
    .tensor_write = ref_tensor_write,
    .tensor_read = ref_tensor_read,
    .tensor_fill = ref_tensor_fill,
    .tensor_raw_size = ref_tensor_raw_size,
    .tensor_pack = ref_tensor_pack,
    .tensor_unpack = ref_tensor_unpack,
    .tensor_bind_raw = ref_tensor_bind_raw,
    .add = ref_add,
    .accumulate = ref_accumulate,
    .conv_plan = ref_conv_plan,
    .conv_fwd = ref_conv_fwd,
    .conv_bwd_data = ref_conv_bwd_data,
    .conv_bwd_weight = ref_conv_bwd_weight,
    .bn_plan = ref_bn_plan,
    .bn_fwd_train = ref_bn_fwd_train,
    .bn_fwd_eval = ref_bn_fwd_eval,
    .bn_bwd = ref_bn_bwd,
    .relu_fwd = ref_relu_fwd,
    .relu_bwd = ref_relu_bwd,
    .maxpool_plan = ref_maxpool_plan,
    .maxpool_fwd = ref_maxpool_fwd,
    .maxpool_bwd = ref_maxpool_bwd,
    .avgpool_fwd = ref_avgpool_fwd,
    .avgpool_bwd = ref_avgpool_bwd,
    .linear_fwd = ref_linear_fwd,
    .linear_bwd = ref_linear_bwd,
    .sgd_step = ref_sgd_step,
    .plan_free = ref_plan_free,
    /* ---- device input ---- */
    .images_upload = ref_images_upload,
    .images_free = ref_images_free,
    .images_batch = ref_images_batch,
    /* ---- device loss and optimizer ---- */
    .xent = ref_xent,
    .xent_result = ref_xent_result,
    .sgd_multi = ref_sgd_multi,
};
