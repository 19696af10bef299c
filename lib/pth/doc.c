/*
 * doc.c - documents: value trees built by a program (a state dict to save, a converted
 * checkpoint) rather than read from a file. A document owns an arena for its nodes and the memory
 * of the storages it allocates or copies; it may also point at values and storages of open
 * checkpoints, which it borrows.
 *
 * Nodes are the same ptc_value structures the reader builds, so every reader function (walks,
 * accessors, ptc_save) works on them unchanged.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

struct ptc_doc {
    ptc__arena *arena;
    ptc__budget budget;
    ptc_error err;
    void **owned; /* storage memory to free */
    size_t nowned, capowned;
    uint64_t nstorages;
};

#define DOC_FAIL(d, code, ...) (ptc__err(&(d)->err, code, "", -1, __VA_ARGS__), (void *)NULL)

int ptc_doc_new(ptc_doc **out, ptc_error *err)
{
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_doc_new: missing argument");
    ptc_doc *d = ptc__calloc(1, sizeof *d);
    if (!d)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    d->budget.limit = UINT64_MAX; /* a program's own tree: no file to distrust */
    if (ptc__arena_new(&d->arena, &d->budget) < 0) {
        ptc__free(d);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    }
    ptc__err_clear(&d->err);
    *out = d;
    return 0;
}

void ptc_doc_free(ptc_doc *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nowned; i++)
        ptc__free(d->owned[i]);
    ptc__free(d->owned);
    ptc__arena_free(d->arena);
    ptc__free(d);
}

const ptc_error *ptc_doc_error(const ptc_doc *d)
{
    return d ? &d->err : NULL;
}

static ptc_value *node(ptc_doc *d, ptc_value_kind k)
{
    if (!d)
        return NULL;
    ptc_value *v = ptc__value_new(d->arena, k);
    if (!v)
        return DOC_FAIL(d, PTC_ENOMEM, "out of memory");
    return v;
}

ptc_value *ptc_doc_none(ptc_doc *d)
{
    return node(d, PTC_VALUE_NONE);
}

ptc_value *ptc_doc_bool(ptc_doc *d, int b)
{
    ptc_value *v = node(d, PTC_VALUE_BOOL);
    if (v)
        v->u.b = b != 0;
    return v;
}

ptc_value *ptc_doc_int(ptc_doc *d, int64_t i)
{
    if (!d)
        return NULL;
    ptc_value *v = ptc__value_int(d->arena, i);
    return v ? v : DOC_FAIL(d, PTC_ENOMEM, "out of memory");
}

ptc_value *ptc_doc_int_bytes(ptc_doc *d, const uint8_t *bytes, size_t len)
{
    if (!d || (!bytes && len) || len > 0x7FFFFFFF)
        return d ? DOC_FAIL(d, PTC_EINVAL, "ptc_doc_int_bytes: invalid arguments") : NULL;
    /* Canonical form: drop redundant sign bytes; values that fit 64 bits become plain ints. */
    while (len > 1 && ((bytes[len - 1] == 0x00 && !(bytes[len - 2] & 0x80)) ||
                       (bytes[len - 1] == 0xFF && (bytes[len - 2] & 0x80))))
        len--;
    if (len == 1 && bytes[0] == 0)
        len = 0;
    if (len <= 8) {
        uint64_t u = 0;
        for (size_t k = 0; k < len; k++)
            u |= (uint64_t)bytes[k] << (8 * k);
        if (len && len < 8 && (bytes[len - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * len);
        return ptc_doc_int(d, (int64_t)u);
    }
    ptc_value *v = node(d, PTC_VALUE_INT);
    uint8_t *copy = v ? ptc__arena_alloc(d->arena, len) : NULL;
    if (!copy)
        return DOC_FAIL(d, PTC_ENOMEM, "out of memory");
    memcpy(copy, bytes, len);
    v->u.i.bytes = copy;
    v->u.i.nbytes = (uint32_t)len;
    v->u.i.fits = false;
    v->u.i.v = (bytes[len - 1] & 0x80) ? INT64_MIN : INT64_MAX;
    return v;
}

ptc_value *ptc_doc_float(ptc_doc *d, double f)
{
    ptc_value *v = node(d, PTC_VALUE_FLOAT);
    if (v)
        v->u.f = f;
    return v;
}

ptc_value *ptc_doc_complex(ptc_doc *d, double re, double im)
{
    ptc_value *v = node(d, PTC_VALUE_COMPLEX);
    if (v) {
        v->u.c.re = re;
        v->u.c.im = im;
    }
    return v;
}

ptc_value *ptc_doc_str(ptc_doc *d, const char *s, size_t len)
{
    if (!d || !s)
        return d ? DOC_FAIL(d, PTC_EINVAL, "ptc_doc_str: no string") : NULL;
    if (len == (size_t)-1)
        len = strlen(s);
    if (!ptc__utf8_valid((const uint8_t *)s, len))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_str: not valid UTF-8");
    ptc_value *v = ptc__value_str(d->arena, PTC_VALUE_STR, s, len);
    return v ? v : DOC_FAIL(d, PTC_ENOMEM, "out of memory");
}

ptc_value *ptc_doc_bytes(ptc_doc *d, const void *b, size_t len)
{
    if (!d || (!b && len))
        return d ? DOC_FAIL(d, PTC_EINVAL, "ptc_doc_bytes: no data") : NULL;
    ptc_value *v = ptc__value_str(d->arena, PTC_VALUE_BYTES, len ? b : "", len);
    return v ? v : DOC_FAIL(d, PTC_ENOMEM, "out of memory");
}

ptc_value *ptc_doc_dtype(ptc_doc *d, ptc_dtype dt)
{
    if (d && !ptc__dtype_info_of(dt))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_dtype: invalid dtype");
    ptc_value *v = node(d, PTC_VALUE_DTYPE);
    if (v)
        v->u.dt = dt;
    return v;
}

ptc_value *ptc_doc_device(ptc_doc *d, const char *type, int64_t index)
{
    if (d && (!type || !*type || index < -1))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_device: invalid device");
    ptc_value *v = node(d, PTC_VALUE_DEVICE);
    const char *t = v ? ptc__arena_strndup(d->arena, type, strlen(type)) : NULL;
    if (!t)
        return v ? DOC_FAIL(d, PTC_ENOMEM, "out of memory") : NULL;
    v->u.dev.type = t;
    v->u.dev.index = index;
    return v;
}

ptc_value *ptc_doc_seq(ptc_doc *d, ptc_value_kind kind)
{
    if (d && kind != PTC_VALUE_TUPLE && kind != PTC_VALUE_LIST && kind != PTC_VALUE_SET &&
        kind != PTC_VALUE_SIZE)
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_seq: not a sequence kind");
    return node(d, kind);
}

ptc_value *ptc_doc_dict(ptc_doc *d, int ordered)
{
    ptc_value *v = node(d, PTC_VALUE_DICT);
    if (v && ordered)
        v->flags |= PTC__V_ORDERED;
    return v;
}

int ptc_doc_push(ptc_doc *d, ptc_value *seq, const ptc_value *item)
{
    if (!d)
        return PTC_EINVAL;
    if (!seq || !item ||
        (seq->kind != PTC_VALUE_TUPLE && seq->kind != PTC_VALUE_LIST &&
         seq->kind != PTC_VALUE_SET && seq->kind != PTC_VALUE_SIZE))
        return ptc__err(&d->err, PTC_EINVAL, "", -1, "ptc_doc_push: not a sequence");
    if (seq->kind == PTC_VALUE_SIZE && (item->kind != PTC_VALUE_INT || !item->u.i.fits))
        return ptc__err(&d->err, PTC_EINVAL, "", -1, "ptc_doc_push: torch.Size holds ints");
    int rc = ptc__seq_push(d->arena, seq, (ptc_value *)item);
    if (rc == PTC_ELIMIT)
        return ptc__err(&d->err, PTC_ELIMIT, "", -1,
                        "ptc_doc_push: a sequence holds at most %zu items",
                        (size_t)PTC__VALUE_MAX_ITEMS);
    if (rc < 0)
        return ptc__err(&d->err, PTC_ENOMEM, "", -1, "out of memory");
    return 0;
}

int ptc_doc_set(ptc_doc *d, ptc_value *dict, const ptc_value *key, const ptc_value *val)
{
    if (!d)
        return PTC_EINVAL;
    if (!dict || dict->kind != PTC_VALUE_DICT || !key || !val)
        return ptc__err(&d->err, PTC_EINVAL, "", -1, "ptc_doc_set: not a dict");
    int rc = ptc__dict_set(d->arena, dict, (ptc_value *)key, (ptc_value *)val, &d->err, "", -1);
    return rc == PTC_EFORMAT ? (d->err.code = PTC_EINVAL) : rc;
}

int ptc_doc_set_attrs(ptc_doc *d, ptc_value *dict, const ptc_value *attrs)
{
    if (!d)
        return PTC_EINVAL;
    if (!dict || dict->kind != PTC_VALUE_DICT ||
        !(dict->flags & (PTC__V_ORDERED | PTC__V_COUNTER)) || !attrs ||
        attrs->kind != PTC_VALUE_DICT)
        return ptc__err(&d->err, PTC_EINVAL, "", -1,
                        "ptc_doc_set_attrs: attributes go on an OrderedDict and must be a dict");
    for (size_t i = 0; i < attrs->u.dict.n; i++)
        if (attrs->u.dict.keys[i]->kind != PTC_VALUE_STR)
            return ptc__err(&d->err, PTC_EINVAL, "", -1, "ptc_doc_set_attrs: names must be str");
    dict->u.dict.attrs = (ptc_value *)attrs;
    return 0;
}

static void *own(ptc_doc *d, size_t n)
{
    if (d->nowned == d->capowned) {
        size_t cap = d->capowned ? d->capowned * 2 : 16;
        void **o = ptc__realloc(d->owned, cap * sizeof *o);
        if (!o)
            return NULL;
        d->owned = o;
        d->capowned = cap;
    }
    void *p = ptc__calloc(1, n ? n : 1);
    if (p)
        d->owned[d->nowned++] = p;
    return p;
}

ptc_storage *ptc_doc_storage(ptc_doc *d, ptc_dtype dt, int64_t nbytes, const void *data, int copy,
                             const char *location)
{
    if (!d)
        return NULL;
    const ptc__dtype_info *info = ptc__dtype_info_of(dt);
    if (!info || nbytes < 0 || nbytes % info->size || (uint64_t)nbytes > SIZE_MAX ||
        (!data && !copy && nbytes))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_storage: invalid dtype, size or data");
    /* Every storage is saved as one zip record; this also caps owned[] (one entry a storage). */
    if (d->nstorages >= PTC__ZIPW_MAX_RECORDS)
        return DOC_FAIL(d, PTC_ELIMIT, "ptc_doc_storage: a document holds at most %zu storages",
                        (size_t)PTC__ZIPW_MAX_RECORDS);
    ptc_storage *s = ptc__arena_alloc(d->arena, sizeof *s);
    char key[24];
    snprintf(key, sizeof key, "%llu", (unsigned long long)d->nstorages);
    if (!s || !(s->key = ptc__arena_strndup(d->arena, key, strlen(key))) ||
        !(s->location = ptc__arena_strndup(d->arena, location ? location : "cpu",
                                           strlen(location ? location : "cpu"))))
        return DOC_FAIL(d, PTC_ENOMEM, "out of memory");
    s->dtype = dt;
    s->untyped = info->storage_name == NULL;
    s->nbytes = nbytes;
    if (data && !copy) {
        s->data = data;
    } else {
        void *m = own(d, (size_t)nbytes);
        if (!m)
            return DOC_FAIL(d, PTC_ENOMEM, "out of memory for a storage of %lld bytes",
                            (long long)nbytes);
        if (data && nbytes)
            memcpy(m, data, (size_t)nbytes);
        s->data = m;
        s->owned = m;
        s->writable = true;
    }
    d->nstorages++;
    return s;
}

void *ptc_storage_mutable(ptc_storage *s)
{
    return s && s->writable ? (void *)s->data : NULL;
}

ptc_value *ptc_doc_tensor(ptc_doc *d, const ptc_storage *s, ptc_dtype dt, int ndim,
                          const int64_t *shape, const int64_t *stride, int64_t offset,
                          int requires_grad)
{
    if (!d)
        return NULL;
    if (!s || ndim < 0 || ndim > 64 || (ndim && !shape))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_tensor: invalid arguments");
    if (!s->untyped && s->dtype != dt)
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_tensor: a %s tensor cannot view a %s storage",
                        ptc_dtype_name(dt), ptc_dtype_name(s->dtype));
    ptc_tensor *t = ptc__arena_alloc(d->arena, sizeof *t);
    int64_t *sh = ptc__arena_alloc(d->arena, (size_t)(ndim ? ndim : 1) * sizeof *sh);
    int64_t *st = ptc__arena_alloc(d->arena, (size_t)(ndim ? ndim : 1) * sizeof *st);
    ptc_value *v = node(d, PTC_VALUE_TENSOR);
    if (!t || !sh || !st || !v)
        return DOC_FAIL(d, PTC_ENOMEM, "out of memory");
    int64_t expect = 1, numel = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        sh[k] = shape[k];
        st[k] = stride ? stride[k] : expect;
        if (!ptc__mul_i64_ok(expect, shape[k] > 0 ? shape[k] : 1, &expect))
            return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_tensor: shape overflows");
    }
    t->dtype = dt;
    t->ndim = ndim;
    t->shape = sh;
    t->stride = st;
    t->offset = offset;
    t->storage = s;
    t->requires_grad = requires_grad != 0;
    if (ptc__tensor_check(t, 64, "", -1, &d->err) < 0) {
        d->err.code = PTC_EINVAL;
        return NULL;
    }
    for (int k = 0; k < ndim; k++)
        numel *= sh[k];
    t->numel = numel;
    v->u.t = t;
    return v;
}

ptc_value *ptc_doc_parameter(ptc_doc *d, const ptc_value *tensor, int requires_grad)
{
    if (!d)
        return NULL;
    if (!tensor || tensor->kind != PTC_VALUE_TENSOR)
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_parameter: not a tensor");
    ptc_tensor *t = ptc__arena_alloc(d->arena, sizeof *t);
    ptc_value *v = node(d, PTC_VALUE_TENSOR);
    if (!t || !v)
        return t ? NULL : DOC_FAIL(d, PTC_ENOMEM, "out of memory");
    *t = *tensor->u.t;
    t->parameter = true;
    t->requires_grad = requires_grad != 0;
    v->u.t = t;
    return v;
}

ptc_value *ptc_doc_cast(ptc_doc *d, const ptc_tensor *t, ptc_dtype dt)
{
    if (!d)
        return NULL;
    if (!t || !ptc__dtype_info_of(dt))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_cast: invalid arguments");
    int64_t nbytes;
    if (!ptc__mul_i64_ok(t->numel, (int64_t)ptc_dtype_size(dt), &nbytes))
        return DOC_FAIL(d, PTC_EINVAL, "ptc_doc_cast: size overflows");
    ptc_storage *s = ptc_doc_storage(d, dt, nbytes, NULL, 1, t->storage->location);
    if (!s)
        return NULL;
    if (ptc__convert(t, dt, (void *)s->data, (size_t)nbytes, &d->err) < 0)
        return NULL;
    ptc_value *v = ptc_doc_tensor(d, s, dt, t->ndim, t->shape, NULL, 0, t->requires_grad);
    if (v)
        v->u.t->parameter = t->parameter; /* a cast Parameter is still a Parameter */
    return v;
}
