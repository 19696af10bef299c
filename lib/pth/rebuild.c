/*
 * rebuild.c - the unpickling hooks that give a checkpoint's pickle torch's meaning: allowed
 * globals become values, REDUCE of an allowed callable rebuilds a tensor, a Parameter, a set, bytes,
 * a torch.Size or a device, and BINPERSID binds a storage to its record.
 *
 * Every call is checked for the exact argument shape torch.save produces (threat model P5);
 * anything else is PTC_EFORMAT, and allowed callables ptc does not implement (sparse, quantized,
 * nested, meta and wrapper tensors) are PTC_EUNSUPPORTED.
 */
#include "pth/pth.h"

#include <string.h>

#define HOOK_ERR(code, ...) ptc__err(err, code, ptc__vm_member(vm), ptc__vm_offset(vm), __VA_ARGS__)

static const char *kind_name(const ptc_value *v)
{
    return v->kind == PTC__VALUE_OPAQUE ? "storage" : ptc_value_kind_name((ptc_value_kind)v->kind);
}

static ptc_value *new_kind(ptc__vm *vm, ptc_value_kind k) { return ptc__value_new(ptc__vm_arena(vm), k); }

static int hook_global(void *ud, ptc__vm *vm, const char *module, const char *name, ptc_value **out,
                       ptc_error *err)
{
    ptc_ckpt *c = ud;
    ptc__gid id;
    ptc_dtype dt = PTC_FLOAT32;
    int rc = ptc__policy_lookup(c->policy, module, name, &id, &dt, ptc__vm_member(vm),
                                ptc__vm_offset(vm), err);
    if (rc < 0)
        return rc;
    ptc__arena *a = ptc__vm_arena(vm);
    if (id == G_DTYPE) {
        ptc_value *v = new_kind(vm, PTC_VALUE_DTYPE);
        if (!v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        v->u.dt = dt;
        *out = v;
        return 0;
    }
    ptc_value *v = new_kind(vm, PTC_VALUE_GLOBAL);
    size_t ml = strlen(module), nl = strlen(name);
    char *full = v ? ptc__arena_alloc(a, ml + nl + 2) : NULL;
    if (!full)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    memcpy(full, module, ml);
    full[ml] = '.';
    memcpy(full + ml + 1, name, nl + 1);
    v->u.g.full = full;
    v->u.g.module = ptc__arena_strndup(a, module, ml);
    v->u.g.name = full + ml + 1;
    v->u.g.id = (int)id;
    if (!v->u.g.module)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    /* Storage classes remember their dtype in the flags-free union slot via the name; the
     * persistent-id hook maps it again. */
    *out = v;
    return 0;
}

/* ---- argument helpers ------------------------------------------------------------------------ */

static bool get_int(const ptc_value *v, int64_t *out)
{
    if (v->kind == PTC_VALUE_INT && v->u.i.fits) {
        *out = v->u.i.v;
        return true;
    }
    return false;
}

static bool get_bool(const ptc_value *v, bool *out)
{
    if (v->kind == PTC_VALUE_BOOL) {
        *out = v->u.b;
        return true;
    }
    return false;
}

static bool is_str(const ptc_value *v, const char *s)
{
    return v->kind == PTC_VALUE_STR && v->u.s.n == strlen(s) && memcmp(v->u.s.p, s, v->u.s.n) == 0;
}

static bool empty_hooks(const ptc_value *v)
{
    return v->kind == PTC_VALUE_DICT && v->u.dict.n == 0 && !v->u.dict.attrs;
}

/* Reads a tuple of ints into an arena array. */
static int int_tuple(ptc__vm *vm, const ptc_value *t, const char *what, int64_t **out, int *n,
                     ptc_error *err)
{
    if (t->kind != PTC_VALUE_TUPLE && t->kind != PTC_VALUE_SIZE)
        return HOOK_ERR(PTC_EFORMAT, "tensor %s must be a tuple of ints, not %s", what, kind_name(t));
    const ptc_limits *lim = ptc__vm_limits(vm);
    if (t->u.seq.n > lim->max_ndim)
        return HOOK_ERR(PTC_EFORMAT, "tensor %s has %zu dimensions (limit %u)", what, t->u.seq.n,
                        lim->max_ndim);
    int64_t *a = ptc__arena_alloc(ptc__vm_arena(vm), (t->u.seq.n ? t->u.seq.n : 1) * sizeof *a);
    if (!a)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    for (size_t i = 0; i < t->u.seq.n; i++)
        if (!get_int(t->u.seq.items[i], &a[i]))
            return HOOK_ERR(PTC_EFORMAT, "tensor %s item %zu is not an int", what, i);
    *out = a;
    *n = (int)t->u.seq.n;
    return 0;
}

/* The tensor's metadata dict of _rebuild_tensor_v2/v3: {'conj': True} and/or {'neg': True}. */
static int apply_metadata(ptc__vm *vm, ptc_tensor *t, const ptc_value *md, ptc_error *err)
{
    if (md->kind == PTC_VALUE_NONE)
        return 0;
    if (md->kind != PTC_VALUE_DICT)
        return HOOK_ERR(PTC_EFORMAT, "tensor metadata must be a dict, not %s", kind_name(md));
    for (size_t i = 0; i < md->u.dict.n; i++) {
        const ptc_value *k = md->u.dict.keys[i];
        bool b;
        if (!get_bool(md->u.dict.vals[i], &b))
            return HOOK_ERR(PTC_EFORMAT, "tensor metadata values must be bool");
        if (is_str(k, "conj"))
            t->conj = b;
        else if (is_str(k, "neg"))
            t->neg = b;
        else
            return HOOK_ERR(PTC_EUNSUPPORTED, "tensor metadata key other than conj/neg");
    }
    if (t->conj && !ptc__dtype_info_of(t->dtype)->is_complex)
        return HOOK_ERR(PTC_EFORMAT, "conj bit on a %s tensor", ptc_dtype_name(t->dtype));
    return 0;
}

/* _rebuild_tensor_v2 (v3 = false): (storage, offset, size, stride, requires_grad, hooks[, meta])
 * _rebuild_tensor_v3 (v3 = true):  (..., hooks, dtype[, meta])
 * _rebuild_tensor (old = true):     (storage, offset, size, stride) */
static int rebuild_tensor(ptc__vm *vm, ptc_ckpt *c, const ptc_value *args, bool v3, bool old,
                          ptc_value **out, ptc_error *err)
{
    size_t n = args->u.seq.n, base = old ? 4 : v3 ? 7 : 6;
    if (n != base && !(n == base + 1 && !old))
        return HOOK_ERR(PTC_EFORMAT, "%s takes %zu or %zu arguments, got %zu",
                        old ? "_rebuild_tensor" : v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2",
                        base, base + 1, n);
    ptc_value **a = args->u.seq.items;
    if (a[0]->kind != PTC__VALUE_OPAQUE)
        return HOOK_ERR(PTC_EFORMAT, "tensor storage argument is a %s, not a storage",
                        kind_name(a[0]));
    ptc_storage *s = a[0]->u.opaque;
    ptc_tensor *t = ptc__arena_alloc(ptc__vm_arena(vm), sizeof *t);
    if (!t)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    t->storage = s;
    t->dtype = s->dtype;
    if (!get_int(a[1], &t->offset))
        return HOOK_ERR(PTC_EFORMAT, "tensor storage offset is not an int");
    int nd1, nd2;
    int rc = int_tuple(vm, a[2], "size", &t->shape, &nd1, err);
    if (rc < 0 || (rc = int_tuple(vm, a[3], "stride", &t->stride, &nd2, err)) < 0)
        return rc;
    if (nd1 != nd2)
        return HOOK_ERR(PTC_EFORMAT, "tensor size has %d dimensions but stride has %d", nd1, nd2);
    t->ndim = nd1;
    if (!old) {
        if (!get_bool(a[4], &t->requires_grad))
            return HOOK_ERR(PTC_EFORMAT, "requires_grad is not a bool");
        if (!empty_hooks(a[5]))
            return HOOK_ERR(PTC_EFORMAT, "backward hooks must be an empty OrderedDict");
    }
    if (v3) {
        if (a[6]->kind != PTC_VALUE_DTYPE)
            return HOOK_ERR(PTC_EFORMAT, "_rebuild_tensor_v3 dtype argument is a %s",
                            kind_name(a[6]));
        if (!s->untyped && s->dtype != a[6]->u.dt)
            return HOOK_ERR(PTC_EFORMAT, "tensor dtype %s differs from its %s storage",
                            ptc_dtype_name(a[6]->u.dt), ptc_dtype_name(s->dtype));
        t->dtype = a[6]->u.dt;
    } else if (s->untyped) {
        return HOOK_ERR(PTC_EFORMAT, "an untyped storage needs _rebuild_tensor_v3 and a dtype");
    }
    if (!old && n == base + 1 && (rc = apply_metadata(vm, t, a[base], err)) < 0)
        return rc;
    if ((rc = ptc__tensor_check(t, c->limits.max_ndim, ptc__vm_member(vm), ptc__vm_offset(vm),
                                err)) < 0)
        return rc;
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
        numel *= t->shape[d];
    t->numel = numel;
    s->referenced = true;
    ptc_value *v = new_kind(vm, PTC_VALUE_TENSOR);
    if (!v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    v->u.t = t;
    *out = v;
    return 0;
}

/* A Parameter wrapping a tensor: a new handle sharing the view, marked as a parameter. */
static int make_parameter(ptc__vm *vm, const ptc_value *data, bool requires_grad, ptc_value **out,
                          ptc_error *err)
{
    if (data->kind != PTC_VALUE_TENSOR)
        return HOOK_ERR(PTC_EFORMAT, "Parameter data is a %s, not a tensor", kind_name(data));
    ptc_tensor *t = ptc__arena_alloc(ptc__vm_arena(vm), sizeof *t);
    ptc_value *v = new_kind(vm, PTC_VALUE_TENSOR);
    if (!t || !v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    *t = *data->u.t;
    t->parameter = true;
    t->requires_grad = requires_grad;
    v->u.t = t;
    *out = v;
    return 0;
}

static int check_state(ptc__vm *vm, const ptc_value *state, ptc_error *err)
{
    if (state->kind == PTC_VALUE_NONE)
        return 0;
    if (state->kind != PTC_VALUE_DICT)
        return HOOK_ERR(PTC_EFORMAT, "object state must be a dict, not %s", kind_name(state));
    for (size_t i = 0; i < state->u.dict.n; i++) {
        const ptc_value *k = state->u.dict.keys[i];
        if (k->kind != PTC_VALUE_STR)
            return HOOK_ERR(PTC_EFORMAT, "attribute names must be str");
        if (k->u.s.n >= 2 && k->u.s.p[0] == '_' && k->u.s.p[1] == '_') {
            char esc[64];
            return HOOK_ERR(PTC_EFORMAT, "attribute \"%s\" would set a Python internal",
                            ptc__escape(esc, sizeof esc, k->u.s.p, k->u.s.n, true));
        }
    }
    return 0;
}

/* _codecs.encode(str, 'latin1'): code points 0..255 to bytes. */
static int codecs_encode(ptc__vm *vm, const ptc_value *args, ptc_value **out, ptc_error *err)
{
    if (args->u.seq.n != 2 || args->u.seq.items[0]->kind != PTC_VALUE_STR ||
        !(is_str(args->u.seq.items[1], "latin1") || is_str(args->u.seq.items[1], "latin-1")))
        return HOOK_ERR(PTC_EFORMAT, "_codecs.encode is allowed only as (str, 'latin1')");
    const ptc_value *s = args->u.seq.items[0];
    uint8_t *b = ptc__arena_alloc(ptc__vm_arena(vm), s->u.s.n + 1);
    ptc_value *v = new_kind(vm, PTC_VALUE_BYTES);
    if (!b || !v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    size_t o = 0;
    const uint8_t *p = (const uint8_t *)s->u.s.p;
    for (size_t i = 0; i < s->u.s.n;) {
        if (p[i] < 0x80) {
            b[o++] = p[i++];
        } else if ((p[i] & 0xE0) == 0xC0 && p[i] <= 0xC3) {
            b[o++] = (uint8_t)(((p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F));
            i += 2;
        } else {
            return HOOK_ERR(PTC_EFORMAT, "_codecs.encode: character beyond latin-1");
        }
    }
    v->u.s.p = (const char *)b;
    v->u.s.n = o;
    *out = v;
    return 0;
}

static int make_seq(ptc__vm *vm, ptc_value_kind kind, const ptc_value *items, ptc_value **out,
                    ptc_error *err)
{
    ptc__arena *a = ptc__vm_arena(vm);
    ptc_value *v = new_kind(vm, kind);
    if (!v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    if (kind == PTC_VALUE_SET) {
        /* Python's set drops equal items; a scratch dict finds them in linear time. */
        ptc_value *seen = new_kind(vm, PTC_VALUE_DICT);
        if (!seen)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        for (size_t i = 0; i < items->u.seq.n; i++) {
            size_t before = seen->u.dict.n;
            int rc = ptc__dict_set(a, seen, items->u.seq.items[i], items->u.seq.items[i], err,
                                   ptc__vm_member(vm), ptc__vm_offset(vm));
            if (rc < 0)
                return rc;
            if (seen->u.dict.n > before && ptc__seq_push(a, v, items->u.seq.items[i]) < 0)
                return HOOK_ERR(PTC_ENOMEM, "out of memory");
        }
    } else {
        for (size_t i = 0; i < items->u.seq.n; i++) {
            int64_t x;
            if (kind == PTC_VALUE_SIZE && !get_int(items->u.seq.items[i], &x))
                return HOOK_ERR(PTC_EFORMAT, "torch.Size items must be ints");
            if (ptc__seq_push(a, v, items->u.seq.items[i]) < 0)
                return HOOK_ERR(PTC_ENOMEM, "out of memory");
        }
    }
    *out = v;
    return 0;
}

static int make_device(ptc__vm *vm, const ptc_value *args, ptc_value **out, ptc_error *err)
{
    size_t n = args->u.seq.n;
    if (n < 1 || n > 2 || args->u.seq.items[0]->kind != PTC_VALUE_STR)
        return HOOK_ERR(PTC_EFORMAT, "torch.device takes (str[, int])");
    const ptc_value *s = args->u.seq.items[0];
    int64_t index = -1;
    size_t tl = s->u.s.n;
    const char *colon = memchr(s->u.s.p, ':', s->u.s.n);
    if (colon) {
        tl = (size_t)(colon - s->u.s.p);
        index = 0;
        for (const char *q = colon + 1; q < s->u.s.p + s->u.s.n; q++) {
            if (*q < '0' || *q > '9' || index > 100000)
                return HOOK_ERR(PTC_EFORMAT, "torch.device string has a bad index");
            index = index * 10 + (*q - '0');
        }
        if (colon + 1 == s->u.s.p + s->u.s.n)
            return HOOK_ERR(PTC_EFORMAT, "torch.device string has an empty index");
    }
    if (n == 2) {
        if (colon || !get_int(args->u.seq.items[1], &index) || index < 0)
            return HOOK_ERR(PTC_EFORMAT, "torch.device index must be a non-negative int");
    }
    if (tl == 0 || tl > 32)
        return HOOK_ERR(PTC_EFORMAT, "torch.device type must be 1 to 32 characters");
    for (size_t i = 0; i < tl; i++) {
        char ch = s->u.s.p[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'))
            return HOOK_ERR(PTC_EFORMAT, "torch.device type has a bad character");
    }
    ptc_value *v = new_kind(vm, PTC_VALUE_DEVICE);
    const char *type = ptc__arena_strndup(ptc__vm_arena(vm), s->u.s.p, tl);
    if (!v || !type)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    v->u.dev.type = type;
    v->u.dev.index = index;
    *out = v;
    return 0;
}

static int make_bytearray(ptc__vm *vm, ptc_ckpt *c, const ptc_value *args, ptc_value **out,
                          ptc_error *err)
{
    ptc_value *v = new_kind(vm, PTC_VALUE_BYTES);
    if (!v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    v->flags |= PTC__V_BYTEARRAY;
    v->u.s.p = "";
    if (args->u.seq.n == 0) {
        *out = v;
        return 0;
    }
    const ptc_value *x = args->u.seq.items[0];
    int64_t count;
    if (args->u.seq.n == 1 && x->kind == PTC_VALUE_BYTES) {
        v->u.s = x->u.s;
    } else if (args->u.seq.n == 1 && get_int(x, &count)) {
        if (count < 0)
            return HOOK_ERR(PTC_EFORMAT, "bytearray of negative size");
        if (ptc__budget_take(&c->budget, (uint64_t)count, err, ptc__vm_member(vm),
                             ptc__vm_offset(vm)) < 0)
            return PTC_ELIMIT;
        ptc__budget_give(&c->budget, (uint64_t)count); /* the arena charges it again */
        char *z = ptc__arena_alloc(ptc__vm_arena(vm), (size_t)count + 1);
        if (!z)
            return HOOK_ERR(PTC_ELIMIT, "bytearray of %lld bytes exceeds the heap limit",
                            (long long)count);
        v->u.s.p = z;
        v->u.s.n = (size_t)count;
    } else if (args->u.seq.n == 1 && x->kind == PTC_VALUE_LIST) {
        char *z = ptc__arena_alloc(ptc__vm_arena(vm), x->u.seq.n + 1);
        if (!z)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        for (size_t i = 0; i < x->u.seq.n; i++) {
            int64_t b;
            if (!get_int(x->u.seq.items[i], &b) || b < 0 || b > 255)
                return HOOK_ERR(PTC_EFORMAT, "bytearray items must be ints in 0..255");
            z[i] = (char)b;
        }
        v->u.s.p = z;
        v->u.s.n = x->u.seq.n;
    } else {
        return HOOK_ERR(PTC_EFORMAT, "bytearray takes (), (bytes), (int) or (list of ints)");
    }
    *out = v;
    return 0;
}

static int call(ptc__vm *vm, ptc_ckpt *c, const ptc_value *fn, const ptc_value *args,
                ptc_value **out, ptc_error *err);

static int hook_reduce(void *ud, ptc__vm *vm, ptc_value *fn, ptc_value *args, ptc_value **out,
                       ptc_error *err)
{
    return call(vm, ud, fn, args, out, err);
}

static int call(ptc__vm *vm, ptc_ckpt *c, const ptc_value *fn, const ptc_value *args,
                ptc_value **out, ptc_error *err)
{
    size_t n = args->u.seq.n;
    ptc_value **a = args->u.seq.items;
    bool b;
    switch ((ptc__gid)fn->u.g.id) {
    case G_REBUILD_TENSOR_V2: return rebuild_tensor(vm, c, args, false, false, out, err);
    case G_REBUILD_TENSOR_V3: return rebuild_tensor(vm, c, args, true, false, out, err);
    case G_REBUILD_TENSOR: return rebuild_tensor(vm, c, args, false, true, out, err);
    case G_REBUILD_PARAMETER:
    case G_REBUILD_PARAMETER_WITH_STATE: {
        bool with_state = fn->u.g.id == G_REBUILD_PARAMETER_WITH_STATE;
        if (n != (with_state ? 4u : 3u) || !get_bool(a[1], &b) || !empty_hooks(a[2]))
            return HOOK_ERR(PTC_EFORMAT, "%s takes (tensor, bool, OrderedDict()%s)",
                            fn->u.g.name, with_state ? ", dict" : "");
        if (with_state) {
            int rc = check_state(vm, a[3], err);
            if (rc < 0)
                return rc;
        }
        return make_parameter(vm, a[0], b, out, err);
    }
    case G_REBUILD_FROM_TYPE_V2: {
        /* (func, new_type, args, state): a tensor with Python attributes or of a subclass; only
         * plain Tensor and Parameter types are accepted. */
        if (n != 4 || a[0]->kind != PTC_VALUE_GLOBAL || a[1]->kind != PTC_VALUE_GLOBAL ||
            a[2]->kind != PTC_VALUE_TUPLE)
            return HOOK_ERR(PTC_EFORMAT, "_rebuild_from_type_v2 takes (func, type, tuple, state)");
        int id = a[1]->u.g.id;
        if (id != G_TENSOR && id != G_PARAMETER)
            return HOOK_ERR(PTC_EUNSUPPORTED, "tensor subclass %s is not supported",
                            a[1]->u.g.full);
        int fid = a[0]->u.g.id;
        if (fid != G_REBUILD_TENSOR_V2 && fid != G_REBUILD_TENSOR_V3 && fid != G_REBUILD_TENSOR)
            return HOOK_ERR(PTC_EFORMAT, "_rebuild_from_type_v2 of %s", a[0]->u.g.full);
        int rc = check_state(vm, a[3], err);
        if (rc < 0 || (rc = call(vm, c, a[0], a[2], out, err)) < 0)
            return rc;
        if (id == G_PARAMETER)
            return make_parameter(vm, *out, (*out)->u.t->requires_grad, out, err);
        return 0;
    }
    case G_ORDERED_DICT:
    case G_COUNTER: {
        ptc_value *d = new_kind(vm, PTC_VALUE_DICT);
        if (!d)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        d->flags |= fn->u.g.id == G_ORDERED_DICT ? PTC__V_ORDERED : PTC__V_COUNTER;
        if (n == 1 && a[0]->kind == PTC_VALUE_DICT) {
            for (size_t i = 0; i < a[0]->u.dict.n; i++) {
                int rc = ptc__dict_set(ptc__vm_arena(vm), d, a[0]->u.dict.keys[i],
                                       a[0]->u.dict.vals[i], err, ptc__vm_member(vm),
                                       ptc__vm_offset(vm));
                if (rc < 0)
                    return rc;
            }
        } else if (n != 0) {
            return HOOK_ERR(PTC_EFORMAT, "%s takes () or (dict)", fn->u.g.full);
        }
        *out = d;
        return 0;
    }
    case G_SET:
        if (n == 0) {
            *out = new_kind(vm, PTC_VALUE_SET);
            return *out ? 0 : HOOK_ERR(PTC_ENOMEM, "out of memory");
        }
        if (n != 1 || (a[0]->kind != PTC_VALUE_LIST && a[0]->kind != PTC_VALUE_TUPLE))
            return HOOK_ERR(PTC_EFORMAT, "builtins.set takes () or (list)");
        return make_seq(vm, PTC_VALUE_SET, a[0], out, err);
    case G_SIZE:
        if (n == 0) {
            *out = new_kind(vm, PTC_VALUE_SIZE);
            return *out ? 0 : HOOK_ERR(PTC_ENOMEM, "out of memory");
        }
        if (n != 1 || a[0]->kind != PTC_VALUE_TUPLE)
            return HOOK_ERR(PTC_EFORMAT, "torch.Size takes (tuple of ints)");
        return make_seq(vm, PTC_VALUE_SIZE, a[0], out, err);
    case G_COMPLEX: {
        double parts[2] = {0, 0};
        if (n > 2)
            return HOOK_ERR(PTC_EFORMAT, "builtins.complex takes (real, imag)");
        for (size_t i = 0; i < n; i++) {
            int64_t x;
            if (a[i]->kind == PTC_VALUE_FLOAT)
                parts[i] = a[i]->u.f;
            else if (get_int(a[i], &x))
                parts[i] = (double)x;
            else
                return HOOK_ERR(PTC_EFORMAT, "builtins.complex parts must be numbers");
        }
        ptc_value *v = new_kind(vm, PTC_VALUE_COMPLEX);
        if (!v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        v->u.c.re = parts[0];
        v->u.c.im = parts[1];
        *out = v;
        return 0;
    }
    case G_CODECS_ENCODE: return codecs_encode(vm, args, out, err);
    case G_BYTEARRAY: return make_bytearray(vm, c, args, out, err);
    case G_DEVICE: return make_device(vm, args, out, err);
    case G_USER: {
        ptc_value *v = new_kind(vm, PTC_VALUE_OBJECT);
        if (!v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        v->u.obj.cls = fn;
        v->u.obj.args = (ptc_value *)args;
        *out = v;
        return 0;
    }
    case G_REBUILD_SPARSE: case G_GET_LAYOUT:
        return HOOK_ERR(PTC_EUNSUPPORTED, "sparse tensors (%s) are not supported", fn->u.g.full);
    case G_REBUILD_QTENSOR: case G_QSCHEME:
        return HOOK_ERR(PTC_EUNSUPPORTED, "quantized tensors (%s) are not supported", fn->u.g.full);
    case G_REBUILD_META: case G_REBUILD_NESTED: case G_REBUILD_WRAPPER:
    case G_REBUILD_DEVICE_NUMPY: case G_REBUILD_DEVICE_CPU:
        return HOOK_ERR(PTC_EUNSUPPORTED, "%s is not supported", fn->u.g.full);
    case G_TENSOR: case G_LEGACY_TENSOR_CLASS:
        return HOOK_ERR(PTC_EUNSUPPORTED,
                        "legacy tensor pickles (calling %s) are not supported", fn->u.g.full);
    default:
        return HOOK_ERR(PTC_EUNSUPPORTED, "calling %s is not supported", fn->u.g.full);
    }
}

static int hook_newobj(void *ud, ptc__vm *vm, ptc_value *cls, ptc_value *args, ptc_value **out,
                       ptc_error *err)
{
    (void)ud;
    size_t n = args->u.seq.n;
    bool b = true;
    if (cls->u.g.id == G_PARAMETER) {
        if (n < 1 || n > 2 || (n == 2 && !get_bool(args->u.seq.items[1], &b)))
            return HOOK_ERR(PTC_EFORMAT, "Parameter takes (tensor[, bool])");
        return make_parameter(vm, args->u.seq.items[0], b, out, err);
    }
    if (cls->u.g.id == G_TENSOR || cls->u.g.id == G_LEGACY_TENSOR_CLASS)
        return HOOK_ERR(PTC_EUNSUPPORTED,
                        "legacy tensor pickles (NEWOBJ of %s) are not supported", cls->u.g.full);
    if (cls->u.g.id == G_USER) {
        ptc_value *v = new_kind(vm, PTC_VALUE_OBJECT);
        if (!v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        v->u.obj.cls = cls;
        v->u.obj.args = args;
        *out = v;
        return 0;
    }
    return HOOK_ERR(PTC_EFORMAT, "NEWOBJ of %s is not supported", cls->u.g.full);
}

static int hook_build(void *ud, ptc__vm *vm, ptc_value *target, ptc_value *state, ptc_error *err)
{
    (void)ud;
    if (target->kind == PTC_VALUE_OBJECT) {
        if (target->u.obj.state)
            return HOOK_ERR(PTC_EFORMAT, "BUILD applied twice to one object");
        target->u.obj.state = state;
        return 0;
    }
    return HOOK_ERR(PTC_EFORMAT, "BUILD on a %s", kind_name(target));
}

/* ---- storages ----------------------------------------------------------------------------------
 * Persistent id: ('storage', <storage class>, key, location, numel) in zip files, plus a sixth
 * view_metadata item (None or (view_key, offset, size)) in legacy streams. */

/* Zip keys are decimal sequence numbers (they name records data/<key>). Legacy keys are C pointer
 * values in decimal as torch writes them, but any short identifier names a storage just as well
 * there, since the key only pairs a declaration with the data that follows the key list. */
static bool key_ok(const ptc_value *k, bool legacy)
{
    if (k->kind != PTC_VALUE_STR || k->u.s.n == 0 || k->u.s.n > 40)
        return false;
    for (size_t i = 0; i < k->u.s.n; i++) {
        char ch = k->u.s.p[i];
        bool digit = ch >= '0' && ch <= '9';
        bool ident = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        if (!digit && !(legacy && ident))
            return false;
    }
    return true;
}

static ptc_storage *new_storage(ptc_ckpt *c, const ptc_value *key, const ptc_value *loc,
                                ptc_dtype dt, bool untyped, int64_t nbytes)
{
    ptc_storage *s = ptc__arena_alloc(c->arena, sizeof *s);
    if (!s)
        return NULL;
    s->key = ptc__arena_strndup(c->arena, key->u.s.p, key->u.s.n);
    s->location = ptc__arena_strndup(c->arena, loc->u.s.p, loc->u.s.n);
    s->dtype = dt;
    s->untyped = untyped;
    s->nbytes = nbytes;
    return s->key && s->location ? s : NULL;
}

/* Legacy view_metadata (view_key, offset, size), in elements of the root storage: a sub-storage
 * that shares the root's bytes, declared once per view key. */
static int legacy_view(ptc__vm *vm, ptc_ckpt *c, ptc_storage *root, const ptc_value *view,
                       const ptc_value *loc, ptc_storage **out, ptc_error *err)
{
    int64_t off, size, es = (int64_t)ptc_dtype_size(root->dtype), obytes, sbytes, end;
    if (view->kind != PTC_VALUE_TUPLE || view->u.seq.n != 3 || !key_ok(view->u.seq.items[0], true) ||
        !get_int(view->u.seq.items[1], &off) || !get_int(view->u.seq.items[2], &size) || off < 0 ||
        size < 0)
        return HOOK_ERR(PTC_EFORMAT, "legacy view metadata must be (key, offset, size)");
    if (!ptc__mul_i64_ok(off, es, &obytes) || !ptc__mul_i64_ok(size, es, &sbytes) ||
        !ptc__add_i64_ok(obytes, sbytes, &end) || end > root->nbytes)
        return HOOK_ERR(PTC_EFORMAT, "legacy view [%lld, +%lld) lies outside storage \"%s\"",
                        (long long)off, (long long)size, root->key);
    const ptc_value *vkey = view->u.seq.items[0];
    ptc_storage *s = ptc__ckpt_find_storage(c, vkey->u.s.p);
    if (s) {
        if (s->parent != root || s->parent_offset != obytes || s->nbytes != sbytes)
            return HOOK_ERR(PTC_EFORMAT, "legacy view \"%s\" is declared twice differently",
                            s->key);
        *out = s;
        return 0;
    }
    s = new_storage(c, vkey, loc, root->dtype, root->untyped, sbytes);
    if (!s)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    s->parent = root;
    s->parent_offset = obytes;
    *out = s;
    return ptc__ckpt_add_storage(c, s, err);
}

/* Location tags torch writes and can restore: a device type, and ":<index>" for indexed ones
 * ("cpu", "cuda:0", "mps", "meta", "xpu:1", a PrivateUse1 backend such as "npu:0"). The tag is
 * informational to ptc (tensors are read to the host), but one torch cannot restore is refused. */
static bool location_ok(const ptc_value *l)
{
    static const char *const types[] = {"cpu", "cuda", "mps", "meta", "hpu", "xpu", "xla",
                                        "mtia", "maia", "npu", "privateuseone", "ipu", "lazy",
                                        "vulkan", "ve", "hip", "mkldnn", "opengl", "opencl",
                                        "ideep", "fpga"};
    if (l->kind != PTC_VALUE_STR || l->u.s.n == 0 || l->u.s.n > 64)
        return false;
    const char *colon = memchr(l->u.s.p, ':', l->u.s.n);
    size_t tl = colon ? (size_t)(colon - l->u.s.p) : l->u.s.n;
    if (colon) {
        size_t digits = l->u.s.n - tl - 1;
        if (digits == 0 || digits > 6)
            return false;
        for (size_t i = tl + 1; i < l->u.s.n; i++)
            if (l->u.s.p[i] < '0' || l->u.s.p[i] > '9')
                return false;
    }
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (strlen(types[i]) == tl && memcmp(types[i], l->u.s.p, tl) == 0)
            return true;
    return false;
}

static int hook_persistent_load(void *ud, ptc__vm *vm, ptc_value *pid, ptc_value **out,
                                ptc_error *err)
{
    ptc_ckpt *c = ud;
    size_t want = c->legacy_mode ? 6 : 5;
    if (pid->kind != PTC_VALUE_TUPLE || pid->u.seq.n != want)
        return HOOK_ERR(PTC_EFORMAT, "persistent id must be a %zu-tuple, got a %s", want,
                        kind_name(pid));
    ptc_value **a = pid->u.seq.items;
    if (!is_str(a[0], "storage"))
        return HOOK_ERR(PTC_EFORMAT, "only persistent ids of storages are allowed");
    if (a[1]->kind != PTC_VALUE_GLOBAL ||
        (a[1]->u.g.id != G_STORAGE && a[1]->u.g.id != G_UNTYPED_STORAGE))
        return HOOK_ERR(PTC_EFORMAT, "storage type is a %s, not a storage class",
                        a[1]->kind == PTC_VALUE_GLOBAL ? a[1]->u.g.full : kind_name(a[1]));
    if (!key_ok(a[2], c->legacy_mode))
        return HOOK_ERR(PTC_EFORMAT, "storage key must be a short string of digits");
    if (!location_ok(a[3]))
        return HOOK_ERR(PTC_EFORMAT,
                        "storage location is not a device torch can restore to (cpu, cuda:0, ...)");
    int64_t numel;
    if (!get_int(a[4], &numel) || numel < 0)
        return HOOK_ERR(PTC_EFORMAT, "storage size must be a non-negative int");
    bool untyped = a[1]->u.g.id == G_UNTYPED_STORAGE;
    ptc_dtype dt = PTC_UINT8;
    if (!untyped && ptc__dtype_from_storage_name(a[1]->u.g.name, &dt) < 0)
        return HOOK_ERR(PTC_EFORMAT, "unknown storage class %s", a[1]->u.g.full);
    int64_t nbytes;
    if (!ptc__mul_i64_ok(numel, (int64_t)ptc_dtype_size(dt), &nbytes))
        return HOOK_ERR(PTC_EFORMAT, "storage of %lld elements of %s overflows", (long long)numel,
                        ptc_dtype_name(dt));
    ptc_storage *s = ptc__ckpt_find_storage(c, a[2]->u.s.p);
    if (s) {
        /* torch silently reuses the first storage; a second declaration that disagrees is an
         * ambiguity. */
        if (s->parent || s->dtype != dt || s->untyped != untyped || s->nbytes != nbytes)
            return HOOK_ERR(PTC_EFORMAT, "storage \"%s\" is declared twice with different types "
                            "or sizes", s->key);
    } else {
        s = new_storage(c, a[2], a[3], dt, untyped, nbytes);
        if (!s)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        int rc = ptc__ckpt_add_storage(c, s, err);
        if (rc < 0)
            return rc;
    }
    if (c->legacy_mode && a[5]->kind != PTC_VALUE_NONE) {
        int rc = legacy_view(vm, c, s, a[5], a[3], &s, err);
        if (rc < 0)
            return rc;
    }
    ptc_value *v = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_NONE);
    if (!v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    v->kind = PTC__VALUE_OPAQUE;
    v->u.opaque = s;
    *out = v;
    return 0;
}

const ptc__vm_hooks ptc__pth_hooks_template = {
    .global = hook_global,
    .reduce = hook_reduce,
    .newobj = hook_newobj,
    .build = hook_build,
    .persistent_load = hook_persistent_load,
};
