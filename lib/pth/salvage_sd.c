/*
 * salvage_sd.c - ptc_salvage_state_dict: the state dict module.state_dict() would give, taken from a
 * pickled nn.Module (torch.save(model), YOLO's {"model": Model, ...}, a DDP wrapper) without
 * running anything.
 *
 * A module is recognised by its structure alone, never by its class name: an object (a symbolic
 * one read through PTC_OPEN_SALVAGE, or one a policy allowed) whose BUILD state is a dict holding
 * the dicts _parameters, _buffers and _modules, which is what nn.Module.__dict__ always holds and
 * what pickle's default __reduce_ex__ writes as the state. The keys follow torch 2.6's
 * Module.state_dict (torch/nn/modules/module.py): for each module its parameters in _parameters
 * order, then its buffers in _buffers order except those named in _non_persistent_buffers_set,
 * None entries skipped, then each child of _modules (a None child skipped) under "name." in
 * order. state_dict() does not deduplicate: a module reached twice through _modules is visited
 * twice, under both names, and so is it here. Values are detached as torch's state_dict detaches
 * them: a Parameter becomes a plain tensor (requires_grad False, no Python attributes) viewing the
 * same storage with the same view, so that tied weights still share their storage.
 *
 * What the pickle cannot hold is not invented: _metadata versions are class attributes, and
 * get_extra_state() and state-dict hooks are code; the output has none of them.
 *
 * Hostile trees: the value tree was checked for cycles and depth when it was read, but it may be
 * a DAG (one module referenced from two parents, twenty levels deep: 2^20 visits). Every module,
 * entry and path lookup is charged one node to a ptc_budget, every key its length in bytes
 * written; module nesting is capped at SALVAGE_MAX_DEPTH and keys at PTC_PATH_MAX.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

#define SALVAGE_MAX_DEPTH    256 /* module nesting (torchvision's deepest models nest < 10) */
#define SALVAGE_MAX_SEGMENTS 256 /* dots in a --state-dict path */
#define SALVAGE_MSG_TEXT     240 /* bytes of a key, path or class shown in a message, escaped */

typedef struct sd {
    ptc_doc *d;
    ptc_value *dict;    /* the output OrderedDict */
    ptc_budget *budget; /* charged for every visit */
    ptc_error *err;
    char *key; /* the key being built: prefix, then the entry's name */
    size_t len, cap;
    /* Message text, here rather than on the stack of the recursive walk. */
    char msg_key[SALVAGE_MSG_TEXT], msg_cls[SALVAGE_MSG_TEXT];
} sd;

/* ---- messages: every key and class name came from the file, and is escaped ------------------ */

/* esc and of_class write into buffers of SALVAGE_MSG_TEXT bytes. */
static const char *esc(char *buf, const char *p, size_t n)
{
    return ptc__escape(buf, SALVAGE_MSG_TEXT, p, n, true);
}

/* " of module.Name" for a global or object (escaped), "" otherwise. */
static const char *of_class(char *buf, const ptc_value *v)
{
    const char *cls = ptc_value_global_name(v);
    if (!cls)
        return "";
    char name[SALVAGE_MSG_TEXT - 4];
    ptc__escape(name, sizeof name, cls, strlen(cls), true);
    snprintf(buf, SALVAGE_MSG_TEXT, " of %s", name);
    return buf;
}

/* ---- recognising a module ------------------------------------------------------------------- */

static const ptc_value *dict_field(const ptc_value *state, const char *name)
{
    const ptc_value *v = ptc_dict_get(state, name);
    return ptc_value_kind_of(v) == PTC_VALUE_DICT ? v : NULL;
}

/* The BUILD state of module v, or NULL when v is not a module. */
static const ptc_value *module_state(const ptc_value *v)
{
    if (ptc_value_kind_of(v) != PTC_VALUE_OBJECT)
        return NULL;
    const ptc_value *st = ptc_object_state(v);
    if (ptc_value_kind_of(st) != PTC_VALUE_DICT || !dict_field(st, "_parameters") ||
        !dict_field(st, "_buffers") || !dict_field(st, "_modules"))
        return NULL;
    return st;
}

int ptc_salvage_is_module(const ptc_value *v)
{
    return module_state(v) != NULL;
}

/* 1 when v is a dict whose every value is a tensor (a state dict already). */
static int is_state_dict(const ptc_value *v)
{
    if (ptc_value_kind_of(v) != PTC_VALUE_DICT)
        return 0;
    for (size_t i = 0, n = ptc_value_len(v); i < n; i++)
        if (ptc_value_kind_of(ptc_dict_value(v, i)) != PTC_VALUE_TENSOR)
            return 0;
    return 1;
}

/* ---- building the state dict ---------------------------------------------------------------- */

static int doc_fail(sd *s)
{
    const ptc_error *e = ptc_doc_error(s->d);
    if (s->err && e)
        *s->err = *e;
    return e && e->code < 0 ? e->code : PTC_ENOMEM;
}

/* Appends n bytes to the key; the key never passes PTC_PATH_MAX. */
static int key_put(sd *s, const char *p, size_t n)
{
    if (n > PTC_PATH_MAX - s->len)
        return ptc__err(s->err, PTC_ELIMIT, "", -1,
                        "salvage: a state dict key longer than %zu bytes (PTC_PATH_MAX)",
                        (size_t)PTC_PATH_MAX);
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *k = ptc__realloc(s->key, cap);
        if (!k)
            return ptc__err(s->err, PTC_ENOMEM, "", -1, "out of memory");
        s->key = k;
        s->cap = cap;
    }
    memcpy(s->key + s->len, p, n);
    s->len += n;
    s->key[s->len] = '\0';
    return 0;
}

/* The text of a str key; a key of another kind (a file may write one) is refused. */
static int entry_name(sd *s, const ptc_value *k, const char *what, const char **p, size_t *n)
{
    if (ptc_value_kind_of(k) == PTC_VALUE_STR && ptc_value_str(k, p, n) == 0)
        return 0;
    char *key = s->msg_key;
    return ptc__err(s->err, PTC_EFORMAT, "", -1, "salvage: module '%s' has a %s key that is %s",
                    s->len ? esc(key, s->key, s->len) : "(root)", what,
                    ptc_value_kind_name(ptc_value_kind_of(k)));
}

/* Writes key prefix+name -> tensor v detached: the same view of the same storage, a plain tensor
 * (torch's state_dict calls .detach(): no Parameter, no grad, no Python attributes). */
static int emit(sd *s, const char *name, size_t n, const ptc_value *v, const char *what)
{
    size_t keep = s->len;
    int rc = ptc_budget_charge(s->budget, 1, (uint64_t)s->len + n, s->err);
    if (rc < 0)
        return rc;
    if ((rc = key_put(s, name, n)) < 0)
        return rc;
    if (ptc_value_kind_of(v) != PTC_VALUE_TENSOR) {
        char *key = s->msg_key, *cls = s->msg_cls;
        rc = ptc__err(s->err, PTC_EUNSUPPORTED, "", -1, "salvage: %s '%s' is %s%s, not a tensor",
                      what, esc(key, s->key, s->len), ptc_value_kind_name(ptc_value_kind_of(v)),
                      of_class(cls, v));
        s->len = keep;
        return rc;
    }
    ptc_value *key = ptc_doc_str(s->d, s->key, s->len);
    s->len = keep;
    /* ptc_doc_parameter copies the view (storage, offset, strides, conj/neg bits) into a node of
     * the document; that copy is then made a plain tensor. */
    ptc_value *t = ptc_doc_parameter(s->d, v, 0);
    if (!key || !t)
        return doc_fail(s);
    t->u.t->parameter = false;
    t->u.t->requires_grad = false;
    t->u.t->state = NULL;
    if (ptc_doc_set(s->d, s->dict, key, t) < 0)
        return doc_fail(s);
    return 0;
}

/* 1 when name is in the set of str nonpersistent (a set, or any sequence a file wrote). Each
 * item compared is charged: a set of a million names checked for a million buffers is 10^12. */
static int is_nonpersistent(sd *s, const ptc_value *set, const char *name, size_t n, int *rc)
{
    size_t m = ptc_value_len(set);
    if (m && (*rc = ptc_budget_charge(s->budget, m, 0, s->err)) < 0)
        return 0;
    for (size_t i = 0; i < m; i++) {
        const char *p;
        size_t len;
        if (ptc_value_str(ptc_value_item(set, i), &p, &len) == 0 && len == n && !memcmp(p, name, n))
            return 1;
    }
    return 0;
}

static int walk_module(sd *s, const ptc_value *m, unsigned depth)
{
    char *key = s->msg_key, *cls = s->msg_cls;
    if (depth > SALVAGE_MAX_DEPTH)
        return ptc__err(s->err, PTC_ELIMIT, "", -1,
                        "salvage: modules nested deeper than %d levels at '%s'", SALVAGE_MAX_DEPTH,
                        esc(key, s->key, s->len));
    int rc = ptc_budget_charge(s->budget, 1, 0, s->err);
    if (rc < 0)
        return rc;
    const ptc_value *st = module_state(m);
    const ptc_value *params = dict_field(st, "_parameters");
    const ptc_value *buffers = dict_field(st, "_buffers");
    const ptc_value *children = dict_field(st, "_modules");
    const ptc_value *nonpersistent = ptc_dict_get(st, "_non_persistent_buffers_set");
    const char *name;
    size_t n;

    for (size_t i = 0, np = ptc_value_len(params); i < np; i++) {
        const ptc_value *v = ptc_dict_value(params, i);
        if ((rc = entry_name(s, ptc_dict_key(params, i), "parameter", &name, &n)) < 0)
            return rc;
        if (ptc_value_kind_of(v) != PTC_VALUE_NONE && (rc = emit(s, name, n, v, "parameter")) < 0)
            return rc;
    }
    for (size_t i = 0, nb = ptc_value_len(buffers); i < nb; i++) {
        const ptc_value *v = ptc_dict_value(buffers, i);
        if ((rc = entry_name(s, ptc_dict_key(buffers, i), "buffer", &name, &n)) < 0)
            return rc;
        if (ptc_value_kind_of(v) == PTC_VALUE_NONE)
            continue;
        rc = 0;
        if (is_nonpersistent(s, nonpersistent, name, n, &rc))
            continue;
        if (rc < 0 || (rc = emit(s, name, n, v, "buffer")) < 0)
            return rc;
    }
    for (size_t i = 0, nc = ptc_value_len(children); i < nc; i++) {
        const ptc_value *v = ptc_dict_value(children, i);
        if ((rc = entry_name(s, ptc_dict_key(children, i), "submodule", &name, &n)) < 0)
            return rc;
        if (ptc_value_kind_of(v) == PTC_VALUE_NONE)
            continue;
        size_t keep = s->len;
        if ((rc = key_put(s, name, n)) < 0)
            return rc;
        if (!module_state(v)) {
            rc = ptc__err(s->err, PTC_EUNSUPPORTED, "", -1,
                          "salvage: submodule '%s' is %s%s, not a module (no _parameters, "
                          "_buffers and _modules in its state)",
                          esc(key, s->key, s->len), ptc_value_kind_name(ptc_value_kind_of(v)),
                          of_class(cls, v));
            s->len = keep;
            return rc;
        }
        if ((rc = key_put(s, ".", 1)) < 0 || (rc = walk_module(s, v, depth + 1)) < 0)
            return rc;
        s->len = keep;
        s->key[keep] = '\0';
    }
    return 0;
}

/* ---- choosing the subtree ------------------------------------------------------------------- */

/* What a path segment looks into: a module's _modules, or a dict. */
static const ptc_value *children_of(const ptc_value *v)
{
    const ptc_value *st = module_state(v);
    if (st)
        return dict_field(st, "_modules");
    return ptc_value_kind_of(v) == PTC_VALUE_DICT ? v : NULL;
}

/* The value path names under v: the whole rest as one key first, then each split "head.rest"
 * left to right (a dict key may itself hold dots). Every lookup is charged one node, which
 * bounds the splits a path of many dots tries. *found stays NULL when nothing matches. */
static int resolve(sd *s, const ptc_value *v, const char *path, const ptc_value **found)
{
    const ptc_value *c = children_of(v);
    int rc;
    *found = NULL;
    if (!c)
        return 0;
    if ((rc = ptc_budget_charge(s->budget, 1, 0, s->err)) < 0)
        return rc;
    if ((*found = ptc_dict_get(c, path)) != NULL)
        return 0;
    for (const char *dot = strchr(path, '.'); dot; dot = strchr(dot + 1, '.')) {
        s->len = 0;
        if ((rc = key_put(s, path, (size_t)(dot - path))) < 0)
            return rc;
        const ptc_value *head = ptc_dict_get(c, s->key);
        if ((rc = ptc_budget_charge(s->budget, 1, 0, s->err)) < 0)
            return rc;
        if (head && ((rc = resolve(s, head, dot + 1, found)) < 0 || *found))
            return rc;
    }
    return 0;
}

/* The default subtree: the root module; the root dict's "model" when a module; the first module
 * among the root dict's values; the root itself when a state dict. */
static int choose_default(sd *s, const ptc_value *root, const ptc_value **pick, const char **name,
                          size_t *nlen)
{
    *name = "";
    *nlen = 0;
    if (module_state(root)) {
        *pick = root;
        return 0;
    }
    if (ptc_value_kind_of(root) == PTC_VALUE_DICT) {
        const ptc_value *model = ptc_dict_get(root, "model");
        if (module_state(model)) {
            *pick = model;
            *name = "model";
            *nlen = 5;
            return 0;
        }
        for (size_t i = 0, n = ptc_value_len(root); i < n; i++) {
            int rc = ptc_budget_charge(s->budget, 1, 0, s->err);
            if (rc < 0)
                return rc;
            const ptc_value *k = ptc_dict_key(root, i);
            if (module_state(ptc_dict_value(root, i)) && ptc_value_str(k, name, nlen) == 0) {
                *pick = ptc_dict_value(root, i);
                return 0;
            }
        }
        if (is_state_dict(root)) {
            *pick = root;
            return 0;
        }
        return ptc__err(s->err, PTC_ENOTFOUND, "", -1,
                        "salvage: no module in the checkpoint: the root dict (%zu keys) holds no "
                        "object with _parameters, _buffers and _modules, and not only tensors",
                        ptc_value_len(root));
    }
    char *cls = s->msg_cls;
    return ptc__err(s->err, PTC_ENOTFOUND, "", -1,
                    "salvage: no module in the checkpoint: the root is %s%s, neither a module nor "
                    "a dict",
                    ptc_value_kind_name(ptc_value_kind_of(root)), of_class(cls, root));
}

int ptc_salvage_state_dict(ptc_doc *d, const ptc_value *root, const char *path, ptc_budget *budget,
                           const ptc_value **out, const char **chosen, ptc_error *err)
{
    if (out)
        *out = NULL;
    if (chosen)
        *chosen = NULL;
    if (!d || !root || !out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_salvage_state_dict: missing argument");
    ptc_budget local;
    if (!budget) {
        ptc_budget_init(&local, NULL, 0);
        budget = &local;
    }
    sd s = {.d = d, .budget = budget, .err = err};
    const ptc_value *pick = NULL;
    const char *name = path ? path : "";
    size_t nlen = path ? strlen(path) : 0;
    int rc;

    if (path) {
        size_t dots = 0;
        for (const char *p = path; *p; p++)
            dots += *p == '.';
        if (dots > SALVAGE_MAX_SEGMENTS) {
            rc = ptc__err(err, PTC_EINVAL, "", -1, "salvage: a path of more than %d segments",
                          SALVAGE_MAX_SEGMENTS + 1);
            goto fail;
        }
        if (!*path)
            pick = root;
        else if ((rc = resolve(&s, root, path, &pick)) < 0)
            goto fail;
        char *text = s.msg_key, *cls = s.msg_cls;
        if (!pick) {
            rc = ptc__err(err, PTC_ENOTFOUND, "", -1,
                          "salvage: '%s' names nothing in the checkpoint (a path goes through "
                          "dict keys and the _modules of modules)",
                          esc(text, path, strlen(path)));
            goto fail;
        }
        if (!module_state(pick) && !is_state_dict(pick)) {
            rc = ptc__err(err, PTC_ENOTFOUND, "", -1,
                          "salvage: '%s' is %s%s, neither a module (an object with "
                          "_parameters, _buffers and _modules) nor a state dict",
                          esc(text, path, strlen(path)),
                          ptc_value_kind_name(ptc_value_kind_of(pick)), of_class(cls, pick));
            goto fail;
        }
    } else if ((rc = choose_default(&s, root, &pick, &name, &nlen)) < 0) {
        goto fail;
    }

    if (chosen) {
        const ptc_value *nv = ptc_doc_str(d, name, nlen);
        size_t len;
        if (!nv || ptc_value_str(nv, chosen, &len) < 0) {
            rc = doc_fail(&s);
            goto fail;
        }
    }
    if (!module_state(pick)) { /* a state dict already: written as it is, _metadata included */
        ptc__free(s.key);
        *out = pick;
        return 0;
    }
    if (!(s.dict = ptc_doc_dict(d, 1))) {
        rc = doc_fail(&s);
        goto fail;
    }
    s.len = 0;
    if ((rc = key_put(&s, "", 0)) < 0 || (rc = walk_module(&s, pick, 0)) < 0)
        goto fail;
    ptc__free(s.key);
    *out = s.dict;
    return 0;

fail:
    ptc__free(s.key);
    if (chosen)
        *chosen = NULL;
    return rc;
}
