/*
 * resnet.c - torchvision's ResNet-18 (BasicBlock, layers [2, 2, 2, 2]) on a backend.
 *
 * Module order, and so state-dict order, is torchvision's: conv1, bn1, layer1..layer4 (each
 * block: conv1, bn1, conv2, bn2, then downsample.0 (1x1 conv) and downsample.1 (bn) in the first
 * block of layers 2 to 4), fc. Every BatchNorm2d holds weight, bias, running_mean, running_var and
 * num_batches_tracked.
 *
 * Forward of a block: c1 = conv1(x); r1 = relu(bn1(c1)); c2 = conv2(r1); n2 = bn2(c2);
 * identity = x or bn(downsample conv(x)); out = relu(n2 + identity). Backward walks the same
 * tensors in reverse; the ReLU after the residual add is undone with the mask of out, the one
 * inside the block with the mask of r1 (fused into the batchnorm backward).
 *
 * Initialisation is PyTorch's in distribution (the draws cannot be torch's: its generator is not
 * reproduced): conv weights normal(0, sqrt(2 / fan_out)) (kaiming_normal_, mode fan_out, relu);
 * batchnorm weight 1, bias 0, running mean 0, var 1; fc weight and bias uniform(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)) (nn.Linear's reset_parameters). A run that must match torch's numbers starts
 * from a torch checkpoint (ptc train --init).
 */
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_ENTRIES 160
#define NAME_BYTES  48
#define BN_EPS      1e-5
#define BN_MOMENTUM 0.1
/* Activation sets kept, one per input shape (n, h, w), least recently used replaced first: a
 * training run alternates at most four (its batch and last batch, evaluation's batch and last
 * batch), an embedder classifying images of several sizes keeps its most recent four. */
#define MAX_SETS 4
/* Inputs are at least this tall and wide (torchvision's ResNet-18 down to a 1x1 final map), and
 * at most this, so that the arithmetic of every shape stays far inside int. */
#define MIN_SIDE 32
#define MAX_SIDE (1 << 16)

typedef struct conv_l {
    ptc__entry *w;
    int cin, cout, k, stride, pad;
} conv_l;

typedef struct bn_l {
    ptc__entry *w, *b, *rm, *rv, *nbt;
    int c;
} bn_l;

typedef struct block_l {
    conv_l conv1, conv2, ds;
    bn_l bn1, bn2, dsbn;
    int has_ds;
} block_l;

/* What one block needs at one batch size. */
typedef struct block_a {
    ptc__op *p1, *p2, *pds, *b1, *b2, *bds;
    ptc__bt *c1, *r1, *c2, *n2, *d, *dn, *out;          /* forward */
    ptc__bt *m1, *s1, *m2, *s2, *mds, *sds;             /* saved batch statistics */
    ptc__bt *g_c1, *g_r1, *g_c2, *g_n2, *g_d, *g_in_ds; /* gradients */
} block_a;

/* The tensors and plans of one input shape. Gradient tensors (g_*) are made by the first
 * training forward at that shape (has_grads): an evaluation-only shape never holds them. */
typedef struct act_set {
    int n, h, w; /* the input [n][3][h][w] */
    int has_grads;
    uint64_t used; /* the model's use clock at its latest use (least recently used goes first) */
    ptc__op *pconv1, *pbn1, *ppool;
    ptc__bt *x, *c1, *b1, *p, *g_c1, *g_b1, *g_p, *m1, *s1;
    block_a blk[8];
    ptc__bt *g_blk[9]; /* gradient at the input of block i (g_blk[8]: at layer4's output) */
    ptc__bt *avg, *logits, *g_avg, *g_logits;
    ptc__bt *g_x; /* gradient of layer 1's input when the stem has no pool (unused otherwise) */
} act_set;

struct ptc__model {
    ptc__arch arch;
    int classes;
    const ptc__backend_ops *ops;
    ptc__be *be;
    ptc__entry e[MAX_ENTRIES];
    char names[MAX_ENTRIES][NAME_BYTES];
    size_t ne, nparams;
    conv_l conv1;
    bn_l bn1;
    block_l blk[8];
    ptc__entry *fc_w, *fc_b;
    act_set sets[MAX_SETS];
    size_t nsets;
    uint64_t clock;  /* ticks once per get_set */
    act_set *last;   /* the set of the last training forward */
    int trained;     /* a training forward happened since the last backward */
    int has_dlogits; /* ptc__model_loss wrote last->g_logits for the next backward */
    ptc__grad_hook hook;
    void *hook_ctx;
    ptc__bn_sync bn_sync; /* synchronised batchnorm when set */
    void *bn_sync_ctx;
    ptc__syncbn_scratch syncbn;
    char pre_dataset[32]; /* ptc__model_set_preprocess; "" when not set */
    double pre_mean[3], pre_std[3];
};

void ptc__model_set_preprocess(ptc__model *m, const char *dataset, const double mean[3],
                               const double std[3])
{
    snprintf(m->pre_dataset, sizeof m->pre_dataset, "%s", dataset);
    memcpy(m->pre_mean, mean, sizeof m->pre_mean);
    memcpy(m->pre_std, std, sizeof m->pre_std);
}

int ptc__model_preprocess(const ptc__model *m, const char **dataset, double mean[3], double std[3])
{
    if (!m->pre_dataset[0])
        return 0;
    *dataset = m->pre_dataset;
    memcpy(mean, m->pre_mean, sizeof m->pre_mean);
    memcpy(std, m->pre_std, sizeof m->pre_std);
    return 1;
}

int ptc__arch_from_name(const char *name)
{
    if (strcmp(name, "resnet18") == 0)
        return PTC__ARCH_RESNET18;
    if (strcmp(name, "resnet18-cifar") == 0)
        return PTC__ARCH_RESNET18_CIFAR;
    return -1;
}

const char *ptc__arch_name(ptc__arch a)
{
    return a == PTC__ARCH_RESNET18_CIFAR ? "resnet18-cifar" : "resnet18";
}

/* ---- building ---------------------------------------------------------------------------------- */

/* The backend shape and role of an entry's tensors. */
static ptc__role entry_dims(const ptc__entry *e, int dims[4])
{
    dims[0] = dims[1] = dims[2] = dims[3] = 1;
    if (e->ndim == 4) {
        for (int i = 0; i < 4; i++)
            dims[i] = (int)e->shape[i];
        return PTC__ROLE_CONV_W;
    }
    if (e->ndim == 2) {
        dims[0] = (int)e->shape[0];
        dims[1] = (int)e->shape[1];
        return PTC__ROLE_MAT;
    }
    dims[1] = (int)e->shape[0];
    return PTC__ROLE_VEC;
}

static ptc__entry *add_entry(ptc__model *m, const char *prefix, const char *leaf,
                             ptc__entry_kind kind, int ndim, const int64_t *shape, ptc_error *err)
{
    if (m->ne == MAX_ENTRIES) {
        ptc__err(err, PTC_ELIMIT, "", -1, "too many state dict entries");
        return NULL;
    }
    ptc__entry *e = &m->e[m->ne];
    snprintf(m->names[m->ne], NAME_BYTES, "%s%s%s", prefix, prefix[0] ? "." : "", leaf);
    m->ne++;
    e->name = m->names[m->ne - 1];
    e->kind = kind;
    e->ndim = ndim;
    e->numel = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        e->numel *= shape[i];
    }
    if (kind == PTC__ENTRY_COUNTER) {
        e->counter = ptc__calloc(1, sizeof *e->counter);
        if (!e->counter) {
            ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
            return NULL;
        }
        return e;
    }
    int dims[4];
    ptc__role role = entry_dims(e, dims);
    if (m->ops->tensor_new(m->be, &e->value, role, dims, err) < 0)
        return NULL;
    if (kind == PTC__ENTRY_PARAM) {
        m->nparams++;
        if (m->ops->tensor_new(m->be, &e->grad, role, dims, err) < 0)
            return NULL;
    }
    return e;
}

static int make_conv(ptc__model *m, conv_l *c, const char *name, int cin, int cout, int k,
                     int stride, int pad, ptc_error *err)
{
    int64_t shape[4] = {cout, cin, k, k};
    *c = (conv_l){NULL, cin, cout, k, stride, pad};
    c->w = add_entry(m, name, "weight", PTC__ENTRY_PARAM, 4, shape, err);
    return c->w ? 0 : err->code;
}

static int make_bn(ptc__model *m, bn_l *b, const char *name, int c, ptc_error *err)
{
    int64_t shape[1] = {c};
    b->c = c;
    if (!(b->w = add_entry(m, name, "weight", PTC__ENTRY_PARAM, 1, shape, err)) ||
        !(b->b = add_entry(m, name, "bias", PTC__ENTRY_PARAM, 1, shape, err)) ||
        !(b->rm = add_entry(m, name, "running_mean", PTC__ENTRY_BUFFER, 1, shape, err)) ||
        !(b->rv = add_entry(m, name, "running_var", PTC__ENTRY_BUFFER, 1, shape, err)) ||
        !(b->nbt = add_entry(m, name, "num_batches_tracked", PTC__ENTRY_COUNTER, 0, NULL, err)))
        return err->code;
    return 0;
}

/* splitmix64 and a uniform double in [0, 1) (53 bits). */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s)
{
    return (double)(mix(s) >> 11) * 0x1p-53;
}

static int fill_host(ptc__model *m, ptc__entry *e, int kind, double a, uint64_t *rng,
                     ptc_error *err)
{
    /* kind 0: constant a; 1: normal(0, a) by Box-Muller; 2: uniform(-a, a) */
    float *buf = ptc__malloc((size_t)e->numel * sizeof *buf);
    if (!buf)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    for (int64_t i = 0; i < e->numel; i++) {
        if (kind == 0) {
            buf[i] = (float)a;
        } else if (kind == 1) {
            double u1 = uniform01(rng), u2 = uniform01(rng);
            buf[i] = (float)(a * sqrt(-2.0 * log1p(-u1)) * cos(2.0 * M_PI * u2));
        } else {
            buf[i] = (float)(a * (2.0 * uniform01(rng) - 1.0));
        }
    }
    int rc = m->ops->tensor_write(m->be, e->value, buf, err);
    ptc__free(buf);
    return rc;
}

static int init_params(ptc__model *m, uint64_t seed, ptc_error *err)
{
    uint64_t rng = seed ^ 0x7265736e65743138ull; /* "resnet18" */
    int rc = 0;
    for (size_t i = 0; i < m->ne && rc == 0; i++) {
        ptc__entry *e = &m->e[i];
        const char *leaf = strrchr(e->name, '.') + 1;
        if (e->kind == PTC__ENTRY_COUNTER)
            continue;
        if (e->ndim == 4) /* kaiming_normal_(mode='fan_out', nonlinearity='relu') */
            rc = fill_host(m, e, 1, sqrt(2.0 / (double)(e->shape[0] * e->shape[2] * e->shape[3])),
                           &rng, err);
        else if (e == m->fc_w || e == m->fc_b) /* nn.Linear: bound 1 / sqrt(fan_in) */
            rc = fill_host(m, e, 2, 1.0 / sqrt((double)m->fc_w->shape[1]), &rng, err);
        else /* batchnorm: weight 1, bias 0, running_mean 0, running_var 1 */
            rc = fill_host(m, e, 0, strcmp(leaf, "weight") == 0 || strcmp(leaf, "running_var") == 0,
                           &rng, err);
    }
    return rc;
}

int ptc__model_new(ptc__model **out, const ptc__model_params *p, ptc_error *err)
{
    if (!out || !p || !p->ops || !p->be || p->num_classes < 1 ||
        (p->arch != PTC__ARCH_RESNET18 && p->arch != PTC__ARCH_RESNET18_CIFAR))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__model_new: invalid arguments");
    ptc__model *m = ptc__calloc(1, sizeof *m);
    if (!m)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    m->arch = p->arch;
    m->classes = p->num_classes;
    m->ops = p->ops;
    m->be = p->be;
    int cifar = p->arch == PTC__ARCH_RESNET18_CIFAR;
    int rc =
        make_conv(m, &m->conv1, "conv1", 3, 64, cifar ? 3 : 7, cifar ? 1 : 2, cifar ? 1 : 3, err);
    if (rc == 0)
        rc = make_bn(m, &m->bn1, "bn1", 64, err);
    static const int widths[4] = {64, 128, 256, 512};
    int cin = 64;
    for (int l = 0; l < 4 && rc == 0; l++) {
        for (int b = 0; b < 2 && rc == 0; b++) {
            block_l *bl = &m->blk[l * 2 + b];
            int cout = widths[l], stride = (l > 0 && b == 0) ? 2 : 1;
            char pre[32], name[48];
            snprintf(pre, sizeof pre, "layer%d.%d", l + 1, b);
            snprintf(name, sizeof name, "%s.conv1", pre);
            if ((rc = make_conv(m, &bl->conv1, name, cin, cout, 3, stride, 1, err)))
                break;
            snprintf(name, sizeof name, "%s.bn1", pre);
            if ((rc = make_bn(m, &bl->bn1, name, cout, err)))
                break;
            snprintf(name, sizeof name, "%s.conv2", pre);
            if ((rc = make_conv(m, &bl->conv2, name, cout, cout, 3, 1, 1, err)))
                break;
            snprintf(name, sizeof name, "%s.bn2", pre);
            if ((rc = make_bn(m, &bl->bn2, name, cout, err)))
                break;
            bl->has_ds = stride != 1 || cin != cout;
            if (bl->has_ds) {
                snprintf(name, sizeof name, "%s.downsample.0", pre);
                if ((rc = make_conv(m, &bl->ds, name, cin, cout, 1, stride, 0, err)))
                    break;
                snprintf(name, sizeof name, "%s.downsample.1", pre);
                if ((rc = make_bn(m, &bl->dsbn, name, cout, err)))
                    break;
            }
            cin = cout;
        }
    }
    if (rc == 0) {
        int64_t ws[2] = {m->classes, 512}, bs[1] = {m->classes};
        if (!(m->fc_w = add_entry(m, "fc", "weight", PTC__ENTRY_PARAM, 2, ws, err)) ||
            !(m->fc_b = add_entry(m, "fc", "bias", PTC__ENTRY_PARAM, 1, bs, err)))
            rc = err->code;
    }
    if (rc == 0)
        rc = init_params(m, p->seed, err);
    if (rc < 0) {
        ptc__model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static void free_set(ptc__model *m, act_set *s)
{
    const ptc__backend_ops *o = m->ops;
    ptc__bt **ts[] = {&s->x,  &s->c1, &s->b1,  &s->p,      &s->g_c1,  &s->g_b1,     &s->g_p,
                      &s->m1, &s->s1, &s->avg, &s->logits, &s->g_avg, &s->g_logits, &s->g_x};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        o->tensor_free(m->be, *ts[i]);
    o->plan_free(m->be, s->pconv1);
    o->plan_free(m->be, s->pbn1);
    o->plan_free(m->be, s->ppool);
    for (int b = 0; b < 8; b++) {
        block_a *a = &s->blk[b];
        ptc__bt *bt[] = {a->c1,   a->r1,   a->c2,   a->n2,  a->d,      a->dn,  a->out,
                         a->m1,   a->s1,   a->m2,   a->s2,  a->mds,    a->sds, a->g_c1,
                         a->g_r1, a->g_c2, a->g_n2, a->g_d, a->g_in_ds};
        for (size_t i = 0; i < sizeof bt / sizeof *bt; i++)
            o->tensor_free(m->be, bt[i]);
        ptc__op *ops[] = {a->p1, a->p2, a->pds, a->b1, a->b2, a->bds};
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
            o->plan_free(m->be, ops[i]);
    }
    for (int i = 0; i < 9; i++)
        if (i != 0 || s->g_blk[0] != s->g_p)
            o->tensor_free(m->be, s->g_blk[i]);
    memset(s, 0, sizeof *s);
}

void ptc__model_free(ptc__model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nsets; i++)
        free_set(m, &m->sets[i]);
    for (size_t i = 0; i < m->ne; i++) {
        m->ops->tensor_free(m->be, m->e[i].value);
        m->ops->tensor_free(m->be, m->e[i].grad);
        m->ops->tensor_free(m->be, m->e[i].momentum);
        ptc__free(m->e[i].counter);
    }
    ptc__syncbn_scratch_free(&m->syncbn);
    ptc__free(m);
}

size_t ptc__model_nentries(const ptc__model *m)
{
    return m->ne;
}
ptc__entry *ptc__model_entry(ptc__model *m, size_t i)
{
    return i < m->ne ? &m->e[i] : NULL;
}
size_t ptc__model_nparams(const ptc__model *m)
{
    return m->nparams;
}
int ptc__model_classes(const ptc__model *m)
{
    return m->classes;
}
ptc__arch ptc__model_arch(const ptc__model *m)
{
    return m->arch;
}

ptc__entry *ptc__model_find(ptc__model *m, const char *name)
{
    for (size_t i = 0; i < m->ne; i++)
        if (strcmp(m->e[i].name, name) == 0)
            return &m->e[i];
    return NULL;
}

static void free_set(ptc__model *m, act_set *s);

int ptc__model_set_classes(ptc__model *m, int classes, ptc_error *err)
{
    if (!m || classes < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__model_set_classes: invalid arguments");
    /* The new tensors first: on failure the model keeps its head. */
    const ptc__backend_ops *o = m->ops;
    ptc__bt *t[4] = {NULL, NULL, NULL, NULL};
    int dw[4] = {classes, 512, 1, 1}, db[4] = {1, classes, 1, 1}, rc;
    if ((rc = o->tensor_new(m->be, &t[0], PTC__ROLE_MAT, dw, err)) ||
        (rc = o->tensor_new(m->be, &t[1], PTC__ROLE_MAT, dw, err)) ||
        (rc = o->tensor_new(m->be, &t[2], PTC__ROLE_VEC, db, err)) ||
        (rc = o->tensor_new(m->be, &t[3], PTC__ROLE_VEC, db, err)) ||
        (rc = o->tensor_fill(m->be, t[0], 0, err)) || (rc = o->tensor_fill(m->be, t[2], 0, err))) {
        for (int i = 0; i < 4; i++)
            o->tensor_free(m->be, t[i]);
        return rc;
    }
    /* Every activation set holds logits of the old width. */
    for (size_t i = 0; i < m->nsets; i++)
        free_set(m, &m->sets[i]);
    m->nsets = 0;
    m->last = NULL;
    m->trained = m->has_dlogits = 0;
    ptc__entry *e[2] = {m->fc_w, m->fc_b};
    for (int i = 0; i < 2; i++) {
        o->tensor_free(m->be, e[i]->value);
        o->tensor_free(m->be, e[i]->grad);
        o->tensor_free(m->be, e[i]->momentum);
        e[i]->value = t[2 * i];
        e[i]->grad = t[2 * i + 1];
        e[i]->momentum = NULL;
        e[i]->shape[0] = classes;
        e[i]->numel = i == 0 ? (int64_t)classes * 512 : classes;
    }
    m->classes = classes;
    return 0;
}

/* ---- activations ------------------------------------------------------------------------------ */

static int act(ptc__model *m, ptc__bt **t, int n, int c, int h, int w, ptc_error *err)
{
    int dims[4] = {n, c, h, w};
    return m->ops->tensor_new(m->be, t, PTC__ROLE_ACT, dims, err);
}

static int mat(ptc__model *m, ptc__bt **t, int n, int k, ptc_error *err)
{
    int dims[4] = {n, k, 1, 1};
    return m->ops->tensor_new(m->be, t, PTC__ROLE_MAT, dims, err);
}

static int vec(ptc__model *m, ptc__bt **t, int c, ptc_error *err)
{
    int dims[4] = {1, c, 1, 1};
    return m->ops->tensor_new(m->be, t, PTC__ROLE_VEC, dims, err);
}

static int conv_plan(ptc__model *m, ptc__op **op, const conv_l *c, int n, int h, int w, int *oh,
                     int *ow, ptc_error *err)
{
    ptc__conv_shape s = {n, c->cin, h, w, c->cout, c->k, c->k, c->stride, c->pad, 0, 0};
    s.oh = ptc__conv_out(h, c->k, c->stride, c->pad);
    s.ow = ptc__conv_out(w, c->k, c->stride, c->pad);
    *oh = s.oh;
    *ow = s.ow;
    return m->ops->conv_plan(m->be, op, &s, err);
}

static int bn_plan(ptc__model *m, ptc__op **op, int n, int c, int h, int w, ptc_error *err)
{
    int dims[4] = {n, c, h, w};
    return m->ops->bn_plan(m->be, op, dims, BN_EPS, err);
}

/* The stem's output size (after conv1 and, for resnet18, the max pool) for an input side. */
static void stem_out(const ptc__model *m, int side, int *conv, int *pool)
{
    *conv = ptc__conv_out(side, m->conv1.k, m->conv1.stride, m->conv1.pad);
    *pool = m->arch == PTC__ARCH_RESNET18_CIFAR ? *conv : ptc__conv_out(*conv, 3, 2, 1);
}

int ptc__model_check_size(const ptc__model *m, const char *fn, int n, int h, int w, ptc_error *err)
{
    if (n < 1 || h < MIN_SIDE || w < MIN_SIDE)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%s: an input of %d x 3 x %d x %d: n must be at least 1 and h and w at "
                        "least %d",
                        fn, n, h, w, MIN_SIDE);
    /* The largest tensor is the stem's output, 64 channels at about half (resnet18) or the whole
     * (resnet18-cifar) input size: every tensor of the set stays below 2^31 elements. */
    int ch = 0, cw = 0, ph, pw;
    if (h <= MAX_SIDE && w <= MAX_SIDE) {
        stem_out(m, h, &ch, &ph);
        stem_out(m, w, &cw, &pw);
    }
    if (h > MAX_SIDE || w > MAX_SIDE || (int64_t)n * 64 * ch * cw >= ((int64_t)1 << 31) ||
        (int64_t)n * 3 * h * w >= ((int64_t)1 << 31))
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%s: an input of %d x 3 x %d x %d is too large: its activations would "
                        "exceed 2^31 elements per tensor",
                        fn, n, h, w);
    return 0;
}

/* The forward tensors and plans of the shape in s (n, h, w). */
static int make_set(ptc__model *m, act_set *s, ptc_error *err)
{
    int rc, h, w, n = s->n;
    if ((rc = act(m, &s->x, n, 3, s->h, s->w, err)) ||
        (rc = conv_plan(m, &s->pconv1, &m->conv1, n, s->h, s->w, &h, &w, err)))
        return rc;
    if ((rc = act(m, &s->c1, n, 64, h, w, err)) || (rc = act(m, &s->b1, n, 64, h, w, err)) ||
        (rc = vec(m, &s->m1, 64, err)) || (rc = vec(m, &s->s1, 64, err)) ||
        (rc = bn_plan(m, &s->pbn1, n, 64, h, w, err)))
        return rc;
    if (m->arch != PTC__ARCH_RESNET18_CIFAR) {
        ptc__pool_shape ps = {n, 64, h, w, 3, 3, 2, 1, 0, 0};
        ps.oh = ptc__conv_out(h, 3, 2, 1);
        ps.ow = ptc__conv_out(w, 3, 2, 1);
        if ((rc = m->ops->maxpool_plan(m->be, &s->ppool, &ps, err)) ||
            (rc = act(m, &s->p, n, 64, ps.oh, ps.ow, err)))
            return rc;
        h = ps.oh;
        w = ps.ow;
    }
    for (int b = 0; b < 8; b++) {
        block_l *bl = &m->blk[b];
        block_a *a = &s->blk[b];
        int cout = bl->conv1.cout, oh, ow;
        if ((rc = conv_plan(m, &a->p1, &bl->conv1, n, h, w, &oh, &ow, err)) ||
            (rc = conv_plan(m, &a->p2, &bl->conv2, n, oh, ow, &oh, &ow, err)) ||
            (rc = bn_plan(m, &a->b1, n, cout, oh, ow, err)) ||
            (rc = bn_plan(m, &a->b2, n, cout, oh, ow, err)) ||
            (rc = act(m, &a->c1, n, cout, oh, ow, err)) ||
            (rc = act(m, &a->r1, n, cout, oh, ow, err)) ||
            (rc = act(m, &a->c2, n, cout, oh, ow, err)) ||
            (rc = act(m, &a->n2, n, cout, oh, ow, err)) ||
            (rc = act(m, &a->out, n, cout, oh, ow, err)) || (rc = vec(m, &a->m1, cout, err)) ||
            (rc = vec(m, &a->s1, cout, err)) || (rc = vec(m, &a->m2, cout, err)) ||
            (rc = vec(m, &a->s2, cout, err)))
            return rc;
        if (bl->has_ds) {
            int dh, dw;
            if ((rc = conv_plan(m, &a->pds, &bl->ds, n, h, w, &dh, &dw, err)) ||
                (rc = bn_plan(m, &a->bds, n, cout, dh, dw, err)) ||
                (rc = act(m, &a->d, n, cout, dh, dw, err)) ||
                (rc = act(m, &a->dn, n, cout, dh, dw, err)) || (rc = vec(m, &a->mds, cout, err)) ||
                (rc = vec(m, &a->sds, cout, err)))
                return rc;
        }
        h = oh;
        w = ow;
    }
    if ((rc = mat(m, &s->avg, n, 512, err)) || (rc = mat(m, &s->logits, n, m->classes, err)))
        return rc;
    return 0;
}

/* The gradient tensors of s, for its first training forward: each the shape of its forward
 * tensor. */
static int make_grads(ptc__model *m, act_set *s, ptc_error *err)
{
    const ptc__backend_ops *o = m->ops;
    int rc, n = s->n, d[4];
#define LIKE(g, t) (o->tensor_dims((t), d), act(m, &(g), d[0], d[1], d[2], d[3], err))
    if ((rc = LIKE(s->g_c1, s->c1)) || (rc = LIKE(s->g_b1, s->b1)))
        return rc;
    if (s->ppool && (rc = LIKE(s->g_p, s->p)))
        return rc;
    /* g_blk[0]: gradient at layer1's input (the pool's output, or bn1's relu output). */
    if (s->ppool)
        s->g_blk[0] = s->g_p;
    else if ((rc = LIKE(s->g_blk[0], s->b1)))
        return rc;
    for (int b = 0; b < 8; b++) {
        block_a *a = &s->blk[b];
        const ptc__bt *in = b == 0 ? (s->ppool ? s->p : s->b1) : s->blk[b - 1].out;
        if ((rc = LIKE(a->g_c1, a->c1)) || (rc = LIKE(a->g_r1, a->r1)) ||
            (rc = LIKE(a->g_c2, a->c2)) || (rc = LIKE(a->g_n2, a->n2)) ||
            (rc = LIKE(s->g_blk[b + 1], a->out)))
            return rc;
        if (m->blk[b].has_ds && ((rc = LIKE(a->g_d, a->d)) || (rc = LIKE(a->g_in_ds, in))))
            return rc;
    }
#undef LIKE
    if ((rc = mat(m, &s->g_avg, n, 512, err)) || (rc = mat(m, &s->g_logits, n, m->classes, err)))
        return rc;
    s->has_grads = 1;
    return 0;
}

/* The set of shape (n, h, w), made on first use (with gradient tensors when train). */
static int get_set(ptc__model *m, int n, int h, int w, int train, act_set **out, ptc_error *err)
{
    act_set *s = NULL;
    int rc = 0;
    for (size_t i = 0; i < m->nsets && !s; i++)
        if (m->sets[i].n == n && m->sets[i].h == h && m->sets[i].w == w)
            s = &m->sets[i];
    if (!s) {
        if (m->nsets < MAX_SETS) {
            s = &m->sets[m->nsets++];
        } else { /* the least recently used, never the set backward still needs */
            for (size_t i = 0; i < MAX_SETS; i++)
                if (&m->sets[i] != m->last && (!s || m->sets[i].used < s->used))
                    s = &m->sets[i];
            free_set(m, s);
        }
        s->n = n;
        s->h = h;
        s->w = w;
        rc = make_set(m, s, err);
    }
    if (rc == 0 && train && !s->has_grads)
        rc = make_grads(m, s, err);
    if (rc < 0) {
        if (m->last == s)
            m->last = NULL;
        free_set(m, s); /* the slot stays empty (n = 0): never matched, reused later */
        return rc;
    }
    s->used = ++m->clock;
    *out = s;
    return 0;
}

/* ---- forward and backward --------------------------------------------------------------------- */

void ptc__model_set_bn_sync(ptc__model *m, ptc__bn_sync fn, void *ctx)
{
    m->bn_sync = fn;
    m->bn_sync_ctx = fn ? ctx : NULL;
}

static ptc__syncbn_ctx syncbn_ctx(ptc__model *m)
{
    return (ptc__syncbn_ctx){m->ops, m->be,       m->bn_sync, m->bn_sync_ctx,
                             BN_EPS, BN_MOMENTUM, &m->syncbn};
}

static int bn_forward(ptc__model *m, ptc__op *op, const bn_l *b, const ptc__bt *x, ptc__bt *y,
                      ptc__bt *mean, ptc__bt *invstd, int train, int relu, ptc_error *err)
{
    if (!train)
        return m->ops->bn_fwd_eval(m->be, op, x, b->w->value, b->b->value, b->rm->value,
                                   b->rv->value, y, relu, err);
    (*b->nbt->counter)++;
    if (m->bn_sync) {
        ptc__syncbn_ctx k = syncbn_ctx(m);
        ptc__syncbn_layer l = {.x = x,
                               .gamma = b->w->value,
                               .beta = b->b->value,
                               .y = y,
                               .save_mean = mean,
                               .save_invstd = invstd,
                               .running_mean = b->rm->value,
                               .running_var = b->rv->value,
                               .relu = relu};
        return ptc__syncbn_forward(&k, &l, err);
    }
    return m->ops->bn_fwd_train(m->be, op, x, b->w->value, b->b->value, y, mean, invstd,
                                b->rm->value, b->rv->value, BN_MOMENTUM, relu, err);
}

/* Backward of bn_forward in training mode (y: its output when relu was fused, else NULL). */
static int bn_backward(ptc__model *m, ptc__op *op, const bn_l *b, const ptc__bt *x, ptc__bt *y,
                       const ptc__bt *dy, ptc__bt *mean, ptc__bt *invstd, ptc__bt *dx,
                       ptc_error *err)
{
    if (m->bn_sync) {
        ptc__syncbn_ctx k = syncbn_ctx(m);
        ptc__syncbn_layer l = {.x = x,
                               .gamma = b->w->value,
                               .dy = dy,
                               .y = y,
                               .save_mean = mean,
                               .save_invstd = invstd,
                               .dx = dx,
                               .dgamma = b->w->grad,
                               .dbeta = b->b->grad};
        return ptc__syncbn_backward(&k, &l, err);
    }
    return m->ops->bn_bwd(m->be, op, x, y, dy, b->w->value, mean, invstd, dx, b->w->grad,
                          b->b->grad, err);
}

int ptc__model_input(ptc__model *m, int n, ptc__bt **x, ptc_error *err)
{
    if (!m || !x || n < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__model_input: invalid arguments");
    act_set *s;
    int rc = ptc__model_check_size(m, "ptc__model_input", n, 32, 32, err);
    if (rc == 0)
        rc = get_set(m, n, 32, 32, 0, &s, err);
    *x = rc < 0 ? NULL : s->x;
    return rc;
}

static int forward_set(ptc__model *m, act_set *s, int train, float *logits, ptc_error *err);

int ptc__model_forward(ptc__model *m, const float *images, int n, int train, float *logits,
                       ptc_error *err)
{
    return ptc__model_forward_hw(m, images, n, 32, 32, train, logits, err);
}

int ptc__model_forward_hw(ptc__model *m, const float *images, int n, int h, int w, int train,
                          float *logits, ptc_error *err)
{
    if (!m || !images)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__model_forward: invalid arguments");
    act_set *s;
    int rc = ptc__model_check_size(m, "ptc__model_forward", n, h, w, err);
    if (rc == 0)
        rc = get_set(m, n, h, w, train, &s, err);
    if (rc == 0)
        rc = m->ops->tensor_write(m->be, s->x, images, err);
    return rc < 0 ? rc : forward_set(m, s, train, logits, err);
}

int ptc__model_forward_filled(ptc__model *m, int n, int train, float *logits, ptc_error *err)
{
    if (!m || n < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__model_forward: invalid arguments");
    act_set *s;
    int rc = get_set(m, n, 32, 32, train, &s, err);
    return rc < 0 ? rc : forward_set(m, s, train, logits, err);
}

/* Forward of the input s->x holds. */
static int forward_set(ptc__model *m, act_set *s, int train, float *logits, ptc_error *err)
{
    int rc;
    const ptc__backend_ops *o = m->ops;
    ptc__be *be = m->be;
    if ((rc = o->conv_fwd(be, s->pconv1, s->x, m->conv1.w->value, s->c1, err)) ||
        (rc = bn_forward(m, s->pbn1, &m->bn1, s->c1, s->b1, s->m1, s->s1, train, 1, err)))
        return rc;
    const ptc__bt *x = s->b1;
    if (s->ppool) {
        if ((rc = o->maxpool_fwd(be, s->ppool, s->b1, s->p, err)))
            return rc;
        x = s->p;
    }
    for (int b = 0; b < 8; b++) {
        block_l *bl = &m->blk[b];
        block_a *a = &s->blk[b];
        const ptc__bt *identity = x;
        if ((rc = o->conv_fwd(be, a->p1, x, bl->conv1.w->value, a->c1, err)) ||
            (rc = bn_forward(m, a->b1, &bl->bn1, a->c1, a->r1, a->m1, a->s1, train, 1, err)) ||
            (rc = o->conv_fwd(be, a->p2, a->r1, bl->conv2.w->value, a->c2, err)) ||
            (rc = bn_forward(m, a->b2, &bl->bn2, a->c2, a->n2, a->m2, a->s2, train, 0, err)))
            return rc;
        if (bl->has_ds) {
            if ((rc = o->conv_fwd(be, a->pds, x, bl->ds.w->value, a->d, err)) ||
                (rc = bn_forward(m, a->bds, &bl->dsbn, a->d, a->dn, a->mds, a->sds, train, 0, err)))
                return rc;
            identity = a->dn;
        }
        if ((rc = o->add(be, a->n2, identity, a->out, 1, err)))
            return rc;
        x = a->out;
    }
    if ((rc = o->avgpool_fwd(be, x, s->avg, err)) ||
        (rc = o->linear_fwd(be, s->avg, m->fc_w->value, m->fc_b->value, s->logits, err)) ||
        (logits && (rc = o->tensor_read(be, s->logits, logits, err))))
        return rc;
    if (train) {
        m->last = s;
        m->trained = 1;
        m->has_dlogits = 0;
    }
    return 0;
}

void ptc__model_set_grad_hook(ptc__model *m, ptc__grad_hook fn, void *ctx)
{
    m->hook = fn;
    m->hook_ctx = fn ? ctx : NULL;
}

const ptc__backend_ops *ptc__model_ops(const ptc__model *m)
{
    return m->ops;
}
ptc__be *ptc__model_be(const ptc__model *m)
{
    return m->be;
}

/* Whether backward may stop before the entries below index `below`: nothing there needs a
 * gradient (every parameter among them is frozen) and no hook expects every gradient. */
static bool frozen_below(const ptc__model *m, const ptc__entry *below)
{
    if (m->hook)
        return false;
    for (const ptc__entry *e = m->e; e < below; e++)
        if (e->kind == PTC__ENTRY_PARAM && !e->frozen)
            return false;
    return true;
}

/* Tells the gradient hook that the gradients of a and b (b may be NULL) are final. */
static int ready(ptc__model *m, ptc__entry *a, ptc__entry *b, ptc_error *err)
{
    int rc = 0;
    if (m->hook && (rc = m->hook(m->hook_ctx, a, err)) == 0 && b)
        rc = m->hook(m->hook_ctx, b, err);
    return rc;
}

int ptc__model_has_device_loss(const ptc__model *m)
{
    return m && m->ops->xent && m->ops->xent_result;
}

int ptc__model_loss(ptc__model *m, const int64_t *labels, ptc_error *err)
{
    if (!m || !labels || !m->trained || !m->last)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc__model_loss: no training forward to take the loss of");
    if (!ptc__model_has_device_loss(m))
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "ptc__model_loss: the %s backend has no xent operation", m->ops->name);
    act_set *s = m->last;
    m->has_dlogits = 0;
    int rc = m->ops->xent(m->be, s->logits, labels, s->n, m->classes, s->g_logits, err);
    if (rc < 0)
        return rc;
    m->has_dlogits = 1;
    return 0;
}

int ptc__model_loss_result(ptc__model *m, double *loss, int64_t *correct, ptc_error *err)
{
    if (!ptc__model_has_device_loss(m))
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "ptc__model_loss_result: the backend has no xent operation");
    return m->ops->xent_result(m->be, loss, correct, err);
}

int ptc__model_backward(ptc__model *m, const float *dlogits, ptc_error *err)
{
    if (!m || !m->trained || !m->last)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc__model_backward: no training forward to differentiate");
    if (!dlogits && !m->has_dlogits)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc__model_backward: no dlogits given and no ptc__model_loss since the "
                        "last training forward");
    act_set *s = m->last;
    const ptc__backend_ops *o = m->ops;
    ptc__be *be = m->be;
    int rc;
    m->has_dlogits = 0;
    if ((dlogits && (rc = o->tensor_write(be, s->g_logits, dlogits, err))) ||
        (rc = o->linear_bwd(be, s->avg, m->fc_w->value, s->g_logits, s->g_avg, m->fc_w->grad,
                            m->fc_b->grad, err)) ||
        (rc = ready(m, m->fc_b, m->fc_w, err)) ||
        (rc = o->avgpool_bwd(be, s->g_avg, s->g_blk[8], err)))
        return rc;
    for (int b = 7; b >= 0; b--) {
        block_l *bl = &m->blk[b];
        block_a *a = &s->blk[b];
        if (frozen_below(m, b == 7 ? m->fc_w : m->blk[b + 1].conv1.w)) { /* fine-tuning a head */
            m->trained = 0;
            return 0;
        }
        const ptc__bt *x = b == 0 ? (s->ppool ? s->p : s->b1) : s->blk[b - 1].out;
        ptc__bt *gx = s->g_blk[b];
        /* relu(n2 + identity): the gradient of both addends is g_out masked by out > 0 */
        if ((rc = o->relu_bwd(be, a->out, s->g_blk[b + 1], a->g_n2, err)) ||
            (rc = bn_backward(m, a->b2, &bl->bn2, a->c2, NULL, a->g_n2, a->m2, a->s2, a->g_c2,
                              err)) ||
            (rc = ready(m, bl->bn2.b, bl->bn2.w, err)) ||
            (rc = o->conv_bwd_weight(be, a->p2, a->r1, a->g_c2, bl->conv2.w->grad, err)) ||
            (rc = ready(m, bl->conv2.w, NULL, err)) ||
            (rc = o->conv_bwd_data(be, a->p2, a->g_c2, bl->conv2.w->value, a->g_r1, err)) ||
            (rc = bn_backward(m, a->b1, &bl->bn1, a->c1, a->r1, a->g_r1, a->m1, a->s1, a->g_c1,
                              err)) ||
            (rc = ready(m, bl->bn1.b, bl->bn1.w, err)) ||
            (rc = o->conv_bwd_weight(be, a->p1, x, a->g_c1, bl->conv1.w->grad, err)) ||
            (rc = ready(m, bl->conv1.w, NULL, err)) ||
            (rc = o->conv_bwd_data(be, a->p1, a->g_c1, bl->conv1.w->value, gx, err)))
            return rc;
        if (bl->has_ds) {
            if ((rc = bn_backward(m, a->bds, &bl->dsbn, a->d, NULL, a->g_n2, a->mds, a->sds, a->g_d,
                                  err)) ||
                (rc = ready(m, bl->dsbn.b, bl->dsbn.w, err)) ||
                (rc = o->conv_bwd_weight(be, a->pds, x, a->g_d, bl->ds.w->grad, err)) ||
                (rc = ready(m, bl->ds.w, NULL, err)) ||
                (rc = o->conv_bwd_data(be, a->pds, a->g_d, bl->ds.w->value, a->g_in_ds, err)) ||
                (rc = o->accumulate(be, a->g_in_ds, gx, err)))
                return rc;
        } else if ((rc = o->accumulate(be, a->g_n2, gx, err))) {
            return rc;
        }
    }
    /* The stem: through the pool (if any) and bn1+relu to conv1's weight. */
    if (frozen_below(m, m->blk[0].conv1.w)) {
        m->trained = 0;
        return 0;
    }
    if (s->ppool && (rc = o->maxpool_bwd(be, s->ppool, s->b1, s->p, s->g_p, s->g_b1, err)))
        return rc;
    const ptc__bt *g_b1 = s->ppool ? s->g_b1 : s->g_blk[0];
    if ((rc = bn_backward(m, s->pbn1, &m->bn1, s->c1, s->b1, g_b1, s->m1, s->s1, s->g_c1, err)) ||
        (rc = ready(m, m->bn1.b, m->bn1.w, err)) ||
        (rc = o->conv_bwd_weight(be, s->pconv1, s->x, s->g_c1, m->conv1.w->grad, err)) ||
        (rc = ready(m, m->conv1.w, NULL, err)))
        return rc;
    m->trained = 0;
    return 0;
}

/* ---- entries and SGD ------------------------------------------------------------------------- */

int ptc__model_write_entry(ptc__model *m, ptc__entry *e, const float *values, ptc_error *err)
{
    if (!e->value)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s is not a tensor entry", e->name);
    return m->ops->tensor_write(m->be, e->value, values, err);
}

int ptc__model_read_entry(ptc__model *m, const ptc__entry *e, float *values, ptc_error *err)
{
    if (!e->value)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s is not a tensor entry", e->name);
    return m->ops->tensor_read(m->be, e->value, values, err);
}

int ptc__model_read_grad(ptc__model *m, const ptc__entry *e, float *values, ptc_error *err)
{
    if (!e->grad)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s is not a parameter", e->name);
    return m->ops->tensor_read(m->be, e->grad, values, err);
}

int ptc__model_read_momentum(ptc__model *m, const ptc__entry *e, float *values, ptc_error *err)
{
    if (!e->momentum)
        return ptc__err(err, PTC_ENOTFOUND, "", -1, "%s has no momentum buffer", e->name);
    return m->ops->tensor_read(m->be, e->momentum, values, err);
}

static int make_momentum(ptc__model *m, ptc__entry *e, ptc_error *err)
{
    int dims[4];
    ptc__role role = entry_dims(e, dims);
    return m->ops->tensor_new(m->be, &e->momentum, role, dims, err);
}

int ptc__model_write_momentum(ptc__model *m, ptc__entry *e, const float *values, ptc_error *err)
{
    if (e->kind != PTC__ENTRY_PARAM)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s is not a parameter", e->name);
    int rc = e->momentum ? 0 : make_momentum(m, e, err);
    return rc ? rc : m->ops->tensor_write(m->be, e->momentum, values, err);
}

/* The parameters in one or two sgd_multi calls: those whose momentum buffer exists (group 0)
 * and those that get one now (group 1, first_step: torch clones the gradient into it). The update
 * is elementwise and per parameter, so grouping changes no bits. */
static int sgd_multi_step(ptc__model *m, const ptc__sgd_params *p, double lr, ptc_error *err)
{
    const size_t np = m->nparams;
    ptc__bt **lists = ptc__malloc(6 * (np ? np : 1) * sizeof *lists);
    if (!lists)
        return ptc__err(err, PTC_ENOMEM, "", -1, "sgd step: out of memory");
    ptc__bt **pv[2] = {lists, lists + 3 * np}, **gv[2] = {lists + np, lists + 4 * np},
            **bv[2] = {lists + 2 * np, lists + 5 * np};
    int cnt[2] = {0, 0}, rc = 0;
    const bool mom = p->momentum != 0;
    for (size_t i = 0; i < m->ne && rc == 0; i++) {
        ptc__entry *e = &m->e[i];
        if (e->kind != PTC__ENTRY_PARAM || e->frozen)
            continue;
        int grp = 0;
        if (mom && !e->momentum) {
            rc = make_momentum(m, e, err);
            grp = 1;
        }
        pv[grp][cnt[grp]] = e->value;
        gv[grp][cnt[grp]] = e->grad;
        bv[grp][cnt[grp]] = e->momentum;
        cnt[grp]++;
    }
    for (int grp = 0; grp < 2 && rc == 0; grp++) {
        ptc__sgd h = {lr, p->momentum, p->dampening, p->weight_decay, p->nesterov, grp};
        if (cnt[grp] > 0)
            rc = m->ops->sgd_multi(m->be, cnt[grp], pv[grp], gv[grp], bv[grp], &h, err);
    }
    ptc__free(lists);
    return rc < 0 ? rc : 0;
}

int ptc__model_sgd_step(ptc__model *m, const ptc__sgd_params *p, double lr, int64_t step,
                        ptc_error *err)
{
    (void)step;
    if (m->ops->sgd_multi)
        return sgd_multi_step(m, p, lr, err);
    for (size_t i = 0; i < m->ne; i++) {
        ptc__entry *e = &m->e[i];
        if (e->kind != PTC__ENTRY_PARAM || e->frozen)
            continue;
        ptc__sgd h = {lr, p->momentum, p->dampening, p->weight_decay, p->nesterov, 0};
        if (p->momentum != 0 && !e->momentum) {
            int rc = make_momentum(m, e, err);
            if (rc < 0)
                return rc;
            h.first_step = 1; /* torch: the buffer starts as a clone of the gradient */
        }
        int rc = m->ops->sgd_step(m->be, e->value, e->grad, e->momentum, &h, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}
