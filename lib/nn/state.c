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
#include <stdlib.h>
#include <string.h>

/* ---- loading ----------------------------------------------------------------------------------
 *
 * torch's Module.load_state_dict (torch 2.6, torch/nn/modules/module.py), reproduced for the text
 * it prints and the keys it reports:
 *   - the modules are visited in pre-order (the root, conv1, bn1, relu, maxpool, layer1, layer1.0,
 *     layer1.0.conv1, ...); each sees the keys that start with its prefix;
 *   - a module reports as unexpected its prefix + "_extra_state" (first: ResNet's modules have
 *     no extra state), each of its keys "a.b..." whose first component a is not a child module
 *     ("fc.weight.x" is fc's: weight is no module), and each key "a" that is not one of its own
 *     parameters or buffers ("fc" is the root's: a module is not state);
 *   - a parameter or buffer whose key is absent is missing, except num_batches_tracked of a
 *     BatchNorm whose _metadata version is absent or below 2 (a state dict without _metadata, a
 *     plain dict, has none): torch then keeps the module's own value;
 *   - a value that is not a tensor, and a shape that differs, are errors (also when not strict);
 *     a 0-dimensional entry takes element 0 of a 1-dimensional tensor;
 *   - strict: "Missing key(s) in state_dict: ..." and "Unexpected key(s) in state_dict: ..." go
 *     before those errors;
 *   - the result: "Error(s) in loading state_dict for ResNet:\n\t" and the errors joined by
 *     "\n\t"; else _IncompatibleKeys' repr, "<All keys matched successfully>" when both lists are
 *     empty.
 * The prefix removal is consume_prefix_in_state_dict_if_present's, done by ptc_state_dict_rename
 * (lib/pth/rename.c, what `ptc convert --strip-prefix` uses too): each key that carries the
 * prefix is popped and stored again without it, so the stripped keys come after the others (an
 * existing key keeps its place and takes the stripped key's value), and the _metadata keys are
 * renamed the same way. Unlike torch, nothing is copied unless everything passes.
 */

/* The longest text a load report keeps: beyond it the text ends with a note (a hostile state dict
 * of a million long keys would otherwise make gigabytes of text). */
#define LOAD_TEXT_MAX ((size_t)64 << 20)
#define MAX_MODULES   96

void ptc__load_report_free(ptc__load_report *r)
{
    if (!r)
        return;
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < r->keys[k].n; i++)
            ptc__free(r->keys[k].keys[i]);
        ptc__free(r->keys[k].keys);
    }
    ptc__free(r->text);
    memset(r, 0, sizeof *r);
}

/* A key as the terminal may see it: bytes of valid UTF-8 that print are kept as torch prints
 * them (quotes and backslashes included), control bytes and invalid UTF-8 become \xNN. */
static int put_key(ptc__buf *b, const char *k, size_t kl)
{
    const uint8_t *p = (const uint8_t *)k;
    for (size_t i = 0; i < kl;) {
        size_t n = 1;
        if (p[i] >= 0x80)
            for (n = 2; n <= 4 && i + n <= kl && !ptc__utf8_valid(p + i, n); n++)
                ;
        if (p[i] >= 0x20 && p[i] != 0x7f && (p[i] < 0x80 || n <= 4) && i + n <= kl) {
            if (ptc__buf_append(b, p + i, n) < 0)
                return PTC_ENOMEM;
            i += n;
        } else {
            if (ptc__buf_printf(b, "\\x%02x", p[i]) < 0)
                return PTC_ENOMEM;
            i++;
        }
    }
    return 0;
}

/* A str as Python's repr writes it: single quotes unless the text has one and no double quote,
 * \\ \n \r \t and the quote escaped, other control bytes \xNN (and bytes that are not UTF-8,
 * which Python would show as \udcNN surrogates). */
static int put_repr(ptc__buf *b, const char *k, size_t kl)
{
    bool sq = memchr(k, '\'', kl) != NULL, dq = memchr(k, '"', kl) != NULL;
    char q = sq && !dq ? '"' : '\'';
    const uint8_t *p = (const uint8_t *)k;
    int rc = ptc__buf_append(b, &q, 1);
    for (size_t i = 0; i < kl && rc == 0;) {
        size_t n = 1;
        if (p[i] >= 0x80)
            for (n = 2; n <= 4 && i + n <= kl && !ptc__utf8_valid(p + i, n); n++)
                ;
        if (p[i] >= 0x80 && n <= 4 && i + n <= kl) {
            rc = ptc__buf_append(b, p + i, n);
            i += n;
            continue;
        }
        char c = (char)p[i++];
        if (c == '\\' || c == q)
            rc = ptc__buf_printf(b, "\\%c", c);
        else if (c == '\n')
            rc = ptc__buf_append(b, "\\n", 2);
        else if (c == '\r')
            rc = ptc__buf_append(b, "\\r", 2);
        else if (c == '\t')
            rc = ptc__buf_append(b, "\\t", 2);
        else if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            rc = ptc__buf_printf(b, "\\x%02x", (unsigned char)c);
        else
            rc = ptc__buf_append(b, &c, 1);
    }
    return rc < 0 ? rc : ptc__buf_append(b, &q, 1);
}

static int keylist_add(ptc__keylist *l, const char *k, size_t kl)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **nk = ptc__realloc(l->keys, cap * sizeof *nk);
        if (!nk)
            return PTC_ENOMEM;
        l->keys = nk;
        l->cap = cap;
    }
    ptc__buf b = {0};
    if (put_key(&b, k, kl) < 0 || ptc__buf_append(&b, "", 1) < 0) {
        ptc__buf_free(&b);
        return PTC_ENOMEM;
    }
    l->keys[l->n++] = (char *)b.data;
    return 0;
}

/* The modules of the network in pre-order ("" the root), with nn.Module's _metadata version of
 * each (2 for BatchNorm2d). */
typedef struct module_list {
    char name[MAX_MODULES][40];
    int version[MAX_MODULES];
    int n;
} module_list;

typedef int (*module_fn)(void *ctx, const char *name, int version);

/* torchvision's ResNet-18 modules in pre-order (the same for both architectures: the CIFAR
 * variant's maxpool is an Identity, a module without state). */
static int resnet_modules(module_fn fn, void *ctx)
{
    static const char *const stem[] = {"conv1", "bn1", "relu", "maxpool"};
    static const char *const inner[] = {"conv1", "bn1", "relu", "conv2", "bn2"};
    char name[40];
    if (fn(ctx, "", 1) < 0)
        return -1;
    for (size_t i = 0; i < 4; i++)
        if (fn(ctx, stem[i], strcmp(stem[i], "bn1") == 0 ? 2 : 1) < 0)
            return -1;
    for (int l = 1; l <= 4; l++) {
        snprintf(name, sizeof name, "layer%d", l);
        if (fn(ctx, name, 1) < 0)
            return -1;
        for (int b = 0; b < 2; b++) {
            snprintf(name, sizeof name, "layer%d.%d", l, b);
            if (fn(ctx, name, 1) < 0)
                return -1;
            for (size_t i = 0; i < 5; i++) {
                snprintf(name, sizeof name, "layer%d.%d.%s", l, b, inner[i]);
                if (fn(ctx, name, strncmp(inner[i], "bn", 2) == 0 ? 2 : 1) < 0)
                    return -1;
            }
            if (l > 1 && b == 0) {
                static const char *const ds[] = {"downsample", "downsample.0", "downsample.1"};
                for (int i = 0; i < 3; i++) {
                    snprintf(name, sizeof name, "layer%d.0.%s", l, ds[i]);
                    if (fn(ctx, name, i == 2 ? 2 : 1) < 0)
                        return -1;
                }
            }
        }
    }
    if (fn(ctx, "avgpool", 1) < 0 || fn(ctx, "fc", 1) < 0)
        return -1;
    return 0;
}

static int list_module(void *ctx, const char *name, int version)
{
    module_list *ml = ctx;
    if (ml->n == MAX_MODULES)
        return -1;
    snprintf(ml->name[ml->n], sizeof ml->name[0], "%s", name);
    ml->version[ml->n++] = version;
    return 0;
}

/* The module named by name[0..len), or -1. */
static int module_index(const module_list *ml, const char *name, size_t len)
{
    for (int i = 0; i < ml->n; i++)
        if (strlen(ml->name[i]) == len && memcmp(ml->name[i], name, len) == 0)
            return i;
    return -1;
}

/* One key of the state dict as the load sees it (after the prefix is removed). */
typedef struct view_key {
    const char *k;
    size_t kl;
    const ptc_value *v;
    size_t order;      /* its place in the (re-ordered) dict */
    int unexpected_at; /* the module that reports it as unexpected; -1 when none does */
    int extra;         /* that module's prefix + "_extra_state": reported first */
} view_key;

/* Open addressing over the keys by FNV-1a: index + 1 of the key, 0 for an empty slot. */
typedef struct key_index {
    size_t *slot;
    size_t mask;
} key_index;

static uint64_t key_hash(const char *k, size_t kl)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < kl; i++)
        h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
    return h;
}

static view_key *index_find(const key_index *ix, view_key *keys, const char *k, size_t kl)
{
    for (size_t s = key_hash(k, kl) & ix->mask;; s = (s + 1) & ix->mask) {
        if (!ix->slot[s])
            return NULL;
        view_key *v = &keys[ix->slot[s] - 1];
        if (v->kl == kl && memcmp(v->k, k, kl) == 0)
            return v;
    }
}

static void index_put(key_index *ix, view_key *keys, size_t i)
{
    size_t s = key_hash(keys[i].k, keys[i].kl) & ix->mask;
    while (ix->slot[s])
        s = (s + 1) & ix->mask;
    ix->slot[s] = i + 1;
}

/* Which module reports key k as unexpected (-1: none), by walking down the module tree; *extra:
 * it is that module's prefix + "_extra_state" (reported before the module's other keys). */
static int unexpected_at(const module_list *ml, ptc__model *m, const char *k, size_t kl, int *extra)
{
    int cur = 0;   /* the root */
    size_t pl = 0; /* the prefix: k[0..pl) is the module's name and a '.' */
    *extra = 0;
    for (;;) {
        const char *rest = k + pl;
        size_t rl = kl - pl;
        if (rl == 12 && memcmp(rest, "_extra_state", 12) == 0) {
            *extra = 1;
            return cur;
        }
        const char *dot = memchr(rest, '.', rl);
        size_t fl = dot ? (size_t)(dot - rest) : rl;
        if (dot) { /* "child.more": the child module sees it, or this module reports it */
            int child = fl ? module_index(ml, k, pl + fl) : -1;
            if (child < 0)
                return cur;
            cur = child;
            pl += fl + 1;
            continue;
        }
        /* One component: this module's own parameter or buffer, or unexpected (a child
         * module's bare name too: modules are not state). */
        char name[64];
        if (pl + fl < sizeof name && !memchr(k, 0, pl + fl)) {
            memcpy(name, k, pl + fl);
            name[pl + fl] = 0;
            if (ptc__model_find(m, name))
                return -1;
        }
        return cur;
    }
}

/* torch's type(x) for a value that is not a tensor. */
static const char *py_type(const ptc_value *v)
{
    switch (ptc_value_kind_of(v)) {
    case PTC_VALUE_NONE:
        return "<class 'NoneType'>";
    case PTC_VALUE_BOOL:
        return "<class 'bool'>";
    case PTC_VALUE_INT:
        return "<class 'int'>";
    case PTC_VALUE_FLOAT:
        return "<class 'float'>";
    case PTC_VALUE_STR:
        return "<class 'str'>";
    case PTC_VALUE_BYTES:
        return "<class 'bytes'>";
    case PTC_VALUE_TUPLE:
        return "<class 'tuple'>";
    case PTC_VALUE_LIST:
        return "<class 'list'>";
    case PTC_VALUE_DICT:
        return ptc_dict_is_ordered(v) ? "<class 'collections.OrderedDict'>" : "<class 'dict'>";
    case PTC_VALUE_SET:
        return "<class 'set'>";
    case PTC_VALUE_COMPLEX:
        return "<class 'complex'>";
    case PTC_VALUE_DTYPE:
        return "<class 'torch.dtype'>";
    case PTC_VALUE_DEVICE:
        return "<class 'torch.device'>";
    case PTC_VALUE_SIZE:
        return "<class 'torch.Size'>";
    default:
        return "<class 'object'>";
    }
}

static int put_size(ptc__buf *b, int nd, const int64_t *sh)
{
    int rc = ptc__buf_append(b, "torch.Size([", 12);
    for (int d = 0; d < nd && rc == 0; d++)
        rc = ptc__buf_printf(b, "%s%lld", d ? ", " : "", (long long)sh[d]);
    return rc < 0 ? rc : ptc__buf_append(b, "])", 2);
}

/* _metadata's version of module `name` (its keys were renamed with the state dict's); 0 when
 * absent (None). */
static int64_t meta_version(const ptc_value *md, const char *name)
{
    int64_t v = 0;
    const ptc_value *local = md ? ptc_dict_get(md, name) : NULL;
    if (!local || ptc_value_int(ptc_dict_get(local, "version"), &v) < 0)
        return 0;
    return v;
}

static int cmp_unexpected(const void *a, const void *b)
{
    const view_key *x = *(view_key *const *)a, *y = *(view_key *const *)b;
    if (x->unexpected_at != y->unexpected_at)
        return x->unexpected_at < y->unexpected_at ? -1 : 1;
    if (x->extra != y->extra)
        return x->extra ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The dtypes ptc__convert turns into float32 and int64. */
static bool convertible(ptc_dtype dt)
{
    switch (dt) {
    case PTC_FLOAT64:
    case PTC_FLOAT32:
    case PTC_FLOAT16:
    case PTC_BFLOAT16:
    case PTC_INT64:
    case PTC_INT32:
    case PTC_INT16:
    case PTC_INT8:
    case PTC_UINT8:
    case PTC_BOOL:
        return true;
    default:
        return false;
    }
}

/* What the check found for one entry. */
typedef struct entry_plan {
    const ptc_tensor *t; /* the tensor to copy, NULL when nothing is copied */
} entry_plan;

int ptc__model_load_state_dict_ex(ptc__model *m, const ptc_value *root, const char *strip_prefix,
                                  int strict, int skip_mismatched, ptc__load_report *rep,
                                  ptc_error *err)
{
    ptc__load_report local = {0};
    if (!rep)
        rep = &local;
    ptc__load_report_free(rep);
    if (!m || !root || ptc_value_kind_of(root) != PTC_VALUE_DICT)
        return ptc__err(err, PTC_EINVAL, "", -1, "the state dict is not a dict");
    /* The prefix is removed by the library's one implementation of torch's
     * consume_prefix_in_state_dict_if_present (ptc_state_dict_rename, keys and _metadata alike),
     * into a document whose new keys live until the end of this load. */
    ptc_doc *renamed = NULL;
    if (strip_prefix && strip_prefix[0]) {
        int rrc = ptc_doc_new(&renamed, err);
        if (rrc == 0)
            rrc = ptc_state_dict_rename(renamed, root, strip_prefix, NULL, &root, NULL, err);
        if (rrc < 0) {
            ptc_doc_free(renamed);
            return rrc;
        }
    }
    const size_t nk = ptc_value_len(root), ne = ptc__model_nentries(m);
    view_key *keys = NULL, **unexp = NULL;
    key_index ix = {0};
    entry_plan *plan = NULL;
    module_list *ml = NULL;
    ptc__buf errs = {0}, text = {0};
    void *buf = NULL;
    size_t bufn = 0, nerr = 0, nv = 0;
    int rc = 0;
    size_t cap = 16;
    while (cap < 2 * nk)
        cap *= 2;
    keys = ptc__calloc(nk ? nk : 1, sizeof *keys);
    unexp = ptc__calloc(nk ? nk : 1, sizeof *unexp);
    ix.slot = ptc__calloc(cap, sizeof *ix.slot);
    ix.mask = cap - 1;
    plan = ptc__calloc(ne, sizeof *plan);
    ml = ptc__calloc(1, sizeof *ml);
    if (!keys || !unexp || !ix.slot || !plan || !ml) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "loading a state dict: out of memory");
        goto done;
    }
    if (resnet_modules(list_module, ml) < 0) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1, "loading a state dict: too many modules");
        goto done;
    }
    /* The keys in the order the load sees them (the renamed dict's: those that had no prefix, then
     * the others stripped of it; a stripped key already present took its place). */
    for (size_t i = 0; i < nk; i++) {
        const char *k;
        size_t kl;
        if (ptc_value_str(ptc_dict_key(root, i), &k, &kl) < 0) {
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "state dict key %zu is not a str (torch's load_state_dict fails on it "
                          "too)",
                          i);
            goto done;
        }
        view_key *v = index_find(&ix, keys, k, kl);
        if (v) {
            v->v = ptc_dict_value(root, i);
            continue;
        }
        keys[nv] = (view_key){k, kl, ptc_dict_value(root, i), nv, -1, 0};
        index_put(&ix, keys, nv);
        nv++;
    }
    /* Unexpected keys, in the order of the modules that report them. */
    size_t nunexp = 0;
    for (size_t i = 0; i < nv; i++)
        if ((keys[i].unexpected_at = unexpected_at(ml, m, keys[i].k, keys[i].kl, &keys[i].extra)) >=
            0)
            unexp[nunexp++] = &keys[i];
    qsort(unexp, nunexp, sizeof *unexp, cmp_unexpected);
    for (size_t i = 0; i < nunexp && rc == 0; i++)
        rc = keylist_add(&rep->keys[1], unexp[i]->k, unexp[i]->kl);
    /* Each entry: missing, not a tensor, another shape, or to be copied. */
    const ptc_value *md = ptc_dict_get(ptc_dict_attrs(root), "_metadata");
    for (size_t i = 0; i < ne && rc == 0; i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        view_key *v = index_find(&ix, keys, e->name, strlen(e->name));
        if (!v) {
            if (e->kind == PTC__ENTRY_COUNTER) {
                char mod[64];
                snprintf(mod, sizeof mod, "%.*s", (int)(strrchr(e->name, '.') - e->name), e->name);
                if (meta_version(md, mod) < 2)
                    continue; /* torch keeps the module's own count */
            }
            rc = keylist_add(&rep->keys[0], e->name, strlen(e->name));
            continue;
        }
        const ptc_tensor *t = ptc_value_tensor(v->v);
        if (!t) {
            nerr++;
            rc = ptc__buf_printf(&errs,
                                 "\n\tWhile copying the parameter named \"%s\", expected "
                                 "torch.Tensor or Tensor-like object from checkpoint but received "
                                 "%s",
                                 e->name, py_type(v->v));
            continue;
        }
        int nd = ptc_tensor_ndim(t);
        const int64_t *sh = ptc_tensor_shape(t);
        int64_t one = 1;
        if (e->ndim == 0 && nd == 1 && sh[0] >= 1) { /* torch: input_param[0] */
            nd = 0;
            sh = &one;
        }
        bool same = nd == e->ndim;
        for (int d = 0; same && d < nd; d++)
            same = sh[d] == e->shape[d];
        if (!same) {
            rc = keylist_add(&rep->keys[2], e->name, strlen(e->name));
            if (rc == 0 && !skip_mismatched) {
                nerr++;
                if ((rc = ptc__buf_printf(&errs,
                                          "\n\tsize mismatch for %s: copying a param with "
                                          "shape ",
                                          e->name)) == 0 &&
                    (rc = put_size(&errs, nd, sh)) == 0 &&
                    (rc = ptc__buf_append(&errs, " from checkpoint, the shape in current model is ",
                                          48)) == 0 &&
                    (rc = put_size(&errs, e->ndim, e->shape)) == 0)
                    rc = ptc__buf_append(&errs, ".", 1);
            }
            continue;
        }
        if (!convertible(ptc_tensor_dtype(t))) {
            /* torch would copy_ (a complex tensor's real part, say); ptc refuses before it writes
             * anything rather than after. */
            rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                          "%s: a %s tensor: ptc loads real floating, integer and bool tensors "
                          "only",
                          e->name, ptc_dtype_name(ptc_tensor_dtype(t)));
            goto done;
        }
        plan[i].t = t;
    }
    if (rc < 0) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "loading a state dict: out of memory");
        goto done;
    }
    /* The text torch prints. */
    const ptc__keylist *mis = &rep->keys[0], *une = &rep->keys[1];
    bool failed = nerr || (strict && (mis->n || une->n));
    if (failed) {
        rc = ptc__buf_printf(&text, "Error(s) in loading state_dict for ResNet:");
        for (int l = 0; l < 2 && rc == 0; l++) {
            if (!strict || !rep->keys[l].n)
                continue;
            rc = ptc__buf_printf(&text,
                                 "\n\t%s key(s) in state_dict: ", l ? "Unexpected" : "Missing");
            for (size_t i = 0; i < rep->keys[l].n && rc == 0 && text.len < LOAD_TEXT_MAX; i++)
                rc = ptc__buf_printf(&text, "%s\"%s\"", i ? ", " : "", rep->keys[l].keys[i]);
            if (rc == 0)
                rc = ptc__buf_append(&text, ". ", 2);
        }
        if (rc == 0 && errs.len)
            rc = ptc__buf_append(&text, errs.data, errs.len);
    } else if (mis->n || une->n) {
        rc = ptc__buf_printf(&text, "_IncompatibleKeys(missing_keys=[");
        for (size_t i = 0; i < mis->n && rc == 0 && text.len < LOAD_TEXT_MAX; i++) {
            if (i)
                rc = ptc__buf_append(&text, ", ", 2);
            if (rc == 0)
                rc = put_repr(&text, mis->keys[i], strlen(mis->keys[i]));
        }
        if (rc == 0)
            rc = ptc__buf_printf(&text, "], unexpected_keys=[");
        for (size_t i = 0; i < nunexp && rc == 0 && text.len < LOAD_TEXT_MAX; i++) {
            if (i)
                rc = ptc__buf_append(&text, ", ", 2);
            if (rc == 0)
                rc = put_repr(&text, unexp[i]->k, unexp[i]->kl);
        }
        if (rc == 0)
            rc = ptc__buf_append(&text, "])", 2);
    } else {
        rc = ptc__buf_printf(&text, "<All keys matched successfully>");
    }
    if (rc == 0 && text.len >= LOAD_TEXT_MAX) {
        text.len = LOAD_TEXT_MAX;
        rc = ptc__buf_printf(&text, "... (cut at %zu bytes)", LOAD_TEXT_MAX);
    }
    if (rc == 0)
        rc = ptc__buf_append(&text, "", 1);
    if (rc < 0) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "loading a state dict: out of memory");
        goto done;
    }
    rep->text = (char *)text.data;
    text.data = NULL;
    if (failed) {
        rc = ptc__err(err, PTC_EINVAL, "", -1, "%s", rep->text);
        goto done;
    }
    /* Everything checked: the copies. */
    for (size_t i = 0; i < ne && rc == 0; i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        const ptc_tensor *t = plan[i].t;
        if (!t)
            continue;
        bool counter = e->kind == PTC__ENTRY_COUNTER;
        size_t need = (size_t)ptc_tensor_numel(t) * (counter ? 8 : 4);
        if (need > bufn) {
            void *nb = ptc__realloc(buf, need);
            if (!nb) {
                rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
                break;
            }
            buf = nb;
            bufn = need;
        }
        if ((rc = ptc__convert(t, counter ? PTC_INT64 : PTC_FLOAT32, buf, need, err)) < 0) {
            ptc__err_prefix(err, "%s: ", e->name);
            break;
        }
        if (counter)
            memcpy(e->counter, buf, 8);
        else
            rc = ptc__model_write_entry(m, e, buf, err);
    }
done:
    ptc_doc_free(renamed);
    ptc__free(keys);
    ptc__free(unexp);
    ptc__free(ix.slot);
    ptc__free(plan);
    ptc__free(ml);
    ptc__free(buf);
    ptc__buf_free(&errs);
    ptc__buf_free(&text);
    ptc__load_report_free(&local);
    return rc;
}

int ptc__model_load_state_dict(ptc__model *m, const ptc_value *root, const char *strip_prefix,
                               int strict, ptc_error *err)
{
    return ptc__model_load_state_dict_ex(m, root, strip_prefix, strict, 0, NULL, err);
}

/* ---- saving ----------------------------------------------------------------------------------- */

typedef struct meta_ctx {
    ptc_doc *d;
    ptc_value *md;
} meta_ctx;

/* One module's {"version": v} in the _metadata dict. */
static int meta(void *ctx, const char *name, int version)
{
    meta_ctx *c = ctx;
    ptc_value *v = ptc_doc_dict(c->d, 0);
    if (!v || ptc_doc_set(c->d, v, ptc_doc_str(c->d, "version", (size_t)-1),
                          ptc_doc_int(c->d, version)) < 0)
        return -1;
    return ptc_doc_set(c->d, c->md, ptc_doc_str(c->d, name, (size_t)-1), v);
}

/* dict[key] = [v0, v1, ...]: floats, or ints when integral is set. */
static int numbers(ptc_doc *d, ptc_value *dict, const char *key, const double *v, int n,
                   int integral)
{
    ptc_value *l = ptc_doc_seq(d, PTC_VALUE_LIST);
    for (int i = 0; l && i < n; i++)
        if (ptc_doc_push(d, l, integral ? ptc_doc_int(d, (int64_t)v[i]) : ptc_doc_float(d, v[i])) <
            0)
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
    if (!r ||
        ptc_doc_set(d, r, ptc_doc_str(d, "dataset", (size_t)-1),
                    ptc_doc_str(d, dataset, (size_t)-1)) < 0 ||
        numbers(d, r, "mean", mean, 3, 0) < 0 || numbers(d, r, "std", std, 3, 0) < 0 ||
        numbers(d, r, "input_size", input, 2, 1) < 0)
        return -1;
    if (strcmp(dataset, "fashion-mnist") == 0 &&
        (numbers(d, r, "source_size", source, 2, 1) < 0 ||
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
    meta_ctx mc = {d, md};
    if (!md || !attrs || resnet_modules(meta, &mc) < 0 || preprocess_metadata(m, d, md) < 0 ||
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

int ptc__cross_entropy(const float *logits, const int64_t *labels, int n, int classes, double *loss,
                       float *dlogits, int64_t *correct, ptc_error *err)
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
