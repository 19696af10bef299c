/*
 * state.c - the model's state dict in both directions, cross-entropy, SGD over the model and the
 * learning-rate schedules.
 *
 * Loading accepts what load_state_dict(strict=True) accepts from torch: exactly the model's keys
 * (after an optional prefix such as DDP's "module." is removed), each tensor of the entry's shape;
 * floating dtypes are converted to float32 (float64, float16, bfloat16 exactly as torch's .to()),
 * num_batches_tracked from any integer dtype. Saving writes what
 * torchvision.models.resnet18().state_dict() holds: an OrderedDict of contiguous float32 tensors
 * (int64 for num_batches_tracked, 0-dimensional) with the _metadata attribute nn.Module.state_dict
 * sets (version 1 for every module, 2 for BatchNorm2d), in module pre-order.
 */
#include "nn/nn.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- loading ---------------------------------------------------------------------------------- */

static void list_add(char *buf, size_t cap, const char *name, int *count)
{
    size_t n = strlen(buf);
    if ((*count)++ < 8 && n + strlen(name) + 4 < cap)
        snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", name);
}

int ptc__model_load_state_dict(ptc__model *m, const ptc_value *root, const char *strip_prefix,
                               int strict, ptc_error *err)
{
    if (!m || !root || ptc_value_kind_of(root) != PTC_VALUE_DICT)
        return ptc__err(err, PTC_EINVAL, "", -1, "the state dict is not a dict");
    const char *pre = strip_prefix ? strip_prefix : "";
    size_t pl = strlen(pre);
    char missing[300] = "", unexpected[300] = "", key[256];
    int nmissing = 0, nunexpected = 0;
    /* Unexpected keys: anything that is not an entry once the prefix is removed. */
    for (size_t i = 0; i < ptc_value_len(root); i++) {
        const char *k;
        size_t kl;
        if (ptc_value_str(ptc_dict_key(root, i), &k, &kl) < 0) {
            list_add(unexpected, sizeof unexpected, "(a key that is not a str)", &nunexpected);
            continue;
        }
        const char *name = strncmp(k, pre, pl) == 0 ? k + pl : k;
        if (!ptc__model_find(m, name)) {
            char esc[96];
            list_add(unexpected, sizeof unexpected, ptc__escape(esc, sizeof esc, k, kl, true),
                     &nunexpected);
        }
    }
    float *buf = NULL;
    size_t bufn = 0;
    int rc = 0;
    for (size_t i = 0; i < ptc__model_nentries(m) && rc == 0; i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        snprintf(key, sizeof key, "%s%s", pre, e->name);
        const ptc_tensor *t = ptc_value_tensor(ptc_dict_get(root, key));
        if (!t && pl) /* a prefix that only some keys carry */
            t = ptc_value_tensor(ptc_dict_get(root, e->name));
        if (!t) {
            list_add(missing, sizeof missing, e->name, &nmissing);
            continue;
        }
        int nd = ptc_tensor_ndim(t);
        const int64_t *sh = ptc_tensor_shape(t);
        bool same = nd == e->ndim;
        for (int d = 0; same && d < nd; d++)
            same = sh[d] == e->shape[d];
        if (!same) {
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "size mismatch for %s: the checkpoint's tensor has %d dimensions or a "
                          "different shape than the model's",
                          e->name, nd);
            break;
        }
        if (e->kind == PTC__ENTRY_COUNTER) {
            rc = ptc__convert(t, PTC_INT64, e->counter, sizeof *e->counter, err);
            continue;
        }
        if ((size_t)e->numel > bufn) {
            float *nb = ptc__realloc(buf, (size_t)e->numel * sizeof *nb);
            if (!nb) {
                rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
                break;
            }
            buf = nb;
            bufn = (size_t)e->numel;
        }
        if ((rc = ptc__convert(t, PTC_FLOAT32, buf, (size_t)e->numel * sizeof *buf, err)) == 0)
            rc = ptc__model_write_entry(m, e, buf, err);
    }
    ptc__free(buf);
    if (rc == 0 && strict && (nmissing || nunexpected))
        rc = ptc__err(err, PTC_EINVAL, "", -1,
                      "the state dict does not match the model: %d missing key(s)%s%s%s, %d "
                      "unexpected key(s)%s%s%s",
                      nmissing, nmissing ? " (" : "", missing, nmissing ? ")" : "", nunexpected,
                      nunexpected ? " (" : "", unexpected, nunexpected ? ")" : "");
    return rc;
}

/* ---- saving ----------------------------------------------------------------------------------- */

static int meta(ptc_doc *d, ptc_value *md, const char *name, int version)
{
    ptc_value *v = ptc_doc_dict(d, 0);
    if (!v || ptc_doc_set(d, v, ptc_doc_str(d, "version", (size_t)-1), ptc_doc_int(d, version)) < 0)
        return -1;
    return ptc_doc_set(d, md, ptc_doc_str(d, name, (size_t)-1), v);
}

/* nn.Module.state_dict's _metadata for torchvision's ResNet-18, in module pre-order. */
static int resnet_metadata(ptc_doc *d, ptc_value *md)
{
    static const char *const stem[] = {"conv1", "bn1", "relu", "maxpool"};
    static const char *const inner[] = {"conv1", "bn1", "relu", "conv2", "bn2"};
    char name[64];
    if (meta(d, md, "", 1) < 0)
        return -1;
    for (size_t i = 0; i < 4; i++)
        if (meta(d, md, stem[i], strcmp(stem[i], "bn1") == 0 ? 2 : 1) < 0)
            return -1;
    for (int l = 1; l <= 4; l++) {
        snprintf(name, sizeof name, "layer%d", l);
        if (meta(d, md, name, 1) < 0)
            return -1;
        for (int b = 0; b < 2; b++) {
            snprintf(name, sizeof name, "layer%d.%d", l, b);
            if (meta(d, md, name, 1) < 0)
                return -1;
            for (size_t i = 0; i < 5; i++) {
                snprintf(name, sizeof name, "layer%d.%d.%s", l, b, inner[i]);
                if (meta(d, md, name, strncmp(inner[i], "bn", 2) == 0 ? 2 : 1) < 0)
                    return -1;
            }
            if (l > 1 && b == 0) {
                snprintf(name, sizeof name, "layer%d.0.downsample", l);
                if (meta(d, md, name, 1) < 0)
                    return -1;
                snprintf(name, sizeof name, "layer%d.0.downsample.0", l);
                if (meta(d, md, name, 1) < 0)
                    return -1;
                snprintf(name, sizeof name, "layer%d.0.downsample.1", l);
                if (meta(d, md, name, 2) < 0)
                    return -1;
            }
        }
    }
    if (meta(d, md, "avgpool", 1) < 0 || meta(d, md, "fc", 1) < 0)
        return -1;
    return 0;
}

static int numbers(ptc_doc *d, ptc_value *dict, const char *key, const double *v, int n)
{
    ptc_value *l = ptc_doc_seq(d, PTC_VALUE_LIST);
    for (int i = 0; l && i < n; i++)
        if (ptc_doc_push(d, l, ptc_doc_float(d, v[i])) < 0)
            return -1;
    return l ? ptc_doc_set(d, dict, ptc_doc_str(d, key, (size_t)-1), l) : -1;
}

/* _metadata["ptc.preprocess"] (nn.h, ptc__model_set_preprocess): plain str, float, int, list and
 * dict, which torch.load(weights_only=True) accepts and load_state_dict never looks at (it reads
 * _metadata by module name, and no module is named "ptc.preprocess"). */
static int preprocess_metadata(ptc__model *m, ptc_doc *d, ptc_value *md)
{
    const char *dataset;
    double mean[3], std[3];
    if (!ptc__model_preprocess(m, &dataset, mean, std))
        return 0;
    static const double input[2] = {32, 32}, source[2] = {28, 28};
    ptc_value *r = ptc_doc_dict(d, 0);
    if (!r || ptc_doc_set(d, r, ptc_doc_str(d, "dataset", (size_t)-1),
                          ptc_doc_str(d, dataset, (size_t)-1)) < 0 ||
        numbers(d, r, "mean", mean, 3) < 0 || numbers(d, r, "std", std, 3) < 0 ||
        numbers(d, r, "input_size", input, 2) < 0)
        return -1;
    if (strcmp(dataset, "fashion-mnist") == 0 &&
        (numbers(d, r, "source_size", source, 2) < 0 ||
         ptc_doc_set(d, r, ptc_doc_str(d, "pad", (size_t)-1), ptc_doc_int(d, 2)) < 0 ||
         ptc_doc_set(d, r, ptc_doc_str(d, "channels", (size_t)-1),
                     ptc_doc_str(d, "grey replicated to RGB", (size_t)-1)) < 0))
        return -1;
    return ptc_doc_set(d, md, ptc_doc_str(d, "ptc.preprocess", (size_t)-1), r);
}

int ptc__model_state_dict(ptc__model *m, ptc_doc *d, ptc_value **out, ptc_error *err)
{
    ptc_value *sd = ptc_doc_dict(d, 1);
    if (!sd)
        goto doc_fail;
    for (size_t i = 0; i < ptc__model_nentries(m); i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        bool counter = e->kind == PTC__ENTRY_COUNTER;
        ptc_dtype dt = counter ? PTC_INT64 : PTC_FLOAT32;
        int64_t nbytes = counter ? 8 : e->numel * 4;
        ptc_storage *s = ptc_doc_storage(d, dt, nbytes, NULL, 1, NULL);
        if (!s)
            goto doc_fail;
        void *data = ptc_storage_mutable(s);
        if (counter)
            memcpy(data, e->counter, 8);
        else if (ptc__model_read_entry(m, e, data, err) < 0)
            return err->code;
        ptc_value *t = ptc_doc_tensor(d, s, dt, e->ndim, e->shape, NULL, 0, 0);
        if (!t || ptc_doc_set(d, sd, ptc_doc_str(d, e->name, (size_t)-1), t) < 0)
            goto doc_fail;
    }
    ptc_value *md = ptc_doc_dict(d, 1), *attrs = ptc_doc_dict(d, 0);
    if (!md || !attrs || resnet_metadata(d, md) < 0 || preprocess_metadata(m, d, md) < 0 ||
        ptc_doc_set(d, attrs, ptc_doc_str(d, "_metadata", (size_t)-1), md) < 0 ||
        ptc_doc_set_attrs(d, sd, attrs) < 0)
        goto doc_fail;
    *out = sd;
    return 0;
doc_fail:
    if (err)
        *err = *ptc_doc_error(d);
    return err ? err->code : PTC_ENOMEM;
}

/* ---- cross-entropy ---------------------------------------------------------------------------- */

int ptc__cross_entropy(const float *logits, const int64_t *labels, int n, int classes,
                       double *loss, float *dlogits, int64_t *correct, ptc_error *err)
{
    double total = 0;
    int64_t right = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * (size_t)classes;
        int64_t y = labels[i];
        if (y < 0 || y >= classes)
            return ptc__err(err, PTC_EINVAL, "", -1, "label %lld of sample %d is not a class",
                            (long long)y, i);
        int best = 0;
        double mx = z[0];
        for (int c = 1; c < classes; c++)
            if (z[c] > z[best])
                best = c;
        mx = z[best];
        double sum = 0;
        for (int c = 0; c < classes; c++)
            sum += exp((double)z[c] - mx);
        double lse = mx + log(sum);
        total += lse - (double)z[y];
        right += best == y;
        if (dlogits) {
            float *g = dlogits + (size_t)i * (size_t)classes;
            for (int c = 0; c < classes; c++)
                g[c] = (float)((exp((double)z[c] - lse) - (c == y ? 1.0 : 0.0)) / n);
        }
    }
    if (loss)
        *loss = total / n;
    if (correct)
        *correct = right;
    return 0;
}

/* ---- learning rates ----------------------------------------------------------------------------- */

double ptc__schedule_lr(const ptc__schedule *s, int64_t step, int64_t epoch)
{
    switch (s->kind) {
    case PTC__SCHED_STEP:
        return s->base_lr * pow(s->gamma, (double)(s->step_size > 0 ? epoch / s->step_size : 0));
    case PTC__SCHED_COSINE:
        if (step < s->warmup)
            return s->base_lr * (double)(step + 1) / (double)s->warmup;
        if (s->total <= s->warmup)
            return s->base_lr;
        return 0.5 * s->base_lr *
               (1.0 + cos(M_PI * (double)(step - s->warmup) / (double)(s->total - s->warmup)));
    default:
        return s->base_lr;
    }
}

int ptc__schedule_parse(ptc__schedule *s, const char *text, double base_lr)
{
    memset(s, 0, sizeof *s);
    s->base_lr = base_lr;
    char tail;
    long long a;
    double g;
    if (strcmp(text, "constant") == 0) {
        s->kind = PTC__SCHED_CONSTANT;
        return 0;
    }
    if (strcmp(text, "cosine") == 0) {
        s->kind = PTC__SCHED_COSINE;
        return 0;
    }
    if (sscanf(text, "cosine:%lld%c", &a, &tail) == 1 && a >= 0) {
        s->kind = PTC__SCHED_COSINE;
        s->warmup = a;
        return 0;
    }
    if (sscanf(text, "step:%lld:%lf%c", &a, &g, &tail) == 2 && a > 0 && g > 0) {
        s->kind = PTC__SCHED_STEP;
        s->step_size = a;
        s->gamma = g;
        return 0;
    }
    return -1;
}

double ptc__lr_scale(double lr, ptc__lr_scaling s, int world)
{
    return s == PTC__LR_LINEAR ? lr * world : s == PTC__LR_SQRT ? lr * sqrt((double)world) : lr;
}
