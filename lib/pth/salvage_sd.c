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
 * written; module nesting is capped at SALVAGE_MAX_DEPTH and keys at PTC_PATH_MAX. The key text
 * all keys together hold is capped too (SALVAGE_KEY_TEXT_*): seventeen modules each listing its
 * child twice under a 382-byte name are 16 KB of pickle and 2^17 keys of 6.5 KB each, 440 MB of
 * text that the byte budget (64 x the file + 1 GiB) would let through.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

#define SALVAGE_MAX_DEPTH    256 /* module nesting (torchvision's deepest models nest < 10) */
#define SALVAGE_MAX_SEGMENTS 256 /* dots in a --state-dict path */
#define SALVAGE_MSG_TEXT     240 /* bytes of a key, path or class shown in a message, escaped */
/* Key text of one state dict: SALVAGE_KEY_TEXT_PER_NODE bytes per node of the work budget (which
 * is 16 x the pickle's opcodes + 1,000,000) + SALVAGE_KEY_TEXT_FIXED. resnet18's 122 keys are
 * 3 KB of text; a real model's keys are a few dozen bytes per key the pickle names. */
#define SALVAGE_KEY_TEXT_PER_NODE 16
#define SALVAGE_KEY_TEXT_FIXED    ((uint64_t)16 << 20)
/* A --state-dict path of n dots has 2^n readings; lookups past this many stop the search. */
#define SALVAGE_MAX_PATH_LOOKUPS 4096
/* _non_persistent_buffers_set: sets larger than this are hashed once per module visit. */
#define SALVAGE_NP_LINEAR 8
/* Candidate paths a "nothing found" message lists. */
#define SALVAGE_MAX_CANDIDATES 4

typedef struct sd {
    ptc_doc *d;
    ptc_value *dict;    /* the output OrderedDict */
    ptc_budget *budget; /* charged for every visit */
    ptc_error *err;
    char *key; /* the key being built: prefix, then the entry's name */
    size_t len, cap;
    uint64_t key_text, max_key_text; /* bytes of key text written, and the cap */
    /* Path resolution (resolve): the segment ends of the reading being tried, the readings that
     * resolved to a module or state dict, the first value any reading found. */
    const char *path;
    size_t seg_end[SALVAGE_MAX_SEGMENTS + 1];
    unsigned nseg, nfound;
    uint64_t lookups;
    const ptc_value *found, *found_any;
    char reading[2][SALVAGE_MSG_TEXT];
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
    char name[SALVAGE_MSG_TEXT / 2];
    ptc__escape(name, sizeof name, cls, strlen(cls), true);
    /* An array the reader left symbolic says why (its note escapes what came from the file). */
    const char *why = ptc_object_note(v);
    snprintf(buf, SALVAGE_MSG_TEXT, " of %s%s%.*s%s", name, why ? " (left symbolic: " : "",
             SALVAGE_MSG_TEXT / 2 - 32, why ? why : "", why ? ")" : "");
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

/* 1 when v is a dict of str keys whose every value is a tensor (a state dict already): a dict
 * keyed by symbolic objects or globals is no state dict (torch's load_state_dict wants names). */
static int is_state_dict(const ptc_value *v)
{
    if (ptc_value_kind_of(v) != PTC_VALUE_DICT)
        return 0;
    for (size_t i = 0, n = ptc_value_len(v); i < n; i++)
        if (ptc_value_kind_of(ptc_dict_key(v, i)) != PTC_VALUE_STR ||
            ptc_value_kind_of(ptc_dict_value(v, i)) != PTC_VALUE_TENSOR)
            return 0;
    return 1;
}

/* 1 when v holds a symbolic value anywhere (dict keys, values, items), or nests deeper than
 * SALVAGE_MAX_DEPTH; each value looked at is charged one node. */
static int holds_symbolic(sd *s, const ptc_value *v, unsigned depth, int *rc)
{
    if ((*rc = ptc_budget_charge(s->budget, 1, 0, s->err)) < 0)
        return 0;
    if (ptc_value_is_symbolic(v) || depth > SALVAGE_MAX_DEPTH)
        return 1;
    switch (ptc_value_kind_of(v)) {
    case PTC_VALUE_DICT:
        for (size_t i = 0, n = ptc_value_len(v); i < n; i++)
            if (holds_symbolic(s, ptc_dict_key(v, i), depth + 1, rc) ||
                holds_symbolic(s, ptc_dict_value(v, i), depth + 1, rc) || *rc < 0)
                return *rc < 0 ? 0 : 1;
        return 0;
    case PTC_VALUE_LIST:
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_SET:
        for (size_t i = 0, n = ptc_value_len(v); i < n; i++)
            if (holds_symbolic(s, ptc_value_item(v, i), depth + 1, rc) || *rc < 0)
                return *rc < 0 ? 0 : 1;
        return 0;
    default:
        return 0;
    }
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
    if ((uint64_t)s->len + n > s->max_key_text - s->key_text)
        return ptc__err(s->err, PTC_ELIMIT, "", -1,
                        "salvage: the state dict's keys take more than %llu bytes of text "
                        "(SALVAGE_KEY_TEXT: %d x the work budget's %llu nodes + 16 MiB): modules "
                        "shared far more than any model shares them",
                        (unsigned long long)s->max_key_text, SALVAGE_KEY_TEXT_PER_NODE,
                        (unsigned long long)s->budget->max_nodes);
    s->key_text += (uint64_t)s->len + n;
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

/* The hashed form of a module's _non_persistent_buffers_set when it is larger than
 * SALVAGE_NP_LINEAR: a dict of d keyed by its str items, built once per module visit and charged
 * one node per item, so that 1,500 non-persistent buffers of 2,000 cost 3,500 nodes, not 3 million
 * (torch's own set is hashed). *index stays NULL for a small set. */
static int nonpersistent_index(sd *s, const ptc_value *set, const ptc_value **index)
{
    size_t m = ptc_value_len(set);
    *index = NULL;
    if (m <= SALVAGE_NP_LINEAR)
        return 0;
    int rc = ptc_budget_charge(s->budget, m, 0, s->err);
    if (rc < 0)
        return rc;
    ptc_value *dict = ptc_doc_dict(s->d, 0);
    if (!dict)
        return doc_fail(s);
    for (size_t i = 0; i < m; i++) {
        const ptc_value *item = ptc_value_item(set, i);
        if (ptc_value_kind_of(item) == PTC_VALUE_STR && ptc_doc_set(s->d, dict, item, item) < 0)
            return doc_fail(s);
    }
    *index = dict;
    return 0;
}

/* 1 when name is in the set of str nonpersistent (a set, or any sequence a file wrote): looked up
 * in index when there is one (one node), else compared item by item, each item charged. */
static int is_nonpersistent(sd *s, const ptc_value *set, const ptc_value *index, const char *name,
                            size_t n, int *rc)
{
    if (index) {
        if ((*rc = ptc_budget_charge(s->budget, 1, 0, s->err)) < 0)
            return 0;
        ptc_value probe = {.kind = PTC_VALUE_STR};
        probe.u.s.p = name;
        probe.u.s.n = n;
        return ptc__dict_index(index, &probe) != SIZE_MAX;
    }
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
    const ptc_value *np_index = NULL;
    const char *name;
    size_t n;

    for (size_t i = 0, np = ptc_value_len(params); i < np; i++) {
        const ptc_value *v = ptc_dict_value(params, i);
        if ((rc = entry_name(s, ptc_dict_key(params, i), "parameter", &name, &n)) < 0)
            return rc;
        if (ptc_value_kind_of(v) != PTC_VALUE_NONE && (rc = emit(s, name, n, v, "parameter")) < 0)
            return rc;
    }
    if (ptc_value_len(buffers) && (rc = nonpersistent_index(s, nonpersistent, &np_index)) < 0)
        return rc;
    for (size_t i = 0, nb = ptc_value_len(buffers); i < nb; i++) {
        const ptc_value *v = ptc_dict_value(buffers, i);
        if ((rc = entry_name(s, ptc_dict_key(buffers, i), "buffer", &name, &n)) < 0)
            return rc;
        if (ptc_value_kind_of(v) == PTC_VALUE_NONE)
            continue;
        rc = 0;
        if (is_nonpersistent(s, nonpersistent, np_index, name, n, &rc))
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

/* The reading s->seg_end[0..nseg) of s->path as "root['a.b']['c']", escaped, into buf. */
static void put_reading(sd *s, char *buf)
{
    size_t at = (size_t)snprintf(buf, SALVAGE_MSG_TEXT, "root");
    for (unsigned i = 0, from = 0; i < s->nseg && at < SALVAGE_MSG_TEXT; i++) {
        char seg[SALVAGE_MSG_TEXT];
        esc(seg, s->path + from, s->seg_end[i] - from);
        at += (size_t)snprintf(buf + at, SALVAGE_MSG_TEXT - at, "['%s']", seg);
        from = (unsigned)s->seg_end[i] + 1;
    }
}

/* One lookup of path[from, to) in dict c, charged one node and counted against
 * SALVAGE_MAX_PATH_LOOKUPS. */
static int lookup(sd *s, const ptc_value *c, size_t from, size_t to, const ptc_value **v)
{
    int rc = ptc_budget_charge(s->budget, 1, 0, s->err);
    if (rc < 0)
        return rc;
    if (++s->lookups > SALVAGE_MAX_PATH_LOOKUPS) {
        char *text = s->msg_key;
        return ptc__err(s->err, PTC_ELIMIT, "", -1,
                        "salvage: '%s' splits into more readings than %d lookups try (a dict key "
                        "may hold dots); name fewer levels",
                        esc(text, s->path, strlen(s->path)), SALVAGE_MAX_PATH_LOOKUPS);
    }
    s->len = 0;
    if ((rc = key_put(s, s->path + from, to - from)) < 0)
        return rc;
    *v = ptc_dict_get(c, s->key);
    return 0;
}

/* Every reading of s->path from offset `from` under v: the whole rest as one key first, then each
 * split "head.rest" left to right (a dict key may itself hold dots). A reading that ends on a
 * module or state dict is counted (s->nfound, the first two kept); the search stops at the
 * second, which makes the path ambiguous. */
static int resolve(sd *s, const ptc_value *v, size_t from)
{
    const ptc_value *c = children_of(v), *hit;
    size_t end = strlen(s->path);
    int rc;
    if (!c || s->nseg > SALVAGE_MAX_SEGMENTS)
        return 0;
    if ((rc = lookup(s, c, from, end, &hit)) < 0)
        return rc;
    if (hit) {
        s->seg_end[s->nseg++] = end;
        if (!s->found_any)
            s->found_any = hit;
        if (module_state(hit) || is_state_dict(hit)) {
            if (s->nfound < 2)
                put_reading(s, s->reading[s->nfound]);
            if (s->nfound++ == 0)
                s->found = hit;
        }
        s->nseg--;
        if (s->nfound >= 2)
            return 0;
    }
    for (const char *dot = strchr(s->path + from, '.'); dot; dot = strchr(dot + 1, '.')) {
        size_t at = (size_t)(dot - s->path);
        if ((rc = lookup(s, c, from, at, &hit)) < 0)
            return rc;
        if (!hit)
            continue;
        s->seg_end[s->nseg++] = at;
        rc = resolve(s, hit, at + 1);
        s->nseg--;
        if (rc < 0 || s->nfound >= 2)
            return rc;
    }
    return 0;
}

/* The default subtree: the root module; the root dict's "model" when a module; the first module
 * among the root dict's values; the root itself when a state dict; the first state dict among
 * the root dict's values (a Lightning checkpoint's "state_dict"). *key: the root key taken, NULL
 * for the root itself. */
static int choose_default(sd *s, const ptc_value *root, const ptc_value **pick,
                          const ptc_value **key)
{
    *key = NULL;
    if (module_state(root)) {
        *pick = root;
        return 0;
    }
    if (ptc_value_kind_of(root) == PTC_VALUE_DICT) {
        size_t n = ptc_value_len(root);
        for (size_t i = 0; i < n; i++) {
            const ptc_value *k = ptc_dict_key(root, i);
            const char *p;
            size_t len;
            if (ptc_value_str(k, &p, &len) == 0 && len == 5 && !memcmp(p, "model", 5) &&
                module_state(ptc_dict_value(root, i))) {
                *pick = ptc_dict_value(root, i);
                *key = k;
                return 0;
            }
        }
        for (int pass = 0; pass < 3; pass++) {
            if (pass == 1) {
                if (is_state_dict(root)) {
                    *pick = root;
                    return 0;
                }
                continue;
            }
            for (size_t i = 0; i < n; i++) {
                int rc = ptc_budget_charge(s->budget, 1, 0, s->err);
                if (rc < 0)
                    return rc;
                const ptc_value *k = ptc_dict_key(root, i), *v = ptc_dict_value(root, i);
                if (ptc_value_kind_of(k) == PTC_VALUE_STR &&
                    (pass == 0 ? module_state(v) != NULL : is_state_dict(v))) {
                    *pick = v;
                    *key = k;
                    return 0;
                }
            }
        }
        /* Nothing: name a few entries a --state-dict PATH could look into. */
        char list[SALVAGE_MSG_TEXT] = "", *key_text = s->msg_key;
        size_t at = 0, shown = 0;
        for (size_t i = 0; i < n && shown < SALVAGE_MAX_CANDIDATES; i++) {
            const ptc_value *v = ptc_dict_value(root, i);
            const char *p;
            size_t len;
            if (ptc_value_str(ptc_dict_key(root, i), &p, &len) < 0 ||
                (ptc_value_kind_of(v) != PTC_VALUE_DICT &&
                 ptc_value_kind_of(v) != PTC_VALUE_OBJECT))
                continue;
            at += (size_t)snprintf(list + at, sizeof list - at, "%s'%s'", shown ? ", " : "",
                                   esc(key_text, p, len < 40 ? len : 40));
            if (at >= sizeof list)
                break;
            shown++;
        }
        return ptc__err(s->err, PTC_ENOTFOUND, "", -1,
                        "salvage: no module in the checkpoint: the root dict (%zu keys) holds no "
                        "object with _parameters, _buffers and _modules and no dict of str keys "
                        "and tensors%s%s%s",
                        n, shown ? "; entries a --state-dict PATH could look into: " : "", list,
                        shown ? "" : "; name one with --state-dict PATH");
    }
    char *cls = s->msg_cls;
    return ptc__err(s->err, PTC_ENOTFOUND, "", -1,
                    "salvage: no module in the checkpoint: the root is %s%s, neither a module nor "
                    "a dict",
                    ptc_value_kind_name(ptc_value_kind_of(root)), of_class(cls, root));
}

/* The pick (see ptc.h) into *pick and its path as a str of d into *name. */
static int pick_in(sd *s, const ptc_value *root, const char *path, const ptc_value **pick,
                   const ptc_value **name)
{
    int rc;
    *pick = NULL;
    *name = NULL;
    if (path) {
        size_t dots = 0;
        for (const char *p = path; *p; p++)
            dots += *p == '.';
        if (dots > SALVAGE_MAX_SEGMENTS)
            return ptc__err(s->err, PTC_EINVAL, "", -1, "salvage: a path of more than %d segments",
                            SALVAGE_MAX_SEGMENTS + 1);
        char *text = s->msg_key, *cls = s->msg_cls;
        if (!*path) {
            *pick = root;
        } else {
            s->path = path;
            if ((rc = resolve(s, root, 0)) < 0)
                return rc;
            if (s->nfound >= 2)
                return ptc__err(s->err, PTC_EINVAL, "", -1,
                                "salvage: '%s' is ambiguous: it reads as %s and as %s, both a "
                                "module or state dict (a dotted path cannot tell them apart)",
                                esc(text, path, strlen(path)), s->reading[0], s->reading[1]);
            *pick = s->found ? s->found : s->found_any;
        }
        if (!*pick)
            return ptc__err(s->err, PTC_ENOTFOUND, "", -1,
                            "salvage: '%s' names nothing in the checkpoint (a path goes through "
                            "dict keys and the _modules of modules)",
                            esc(text, path, strlen(path)));
        if (!module_state(*pick) && !is_state_dict(*pick))
            return ptc__err(s->err, PTC_ENOTFOUND, "", -1,
                            "salvage: '%s' is %s%s, neither a module (an object with "
                            "_parameters, _buffers and _modules) nor a state dict (str keys, "
                            "tensor values)",
                            esc(text, path, strlen(path)),
                            ptc_value_kind_name(ptc_value_kind_of(*pick)), of_class(cls, *pick));
        *name = ptc_doc_str(s->d, path, strlen(path));
    } else {
        const ptc_value *key;
        if ((rc = choose_default(s, root, pick, &key)) < 0)
            return rc;
        const char *p = "";
        size_t len = 0;
        if (key)
            ptc_value_str(key, &p, &len);
        *name = ptc_doc_str(s->d, p, len); /* the key's length kept: it may hold NUL bytes */
    }
    return *name ? 0 : doc_fail(s);
}

int ptc_salvage_pick(ptc_doc *d, const ptc_value *root, const char *path, ptc_budget *budget,
                     const ptc_value **pick, const ptc_value **name, ptc_error *err)
{
    if (pick)
        *pick = NULL;
    if (name)
        *name = NULL;
    if (!d || !root || !pick || !name)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_salvage_pick: missing argument");
    sd s = {.d = d, .budget = budget, .err = err};
    int rc = pick_in(&s, root, path, pick, name);
    ptc__free(s.key);
    if (rc < 0) {
        *pick = NULL;
        *name = NULL;
    }
    return rc;
}

/* A state dict already, given back as it is unless its attributes (_metadata) hold a symbolic
 * value, which no writer may write back: then a copy without them. */
static int plain_state_dict(sd *s, const ptc_value *pick, const ptc_value **out)
{
    const ptc_value *attrs = ptc_dict_attrs(pick);
    int rc = 0;
    *out = pick;
    if (!attrs || !holds_symbolic(s, attrs, 0, &rc))
        return rc;
    ptc_value *copy = ptc_doc_dict(s->d, ptc_dict_is_ordered(pick));
    if (!copy)
        return doc_fail(s);
    for (size_t i = 0, n = ptc_value_len(pick); i < n; i++) {
        if ((rc = ptc_budget_charge(s->budget, 1, 0, s->err)) < 0)
            return rc;
        if (ptc_doc_set(s->d, copy, ptc_dict_key(pick, i), ptc_dict_value(pick, i)) < 0)
            return doc_fail(s);
    }
    *out = copy;
    return 0;
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
    s.max_key_text =
        budget->max_nodes > (UINT64_MAX - SALVAGE_KEY_TEXT_FIXED) / SALVAGE_KEY_TEXT_PER_NODE
            ? UINT64_MAX
            : budget->max_nodes * SALVAGE_KEY_TEXT_PER_NODE + SALVAGE_KEY_TEXT_FIXED;
    const ptc_value *pick = NULL, *name = NULL;
    int rc;

    if ((rc = pick_in(&s, root, path, &pick, &name)) < 0)
        goto fail;
    if (chosen) {
        size_t len;
        ptc_value_str(name, chosen, &len);
    }
    if (!module_state(pick)) { /* a state dict already */
        if ((rc = plain_state_dict(&s, pick, out)) < 0)
            goto fail;
        ptc__free(s.key);
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
    *out = NULL;
    if (chosen)
        *chosen = NULL;
    return rc;
}
