/*
 * finetune.c - fine-tuning a ptc_model (ptc.h "Models"): a new head initialised as torch
 * initialises nn.Linear, requires_grad per parameter prefix, torch.optim.SGD as a handle of its
 * own, and one training step.
 *
 * The head's numbers are torch's to the bit: torch.manual_seed(seed) seeds the CPU generator, an
 * mt19937 whose state starts from the seed's low 32 bits (at::mt19937's init_with_uint32), and
 * nn.Linear(512, N).reset_parameters() draws weight then bias with uniform_(-bound, bound), one
 * 32-bit output per float32 element: x = (r & (2^24 - 1)) * 2^-24, value = fma(x, to - from,
 * from) in float32 (ATen's uniform_real_distribution; the fused multiply-add is what the
 * vectorised CPU kernels compute). The weight's bound is kaiming_uniform_(a = sqrt(5))'s,
 * sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in), the bias's 1 / sqrt(fan_in), both computed in
 * double as Python does, then rounded to float32. tests/interop/check_finetune.py holds this to
 * torch.
 *
 * Optimizer state: torch keeps momentum buffers in the optimizer, not the model; so does ptc_sgd.
 * The network (nn.h) expects them in its entries during a step, so a step lends the optimizer's
 * buffers to the entries and takes them back afterwards: two optimizers of one model keep
 * separate states, and freeing one frees its buffers. The buffers are backend tensors of the
 * model's backend, which is why an optimizer must be freed before its model.
 */
#include "nn/model.h"

#include <math.h>
#include <string.h>

#define MAX_CLASSES (1 << 20) /* as ptc_model_new: a bound on what one call allocates */

struct ptc_sgd {
    ptc_model *m;
    ptc__sgd_params p;
    int64_t steps;      /* steps taken */
    size_t n;           /* entries of the network when made */
    ptc__bt **buf;      /* [n] the momentum buffer of entry i, NULL until its first step */
    int64_t *buf_numel; /* [n] the entry's numel when its buffer was made (a new head: dropped) */
};

/* ---- torch's CPU generator ------------------------------------------------------------------ */

typedef struct mt19937 {
    uint32_t s[624];
    int i;
} mt19937;

static void mt_seed(mt19937 *g, uint64_t seed)
{
    g->s[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < 624; j++)
        g->s[j] = 1812433253u * (g->s[j - 1] ^ (g->s[j - 1] >> 30)) + j;
    g->i = 624;
}

static uint32_t mt_next(mt19937 *g)
{
    if (g->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (g->s[k] & 0x80000000u) | (g->s[(k + 1) % 624] & 0x7fffffffu);
            g->s[k] = g->s[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        g->i = 0;
    }
    uint32_t y = g->s[g->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* tensor.uniform_(-bound, bound) on a float32 CPU tensor of n elements. */
static void uniform_(mt19937 *g, float *v, int64_t n, double bound)
{
    const float from = (float)-bound, to = (float)bound;
    for (int64_t i = 0; i < n; i++) {
        float x = (float)(mt_next(g) & 0xffffffu) * 0x1p-24f;
        v[i] = fmaf(x, to - from, from);
    }
}

int ptc_model_reset_head(ptc_model *m, int num_classes, uint64_t seed, ptc_error *err)
{
    ptc__err_clear(err);
    if (!m)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_reset_head: the model is NULL");
    if (num_classes < 1 || num_classes > MAX_CLASSES)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_reset_head: num_classes %d (1 to %d)",
                        num_classes, MAX_CLASSES);
    ptc__entry *w = ptc__model_find(m->net, "fc.weight");
    const int64_t fan_in = w->shape[1];
    float *v = ptc__malloc((size_t)(num_classes * fan_in + num_classes) * sizeof *v);
    if (!v)
        return ptc__err(err, PTC_ENOMEM, "", -1, "ptc_model_reset_head: out of memory");
    /* nn.Linear.reset_parameters: kaiming_uniform_(weight, a=math.sqrt(5)), then the bias. */
    mt19937 g;
    mt_seed(&g, seed);
    const double a = sqrt(5.0), gain = sqrt(2.0 / (1.0 + pow(a, 2.0)));
    uniform_(&g, v, num_classes * fan_in, sqrt(3.0) * (gain / sqrt((double)fan_in)));
    uniform_(&g, v + num_classes * fan_in, num_classes, 1.0 / sqrt((double)fan_in));
    int rc = ptc__model_set_classes(m->net, num_classes, err);
    ptc__entry *b = ptc__model_find(m->net, "fc.bias");
    if (rc == 0) { /* the head is the new one from here on, even if a write below fails */
        m->params.num_classes = num_classes;
        w->frozen = b->frozen = 0; /* new parameters require grad, as torch's do */
        if ((rc = ptc__model_write_entry(m->net, w, v, err)) == 0)
            rc = ptc__model_write_entry(m->net, b, v + num_classes * fan_in, err);
    }
    ptc__free(v);
    return rc;
}

int ptc_model_freeze(ptc_model *m, const char *prefix, int frozen, ptc_error *err)
{
    ptc__err_clear(err);
    if (!m || !prefix)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_freeze: %s is NULL",
                        m ? "the prefix" : "the model");
    size_t pl = strlen(prefix), hits = 0;
    for (size_t i = 0; i < ptc__model_nentries(m->net); i++) {
        ptc__entry *e = ptc__model_entry(m->net, i);
        if (e->kind == PTC__ENTRY_PARAM && strncmp(e->name, prefix, pl) == 0) {
            e->frozen = frozen != 0;
            hits++;
        }
    }
    if (hits == 0) {
        char esc[96];
        return ptc__err(err, PTC_ENOTFOUND, "", -1,
                        "ptc_model_freeze: no parameter's name starts with \"%s\" (names are "
                        "torchvision's: conv1.weight, layer4.1.bn2.bias, fc.weight, ...)",
                        ptc__escape(esc, sizeof esc, prefix, pl, true));
    }
    return 0;
}

/* ---- SGD ------------------------------------------------------------------------------------- */

int ptc_sgd_new(ptc_sgd **opt, ptc_model *m, double lr, double momentum, double dampening,
                double weight_decay, int nesterov, ptc_error *err)
{
    ptc__err_clear(err);
    if (opt)
        *opt = NULL;
    if (!opt || !m)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sgd_new: %s is NULL",
                        opt ? "the model" : "opt");
    /* torch.optim.SGD's own refusals, in its words. */
    if (!(lr >= 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sgd_new: Invalid learning rate: %g", lr);
    if (!(momentum >= 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sgd_new: Invalid momentum value: %g",
                        momentum);
    if (!(weight_decay >= 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sgd_new: Invalid weight_decay value: %g",
                        weight_decay);
    if (!isfinite(dampening))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sgd_new: Invalid dampening value: %g",
                        dampening);
    if (nesterov && (momentum <= 0 || dampening != 0))
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_sgd_new: Nesterov momentum requires a momentum and zero dampening");
    ptc_sgd *o = ptc__calloc(1, sizeof *o);
    size_t n = ptc__model_nentries(m->net);
    if (o) {
        o->buf = ptc__calloc(n, sizeof *o->buf);
        o->buf_numel = ptc__calloc(n, sizeof *o->buf_numel);
    }
    if (!o || !o->buf || !o->buf_numel) {
        ptc_sgd_free(o);
        return ptc__err(err, PTC_ENOMEM, "", -1, "ptc_sgd_new: out of memory");
    }
    o->m = m;
    o->n = n;
    o->p = (ptc__sgd_params){lr, momentum, dampening, weight_decay, nesterov != 0};
    *opt = o;
    return 0;
}

void ptc_sgd_free(ptc_sgd *opt)
{
    if (!opt)
        return;
    if (opt->buf) {
        for (size_t i = 0; i < opt->n; i++)
            if (opt->buf[i])
                opt->m->ops->tensor_free(opt->m->be, opt->buf[i]);
    }
    ptc__free(opt->buf);
    ptc__free(opt->buf_numel);
    ptc__free(opt);
}

int ptc_sgd_set_lr(ptc_sgd *opt, double lr, ptc_error *err)
{
    ptc__err_clear(err);
    if (!opt || !(lr >= 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sgd_set_lr: %s",
                        opt ? "Invalid learning rate" : "opt is NULL");
    opt->p.lr = lr;
    return 0;
}

/* Lends the optimizer's buffers to the network's entries for one step (in = 1) or takes them
 * back, with those the step made (in = 0). A buffer of another size than its entry belongs to a
 * head that was replaced: it is dropped, and the new head starts without momentum. */
static void lend(ptc_sgd *o, int in)
{
    ptc__model *net = o->m->net;
    for (size_t i = 0; i < o->n; i++) {
        ptc__entry *e = ptc__model_entry(net, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        if (in) {
            if (o->buf[i] && o->buf_numel[i] != e->numel) {
                o->m->ops->tensor_free(o->m->be, o->buf[i]);
                o->buf[i] = NULL;
            }
            o->m->ops->tensor_free(o->m->be, e->momentum); /* none: the entries hold no state */
            e->momentum = o->buf[i];
        } else {
            o->buf[i] = e->momentum;
            o->buf_numel[i] = e->numel;
            e->momentum = NULL;
        }
    }
}

int ptc_model_train_step(ptc_model *m, ptc_sgd *opt, const float *x, const int64_t *labels, int n,
                         int h, int w, double *loss, ptc_error *err)
{
    ptc__err_clear(err);
    if (!m || !opt || !x || !labels)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_train_step: a NULL argument");
    if (opt->m != m)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_train_step: the optimizer was made for another model");
    int rc = ptc__model_check_input(m, "ptc_model_train_step", n, h, w, err);
    if (rc < 0)
        return rc;
    ptc__model *net = m->net;
    const int C = ptc__model_classes(net);
    bool trainable = false;
    for (size_t i = 0; i < ptc__model_nentries(net) && !trainable; i++) {
        const ptc__entry *e = ptc__model_entry(net, i);
        trainable = e->kind == PTC__ENTRY_PARAM && !e->frozen;
    }
    if (!trainable) /* torch: "element 0 of tensors does not require grad" */
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_train_step: every parameter is frozen (ptc_model_freeze)");
    /* The labels before the forward: a training forward updates the running statistics. */
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= C)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "ptc_model_train_step: label %lld of sample %d is not one of the %d "
                            "classes",
                            (long long)labels[i], i, C);
    float *logits = ptc__model_scratch(m, 2 * (size_t)n * (size_t)C, err);
    if (!logits)
        return err ? err->code : PTC_ENOMEM;
    float *dlogits = logits + (size_t)n * (size_t)C;
    double l = 0;
    /* The host path of ptc train's step (train.c), the same bits on every backend that has no
     * device loss and on ref: logits read, ptc__cross_entropy, dlogits written. */
    if ((rc = ptc__model_forward_hw(net, x, n, h, w, 1, logits, err)) < 0 ||
        (rc = ptc__cross_entropy(logits, labels, n, C, &l, dlogits, NULL, err)) < 0 ||
        (rc = ptc__model_backward(net, dlogits, err)) < 0)
        return rc;
    lend(opt, 1);
    rc = ptc__model_sgd_step(net, &opt->p, opt->p.lr, opt->steps, err);
    lend(opt, 0);
    if (rc < 0)
        return rc;
    opt->steps++;
    if (loss)
        *loss = l;
    return 0;
}
