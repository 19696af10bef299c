/*
 * walk.c - depth-first walks over a checkpoint's value tree: every tensor with its path (what
 * `ptc inspect` lists and the fixture manifests record), and state-dict lookups by key.
 *
 * Paths join dict keys (as written; ints in decimal, True/False/None as Python prints them) and
 * list or tuple indices with '.'. Only dicts, lists and tuples are descended into; sets, objects and
 * OrderedDict attributes (_metadata) are not. The load-time tree check bounds the tree with every
 * shared subtree counted each time (limits.max_objects), so a walk is bounded too.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- work budget ----------------------------------------------------------------------------- */

uint64_t ptc_ckpt_file_size(const ptc_ckpt *c)
{
    return c ? ptc__source_size(c->src) : 0;
}

uint64_t ptc_ckpt_opcodes(const ptc_ckpt *c)
{
    return c ? c->nops : 0;
}

/* a * k + base, saturating. */
static uint64_t scaled(uint64_t a, uint64_t k, uint64_t base)
{
    if (a > (UINT64_MAX - base) / k)
        return UINT64_MAX;
    return a * k + base;
}

void ptc_budget_init(ptc_budget *b, const ptc_ckpt *c, uint64_t max_bytes)
{
    if (!b)
        return;
    *b = (ptc_budget){0};
    b->max_nodes = scaled(ptc_ckpt_opcodes(c), 16, 1000000);
    b->max_bytes = max_bytes ? max_bytes : scaled(ptc_ckpt_file_size(c), 64, (uint64_t)1 << 30);
    b->bytes_explicit = max_bytes != 0;
}

int ptc_budget_charge(ptc_budget *b, uint64_t nodes, uint64_t bytes, ptc_error *err)
{
    if (!b)
        return 0;
    if (nodes > b->max_nodes - b->nodes)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "work budget exceeded: the tree takes more than %llu visits (16 x the "
                        "pickle's opcodes + 1,000,000); it shares nodes far more than any "
                        "checkpoint needs",
                        (unsigned long long)b->max_nodes);
    if (bytes > b->max_bytes - b->bytes)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "work budget exceeded: this needs more than %llu bytes of tensor data, "
                        "paths and values read or written (%llu so far, %llu more asked; %s)",
                        (unsigned long long)b->max_bytes, (unsigned long long)b->bytes,
                        (unsigned long long)bytes,
                        b->bytes_explicit ? "a byte budget set explicitly with --budget"
                                          : "the byte budget defaults to 64 x the file's size + "
                                            "1 GiB");
    b->nodes += nodes;
    b->bytes += bytes;
    return 0;
}

typedef struct walk_frame {
    const ptc_value *v;
    size_t next;
    size_t pathlen;
} walk_frame;

struct ptc_walk {
    const ptc_value *root;
    ptc_budget *budget;
    ptc_error err;
    bool started;
    bool values; /* started by ptc_walk_next_value: every value, not only tensors */
    walk_frame *st;
    size_t n, cap;
    ptc__buf path;
};

static bool descend(const ptc_value *v)
{
    return v &&
           (v->kind == PTC_VALUE_DICT || v->kind == PTC_VALUE_LIST || v->kind == PTC_VALUE_TUPLE);
}

int ptc_walk_new(ptc_walk **out, const ptc_value *root, ptc_error *err)
{
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_walk_new: missing argument");
    ptc_walk *w = ptc__calloc(1, sizeof *w);
    if (!w)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    w->root = root;
    /* The path never holds more than PTC_PATH_MAX bytes and its NUL (see path_too_long). */
    w->path.max = PTC_PATH_MAX + 1;
    *out = w;
    return 0;
}

void ptc_walk_set_budget(ptc_walk *w, ptc_budget *b)
{
    if (w)
        w->budget = b;
}

const ptc_error *ptc_walk_error(const ptc_walk *w)
{
    return w ? &w->err : NULL;
}

void ptc_walk_free(ptc_walk *w)
{
    if (!w)
        return;
    ptc__free(w->st);
    ptc__buf_free(&w->path);
    ptc__free(w);
}

/* One frame per container on the way down. Below the top, each level adds at least a '.' to the
 * path, so the stack is capped at PTC_PATH_MAX + 2 frames by the path's own cap. */
#define WALK_MAX_FRAMES (PTC_PATH_MAX + 2)

static int push_frame(ptc_walk *w, const ptc_value *v, size_t pathlen)
{
    if (w->n >= WALK_MAX_FRAMES)
        return PTC_ELIMIT;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        walk_frame *st = ptc__realloc(w->st, cap * sizeof *st);
        if (!st)
            return PTC_ENOMEM;
        w->st = st;
        w->cap = cap;
    }
    w->st[w->n++] = (walk_frame){v, 0, pathlen};
    return 0;
}

/* The path to report, NUL-terminated, its length charged to the budget as bytes written; NULL
 * with w->err set when out of memory or over the budget. */
static const char *path_str(ptc_walk *w)
{
    if (ptc_budget_charge(w->budget, 0, w->path.len, &w->err) < 0)
        return NULL;
    if (ptc__buf_reserve(&w->path, 1) < 0) {
        ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
        return NULL;
    }
    w->path.data[w->path.len] = '\0';
    return (const char *)w->path.data;
}

/* A path longer than PTC_PATH_MAX: refused before it grows further (the path buffer's cap stops
 * the key that would cross it, so the length reached is not known). */
static int path_too_long(ptc_walk *w, size_t depth)
{
    return ptc__err(&w->err, PTC_ELIMIT, "", -1,
                    "path longer than %zu bytes (at depth %zu): the file's dict keys make paths "
                    "far longer than any checkpoint's; ptc refuses them",
                    (size_t)PTC_PATH_MAX, depth);
}

int ptc_walk_next(ptc_walk *w, const char **path, const ptc_tensor **t)
{
    if (!w)
        return PTC_EINVAL;
    if (w->started && w->values)
        return ptc__err(&w->err, PTC_EINVAL, "", -1,
                        "ptc_walk_next on a walk ptc_walk_next_value started");
    if (!w->started) {
        w->started = true;
        if (w->root && ptc_budget_charge(w->budget, 1, 0, &w->err) < 0)
            return w->err.code;
        if (w->root && w->root->kind == PTC_VALUE_TENSOR) {
            w->path.len = 0;
            *path = path_str(w);
            *t = w->root->u.t;
            return *path ? 1 : w->err.code;
        }
        if (descend(w->root) && push_frame(w, w->root, 0) < 0)
            return ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
    }
    while (w->n > 0) {
        walk_frame *f = &w->st[w->n - 1];
        const ptc_value *v = f->v;
        size_t count = ptc_value_len(v);
        if (f->next >= count) {
            w->n--;
            continue;
        }
        size_t i = f->next++;
        const ptc_value *c = v->kind == PTC_VALUE_DICT ? v->u.dict.vals[i] : v->u.seq.items[i];
        if (c->kind != PTC_VALUE_TENSOR && !descend(c))
            continue;
        if (ptc_budget_charge(w->budget, 1, 0, &w->err) < 0)
            return w->err.code;
        w->path.len = f->pathlen;
        int rc = f->pathlen ? ptc__buf_append(&w->path, ".", 1) : 0;
        if (rc == 0)
            rc = v->kind == PTC_VALUE_DICT ? ptc__key_text_append(&w->path, v->u.dict.keys[i])
                                           : ptc__buf_printf(&w->path, "%zu", i);
        if (rc == PTC_ELIMIT || w->path.len > PTC_PATH_MAX)
            return path_too_long(w, w->n);
        if (rc < 0)
            return ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
        if (c->kind == PTC_VALUE_TENSOR) {
            *path = path_str(w);
            *t = c->u.t;
            return *path ? 1 : w->err.code;
        }
        if ((rc = push_frame(w, c, w->path.len)) == PTC_ELIMIT)
            return path_too_long(w, w->n);
        if (rc < 0)
            return ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
    }
    return 0;
}

/* ptc_walk_next_value's report of v at the path in w->path, depth levels deep: charged as one
 * node and the path's bytes, and pushed when its items are to be visited. */
static int report_value(ptc_walk *w, const ptc_value *v, size_t depth, const ptc_value **value,
                        const char **path, size_t *len, size_t *depth_out)
{
    if (ptc_budget_charge(w->budget, 1, w->path.len, &w->err) < 0)
        return w->err.code;
    if (ptc__buf_reserve(&w->path, 1) < 0)
        return ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
    w->path.data[w->path.len] = '\0';
    int rc = descend(v) && ptc_value_len(v) > 0 ? push_frame(w, v, w->path.len) : 0;
    if (rc == PTC_ELIMIT)
        return path_too_long(w, w->n);
    if (rc < 0)
        return ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
    *value = v;
    if (path)
        *path = (const char *)w->path.data;
    if (len)
        *len = w->path.len;
    if (depth_out)
        *depth_out = depth;
    return 1;
}

int ptc_walk_next_value(ptc_walk *w, const ptc_value **value, const char **path, size_t *len,
                        size_t *depth)
{
    if (!w)
        return PTC_EINVAL;
    if (!value)
        return ptc__err(&w->err, PTC_EINVAL, "", -1, "ptc_walk_next_value: missing argument");
    if (w->started && !w->values)
        return ptc__err(&w->err, PTC_EINVAL, "", -1,
                        "ptc_walk_next_value on a walk ptc_walk_next started");
    if (!w->started) {
        w->started = w->values = true;
        if (!w->root)
            return 0;
        w->path.len = 0;
        return report_value(w, w->root, 0, value, path, len, depth);
    }
    while (w->n > 0) {
        walk_frame *f = &w->st[w->n - 1];
        const ptc_value *v = f->v;
        if (f->next >= ptc_value_len(v)) {
            w->n--;
            continue;
        }
        size_t i = f->next++;
        const ptc_value *c = v->kind == PTC_VALUE_DICT ? v->u.dict.vals[i] : v->u.seq.items[i];
        if (!c)
            continue;
        w->path.len = f->pathlen;
        int rc = f->pathlen ? ptc__buf_append(&w->path, ".", 1) : 0;
        if (rc == 0)
            rc = v->kind == PTC_VALUE_DICT ? ptc__key_text_append(&w->path, v->u.dict.keys[i])
                                           : ptc__buf_printf(&w->path, "%zu", i);
        if (rc == PTC_ELIMIT || w->path.len > PTC_PATH_MAX)
            return path_too_long(w, w->n);
        if (rc < 0)
            return ptc__err(&w->err, PTC_ENOMEM, "", -1, "out of memory");
        return report_value(w, c, w->n, value, path, len, depth);
    }
    return 0;
}

const ptc_tensor *ptc_state_dict_get(const ptc_value *root, const char *key)
{
    if (!root || !key)
        return NULL;
    const ptc_value *v = ptc_dict_get(root, key);
    if (v)
        return ptc_value_tensor(v);
    /* "model_state_dict.conv1.weight": try each '.'-separated prefix as a nested dict's key. */
    for (const char *dot = strchr(key, '.'); dot; dot = strchr(dot + 1, '.')) {
        char head[256];
        size_t n = (size_t)(dot - key);
        if (n >= sizeof head)
            break;
        memcpy(head, key, n);
        head[n] = '\0';
        const ptc_value *sub = ptc_dict_get(root, head);
        if (sub && sub->kind == PTC_VALUE_DICT) {
            const ptc_tensor *t = ptc_state_dict_get(sub, dot + 1);
            if (t)
                return t;
        }
    }
    return NULL;
}
