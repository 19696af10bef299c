/*
 * rename.c - ptc_state_dict_rename: a state dict's keys with a prefix removed (DDP's "module.")
 * or added, exactly as torch 2.6's consume_prefix_in_state_dict_if_present does, on the root dict
 * and its _metadata. What `ptc convert --strip-prefix/--add-prefix` does, for embedders too.
 */
#include "pth/pth.h"

#include <string.h>

/* The text of a str key, or NULL when key is not a str. */
static const char *key_str(const ptc_value *key, size_t *len)
{
    const char *s;
    if (!key || ptc_value_kind_of(key) != PTC_VALUE_STR || ptc_value_str(key, &s, len) < 0)
        return NULL;
    return s;
}

/* ---- a dict under rename --------------------------------------------------------------------
 * A dict being renamed is simulated as Python's dict would behave under the same statements: an
 * array of entries in insertion order (a popped entry stays, marked dead) and an index from str
 * key text to the live entry. Only then is it turned into a document dict. */
typedef struct entry {
    const ptc_value *key; /* borrowed, or a str the document made */
    const ptc_value *val;
    int alive;
} entry;

typedef struct wdict {
    entry *e;
    size_t n, cap;
    size_t *index; /* str keys: entry position + 1; 0 = empty slot. Dead entries stay listed. */
    size_t index_cap;
    int ordered;
} wdict;

static uint64_t text_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

/* Position of the live entry with str key s[0..n), or -1. */
static long wd_find(const wdict *w, const char *s, size_t n)
{
    size_t mask = w->index_cap - 1;
    for (size_t i = (size_t)text_hash(s, n) & mask; w->index[i]; i = (i + 1) & mask) {
        const entry *e = &w->e[w->index[i] - 1];
        size_t len;
        const char *k = key_str(e->key, &len);
        if (e->alive && k && len == n && memcmp(k, s, n) == 0)
            return (long)(w->index[i] - 1);
    }
    return -1;
}

/* Appends an entry. The index is sized once, in wd_init, for every entry a rename can add. */
static int wd_append(wdict *w, const ptc_value *key, const ptc_value *val)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        entry *ne = ptc__realloc(w->e, cap * sizeof *ne);
        if (!ne)
            return PTC_ENOMEM;
        w->e = ne;
        w->cap = cap;
    }
    w->e[w->n] = (entry){key, val, 1};
    size_t len;
    const char *k = key_str(key, &len);
    if (k) {
        size_t mask = w->index_cap - 1, i = (size_t)text_hash(k, len) & mask;
        while (w->index[i])
            i = (i + 1) & mask;
        w->index[i] = w->n + 1;
    }
    w->n++;
    return 0;
}

/* Loads dict v. A rename adds at most one entry per original one, so the index holds 2n. */
static int wd_init(wdict *w, const ptc_value *v)
{
    size_t n = ptc_value_len(v);
    memset(w, 0, sizeof *w);
    w->ordered = ptc_dict_is_ordered(v);
    w->index_cap = 16;
    while (w->index_cap < 4 * n + 4)
        w->index_cap *= 2;
    w->index = ptc__calloc(w->index_cap, sizeof *w->index);
    if (!w->index)
        return PTC_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (wd_append(w, ptc_dict_key(v, i), ptc_dict_value(v, i)) < 0)
            return PTC_ENOMEM;
    return 0;
}

static void wd_free(wdict *w)
{
    ptc__free(w->e);
    ptc__free(w->index);
    memset(w, 0, sizeof *w);
}

/* Python's d[key] = val for a str key: an equal live key keeps its place and takes the value. */
static int wd_set(wdict *w, ptc_doc *d, const char *s, size_t n, const ptc_value *val)
{
    long j = wd_find(w, s, n);
    if (j >= 0) {
        w->e[j].val = val;
        return 0;
    }
    const ptc_value *key = ptc_doc_str(d, s, n);
    if (!key)
        return ptc_doc_error(d)->code ? ptc_doc_error(d)->code : PTC_ENOMEM;
    return wd_append(w, key, val);
}

static int starts_with(const char *s, size_t n, const char *p, size_t pn)
{
    return n >= pn && memcmp(s, p, pn) == 0;
}

/* consume_prefix_in_state_dict_if_present's test of one key, key.startswith(prefix), for the
 * state-dict loaders that decide whether to strip (ptc_train's --init): 1 for a str key that
 * starts with prefix, 0 otherwise (not a str, NULL). */
int ptc__key_has_prefix(const ptc_value *key, const char *prefix)
{
    size_t len;
    const char *k = key_str(key, &len);
    return k && prefix && starts_with(k, len, prefix, strlen(prefix));
}

/* consume_prefix_in_state_dict_if_present, in torch 2.6:
 *   for key in list(state_dict.keys()):
 *       if key.startswith(prefix): state_dict[key[len(prefix):]] = state_dict.pop(key)
 * and for its _metadata (meta = 1), where '' names the wrapper module and is kept:
 *   for key in list(metadata.keys()):
 *       if len(key) == 0: continue
 *       if key == prefix.replace(".", "") or key.startswith(prefix):
 *           metadata[key[len(prefix):]] = metadata.pop(key)
 * The list of keys is taken before the loop; a key popped is always the live entry of that text.
 * *changed is set when some key was renamed. */
static int wd_strip(wdict *w, ptc_doc *d, const char *prefix, int meta, int *changed)
{
    size_t pn = strlen(prefix), norig = w->n, dn = 0;
    char *dotless = ptc__malloc(pn + 1);
    if (!dotless)
        return PTC_ENOMEM;
    for (size_t i = 0; i < pn; i++)
        if (prefix[i] != '.')
            dotless[dn++] = prefix[i];
    dotless[dn] = '\0';

    int rc = 0;
    for (size_t i = 0; i < norig && rc == 0; i++) {
        size_t len;
        const char *k = key_str(w->e[i].key, &len);
        if (!k || !w->e[i].alive)
            continue;
        int match = meta ? len > 0 && ((len == dn && memcmp(k, dotless, dn) == 0) ||
                                       starts_with(k, len, prefix, pn))
                         : starts_with(k, len, prefix, pn);
        if (!match)
            continue;
        /* key[len(prefix):] is "" when the key is shorter than the prefix (the dotless case). */
        const char *nk = len >= pn ? k + pn : k + len;
        size_t nlen = len >= pn ? len - pn : 0;
        const ptc_value *val = w->e[i].val;
        w->e[i].alive = 0;
        rc = wd_set(w, d, nk, nlen, val);
        *changed = 1;
    }
    ptc__free(dotless);
    return rc;
}

/* A new str "prefix" + text, made by the document. */
static const ptc_value *prefixed(ptc_doc *d, const char *prefix, const char *s, size_t n)
{
    size_t pn = strlen(prefix);
    char *t = ptc__malloc(pn + n + 1);
    if (!t)
        return NULL;
    memcpy(t, prefix, pn);
    if (n)
        memcpy(t + pn, s, n);
    const ptc_value *v = ptc_doc_str(d, t, pn + n);
    ptc__free(t);
    return v;
}

/* A dict's copy whose items are the same (borrowed) values: a second, unaliased entry. */
static const ptc_value *shallow_copy(ptc_doc *d, const ptc_value *v)
{
    if (ptc_value_kind_of(v) != PTC_VALUE_DICT)
        return v;
    ptc_value *c = ptc_doc_dict(d, ptc_dict_is_ordered(v));
    for (size_t i = 0; c && i < ptc_value_len(v); i++)
        if (ptc_doc_set(d, c, ptc_dict_key(v, i), ptc_dict_value(v, i)) < 0)
            return NULL;
    if (c && ptc_dict_attrs(v) && ptc_doc_set_attrs(d, c, ptc_dict_attrs(v)) < 0)
        return NULL;
    return c;
}

/* --add-prefix: every str key k becomes prefix + k, in place. For _metadata (meta = 1) the reverse
 * of the strip above, so that stripping what was added gives the original back: '' (the root
 * module) becomes the wrapper's name (prefix without its final '.'), k becomes prefix + k, and a
 * copy of the old '' entry stays under '' for the wrapper itself, as a DataParallel or DDP state
 * dict has it. */
static int wd_add(wdict *w, ptc_doc *d, const char *prefix, int meta, int *changed)
{
    size_t pn = strlen(prefix);
    if (pn == 0)
        return 0;
    entry *old = w->e;
    size_t nold = w->n;
    w->e = NULL;
    w->n = w->cap = 0;
    memset(w->index, 0, w->index_cap * sizeof *w->index);
    int rc = 0;
    for (size_t i = 0; i < nold && rc == 0; i++) {
        size_t len;
        const char *k = key_str(old[i].key, &len);
        const ptc_value *nk;
        if (!old[i].alive)
            continue;
        if (!k) {
            rc = wd_append(w, old[i].key, old[i].val);
            continue;
        }
        if (meta && len == 0) {
            const ptc_value *copy = shallow_copy(d, old[i].val);
            size_t rn = prefix[pn - 1] == '.' ? pn - 1 : pn;
            if (!copy || (rc = wd_append(w, old[i].key, copy)) < 0)
                rc = rc < 0 ? rc : PTC_ENOMEM;
            nk = rc < 0 ? NULL : prefixed(d, "", prefix, rn);
        } else {
            nk = prefixed(d, prefix, k, len);
        }
        if (rc == 0)
            rc = nk ? wd_append(w, nk, old[i].val) : PTC_ENOMEM;
    }
    ptc__free(old);
    *changed = 1;
    return rc;
}

/* The document dict holding the live entries in order. */
static ptc_value *wd_build(const wdict *w, ptc_doc *d)
{
    ptc_value *v = ptc_doc_dict(d, w->ordered);
    for (size_t i = 0; v && i < w->n; i++)
        if (w->e[i].alive && ptc_doc_set(d, v, w->e[i].key, w->e[i].val) < 0)
            return NULL;
    return v;
}

/* Applies strip then add to dict v (meta: the _metadata rules). *out is v itself when nothing
 * changed. */
static int rename_dict(ptc_doc *d, const ptc_value *v, const char *strip, const char *add, int meta,
                       const ptc_value **out, int *matched)
{
    wdict w;
    int changed = 0, rc = wd_init(&w, v);
    if (rc == 0 && strip) {
        int stripped = 0;
        rc = wd_strip(&w, d, strip, meta, &stripped);
        changed |= stripped;
        if (matched)
            *matched = stripped;
    }
    if (rc == 0 && add)
        rc = wd_add(&w, d, add, meta, &changed);
    *out = v;
    if (rc == 0 && changed && !(*out = wd_build(&w, d)))
        rc = ptc_doc_error(d)->code ? ptc_doc_error(d)->code : PTC_ENOMEM;
    wd_free(&w);
    return rc;
}

/* Renames the keys of the root dict and of its _metadata attribute; other attributes are kept as
 * they are. */
int ptc_state_dict_rename(ptc_doc *d, const ptc_value *root, const char *strip, const char *add,
                          const ptc_value **out, int *stripped, ptc_error *err)
{
    if (stripped)
        *stripped = 0;
    if (!d || !root || !out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_state_dict_rename: missing argument");
    if (ptc_value_kind_of(root) != PTC_VALUE_DICT)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_state_dict_rename: the state dict is a %s, not a dict",
                        ptc_value_kind_name(ptc_value_kind_of(root)));
    *out = root;
    const ptc_value *v = root, *nv, *attrs = ptc_dict_attrs(v), *meta, *nmeta = NULL;
    int matched = 0;
    int rc = rename_dict(d, v, strip, add, 0, &nv, &matched);
    meta = attrs ? ptc_dict_get(attrs, "_metadata") : NULL;
    if (rc == 0 && meta && ptc_value_kind_of(meta) == PTC_VALUE_DICT)
        rc = rename_dict(d, meta, strip, add, 1, &nmeta, NULL);
    if (rc == 0 && nmeta && nmeta != meta) {
        /* New attributes: the same items with _metadata replaced. */
        ptc_value *na = ptc_doc_dict(d, ptc_dict_is_ordered(attrs));
        for (size_t i = 0; na && rc == 0 && i < ptc_value_len(attrs); i++) {
            const ptc_value *k = ptc_dict_key(attrs, i), *x = ptc_dict_value(attrs, i);
            size_t len;
            const char *ks = key_str(k, &len);
            if (ks && len == 9 && memcmp(ks, "_metadata", 9) == 0)
                x = nmeta;
            rc = ptc_doc_set(d, na, k, x);
        }
        if (!na)
            rc = PTC_ENOMEM;
        /* Keys unchanged but the metadata renamed: the attributes go on a copy, since the
         * input's dict itself is never modified. */
        if (rc == 0 && nv == v && !(nv = shallow_copy(d, v)))
            rc = PTC_ENOMEM;
        if (rc == 0)
            rc = ptc_doc_set_attrs(d, (ptc_value *)nv, na);
    } else if (rc == 0 && nv != v && attrs) {
        rc = ptc_doc_set_attrs(d, (ptc_value *)nv, attrs);
    }
    if (rc < 0) {
        const ptc_error *de = ptc_doc_error(d);
        if (err && de && de->code == rc)
            *err = *de;
        else
            ptc__err(err, rc, "", -1, "renaming keys: %s", ptc_strerror(rc));
        return rc;
    }
    if (stripped)
        *stripped = matched;
    *out = nv;
    return 0;
}
