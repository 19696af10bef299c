/*
 * salvage.c - symbolic reading (PTC_OPEN_SALVAGE): what the policy refuses becomes names, calls of
 * them objects that hold their arguments and BUILD state, and numpy arrays and scalars tensors.
 *
 * Nothing the file names is imported, looked up or called. A symbolic global is its module and
 * name; a symbolic object is (callable, args, state) exactly as the pickle gave them. The only
 * names given a meaning are numpy's array and scalar reconstructors, and only as a description of
 * bytes: their data is copied into a storage the checkpoint owns and no numpy code is involved.
 * Every limit of the strict machine holds: symbolic globals and objects are values like any
 * other (max_objects, max_depth, the expansion check; an object's callable that is not a global
 * is a child of it in the tree check), the table of distinct symbols stops at
 * PTC__SALVAGE_MAX_SYMBOLS, and array bytes are charged to the heap budget.
 *
 * numpy's pickles at protocol 2 (numpy 1.x names the module numpy.core.multiarray, numpy 2
 * numpy._core.multiarray; docs/internals/salvage.md):
 *   array   _reconstruct(numpy.ndarray, (0,), b'b'), then BUILD (1, shape, dtype, is_fortran,
 *           data); numpy also reads the state without its leading version (4 items)
 *   dtype   numpy.dtype(code, False, True), then BUILD (3, byteorder, subarray, names, fields,
 *           elsize, alignment, flags); version 4 adds the metadata as a ninth item. code is the
 *           kind and size ("f4", "i8", "b1", "c16"); byteorder is '<', '>' or '|' (one byte)
 *   scalar  scalar(dtype, data)
 *   data    bytes (at protocol 2 _codecs.encode(str, 'latin1'); b'' as builtins.bytes()), exactly
 *           numel * itemsize of them, in the dtype's byte order, in C order or, with is_fortran,
 *           in Fortran order.
 * Anything else (object and structured dtypes, strings, datetimes, a subclass of ndarray, a state
 * that is not exactly this) leaves the object symbolic: the report shows it, nothing is guessed.
 */
#include "pth/pth.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SALVAGE_ERR(code, ...)                                                                     \
    ptc__err(err, code, ptc__vm_member(vm), ptc__vm_offset(vm), __VA_ARGS__)

/* ---- the symbol table ------------------------------------------------------------------------ */

/* The position of the symbol whose raw name is full, or SIZE_MAX. */
static size_t symbol_find(const ptc_ckpt *c, const char *full)
{
    if (!c->symbol_index)
        return SIZE_MAX;
    ptc_value probe = {0};
    probe.kind = PTC_VALUE_STR;
    probe.u.s.p = full;
    probe.u.s.n = strlen(full);
    return ptc__dict_index(c->symbol_index, &probe);
}

int ptc__salvage_note_global(ptc_ckpt *c, ptc__vm *vm, const ptc_value *g, ptc_error *err)
{
    size_t i = symbol_find(c, g->u.g.full);
    if (i != SIZE_MAX) {
        c->symbols[i].refs++;
        return 0;
    }
    if (c->nsymbols >= PTC__SALVAGE_MAX_SYMBOLS) {
        c->symbols_dropped++;
        return 0;
    }
    ptc__arena *a = ptc__vm_arena(vm);
    if (!c->symbol_index && !(c->symbol_index = ptc__value_new(a, PTC_VALUE_DICT)))
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    if (c->nsymbols == c->capsymbols) {
        /* The arena cannot grow a block: a doubled copy, at most twice the table's size. */
        size_t cap = c->capsymbols ? c->capsymbols * 2 : 16;
        ptc_symbol *grown = ptc__arena_alloc(a, cap * sizeof *grown);
        if (!grown)
            return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
        if (c->nsymbols)
            memcpy(grown, c->symbols, c->nsymbols * sizeof *grown);
        c->symbols = grown;
        c->capsymbols = cap;
    }
    size_t n = strlen(g->u.g.full), cap = 4 * n + 4; /* every byte may become \xNN */
    ptc_value *key = ptc__value_str(a, PTC_VALUE_STR, g->u.g.full, n);
    char *shown = ptc__arena_alloc(a, cap);
    if (!key || !shown)
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    int rc =
        ptc__dict_set(a, c->symbol_index, key, key, err, ptc__vm_member(vm), ptc__vm_offset(vm));
    if (rc < 0)
        return rc;
    ptc_symbol *s = &c->symbols[c->nsymbols++];
    s->global = ptc__escape(shown, cap, g->u.g.full, n, true);
    /* A legacy stream is five pickles in one file: the offset is the file's. */
    s->member = c->legacy_mode ? "" : ptc__vm_member(vm);
    s->offset = ptc__vm_offset(vm);
    s->refs = 1;
    s->calls = 0;
    return 0;
}

size_t ptc_ckpt_nsymbols(const ptc_ckpt *c)
{
    return c ? c->nsymbols : 0;
}

const ptc_symbol *ptc_ckpt_symbol(const ptc_ckpt *c, size_t i)
{
    return c && i < c->nsymbols ? &c->symbols[i] : NULL;
}

uint64_t ptc_ckpt_symbols_dropped(const ptc_ckpt *c)
{
    return c ? c->symbols_dropped : 0;
}

/* ---- numpy -------------------------------------------------------------------------------------- */

static bool get_int(const ptc_value *v, int64_t *out)
{
    if (v->kind != PTC_VALUE_INT || !v->u.i.fits)
        return false;
    *out = v->u.i.v;
    return true;
}

static bool is_global(const ptc_value *v, const char *full)
{
    return v->kind == PTC_VALUE_GLOBAL && strcmp(v->u.g.full, full) == 0;
}

/* Whether g is numpy's multiarray.<name>, under numpy 1's module name or numpy 2's. */
static bool numpy_multiarray(const ptc_value *g, const char *name)
{
    return g->kind == PTC_VALUE_GLOBAL && (g->flags & PTC__V_SYMBOLIC) &&
           (strcmp(g->u.g.module, "numpy.core.multiarray") == 0 ||
            strcmp(g->u.g.module, "numpy._core.multiarray") == 0) &&
           strcmp(g->u.g.name, name) == 0;
}

typedef struct np_dtype {
    ptc_dtype dt;
    size_t size;
    bool big; /* '>' */
} np_dtype;

/* Why an array stays symbolic: a note on the object (ptc_object_note), in the arena. fmt's
 * arguments that came from the file are escaped by the caller. NULL when out of memory (the note
 * is only an explanation: the object stays as it is either way). */
static const char *note(ptc__vm *vm, const char *fmt, ...) PTC_PRINTF(2, 3);
static const char *note(ptc__vm *vm, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ptc__arena_strndup(ptc__vm_arena(vm), buf, strlen(buf));
}

/* The tensor dtype of a numpy.dtype object as numpy pickles it; false, with *why said, for a
 * dtype ptc has no tensor type for (object, structured, strings, datetimes, ...) or one not
 * written as numpy writes it. */
static bool numpy_dtype(ptc__vm *vm, const ptc_value *d, np_dtype *out, const char **why)
{
    static const struct {
        const char *code;
        ptc_dtype dt;
    } codes[] = {{"b1", PTC_BOOL},      {"u1", PTC_UINT8},      {"i1", PTC_INT8},
                 {"i2", PTC_INT16},     {"i4", PTC_INT32},      {"i8", PTC_INT64},
                 {"u2", PTC_UINT16},    {"u4", PTC_UINT32},     {"u8", PTC_UINT64},
                 {"f2", PTC_FLOAT16},   {"f4", PTC_FLOAT32},    {"f8", PTC_FLOAT64},
                 {"c8", PTC_COMPLEX64}, {"c16", PTC_COMPLEX128}};
    if (d->kind != PTC_VALUE_OBJECT || !(d->flags & PTC__V_SYMBOLIC) ||
        !is_global(d->u.obj.cls, "numpy.dtype")) {
        *why = "its dtype is not a numpy.dtype object";
        return false;
    }
    const ptc_value *args = d->u.obj.args, *st = d->u.obj.state;
    if (!args || args->kind != PTC_VALUE_TUPLE || args->u.seq.n < 1 ||
        args->u.seq.items[0]->kind != PTC_VALUE_STR || !st || st->kind != PTC_VALUE_TUPLE ||
        (st->u.seq.n != 8 && st->u.seq.n != 9) || st->u.seq.items[1]->kind != PTC_VALUE_STR ||
        st->u.seq.items[1]->u.s.n != 1) {
        *why = "its numpy.dtype is not written as numpy writes one (code, then a state of 8 or 9 "
               "items with the byte order)";
        return false;
    }
    ptc_value **s = st->u.seq.items;
    const ptc_value *code = args->u.seq.items[0];
    char order = s[1]->u.s.p[0], shown[64];
    ptc__escape(shown, sizeof shown, code->u.s.p, code->u.s.n, false);
    size_t k = 0;
    while (k < sizeof codes / sizeof *codes && (code->u.s.n != strlen(codes[k].code) ||
                                                memcmp(code->u.s.p, codes[k].code, code->u.s.n)))
        k++;
    if (k == sizeof codes / sizeof *codes) {
        char o[8];
        *why = note(vm, "dtype '%s%s' has no tensor dtype",
                    ptc__escape(o, sizeof o, &order, 1, false), shown);
        return false;
    }
    int64_t version, elsize, align;
    if (!get_int(s[0], &version) || version != (st->u.seq.n == 8 ? 3 : 4) ||
        s[2]->kind != PTC_VALUE_NONE || s[3]->kind != PTC_VALUE_NONE ||
        s[4]->kind != PTC_VALUE_NONE || !get_int(s[5], &elsize) || elsize != -1 ||
        !get_int(s[6], &align) || align != -1) {
        *why = note(vm,
                    "dtype '%s' is not a plain one as numpy writes it (a subarray, field names, "
                    "fields, an element size or an alignment)",
                    shown);
        return false;
    }
    out->dt = codes[k].dt;
    out->size = ptc_dtype_size(codes[k].dt);
    out->big = order == '>';
    /* '|' (no order) is what numpy writes for one byte; '=' it never writes. */
    if (order == '<' || order == '>' || (order == '|' && out->size == 1))
        return true;
    char o[8];
    *why = note(vm, "dtype '%s' has byte order '%s'", shown,
                ptc__escape(o, sizeof o, &order, 1, false));
    return false;
}

/* b'' as protocol 2 writes it: builtins.bytes() (read symbolically, never called). */
static bool empty_bytes_call(const ptc_value *v)
{
    return v->kind == PTC_VALUE_OBJECT && (v->flags & PTC__V_SYMBOLIC) &&
           is_global(v->u.obj.cls, "builtins.bytes") && v->u.obj.args->kind == PTC_VALUE_TUPLE &&
           v->u.obj.args->u.seq.n == 0 && !v->u.obj.state;
}

/* Makes node a tensor of nd's dtype over a copy of data: shape a tuple of ints (NULL: 0-d), C
 * order or Fortran order. Leaves node as it is (and returns 0, *why said) when the description
 * is not one of an array: a dimension that is negative or not an int, sizes that overflow, more
 * than max_ndim dimensions, data that is not exactly numel * itemsize bytes. Errors: the heap
 * budget (PTC_ELIMIT), PTC_ENOMEM, and whatever ptc__ckpt_add_storage says. */
static int make_array(ptc_ckpt *c, ptc__vm *vm, ptc_value *node, const ptc_value *shape,
                      const np_dtype *nd, bool fortran, const ptc_value *data, const char **why,
                      ptc_error *err)
{
    ptc__arena *a = ptc__vm_arena(vm);
    size_t ndim = shape ? shape->u.seq.n : 0;
    if (ndim > ptc__vm_limits(vm)->max_ndim) {
        *why = note(vm, "its shape has %zu dimensions, more than max_ndim (%u)", ndim,
                    (unsigned)ptc__vm_limits(vm)->max_ndim);
        return 0;
    }
    int64_t *dims = ptc__arena_alloc(a, (ndim ? ndim : 1) * sizeof *dims);
    int64_t *strides = ptc__arena_alloc(a, (ndim ? ndim : 1) * sizeof *strides);
    if (!dims || !strides)
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    int64_t numel = 1, nbytes, step = 1;
    for (size_t d = 0; d < ndim; d++) {
        if (!get_int(shape->u.seq.items[d], &dims[d]) || dims[d] < 0) {
            *why = note(vm, "dimension %zu of its shape is not a non-negative int", d);
            return 0;
        }
        if (!ptc__mul_i64_ok(numel, dims[d], &numel)) {
            *why = "the number of elements of its shape overflows";
            return 0;
        }
    }
    if (!ptc__mul_i64_ok(numel, (int64_t)nd->size, &nbytes)) {
        *why = "the byte size of its shape overflows";
        return 0;
    }
    /* Contiguous strides in elements: the first dimension varies fastest in Fortran order. */
    for (size_t k = 0; k < ndim; k++) {
        size_t d = fortran ? k : ndim - 1 - k;
        strides[d] = step;
        if (!ptc__mul_i64_ok(step, dims[d] ? dims[d] : 1, &step)) {
            *why = "the strides of its shape overflow";
            return 0;
        }
    }
    const char *src;
    size_t srclen;
    if (data->kind == PTC_VALUE_BYTES) {
        src = data->u.s.p;
        srclen = data->u.s.n;
    } else if (empty_bytes_call(data)) {
        src = "";
        srclen = 0;
    } else {
        *why =
            note(vm, "its data is %s, not bytes", ptc_value_kind_name((ptc_value_kind)data->kind));
        return 0;
    }
    if ((uint64_t)srclen != (uint64_t)nbytes) {
        *why = note(vm, "its data holds %zu bytes; its shape and dtype need %lld", srclen,
                    (long long)nbytes);
        return 0;
    }

    if (ptc__budget_take(&c->budget, (uint64_t)nbytes, NULL, ptc__vm_member(vm),
                         ptc__vm_offset(vm)) < 0)
        return SALVAGE_ERR(PTC_ELIMIT,
                           "copying a numpy array of %lld bytes would exceed the heap limit of "
                           "%llu bytes",
                           (long long)nbytes, (unsigned long long)c->budget.limit);
    uint8_t *copy = ptc__malloc(nbytes ? (size_t)nbytes : 1);
    if (!copy) {
        ptc__budget_give(&c->budget, (uint64_t)nbytes);
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory copying %lld bytes", (long long)nbytes);
    }
    memcpy(copy, src, (size_t)nbytes);
    if (nd->big)
        ptc__byteswap(copy, (size_t)nbytes, nd->dt);
    if (nd->dt == PTC_BOOL) /* numpy keeps any byte; a bool tensor holds 0 or 1 */
        for (int64_t i = 0; i < nbytes; i++)
            copy[i] = copy[i] != 0;
    char key[32];
    snprintf(key, sizeof key, "numpy.%llu", (unsigned long long)c->narrays);
    ptc_storage *s = ptc__arena_alloc(a, sizeof *s);
    ptc_tensor *t = ptc__arena_alloc(a, sizeof *t);
    if (s)
        s->key = ptc__arena_strndup(a, key, strlen(key));
    if (!s || !t || !s->key) {
        ptc__budget_give(&c->budget, (uint64_t)nbytes);
        ptc__free(copy);
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    }
    s->location = "cpu";
    s->dtype = nd->dt;
    s->nbytes = nbytes;
    s->data = copy;
    s->owned = copy;
    s->referenced = true;
    s->salvaged = true;
    int rc = ptc__ckpt_add_storage(c, s, err);
    if (rc < 0) {
        /* Once listed, the checkpoint frees the copy; before, it is still this function's. */
        if (c->nstorages == 0 || c->storages[c->nstorages - 1] != s) {
            ptc__budget_give(&c->budget, (uint64_t)nbytes);
            ptc__free(copy);
        }
        return rc;
    }
    c->narrays++;
    t->dtype = nd->dt;
    t->ndim = (int)ndim;
    t->shape = dims;
    t->stride = strides;
    t->numel = numel;
    t->storage = s;
    if ((rc = ptc__tensor_check(t, ptc__vm_limits(vm)->max_ndim, ptc__vm_member(vm),
                                ptc__vm_offset(vm), err)) < 0)
        return rc;
    /* In place: the memo and every container that holds the array hold this node. */
    node->kind = PTC_VALUE_TENSOR;
    node->flags = 0;
    node->u.t = t;
    return 0;
}

/* BUILD of an array made by _reconstruct(numpy.ndarray, ...): (1, shape, dtype, is_fortran,
 * data), or the same without the version. */
static int numpy_array(ptc_ckpt *c, ptc__vm *vm, ptc_value *node, ptc_error *err)
{
    const ptc_value *args = node->u.obj.args, *st = node->u.obj.state;
    const char *why = NULL;
    int rc = 0;
    size_t n = st->u.seq.n, base = n == 5 ? 1 : 0;
    ptc_value **s = st->u.seq.items;
    int64_t version;
    np_dtype nd;
    if (args->kind != PTC_VALUE_TUPLE || args->u.seq.n != 3 ||
        !is_global(args->u.seq.items[0], "numpy.ndarray"))
        why = "its class is not numpy.ndarray itself (a subclass, or not written as numpy "
              "writes it)";
    else if (st->kind != PTC_VALUE_TUPLE || (n != 5 && n != 4) ||
             (n == 5 && (!get_int(s[0], &version) || version != 1)) ||
             s[base]->kind != PTC_VALUE_TUPLE || s[base + 2]->kind != PTC_VALUE_BOOL)
        why = "its state is not (1, shape, dtype, is_fortran, data) as numpy writes it";
    else if (numpy_dtype(vm, s[base + 1], &nd, &why))
        rc = make_array(c, vm, node, s[base], &nd, s[base + 2]->u.b, s[base + 3], &why, err);
    if (rc == 0 && node->kind == PTC_VALUE_OBJECT)
        node->u.obj.note = why;
    return rc;
}

/* ---- the hooks' symbolic side ------------------------------------------------------------------ */

int ptc__salvage_call(ptc_ckpt *c, ptc__vm *vm, ptc_value *fn, ptc_value *args, ptc_value **out,
                      ptc_error *err)
{
    ptc__arena *a = ptc__vm_arena(vm);
    const char *why = NULL; /* a numpy scalar's reason to stay symbolic */
    if (fn->kind == PTC_VALUE_GLOBAL) {
        size_t i = symbol_find(c, fn->u.g.full);
        if (i != SIZE_MAX)
            c->symbols[i].calls++;
        /* numpy's scalar(dtype, data): a 0-d tensor, when it is one of an array dtype. */
        np_dtype nd;
        if (numpy_multiarray(fn, "scalar")) {
            why = "it is not scalar(dtype, data) as numpy writes it";
            if (args->u.seq.n == 2 && numpy_dtype(vm, args->u.seq.items[0], &nd, &why)) {
                ptc_value *v = ptc__value_new(a, PTC_VALUE_NONE);
                if (!v)
                    return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
                int rc = make_array(c, vm, v, NULL, &nd, false, args->u.seq.items[1], &why, err);
                if (rc < 0)
                    return rc;
                if (v->kind == PTC_VALUE_TENSOR) {
                    *out = v;
                    return 0;
                }
            }
        }
    } else {
        /* An array that was called is not rebuilt in place: its caller's callable stays an
         * object, so that every chain of callables ends at a global. */
        fn->flags |= PTC__V_CALLED;
    }
    ptc_value *v = ptc__value_new(a, PTC_VALUE_OBJECT);
    if (!v)
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    v->flags |= PTC__V_SYMBOLIC;
    v->u.obj.cls = fn;
    v->u.obj.args = args;
    v->u.obj.note = why;
    *out = v;
    return 0;
}

/* The parts of a BUILD state as pickle's load_build takes them: a false state sets nothing, a
 * (state, slots) pair is split, each part a dict or false. false when the state is none of these
 * (a class's own __setstate__ would decide what it means). */
static bool build_parts(const ptc_value *state, const ptc_value **d, const ptc_value **slots)
{
    *d = *slots = NULL;
    if (!ptc__value_truthy(state))
        return true;
    if (state->kind == PTC_VALUE_TUPLE && state->u.seq.n == 2) {
        const ptc_value *p = state->u.seq.items[0], *q = state->u.seq.items[1];
        *d = ptc__value_truthy(p) ? p : NULL;
        *slots = ptc__value_truthy(q) ? q : NULL;
    } else {
        *d = state;
    }
    return (!*d || (*d)->kind == PTC_VALUE_DICT) && (!*slots || (*slots)->kind == PTC_VALUE_DICT);
}

/* first.update(second) into a new plain dict (first may be shared through the memo: it is never
 * changed): first's keys keep their places, second's new keys follow in its order. Either may be
 * NULL (nothing); when one is, the other is the result as it is. Each pair copied counts against
 * max_objects, so that repeated BUILDs of one big state cannot make quadratic work. */
static int dict_update(ptc__vm *vm, const ptc_value *first, const ptc_value *second,
                       const ptc_value **out, ptc_error *err)
{
    if (!first || !second) {
        *out = first ? first : second;
        return 0;
    }
    int rc = ptc__vm_charge(vm, (uint64_t)first->u.dict.n + second->u.dict.n + 1, err);
    if (rc < 0)
        return rc;
    ptc_value *d = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_DICT);
    if (!d)
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    for (int k = 0; k < 2; k++) {
        const ptc_value *src = k ? second : first;
        for (size_t i = 0; i < src->u.dict.n; i++)
            if ((rc = ptc__dict_set(ptc__vm_arena(vm), d, src->u.dict.keys[i], src->u.dict.vals[i],
                                    err, ptc__vm_member(vm), ptc__vm_offset(vm))) < 0)
                return rc;
    }
    *out = d;
    return 0;
}

/* A second BUILD on a symbolic object. Python's default BUILD (and nn.Module.__setstate__) apply
 * every state: inst.__dict__.update(state), then setattr for each slot. The object's state becomes
 * the first updated by the second (new dicts: the first state may be shared), a (dict, slots)
 * pair when either state had slots. A state that is not a dict, a false value or such a pair
 * (what the class's own __setstate__ does with it is unknown) is refused: keeping either state
 * could give weights other than Python's. */
static int build_again(ptc__vm *vm, ptc_value *target, ptc_value *state, ptc_error *err)
{
    const ptc_value *d0, *s0, *d1, *s1, *d, *s;
    if (!build_parts(target->u.obj.state, &d0, &s0) || !build_parts(state, &d1, &s1)) {
        char shown[160];
        const char *name = ptc_value_global_name(target);
        return SALVAGE_ERR(
            PTC_EFORMAT,
            "a second BUILD on a symbolic %s object: its states (%s, then %s) are "
            "not dicts or (dict, slots) pairs, so what Python would build is "
            "unknown",
            ptc__escape(shown, sizeof shown, name ? name : "?", name ? strlen(name) : 1, false),
            ptc_value_kind_name((ptc_value_kind)target->u.obj.state->kind),
            ptc_value_kind_name((ptc_value_kind)state->kind));
    }
    int rc = dict_update(vm, d0, d1, &d, err);
    if (rc < 0 || (rc = dict_update(vm, s0, s1, &s, err)) < 0)
        return rc;
    if (!s) {
        if (d) /* nothing at all keeps the first state, a false value */
            target->u.obj.state = (ptc_value *)d;
        return 0;
    }
    if ((rc = ptc__vm_charge(vm, 2, err)) < 0)
        return rc;
    ptc__arena *a = ptc__vm_arena(vm);
    ptc_value *pair = ptc__value_new(a, PTC_VALUE_TUPLE);
    ptc_value *first = d ? (ptc_value *)d : ptc__value_new(a, PTC_VALUE_NONE);
    if (!pair || !first || ptc__seq_push(a, pair, first) < 0 ||
        ptc__seq_push(a, pair, (ptc_value *)s) < 0)
        return SALVAGE_ERR(PTC_ENOMEM, "out of memory");
    target->u.obj.state = pair;
    return 0;
}

int ptc__salvage_build(ptc_ckpt *c, ptc__vm *vm, ptc_value *target, ptc_value *state,
                       ptc_error *err)
{
    if (target->u.obj.state)
        return build_again(vm, target, state, err);
    target->u.obj.state = state;
    if (!numpy_multiarray(target->u.obj.cls, "_reconstruct"))
        return 0;
    if (!(target->flags & PTC__V_CALLED))
        return numpy_array(c, vm, target, err);
    target->u.obj.note = "the pickle calls it (it is the callable of another object)";
    return 0;
}
