/*
 * checkpoint.c - the training checkpoint of ptc train (see checkpoint.h): written with PyTorch's
 * usual keys and torch.optim.SGD's state dict, and read back as the hostile input any file is;
 * and the starting weights of --init from any file that holds a state dict.
 *
 * Layout (torch.load reads it): {"epoch": epochs completed, "step": optimizer steps,
 * "model_state_dict": OrderedDict, "optimizer_state_dict": exactly torch.optim.SGD.state_dict()
 * ({"state": {i: {"momentum_buffer": tensor}}, "param_groups": [{"lr", "momentum", "dampening",
 * "weight_decay", "nesterov", "maximize", "foreach", "differentiable", "fused", "params":
 * [0..61]}]}), "seed", "arch", "world"}. A checkpoint to resume from is hostile input like any
 * file: epoch must be at most the epochs asked for, step at most 2^22 per completed epoch (one
 * step per sample of the largest split), world from 1 to 65536 and equal to this run's, the
 * optimizer state at most one entry per parameter keyed by its index, one parameter group;
 * anything else is refused with the key and its range named (ptc__train_resume).
 */
#include "train/checkpoint.h"

#include <string.h>

/* The state dict inside whatever a file holds: the root, or its "model_state_dict" / "state_dict"
 * / "model" entry (training checkpoints). */
static const ptc_value *find_state_dict(const ptc_value *root)
{
    static const char *const keys[] = {"model_state_dict", "state_dict", "model"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const ptc_value *v = ptc_dict_get(root, keys[i]);
        if (v && ptc_value_kind_of(v) == PTC_VALUE_DICT)
            return v;
    }
    return root;
}

/* "module." when every key carries it (a DDP checkpoint), else NULL. */
static const char *ddp_prefix(const ptc_value *sd)
{
    size_t n = ptc_value_len(sd);
    for (size_t i = 0; i < n; i++)
        if (!ptc__key_has_prefix(ptc_dict_key(sd, i), "module."))
            return NULL;
    return n ? "module." : NULL;
}

int ptc__train_load_weights(ptc__model *m, const char *path, ptc_error *err)
{
    ptc_ckpt *c;
    int rc = ptc_ckpt_open(&c, path, NULL, err);
    if (rc < 0) {
        ptc__err_prefix(err, "%s: ", path);
        return rc;
    }
    const ptc_value *sd = find_state_dict(ptc_ckpt_root(c));
    rc = ptc__model_load_state_dict(m, sd, ddp_prefix(sd), 1, err);
    if (rc < 0)
        ptc__err_prefix(err, "%s: ", path);
    ptc_ckpt_close(c);
    return rc;
}

static ptc_value *dstr(ptc_doc *d, const char *s)
{
    return ptc_doc_str(d, s, (size_t)-1);
}

static int set(ptc_doc *d, ptc_value *dict, const char *key, ptc_value *v)
{
    return v ? ptc_doc_set(d, dict, dstr(d, key), v) : -1;
}

/* torch.optim.SGD.state_dict(): {"state": {i: {"momentum_buffer": t}}, "param_groups": [...]}. */
static int optimizer_state(ptc__model *m, const ptc__sgd_params *sp, double lr, ptc_doc *d,
                           ptc_value **out, ptc_error *err)
{
    ptc_value *state = ptc_doc_dict(d, 0), *groups = ptc_doc_seq(d, PTC_VALUE_LIST);
    ptc_value *g = ptc_doc_dict(d, 0), *params = ptc_doc_seq(d, PTC_VALUE_LIST);
    if (!state || !groups || !g || !params)
        goto doc_fail;
    int64_t idx = 0;
    for (size_t i = 0; i < ptc__model_nentries(m); i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        if (ptc_doc_push(d, params, ptc_doc_int(d, idx)) < 0)
            goto doc_fail;
        if (e->momentum) {
            ptc_storage *s = ptc_doc_storage(d, PTC_FLOAT32, e->numel * 4, NULL, 1, NULL);
            if (!s)
                goto doc_fail;
            if (ptc__model_read_momentum(m, e, ptc_storage_mutable(s), err) < 0)
                return err->code;
            ptc_value *t = ptc_doc_tensor(d, s, PTC_FLOAT32, e->ndim, e->shape, NULL, 0, 0);
            ptc_value *st = ptc_doc_dict(d, 0);
            if (!t || !st || set(d, st, "momentum_buffer", t) < 0 ||
                ptc_doc_set(d, state, ptc_doc_int(d, idx), st) < 0)
                goto doc_fail;
        }
        idx++;
    }
    if (set(d, g, "lr", ptc_doc_float(d, lr)) < 0 ||
        set(d, g, "momentum", ptc_doc_float(d, sp->momentum)) < 0 ||
        set(d, g, "dampening", ptc_doc_float(d, sp->dampening)) < 0 ||
        set(d, g, "weight_decay", ptc_doc_float(d, sp->weight_decay)) < 0 ||
        set(d, g, "nesterov", ptc_doc_bool(d, sp->nesterov)) < 0 ||
        set(d, g, "maximize", ptc_doc_bool(d, 0)) < 0 ||
        set(d, g, "foreach", ptc_doc_none(d)) < 0 ||
        set(d, g, "differentiable", ptc_doc_bool(d, 0)) < 0 ||
        set(d, g, "fused", ptc_doc_none(d)) < 0 || set(d, g, "params", params) < 0 ||
        ptc_doc_push(d, groups, g) < 0)
        goto doc_fail;
    ptc_value *o = ptc_doc_dict(d, 0);
    if (!o || set(d, o, "state", state) < 0 || set(d, o, "param_groups", groups) < 0)
        goto doc_fail;
    *out = o;
    return 0;
doc_fail:
    *err = *ptc_doc_error(d);
    return err->code;
}

int ptc__train_save(ptc__model *m, const ptc__train_ckpt_info *p, const char *path, int epoch,
                    int64_t step, double lr, int full, ptc_error *err)
{
    ptc_doc *d;
    int rc = ptc_doc_new(&d, err);
    if (rc < 0)
        return rc;
    ptc_value *sd = NULL, *root = NULL, *opt = NULL;
    rc = ptc__model_state_dict(m, d, &sd, err);
    if (rc == 0 && full) {
        root = ptc_doc_dict(d, 0);
        rc = optimizer_state(m, p->sgd, lr, d, &opt, err);
        if (rc == 0 && (!root || set(d, root, "epoch", ptc_doc_int(d, epoch)) < 0 ||
                        set(d, root, "step", ptc_doc_int(d, step)) < 0 ||
                        set(d, root, "model_state_dict", sd) < 0 ||
                        set(d, root, "optimizer_state_dict", opt) < 0 ||
                        set(d, root, "seed", ptc_doc_int(d, (int64_t)p->seed)) < 0 ||
                        set(d, root, "arch", dstr(d, ptc__arch_name(p->arch))) < 0 ||
                        set(d, root, "world", ptc_doc_int(d, p->world)) < 0)) {
            *err = *ptc_doc_error(d);
            rc = err->code;
        }
    } else if (rc == 0) {
        root = sd;
    }
    if (rc == 0) {
        ptc_save_params sp;
        ptc_save_params_default(&sp);
        sp.format = PTC_SAVE_PTH;
        rc = ptc_save(root, path, &sp, err);
        if (rc < 0)
            ptc__err_prefix(err, "%s: ", path);
    }
    ptc_doc_free(d);
    return rc;
}

/* Most optimizer steps one epoch can take: one per sample of the largest split the data layer
 * accepts (batch size 1, one process). */
#define MAX_STEPS_PER_EPOCH PTC__DATA_MAX_SAMPLES
#define MAX_WORLD           65536

/* root[key] as an integer in [lo, hi]: 0, or PTC_EFORMAT naming the key, the value and the range
 * (why says what the range comes from). A missing key is *out = dflt when dflt >= 0. */
static int checked_int(const ptc_value *root, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                       const char *why, const char *path, int64_t *out, ptc_error *err)
{
    const ptc_value *v = ptc_dict_get(root, key);
    if (!v && dflt >= 0) {
        *out = dflt;
        return 0;
    }
    if (!v)
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "%s is not a ptc training checkpoint: \"%s\" is missing (epoch, step, "
                        "model_state_dict and optimizer_state_dict are needed)",
                        path, key);
    int64_t x;
    int rc = ptc_value_kind_of(v) == PTC_VALUE_INT ? ptc_value_int(v, &x) : PTC_EFORMAT;
    if (rc == PTC_ERANGE)
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "%s: \"%s\" does not fit in 64 bits; it must be from %lld to %lld (%s)",
                        path, key, (long long)lo, (long long)hi, why);
    if (rc < 0)
        return ptc__err(err, PTC_EFORMAT, "", -1, "%s: \"%s\" is not an integer", path, key);
    if (x < lo || x > hi)
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "%s: \"%s\" is %lld; it must be from %lld to %lld (%s)", path, key,
                        (long long)x, (long long)lo, (long long)hi, why);
    *out = x;
    return 0;
}

/* Loads a checkpoint written by ptc__train_save(full): weights, momentum buffers, epochs and steps. The
 * file is as hostile as any other: every number in it is range-checked before it is used (epoch
 * against the epochs asked for, step against what that many epochs can take, so that nothing
 * after can overflow; world against the processes running; the optimizer's state against the
 * model's parameters). */
int ptc__train_resume(ptc__model *m, const char *path, int world, int epochs, int *epoch,
                      int64_t *step, ptc_error *err)
{
    ptc_ckpt *c;
    int rc = ptc_ckpt_open(&c, path, NULL, err);
    if (rc < 0) {
        ptc__err_prefix(err, "%s: ", path);
        return rc;
    }
    const ptc_value *root = ptc_ckpt_root(c);
    const ptc_value *sd = ptc_dict_get(root, "model_state_dict");
    const ptc_value *opt = ptc_dict_get(root, "optimizer_state_dict");
    int64_t e = -1, s = -1, w = 1, nparams = 0;
    for (size_t i = 0; i < ptc__model_nentries(m); i++)
        nparams += ptc__model_entry(m, i)->kind == PTC__ENTRY_PARAM;
    const ptc_value *state = opt ? ptc_dict_get(opt, "state") : NULL;
    const ptc_value *groups = opt ? ptc_dict_get(opt, "param_groups") : NULL;
    if (ptc_value_kind_of(root) != PTC_VALUE_DICT || !sd || !opt ||
        ptc_value_kind_of(sd) != PTC_VALUE_DICT || ptc_value_kind_of(opt) != PTC_VALUE_DICT) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1,
                      "%s is not a ptc training checkpoint (epoch, step, model_state_dict and "
                      "optimizer_state_dict are needed)",
                      path);
        goto out;
    }
    /* Checkpoints before "world" was written came from one process. */
    if ((rc = checked_int(root, "epoch", 0, epochs, -1,
                          "the epochs completed, at most the epochs this run is asked for", path,
                          &e, err)) < 0 ||
        (rc = checked_int(root, "step", 0, e * MAX_STEPS_PER_EPOCH, -1,
                          "steps taken: at most 4194304 per completed epoch", path, &s, err)) < 0 ||
        (rc = checked_int(root, "world", 1, MAX_WORLD, 1, "a process count", path, &w, err)) < 0)
        goto out;
    if (w != world) {
        rc = ptc__err(err, PTC_EINVAL, "", -1,
                      "%s was written by a run of %lld process(es); resuming it with %d would "
                      "change every epoch's sample order (use the same number of processes)",
                      path, (long long)w, world);
        goto out;
    }
    /* torch.optim.SGD.state_dict(): at most one state per parameter, keyed by its index; one
     * parameter group listing every parameter. */
    if (state &&
        (ptc_value_kind_of(state) != PTC_VALUE_DICT || (int64_t)ptc_value_len(state) > nparams)) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1,
                      "%s: optimizer_state_dict.state is not a dict of at most %lld entries (one "
                      "per parameter of the model)",
                      path, (long long)nparams);
        goto out;
    }
    if (groups && (ptc_value_kind_of(groups) != PTC_VALUE_LIST || ptc_value_len(groups) != 1)) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1,
                      "%s: optimizer_state_dict.param_groups is not a list of one group (ptc "
                      "trains with one)",
                      path);
        goto out;
    }
    const ptc_value *g0 = groups ? ptc_value_item(groups, 0) : NULL;
    if (g0 && ptc_value_kind_of(g0) != PTC_VALUE_DICT) {
        rc = ptc__err(err, PTC_EFORMAT, "", -1,
                      "%s: optimizer_state_dict.param_groups[0] (of kind %s) is not a dict of the "
                      "group's settings",
                      path, ptc_value_kind_name(ptc_value_kind_of(g0)));
        goto out;
    }
    uint8_t seen[1024] = {0};
    for (size_t k = 0; state && k < ptc_value_len(state); k++) {
        int64_t key;
        const ptc_value *kv = ptc_dict_key(state, k);
        const ptc_value *sv = ptc_dict_value(state, k);
        const ptc_value *mb = ptc_dict_get(sv, "momentum_buffer");
        if (ptc_value_kind_of(sv) != PTC_VALUE_DICT ||
            (mb && ptc_value_kind_of(mb) != PTC_VALUE_TENSOR)) {
            rc = ptc__err(err, PTC_EFORMAT, "", -1,
                          "%s: optimizer_state_dict.state entry %zu is not a dict whose "
                          "momentum_buffer is a tensor",
                          path, k);
            goto out;
        }
        if (ptc_value_kind_of(kv) != PTC_VALUE_INT || ptc_value_int(kv, &key) < 0 || key < 0 ||
            key >= nparams || key >= (int64_t)sizeof seen || seen[key]++) {
            rc = ptc__err(err, PTC_EFORMAT, "", -1,
                          "%s: optimizer_state_dict.state entry %zu: its key is not a parameter "
                          "index from 0 to %lld, or repeats one",
                          path, k, (long long)nparams - 1);
            goto out;
        }
    }
    rc = ptc__model_load_state_dict(m, sd, NULL, 1, err);
    float *buf = NULL;
    int64_t idx = 0;
    for (size_t i = 0; rc == 0 && i < ptc__model_nentries(m); i++) {
        ptc__entry *e2 = ptc__model_entry(m, i);
        if (e2->kind != PTC__ENTRY_PARAM)
            continue;
        const ptc_value *st = NULL;
        for (size_t k = 0; state && k < ptc_value_len(state); k++) {
            int64_t key;
            if (ptc_value_int(ptc_dict_key(state, k), &key) == 0 && key == idx)
                st = ptc_dict_value(state, k);
        }
        idx++;
        const ptc_tensor *t = ptc_value_tensor(ptc_dict_get(st, "momentum_buffer"));
        if (!t)
            continue;
        if (ptc_tensor_numel(t) != e2->numel) {
            rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: momentum buffer of %s has %lld elements",
                          path, e2->name, (long long)ptc_tensor_numel(t));
            break;
        }
        if (ptc_tensor_dtype(t) != PTC_FLOAT32) {
            rc = ptc__err(err, PTC_EFORMAT, "", -1, "%s: momentum buffer of %s is not float32",
                          path, e2->name);
            break;
        }
        float *nb = ptc__realloc(buf, (size_t)e2->numel * sizeof *nb);
        if (!nb) {
            rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
            break;
        }
        buf = nb;
        if ((rc = ptc_tensor_read(t, buf, (size_t)e2->numel * 4, err)) == 0)
            rc = ptc__model_write_momentum(m, e2, buf, err);
    }
    ptc__free(buf);
out:
    ptc_ckpt_close(c);
    if (rc == 0) {
        *epoch = (int)e; /* e <= epochs, an int */
        *step = s;
    }
    return rc;
}
