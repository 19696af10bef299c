/*
 * rebuild.c - the unpickling hooks that give a checkpoint's pickle torch's meaning: allowed
 * globals become values, REDUCE of an allowed callable rebuilds a tensor, a Parameter, a set, bytes,
 * a torch.Size or a device, and BINPERSID binds a storage to its record.
 *
 * Every call is checked for the exact argument shape torch.save produces (threat model P5);
 * anything else is PTC_EFORMAT, and allowed callables ptc does not implement (sparse, quantized,
 * nested, meta and wrapper tensors) are PTC_EUNSUPPORTED.
 *
 * torch 2.6 calls the same functions with whatever arguments the pickle gives: where Python would
 * accept what ptc refuses (an iterable other than the one torch.save writes, a codec other than
 * latin1, a rebuild ptc does not implement, a storage location it cannot restore to while loading
 * with map_location='cpu'), the refusal carries PTC_ERR_STRICTER. Within a call, the checks torch
 * shares come first, so that a call both refuse is reported for the reason torch gives.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

#define HOOK_ERR(code, ...) ptc__err(err, code, ptc__vm_member(vm), ptc__vm_offset(vm), __VA_ARGS__)
/* A refusal torch 2.6 would not make (PTC_ERR_STRICTER). */
#define HOOK_STRICTER(code, ...)                                                                   \
    ptc__err_stricter(err, code, ptc__vm_member(vm), ptc__vm_offset(vm), __VA_ARGS__)
/* HOOK_ERR, or HOOK_STRICTER when stricter is true. */
#define HOOK_ERR_IF(stricter, code, ...)                                                           \
    PTC__ERR_IF(stricter, code, ptc__vm_member(vm), ptc__vm_offset(vm), __VA_ARGS__)

static const char *kind_name(const ptc_value *v)
{
    return v->kind == PTC__VALUE_OPAQUE ? "storage" : ptc_value_kind_name((ptc_value_kind)v->kind);
}

/* The name of a global for a message: escaped, since a global read symbolically
 * (PTC_OPEN_SALVAGE) may be named with any bytes the file holds. */
static const char *shown_name(const ptc_value *g, char *buf, size_t cap)
{
    return ptc__escape(buf, cap, g->u.g.full, strlen(g->u.g.full), true);
}

static ptc_value *new_kind(ptc__vm *vm, ptc_value_kind k)
{
    return ptc__value_new(ptc__vm_arena(vm), k);
}

static int hook_global(void *ud, ptc__vm *vm, const char *module, const char *name, ptc_value **out,
                       ptc_error *err)
{
    ptc_ckpt *c = ud;
    ptc__gid id;
    ptc_dtype dt = PTC_FLOAT32;
    bool salvage = (c->flags & PTC_OPEN_SALVAGE) != 0;
    int rc = ptc__policy_lookup(c->policy, module, name, &id, &dt, ptc__vm_member(vm),
                                ptc__vm_offset(vm), salvage ? NULL : err);
    /* Salvage: what the policy refuses is only a name (blocked modules included). */
    if (rc == PTC_EUNSAFE && salvage) {
        id = G_SYMBOLIC;
        rc = 0;
    }
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
    if (id == G_SYMBOLIC) {
        v->flags |= PTC__V_SYMBOLIC;
        if ((rc = ptc__salvage_note_global(c, vm, v, err)) < 0)
            return rc;
    }
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

/* Backward hooks that no backward pass can call: None (older torch releases write it) or an empty
 * dict (torch.save writes OrderedDict()). torch installs whatever it is given as the tensor's
 * hooks, and a non-empty dict would have autograd call its values. */
static bool no_hooks(const ptc_value *v)
{
    return v->kind == PTC_VALUE_NONE || (v->kind == PTC_VALUE_DICT && v->u.dict.n == 0);
}

static bool is_number(const ptc_value *v)
{
    return v->kind == PTC_VALUE_INT || v->kind == PTC_VALUE_FLOAT || v->kind == PTC_VALUE_BOOL;
}

/* A tuple, list or torch.Size: the sequences Python unpacks and iterates alike. */
static bool is_seq(const ptc_value *v)
{
    return v->kind == PTC_VALUE_TUPLE || v->kind == PTC_VALUE_LIST || v->kind == PTC_VALUE_SIZE;
}

/* A sequence of ints (lo to hi inclusive). */
static bool int_seq(const ptc_value *v, int64_t lo, int64_t hi)
{
    if (!is_seq(v))
        return false;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        int64_t x;
        if (!get_int(v->u.seq.items[i], &x) || x < lo || x > hi)
            return false;
    }
    return true;
}

/* Whether Python iterates v into hashable items: set(v) and Counter(v) succeed. */
static bool iterable_of_hashables(const ptc_value *v)
{
    switch (v->kind) {
    case PTC_VALUE_STR:
    case PTC_VALUE_BYTES:
    case PTC_VALUE_DICT:
        return true;
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        for (size_t i = 0; i < v->u.seq.n; i++)
            if (!ptc__value_hashable(v->u.seq.items[i]))
                return false;
        return true;
    default:
        return false;
    }
}

/* How many items Python iterates out of v (a str by its characters), or -1 when v is no
 * iterable ptc holds. */
static int64_t iter_len(const ptc_value *v)
{
    switch (v->kind) {
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SIZE:
    case PTC_VALUE_SET:
        return (int64_t)v->u.seq.n;
    case PTC_VALUE_DICT:
        return (int64_t)v->u.dict.n;
    case PTC_VALUE_BYTES:
        return (int64_t)v->u.s.n;
    case PTC_VALUE_STR: {
        int64_t n = 0;
        for (size_t i = 0; i < v->u.s.n; i++)
            n += ((uint8_t)v->u.s.p[i] & 0xC0) != 0x80;
        return n;
    }
    default:
        return -1;
    }
}

/* Whether OrderedDict(v) succeeds for a v that is not a dict: an iterable of key-value pairs,
 * each pair any iterable of two items whose first is hashable. */
static bool pairs(const ptc_value *v)
{
    if (!is_seq(v) && v->kind != PTC_VALUE_SET)
        return false;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const ptc_value *p = v->u.seq.items[i];
        if (iter_len(p) != 2 || (is_seq(p) && !ptc__value_hashable(p->u.seq.items[0])) ||
            (p->kind == PTC_VALUE_SET && !ptc__value_hashable(p->u.seq.items[0])))
            return false;
    }
    return true;
}

/* Whether every pair of a pairs() sequence has an order ptc reproduces: a set has none. */
static bool ordered_pairs(const ptc_value *v)
{
    if (v->kind == PTC_VALUE_SET)
        return false;
    for (size_t i = 0; i < v->u.seq.n; i++)
        if (v->u.seq.items[i]->kind == PTC_VALUE_SET)
            return false;
    return true;
}

/* Python's codec lookup name: ASCII letters lowered, every run of other characters but '.' one
 * '_' (encodings.normalize_encoding). */
static void codec_name(const ptc_value *v, char *out, size_t cap)
{
    size_t o = 0;
    bool punct = false;
    for (size_t i = 0; i < v->u.s.n && o + 2 < cap; i++) {
        char ch = v->u.s.p[i];
        bool alnum =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (alnum || ch == '.') {
            if (punct && o)
                out[o++] = '_';
            out[o++] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
            punct = false;
        } else {
            punct = true;
        }
    }
    out[o] = '\0';
}

#define CODEC_ROT13 1u
#define CODEC_UTF8  0x10FFFFu

/* The largest code point a codec Python knows encodes (CODEC_UTF8, 0xFF for latin-1, 0x7F for
 * ASCII), CODEC_ROT13 for rot13 (str to str), 0 for a codec ptc does not know. */
static unsigned codec_max(const ptc_value *codec)
{
    static const struct {
        const char *name;
        unsigned max;
    } codecs[] = {{"utf_8", CODEC_UTF8},  {"utf8", CODEC_UTF8},    {"u8", CODEC_UTF8},
                  {"utf", CODEC_UTF8},    {"cp65001", CODEC_UTF8}, {"latin_1", 0xFF},
                  {"latin1", 0xFF},       {"iso8859_1", 0xFF},     {"iso_8859_1", 0xFF},
                  {"l1", 0xFF},           {"latin", 0xFF},         {"8859", 0xFF},
                  {"cp819", 0xFF},        {"iso_ir_100", 0xFF},    {"ascii", 0x7F},
                  {"us_ascii", 0x7F},     {"646", 0x7F},           {"us", 0x7F},
                  {"rot13", CODEC_ROT13}, {"rot_13", CODEC_ROT13}};
    char name[40];
    codec_name(codec, name, sizeof name);
    for (size_t i = 0; i < sizeof codecs / sizeof *codecs; i++)
        if (strcmp(name, codecs[i].name) == 0)
            return codecs[i].max;
    return 0;
}

/* Whether every character of the str s is a code point up to max that encodes (in UTF-8 a lone
 * surrogate does not). */
static bool encodes_all(const ptc_value *s, unsigned max)
{
    const uint8_t *p = (const uint8_t *)s->u.s.p;
    for (size_t i = 0; i < s->u.s.n; i++) {
        if (max == CODEC_UTF8 ? p[i] == 0xED && i + 1 < s->u.s.n && p[i + 1] >= 0xA0
                              : p[i] >= 0x80 && (max == 0x7F || p[i] >= 0xC4))
            return false; /* beyond U+007F lead bytes are C2 and up, beyond U+00FF C4 and up */
    }
    return true;
}

/* Whether Python's _codecs.encode(args...) succeeds (bytes_only: bytearray(args...), which needs
 * bytes out): a str, an optional codec and an optional error handler. Known are the codecs that
 * take any str ptc can hold (UTF-8 but for lone surrogates, and rot13 from str to str) and those
 * that take the str when its characters are in range (ASCII, latin-1) or an error handler
 * replaces the others. */
static bool python_encodes(const ptc_value *args, bool bytes_only)
{
    static const char *const handlers[] = {
        "strict", "ignore", "replace", "backslashreplace", "xmlcharrefreplace", "namereplace"};
    size_t n = args->u.seq.n;
    ptc_value **a = args->u.seq.items;
    if (n < 1 || n > 3 || a[0]->kind != PTC_VALUE_STR || (n >= 2 && a[1]->kind != PTC_VALUE_STR))
        return false;
    bool strict = true;
    if (n == 3) {
        bool known = false;
        for (size_t i = 0; i < sizeof handlers / sizeof *handlers; i++)
            known |= is_str(a[2], handlers[i]);
        if (!known)
            return false;
        strict = is_str(a[2], "strict");
    }
    if (n == 1)
        return !bytes_only; /* bytearray(str) wants an encoding */
    unsigned max = codec_max(a[1]);
    if (max == CODEC_ROT13)
        return !bytes_only;
    return max != 0 && (!strict || encodes_all(a[0], max));
}

/* Whether complex(s) parses s, roughly: digits, signs, points, exponents, j and parentheses. */
static bool complex_text(const ptc_value *s)
{
    bool digit = false;
    for (size_t i = 0; i < s->u.s.n; i++) {
        char ch = s->u.s.p[i];
        if (ch >= '0' && ch <= '9')
            digit = true;
        else if (ch == '\0' || !strchr("+-.eEjJ() _", ch))
            return false;
    }
    return digit;
}

/* Whether s names a torch.layout, as torch.serialization._get_layout looks them up. */
static bool layout_name(const ptc_value *s)
{
    static const char *const names[] = {"torch.strided",    "torch.sparse_coo", "torch.sparse_csr",
                                        "torch.sparse_csc", "torch.sparse_bsr", "torch.sparse_bsc",
                                        "torch._mkldnn",    "torch.jagged"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (is_str(s, names[i]))
            return true;
    return false;
}

/* Whether torch's legacy constructor (torch.Tensor(...), torch.FloatTensor(...), also reached by
 * NEWOBJ) takes these arguments: nothing, sizes, a sequence of numbers, or a tensor. */
static bool legacy_ctor_args(const ptc_value *args)
{
    size_t n = args->u.seq.n;
    ptc_value **a = args->u.seq.items;
    if (n == 1 && (a[0]->kind == PTC_VALUE_TENSOR || a[0]->kind == PTC_VALUE_SIZE))
        return true;
    if (n == 1 && is_seq(a[0])) {
        for (size_t i = 0; i < a[0]->u.seq.n; i++)
            if (!is_number(a[0]->u.seq.items[i]))
                return false;
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t x;
        if (!get_int(a[i], &x) || x < 0)
            return false;
    }
    return true;
}

/* Reads a tuple of ints into an arena array; torch takes a list as well, which the caller
 * refuses after the checks torch makes. */
static int int_tuple(ptc__vm *vm, const ptc_value *t, const char *what, int64_t **out, int *n,
                     ptc_error *err)
{
    if (!is_seq(t))
        return HOOK_ERR(PTC_EFORMAT, "tensor %s must be a tuple of ints, not %s", what,
                        kind_name(t));
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

/* The tensor's metadata dict of _rebuild_tensor_v2/v3: {'conj': True} and/or {'neg': True}.
 * torch skips a metadata argument that is false (an empty list, say), which the caller refuses. */
static int apply_metadata(ptc__vm *vm, ptc_tensor *t, const ptc_value *md, ptc_error *err)
{
    if (md->kind == PTC_VALUE_NONE || (md->kind != PTC_VALUE_DICT && !ptc__value_truthy(md)))
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

/* Whether tensors of dt can require gradients in torch: floating and complex ones. */
static bool grad_dtype(ptc_dtype dt)
{
    const ptc__dtype_info *info = ptc__dtype_info_of(dt);
    return info && (info->is_floating || info->is_complex);
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
                        old  ? "_rebuild_tensor"
                        : v3 ? "_rebuild_tensor_v3"
                             : "_rebuild_tensor_v2",
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
    /* torch has no limit on dimensions; ptc checks its own before allocating. */
    const ptc_limits *lim = ptc__vm_limits(vm);
    size_t n_size = is_seq(a[2]) ? a[2]->u.seq.n : 0, n_stride = is_seq(a[3]) ? a[3]->u.seq.n : 0;
    if (n_size > lim->max_ndim || n_stride > lim->max_ndim)
        return HOOK_ERR_IF(int_seq(a[2], INT64_MIN, INT64_MAX) &&
                               int_seq(a[3], INT64_MIN, INT64_MAX) && n_size == n_stride,
                           PTC_EFORMAT, "tensor %s has %zu dimensions (limit %u)",
                           n_size > lim->max_ndim ? "size" : "stride",
                           n_size > lim->max_ndim ? n_size : n_stride, lim->max_ndim);
    int nd1, nd2;
    int rc = int_tuple(vm, a[2], "size", &t->shape, &nd1, err);
    if (rc < 0 || (rc = int_tuple(vm, a[3], "stride", &t->stride, &nd2, err)) < 0)
        return rc;
    if (nd1 != nd2)
        return HOOK_ERR(PTC_EFORMAT, "tensor size has %d dimensions but stride has %d", nd1, nd2);
    t->ndim = nd1;
    if (!old && !get_bool(a[4], &t->requires_grad))
        return HOOK_ERR(PTC_EFORMAT, "requires_grad is not a bool");
    if (v3) {
        if (a[6]->kind != PTC_VALUE_DTYPE)
            return HOOK_ERR(PTC_EFORMAT, "_rebuild_tensor_v3 dtype argument is a %s",
                            kind_name(a[6]));
        t->dtype = a[6]->u.dt;
    }
    /* torch 2.6 makes a v3 tensor with requires_grad and then sets its storage in place, which
     * autograd forbids; and only floating and complex tensors require gradients. */
    if (t->requires_grad && v3)
        return HOOK_ERR(PTC_EFORMAT, "_rebuild_tensor_v3 with requires_grad=True (torch 2.6 "
                                     "cannot set the storage of such a tensor)");
    if (t->requires_grad && !grad_dtype(t->dtype))
        return HOOK_ERR(PTC_EFORMAT, "a %s tensor cannot require gradients",
                        ptc_dtype_name(t->dtype));
    if (!old && n == base + 1 && (rc = apply_metadata(vm, t, a[base], err)) < 0)
        return rc;
    if ((rc = ptc__tensor_check(t, c->limits.max_ndim, ptc__vm_member(vm), ptc__vm_offset(vm),
                                err)) < 0)
        return rc;
    /* Taken as torch takes them: lists for size and stride, a false metadata argument, an
     * untyped storage under v2 or the old rebuild (a uint8 tensor, the storage's own dtype), and
     * under v3 a typed storage of another dtype, whose bytes the tensor reads as its own dtype
     * (the bounds above are proven in bytes). Hooks a backward pass would call are refused: torch
     * installs them. */
    if (!old && !no_hooks(a[5]))
        return HOOK_STRICTER(PTC_EFORMAT,
                             "backward hooks must be None or empty: autograd would call them");
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
    if (requires_grad && !grad_dtype(data->u.t->dtype))
        return HOOK_ERR(PTC_EFORMAT, "a %s Parameter cannot require gradients",
                        ptc_dtype_name(data->u.t->dtype));
    ptc_tensor *t = ptc__arena_alloc(ptc__vm_arena(vm), sizeof *t);
    ptc_value *v = new_kind(vm, PTC_VALUE_TENSOR);
    if (!t || !v)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    *t = *data->u.t;
    t->parameter = true;
    t->requires_grad = requires_grad;
    t->state = NULL; /* a new object: the data's attributes are not its own */
    v->u.t = t;
    *out = v;
    return 0;
}

/* A dict whose keys are all str: what setattr can apply. */
static bool attr_dict(const ptc_value *v)
{
    if (v->kind != PTC_VALUE_DICT)
        return false;
    for (size_t i = 0; i < v->u.dict.n; i++)
        if (v->u.dict.keys[i]->kind != PTC_VALUE_STR)
            return false;
    return true;
}

static bool attrs_or_nothing(const ptc_value *v)
{
    return !ptc__value_truthy(v) || attr_dict(v);
}

/* The state of _rebuild_parameter_with_state and _rebuild_from_type_v2: None or a dict of
 * attributes. torch's _set_obj_state also takes a false state and a (dict, slots) pair, and sets
 * any attribute name, dunder names included. */
static int check_state(ptc__vm *vm, const ptc_value *state, ptc_error *err)
{
    if (state->kind == PTC_VALUE_NONE)
        return 0;
    if (state->kind == PTC_VALUE_TUPLE && state->u.seq.n != 2)
        return HOOK_ERR(PTC_EFORMAT, "object state is a tuple of %zu, not (dict, slots)",
                        state->u.seq.n);
    if (state->kind != PTC_VALUE_DICT) {
        /* A false state sets nothing; a (dict, slots) pair sets the attributes of both. */
        if (!ptc__value_truthy(state))
            return 0;
        if (state->kind != PTC_VALUE_TUPLE || state->u.seq.n != 2 ||
            !attrs_or_nothing(state->u.seq.items[0]) || !attrs_or_nothing(state->u.seq.items[1]))
            return HOOK_ERR(PTC_EFORMAT, "object state must be a dict or (dict, slots), not %s",
                            kind_name(state));
        for (int k = 0; k < 2; k++) {
            int rc = ptc__value_truthy(state->u.seq.items[k])
                         ? check_state(vm, state->u.seq.items[k], err)
                         : 0;
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    if (!attr_dict(state))
        return HOOK_ERR(PTC_EFORMAT, "attribute names must be str");
    for (size_t i = 0; i < state->u.dict.n; i++) {
        const ptc_value *k = state->u.dict.keys[i];
        if (k->u.s.n >= 2 && k->u.s.p[0] == '_' && k->u.s.p[1] == '_') {
            char esc[64];
            return HOOK_STRICTER(PTC_EFORMAT, "attribute \"%s\" would set a Python internal",
                                 ptc__escape(esc, sizeof esc, k->u.s.p, k->u.s.n, true));
        }
    }
    /* torch applies each with setattr: a name of the tensor's own properties (data, real,
     * requires_grad, shape, ...: torch 2.6's data descriptors of Parameter and Tensor) changes
     * the tensor or fails, which ptc does not model; other names are plain attributes. */
    static const char *const properties[] = {"H",
                                             "T",
                                             "_backward_hooks",
                                             "_base",
                                             "_cdata",
                                             "_grad",
                                             "_grad_fn",
                                             "_has_symbolic_sizes_strides",
                                             "_post_accumulate_grad_hooks",
                                             "_python_dispatch",
                                             "_version",
                                             "data",
                                             "device",
                                             "dtype",
                                             "grad",
                                             "grad_fn",
                                             "imag",
                                             "is_cpu",
                                             "is_cuda",
                                             "is_ipu",
                                             "is_leaf",
                                             "is_maia",
                                             "is_meta",
                                             "is_mkldnn",
                                             "is_mps",
                                             "is_mtia",
                                             "is_nested",
                                             "is_quantized",
                                             "is_sparse",
                                             "is_sparse_csr",
                                             "is_vulkan",
                                             "is_xla",
                                             "is_xpu",
                                             "itemsize",
                                             "layout",
                                             "mH",
                                             "mT",
                                             "name",
                                             "names",
                                             "nbytes",
                                             "ndim",
                                             "output_nr",
                                             "real",
                                             "requires_grad",
                                             "retains_grad",
                                             "shape",
                                             "volatile"};
    for (size_t i = 0; i < state->u.dict.n; i++) {
        const ptc_value *k = state->u.dict.keys[i];
        for (size_t j = 0; j < sizeof properties / sizeof *properties; j++) {
            if (is_str(k, properties[j]))
                return HOOK_STRICTER(PTC_EUNSUPPORTED,
                                     "a state that sets the tensor property \"%s\" is not "
                                     "supported",
                                     properties[j]);
        }
    }
    return 0;
}

/* The bytes Python's str.encode gives for (str, codec[, errors]) when every character of the str
 * encodes (then the error handler plays no part) and the codec is UTF-8 (ptc's own text), latin-1
 * or ASCII; NULL otherwise, and when out of memory. */
static ptc_value *encode_text(ptc__vm *vm, const ptc_value *args)
{
    size_t n = args->u.seq.n;
    ptc_value **a = args->u.seq.items;
    /* One argument: str.encode's default, UTF-8. */
    unsigned max = n == 1 && a[0]->kind == PTC_VALUE_STR ? CODEC_UTF8
                   : n >= 2 && n <= 3 && a[0]->kind == PTC_VALUE_STR && a[1]->kind == PTC_VALUE_STR
                       ? codec_max(a[1])
                       : 0;
    if (max <= CODEC_ROT13 || (n > 1 && !python_encodes(args, true)) || !encodes_all(a[0], max))
        return NULL;
    const uint8_t *p = (const uint8_t *)a[0]->u.s.p;
    size_t len = a[0]->u.s.n, o = 0;
    uint8_t *b = ptc__arena_alloc(ptc__vm_arena(vm), len + 1);
    ptc_value *v = new_kind(vm, PTC_VALUE_BYTES);
    if (!b || !v)
        return NULL;
    for (size_t i = 0; i < len;) {
        if (max == CODEC_UTF8 || p[i] < 0x80) {
            b[o++] = p[i++];
        } else { /* latin-1, C2 or C3 and a continuation byte */
            b[o++] = (uint8_t)(((p[i] & 0x1F) << 6) | (i + 1 < len ? p[i + 1] & 0x3F : 0));
            i += 2;
        }
    }
    v->u.s.p = (const char *)b;
    v->u.s.n = o;
    return v;
}

/* _codecs.encode(str, codec[, errors]): bytes, for the codecs encode_text knows. */
static int codecs_encode(ptc__vm *vm, const ptc_value *args, ptc_value **out, ptc_error *err)
{
    ptc_value **a = args->u.seq.items;
    if (args->u.seq.n >= 2 && python_encodes(args, false) && codec_max(a[1]) == CODEC_ROT13) {
        /* rot13, str to str: ASCII letters turned by 13 places, everything else kept. */
        char *t = ptc__arena_alloc(ptc__vm_arena(vm), a[0]->u.s.n + 1);
        ptc_value *v = new_kind(vm, PTC_VALUE_STR);
        if (!t || !v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        for (size_t i = 0; i < a[0]->u.s.n; i++) {
            char ch = a[0]->u.s.p[i];
            t[i] = ch >= 'a' && ch <= 'z'   ? (char)('a' + (ch - 'a' + 13) % 26)
                   : ch >= 'A' && ch <= 'Z' ? (char)('A' + (ch - 'A' + 13) % 26)
                                            : ch;
        }
        v->u.s.p = t;
        v->u.s.n = a[0]->u.s.n;
        *out = v;
        return 0;
    }
    ptc_value *v = encode_text(vm, args);
    if (!v)
        return HOOK_ERR_IF(python_encodes(args, false), PTC_EFORMAT,
                           "_codecs.encode takes (str, codec[, errors]) with a str the codec "
                           "encodes, the codec UTF-8, latin-1 or ASCII");
    *out = v;
    return 0;
}

/* The error of a failed ptc__seq_push: out of memory, or a container past its item cap. */
static int seq_err(ptc__vm *vm, int rc, ptc_error *err)
{
    if (rc == PTC_ELIMIT)
        return HOOK_STRICTER(PTC_ELIMIT, "a container would hold more than the limit of %zu items",
                             (size_t)PTC__VALUE_MAX_ITEMS);
    return HOOK_ERR(PTC_ENOMEM, "out of memory");
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
            if (seen->u.dict.n > before && (rc = ptc__seq_push(a, v, items->u.seq.items[i])) < 0)
                return seq_err(vm, rc, err);
        }
    } else {
        for (size_t i = 0; i < items->u.seq.n; i++) {
            int64_t x;
            if (kind == PTC_VALUE_SIZE && !get_int(items->u.seq.items[i], &x))
                return HOOK_ERR(PTC_EFORMAT, "torch.Size items must be ints");
            int rc = ptc__seq_push(a, v, items->u.seq.items[i]);
            if (rc < 0)
                return seq_err(vm, rc, err);
        }
    }
    *out = v;
    return 0;
}

static int make_device(ptc__vm *vm, const ptc_value *args, ptc_value **out, ptc_error *err)
{
    size_t n = args->u.seq.n;
    /* torch also takes a device (itself), and an index alone: the current accelerator's device,
     * which exists only on a machine that has one (ptc reads as on a machine without). */
    if (n == 1 && args->u.seq.items[0]->kind == PTC_VALUE_DEVICE) {
        *out = args->u.seq.items[0];
        return 0;
    }
    if (n < 1 || n > 2 || args->u.seq.items[0]->kind != PTC_VALUE_STR)
        return HOOK_ERR(PTC_EFORMAT, "torch.device takes (str[, int]) or (device)");
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
        /* torch allocates whatever the count says. */
        if (ptc__budget_take(&c->budget, (uint64_t)count, NULL, ptc__vm_member(vm),
                             ptc__vm_offset(vm)) < 0)
            return HOOK_STRICTER(PTC_ELIMIT,
                                 "bytearray of %lld bytes exceeds the heap limit of "
                                 "%llu bytes",
                                 (long long)count, (unsigned long long)c->budget.limit);
        ptc__budget_give(&c->budget, (uint64_t)count); /* the arena charges it again */
        char *z = ptc__arena_alloc(ptc__vm_arena(vm), (size_t)count + 1);
        if (!z)
            return HOOK_STRICTER(PTC_ELIMIT, "bytearray of %lld bytes exceeds the heap limit",
                                 (long long)count);
        v->u.s.p = z;
        v->u.s.n = (size_t)count;
    } else if (args->u.seq.n == 1 && is_seq(x)) {
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
        ptc_value *e = args->u.seq.n >= 2 ? encode_text(vm, args) : NULL;
        if (!e)
            return HOOK_ERR_IF(python_encodes(args, true), PTC_EFORMAT,
                               "bytearray takes (), (bytes), (int), (sequence of ints) or (str, "
                               "codec[, errors]) with a str the codec encodes");
        v->u.s = e->u.s;
    }
    *out = v;
    return 0;
}

/* The items Python iterates out of src, as a list value: a str gives its characters, bytes their
 * values, a dict its keys, a sequence or set its items (the same value when it is one). */
static int items_of(ptc__vm *vm, const ptc_value *src, const ptc_value **out, ptc_error *err)
{
    ptc__arena *a = ptc__vm_arena(vm);
    bool text = src->kind == PTC_VALUE_STR, bytes = src->kind == PTC_VALUE_BYTES;
    if (!text && !bytes && src->kind != PTC_VALUE_DICT) {
        *out = src;
        return 0;
    }
    ptc_value *list = new_kind(vm, PTC_VALUE_LIST);
    if (!list)
        return HOOK_ERR(PTC_ENOMEM, "out of memory");
    size_t n = text || bytes ? src->u.s.n : src->u.dict.n;
    for (size_t i = 0; i < n;) {
        ptc_value *item;
        if (text) {
            uint8_t lead = (uint8_t)src->u.s.p[i];
            size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
            len = len < n - i ? len : n - i;
            item = ptc__value_str(a, PTC_VALUE_STR, src->u.s.p + i, len);
            i += len;
        } else if (bytes) {
            item = ptc__value_int(a, (uint8_t)src->u.s.p[i++]);
        } else {
            item = src->u.dict.keys[i++];
        }
        if (!item)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        int rc = ptc__seq_push(a, list, item);
        if (rc < 0)
            return seq_err(vm, rc, err);
    }
    *out = list;
    return 0;
}

/* Counter(iterable) into the empty dict d: each item with its count, in the order items first
 * appear; a str counts its characters, bytes their values. Memory grows with the distinct items
 * only: an item is looked up before it is made, and a count is raised in place (d holds only
 * counts made here). */
static int count_items(ptc__vm *vm, ptc_value *d, const ptc_value *src, ptc_error *err)
{
    ptc__arena *a = ptc__vm_arena(vm);
    bool text = src->kind == PTC_VALUE_STR, bytes = src->kind == PTC_VALUE_BYTES;
    bool keys = src->kind == PTC_VALUE_DICT;
    size_t n = text || bytes ? src->u.s.n : keys ? src->u.dict.n : src->u.seq.n;
    for (size_t i = 0; i < n;) {
        ptc_value probe = {0}, *item = &probe;
        if (text) {
            uint8_t lead = (uint8_t)src->u.s.p[i];
            size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
            probe.kind = PTC_VALUE_STR;
            probe.u.s.p = src->u.s.p + i;
            probe.u.s.n = len < n - i ? len : n - i;
            i += probe.u.s.n;
        } else if (bytes) {
            ptc__value_int_set(&probe, (uint8_t)src->u.s.p[i++]);
            probe.kind = PTC_VALUE_INT;
        } else {
            item = keys ? src->u.dict.keys[i++] : src->u.seq.items[i++];
        }
        size_t pos = ptc__dict_index(d, item);
        if (pos != SIZE_MAX) {
            ptc_value *cv = d->u.dict.vals[pos];
            ptc__value_int_set(cv, cv->u.i.v + 1);
            continue;
        }
        if (item == &probe)
            item = text ? ptc__value_str(a, PTC_VALUE_STR, probe.u.s.p, probe.u.s.n)
                        : ptc__value_int(a, probe.u.i.v);
        ptc_value *one = item ? ptc__value_int(a, 1) : NULL;
        if (!one)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        int rc = ptc__dict_set(a, d, item, one, err, ptc__vm_member(vm), ptc__vm_offset(vm));
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int call(ptc__vm *vm, ptc_ckpt *c, const ptc_value *fn, const ptc_value *args,
                ptc_value **out, ptc_error *err);

static int hook_reduce(void *ud, ptc__vm *vm, ptc_value *fn, ptc_value *args, ptc_value **out,
                       ptc_error *err)
{
    /* The machine hands over an object only when reading symbolically. */
    if (fn->kind != PTC_VALUE_GLOBAL || fn->u.g.id == G_SYMBOLIC)
        return ptc__salvage_call(ud, vm, fn, args, out, err);
    return call(vm, ud, fn, args, out, err);
}

static int call(ptc__vm *vm, ptc_ckpt *c, const ptc_value *fn, const ptc_value *args,
                ptc_value **out, ptc_error *err)
{
    size_t n = args->u.seq.n;
    ptc_value **a = args->u.seq.items;
    bool b;
    switch ((ptc__gid)fn->u.g.id) {
    case G_REBUILD_TENSOR_V2:
        return rebuild_tensor(vm, c, args, false, false, out, err);
    case G_REBUILD_TENSOR_V3:
        return rebuild_tensor(vm, c, args, true, false, out, err);
    case G_REBUILD_TENSOR:
        return rebuild_tensor(vm, c, args, false, true, out, err);
    case G_REBUILD_PARAMETER:
    case G_REBUILD_PARAMETER_WITH_STATE: {
        bool with_state = fn->u.g.id == G_REBUILD_PARAMETER_WITH_STATE;
        if (n != (with_state ? 4u : 3u) || !get_bool(a[1], &b))
            return HOOK_ERR(PTC_EFORMAT, "%s takes (tensor, bool, OrderedDict()%s)", fn->u.g.name,
                            with_state ? ", dict" : "");
        int rc = make_parameter(vm, a[0], b, out, err);
        if (rc == 0 && with_state && (rc = check_state(vm, a[3], err)) == 0 &&
            ptc__value_truthy(a[3]))
            (*out)->u.t->state = a[3];
        if (rc == 0 && !no_hooks(a[2])) /* torch installs any object as the hooks */
            rc = HOOK_STRICTER(PTC_EFORMAT,
                               "backward hooks must be None or empty: autograd would call them");
        return rc;
    }
    case G_REBUILD_FROM_TYPE_V2: {
        /* (func, new_type, args, state): a tensor with Python attributes or of a subclass; only
         * plain Tensor and Parameter types are accepted. */
        if (n != 4 || a[0]->kind != PTC_VALUE_GLOBAL || a[1]->kind != PTC_VALUE_GLOBAL ||
            a[2]->kind != PTC_VALUE_TUPLE)
            return HOOK_ERR(PTC_EFORMAT, "_rebuild_from_type_v2 takes (func, type, tuple, state)");
        int id = a[1]->u.g.id;
        char shown[160];
        /* Salvage: a subclass outside the policy is only a name (the symbol table has it). The
         * tensor is what func(*args) builds, plain or a Parameter as func makes it; the
         * subclass's Python state is not applied (it means nothing without the class). */
        bool subclass = id == G_SYMBOLIC;
        if (!subclass && id != G_TENSOR && id != G_PARAMETER)
            return HOOK_ERR(PTC_EUNSUPPORTED, "tensor subclass %s is not supported",
                            shown_name(a[1], shown, sizeof shown));
        /* torch calls any allowed function; those that return a tensor serve as well. */
        int fid = a[0]->u.g.id;
        bool tensor_fn = fid == G_REBUILD_PARAMETER || fid == G_REBUILD_PARAMETER_WITH_STATE ||
                         fid == G_REBUILD_QTENSOR || fid == G_REBUILD_META ||
                         fid == G_REBUILD_NESTED || fid == G_REBUILD_DEVICE_CPU;
        if (fid != G_REBUILD_TENSOR_V2 && fid != G_REBUILD_TENSOR_V3 && fid != G_REBUILD_TENSOR)
            return HOOK_ERR_IF(tensor_fn, PTC_EFORMAT, "_rebuild_from_type_v2 of %s",
                               shown_name(a[0], shown, sizeof shown));
        int rc = subclass ? 0 : check_state(vm, a[3], err);
        if (rc < 0 || (rc = call(vm, c, a[0], a[2], out, err)) < 0)
            return rc;
        if (subclass)
            return 0;
        if (id == G_PARAMETER &&
            (rc = make_parameter(vm, *out, (*out)->u.t->requires_grad, out, err)) < 0)
            return rc;
        if (ptc__value_truthy(a[3]))
            (*out)->u.t->state = a[3];
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
                int rc =
                    ptc__dict_set(ptc__vm_arena(vm), d, a[0]->u.dict.keys[i], a[0]->u.dict.vals[i],
                                  err, ptc__vm_member(vm), ptc__vm_offset(vm));
                if (rc < 0)
                    return rc;
            }
        } else if (n == 1 && fn->u.g.id == G_ORDERED_DICT && pairs(a[0]) && ordered_pairs(a[0])) {
            /* [[key, value], ...], as Python 2 era pickles write an OrderedDict (a pair may be
             * any iterable of two: "ab" is ('a', 'b')): a later equal key replaces the value in
             * the first one's place, as in Python. */
            for (size_t i = 0; i < a[0]->u.seq.n; i++) {
                const ptc_value *kv;
                int rc = items_of(vm, a[0]->u.seq.items[i], &kv, err);
                if (rc == 0)
                    rc = ptc__dict_set(ptc__vm_arena(vm), d, kv->u.seq.items[0], kv->u.seq.items[1],
                                       err, ptc__vm_member(vm), ptc__vm_offset(vm));
                if (rc < 0)
                    return rc;
            }
        } else if (n == 1 && fn->u.g.id == G_COUNTER && a[0]->kind != PTC_VALUE_SET &&
                   iterable_of_hashables(a[0])) {
            int rc = count_items(vm, d, a[0], err);
            if (rc < 0)
                return rc;
        } else if (n != 0) {
            /* Python also builds either from a set, in the order of its hashes, which ptc does
             * not reproduce. */
            bool torch_ok = n == 1 && (fn->u.g.id == G_ORDERED_DICT ? pairs(a[0])
                                                                    : iterable_of_hashables(a[0]));
            return HOOK_ERR_IF(torch_ok, PTC_EFORMAT, "%s takes (), (dict) or (list of pairs)",
                               fn->u.g.full);
        }
        *out = d;
        return 0;
    }
    case G_SET:
        if (n == 0) {
            *out = new_kind(vm, PTC_VALUE_SET);
            return *out ? 0 : HOOK_ERR(PTC_ENOMEM, "out of memory");
        }
        if (n != 1 || !iterable_of_hashables(a[0]))
            return HOOK_ERR(PTC_EFORMAT, "builtins.set takes () or (iterable of hashables)");
        {
            /* A set has no order of its own: ptc keeps the first appearance of each item. */
            const ptc_value *items;
            int rc = items_of(vm, a[0], &items, err);
            return rc < 0 ? rc : make_seq(vm, PTC_VALUE_SET, items, out, err);
        }
    case G_SIZE:
        if (n == 0) {
            *out = new_kind(vm, PTC_VALUE_SIZE);
            return *out ? 0 : HOOK_ERR(PTC_ENOMEM, "out of memory");
        }
        if (n != 1 || !int_seq(a[0], INT64_MIN, INT64_MAX))
            return HOOK_ERR(PTC_EFORMAT, "torch.Size takes (sequence of ints)");
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
            else /* Python also takes a bool, a complex, and one str it can parse */
                return HOOK_ERR_IF(
                    a[i]->kind == PTC_VALUE_BOOL || a[i]->kind == PTC_VALUE_COMPLEX ||
                        (n == 1 && a[i]->kind == PTC_VALUE_STR && complex_text(a[i])),
                    PTC_EFORMAT, "builtins.complex parts must be numbers");
        }
        ptc_value *v = new_kind(vm, PTC_VALUE_COMPLEX);
        if (!v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        v->u.c.re = parts[0];
        v->u.c.im = parts[1];
        *out = v;
        return 0;
    }
    case G_CODECS_ENCODE:
        return codecs_encode(vm, args, out, err);
    case G_BYTEARRAY:
        return make_bytearray(vm, c, args, out, err);
    case G_DEVICE:
        return make_device(vm, args, out, err);
    case G_USER: {
        ptc_value *v = new_kind(vm, PTC_VALUE_OBJECT);
        if (!v)
            return HOOK_ERR(PTC_ENOMEM, "out of memory");
        v->u.obj.cls = fn;
        v->u.obj.args = (ptc_value *)args;
        *out = v;
        return 0;
    }
    /* Rebuilds torch implements and ptc does not: torch loads them. But the sparse and wrapper
     * rebuilds need a layout, which only _get_layout makes, and ptc refuses that first (torch
     * takes the name of a layout); a qscheme is no callable; the numpy rebuild needs a numpy
     * array, which no allowed global makes. */
    case G_REBUILD_SPARSE:
    case G_GET_LAYOUT:
        return HOOK_ERR_IF(fn->u.g.id == G_GET_LAYOUT && n == 1 && layout_name(a[0]),
                           PTC_EUNSUPPORTED, "sparse tensors (%s) are not supported", fn->u.g.full);
    case G_REBUILD_QTENSOR:
    case G_QSCHEME:
        return HOOK_ERR_IF(fn->u.g.id == G_REBUILD_QTENSOR, PTC_EUNSUPPORTED,
                           "quantized tensors (%s) are not supported", fn->u.g.full);
    case G_REBUILD_META:
    case G_REBUILD_NESTED:
    case G_REBUILD_WRAPPER:
    case G_REBUILD_DEVICE_NUMPY:
    case G_REBUILD_DEVICE_CPU:
        return HOOK_ERR_IF(fn->u.g.id != G_REBUILD_WRAPPER && fn->u.g.id != G_REBUILD_DEVICE_NUMPY,
                           PTC_EUNSUPPORTED, "%s is not supported", fn->u.g.full);
    case G_TENSOR:
    case G_LEGACY_TENSOR_CLASS:
        return HOOK_ERR_IF(legacy_ctor_args(args), PTC_EUNSUPPORTED,
                           "legacy tensor pickles (calling %s) are not supported", fn->u.g.full);
    default: {
        /* Of the other allowed classes, Python calls Parameter(tensor[, bool]),
         * UntypedStorage([size]) and TypedStorage(); a legacy storage class (a StorageType in
         * torch) is no callable. */
        int64_t size;
        int id = fn->u.g.id;
        bool torch_ok = (id == G_PARAMETER && n <= 2 && (n < 1 || a[0]->kind == PTC_VALUE_TENSOR) &&
                         (n < 2 || a[1]->kind == PTC_VALUE_BOOL)) ||
                        (id == G_UNTYPED_STORAGE &&
                         (n == 0 || (n == 1 && get_int(a[0], &size) && size >= 0))) ||
                        (id == G_TYPED_STORAGE && n == 0);
        return HOOK_ERR_IF(torch_ok, PTC_EUNSUPPORTED, "calling %s is not supported", fn->u.g.full);
    }
    }
}

static int hook_newobj(void *ud, ptc__vm *vm, ptc_value *cls, ptc_value *args, ptc_value **out,
                       ptc_error *err)
{
    size_t n = args->u.seq.n;
    bool b = true;
    if (cls->kind != PTC_VALUE_GLOBAL || cls->u.g.id == G_SYMBOLIC)
        return ptc__salvage_call(ud, vm, cls, args, out, err);
    if (cls->u.g.id == G_PARAMETER) {
        if (n < 1 || n > 2 || (n == 2 && !get_bool(args->u.seq.items[1], &b)))
            return HOOK_ERR(PTC_EFORMAT, "Parameter takes (tensor[, bool])");
        return make_parameter(vm, args->u.seq.items[0], b, out, err);
    }
    if (cls->u.g.id == G_TENSOR || cls->u.g.id == G_LEGACY_TENSOR_CLASS)
        return HOOK_ERR_IF(legacy_ctor_args(args), PTC_EUNSUPPORTED,
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
    /* torch 2.6 runs cls.__new__(cls, *args) for any allowed class: dict, set and bytearray
     * make an empty one whatever the arguments, torch.Size and complex what their call makes. */
    int id = cls->u.g.id;
    if (id == G_ORDERED_DICT || id == G_COUNTER || id == G_SET || id == G_BYTEARRAY) {
        ptc_value *none = new_kind(vm, PTC_VALUE_TUPLE);
        return none ? call(vm, ud, cls, none, out, err) : HOOK_ERR(PTC_ENOMEM, "out of memory");
    }
    if (id == G_SIZE || id == G_COMPLEX)
        return call(vm, ud, cls, args, out, err);
    return HOOK_ERR(PTC_EFORMAT, "NEWOBJ of %s is not supported", cls->u.g.full);
}

static int hook_build(void *ud, ptc__vm *vm, ptc_value *target, ptc_value *state, ptc_error *err)
{
    if (target->kind == PTC_VALUE_OBJECT && (target->flags & PTC__V_SYMBOLIC))
        return ptc__salvage_build(ud, vm, target, state, err);
    if (target->kind == PTC_VALUE_OBJECT) {
        if (target->u.obj.state) /* torch sets the state again */
            return HOOK_STRICTER(PTC_EFORMAT, "BUILD applied twice to one object");
        target->u.obj.state = state;
        return 0;
    }
    /* torch takes BUILD on a plain tensor as a legacy set_(storage, offset, size, stride). */
    bool torch_ok = target->kind == PTC_VALUE_TENSOR && !target->u.t->parameter &&
                    state->kind == PTC_VALUE_TUPLE && state->u.seq.n == 4 &&
                    state->u.seq.items[0]->kind == PTC__VALUE_OPAQUE;
    return HOOK_ERR_IF(torch_ok, PTC_EFORMAT, "BUILD on a %s", kind_name(target));
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
    if (view->kind != PTC_VALUE_TUPLE || view->u.seq.n != 3 ||
        !key_ok(view->u.seq.items[0], true) || !get_int(view->u.seq.items[1], &off) ||
        !get_int(view->u.seq.items[2], &size) || off < 0 || size < 0)
        return HOOK_ERR(PTC_EFORMAT, "legacy view metadata must be (key, offset, size)");
    /* torch slices the root storage, which clips a view to it, and keeps a view key's first
     * declaration. */
    if (!ptc__mul_i64_ok(off, es, &obytes) || !ptc__mul_i64_ok(size, es, &sbytes) ||
        !ptc__add_i64_ok(obytes, sbytes, &end) || end > root->nbytes)
        return HOOK_STRICTER(PTC_EFORMAT, "legacy view [%lld, +%lld) lies outside storage \"%s\"",
                             (long long)off, (long long)size, root->key);
    const ptc_value *vkey = view->u.seq.items[0];
    ptc_storage *s = ptc__ckpt_find_storage(c, vkey->u.s.p);
    if (s) {
        if (s->parent != root || s->parent_offset != obytes || s->nbytes != sbytes)
            return HOOK_STRICTER(PTC_EFORMAT, "legacy view \"%s\" is declared twice differently",
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

/* Whether torch 2.6 finds the storage of a key ptc refuses: in a zip, the record named
 * f"data/{key}" (a str as it is, up to a NUL as C++ passes it on; an int in decimal; a bool or None
 * by name); in a legacy stream any hashable key names a storage. */
static bool torch_finds_key(ptc_ckpt *c, const ptc_value *k)
{
    if (c->legacy_mode)
        return ptc__value_hashable(k);
    char name[256];
    int64_t i;
    if (k->kind == PTC_VALUE_STR) {
        size_t n = strnlen(k->u.s.p, k->u.s.n);
        if (n > sizeof name - 6)
            return false; /* too long to look up here: left unflagged */
        snprintf(name, sizeof name, "data/%.*s", (int)n, k->u.s.p);
    } else if (get_int(k, &i)) {
        snprintf(name, sizeof name, "data/%lld", (long long)i);
    } else if (k->kind == PTC_VALUE_BOOL || k->kind == PTC_VALUE_NONE) {
        snprintf(name, sizeof name, "data/%s",
                 k->kind == PTC_VALUE_NONE ? "None"
                 : k->u.b                  ? "True"
                                           : "False");
    } else {
        return false;
    }
    return c->zip && ptc__zip_find(c->zip, name) != NULL;
}

/* bytes (not a bytearray) that decode as ASCII, as torch's _maybe_decode_ascii decodes them. */
static bool ascii_bytes(const ptc_value *v)
{
    if (v->kind != PTC_VALUE_BYTES || (v->flags & PTC__V_BYTEARRAY))
        return false;
    for (size_t i = 0; i < v->u.s.n; i++)
        if ((uint8_t)v->u.s.p[i] >= 0x80)
            return false;
    return true;
}

static int hook_persistent_load(void *ud, ptc__vm *vm, ptc_value *pid, ptc_value **out,
                                ptc_error *err)
{
    ptc_ckpt *c = ud;
    size_t want = c->legacy_mode ? 6 : 5;
    /* A legacy torch.save of a whole module declares each module class once as ('module', cls,
     * source_file, source), and torch's loader gives back the class (it only compares the
     * source text with the class's, and warns). Read symbolically, the class is a name and the
     * source text is dropped: nothing of it is ever run. */
    if (c->legacy_mode && (c->flags & PTC_OPEN_SALVAGE) && pid->kind == PTC_VALUE_TUPLE &&
        pid->u.seq.n == 4 && is_str(pid->u.seq.items[0], "module") &&
        pid->u.seq.items[1]->kind == PTC_VALUE_GLOBAL) {
        *out = pid->u.seq.items[1];
        return 0;
    }
    if (pid->kind != PTC_VALUE_TUPLE || pid->u.seq.n != want)
        return HOOK_ERR(PTC_EFORMAT, "persistent id must be a %zu-tuple, got a %s", want,
                        kind_name(pid));
    ptc_value **a = pid->u.seq.items;
    /* torch decodes a bytes tag and location as ASCII first (Python 2 pickles hold bytes). */
    if (!is_str(a[0], "storage") &&
        !(ascii_bytes(a[0]) && a[0]->u.s.n == 7 && memcmp(a[0]->u.s.p, "storage", 7) == 0))
        return HOOK_ERR(PTC_EFORMAT, "only persistent ids of storages are allowed");
    char shown[160];
    if (a[1]->kind != PTC_VALUE_GLOBAL ||
        (a[1]->u.g.id != G_STORAGE && a[1]->u.g.id != G_UNTYPED_STORAGE))
        return HOOK_ERR(PTC_EFORMAT, "storage type is a %s, not a storage class",
                        a[1]->kind == PTC_VALUE_GLOBAL ? shown_name(a[1], shown, sizeof shown)
                                                       : kind_name(a[1]));
    int64_t numel = 0;
    bool numel_ok = get_int(a[4], &numel) && numel >= 0;
    if (!key_ok(a[2], c->legacy_mode))
        return HOOK_ERR_IF(numel_ok && torch_finds_key(c, a[2]), PTC_EFORMAT,
                           "storage key must be a short string of digits");
    if (!numel_ok)
        return HOOK_ERR(PTC_EFORMAT, "storage size must be a non-negative int");
    bool untyped = a[1]->u.g.id == G_UNTYPED_STORAGE;
    ptc_dtype dt = PTC_UINT8;
    if (!untyped && ptc__dtype_from_storage_name(a[1]->u.g.name, &dt) < 0)
        return HOOK_ERR(PTC_EFORMAT, "unknown storage class %s", a[1]->u.g.full);
    int64_t nbytes;
    if (!ptc__mul_i64_ok(numel, (int64_t)ptc_dtype_size(dt), &nbytes))
        return HOOK_ERR(PTC_EFORMAT, "storage of %lld elements of %s overflows", (long long)numel,
                        ptc_dtype_name(dt));
    /* Loading with map_location='cpu', torch never looks at the location: ptc keeps any text as
     * the storage's saved location ("cpu", "cuda:0", ...) and reads the bytes to the host. */
    if (a[3]->kind != PTC_VALUE_STR && !ascii_bytes(a[3]))
        return HOOK_STRICTER(PTC_EFORMAT, "storage location is a %s, not a str", kind_name(a[3]));
    /* A NUL would cut the text every C reader (ptc's API, torch's C++) sees from what Python
     * holds: two readings of one location. */
    if (memchr(a[3]->u.s.p, '\0', a[3]->u.s.n))
        return HOOK_STRICTER(PTC_EFORMAT, "storage location holds a NUL byte");
    ptc_storage *s = ptc__ckpt_find_storage(c, a[2]->u.s.p);
    if (s) {
        /* torch silently reuses the first storage; a second declaration that disagrees is an
         * ambiguity. */
        if (s->parent || s->dtype != dt || s->untyped != untyped || s->nbytes != nbytes)
            return HOOK_STRICTER(PTC_EFORMAT,
                                 "storage \"%s\" is declared twice with different "
                                 "types or sizes",
                                 s->key);
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
