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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- work budget ----------------------------------------------------------------------------- */

uint64_t ptc_ckpt_file_size(const ptc_ckpt *c) { return c ? ptc__source_size(c->src) : 0; }

uint64_t ptc_ckpt_opcodes(const ptc_ckpt *c) { return c ? c->nops : 0; }

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
    walk_frame *st;
    size_t n, cap;
    ptc__buf path;
};

static bool descend(const ptc_value *v)
{
    return v && (v->kind == PTC_VALUE_DICT || v->kind == PTC_VALUE_LIST ||
                 v->kind == PTC_VALUE_TUPLE);
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

const ptc_error *ptc_walk_error(const ptc_walk *w) { return w ? &w->err : NULL; }

void ptc_walk_free(ptc_walk *w)
{
    if (!w)
        return;
    ptc__free(w->st);
    ptc__buf_free(&w->path);
    ptc__free(w);
}

/* Decimal rendering of a two's-complement little-endian integer of any length. */
static int big_decimal(ptc__buf *b, const uint8_t *bytes, size_t n)
{
    uint8_t mag[256];
    char digits[700];
    size_t nd = 0;
    if (n > sizeof mag)
        return ptc__buf_printf(b, "<int of %zu bytes>", n);
    bool neg = n && (bytes[n - 1] & 0x80);
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned v = neg ? (unsigned)(uint8_t)~bytes[i] + carry : bytes[i];
        mag[i] = (uint8_t)v;
        carry = neg ? v >> 8 : 0;
    }
    size_t len = n;
    while (len && mag[len - 1] == 0)
        len--;
    while (len) {
        unsigned rem = 0;
        for (size_t i = len; i-- > 0;) {
            unsigned cur = (rem << 8) | mag[i];
            mag[i] = (uint8_t)(cur / 10);
            rem = cur % 10;
        }
        digits[nd++] = (char)('0' + rem);
        while (len && mag[len - 1] == 0)
            len--;
    }
    if (nd == 0)
        digits[nd++] = '0';
    if (neg && ptc__buf_append(b, "-", 1) < 0)
        return PTC_ENOMEM;
    for (size_t i = nd; i-- > 0;)
        if (ptc__buf_append(b, &digits[i], 1) < 0)
            return PTC_ENOMEM;
    return 0;
}

/* Python's repr of a float: the shortest form that reads back, with ".0" for integral values. */
static int float_repr(ptc__buf *b, double f)
{
    if (isnan(f))
        return ptc__buf_printf(b, "nan");
    if (isinf(f))
        return ptc__buf_printf(b, f < 0 ? "-inf" : "inf");
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    return ptc__buf_printf(b, "%s%s", tmp, strpbrk(tmp, ".en") ? "" : ".0");
}

static int key_text(ptc__buf *b, const ptc_value *k)
{
    switch (k->kind) {
    case PTC_VALUE_STR: return ptc__buf_append(b, k->u.s.p, k->u.s.n);
    case PTC_VALUE_INT:
        if (k->u.i.fits)
            return ptc__buf_printf(b, "%lld", (long long)k->u.i.v);
        return big_decimal(b, k->u.i.bytes, k->u.i.nbytes);
    case PTC_VALUE_BOOL: return ptc__buf_printf(b, "%s", k->u.b ? "True" : "False");
    case PTC_VALUE_NONE: return ptc__buf_printf(b, "None");
    case PTC_VALUE_FLOAT: return float_repr(b, k->u.f);
    case PTC_VALUE_DTYPE: return ptc__buf_printf(b, "torch.%s", ptc_dtype_name(k->u.dt));
    default: return ptc__buf_printf(b, "<%s>", ptc_value_kind_name((ptc_value_kind)k->kind));
    }
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
            rc = v->kind == PTC_VALUE_DICT ? key_text(&w->path, v->u.dict.keys[i])
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
