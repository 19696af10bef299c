/*
 * dnnl.c - the oneDNN backend (ptc__backend_dnnl): float32 on the CPU, fast.
 *
 * Layouts. A tensor's layout is decided once, at tensor_new, from its role, its shape and the
 * processor (block B = 16 with AVX-512, 8 otherwise), so that the tensors of one layer always
 * meet the primitives in the layout those primitives prefer:
 *   ACT     nChwBc (oneDNN's blocked activations) when c % B == 0, else plain nchw (the images);
 *   CONV_W  OIhwBiBo when k and c are multiples of B, OhwiBo when only k is (the stem's 3 input
 *           channels), else plain oihw;
 *   VEC     plain [c];  MAT  plain [n][c] (linear's operands, the pooled features).
 * Parameters, their gradients and momentum buffers share their role and shape, hence their layout,
 * so SGD is one pass over raw buffers. Only tensor_write and tensor_read reorder between the plain
 * layout and the tensor's (a copy where they are the same, as for the input images and logits).
 *
 * Plans. conv_plan, bn_plan and maxpool_plan create their oneDNN primitives once (backward ones on
 * first use) and keep them. For a convolution the plan asks oneDNN which layouts it prefers
 * (format "any"); when the tensors' layouts differ, it tries the tensors' layouts and keeps them
 * if oneDNN answers with the same implementation. What still differs goes through a plan-owned
 * scratch buffer and a reorder, counted in ptc__dnnl_stats: for ResNet-18 only the weights of
 * conv_bwd_data (oneDNN wants OIhwBoBi there), once per new version of the weights, and the
 * stem's dx if anyone asks for it. Convolutions whose every output window covers the whole input
 * (ResNet-18's layer3 and layer4 on 32x32 inputs) run as matrix products instead (see
 * "Convolutions that are dense layers"). Operations without a plan take their few primitives
 * (reorders, add) from a small per-instance cache keyed by operation, role and shape.
 *
 * Versions. Every write to a tensor gives it a new version from the instance's clock (never
 * reused). A plan remembers the versions it produced its workspaces for: maxpool_bwd reuses the
 * argmax only while x and y are, and a reordered input is reused while its source has not changed.
 * Otherwise the op recomputes what it needs, so results never depend on call order.
 *
 * Numerics are PyTorch's (backend.h). Batchnorm is this file's own code (see "batch
 * normalization": oneDNN's float statistics are too coarse for the ReLU that follows), with
 * statistics and gradient sums in double as torch's. SGD is torch's sequence of fused
 * multiply-adds in float. relu (alone, after add, and after a batchnorm) keeps NaN as torch does,
 * so a diverged step shows. Known difference, in non-finite inputs only: maxpool turns NaN into a
 * finite value. Convolutions are direct (as torch's
 * oneDNN path is) unless ptc__be_params.winograd lets 3x3 stride-1 ones use Winograd F(4x4, 3x3):
 * 1.4x to 1.7x faster training steps on this machine, rounding errors a little larger (see dnnl.h).
 *
 * Threads. Debian's libdnnl uses the OpenMP runtime (libgomp): params.threads is applied with
 * omp_set_num_threads on the calling thread before each op (found with dlsym when this file is
 * not compiled with -fopenmp). The build compiles it with -fopenmp, so the loops of this file
 * (batchnorm, SGD, relu, the dense-layer gathers) run on the same threads.
 */
#include "backend/dnnl.h"
#include "base/module.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#ifdef _OPENMP
#include <omp.h>
#else
#include <dlfcn.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PTC_DNNL_X86 1
#endif

#define PC_MAX 64   /* entries of the per-instance primitive cache */
#define BN_RANGES 4 /* image ranges per channel block in a batchnorm reduction */

/* ---- errors ---------------------------------------------------------------------------------- */

static int dn_fail(ptc_error *err, dnnl_status_t st, const char *fn, int line)
{
    int code = st == dnnl_out_of_memory       ? PTC_ENOMEM
               : st == dnnl_unimplemented     ? PTC_EUNSUPPORTED
               : st == dnnl_invalid_arguments ? PTC_EINVAL
                                              : PTC_EIO;
    return ptc__err(err, code, "", -1, "oneDNN %s failed (dnnl.c:%d): %s", fn, line,
                    dnnl_status2str(st));
}

/* Every oneDNN call goes through DN (return on failure) or DNG (goto fail with rc set). */
#define DN(fn, ...)                                                                                \
    do {                                                                                           \
        dnnl_status_t st_ = fn(__VA_ARGS__);                                                       \
        if (st_ != dnnl_success)                                                                   \
            return dn_fail(err, st_, #fn, __LINE__);                                               \
    } while (0)
#define DNG(fn, ...)                                                                               \
    do {                                                                                           \
        dnnl_status_t st_ = fn(__VA_ARGS__);                                                       \
        if (st_ != dnnl_success) {                                                                 \
            rc = dn_fail(err, st_, #fn, __LINE__);                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* ---- objects --------------------------------------------------------------------------------- */

typedef struct dmem { /* oneDNN memory over a 64-byte aligned buffer of ours, zeroed at creation */
    dnnl_memory_t mem;
    void *raw;
    float *data;
    size_t nbytes;
} dmem;

typedef struct dprim {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
} dprim;

typedef struct pc_ent {
    int kind;
    ptc__role role;
    int dims[4];
    dprim d;
} pc_ent;

struct ptc__be {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    int threads;  /* 0: leave the OpenMP default */
    int blk;      /* channel block of the blocked layouts: 16 (AVX-512) or 8 */
    int winograd; /* 3x3 stride-1 convolutions may use Winograd (ptc__be_params.winograd) */
#ifndef _OPENMP
    void (*omp_set)(int);
#endif
    uint64_t clock; /* the last version handed out */
    ptc__dnnl_stats stats;
    int ncache;
    pc_ent cache[PC_MAX];
};

struct ptc__bt {
    const ptc__be *owner; /* the instance that made it */
    ptc__role role;
    int dims[4];
    int blk;   /* ACT: channel block of nChwBc, 0 for nchw */
    int plain; /* the layout is the plain one: write and read are copies */
    int64_t numel;
    uint64_t version;
    dnnl_memory_desc_t md;
    dmem m;
};

/* A primitive's operand whose layout may differ from the tensor's (see the top comment). */
typedef struct bind {
    int need;   /* layouts differ: the primitive sees scratch */
    int weight; /* a weight reorder in the statistics */
    dmem scratch;
    dnnl_primitive_t reorder; /* tensor -> scratch for inputs, scratch -> tensor for outputs */
    uint64_t stamp;           /* inputs: the version of the tensor that scratch holds, 0: none */
} bind;

enum { PLAN_CONV = 1, PLAN_BN, PLAN_POOL };

typedef struct conv_part {
    ptc__conv_shape s;
    dnnl_memory_desc_t xmd, wmd, ymd; /* the tensors' layouts */
    dprim fwd, bwd_d, bwd_w;
    bind f_x, f_w, f_y, d_dy, d_w, d_dx, w_x, w_dy, w_dw;
    dnnl_alg_kind_t alg; /* direct, or Winograd where the instance allows it */
    /* A dense layer in disguise (see "Convolutions that are dense layers"): no primitives. */
    int fc;
    int64_t fin, fout; /* C H W and K OH OW */
    float *wt, *dwt;   /* [fin][fout]: the weights as a matrix, and its gradient */
    void *wt_raw, *dwt_raw;
    uint64_t wt_stamp; /* the version of w that wt holds */
    uint64_t dw_stamp; /* the version of the dw this plan last wrote (its other taps are 0) */
} conv_part;


typedef struct bn_part {
    int dims[4];
    double eps;
    int ranges;  /* image ranges of a reduction: min(N, BN_RANGES) */
    double *buf; /* [C][ranges][2] partial sums, then [5][C] per-channel constants */
} bn_part;

typedef struct pool_part {
    ptc__pool_shape s;
    dnnl_memory_desc_t xmd, ymd;
    dprim fwd, bwd;
    dmem ws, yscratch;
    uint64_t x_stamp, y_stamp; /* the versions of x and y the argmax workspace belongs to */
} pool_part;

struct ptc__op {
    const ptc__be *owner;
    int kind;
    union {
        conv_part conv;
        bn_part bn;
        pool_part pool;
    } u;
};

/* ---- small helpers --------------------------------------------------------------------------- */

static void touch(ptc__be *be, ptc__bt *t)
{
    t->version = ++be->clock;
}

static void set_threads(ptc__be *be)
{
    if (be->threads <= 0)
        return;
#ifdef _OPENMP
    omp_set_num_threads(be->threads);
#else
    if (be->omp_set)
        be->omp_set(be->threads);
#endif
}

/* The threads of this file's own loops: the instance's, or OpenMP's default (1 without OpenMP). */
static int nthreads(const ptc__be *be)
{
#ifdef _OPENMP
    return be->threads > 0 ? be->threads : omp_get_max_threads();
#else
    (void)be;
    return 1;
#endif
}

static void dmem_free(dmem *m)
{
    if (m->mem)
        dnnl_memory_destroy(m->mem);
    ptc__free(m->raw);
    memset(m, 0, sizeof *m);
}

static int dmem_new(ptc__be *be, dmem *m, const dnnl_memory_desc_t *md, ptc_error *err)
{
    memset(m, 0, sizeof *m);
    size_t n = dnnl_memory_desc_get_size(md);
    if (n == 0 || n > SIZE_MAX - 64)
        return ptc__err(err, PTC_ELIMIT, "", -1, "dnnl: tensor of %zu bytes", n);
    m->raw = ptc__calloc(1, n + 64);
    if (!m->raw)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory for %zu bytes", n);
    m->data = (float *)(((uintptr_t)m->raw + 63) & ~(uintptr_t)63);
    m->nbytes = n;
    dnnl_status_t st = dnnl_memory_create(&m->mem, md, be->eng, m->data);
    if (st != dnnl_success) {
        m->mem = NULL;
        dmem_free(m);
        return dn_fail(err, st, "dnnl_memory_create", __LINE__);
    }
    return 0;
}

static void dprim_free(dprim *d)
{
    if (d->p)
        dnnl_primitive_destroy(d->p);
    if (d->pd)
        dnnl_primitive_desc_destroy(d->pd);
    d->p = NULL;
    d->pd = NULL;
}

/* Takes ownership of pd (destroyed on failure). */
static int dprim_from_pd(ptc__be *be, dprim *d, dnnl_primitive_desc_t pd, ptc_error *err)
{
    dnnl_status_t st = dnnl_primitive_create(&d->p, pd);
    if (st != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        d->p = NULL;
        return dn_fail(err, st, "dnnl_primitive_create", __LINE__);
    }
    d->pd = pd;
    be->stats.primitives++;
    return 0;
}

static int dprim_make(ptc__be *be, dprim *d, const void *op_desc, const_dnnl_primitive_attr_t attr,
                      const_dnnl_primitive_desc_t hint, ptc_error *err)
{
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create, &pd, op_desc, attr, be->eng, hint);
    return dprim_from_pd(be, d, pd, err);
}

static int run(ptc__be *be, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
               ptc_error *err)
{
    DN(dnnl_primitive_execute, p, be->strm, nargs, args);
    return 0;
}

static int finish(ptc__be *be, ptc_error *err)
{
    DN(dnnl_stream_wait, be->strm);
    return 0;
}

static const char *role_name(ptc__role r)
{
    switch (r) {
    case PTC__ROLE_ACT:
        return "ACT";
    case PTC__ROLE_CONV_W:
        return "CONV_W";
    case PTC__ROLE_VEC:
        return "VEC";
    case PTC__ROLE_MAT:
        return "MAT";
    }
    return "?";
}

/* The layout of a tensor (plain: the layout tensor_write and tensor_read see). */
static int layout_md(const ptc__be *be, dnnl_memory_desc_t *md, ptc__role role, const int d[4],
                     int plain, int *blk_out, ptc_error *err)
{
    const int B = be->blk;
    dnnl_dims_t dims = {d[0], d[1], d[2], d[3]};
    int nd = 4, blk = 0;
    dnnl_format_tag_t tag;
    switch (role) {
    case PTC__ROLE_ACT:
        if (!plain && d[1] % B == 0) {
            tag = B == 16 ? dnnl_nChw16c : dnnl_nChw8c;
            blk = B;
        } else {
            tag = dnnl_nchw;
        }
        break;
    case PTC__ROLE_CONV_W:
        if (plain)
            tag = dnnl_oihw;
        else if (d[0] % B == 0 && d[1] % B == 0)
            tag = B == 16 ? dnnl_OIhw16i16o : dnnl_OIhw8i8o;
        else if (d[0] % B == 0)
            tag = B == 16 ? dnnl_Ohwi16o : dnnl_Ohwi8o;
        else
            tag = dnnl_oihw;
        break;
    case PTC__ROLE_VEC:
        nd = 1;
        dims[0] = d[1];
        tag = dnnl_a;
        break;
    case PTC__ROLE_MAT:
        nd = 2;
        tag = dnnl_ab;
        break;
    default:
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: unknown tensor role %d", (int)role);
    }
    if (blk_out)
        *blk_out = blk;
    DN(dnnl_memory_desc_init_by_tag, md, nd, dims, dnnl_f32, tag);
    return 0;
}

/* t must be a tensor of this instance. */
static int nonnull(const ptc__be *be, const ptc__bt *t, const char *what, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s is NULL", what);
    if (t->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s belongs to another backend instance",
                        what);
    return 0;
}

/* t must be a tensor of this instance, of this role and shape. */
static int expect(const ptc__be *be, const ptc__bt *t, ptc__role role, int n, int c, int h, int w,
                  const char *what, ptc_error *err)
{
    TRY(nonnull(be, t, what, err));
    if (t->role != role || t->dims[0] != n || t->dims[1] != c || t->dims[2] != h || t->dims[3] != w)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: %s is %s [%d][%d][%d][%d], expected %s [%d][%d][%d][%d]", what,
                        role_name(t->role), t->dims[0], t->dims[1], t->dims[2], t->dims[3],
                        role_name(role), n, c, h, w);
    return 0;
}

static int expect_like(const ptc__be *be, const ptc__bt *t, const ptc__bt *like, const char *what,
                       ptc_error *err)
{
    return expect(be, t, like->role, like->dims[0], like->dims[1], like->dims[2], like->dims[3],
                  what, err);
}

/* ---- binds ----------------------------------------------------------------------------------- */

static void bind_free(bind *b)
{
    if (b->reorder)
        dnnl_primitive_destroy(b->reorder);
    dmem_free(&b->scratch);
    memset(b, 0, sizeof *b);
}

static int bind_init(ptc__be *be, bind *b, const dnnl_memory_desc_t *tmd,
                     const dnnl_memory_desc_t *pmd, int out, int weight, ptc_error *err)
{
    memset(b, 0, sizeof *b);
    b->weight = weight;
    if (dnnl_memory_desc_equal(tmd, pmd))
        return 0;
    b->need = 1;
    TRY(dmem_new(be, &b->scratch, pmd, err));
    dnnl_primitive_desc_t rpd;
    if (out)
        DN(dnnl_reorder_primitive_desc_create, &rpd, pmd, be->eng, tmd, be->eng, NULL);
    else
        DN(dnnl_reorder_primitive_desc_create, &rpd, tmd, be->eng, pmd, be->eng, NULL);
    dnnl_status_t st = dnnl_primitive_create(&b->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (st != dnnl_success) {
        b->reorder = NULL;
        return dn_fail(err, st, "dnnl_primitive_create", __LINE__);
    }
    be->stats.primitives++;
    return 0;
}

static void count_reorder(ptc__be *be, const bind *b)
{
    if (b->weight)
        be->stats.weight_reorders++;
    else
        be->stats.act_reorders++;
}

/* The memory the primitive reads for input t (reordered into scratch when needed). */
static int bind_in(ptc__be *be, bind *b, const ptc__bt *t, dnnl_memory_t *mem, ptc_error *err)
{
    if (!b->need) {
        *mem = t->m.mem;
        return 0;
    }
    if (b->stamp != t->version) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, t->m.mem}, {DNNL_ARG_TO, b->scratch.mem}};
        TRY(run(be, b->reorder, 2, a, err));
        count_reorder(be, b);
        b->stamp = t->version;
    }
    *mem = b->scratch.mem;
    return 0;
}

static dnnl_memory_t bind_out(const bind *b, const ptc__bt *t)
{
    return b->need ? b->scratch.mem : t->m.mem;
}

/* After the primitive wrote output t: reorder scratch into it when needed; t gets a new version. */
static int bind_out_done(ptc__be *be, bind *b, ptc__bt *t, ptc_error *err)
{
    if (b->need) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, b->scratch.mem}, {DNNL_ARG_TO, t->m.mem}};
        TRY(run(be, b->reorder, 2, a, err));
        count_reorder(be, b);
    }
    touch(be, t);
    return 0;
}

/* ---- the instance ---------------------------------------------------------------------------- */

static void dn_close(ptc__be *be)
{
    if (!be)
        return;
    for (int i = 0; i < be->ncache; i++)
        dprim_free(&be->cache[i].d);
    if (be->strm)
        dnnl_stream_destroy(be->strm);
    if (be->eng)
        dnnl_engine_destroy(be->eng);
    ptc__free(be);
}

static int dn_open(ptc__be **out, const ptc__be_params *p, ptc_error *err)
{
    int rc;
    *out = NULL;
    if (p && p->dtype != PTC__BE_F32)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "dnnl backend: only float32 (dtype %d asked)", (int)p->dtype);
    if (p && p->threads < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl backend: threads %d", p->threads);
    ptc__be *be = ptc__calloc(1, sizeof *be);
    if (!be)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl backend: out of memory");
    be->threads = p ? p->threads : 0;
#ifndef _OPENMP
    /* libdnnl brings libgomp in; its omp_set_num_threads is found without linking it. */
    {
        void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
        memcpy(&be->omp_set, &sym, sizeof sym);
    }
#endif
    be->winograd = p && p->winograd;
    DNG(dnnl_engine_create, &be->eng, dnnl_cpu, 0);
    DNG(dnnl_stream_create, &be->strm, be->eng, dnnl_stream_default_flags);
    {
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        be->blk = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core) ==
                          (unsigned)dnnl_cpu_isa_avx512_core
                      ? 16
                      : 8;
    }
    *out = be;
    return 0;
fail:
    dn_close(be);
    return rc;
}

void ptc__dnnl_stats_get(const ptc__be *be, ptc__dnnl_stats *out)
{
    *out = be->stats;
}

void ptc__dnnl_touch(ptc__be *be, ptc__bt *t)
{
    touch(be, t);
}

/* ---- the per-instance primitive cache (operations without a plan) ---------------------------- */

enum { K_WRITE, K_READ, K_ADD };

static int pc_create(ptc__be *be, pc_ent *e, const ptc__bt *t, ptc_error *err)
{
    const dnnl_memory_desc_t *md = &t->md;
    dnnl_primitive_desc_t pd;
    if (e->kind == K_ADD) {
        dnnl_binary_desc_t bd;
        DN(dnnl_binary_desc_init, &bd, dnnl_binary_add, md, md, md);
        DN(dnnl_primitive_desc_create, &pd, &bd, NULL, be->eng, NULL);
    } else {
        dnnl_memory_desc_t pmd;
        TRY(layout_md(be, &pmd, t->role, t->dims, 1, NULL, err));
        if (e->kind == K_WRITE)
            DN(dnnl_reorder_primitive_desc_create, &pd, &pmd, be->eng, md, be->eng, NULL);
        else
            DN(dnnl_reorder_primitive_desc_create, &pd, md, be->eng, &pmd, be->eng, NULL);
    }
    return dprim_from_pd(be, &e->d, pd, err);
}

static int pc_get(ptc__be *be, int kind, const ptc__bt *t, dnnl_primitive_t *out, ptc_error *err)
{
    for (int i = 0; i < be->ncache; i++) {
        pc_ent *e = &be->cache[i];
        if (e->kind == kind && e->role == t->role &&
            memcmp(e->dims, t->dims, sizeof e->dims) == 0) {
            *out = e->d.p;
            return 0;
        }
    }
    if (be->ncache == PC_MAX) { /* more shapes than a network has: forget the oldest */
        dprim_free(&be->cache[0].d);
        memmove(&be->cache[0], &be->cache[1], (PC_MAX - 1) * sizeof be->cache[0]);
        be->ncache--;
    }
    pc_ent *e = &be->cache[be->ncache];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->role = t->role;
    memcpy(e->dims, t->dims, sizeof e->dims);
    int rc = pc_create(be, e, t, err);
    if (rc < 0) {
        memset(e, 0, sizeof *e);
        return rc;
    }
    be->ncache++;
    *out = e->d.p;
    return 0;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static void dn_tensor_free(ptc__be *be, ptc__bt *t)
{
    (void)be;
    if (!t)
        return;
    dmem_free(&t->m);
    ptc__free(t);
}

static int dn_tensor_new(ptc__be *be, ptc__bt **out, ptc__role role, const int dims[4],
                         ptc_error *err)
{
    if (!out || !dims)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_new with NULL");
    *out = NULL;
    int64_t numel = 1;
    for (int i = 0; i < 4; i++) {
        if (dims[i] < 1)
            return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor dimension %d is %d", i, dims[i]);
        if (!ptc__mul_i64_ok(numel, dims[i], &numel) || numel > ((int64_t)1 << 40))
            return ptc__err(err, PTC_ELIMIT, "", -1, "dnnl: tensor [%d][%d][%d][%d] too large",
                            dims[0], dims[1], dims[2], dims[3]);
    }
    if ((role == PTC__ROLE_VEC && (dims[0] != 1 || dims[2] != 1 || dims[3] != 1)) ||
        (role == PTC__ROLE_MAT && (dims[2] != 1 || dims[3] != 1)))
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s tensor cannot be [%d][%d][%d][%d]",
                        role_name(role), dims[0], dims[1], dims[2], dims[3]);
    ptc__bt *t = ptc__calloc(1, sizeof *t);
    if (!t)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    t->owner = be;
    t->role = role;
    memcpy(t->dims, dims, sizeof t->dims);
    t->numel = numel;
    dnnl_memory_desc_t pmd;
    int rc = layout_md(be, &t->md, role, dims, 0, &t->blk, err);
    if (rc == 0)
        rc = layout_md(be, &pmd, role, dims, 1, NULL, err);
    if (rc == 0)
        rc = dmem_new(be, &t->m, &t->md, err);
    if (rc < 0) {
        dn_tensor_free(be, t);
        return rc;
    }
    t->plain = dnnl_memory_desc_equal(&t->md, &pmd);
    touch(be, t);
    *out = t;
    return 0;
}

static int edge_reorder(ptc__be *be, int kind, const ptc__bt *t, void *plain, ptc_error *err)
{
    dnnl_primitive_t p;
    dnnl_memory_desc_t pmd;
    dnnl_memory_t um;
    set_threads(be);
    TRY(pc_get(be, kind, t, &p, err));
    TRY(layout_md(be, &pmd, t->role, t->dims, 1, NULL, err));
    DN(dnnl_memory_create, &um, &pmd, be->eng, plain);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, kind == K_WRITE ? um : t->m.mem},
                            {DNNL_ARG_TO, kind == K_WRITE ? t->m.mem : um}};
    int rc = run(be, p, 2, a, err);
    if (rc == 0)
        rc = finish(be, err);
    dnnl_memory_destroy(um);
    be->stats.edge_reorders++;
    return rc;
}

static void dn_tensor_dims(const ptc__bt *t, int dims[4]) { memcpy(dims, t->dims, sizeof t->dims); }

static int dn_tensor_write(ptc__be *be, ptc__bt *t, const void *plain, ptc_error *err)
{
    TRY(nonnull(be, t, "tensor_write: t", err));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_write: plain is NULL");
    if (t->plain)
        memcpy(t->m.data, plain, (size_t)t->numel * sizeof(float));
    else
        TRY(edge_reorder(be, K_WRITE, t, (void *)(uintptr_t)plain, err));
    touch(be, t);
    return 0;
}

static int dn_tensor_read(ptc__be *be, const ptc__bt *t, void *plain, ptc_error *err)
{
    TRY(nonnull(be, t, "tensor_read: t", err));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_read: plain is NULL");
    if (t->plain) {
        memcpy(plain, t->m.data, (size_t)t->numel * sizeof(float));
        return 0;
    }
    return edge_reorder(be, K_READ, t, plain, err);
}

/* Raw form: the blocked layout with its padding (the padding is zero in every gradient and stays
 * zero under sums and scaling). The fingerprint covers what decides where an element lives. */
static int dn_tensor_raw_size(ptc__be *be, const ptc__bt *t, size_t *bytes, uint64_t *layout,
                              ptc_error *err)
{
    TRY(nonnull(be, t, "tensor_raw_size: t", err));
    if (!bytes || !layout)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_raw_size: NULL argument");
    const dnnl_memory_desc_t *md = &t->md;
    uint64_t h = ptc__fnv1a(PTC__FNV_START, "dnnl", 4);
    h = ptc__fnv1a(h, &md->ndims, sizeof md->ndims);
    h = ptc__fnv1a(h, md->dims, sizeof md->dims[0] * (size_t)md->ndims);
    h = ptc__fnv1a(h, md->padded_dims, sizeof md->padded_dims[0] * (size_t)md->ndims);
    h = ptc__fnv1a(h, &md->data_type, sizeof md->data_type);
    h = ptc__fnv1a(h, &md->format_kind, sizeof md->format_kind);
    if (md->format_kind == dnnl_blocked) {
        const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
        h = ptc__fnv1a(h, b->strides, sizeof b->strides[0] * (size_t)md->ndims);
        h = ptc__fnv1a(h, &b->inner_nblks, sizeof b->inner_nblks);
        h = ptc__fnv1a(h, b->inner_blks, sizeof b->inner_blks[0] * (size_t)b->inner_nblks);
        h = ptc__fnv1a(h, b->inner_idxs, sizeof b->inner_idxs[0] * (size_t)b->inner_nblks);
    }
    *bytes = t->m.nbytes;
    *layout = h;
    return 0;
}

static int dn_tensor_pack(ptc__be *be, const ptc__bt *t, void *dst, double scale, ptc_error *err)
{
    TRY(nonnull(be, t, "tensor_pack: t", err));
    if (!dst)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_pack: dst is NULL");
    if (scale == 1.0) {
        memcpy(dst, t->m.data, t->m.nbytes);
        return 0;
    }
    const float s = (float)scale, *x = t->m.data;
    float *y = dst;
    size_t n = t->m.nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * s;
    return 0;
}

static int dn_tensor_unpack(ptc__be *be, ptc__bt *t, const void *src, ptc_error *err)
{
    TRY(nonnull(be, t, "tensor_unpack: t", err));
    if (!src)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_unpack: src is NULL");
    memcpy(t->m.data, src, t->m.nbytes);
    touch(be, t);
    return 0;
}

static int dn_tensor_fill(ptc__be *be, ptc__bt *t, double value, ptc_error *err)
{
    TRY(nonnull(be, t, "tensor_fill: t", err));
    const float v = (float)value;
    if (v == 0.0f && !signbit(v)) {
        memset(t->m.data, 0, t->m.nbytes);
    } else if (t->m.nbytes == (size_t)t->numel * sizeof(float)) { /* no padding: any order */
        for (int64_t i = 0; i < t->numel; i++)
            t->m.data[i] = v;
    } else { /* the padding of a blocked layout must stay zero */
        float *tmp = ptc__malloc((size_t)t->numel * sizeof(float));
        if (!tmp)
            return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
        for (int64_t i = 0; i < t->numel; i++)
            tmp[i] = v;
        int rc = dn_tensor_write(be, t, tmp, err);
        ptc__free(tmp);
        return rc;
    }
    touch(be, t);
    return 0;
}

/* ---- loops of this file ------------------------------------------------------------------------
 * Elementwise passes over raw buffers, split between the instance's threads in chunks of whole
 * 64-byte lines when this file is compiled with OpenMP. */

typedef void (*range_fn)(void *ctx, int64_t i0, int64_t i1);

static void par_range(const ptc__be *be, int64_t n, range_fn fn, void *ctx)
{
#ifdef _OPENMP
    const int nt = n >= (1 << 15) ? nthreads(be) : 1;
    if (nt > 1) {
#pragma omp parallel num_threads(nt)
        {
            const int t = omp_get_thread_num(), T = omp_get_num_threads();
            const int64_t chunk = ((n + T - 1) / T + 15) / 16 * 16;
            const int64_t i0 = chunk * t < n ? chunk * t : n;
            fn(ctx, i0, i0 + chunk < n ? i0 + chunk : n);
        }
        return;
    }
#else
    (void)be;
#endif
    fn(ctx, 0, n);
}

/* torch's threshold_backward(dy, y, 0): dx = y <= 0 ? 0 : dy (a NaN y lets dy through).
 * oneDNN 2.6's eltwise backward runs this at a fifth of the speed of a binary add. */
typedef struct mask_k {
    const float *y, *dy;
    float *dx;
} mask_k;

static void relu_mask_scalar(void *ctx, int64_t i0, int64_t i1)
{
    const mask_k *k = ctx;
    for (int64_t i = i0; i < i1; i++)
        k->dx[i] = k->y[i] <= 0 ? 0.0f : k->dy[i];
}

#ifdef PTC_DNNL_X86
__attribute__((target("avx512f"))) static void relu_mask_avx512(void *ctx, int64_t i0, int64_t i1)
{
    const mask_k *k = ctx;
    const __m512 zero = _mm512_setzero_ps();
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        __mmask16 keep = _mm512_cmp_ps_mask(_mm512_loadu_ps(k->y + i), zero, _CMP_NLE_UQ);
        _mm512_storeu_ps(k->dx + i, _mm512_maskz_mov_ps(keep, _mm512_loadu_ps(k->dy + i)));
    }
    relu_mask_scalar(ctx, i, i1);
}
#endif

/* torch.relu as clamp_min(v, 0): negative values become 0, -0.0 and NaN pass (oneDNN's relu,
 * max(v, 0), turns NaN into 0 and would hide a diverged step); y = relu(a) or relu(a + b). */
typedef struct relu_k {
    const float *a, *b; /* b NULL: relu(a) */
    float *y;
} relu_k;

static void relu_scalar(void *ctx, int64_t i0, int64_t i1)
{
    const relu_k *k = ctx;
    for (int64_t i = i0; i < i1; i++) {
        float v = k->b ? k->a[i] + k->b[i] : k->a[i];
        k->y[i] = v < 0 ? 0.0f : v;
    }
}

#ifdef PTC_DNNL_X86
__attribute__((target("avx512f"))) static void relu_avx512(void *ctx, int64_t i0, int64_t i1)
{
    const relu_k *k = ctx;
    const __m512 zero = _mm512_setzero_ps();
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        __m512 v = _mm512_loadu_ps(k->a + i);
        if (k->b)
            v = _mm512_add_ps(v, _mm512_loadu_ps(k->b + i));
        _mm512_storeu_ps(k->y + i,
                         _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero));
    }
    relu_scalar(ctx, i, i1);
}
#endif

static void relu_loop(const ptc__be *be, const float *a, const float *b, float *y, int64_t n)
{
    relu_k k = {a, b, y};
    range_fn fn = relu_scalar;
#ifdef PTC_DNNL_X86
    if (__builtin_cpu_supports("avx512f"))
        fn = relu_avx512;
#endif
    par_range(be, n, fn, &k);
}

/* n elements of raw buffers that share one layout (padding stays zero: y is zero there). */
static void relu_mask(const ptc__be *be, const float *y, const float *dy, float *dx, int64_t n)
{
    mask_k k = {y, dy, dx};
    range_fn fn = relu_mask_scalar;
#ifdef PTC_DNNL_X86
    if (__builtin_cpu_supports("avx512f"))
        fn = relu_mask_avx512;
#endif
    par_range(be, n, fn, &k);
}

/* ---- elementwise ----------------------------------------------------------------------------- */

static int dn_add(ptc__be *be, const ptc__bt *a, const ptc__bt *b, ptc__bt *y, int relu,
                  ptc_error *err)
{
    TRY(nonnull(be, a, "add: a", err));
    TRY(expect_like(be, b, a, "add: b", err));
    TRY(expect_like(be, y, a, "add: y", err));
    if (relu) { /* elementwise in place is safe: element i reads a[i], b[i] before writing y[i] */
        relu_loop(be, a->m.data, b->m.data, y->m.data, (int64_t)(y->m.nbytes / sizeof(float)));
        touch(be, y);
        return 0;
    }
    if (y == b && y != a) { /* oneDNN computes in place on src0 only; a + b == b + a */
        const ptc__bt *t = a;
        a = b;
        b = t;
    }
    dnnl_primitive_t p;
    set_threads(be);
    TRY(pc_get(be, K_ADD, y, &p, err));
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC_0, a->m.mem}, {DNNL_ARG_SRC_1, b->m.mem}, {DNNL_ARG_DST, y->m.mem}};
    TRY(run(be, p, 3, args, err));
    TRY(finish(be, err));
    touch(be, y);
    return 0;
}

static int dn_accumulate(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(nonnull(be, y, "accumulate: y", err));
    TRY(expect_like(be, x, y, "accumulate: x", err));
    /* The binary add in place on src0 (oneDNN's sum primitive has no JIT kernel for blocked
     * layouts in 2.6 and runs at half the speed): y = y + x. */
    dnnl_primitive_t p;
    set_threads(be);
    TRY(pc_get(be, K_ADD, y, &p, err));
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC_0, y->m.mem}, {DNNL_ARG_SRC_1, x->m.mem}, {DNNL_ARG_DST, y->m.mem}};
    TRY(run(be, p, 3, args, err));
    TRY(finish(be, err));
    touch(be, y);
    return 0;
}

static int dn_relu_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(nonnull(be, x, "relu_fwd: x", err));
    TRY(expect_like(be, y, x, "relu_fwd: y", err));
    relu_loop(be, x->m.data, NULL, y->m.data, (int64_t)(y->m.nbytes / sizeof(float)));
    touch(be, y);
    return 0;
}

static int dn_relu_bwd(ptc__be *be, const ptc__bt *y, const ptc__bt *dy, ptc__bt *dx,
                       ptc_error *err)
{
    TRY(nonnull(be, y, "relu_bwd: y", err));
    TRY(expect_like(be, dy, y, "relu_bwd: dy", err));
    TRY(expect_like(be, dx, y, "relu_bwd: dx", err));
    relu_mask(be, y->m.data, dy->m.data, dx->m.data, (int64_t)(y->m.nbytes / sizeof(float)));
    touch(be, dx);
    return 0;
}

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
    DN(dnnl_memory_desc_init_by_tag, &ax, 4, dx, dnnl_f32, dnnl_format_tag_any);
    DN(dnnl_memory_desc_init_by_tag, &aw, 4, dw, dnnl_f32, dnnl_format_tag_any);
    DN(dnnl_memory_desc_init_by_tag, &ay, 4, dy, dnnl_f32, dnnl_format_tag_any);
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
    for (int i = 0; i < 2; i++) {
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
    TRY(dprim_from_pd(be, d, best, err));

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
        rc = bind_init(be, ops[kind][i].b, ops[kind][i].tmd,
                       dnnl_primitive_desc_query_md(d->pd, ops[kind][i].q, 0), ops[kind][i].out,
                       ops[kind][i].weight, err);
    if (rc == 0)
        return 0;
    for (int i = 0; i < 3; i++) /* leave the plan as if this primitive had never been made */
        bind_free(ops[kind][i].b);
    dprim_free(d);
    return rc;
}

static void conv_free(conv_part *cv)
{
    ptc__free(cv->wt_raw);
    ptc__free(cv->dwt_raw);
    dprim_free(&cv->bwd_d);
    dprim_free(&cv->bwd_w);
    dprim_free(&cv->fwd);
    bind *b[] = {&cv->f_x,  &cv->f_w, &cv->f_y,  &cv->d_dy, &cv->d_w,
                 &cv->d_dx, &cv->w_x, &cv->w_dy, &cv->w_dw};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        bind_free(b[i]);
}

static void dn_plan_free(ptc__be *be, ptc__op *op)
{
    (void)be;
    if (!op)
        return;
    if (op->kind == PLAN_CONV) {
        conv_free(&op->u.conv);
    } else if (op->kind == PLAN_BN) {
        ptc__free(op->u.bn.buf);
    } else if (op->kind == PLAN_POOL) {
        pool_part *pp = &op->u.pool;
        dprim_free(&pp->bwd);
        dprim_free(&pp->fwd);
        dmem_free(&pp->ws);
        dmem_free(&pp->yscratch);
    }
    ptc__free(op);
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
        fc_build(cv, be->blk, w->m.data, cv->wt, nthreads(be));
        cv->wt_stamp = w->version;
        be->stats.weight_reorders++;
    }
}

static int dn_conv_plan(ptc__be *be, ptc__op **out, const ptc__conv_shape *s, ptc_error *err)
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
    int rc = layout_md(be, &cv->xmd, PTC__ROLE_ACT, dx, 0, NULL, err);
    if (rc == 0)
        rc = layout_md(be, &cv->wmd, PTC__ROLE_CONV_W, dw, 0, NULL, err);
    if (rc == 0)
        rc = layout_md(be, &cv->ymd, PTC__ROLE_ACT, dy, 0, NULL, err);
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
        set_threads(be);
        rc = conv_make(be, cv, CONV_FWD, &cv->fwd, err);
    }
    if (rc < 0) {
        dn_plan_free(be, op);
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

static int dn_conv_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *w, ptc__bt *y,
                       ptc_error *err)
{
    TRY(conv_check(be, op, "conv_fwd", err));
    conv_part *cv = &op->u.conv;
    const ptc__conv_shape *s = &cv->s;
    TRY(expect(be, x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, "conv_fwd: x", err));
    TRY(expect(be, w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s, "conv_fwd: w", err));
    TRY(expect(be, y, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow, "conv_fwd: y", err));
    set_threads(be);
    if (cv->fc) {
        fc_weights(be, cv, w);
        DN(dnnl_sgemm, 'N', 'N', s->n, cv->fout, cv->fin, 1.0f, x->m.data, cv->fin, cv->wt,
           cv->fout, 0.0f, y->m.data, cv->fout);
        touch(be, y);
        return 0;
    }
    dnnl_exec_arg_t a[3] = {
        {DNNL_ARG_SRC, NULL}, {DNNL_ARG_WEIGHTS, NULL}, {DNNL_ARG_DST, bind_out(&cv->f_y, y)}};
    TRY(bind_in(be, &cv->f_x, x, &a[0].memory, err));
    TRY(bind_in(be, &cv->f_w, w, &a[1].memory, err));
    TRY(run(be, cv->fwd.p, 3, a, err));
    TRY(bind_out_done(be, &cv->f_y, y, err));
    return finish(be, err);
}

static int dn_conv_bwd_data(ptc__be *be, ptc__op *op, const ptc__bt *dy, const ptc__bt *w,
                            ptc__bt *dx, ptc_error *err)
{
    TRY(conv_check(be, op, "conv_bwd_data", err));
    conv_part *cv = &op->u.conv;
    const ptc__conv_shape *s = &cv->s;
    TRY(expect(be, dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow, "conv_bwd_data: dy", err));
    TRY(expect(be, w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s, "conv_bwd_data: w", err));
    TRY(expect(be, dx, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, "conv_bwd_data: dx", err));
    set_threads(be);
    if (cv->fc) {
        fc_weights(be, cv, w);
        DN(dnnl_sgemm, 'N', 'T', s->n, cv->fin, cv->fout, 1.0f, dy->m.data, cv->fout, cv->wt,
           cv->fout, 0.0f, dx->m.data, cv->fin);
        touch(be, dx);
        return 0;
    }
    if (!cv->bwd_d.p)
        TRY(conv_make(be, cv, CONV_BWD_D, &cv->bwd_d, err));
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, NULL},
                            {DNNL_ARG_WEIGHTS, NULL},
                            {DNNL_ARG_DIFF_SRC, bind_out(&cv->d_dx, dx)}};
    TRY(bind_in(be, &cv->d_dy, dy, &a[0].memory, err));
    TRY(bind_in(be, &cv->d_w, w, &a[1].memory, err));
    TRY(run(be, cv->bwd_d.p, 3, a, err));
    TRY(bind_out_done(be, &cv->d_dx, dx, err));
    return finish(be, err);
}

static int dn_conv_bwd_weight(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *dy,
                              ptc__bt *dw, ptc_error *err)
{
    TRY(conv_check(be, op, "conv_bwd_weight", err));
    conv_part *cv = &op->u.conv;
    const ptc__conv_shape *s = &cv->s;
    TRY(expect(be, x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, "conv_bwd_weight: x", err));
    TRY(expect(be, dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow, "conv_bwd_weight: dy", err));
    TRY(expect(be, dw, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s, "conv_bwd_weight: dw", err));
    set_threads(be);
    if (cv->fc) {
        if (!cv->dwt && !(cv->dwt = falloc(cv->fin * cv->fout, &cv->dwt_raw)))
            return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
        DN(dnnl_sgemm, 'T', 'N', cv->fin, cv->fout, s->n, 1.0f, x->m.data, cv->fin, dy->m.data,
           cv->fout, 0.0f, cv->dwt, cv->fout);
        fc_fold(cv, be->blk, cv->dwt, dw->m.data, dw->version != cv->dw_stamp, nthreads(be));
        touch(be, dw);
        cv->dw_stamp = dw->version;
        return 0;
    }
    if (!cv->bwd_w.p)
        TRY(conv_make(be, cv, CONV_BWD_W, &cv->bwd_w, err));
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, NULL},
                            {DNNL_ARG_DIFF_DST, NULL},
                            {DNNL_ARG_DIFF_WEIGHTS, bind_out(&cv->w_dw, dw)}};
    TRY(bind_in(be, &cv->w_x, x, &a[0].memory, err));
    TRY(bind_in(be, &cv->w_dy, dy, &a[1].memory, err));
    TRY(run(be, cv->bwd_w.p, 3, a, err));
    TRY(bind_out_done(be, &cv->w_dw, dw, err));
    return finish(be, err);
}

/* ---- batch normalization ----------------------------------------------------------------------
 * Written here, not with oneDNN's primitive: oneDNN 2.6 sums the statistics in float, which puts
 * errors of a few 1e-6 into the normalised output (3.7e-6 absolute, measured on channels of 2048
 * values with means up to 3), ten to fifty times what torch's double sums leave. A ReLU follows
 * most batchnorms, and an output that lies within that error of zero gets the other mask: the
 * element's gradient then enters its channel's bias gradient, and through it every gradient below,
 * or not. One such element moved the gradients of ResNet-18's first layers by 1e-2 (relative) in
 * a second training step, while the same step from the same state in torch float32 stayed within
 * 2e-6 of a float64 oracle; a run then leaves torch's trajectory from its second step on.
 *
 * So the statistics and the gradient sums are accumulated in double, in two passes (the mean,
 * then the squared deviations from it), and each output is computed in double and rounded once:
 * the formulas of the ref backend (ref_kernels.h) and of torch's CPU kernels, whose accumulation
 * type for float is double. The two backends then differ only in the order of their sums.
 *
 * Layout: an activation is nChwBc (B = the tensor's block) or nchw, and element (n, c, p) of both
 * is at ((n CB + c / B) HW + p) B + c % B, with B = 1 and CB = C for nchw. A reduction is split
 * into items of one channel block and a fixed range of images; the partial sums are combined in
 * item order, so results do not depend on the number of threads. */


enum { BN_SUM, BN_SSD, BN_GRAD };  /* what a reduction sums */
enum { BN_MEAN, BN_INVSTD, BN_GAMMA, BN_SHIFT, BN_PROJ }; /* rows of the per-channel constants */

/* One pass of a batchnorm over an activation: its buffers and the per-channel constants. */
typedef struct bn_pass {
    int N, CB, B, ranges;
    int64_t HW;
    const float *x, *y, *dy; /* y: the forward output whose mask applies to dy (NULL: none) */
    float *out;              /* y (normalise) or dx */
    int relu;
    const double *k;         /* [5][C]: mean, invstd, gamma, then beta or the mean gradient, proj */
    double *part;            /* [C][ranges][2] */
} bn_pass;

static void bn_range(const bn_pass *q, int r, int *n0, int *n1)
{
    *n0 = (int)((int64_t)q->N * r / q->ranges);
    *n1 = (int)((int64_t)q->N * (r + 1) / q->ranges);
}

/* Partial sums of channel block cb over range r, in double: BN_SUM x; BN_SSD (x - mean)^2;
 * BN_GRAD d and (x - mean) d with d = dy masked by y <= 0. */
static void bn_reduce_scalar(const bn_pass *q, int what, int cb, int r)
{
    const int B = q->B, C = q->CB * B;
    const double *mean = q->k + BN_MEAN * C + cb * B;
    double a[16] = {0}, s[16] = {0};
    int n0, n1;
    bn_range(q, r, &n0, &n1);
    for (int n = n0; n < n1; n++) {
        const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * B;
        for (int64_t i = 0; i < q->HW * B; i++) {
            const int l = (int)(i % B);
            const double x = q->x[o + i];
            if (what == BN_SUM) {
                a[l] += x;
            } else if (what == BN_SSD) {
                double d = x - mean[l];
                a[l] += d * d;
            } else {
                double d = q->y && q->y[o + i] <= 0 ? 0.0 : (double)q->dy[o + i];
                a[l] += d;
                s[l] += (x - mean[l]) * d;
            }
        }
    }
    for (int l = 0; l < B; l++) {
        double *p = q->part + (((int64_t)cb * B + l) * q->ranges + r) * 2;
        p[0] = a[l];
        p[1] = s[l];
    }
}

/* Image n of channel block cb: the normalised output, or dx. */
static void bn_map_scalar(const bn_pass *q, int grad, int cb, int n)
{
    const int B = q->B, C = q->CB * B;
    const double *k = q->k;
    const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * B;
    for (int64_t i = 0; i < q->HW * B; i++) {
        const int c = cb * B + (int)(i % B);
        const double xc = (double)q->x[o + i] - k[BN_MEAN * C + c];
        if (!grad) {
            float v = (float)(xc * k[BN_INVSTD * C + c] * k[BN_GAMMA * C + c] + k[BN_SHIFT * C + c]);
            q->out[o + i] = q->relu && v < 0 ? 0.0f : v;
        } else {
            double d = q->y && q->y[o + i] <= 0 ? 0.0 : (double)q->dy[o + i];
            q->out[o + i] = (float)((d - k[BN_SHIFT * C + c] - xc * k[BN_PROJ * C + c]) *
                                    k[BN_INVSTD * C + c] * k[BN_GAMMA * C + c]);
        }
    }
}

#ifdef PTC_DNNL_X86
/* The same for B = 16 with AVX-512: each position of a channel block is 16 floats, two vectors of
 * 8 doubles; two positions at a time on separate accumulators, added in a fixed order. */
__attribute__((target("avx512f"))) static void bn_reduce16(const bn_pass *q, int what, int cb,
                                                          int r)
{
    const int C = q->CB * 16;
    const double *mean = q->k + BN_MEAN * C + cb * 16;
    const __m512d m0 = _mm512_loadu_pd(mean), m1 = _mm512_loadu_pd(mean + 8);
    const __m256 zero = _mm256_setzero_ps();
    __m512d a[2][2], s[2][2];
    for (int j = 0; j < 2; j++)
        a[j][0] = a[j][1] = s[j][0] = s[j][1] = _mm512_setzero_pd();
    int n0, n1;
    bn_range(q, r, &n0, &n1);
    for (int n = n0; n < n1; n++) {
        const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * 16;
        for (int64_t p = 0; p < q->HW; p++) {
            const int j = (int)(p & 1);
            const float *xp = q->x + o + p * 16;
            __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(xp)),
                    x1 = _mm512_cvtps_pd(_mm256_loadu_ps(xp + 8));
            if (what == BN_SUM) {
                a[j][0] = _mm512_add_pd(a[j][0], x0);
                a[j][1] = _mm512_add_pd(a[j][1], x1);
                continue;
            }
            x0 = _mm512_sub_pd(x0, m0);
            x1 = _mm512_sub_pd(x1, m1);
            if (what == BN_SSD) {
                a[j][0] = _mm512_add_pd(a[j][0], _mm512_mul_pd(x0, x0));
                a[j][1] = _mm512_add_pd(a[j][1], _mm512_mul_pd(x1, x1));
                continue;
            }
            __m256 d0 = _mm256_loadu_ps(q->dy + o + p * 16), d1 = _mm256_loadu_ps(q->dy + o + p * 16 + 8);
            if (q->y) { /* y <= 0 drops the gradient; a NaN y lets it through */
                d0 = _mm256_and_ps(d0, _mm256_cmp_ps(_mm256_loadu_ps(q->y + o + p * 16), zero, _CMP_NLE_UQ));
                d1 = _mm256_and_ps(d1, _mm256_cmp_ps(_mm256_loadu_ps(q->y + o + p * 16 + 8), zero, _CMP_NLE_UQ));
            }
            const __m512d e0 = _mm512_cvtps_pd(d0), e1 = _mm512_cvtps_pd(d1);
            a[j][0] = _mm512_add_pd(a[j][0], e0);
            a[j][1] = _mm512_add_pd(a[j][1], e1);
            s[j][0] = _mm512_add_pd(s[j][0], _mm512_mul_pd(x0, e0));
            s[j][1] = _mm512_add_pd(s[j][1], _mm512_mul_pd(x1, e1));
        }
    }
    double av[16], sv[16];
    _mm512_storeu_pd(av, _mm512_add_pd(a[0][0], a[1][0]));
    _mm512_storeu_pd(av + 8, _mm512_add_pd(a[0][1], a[1][1]));
    _mm512_storeu_pd(sv, _mm512_add_pd(s[0][0], s[1][0]));
    _mm512_storeu_pd(sv + 8, _mm512_add_pd(s[0][1], s[1][1]));
    for (int l = 0; l < 16; l++) {
        double *pp = q->part + (((int64_t)cb * 16 + l) * q->ranges + r) * 2;
        pp[0] = av[l];
        pp[1] = sv[l];
    }
}

__attribute__((target("avx512f"))) static void bn_map16(const bn_pass *q, int grad, int cb, int n)
{
    const int C = q->CB * 16;
    const double *k = q->k;
    __m512d K[5][2];
    for (int row = 0; row < 5; row++)
        for (int h = 0; h < 2; h++)
            K[row][h] = _mm512_loadu_pd(k + row * C + cb * 16 + h * 8);
    const __m256 zero = _mm256_setzero_ps();
    const int64_t o = ((int64_t)n * q->CB + cb) * q->HW * 16;
    for (int64_t p = 0; p < q->HW; p++) {
        for (int h = 0; h < 2; h++) {
            const int64_t e = o + p * 16 + h * 8;
            const __m512d xc = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(q->x + e)), K[BN_MEAN][h]);
            __m256 v;
            if (!grad) {
                v = _mm512_cvtpd_ps(_mm512_add_pd(
                    _mm512_mul_pd(_mm512_mul_pd(xc, K[BN_INVSTD][h]), K[BN_GAMMA][h]), K[BN_SHIFT][h]));
                if (q->relu) /* v < 0 becomes 0; -0.0 and NaN pass, as torch's relu */
                    v = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
            } else {
                __m256 d = _mm256_loadu_ps(q->dy + e);
                if (q->y)
                    d = _mm256_and_ps(d, _mm256_cmp_ps(_mm256_loadu_ps(q->y + e), zero, _CMP_NLE_UQ));
                __m512d t = _mm512_sub_pd(_mm512_sub_pd(_mm512_cvtps_pd(d), K[BN_SHIFT][h]),
                                          _mm512_mul_pd(xc, K[BN_PROJ][h]));
                v = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_mul_pd(t, K[BN_INVSTD][h]), K[BN_GAMMA][h]));
            }
            _mm256_storeu_ps(q->out + e, v);
        }
    }
}
#endif

static int bn_wide(const bn_pass *q)
{
#ifdef PTC_DNNL_X86
    return q->B == 16 && __builtin_cpu_supports("avx512f");
#else
    (void)q;
    return 0;
#endif
}

/* Runs a reduction over every (channel block, range) item and combines the partial sums of
 * channel c into sum[c] and dot[c] (dot may be NULL), in range order. */
static void bn_reduce(const ptc__be *be, const bn_pass *q, int what, double *sum, double *dot)
{
    const int items = q->CB * q->ranges, wide = bn_wide(q);
    (void)be;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads(be)) schedule(static) if (items > 1)
#endif
    for (int it = 0; it < items; it++) {
#ifdef PTC_DNNL_X86
        if (wide) {
            bn_reduce16(q, what, it / q->ranges, it % q->ranges);
            continue;
        }
#endif
        bn_reduce_scalar(q, what, it / q->ranges, it % q->ranges);
    }
    (void)wide;
    const int C = q->CB * q->B;
    for (int c = 0; c < C; c++) {
        const double *p = q->part + (int64_t)c * q->ranges * 2;
        double a = 0, s = 0;
        for (int r = 0; r < q->ranges; r++) {
            a += p[2 * r];
            s += p[2 * r + 1];
        }
        sum[c] = a;
        if (dot)
            dot[c] = s;
    }
}

/* The elementwise pass over every (channel block, image) item: output or dx. */
static void bn_map(const ptc__be *be, const bn_pass *q, int grad)
{
    const int items = q->CB * q->N, wide = bn_wide(q);
    (void)be;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads(be)) schedule(static) if (items > 1)
#endif
    for (int it = 0; it < items; it++) {
#ifdef PTC_DNNL_X86
        if (wide) {
            bn_map16(q, grad, it % q->CB, it / q->CB);
            continue;
        }
#endif
        bn_map_scalar(q, grad, it % q->CB, it / q->CB);
    }
    (void)wide;
}

static int dn_bn_plan(ptc__be *be, ptc__op **out, const int dims[4], double eps, ptc_error *err)
{
    *out = NULL;
    if (!dims || dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[3] < 1 || !(eps >= 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: bn_plan: bad shape or eps");
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    op->owner = be;
    op->kind = PLAN_BN;
    bn_part *b = &op->u.bn;
    memcpy(b->dims, dims, sizeof b->dims);
    b->eps = eps;
    b->ranges = dims[0] < BN_RANGES ? dims[0] : BN_RANGES;
    if (!(b->buf = ptc__malloc((size_t)dims[1] * ((size_t)b->ranges * 2 + 5) * sizeof(double)))) {
        ptc__free(op);
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    }
    *out = op;
    return 0;
}

static int bn_check(const ptc__be *be, const ptc__op *op, const ptc__bt *x, const char *what,
                    ptc_error *err)
{
    if (!op || op->kind != PLAN_BN || op->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s needs a bn plan of this instance", what);
    const int *d = op->u.bn.dims;
    return expect(be, x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3], what, err);
}

static int vec_check(const ptc__be *be, const ptc__bt *t, int c, const char *what, ptc_error *err)
{
    return expect(be, t, PTC__ROLE_VEC, 1, c, 1, 1, what, err);
}

/* The pass over x with the plan's buffers; k rows are filled by the caller. */
static bn_pass bn_pass_of(const bn_part *b, const ptc__bt *x, float *out)
{
    const int B = x->blk ? x->blk : 1, C = b->dims[1];
    return (bn_pass){.N = b->dims[0],
                     .CB = C / B,
                     .B = B,
                     .ranges = b->ranges,
                     .HW = (int64_t)b->dims[2] * b->dims[3],
                     .x = x->m.data,
                     .out = out,
                     .k = b->buf + (size_t)C * b->ranges * 2,
                     .part = b->buf};
}

static int dn_bn_fwd_train(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                           const ptc__bt *beta, ptc__bt *y, ptc__bt *save_mean,
                           ptc__bt *save_invstd, ptc__bt *running_mean, ptc__bt *running_var,
                           double momentum, int relu, ptc_error *err)
{
    TRY(bn_check(be, op, x, "bn_fwd_train: x", err));
    bn_part *b = &op->u.bn;
    const int C = b->dims[1];
    TRY(expect_like(be, y, x, "bn_fwd_train: y", err));
    TRY(vec_check(be, gamma, C, "bn_fwd_train: gamma", err));
    TRY(vec_check(be, beta, C, "bn_fwd_train: beta", err));
    TRY(vec_check(be, save_mean, C, "bn_fwd_train: save_mean", err));
    TRY(vec_check(be, save_invstd, C, "bn_fwd_train: save_invstd", err));
    TRY(vec_check(be, running_mean, C, "bn_fwd_train: running_mean", err));
    TRY(vec_check(be, running_var, C, "bn_fwd_train: running_var", err));
    const int64_t M = (int64_t)b->dims[0] * b->dims[2] * b->dims[3];
    if (M < 2) /* torch: "Expected more than 1 value per channel when training" */
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: bn_fwd_train needs more than 1 value per channel");
    bn_pass q = bn_pass_of(b, x, y->m.data);
    q.relu = relu != 0;
    double *k = (double *)q.k, *mean = k + BN_MEAN * C, *invstd = k + BN_INVSTD * C;
    bn_reduce(be, &q, BN_SUM, mean, NULL);
    for (int c = 0; c < C; c++)
        mean[c] /= (double)M;
    bn_reduce(be, &q, BN_SSD, invstd, NULL); /* the sums of squared deviations, for now */
    float *rm = running_mean->m.data, *rv = running_var->m.data;
    for (int c = 0; c < C; c++) {
        const double ssd = invstd[c];
        invstd[c] = 1.0 / sqrt(ssd / (double)M + b->eps);
        k[BN_GAMMA * C + c] = gamma->m.data[c];
        k[BN_SHIFT * C + c] = beta->m.data[c];
        save_mean->m.data[c] = (float)mean[c];
        save_invstd->m.data[c] = (float)invstd[c];
        /* torch: momentum x + (1 - momentum) r in double, with the unbiased variance */
        rm[c] = (float)(momentum * mean[c] + (1.0 - momentum) * (double)rm[c]);
        rv[c] = (float)(momentum * (ssd / (double)(M - 1)) + (1.0 - momentum) * (double)rv[c]);
    }
    bn_map(be, &q, 0);
    touch(be, y);
    touch(be, save_mean);
    touch(be, save_invstd);
    touch(be, running_mean);
    touch(be, running_var);
    return 0;
}

static int dn_bn_fwd_eval(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                          const ptc__bt *beta, const ptc__bt *running_mean,
                          const ptc__bt *running_var, ptc__bt *y, int relu, ptc_error *err)
{
    TRY(bn_check(be, op, x, "bn_fwd_eval: x", err));
    bn_part *b = &op->u.bn;
    const int C = b->dims[1];
    TRY(expect_like(be, y, x, "bn_fwd_eval: y", err));
    TRY(vec_check(be, gamma, C, "bn_fwd_eval: gamma", err));
    TRY(vec_check(be, beta, C, "bn_fwd_eval: beta", err));
    TRY(vec_check(be, running_mean, C, "bn_fwd_eval: running_mean", err));
    TRY(vec_check(be, running_var, C, "bn_fwd_eval: running_var", err));
    bn_pass q = bn_pass_of(b, x, y->m.data);
    q.relu = relu != 0;
    double *k = (double *)q.k;
    for (int c = 0; c < C; c++) {
        k[BN_MEAN * C + c] = running_mean->m.data[c];
        k[BN_INVSTD * C + c] = 1.0 / sqrt((double)running_var->m.data[c] + b->eps);
        k[BN_GAMMA * C + c] = gamma->m.data[c];
        k[BN_SHIFT * C + c] = beta->m.data[c];
    }
    bn_map(be, &q, 0);
    touch(be, y);
    return 0;
}

/* torch's batch_norm_backward in training mode, with d = dy masked by y <= 0 when y is given:
 *     dbeta = sum(d), dgamma = sum(d (x - mean)) invstd,
 *     dx = (d - sum(d) / M - (x - mean) sum(d (x - mean)) invstd^2 / M) invstd gamma. */
static int dn_bn_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                     const ptc__bt *dy, const ptc__bt *gamma, const ptc__bt *save_mean,
                     const ptc__bt *save_invstd, ptc__bt *dx, ptc__bt *dgamma, ptc__bt *dbeta,
                     ptc_error *err)
{
    TRY(bn_check(be, op, x, "bn_bwd: x", err));
    bn_part *b = &op->u.bn;
    const int C = b->dims[1];
    if (y)
        TRY(expect_like(be, y, x, "bn_bwd: y", err));
    TRY(expect_like(be, dy, x, "bn_bwd: dy", err));
    TRY(expect_like(be, dx, x, "bn_bwd: dx", err));
    TRY(vec_check(be, gamma, C, "bn_bwd: gamma", err));
    TRY(vec_check(be, save_mean, C, "bn_bwd: save_mean", err));
    TRY(vec_check(be, save_invstd, C, "bn_bwd: save_invstd", err));
    if (dgamma)
        TRY(vec_check(be, dgamma, C, "bn_bwd: dgamma", err));
    if (dbeta)
        TRY(vec_check(be, dbeta, C, "bn_bwd: dbeta", err));
    const int64_t M = (int64_t)b->dims[0] * b->dims[2] * b->dims[3];
    bn_pass q = bn_pass_of(b, x, dx->m.data);
    q.y = y ? y->m.data : NULL;
    q.dy = dy->m.data;
    double *k = (double *)q.k, *sum = k + BN_SHIFT * C, *dot = k + BN_PROJ * C;
    for (int c = 0; c < C; c++) {
        k[BN_MEAN * C + c] = save_mean->m.data[c];
        k[BN_INVSTD * C + c] = save_invstd->m.data[c];
        k[BN_GAMMA * C + c] = gamma->m.data[c];
    }
    bn_reduce(be, &q, BN_GRAD, sum, dot);
    for (int c = 0; c < C; c++) {
        const double is = k[BN_INVSTD * C + c];
        if (dbeta)
            dbeta->m.data[c] = (float)sum[c];
        if (dgamma)
            dgamma->m.data[c] = (float)(dot[c] * is);
        sum[c] /= (double)M;              /* the mean gradient */
        dot[c] = dot[c] * is * is / (double)M; /* the projection on x - mean */
    }
    bn_map(be, &q, 1);
    touch(be, dx);
    if (dgamma)
        touch(be, dgamma);
    if (dbeta)
        touch(be, dbeta);
    return 0;
}

/* ---- pooling --------------------------------------------------------------------------------- */

static int dn_maxpool_plan(ptc__be *be, ptc__op **out, const ptc__pool_shape *s, ptc_error *err)
{
    *out = NULL;
    if (!s || s->n < 1 || s->c < 1 || s->h < 1 || s->w < 1 || s->r < 1 || s->s < 1 ||
        s->stride < 1 || s->pad < 0 || 2 * s->pad > s->r || 2 * s->pad > s->s)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: maxpool_plan: bad shape (pad must be at most half the window)");
    int64_t oh = (int64_t)s->h + 2 * (int64_t)s->pad - s->r,
            ow = (int64_t)s->w + 2 * (int64_t)s->pad - s->s;
    if (oh < 0 || ow < 0 || oh / s->stride + 1 != s->oh || ow / s->stride + 1 != s->ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: maxpool_plan: output %dx%d does not follow from the input", s->oh,
                        s->ow);
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "dnnl: out of memory");
    op->owner = be;
    op->kind = PLAN_POOL;
    pool_part *pp = &op->u.pool;
    pp->s = *s;
    const int dx[4] = {s->n, s->c, s->h, s->w}, dy[4] = {s->n, s->c, s->oh, s->ow};
    const dnnl_dims_t strides = {s->stride, s->stride}, kernel = {s->r, s->s},
                      pad = {s->pad, s->pad};
    dnnl_pooling_desc_t fd, bd;
    dnnl_status_t st;
    int rc = layout_md(be, &pp->xmd, PTC__ROLE_ACT, dx, 0, NULL, err);
    if (rc == 0)
        rc = layout_md(be, &pp->ymd, PTC__ROLE_ACT, dy, 0, NULL, err);
    if (rc < 0)
        goto fail;
    set_threads(be);
    /* oneDNN's max pooling skips padding and keeps the first maximum of the window in row-major
     * order (strictly greater replaces), as torch does; the workspace holds that argmax. */
    st = dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &pp->xmd,
                                        &pp->ymd, strides, kernel, pad, pad);
    if (st != dnnl_success) {
        rc = dn_fail(err, st, "dnnl_pooling_forward_desc_init", __LINE__);
        goto fail;
    }
    rc = dprim_make(be, &pp->fwd, &fd, NULL, NULL, err);
    if (rc == 0)
        rc = dmem_new(be, &pp->ws,
                      dnnl_primitive_desc_query_md(pp->fwd.pd, dnnl_query_workspace_md, 0), err);
    if (rc < 0)
        goto fail;
    st = dnnl_pooling_backward_desc_init(&bd, dnnl_pooling_max, &pp->xmd, &pp->ymd, strides, kernel,
                                         pad, pad);
    if (st != dnnl_success) {
        rc = dn_fail(err, st, "dnnl_pooling_backward_desc_init", __LINE__);
        goto fail;
    }
    rc = dprim_make(be, &pp->bwd, &bd, NULL, pp->fwd.pd, err);
    if (rc < 0)
        goto fail;
    *out = op;
    return 0;
fail:
    dn_plan_free(be, op);
    return rc;
}

static int pool_check(const ptc__be *be, const ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                      const char *what, ptc_error *err)
{
    if (!op || op->kind != PLAN_POOL || op->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s needs a maxpool plan of this instance",
                        what);
    const ptc__pool_shape *s = &op->u.pool.s;
    TRY(expect(be, x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w, what, err));
    return expect(be, y, PTC__ROLE_ACT, s->n, s->c, s->oh, s->ow, what, err);
}

static int dn_maxpool_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(pool_check(be, op, x, y, "maxpool_fwd", err));
    pool_part *pp = &op->u.pool;
    set_threads(be);
    dnnl_exec_arg_t a[3] = {
        {DNNL_ARG_SRC, x->m.mem}, {DNNL_ARG_DST, y->m.mem}, {DNNL_ARG_WORKSPACE, pp->ws.mem}};
    TRY(run(be, pp->fwd.p, 3, a, err));
    TRY(finish(be, err));
    touch(be, y);
    pp->x_stamp = x->version;
    pp->y_stamp = y->version;
    return 0;
}

static int dn_maxpool_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                          const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    TRY(pool_check(be, op, x, y, "maxpool_bwd", err));
    TRY(expect_like(be, dy, y, "maxpool_bwd: dy", err));
    TRY(expect_like(be, dx, x, "maxpool_bwd: dx", err));
    pool_part *pp = &op->u.pool;
    set_threads(be);
    if (pp->x_stamp != x->version || pp->y_stamp != y->version) {
        /* The workspace is another forward's: find the argmax of this x again. */
        if (!pp->yscratch.mem)
            TRY(dmem_new(be, &pp->yscratch, &pp->ymd, err));
        dnnl_exec_arg_t f[3] = {{DNNL_ARG_SRC, x->m.mem},
                                {DNNL_ARG_DST, pp->yscratch.mem},
                                {DNNL_ARG_WORKSPACE, pp->ws.mem}};
        TRY(run(be, pp->fwd.p, 3, f, err));
        pp->x_stamp = pp->y_stamp = 0;
    }
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, dy->m.mem},
                            {DNNL_ARG_WORKSPACE, pp->ws.mem},
                            {DNNL_ARG_DIFF_SRC, dx->m.mem}};
    TRY(run(be, pp->bwd.p, 3, a, err));
    TRY(finish(be, err));
    touch(be, dx);
    return 0;
}

/* Global average pool over the blocked or plain activation layout, in float like torch's mean:
 * the sum over h x w in row-major order, divided by h * w. */
static int dn_avgpool_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(nonnull(be, x, "avgpool_fwd: x", err));
    if (x->role != PTC__ROLE_ACT)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: avgpool_fwd: x must be an ACT tensor");
    const int N = x->dims[0], C = x->dims[1];
    const int64_t HW = (int64_t)x->dims[2] * x->dims[3];
    TRY(expect(be, y, PTC__ROLE_MAT, N, C, 1, 1, "avgpool_fwd: y", err));
    const float *xd = x->m.data;
    float *yd = y->m.data;
    const float div = (float)HW;
    const int B = x->blk;
    if (B) {
        const int CB = C / B;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads(be)) if (N * C * HW > 65536)
#endif
        for (int i = 0; i < N * CB; i++) {
            const float *xp = xd + (int64_t)i * HW * B;
            float acc[16] = {0};
            for (int64_t p = 0; p < HW; p++)
                for (int ci = 0; ci < B; ci++)
                    acc[ci] += xp[p * B + ci];
            for (int ci = 0; ci < B; ci++)
                yd[(int64_t)i * B + ci] = acc[ci] / div; /* n, cb, ci -> n * C + cb * B + ci */
        }
    } else {
        for (int64_t pl = 0; pl < (int64_t)N * C; pl++) {
            float acc = 0;
            for (int64_t p = 0; p < HW; p++)
                acc += xd[pl * HW + p];
            yd[pl] = acc / div;
        }
    }
    touch(be, y);
    return 0;
}

static int dn_avgpool_bwd(ptc__be *be, const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    TRY(nonnull(be, dx, "avgpool_bwd: dx", err));
    if (dx->role != PTC__ROLE_ACT)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: avgpool_bwd: dx must be an ACT tensor");
    const int N = dx->dims[0], C = dx->dims[1];
    const int64_t HW = (int64_t)dx->dims[2] * dx->dims[3];
    TRY(expect(be, dy, PTC__ROLE_MAT, N, C, 1, 1, "avgpool_bwd: dy", err));
    const float *g = dy->m.data;
    float *d = dx->m.data;
    const float div = (float)HW;
    const int B = dx->blk;
    if (B) {
        const int CB = C / B;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads(be)) if (N * C * HW > 65536)
#endif
        for (int i = 0; i < N * CB; i++) {
            float v[16];
            for (int ci = 0; ci < B; ci++)
                v[ci] = g[(int64_t)i * B + ci] / div;
            float *dp = d + (int64_t)i * HW * B;
            for (int64_t p = 0; p < HW; p++)
                for (int ci = 0; ci < B; ci++)
                    dp[p * B + ci] = v[ci];
        }
    } else {
        for (int64_t pl = 0; pl < (int64_t)N * C; pl++) {
            const float v = g[pl] / div;
            for (int64_t p = 0; p < HW; p++)
                d[pl * HW + p] = v;
        }
    }
    touch(be, dx);
    return 0;
}

/* ---- linear (row-major GEMMs on the plain MAT layout) ---------------------------------------- */

static int dn_linear_fwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *b,
                         ptc__bt *y, ptc_error *err)
{
    TRY(nonnull(be, x, "linear_fwd: x", err));
    TRY(nonnull(be, w, "linear_fwd: w", err));
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(expect(be, x, PTC__ROLE_MAT, N, K, 1, 1, "linear_fwd: x", err));
    TRY(expect(be, w, PTC__ROLE_MAT, M, K, 1, 1, "linear_fwd: w", err));
    if (b)
        TRY(vec_check(be, b, M, "linear_fwd: b", err));
    TRY(expect(be, y, PTC__ROLE_MAT, N, M, 1, 1, "linear_fwd: y", err));
    set_threads(be);
    float *yd = y->m.data;
    if (b)
        for (int n = 0; n < N; n++)
            memcpy(yd + (int64_t)n * M, b->m.data, (size_t)M * sizeof(float));
    DN(dnnl_sgemm, 'N', 'T', N, M, K, 1.0f, x->m.data, K, w->m.data, K, b ? 1.0f : 0.0f, yd, M);
    touch(be, y);
    return 0;
}

static int dn_linear_bwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *dy,
                         ptc__bt *dx, ptc__bt *dw, ptc__bt *db, ptc_error *err)
{
    TRY(nonnull(be, x, "linear_bwd: x", err));
    TRY(nonnull(be, w, "linear_bwd: w", err));
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(expect(be, x, PTC__ROLE_MAT, N, K, 1, 1, "linear_bwd: x", err));
    TRY(expect(be, w, PTC__ROLE_MAT, M, K, 1, 1, "linear_bwd: w", err));
    TRY(expect(be, dy, PTC__ROLE_MAT, N, M, 1, 1, "linear_bwd: dy", err));
    if (dx)
        TRY(expect(be, dx, PTC__ROLE_MAT, N, K, 1, 1, "linear_bwd: dx", err));
    TRY(expect(be, dw, PTC__ROLE_MAT, M, K, 1, 1, "linear_bwd: dw", err));
    if (db)
        TRY(vec_check(be, db, M, "linear_bwd: db", err));
    set_threads(be);
    if (dx) { /* dx [N][K] = dy [N][M] w [M][K] */
        DN(dnnl_sgemm, 'N', 'N', N, K, M, 1.0f, dy->m.data, M, w->m.data, K, 0.0f, dx->m.data, K);
        touch(be, dx);
    }
    /* dw [M][K] = dy^T x */
    DN(dnnl_sgemm, 'T', 'N', M, K, N, 1.0f, dy->m.data, M, x->m.data, K, 0.0f, dw->m.data, K);
    touch(be, dw);
    if (db) {
        for (int m = 0; m < M; m++) {
            double acc = 0;
            for (int n = 0; n < N; n++)
                acc += dy->m.data[(int64_t)n * M + m];
            db->m.data[m] = (float)acc;
        }
        touch(be, db);
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

static int dn_sgd_step(ptc__be *be, ptc__bt *p, const ptc__bt *g, ptc__bt *buf, const ptc__sgd *h,
                       ptc_error *err)
{
    TRY(nonnull(be, p, "sgd_step: p", err));
    if (!h)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: sgd_step: hyperparameters are NULL");
    TRY(expect_like(be, g, p, "sgd_step: g", err));
    const int use_mom = h->momentum != 0;
    if (use_mom)
        TRY(expect_like(be, buf, p, "sgd_step: buf", err));
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
    par_range(be, (int64_t)(p->m.nbytes / sizeof(float)), fn, &k);
    touch(be, p);
    if (k.use_mom)
        touch(be, buf);
    return 0;
}

/* ---- the table ------------------------------------------------------------------------------- */

const ptc__backend_ops ptc__backend_dnnl = {
    .name = "dnnl",
    .open = dn_open,
    .close = dn_close,
    .tensor_new = dn_tensor_new,
    .tensor_free = dn_tensor_free,
    .tensor_dims = dn_tensor_dims,
    .tensor_write = dn_tensor_write,
    .tensor_read = dn_tensor_read,
    .tensor_fill = dn_tensor_fill,
    .tensor_raw_size = dn_tensor_raw_size,
    .tensor_pack = dn_tensor_pack,
    .tensor_unpack = dn_tensor_unpack,
    .add = dn_add,
    .accumulate = dn_accumulate,
    .conv_plan = dn_conv_plan,
    .conv_fwd = dn_conv_fwd,
    .conv_bwd_data = dn_conv_bwd_data,
    .conv_bwd_weight = dn_conv_bwd_weight,
    .bn_plan = dn_bn_plan,
    .bn_fwd_train = dn_bn_fwd_train,
    .bn_fwd_eval = dn_bn_fwd_eval,
    .bn_bwd = dn_bn_bwd,
    .relu_fwd = dn_relu_fwd,
    .relu_bwd = dn_relu_bwd,
    .maxpool_plan = dn_maxpool_plan,
    .maxpool_fwd = dn_maxpool_fwd,
    .maxpool_bwd = dn_maxpool_bwd,
    .avgpool_fwd = dn_avgpool_fwd,
    .avgpool_bwd = dn_avgpool_bwd,
    .linear_fwd = dn_linear_fwd,
    .linear_bwd = dn_linear_bwd,
    .sgd_step = dn_sgd_step,
    .plan_free = dn_plan_free,
};

/* The module's descriptor (lib/base/plugin.h). A test program that compiles this file next to
 * libptc_core (to reach ptc__dnnl_stats_get) defines PTC_MODULE_LINKED_IN: it is not a module
 * then, and lib/base/module.c is not linked in. */
#ifndef PTC_MODULE_LINKED_IN
static const ptc__plugin dnnl_plugin = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_BACKEND,
    .name = "dnnl",
    .summary = "oneDNN on the CPU, float32",
    .experimental = 0,
    .ops = &ptc__backend_dnnl,
    .probe = NULL, /* it runs wherever libdnnl loads, which loading the module already showed */
};
PTC__DEFINE_PLUGIN_ENTRY(dnnl_plugin)
#endif
