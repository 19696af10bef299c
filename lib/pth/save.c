/*
 * save.c - ptc_save: a value tree to a checkpoint torch reads as if it had written it.
 *
 * The pickle is what CPython's pickler (protocol 2) writes when torch.save pickles the same
 * objects: the same opcodes, the same memo numbering, the same reduce forms -
 *   OrderedDict   GLOBAL collections.OrderedDict, (), REDUCE, items in SETITEMS batches of 1000,
 *                 then its attributes (a state dict's _metadata) as a dict and BUILD;
 *   tensor        REDUCE(torch._utils._rebuild_tensor_v2, (storage pid, offset, size, stride,
 *                 requires_grad, OrderedDict())), or _rebuild_tensor_v3 with the dtype for the
 *                 dtypes without a legacy storage class; pid = ('storage', <Type>Storage, key,
 *                 location, numel) through BINPERSID;
 *   Parameter     REDUCE(torch._utils._rebuild_parameter, (tensor, requires_grad, OrderedDict()));
 *   bytes         REDUCE(_codecs.encode, (latin-1 str, 'latin1')); set, complex, torch.Size and
 *                 torch.device through their __reduce__ forms.
 * Object identity decides the memo: a node reached twice is written once and fetched with BINGET
 * afterwards, as Python does for one object referenced twice. Constants torch's code reuses
 * ('storage', 'cpu', 'latin1' and the globals) are memoized once.
 *
 * Storages get keys "0", "1", ... in the order the pickle first references them (torch's id_map),
 * and their records are written in sorted() order of those keys, as torch 2.6 does. The container
 * is written by the archive layer, byte for byte as torch 2.6 writes it.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Identity keys for constants: any distinct addresses will do. */
static const char K_STORAGE, K_CPU, K_LATIN1, K_OD, K_V2, K_V3, K_UNTYPED, K_PARAM, K_ENCODE,
    K_PARAM_STATE, K_FROM_TYPE, K_TENSOR, K_SET, K_COMPLEX, K_SIZE, K_DEVICE, K_BYTEARRAY,
    K_COUNTER;
static const char K_DTYPE[PTC_DTYPE_COUNT], K_STORAGE_CLASS[PTC_DTYPE_COUNT];

typedef struct saved_storage {
    const ptc_storage *s;
    char key[24];
} saved_storage;

typedef struct saver {
    ptc__pw pw;
    saved_storage *st;
    size_t nst, capst;
    size_t *index; /* open addressing: storage pointer -> position + 1 */
    size_t index_cap;
    const char *location; /* every storage's location tag; NULL: each storage's own */
    ptc_budget *budget;   /* one node per value written; NULL: none */
    ptc_error *err;
    int rc;
} saver;

#define MAX_DEPTH 1000

static int fail(saver *s, int code, const char *what)
{
    if (s->rc == 0)
        s->rc = ptc__err(s->err, code, "", -1, "%s", what);
    return s->rc;
}

static size_t ptr_slot(const void *p, size_t cap)
{
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 15;
    h *= (uintptr_t)0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 7) & (cap - 1);
}

/* The key of a storage, assigned at its first reference. */
static saved_storage *storage_entry(saver *s, const ptc_storage *st)
{
    if (s->index_cap) {
        for (size_t i = ptr_slot(st, s->index_cap); s->index[i]; i = (i + 1) & (s->index_cap - 1))
            if (s->st[s->index[i] - 1].s == st)
                return &s->st[s->index[i] - 1];
    }
    /* Each storage becomes one zip record: no more than the writer can list. */
    if (s->nst >= PTC__ZIPW_MAX_RECORDS)
        return NULL;
    if (s->nst == s->capst) {
        size_t cap = s->capst ? s->capst * 2 : 64;
        saved_storage *n = ptc__realloc(s->st, cap * sizeof *n);
        if (!n)
            return NULL;
        s->st = n;
        s->capst = cap;
    }
    if ((s->nst + 1) * 2 > s->index_cap) {
        size_t cap = s->index_cap ? s->index_cap * 2 : 128;
        size_t *idx = ptc__calloc(cap, sizeof *idx);
        if (!idx)
            return NULL;
        for (size_t i = 0; i < s->nst; i++) {
            size_t j = ptr_slot(s->st[i].s, cap);
            while (idx[j])
                j = (j + 1) & (cap - 1);
            idx[j] = i + 1;
        }
        ptc__free(s->index);
        s->index = idx;
        s->index_cap = cap;
    }
    saved_storage *e = &s->st[s->nst];
    e->s = st;
    snprintf(e->key, sizeof e->key, "%zu", s->nst);
    size_t j = ptr_slot(st, s->index_cap);
    while (s->index[j])
        j = (j + 1) & (s->index_cap - 1);
    s->index[j] = ++s->nst;
    return e;
}

static void global_once(saver *s, const void *key, const char *module, const char *name)
{
    if (!ptc__pw_get(&s->pw, key)) {
        ptc__pw_global(&s->pw, module, name);
        ptc__pw_put(&s->pw, key);
    }
}

static void const_str(saver *s, const void *key, const char *str)
{
    if (!ptc__pw_get(&s->pw, key)) {
        ptc__pw_str(&s->pw, str, strlen(str));
        ptc__pw_put(&s->pw, key);
    }
}

/* A tuple of ints that is a new object each time (sizes and strides). */
static void int_tuple(saver *s, const int64_t *v, int n)
{
    if (n == 0) {
        ptc__pw_op(&s->pw, PTC__OP_EMPTY_TUPLE);
        return;
    }
    if (n > 3)
        ptc__pw_op(&s->pw, PTC__OP_MARK);
    for (int i = 0; i < n; i++)
        ptc__pw_int(&s->pw, v[i]);
    ptc__pw_op(&s->pw, n > 3 ? PTC__OP_TUPLE : (uint8_t)(PTC__OP_TUPLE1 + n - 1));
    ptc__pw_put(&s->pw, NULL);
}

/* OrderedDict() through its reduce form, memoized under key (NULL for a fresh, unshared one). */
static void empty_ordered_dict(saver *s, const void *key)
{
    global_once(s, &K_OD, "collections", "OrderedDict");
    ptc__pw_op(&s->pw, PTC__OP_EMPTY_TUPLE);
    ptc__pw_op(&s->pw, PTC__OP_REDUCE);
    ptc__pw_put(&s->pw, key);
}

static int save(saver *s, const ptc_value *v, int depth);

/* The rebuild of t: REDUCE of _rebuild_tensor_v2/v3. from_type: the callable, torch.Tensor and
 * the argument tuple only, as _rebuild_from_type_v2 takes them. */
static void tensor_reduce(saver *s, const ptc_tensor *t, bool requires_grad, bool from_type)
{
    /* A storage is declared with one class wherever it is referenced: its own dtype's (torch
     * keeps the first declaration of a key). A tensor of that dtype is rebuilt by v2, as torch.save
     * writes it; one that reads an untyped storage, or a typed storage as another dtype (a file
     * torch loads, though torch.save never writes it), by v3 with its dtype. */
    const ptc_storage *st = t->storage;
    const ptc__dtype_info *info = ptc__dtype_info_of(st->untyped ? PTC_UINT8 : st->dtype);
    bool untyped = st->untyped || info->storage_name == NULL;
    bool v3 = untyped || t->dtype != st->dtype;
    saved_storage *e = storage_entry(s, t->storage);
    if (!e) {
        fail(s, s->nst >= PTC__ZIPW_MAX_RECORDS ? PTC_ELIMIT : PTC_ENOMEM,
             s->nst >= PTC__ZIPW_MAX_RECORDS ? "more storages than a zip directory can list"
                                             : "out of memory");
        return;
    }
    if (v3)
        global_once(s, &K_V3, "torch._utils", "_rebuild_tensor_v3");
    else
        global_once(s, &K_V2, "torch._utils", "_rebuild_tensor_v2");
    if (from_type)
        global_once(s, &K_TENSOR, "torch", "Tensor");
    ptc__pw_op(&s->pw, PTC__OP_MARK);
    /* The persistent id: a new tuple each time, its parts shared. */
    ptc__pw_op(&s->pw, PTC__OP_MARK);
    const_str(s, &K_STORAGE, "storage");
    if (untyped)
        global_once(s, &K_UNTYPED, "torch.storage", "UntypedStorage");
    else
        global_once(s, &K_STORAGE_CLASS[st->dtype], "torch", info->storage_name);
    /* The key string is memoized under the storage itself: the entry e lives in an array that
     * grows, so its address is no identity (after a move, a new entry could reuse an address the
     * memo already holds for another storage's key). A storage is its own arena allocation, never
     * the address of a value the memo also holds. */
    const_str(s, st, e->key);
    const char *loc = s->location ? s->location : st->location;
    if (strcmp(loc, "cpu") == 0) {
        const_str(s, &K_CPU, "cpu");
    } else {
        ptc__pw_str(&s->pw, loc, strlen(loc));
        ptc__pw_put(&s->pw, NULL);
    }
    int64_t numel = untyped ? st->nbytes : st->nbytes / (int64_t)info->size;
    ptc__pw_int(&s->pw, numel);
    ptc__pw_op(&s->pw, PTC__OP_TUPLE);
    ptc__pw_put(&s->pw, NULL);
    ptc__pw_op(&s->pw, PTC__OP_BINPERSID);
    ptc__pw_int(&s->pw, t->offset);
    int_tuple(s, t->shape, t->ndim);
    int_tuple(s, t->stride, t->ndim);
    ptc__pw_op(&s->pw, requires_grad ? PTC__OP_NEWTRUE : PTC__OP_NEWFALSE);
    empty_ordered_dict(s, NULL);
    if (v3)
        global_once(s, &K_DTYPE[t->dtype], "torch", ptc__dtype_info_of(t->dtype)->name);
    if (t->conj || t->neg) {
        ptc__pw_op(&s->pw, PTC__OP_EMPTY_DICT);
        ptc__pw_put(&s->pw, NULL);
        if (t->conj && t->neg)
            ptc__pw_op(&s->pw, PTC__OP_MARK);
        /* torch's metadata map lists neg before conj when both are set. */
        if (t->neg) {
            ptc__pw_str(&s->pw, "neg", 3);
            ptc__pw_put(&s->pw, NULL);
            ptc__pw_op(&s->pw, PTC__OP_NEWTRUE);
        }
        if (t->conj) {
            ptc__pw_str(&s->pw, "conj", 4);
            ptc__pw_put(&s->pw, NULL);
            ptc__pw_op(&s->pw, PTC__OP_NEWTRUE);
        }
        ptc__pw_op(&s->pw, t->conj && t->neg ? PTC__OP_SETITEMS : PTC__OP_SETITEM);
    }
    ptc__pw_op(&s->pw, PTC__OP_TUPLE);
    ptc__pw_put(&s->pw, NULL);
    if (!from_type)
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
}

static int save_tensor(saver *s, const ptc_value *v, int depth)
{
    const ptc_tensor *t = v->u.t;
    if (t->parameter) {
        /* Parameter.__reduce_ex__: (_rebuild_parameter, (self.data, requires_grad, OrderedDict()))
         * where self.data is a new tensor object that never requires grad; with attributes,
         * (_rebuild_parameter_with_state, (..., state)). */
        if (t->state) {
            global_once(s, &K_PARAM_STATE, "torch._utils", "_rebuild_parameter_with_state");
            ptc__pw_op(&s->pw, PTC__OP_MARK);
        } else {
            global_once(s, &K_PARAM, "torch._utils", "_rebuild_parameter");
        }
        tensor_reduce(s, t, false, false);
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, t->requires_grad ? PTC__OP_NEWTRUE : PTC__OP_NEWFALSE);
        empty_ordered_dict(s, NULL);
        if (t->state && save(s, t->state, depth + 1) < 0)
            return s->rc;
        ptc__pw_op(&s->pw, t->state ? PTC__OP_TUPLE : PTC__OP_TUPLE3);
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
    } else if (t->state) {
        /* Tensor.__reduce_ex__ with attributes: (_rebuild_from_type_v2, (func, Tensor, args,
         * state)). */
        global_once(s, &K_FROM_TYPE, "torch._tensor", "_rebuild_from_type_v2");
        ptc__pw_op(&s->pw, PTC__OP_MARK);
        tensor_reduce(s, t, t->requires_grad, true);
        if (save(s, t->state, depth + 1) < 0)
            return s->rc;
        ptc__pw_op(&s->pw, PTC__OP_TUPLE);
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
    } else {
        tensor_reduce(s, t, t->requires_grad, false);
    }
    ptc__pw_put(&s->pw, v);
    return 0;
}

/* Items of a list (APPENDS) or dict (SETITEMS) in CPython's batches of 1000. */
static int batches(saver *s, const ptc_value *v, int depth)
{
    bool dict = v->kind == PTC_VALUE_DICT;
    size_t n = dict ? v->u.dict.n : v->u.seq.n;
    for (size_t start = 0; start < n; start += 1000) {
        size_t end = n - start > 1000 ? start + 1000 : n;
        if (end - start > 1)
            ptc__pw_op(&s->pw, PTC__OP_MARK);
        for (size_t i = start; i < end; i++) {
            if (dict) {
                if (save(s, v->u.dict.keys[i], depth + 1) < 0 ||
                    save(s, v->u.dict.vals[i], depth + 1) < 0)
                    return s->rc;
            } else if (save(s, v->u.seq.items[i], depth + 1) < 0) {
                return s->rc;
            }
        }
        if (end - start > 1)
            ptc__pw_op(&s->pw, dict ? PTC__OP_SETITEMS : PTC__OP_APPENDS);
        else
            ptc__pw_op(&s->pw, dict ? PTC__OP_SETITEM : PTC__OP_APPEND);
    }
    return 0;
}

/* bytes: (_codecs.encode, (latin-1 str, 'latin1')); memo under key. Empty bytes too: Python
 * pickles them as (bytes, ()), which torch's weights-only unpickler refuses. */
static int save_bytes(saver *s, const ptc_value *v, const void *key)
{
    global_once(s, &K_ENCODE, "_codecs", "encode");
    /* Each byte becomes one code point, sent as UTF-8. */
    ptc__buf u = {0};
    for (size_t i = 0; i < v->u.s.n; i++) {
        uint8_t c = (uint8_t)v->u.s.p[i];
        uint8_t enc[2] = {(uint8_t)(0xC0 | (c >> 6)), (uint8_t)(0x80 | (c & 0x3F))};
        int rc = ptc__buf_append(&u, c < 0x80 ? &c : enc, c < 0x80 ? 1 : 2);
        if (rc < 0) {
            ptc__buf_free(&u);
            if (rc != PTC_ELIMIT)
                return fail(s, PTC_ENOMEM, "out of memory");
            char msg[128];
            snprintf(msg, sizeof msg, "a bytes value of %zu bytes is more than a pickle may hold",
                     v->u.s.n);
            return fail(s, rc, msg);
        }
    }
    ptc__pw_str(&s->pw, u.data ? (const char *)u.data : "", u.len);
    ptc__buf_free(&u);
    ptc__pw_put(&s->pw, NULL);
    const_str(s, &K_LATIN1, "latin1");
    ptc__pw_op(&s->pw, PTC__OP_TUPLE2);
    ptc__pw_put(&s->pw, NULL);
    ptc__pw_op(&s->pw, PTC__OP_REDUCE);
    ptc__pw_put(&s->pw, key);
    return 0;
}

/* A tuple that is an object of the tree (memoized by identity). */
static int save_tuple(saver *s, const ptc_value *v, int depth)
{
    size_t n = v->u.seq.n;
    if (n == 0) {
        ptc__pw_op(&s->pw, PTC__OP_EMPTY_TUPLE);
        return 0;
    }
    if (n > 3)
        ptc__pw_op(&s->pw, PTC__OP_MARK);
    for (size_t i = 0; i < n; i++)
        if (save(s, v->u.seq.items[i], depth + 1) < 0)
            return s->rc;
    ptc__pw_op(&s->pw, n > 3 ? PTC__OP_TUPLE : (uint8_t)(PTC__OP_TUPLE1 + n - 1));
    ptc__pw_put(&s->pw, v);
    return 0;
}

static int save(saver *s, const ptc_value *v, int depth)
{
    if (s->rc)
        return s->rc;
    if (depth > MAX_DEPTH)
        return fail(s, PTC_ELIMIT, "the value tree nests deeper than 1000 levels");
    switch (v->kind) {
    case PTC_VALUE_NONE:
        ptc__pw_op(&s->pw, PTC__OP_NONE);
        return 0;
    case PTC_VALUE_BOOL:
        ptc__pw_op(&s->pw, v->u.b ? PTC__OP_NEWTRUE : PTC__OP_NEWFALSE);
        return 0;
    case PTC_VALUE_INT:
        if (v->u.i.fits)
            ptc__pw_int(&s->pw, v->u.i.v);
        else
            ptc__pw_long(&s->pw, v->u.i.bytes, v->u.i.nbytes);
        return 0;
    case PTC_VALUE_FLOAT:
        ptc__pw_float(&s->pw, v->u.f);
        return 0;
    default:
        break;
    }
    if (ptc__pw_get(&s->pw, v))
        return 0;
    /* Each object is written once (later references are memo fetches), so this counts the
     * distinct values, never the paths to them. */
    if (s->budget && ptc_budget_charge(s->budget, 1, 0, s->err) < 0)
        return s->rc = s->err ? s->err->code : PTC_ELIMIT;
    switch (v->kind) {
    case PTC_VALUE_STR:
        ptc__pw_str(&s->pw, v->u.s.p, v->u.s.n);
        ptc__pw_put(&s->pw, v);
        return 0;
    case PTC_VALUE_BYTES:
        if (v->flags & PTC__V_BYTEARRAY) {
            /* Protocol 2 pickles bytearray(b) as (bytearray, (bytes,)), the bytes a new object. */
            global_once(s, &K_BYTEARRAY, "builtins", "bytearray");
            if (save_bytes(s, v, NULL) < 0)
                return s->rc;
            ptc__pw_op(&s->pw, PTC__OP_TUPLE1);
            ptc__pw_put(&s->pw, NULL);
            ptc__pw_op(&s->pw, PTC__OP_REDUCE);
            ptc__pw_put(&s->pw, v);
            return 0;
        }
        return save_bytes(s, v, v);
    case PTC_VALUE_TUPLE:
        return save_tuple(s, v, depth);
    case PTC_VALUE_LIST:
        ptc__pw_op(&s->pw, PTC__OP_EMPTY_LIST);
        ptc__pw_put(&s->pw, v);
        return batches(s, v, depth);
    case PTC_VALUE_DICT:
        if (v->flags & PTC__V_COUNTER) {
            /* Counter.__reduce__: (Counter, (dict(self),)) */
            global_once(s, &K_COUNTER, "collections", "Counter");
            ptc__pw_op(&s->pw, PTC__OP_EMPTY_DICT);
            ptc__pw_put(&s->pw, NULL);
            if (batches(s, v, depth) < 0)
                return s->rc;
            ptc__pw_op(&s->pw, PTC__OP_TUPLE1);
            ptc__pw_put(&s->pw, NULL);
            ptc__pw_op(&s->pw, PTC__OP_REDUCE);
            ptc__pw_put(&s->pw, v);
        } else {
            if (v->flags & PTC__V_ORDERED) {
                empty_ordered_dict(s, v);
            } else {
                ptc__pw_op(&s->pw, PTC__OP_EMPTY_DICT);
                ptc__pw_put(&s->pw, v);
            }
            if (batches(s, v, depth) < 0)
                return s->rc;
        }
        /* Attributes (an OrderedDict's _metadata, a Counter's): the instance dict, by BUILD. */
        if (v->u.dict.attrs && v->u.dict.attrs->u.dict.n > 0) {
            if (save(s, v->u.dict.attrs, depth + 1) < 0)
                return s->rc;
            ptc__pw_op(&s->pw, PTC__OP_BUILD);
        }
        return 0;
    case PTC_VALUE_SET:
        /* set.__reduce__ under protocol 2: (set, (list(self),)) */
        global_once(s, &K_SET, "builtins", "set");
        ptc__pw_op(&s->pw, PTC__OP_EMPTY_LIST);
        ptc__pw_put(&s->pw, NULL);
        if (batches(s, v, depth) < 0)
            return s->rc;
        ptc__pw_op(&s->pw, PTC__OP_TUPLE1);
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
        ptc__pw_put(&s->pw, v);
        return 0;
    case PTC_VALUE_COMPLEX:
        global_once(s, &K_COMPLEX, "builtins", "complex");
        ptc__pw_float(&s->pw, v->u.c.re);
        ptc__pw_float(&s->pw, v->u.c.im);
        ptc__pw_op(&s->pw, PTC__OP_TUPLE2);
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
        ptc__pw_put(&s->pw, v);
        return 0;
    case PTC_VALUE_SIZE:
        /* torch.Size.__reduce__: (torch.Size, (tuple(self),)) */
        global_once(s, &K_SIZE, "torch", "Size");
        if (v->u.seq.n == 0) {
            ptc__pw_op(&s->pw, PTC__OP_EMPTY_TUPLE);
        } else {
            if (v->u.seq.n > 3)
                ptc__pw_op(&s->pw, PTC__OP_MARK);
            for (size_t i = 0; i < v->u.seq.n; i++)
                if (save(s, v->u.seq.items[i], depth + 1) < 0)
                    return s->rc;
            ptc__pw_op(&s->pw,
                       v->u.seq.n > 3 ? PTC__OP_TUPLE : (uint8_t)(PTC__OP_TUPLE1 + v->u.seq.n - 1));
            ptc__pw_put(&s->pw, NULL);
        }
        ptc__pw_op(&s->pw, PTC__OP_TUPLE1);
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
        ptc__pw_put(&s->pw, v);
        return 0;
    case PTC_VALUE_DEVICE:
        global_once(s, &K_DEVICE, "torch", "device");
        ptc__pw_str(&s->pw, v->u.dev.type, strlen(v->u.dev.type));
        ptc__pw_put(&s->pw, NULL);
        if (v->u.dev.index >= 0) {
            ptc__pw_int(&s->pw, v->u.dev.index);
            ptc__pw_op(&s->pw, PTC__OP_TUPLE2);
        } else {
            ptc__pw_op(&s->pw, PTC__OP_TUPLE1);
        }
        ptc__pw_put(&s->pw, NULL);
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
        ptc__pw_put(&s->pw, v);
        return 0;
    case PTC_VALUE_DTYPE:
        global_once(s, &K_DTYPE[v->u.dt], "torch", ptc_dtype_name(v->u.dt));
        return 0;
    case PTC_VALUE_GLOBAL:
        /* What a file named and ptc read symbolically (PTC_OPEN_SALVAGE) is never written back:
         * a payload would travel into the output. */
        if (v->flags & PTC__V_SYMBOLIC)
            return fail(s, PTC_EINVAL,
                        "ptc_save: cannot write a symbolic global, read with PTC_OPEN_SALVAGE");
        ptc__pw_global(&s->pw, v->u.g.module, v->u.g.name);
        ptc__pw_put(&s->pw, v);
        return 0;
    case PTC_VALUE_OBJECT: {
        const ptc_value *cls = v->u.obj.cls;
        if ((v->flags & PTC__V_SYMBOLIC) || cls->kind != PTC_VALUE_GLOBAL)
            return fail(s, PTC_EINVAL,
                        "ptc_save: cannot write a symbolic object, read with PTC_OPEN_SALVAGE");
        if (!ptc__pw_get(&s->pw, cls)) {
            ptc__pw_global(&s->pw, cls->u.g.module, cls->u.g.name);
            ptc__pw_put(&s->pw, cls);
        }
        if (save(s, v->u.obj.args, depth + 1) < 0)
            return s->rc;
        ptc__pw_op(&s->pw, PTC__OP_REDUCE);
        ptc__pw_put(&s->pw, v);
        if (v->u.obj.state) {
            if (save(s, v->u.obj.state, depth + 1) < 0)
                return s->rc;
            ptc__pw_op(&s->pw, PTC__OP_BUILD);
        }
        return 0;
    }
    case PTC_VALUE_TENSOR:
        save_tensor(s, v, depth);
        return s->rc;
    default:
        return fail(s, PTC_EINVAL,
                    v->kind == PTC__VALUE_OPAQUE ? "ptc_save: cannot write a bare storage"
                                                 : "ptc_save: cannot write a value of this kind");
    }
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(((const saved_storage *)a)->key, ((const saved_storage *)b)->key);
}

/* torch's archive name: the file name without its last extension; "archive" when torch would
 * have opened the path itself (a name with non-ASCII characters). */
static void archive_name(const char *path, char *out, size_t cap)
{
    for (const char *p = path; *p; p++) {
        if ((unsigned char)*p >= 0x80) {
            snprintf(out, cap, "archive");
            return;
        }
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot ? (size_t)(dot - base) : strlen(base);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, base, n);
    out[n] = '\0';
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

void ptc_save_params_default(ptc_save_params *p)
{
    *p = (ptc_save_params){.size = sizeof *p, .format = PTC_SAVE_AUTO, .serialization_id = 1};
}

static int save_pth(const ptc_value *root, const char *path, const ptc_save_params *p,
                    ptc_error *err)
{
    ptc_error local;
    if (!err)
        err = &local;
    saver s = {.location = p->map_location, .budget = p->budget, .err = err};
    ptc__pw_init(&s.pw);
    ptc__zipw *w = NULL;
    int rc = 0;
    ptc__pw_op(&s.pw, PTC__OP_PROTO);
    ptc__pw_op(&s.pw, 2); /* the protocol number, PROTO's argument */
    if (save(&s, root, 0) < 0) {
        rc = s.rc;
        goto out;
    }
    ptc__pw_op(&s.pw, PTC__OP_STOP);
    if (ptc__pw_error(&s.pw) == PTC_ELIMIT) {
        rc = ptc__err(err, PTC_ELIMIT, "data.pkl", -1,
                      "the pickle would exceed %zu bytes or %lu memo entries, more than ptc "
                      "reads back",
                      (size_t)PTC__PW_MAX_BYTES, (unsigned long)PTC__PW_MAX_MEMO);
        goto out;
    }
    if (ptc__pw_failed(&s.pw)) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory writing the pickle");
        goto out;
    }
    char prefix[256];
    if (p->archive_name)
        snprintf(prefix, sizeof prefix, "%s", p->archive_name);
    else
        archive_name(path, prefix, sizeof prefix);
    uint64_t total = s.pw.out.len, done_bytes = 0, data = 0;
    for (size_t i = 0; i < s.nst; i++)
        data += (uint64_t)s.st[i].s->nbytes;
    total += data;
    /* Storages are written as they are, each once however many tensors view it: a view larger
     * than its storage (a stride-0 expand) costs its storage's bytes only. */
    if (p->budget && (rc = ptc_budget_charge(p->budget, 0, data, err)) < 0) {
        char shown[160];
        ptc__escape(shown, sizeof shown, path, strlen(path), true);
        ptc__err_prefix(err, "%s would hold %llu bytes of tensor data in %zu storages: ", shown,
                        (unsigned long long)data, s.nst);
        goto out;
    }
    if ((rc = ptc__zipw_open(&w, path, prefix, err)) < 0)
        goto out;
    if ((rc = ptc__zipw_add(w, "data.pkl", s.pw.out.data, s.pw.out.len, err)) < 0 ||
        (rc = ptc__zipw_add(w, "byteorder", "little", 6, err)) < 0)
        goto out;
    done_bytes += s.pw.out.len;
    /* torch 2.6 writes the storages in sorted() order of their keys: "0", "1", "10", "100", ... */
    saved_storage *order = ptc__malloc((s.nst ? s.nst : 1) * sizeof *order);
    if (!order) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        goto out;
    }
    if (s.nst)
        memcpy(order, s.st, s.nst * sizeof *order);
    qsort(order, s.nst, sizeof *order, cmp_keys);
    for (size_t i = 0; i < s.nst && rc == 0; i++) {
        char name[40];
        snprintf(name, sizeof name, "data/%s", order[i].key);
        const ptc_storage *st = order[i].s;
        if (!st->data && st->nbytes)
            rc = ptc__err(err, PTC_EINVAL, "", -1, "storage %s has no data", st->key);
        else
            rc = ptc__zipw_add(w, name, st->data, (uint64_t)st->nbytes, err);
        done_bytes += (uint64_t)st->nbytes;
        if (p->progress)
            p->progress(p->progress_ctx, done_bytes, total);
    }
    ptc__free(order);
    if (rc < 0)
        goto out;
    if ((rc = ptc__zipw_add(w, "version", "3\n", 2, err)) < 0)
        goto out;
    if (p->serialization_id) {
        /* torch hashes the record names and CRCs with an unordered, process-specific hash; any
         * 40 digits are valid. ptc's are a deterministic function of the same inputs. */
        uint64_t h1 = 1469598103934665603ULL, h2 = 1469598103934665603ULL;
        for (size_t i = 0; i < ptc__zipw_count(w); i++) {
            uint32_t crc = ptc__zipw_crc(w, i);
            h2 = fnv(h2, &crc, sizeof crc);
        }
        h1 = fnv(h1, prefix, strlen(prefix));
        char id[48];
        snprintf(id, sizeof id, "%020llu%020llu",
                 (unsigned long long)(h1 % 10000000000000000000ULL),
                 (unsigned long long)(h2 % 10000000000000000000ULL));
        if ((rc = ptc__zipw_add(w, ".data/serialization_id", id, 40, err)) < 0)
            goto out;
    }
    rc = ptc__zipw_finish(w, err);
    w = NULL;
out:
    ptc__zipw_abort(w);
    ptc__pw_free(&s.pw);
    ptc__free(s.st);
    ptc__free(s.index);
    return rc;
}

/* A location torch 2.6's torch.load restores by itself on a machine with that device: "cpu",
 * "meta" and "mps" as they are, "cuda" and "xpu" with or without ":<index>". */
static bool device_tag(const char *t)
{
    if (!strcmp(t, "cpu") || !strcmp(t, "meta") || !strcmp(t, "mps"))
        return true;
    size_t n = strncmp(t, "cuda", 4) == 0 ? 4 : strncmp(t, "xpu", 3) == 0 ? 3 : 0;
    if (n == 0 || t[n] == '\0')
        return n != 0;
    size_t digits = strspn(t + n + 1, "0123456789");
    return t[n] == ':' && digits > 0 && digits <= 6 && t[n + 1 + digits] == '\0';
}

int ptc_save(const ptc_value *root, const char *path, const ptc_save_params *params, ptc_error *err)
{
    ptc__err_clear(err);
    if (!root || !path || !*path)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_save: missing value or path");
    ptc_save_params def;
    ptc_save_params_default(&def);
    int rc = ptc__params_read(&def, sizeof def, params, "ptc_save_params", err);
    if (rc < 0)
        return rc;
    params = &def;
    if (params->map_location && !device_tag(params->map_location))
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_save: map_location must be cpu, meta, mps, cuda[:N] or xpu[:N]");
    ptc_save_format f = params->format;
    if (f == PTC_SAVE_AUTO) {
        size_t n = strlen(path);
        f = n >= 12 && strcmp(path + n - 12, ".safetensors") == 0 ? PTC_SAVE_SAFETENSORS
                                                                  : PTC_SAVE_PTH;
    }
    if (f == PTC_SAVE_SAFETENSORS)
        return ptc__save_safetensors(root, path, params, err);
    return save_pth(root, path, params, err);
}
