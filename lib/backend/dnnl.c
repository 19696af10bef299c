/*
 * dnnl.c - the oneDNN backend (ptc__backend_dnnl): float32 on the CPU, fast. This file holds the
 * instance, the tensors and their layouts, binds, the primitive cache, the elementwise ops and the
 * ops table; the convolutions, batchnorm and pooling, linear and SGD are in dnnl_conv.c,
 * dnnl_bn_pool.c and dnnl_linear_sgd.c (dnnl_impl.h lists what they share).
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
 * Precision PTC__PREC_BF16 (processors with AVX512_BF16 or AMX only) follows
 * torch.autocast("cpu", dtype=torch.bfloat16): convolutions run oneDNN's bf16 primitives on bf16
 * copies of their input and weights (float32 accumulation, bf16 output), linear layers and the
 * convolutions that run as matrix products use bf16-rounded operands (dnnl_linear_sgd.c). Tensors
 * stay float32: a tensor that a bf16 op wrote holds bf16 values, and batchnorm, relu, pooling, the
 * loss, SGD and the parameters are float32, as torch's master weights and statistics are.
 *
 * Threads. Debian's libdnnl uses the OpenMP runtime (libgomp): params.threads is applied with
 * omp_set_num_threads on the calling thread before each op (found with dlsym when this file is
 * not compiled with -fopenmp). The build compiles it with -fopenmp, so the loops of this file
 * (batchnorm, SGD, relu, the dense-layer gathers) run on the same threads.
 */
#include "backend/dnnl_impl.h"

/* ---- errors ---------------------------------------------------------------------------------- */

int ptc__dn_fail(ptc_error *err, dnnl_status_t st, const char *fn, const char *file, int line)
{
    const char *base = strrchr(file, '/');
    int code = st == dnnl_out_of_memory       ? PTC_ENOMEM
               : st == dnnl_unimplemented     ? PTC_EUNSUPPORTED
               : st == dnnl_invalid_arguments ? PTC_EINVAL
                                              : PTC_EIO;
    return ptc__err(err, code, "", -1, "oneDNN %s failed (%s:%d): %s", fn, base ? base + 1 : file,
                    line, dnnl_status2str(st));
}

/* ---- small helpers --------------------------------------------------------------------------- */

void ptc__dn_touch(ptc__be *be, ptc__bt *t)
{
    t->version = ++be->clock;
}

void ptc__dn_set_threads(ptc__be *be)
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
int ptc__dn_nthreads(const ptc__be *be)
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

int ptc__dn_dmem_new(ptc__be *be, dmem *m, const dnnl_memory_desc_t *md, ptc_error *err)
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
        return ptc__dn_fail(err, st, "dnnl_memory_create", __FILE__, __LINE__);
    }
    return 0;
}

void ptc__dn_dprim_free(dprim *d)
{
    if (d->p)
        dnnl_primitive_destroy(d->p);
    if (d->pd)
        dnnl_primitive_desc_destroy(d->pd);
    d->p = NULL;
    d->pd = NULL;
}

/* Takes ownership of pd (destroyed on failure). */
int ptc__dn_dprim_from_pd(ptc__be *be, dprim *d, dnnl_primitive_desc_t pd, ptc_error *err)
{
    dnnl_status_t st = dnnl_primitive_create(&d->p, pd);
    if (st != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        d->p = NULL;
        return ptc__dn_fail(err, st, "dnnl_primitive_create", __FILE__, __LINE__);
    }
    d->pd = pd;
    be->stats.primitives++;
    return 0;
}

int ptc__dn_dprim_make(ptc__be *be, dprim *d, const void *op_desc, const_dnnl_primitive_attr_t attr,
                       const_dnnl_primitive_desc_t hint, ptc_error *err)
{
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create, &pd, op_desc, attr, be->eng, hint);
    return ptc__dn_dprim_from_pd(be, d, pd, err);
}

int ptc__dn_run(ptc__be *be, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                ptc_error *err)
{
    DN(dnnl_primitive_execute, p, be->strm, nargs, args);
    return 0;
}

int ptc__dn_finish(ptc__be *be, ptc_error *err)
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
int ptc__dn_layout_md(const ptc__be *be, dnnl_memory_desc_t *md, ptc__role role, const int d[4],
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
int ptc__dn_nonnull(const ptc__be *be, const ptc__bt *t, const char *what, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s is NULL", what);
    if (t->owner != be)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: %s belongs to another backend instance",
                        what);
    return 0;
}

/* t must be a tensor of this instance, of this role and shape. */
int ptc__dn_expect(const ptc__be *be, const ptc__bt *t, ptc__role role, int n, int c, int h, int w,
                   const char *what, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, t, what, err));
    if (t->role != role || t->dims[0] != n || t->dims[1] != c || t->dims[2] != h || t->dims[3] != w)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "dnnl: %s is %s [%d][%d][%d][%d], expected %s [%d][%d][%d][%d]", what,
                        role_name(t->role), t->dims[0], t->dims[1], t->dims[2], t->dims[3],
                        role_name(role), n, c, h, w);
    return 0;
}

int ptc__dn_expect_like(const ptc__be *be, const ptc__bt *t, const ptc__bt *like, const char *what,
                        ptc_error *err)
{
    return ptc__dn_expect(be, t, like->role, like->dims[0], like->dims[1], like->dims[2],
                          like->dims[3], what, err);
}

/* ---- binds ----------------------------------------------------------------------------------- */

void ptc__dn_bind_free(bind *b)
{
    if (b->reorder)
        dnnl_primitive_destroy(b->reorder);
    dmem_free(&b->scratch);
    memset(b, 0, sizeof *b);
}

int ptc__dn_bind_init(ptc__be *be, bind *b, const dnnl_memory_desc_t *tmd,
                      const dnnl_memory_desc_t *pmd, int out, int weight, ptc_error *err)
{
    memset(b, 0, sizeof *b);
    b->weight = weight;
    if (dnnl_memory_desc_equal(tmd, pmd))
        return 0;
    b->need = 1;
    TRY(ptc__dn_dmem_new(be, &b->scratch, pmd, err));
    dnnl_primitive_desc_t rpd;
    if (out)
        DN(dnnl_reorder_primitive_desc_create, &rpd, pmd, be->eng, tmd, be->eng, NULL);
    else
        DN(dnnl_reorder_primitive_desc_create, &rpd, tmd, be->eng, pmd, be->eng, NULL);
    dnnl_status_t st = dnnl_primitive_create(&b->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (st != dnnl_success) {
        b->reorder = NULL;
        return ptc__dn_fail(err, st, "dnnl_primitive_create", __FILE__, __LINE__);
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
int ptc__dn_bind_in(ptc__be *be, bind *b, const ptc__bt *t, dnnl_memory_t *mem, ptc_error *err)
{
    if (!b->need) {
        *mem = t->m.mem;
        return 0;
    }
    if (b->stamp != t->version) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, t->m.mem}, {DNNL_ARG_TO, b->scratch.mem}};
        TRY(ptc__dn_run(be, b->reorder, 2, a, err));
        count_reorder(be, b);
        b->stamp = t->version;
    }
    *mem = b->scratch.mem;
    return 0;
}

dnnl_memory_t ptc__dn_bind_out(const bind *b, const ptc__bt *t)
{
    return b->need ? b->scratch.mem : t->m.mem;
}

/* After the primitive wrote output t: reorder scratch into it when needed; t gets a new version. */
int ptc__dn_bind_out_done(ptc__be *be, bind *b, ptc__bt *t, ptc_error *err)
{
    if (b->need) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, b->scratch.mem}, {DNNL_ARG_TO, t->m.mem}};
        TRY(ptc__dn_run(be, b->reorder, 2, a, err));
        count_reorder(be, b);
    }
    ptc__dn_touch(be, t);
    return 0;
}

/* ---- the instance ---------------------------------------------------------------------------- */

static void dn_close(ptc__be *be)
{
    if (!be)
        return;
    for (int i = 0; i < be->ncache; i++)
        ptc__dn_dprim_free(&be->cache[i].d);
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
    if (p && p->precision != PTC__PREC_F32 && p->precision != PTC__PREC_BF16)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl backend: unknown precision %d",
                        (int)p->precision);
    if (p && p->precision == PTC__PREC_BF16)
        TRY(ptc__dn_bf16_check(err));
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
    be->bf16 = p && p->precision == PTC__PREC_BF16;
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
    ptc__dn_touch(be, t);
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
        TRY(ptc__dn_layout_md(be, &pmd, t->role, t->dims, 1, NULL, err));
        if (e->kind == K_WRITE)
            DN(dnnl_reorder_primitive_desc_create, &pd, &pmd, be->eng, md, be->eng, NULL);
        else
            DN(dnnl_reorder_primitive_desc_create, &pd, md, be->eng, &pmd, be->eng, NULL);
    }
    return ptc__dn_dprim_from_pd(be, &e->d, pd, err);
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
        ptc__dn_dprim_free(&be->cache[0].d);
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
    int rc = ptc__dn_layout_md(be, &t->md, role, dims, 0, &t->blk, err);
    if (rc == 0)
        rc = ptc__dn_layout_md(be, &pmd, role, dims, 1, NULL, err);
    if (rc == 0)
        rc = ptc__dn_dmem_new(be, &t->m, &t->md, err);
    if (rc < 0) {
        dn_tensor_free(be, t);
        return rc;
    }
    t->plain = dnnl_memory_desc_equal(&t->md, &pmd);
    ptc__dn_touch(be, t);
    *out = t;
    return 0;
}

static int edge_reorder(ptc__be *be, int kind, const ptc__bt *t, void *plain, ptc_error *err)
{
    dnnl_primitive_t p;
    dnnl_memory_desc_t pmd;
    dnnl_memory_t um;
    ptc__dn_set_threads(be);
    TRY(pc_get(be, kind, t, &p, err));
    TRY(ptc__dn_layout_md(be, &pmd, t->role, t->dims, 1, NULL, err));
    DN(dnnl_memory_create, &um, &pmd, be->eng, plain);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, kind == K_WRITE ? um : t->m.mem},
                            {DNNL_ARG_TO, kind == K_WRITE ? t->m.mem : um}};
    int rc = ptc__dn_run(be, p, 2, a, err);
    if (rc == 0)
        rc = ptc__dn_finish(be, err);
    dnnl_memory_destroy(um);
    be->stats.edge_reorders++;
    return rc;
}

static void dn_tensor_dims(const ptc__bt *t, int dims[4])
{
    memcpy(dims, t->dims, sizeof t->dims);
}

static int dn_tensor_write(ptc__be *be, ptc__bt *t, const void *plain, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, t, "tensor_write: t", err));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_write: plain is NULL");
    if (t->plain)
        memcpy(t->m.data, plain, (size_t)t->numel * sizeof(float));
    else
        TRY(edge_reorder(be, K_WRITE, t, (void *)(uintptr_t)plain, err));
    ptc__dn_touch(be, t);
    return 0;
}

static int dn_tensor_read(ptc__be *be, const ptc__bt *t, void *plain, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, t, "tensor_read: t", err));
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
    TRY(ptc__dn_nonnull(be, t, "tensor_raw_size: t", err));
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
    TRY(ptc__dn_nonnull(be, t, "tensor_pack: t", err));
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
    TRY(ptc__dn_nonnull(be, t, "tensor_unpack: t", err));
    if (!src)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_unpack: src is NULL");
    memcpy(t->m.data, src, t->m.nbytes);
    ptc__dn_touch(be, t);
    return 0;
}

/* Moves t's oneDNN memory onto raw (or back onto the buffer it was made with): the memory
 * object's handle and t->m.data change together, so primitives and the loops that read
 * t->m.data see the same bytes. t->m.raw stays the allocation dmem_free frees. */
static int dn_tensor_bind_raw(ptc__be *be, ptc__bt *t, void *raw, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, t, "tensor_bind_raw: t", err));
    if ((uintptr_t)raw % 64)
        return ptc__err(err, PTC_EINVAL, "", -1, "dnnl: tensor_bind_raw: %p is not 64-byte aligned",
                        raw);
    float *to = raw ? raw : (float *)(((uintptr_t)t->m.raw + 63) & ~(uintptr_t)63);
    if (to != t->m.data) {
        dnnl_status_t st = dnnl_memory_set_data_handle(t->m.mem, to);
        if (st != dnnl_success)
            return ptc__dn_fail(err, st, "dnnl_memory_set_data_handle", __FILE__, __LINE__);
        memcpy(to, t->m.data, t->m.nbytes);
        t->m.data = to;
    }
    ptc__dn_touch(be, t);
    return 0;
}

static int dn_tensor_fill(ptc__be *be, ptc__bt *t, double value, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, t, "tensor_fill: t", err));
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
    ptc__dn_touch(be, t);
    return 0;
}

/* ---- loops of this file ------------------------------------------------------------------------
 * Elementwise passes over raw buffers, split between the instance's threads in chunks of whole
 * 64-byte lines when this file is compiled with OpenMP. */

void ptc__dn_par_range(const ptc__be *be, int64_t n, range_fn fn, void *ctx)
{
#ifdef _OPENMP
    const int nt = n >= (1 << 15) ? ptc__dn_nthreads(be) : 1;
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
    ptc__dn_par_range(be, n, fn, &k);
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
    ptc__dn_par_range(be, n, fn, &k);
}

/* ---- elementwise ----------------------------------------------------------------------------- */

static int dn_add(ptc__be *be, const ptc__bt *a, const ptc__bt *b, ptc__bt *y, int relu,
                  ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, a, "add: a", err));
    TRY(ptc__dn_expect_like(be, b, a, "add: b", err));
    TRY(ptc__dn_expect_like(be, y, a, "add: y", err));
    if (relu) { /* elementwise in place is safe: element i reads a[i], b[i] before writing y[i] */
        relu_loop(be, a->m.data, b->m.data, y->m.data, (int64_t)(y->m.nbytes / sizeof(float)));
        ptc__dn_touch(be, y);
        return 0;
    }
    if (y == b && y != a) { /* oneDNN computes in place on src0 only; a + b == b + a */
        const ptc__bt *t = a;
        a = b;
        b = t;
    }
    dnnl_primitive_t p;
    ptc__dn_set_threads(be);
    TRY(pc_get(be, K_ADD, y, &p, err));
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC_0, a->m.mem}, {DNNL_ARG_SRC_1, b->m.mem}, {DNNL_ARG_DST, y->m.mem}};
    TRY(ptc__dn_run(be, p, 3, args, err));
    TRY(ptc__dn_finish(be, err));
    ptc__dn_touch(be, y);
    return 0;
}

static int dn_accumulate(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, y, "accumulate: y", err));
    TRY(ptc__dn_expect_like(be, x, y, "accumulate: x", err));
    /* The binary add in place on src0 (oneDNN's sum primitive has no JIT kernel for blocked
     * layouts in 2.6 and runs at half the speed): y = y + x. */
    dnnl_primitive_t p;
    ptc__dn_set_threads(be);
    TRY(pc_get(be, K_ADD, y, &p, err));
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC_0, y->m.mem}, {DNNL_ARG_SRC_1, x->m.mem}, {DNNL_ARG_DST, y->m.mem}};
    TRY(ptc__dn_run(be, p, 3, args, err));
    TRY(ptc__dn_finish(be, err));
    ptc__dn_touch(be, y);
    return 0;
}

static int dn_relu_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, x, "relu_fwd: x", err));
    TRY(ptc__dn_expect_like(be, y, x, "relu_fwd: y", err));
    relu_loop(be, x->m.data, NULL, y->m.data, (int64_t)(y->m.nbytes / sizeof(float)));
    ptc__dn_touch(be, y);
    return 0;
}

static int dn_relu_bwd(ptc__be *be, const ptc__bt *y, const ptc__bt *dy, ptc__bt *dx,
                       ptc_error *err)
{
    TRY(ptc__dn_nonnull(be, y, "relu_bwd: y", err));
    TRY(ptc__dn_expect_like(be, dy, y, "relu_bwd: dy", err));
    TRY(ptc__dn_expect_like(be, dx, y, "relu_bwd: dx", err));
    relu_mask(be, y->m.data, dy->m.data, dx->m.data, (int64_t)(y->m.nbytes / sizeof(float)));
    ptc__dn_touch(be, dx);
    return 0;
}

void ptc__dn_plan_free(ptc__be *be, ptc__op *op)
{
    (void)be;
    if (!op)
        return;
    if (op->kind == PLAN_CONV) {
        ptc__dn_conv_free(&op->u.conv);
    } else if (op->kind == PLAN_BN) {
        ptc__free(op->u.bn.buf);
    } else if (op->kind == PLAN_POOL) {
        pool_part *pp = &op->u.pool;
        ptc__dn_dprim_free(&pp->bwd);
        ptc__dn_dprim_free(&pp->fwd);
        dmem_free(&pp->ws);
        dmem_free(&pp->yscratch);
    }
    ptc__free(op);
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
    .tensor_bind_raw = dn_tensor_bind_raw,
    .add = dn_add,
    .accumulate = dn_accumulate,
    .conv_plan = ptc__dn_conv_plan,
    .conv_fwd = ptc__dn_conv_fwd,
    .conv_bwd_data = ptc__dn_conv_bwd_data,
    .conv_bwd_weight = ptc__dn_conv_bwd_weight,
    .bn_plan = ptc__dn_bn_plan,
    .bn_fwd_train = ptc__dn_bn_fwd_train,
    .bn_fwd_eval = ptc__dn_bn_fwd_eval,
    .bn_bwd = ptc__dn_bn_bwd,
    .relu_fwd = dn_relu_fwd,
    .relu_bwd = dn_relu_bwd,
    .maxpool_plan = ptc__dn_maxpool_plan,
    .maxpool_fwd = ptc__dn_maxpool_fwd,
    .maxpool_bwd = ptc__dn_maxpool_bwd,
    .avgpool_fwd = ptc__dn_avgpool_fwd,
    .avgpool_bwd = ptc__dn_avgpool_bwd,
    .linear_fwd = ptc__dn_linear_fwd,
    .linear_bwd = ptc__dn_linear_bwd,
    .sgd_step = ptc__dn_sgd_step,
    .plan_free = ptc__dn_plan_free,
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
