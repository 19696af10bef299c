/*
 * model.c - the public model handle (ptc.h "Models"): its parameters, making and freeing it,
 * loading a state dict as torch's load_state_dict does, the eval-mode forward at any input size
 * and the state dict for ptc_save. Fine-tuning lives in finetune.c and classification in
 * classify.c; the network itself in resnet.c and state.c.
 *
 * The backend is chosen and opened by ptc_train's own rule (ptc__train_open_backend), so that a
 * model and a training run given the same backend, precision, device and threads run on the same
 * one. The handle owns its backend instance.
 */
#include "nn/model.h"
#include "data/data.h"
#include "train/train.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The most classes a head may have: fc.weight stays below 2^31 elements (backends index with
 * int). */
#define MAX_CLASSES    (1 << 20)
#define MAX_INPUT_SIDE (1 << 16)

void ptc_model_params_default(ptc_model_params *p)
{
    if (!p)
        return;
    static const double mean[3] = PTC__CIFAR10_MEAN, std[3] = PTC__CIFAR10_STD;
    *p = (ptc_model_params){
        .size = sizeof *p,
        .arch = "resnet18",
        .num_classes = 10,
        .backend = NULL,
        .threads = 0,
        .device = -1,
        .precision = NULL,
        .seed = 0,
        .input_h = 32,
        .input_w = 32,
    };
    for (int c = 0; c < 3; c++) {
        p->mean[c] = (float)mean[c];
        p->std[c] = (float)std[c];
    }
}

/* The caller's params over the defaults: only the first p->size bytes of an older, smaller
 * struct are read (lib/base/params.c, as for every parameter struct). */
static int params_read(ptc_model_params *out, const ptc_model_params *p, ptc_error *err)
{
    ptc_model_params_default(out);
    return ptc__params_read(out, sizeof *out, p, "ptc_model_params", err);
}

static int params_check(const ptc_model_params *p, ptc_error *err)
{
    if (!p->arch || ptc__arch_from_name(p->arch) < 0)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_new: unknown arch \"%s\" (resnet18, resnet18-cifar)",
                        p->arch ? p->arch : "(null)");
    if (p->num_classes < 1 || p->num_classes > MAX_CLASSES)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_new: num_classes %d is not in [1, %d]",
                        p->num_classes, MAX_CLASSES);
    if (p->input_h < 32 || p->input_w < 32 || p->input_h > MAX_INPUT_SIDE ||
        p->input_w > MAX_INPUT_SIDE)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_new: input size %d x %d is not in [32, %d]", p->input_h,
                        p->input_w, MAX_INPUT_SIDE);
    for (int c = 0; c < 3; c++)
        if (!isfinite(p->mean[c]) || !isfinite(p->std[c]) || !(p->std[c] > 0))
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "ptc_model_new: mean %g and std %g of channel %d: both must be "
                            "finite and std positive",
                            (double)p->mean[c], (double)p->std[c], c);
    if (p->threads < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_new: threads %d is negative",
                        p->threads);
    return 0;
}

int ptc_model_new(ptc_model **out, const ptc_model_params *params, ptc_error *err)
{
    ptc_error local;
    if (!err) /* the internal layers write the detail through err */
        err = &local;
    ptc__err_clear(err);
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_new: m is NULL");
    *out = NULL;
    ptc_model_params p;
    int rc = params_read(&p, params, err);
    if (rc == 0)
        rc = params_check(&p, err);
    if (rc < 0)
        return rc;
    ptc_model *m = ptc__calloc(1, sizeof *m);
    if (!m)
        return ptc__err(err, PTC_ENOMEM, "", -1, "ptc_model_new: out of memory");
    m->params = p;
    m->arch = (ptc__arch)ptc__arch_from_name(p.arch);
    snprintf(m->arch_name, sizeof m->arch_name, "%s", ptc__arch_name(m->arch));
    m->params.arch = m->arch_name;
    /* ptc_train's rule, from the fields it reads. */
    ptc_train_params tp;
    ptc_train_params_default(&tp);
    tp.backend = p.backend;
    tp.precision = p.precision;
    tp.device = p.device;
    tp.threads = p.threads;
    rc = ptc__train_open_backend(&tp, &m->ops, &m->be, err);
    if (rc < 0) {
        m->be = NULL;
        goto fail;
    }
    snprintf(m->backend_name, sizeof m->backend_name, "%s", m->ops->name);
    m->params.backend = m->backend_name;
    snprintf(m->precision_name, sizeof m->precision_name, "%s",
             p.precision &&
                     (strcmp(p.precision, "bf16") == 0 || strcmp(p.precision, "bfloat16") == 0)
                 ? "bf16"
                 : "f32");
    m->params.precision = m->precision_name;
    ptc__model_params mp = {m->arch, p.num_classes, m->ops, m->be, p.seed};
    if ((rc = ptc__model_new(&m->net, &mp, err)) < 0)
        goto fail;
    *out = m;
    return 0;
fail:
    ptc_model_free(m);
    return rc;
}

void ptc_model_free(ptc_model *m)
{
    if (!m)
        return;
    ptc__model_free(m->net); /* before the backend its tensors live on */
    if (m->be)
        m->ops->close(m->be);
    ptc__free(m->scratch);
    ptc__load_report_free(&m->load);
    ptc__free(m);
}

int ptc_model_get_params(const ptc_model *m, ptc_model_params *p, ptc_error *err)
{
    if (!m || !p)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_get_params: m or p is NULL");
    if (p->size == 0 || p->size > sizeof *p)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_get_params: params: size %zu is not this library's %zu", p->size,
                        sizeof *p);
    size_t size = p->size;
    ptc_model_params now = m->params;
    now.num_classes = ptc__model_classes(m->net);
    memcpy(p, &now, size);
    p->size = size;
    return 0;
}

int ptc_model_num_classes(const ptc_model *m)
{
    return m ? ptc__model_classes(m->net) : 0;
}
const char *ptc_model_arch(const ptc_model *m)
{
    return m ? ptc__arch_name(m->arch) : NULL;
}
const char *ptc_model_backend(const ptc_model *m)
{
    return m ? m->ops->name : NULL;
}

int ptc__model_check_input(const ptc_model *m, const char *fn, int n, int h, int w, ptc_error *err)
{
    return ptc__model_check_size(m->net, fn, n, h, w, err);
}

float *ptc__model_scratch(ptc_model *m, size_t n, ptc_error *err)
{
    if (n > m->scratch_n) {
        float *s = n <= SIZE_MAX / sizeof *s ? ptc__realloc(m->scratch, n * sizeof *s) : NULL;
        if (!s) {
            ptc__err(err, PTC_ENOMEM, "", -1, "out of memory (a buffer of %zu floats)", n);
            return NULL;
        }
        m->scratch = s;
        m->scratch_n = n;
    }
    return m->scratch;
}

/* ---- loading --------------------------------------------------------------------------------- */

int ptc_model_load(ptc_model *m, const ptc_value *state_dict, unsigned flags, ptc_error *err)
{
    ptc_error local;
    if (!err) /* the internal layers write the detail through err */
        err = &local;
    ptc__err_clear(err);
    if (!m || !state_dict)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_load: m or state_dict is NULL");
    if (flags & ~(unsigned)(PTC_LOAD_STRICT | PTC_LOAD_STRIP_PREFIX | PTC_LOAD_SKIP_MISMATCHED))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_load: unknown flags 0x%x", flags);
    return ptc__model_load_state_dict_ex(
        m->net, state_dict, flags & PTC_LOAD_STRIP_PREFIX ? "module." : NULL,
        !!(flags & PTC_LOAD_STRICT), !!(flags & PTC_LOAD_SKIP_MISMATCHED), &m->load, err);
}

size_t ptc_model_load_nkeys(const ptc_model *m, ptc_load_keys kind)
{
    return m && (unsigned)kind < 3 ? m->load.keys[kind].n : 0;
}

const char *ptc_model_load_key(const ptc_model *m, ptc_load_keys kind, size_t i)
{
    return m && (unsigned)kind < 3 && i < m->load.keys[kind].n ? m->load.keys[kind].keys[i] : NULL;
}

const char *ptc_model_load_text(const ptc_model *m)
{
    return m && m->load.text ? m->load.text : "";
}

/* ---- forward and state dict ------------------------------------------------------------------ */

int ptc_model_forward(ptc_model *m, const float *x, int n, int h, int w, float *logits,
                      ptc_error *err)
{
    ptc_error local;
    if (!err) /* the internal layers write the detail through err */
        err = &local;
    ptc__err_clear(err);
    if (!m || !x || !logits)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_forward: m, x or logits is NULL");
    int rc = ptc__model_check_input(m, "ptc_model_forward", n, h, w, err);
    return rc < 0 ? rc : ptc__model_forward_hw(m->net, x, n, h, w, 0, logits, err);
}

int ptc_model_state_dict(ptc_model *m, ptc_doc *doc, ptc_value **root, ptc_error *err)
{
    ptc_error local;
    if (!err) /* the internal layers write the detail through err */
        err = &local;
    ptc__err_clear(err);
    if (!m || !doc || !root)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_state_dict: m, doc or root is NULL");
    *root = NULL;
    return ptc__model_state_dict(m->net, doc, root, err);
}
