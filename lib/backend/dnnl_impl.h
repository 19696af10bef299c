/*
 * dnnl_impl.h - what the files of the oneDNN backend share: its objects (instance, tensor, plan),
 * the error macros, and the helpers and ops one file defines and another uses. Private to the
 * module: only lib/backend/dnnl*.c include it. The design (layouts, plans, versions, threads) is
 * described at the top of dnnl.c; the files are
 *   dnnl.c            the instance, tensors and their layouts, binds, the primitive cache, the
 *                     elementwise loops and ops, plan_free and the ops table
 *   dnnl_conv.c       convolutions: oneDNN's primitives, and those that run as matrix products
 *   dnnl_bn_pool.c    batch normalization (this backend's own loops) and max/average pooling
 *   dnnl_linear_sgd.c linear layers (GEMMs on the plain MAT layout) and the SGD step
 */
#ifndef PTC_BACKEND_DNNL_IMPL_H
#define PTC_BACKEND_DNNL_IMPL_H

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

#define PC_MAX    64 /* entries of the per-instance primitive cache */
#define BN_RANGES 4  /* image ranges per channel block in a batchnorm reduction */

/* Every oneDNN call goes through DN (return on failure) or DNG (goto fail with rc set); the
 * message names the file and line of the call. */
#define DN(fn, ...)                                                                                \
    do {                                                                                           \
        dnnl_status_t st_ = fn(__VA_ARGS__);                                                       \
        if (st_ != dnnl_success)                                                                   \
            return ptc__dn_fail(err, st_, #fn, __FILE__, __LINE__);                                \
    } while (0)
#define DNG(fn, ...)                                                                               \
    do {                                                                                           \
        dnnl_status_t st_ = fn(__VA_ARGS__);                                                       \
        if (st_ != dnnl_success) {                                                                 \
            rc = ptc__dn_fail(err, st_, #fn, __FILE__, __LINE__);                                  \
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
    int bf16;     /* PTC__PREC_BF16: convolutions and linear layers compute in bfloat16 */
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
    /* bf16: the operands of those matrix products rounded to bfloat16 ([N][fin], [N][fout]) */
    float *rx, *rdy;
    void *rx_raw, *rdy_raw;
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

typedef void (*range_fn)(void *ctx, int64_t i0, int64_t i1);

/* ---- shared functions (ptc__dn_*: internal to the module) ---------------------------------- */

/* dnnl.c */
int ptc__dn_fail(ptc_error *err, dnnl_status_t st, const char *fn, const char *file, int line);
void ptc__dn_touch(ptc__be *be, ptc__bt *t);
void ptc__dn_set_threads(ptc__be *be);
int ptc__dn_nthreads(const ptc__be *be);
int ptc__dn_dmem_new(ptc__be *be, dmem *m, const dnnl_memory_desc_t *md, ptc_error *err);
void ptc__dn_dprim_free(dprim *d);
int ptc__dn_dprim_from_pd(ptc__be *be, dprim *d, dnnl_primitive_desc_t pd, ptc_error *err);
int ptc__dn_dprim_make(ptc__be *be, dprim *d, const void *op_desc, const_dnnl_primitive_attr_t attr,
                       const_dnnl_primitive_desc_t hint, ptc_error *err);
int ptc__dn_run(ptc__be *be, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                ptc_error *err);
int ptc__dn_finish(ptc__be *be, ptc_error *err);
int ptc__dn_layout_md(const ptc__be *be, dnnl_memory_desc_t *md, ptc__role role, const int d[4],
                      int plain, int *blk_out, ptc_error *err);
int ptc__dn_nonnull(const ptc__be *be, const ptc__bt *t, const char *what, ptc_error *err);
int ptc__dn_expect(const ptc__be *be, const ptc__bt *t, ptc__role role, int n, int c, int h, int w,
                   const char *what, ptc_error *err);
int ptc__dn_expect_like(const ptc__be *be, const ptc__bt *t, const ptc__bt *like, const char *what,
                        ptc_error *err);
void ptc__dn_bind_free(bind *b);
int ptc__dn_bind_init(ptc__be *be, bind *b, const dnnl_memory_desc_t *tmd,
                      const dnnl_memory_desc_t *pmd, int out, int weight, ptc_error *err);
int ptc__dn_bind_in(ptc__be *be, bind *b, const ptc__bt *t, dnnl_memory_t *mem, ptc_error *err);
dnnl_memory_t ptc__dn_bind_out(const bind *b, const ptc__bt *t);
int ptc__dn_bind_out_done(ptc__be *be, bind *b, ptc__bt *t, ptc_error *err);
void ptc__dn_par_range(const ptc__be *be, int64_t n, range_fn fn, void *ctx);
void ptc__dn_plan_free(ptc__be *be, ptc__op *op);
/* bf16 precision: dst[i] = src[i] rounded to the nearest bfloat16 (ties to even, as torch's
 * float -> bfloat16 conversion; NaN stays NaN), kept in float32. dst may be src. */
void ptc__dn_round_bf16(const ptc__be *be, const float *src, float *dst, int64_t n);

/* dnnl_conv.c */
void ptc__dn_conv_free(conv_part *cv);
int ptc__dn_conv_plan(ptc__be *be, ptc__op **out, const ptc__conv_shape *s, ptc_error *err);
int ptc__dn_conv_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *w, ptc__bt *y,
                     ptc_error *err);
int ptc__dn_conv_bwd_data(ptc__be *be, ptc__op *op, const ptc__bt *dy, const ptc__bt *w,
                          ptc__bt *dx, ptc_error *err);
int ptc__dn_conv_bwd_weight(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *dy,
                            ptc__bt *dw, ptc_error *err);

/* dnnl_bn_pool.c */
int ptc__dn_bn_plan(ptc__be *be, ptc__op **out, const int dims[4], double eps, ptc_error *err);
int ptc__dn_vec_check(const ptc__be *be, const ptc__bt *t, int c, const char *what, ptc_error *err);
int ptc__dn_bn_fwd_train(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                         const ptc__bt *beta, ptc__bt *y, ptc__bt *save_mean, ptc__bt *save_invstd,
                         ptc__bt *running_mean, ptc__bt *running_var, double momentum, int relu,
                         ptc_error *err);
int ptc__dn_bn_fwd_eval(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                        const ptc__bt *beta, const ptc__bt *running_mean,
                        const ptc__bt *running_var, ptc__bt *y, int relu, ptc_error *err);
int ptc__dn_bn_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y, const ptc__bt *dy,
                   const ptc__bt *gamma, const ptc__bt *save_mean, const ptc__bt *save_invstd,
                   ptc__bt *dx, ptc__bt *dgamma, ptc__bt *dbeta, ptc_error *err);
int ptc__dn_maxpool_plan(ptc__be *be, ptc__op **out, const ptc__pool_shape *s, ptc_error *err);
int ptc__dn_maxpool_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, ptc__bt *y, ptc_error *err);
int ptc__dn_maxpool_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                        const ptc__bt *dy, ptc__bt *dx, ptc_error *err);
int ptc__dn_avgpool_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err);
int ptc__dn_avgpool_bwd(ptc__be *be, const ptc__bt *dy, ptc__bt *dx, ptc_error *err);

/* dnnl_linear_sgd.c */
int ptc__dn_bf16_check(ptc_error *err); /* PTC_EUNSUPPORTED without bf16 instructions */
int ptc__dn_linear_fwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *b,
                       ptc__bt *y, ptc_error *err);
int ptc__dn_linear_bwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *dy,
                       ptc__bt *dx, ptc__bt *dw, ptc__bt *db, ptc_error *err);
int ptc__dn_sgd_step(ptc__be *be, ptc__bt *p, const ptc__bt *g, ptc__bt *buf, const ptc__sgd *h,
                     ptc_error *err);

#endif /* PTC_BACKEND_DNNL_IMPL_H */
