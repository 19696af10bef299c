/*
 * policy.c - which globals a checkpoint may reference.
 *
 * The default policy is torch 2.6's weights-only allowlist, all 128 entries (what they mean:
 * docs/internals/pickle.md), matched by exact "module.name" after the Python-2 name mapping; the
 * strict policy keeps only what torch.save emits for tensors, state dicts and plain containers.
 * Users add exact names (the analogue of torch.serialization.add_safe_globals); modules sys, os,
 * posix and nt are blocked before anything else, whatever was added.
 */
#include "pth/pth.h"

#include <string.h>

/* The most globals ptc_policy_allow_global adds to one policy: each lookup scans them in turn,
 * and a real program allows a handful (its own classes). */
#define POLICY_MAX_EXTRA 4096

struct ptc_policy {
    ptc_policy_base base;
    char **extra; /* "module.name" */
    size_t nextra, capextra;
};

static const char *const blocked_modules[] = {"sys", "os", "posix", "nt"};

bool ptc__module_blocked(const char *module)
{
    for (size_t i = 0; i < sizeof blocked_modules / sizeof *blocked_modules; i++)
        if (strcmp(module, blocked_modules[i]) == 0)
            return true;
    return false;
}

static const char *const tensor_classes[] = {
    "DoubleTensor", "FloatTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
    "IntTensor",    "ShortTensor", "CharTensor", "ByteTensor",     "BoolTensor"};
static const char *const cuda_storages[] = {
    "DoubleStorage", "FloatStorage", "HalfStorage",          "BFloat16Storage",
    "LongStorage",   "IntStorage",   "ShortStorage",         "CharStorage",
    "ByteStorage",   "BoolStorage",  "ComplexDoubleStorage", "ComplexFloatStorage"};
static const char *const qschemes[] = {"per_tensor_affine", "per_tensor_symmetric",
                                       "per_channel_affine", "per_channel_symmetric",
                                       "per_channel_affine_float_qparams"};

static bool in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}
#define IN(name, list) in_list(name, list, sizeof list / sizeof *list)

typedef struct named_id {
    const char *module, *name;
    ptc__gid id;
    bool strict; /* also allowed by the strict policy */
} named_id;

static const named_id fixed[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT, true},
    {"collections", "Counter", G_COUNTER, false},
    {"torch.nn.parameter", "Parameter", G_PARAMETER, false},
    {"torch.serialization", "_get_layout", G_GET_LAYOUT, false},
    {"torch", "Size", G_SIZE, true},
    {"torch", "Tensor", G_TENSOR, false},
    {"torch", "device", G_DEVICE, true},
    {"_codecs", "encode", G_CODECS_ENCODE, true},
    {"builtins", "bytearray", G_BYTEARRAY, false},
    {"builtins", "set", G_SET, true},
    {"builtins", "complex", G_COMPLEX, true},
    {"torch.storage", "UntypedStorage", G_UNTYPED_STORAGE, true},
    {"torch.storage", "TypedStorage", G_TYPED_STORAGE, false},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, true},
    {"torch._utils", "_rebuild_parameter_with_state", G_REBUILD_PARAMETER_WITH_STATE, false},
    {"torch._utils", "_rebuild_qtensor", G_REBUILD_QTENSOR, false},
    {"torch._utils", "_rebuild_tensor", G_REBUILD_TENSOR, false},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR_V2, true},
    {"torch._utils", "_rebuild_tensor_v3", G_REBUILD_TENSOR_V3, true},
    {"torch._utils", "_rebuild_sparse_tensor", G_REBUILD_SPARSE, false},
    {"torch._utils", "_rebuild_meta_tensor_no_storage", G_REBUILD_META, false},
    {"torch._utils", "_rebuild_nested_tensor", G_REBUILD_NESTED, false},
    {"torch._utils", "_rebuild_wrapper_subclass", G_REBUILD_WRAPPER, false},
    {"torch._utils", "_rebuild_device_tensor_from_numpy", G_REBUILD_DEVICE_NUMPY, false},
    {"torch._utils", "_rebuild_device_tensor_from_cpu_tensor", G_REBUILD_DEVICE_CPU, false},
    {"torch._tensor", "_rebuild_from_type_v2", G_REBUILD_FROM_TYPE_V2, false},
};

/* The default allowlist as (id, strict) for module.name; G_NONE when not in it. */
static ptc__gid builtin_id(const char *module, const char *name, ptc_dtype *dtype, bool *strict)
{
    *strict = false;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        if (strcmp(module, fixed[i].module) == 0 && strcmp(name, fixed[i].name) == 0) {
            *strict = fixed[i].strict;
            return fixed[i].id;
        }
    }
    if (strcmp(module, "torch") == 0) {
        if (ptc_dtype_from_name(name, dtype) == 0) {
            *strict = true;
            return G_DTYPE;
        }
        if (ptc__dtype_from_storage_name(name, dtype) == 0) {
            *strict = true;
            return G_STORAGE;
        }
        if (IN(name, tensor_classes))
            return G_LEGACY_TENSOR_CLASS;
        if (IN(name, qschemes))
            return G_QSCHEME;
        return G_NONE;
    }
    if (strcmp(module, "torch.cuda") == 0) {
        if (IN(name, cuda_storages) && ptc__dtype_from_storage_name(name, dtype) == 0) {
            *strict = true;
            return G_STORAGE;
        }
        if (IN(name, tensor_classes))
            return G_LEGACY_TENSOR_CLASS;
        return G_NONE;
    }
    if (strcmp(module, "torch.sparse") == 0 || strcmp(module, "torch.cuda.sparse") == 0) {
        /* Sparse legacy classes: every tensor class except BoolTensor. */
        if (IN(name, tensor_classes) && strcmp(name, "BoolTensor") != 0)
            return G_LEGACY_TENSOR_CLASS;
    }
    return G_NONE;
}

/* The same lists as builtin_id, walked in order; builtin_id stays a direct lookup because it runs
 * for every GLOBAL of every file. tests/interop/check_corpus_torch.py checks that the two agree
 * (each name listed here is allowed, and each of torch's names allowed is listed). */
int ptc__policy_each_builtin(int (*fn)(void *ud, const char *module, const char *name, bool strict),
                             void *ud)
{
    int rc;
#define EACH(module, name, strict)                                                                 \
    do {                                                                                           \
        if ((rc = fn(ud, module, name, strict)) != 0)                                              \
            return rc;                                                                             \
    } while (0)
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        EACH(fixed[i].module, fixed[i].name, fixed[i].strict);
    for (int i = 0; i < PTC_DTYPE_COUNT; i++)
        EACH("torch", ptc__dtype_info_of((ptc_dtype)i)->name, true);
    for (int i = 0; i < PTC_DTYPE_COUNT; i++) {
        const char *storage = ptc__dtype_info_of((ptc_dtype)i)->storage_name;
        if (storage)
            EACH("torch", storage, true);
    }
    for (size_t i = 0; i < sizeof tensor_classes / sizeof *tensor_classes; i++)
        EACH("torch", tensor_classes[i], false);
    for (size_t i = 0; i < sizeof qschemes / sizeof *qschemes; i++)
        EACH("torch", qschemes[i], false);
    ptc_dtype dt;
    for (size_t i = 0; i < sizeof cuda_storages / sizeof *cuda_storages; i++)
        if (ptc__dtype_from_storage_name(cuda_storages[i], &dt) == 0)
            EACH("torch.cuda", cuda_storages[i], true);
    for (size_t i = 0; i < sizeof tensor_classes / sizeof *tensor_classes; i++)
        EACH("torch.cuda", tensor_classes[i], false);
    for (size_t i = 0; i < sizeof tensor_classes / sizeof *tensor_classes; i++) {
        if (strcmp(tensor_classes[i], "BoolTensor") == 0)
            continue;
        EACH("torch.sparse", tensor_classes[i], false);
        EACH("torch.cuda.sparse", tensor_classes[i], false);
    }
#undef EACH
    return 0;
}

int ptc__policy_lookup(const ptc_policy *p, const char *module, const char *name, ptc__gid *id,
                       ptc_dtype *dtype, const char *member, int64_t offset, ptc_error *err)
{
    char em[160], en[160];
    if (ptc__module_blocked(module))
        return ptc__err(err, PTC_EUNSAFE, member, offset,
                        "GLOBAL %s.%s is not allowed: module %s is blocked",
                        ptc__escape(em, sizeof em, module, strlen(module), true),
                        ptc__escape(en, sizeof en, name, strlen(name), true), em);
    bool strict;
    ptc__gid g = builtin_id(module, name, dtype, &strict);
    if (g != G_NONE && (p->base == PTC_POLICY_DEFAULT || strict)) {
        *id = g;
        return 0;
    }
    size_t ml = strlen(module), nl = strlen(name);
    for (size_t i = 0; i < p->nextra; i++) {
        const char *e = p->extra[i];
        if (strncmp(e, module, ml) == 0 && e[ml] == '.' && strcmp(e + ml + 1, name) == 0) {
            *id = g != G_NONE ? g : G_USER;
            return 0;
        }
    }
    (void)nl;
    return ptc__err(err, PTC_EUNSAFE, member, offset, "GLOBAL %s.%s is not allowed%s",
                    ptc__escape(em, sizeof em, module, ml, true),
                    ptc__escape(en, sizeof en, name, strlen(name), true),
                    g != G_NONE ? " by the strict policy" : "");
}

int ptc_policy_new(ptc_policy **out, ptc_policy_base base, ptc_error *err)
{
    if (!out || (base != PTC_POLICY_DEFAULT && base != PTC_POLICY_STRICT))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_policy_new: invalid arguments");
    ptc_policy *p = ptc__calloc(1, sizeof *p);
    if (!p)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    p->base = base;
    *out = p;
    return 0;
}

void ptc_policy_free(ptc_policy *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nextra; i++)
        ptc__free(p->extra[i]);
    ptc__free(p->extra);
    ptc__free(p);
}

int ptc_policy_allow_global(ptc_policy *p, const char *full, ptc_error *err)
{
    if (!p || !full)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_policy_allow_global: missing argument");
    const char *dot = strrchr(full, '.');
    if (!dot || dot == full || dot[1] == '\0')
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_policy_allow_global: \"%s\" is not of the form module.name", full);
    char module[256];
    size_t ml = (size_t)(dot - full);
    if (ml >= sizeof module)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_policy_allow_global: name too long");
    memcpy(module, full, ml);
    module[ml] = '\0';
    if (ptc__module_blocked(module))
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_policy_allow_global: module %s is blocked and can never be allowed",
                        module);
    if (p->nextra >= POLICY_MAX_EXTRA)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "ptc_policy_allow_global: a policy allows at most %d extra globals",
                        POLICY_MAX_EXTRA);
    if (p->nextra == p->capextra) {
        size_t cap = p->capextra ? p->capextra * 2 : 8;
        char **n = ptc__realloc(p->extra, cap * sizeof *n);
        if (!n)
            return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        p->extra = n;
        p->capextra = cap;
    }
    char *copy = ptc__strdup(full);
    if (!copy)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    p->extra[p->nextra++] = copy;
    return 0;
}

int ptc_policy_allows(const ptc_policy *p, const char *module, const char *name)
{
    if (!p || !module || !name)
        return 0;
    const char *m = module, *n = name;
    ptc__pickle_map_name(&m, &n);
    ptc__gid id;
    ptc_dtype dt;
    return ptc__policy_lookup(p, m, n, &id, &dt, NULL, -1, NULL) == 0;
}

/* ---- the static pre-scan -------------------------------------------------------------------- */

typedef struct prescan_ctx {
    const ptc_policy *policy;
    bool salvage; /* GLOBALs outside the policy are read symbolically */
    const char *member;
    bool after_stop; /* the scan is past the pickle's first STOP */
    ptc_error *err;
} prescan_ctx;

/* The verdict on one item; e gets the message without member and offset. */
static int prescan_check(const ptc_policy *policy, bool salvage, const ptc__scan_item *it,
                         ptc_error *e)
{
    char em[160], en[160];
    switch (it->kind) {
    case PTC__SCAN_GLOBAL: {
        if (it->opcode != 'c') /* STACK_GLOBAL or INST: names computed or called directly */
            return ptc__err(e, PTC_EUNSAFE, "", -1,
                            "%s %s.%s reaches a callable outside the weights-only subset",
                            ptc__pickle_opname(it->opcode),
                            ptc__escape(em, sizeof em, it->module, it->module_len, true),
                            ptc__escape(en, sizeof en, it->name, it->name_len, true));
        if (it->truncated || it->module_len != strlen(it->module) ||
            it->name_len != strlen(it->name) ||
            !ptc__utf8_valid((const uint8_t *)it->module, it->module_len) ||
            !ptc__utf8_valid((const uint8_t *)it->name, it->name_len))
            return ptc__err(e, PTC_EUNSAFE, "", -1,
                            "GLOBAL %s.%s is not a valid name and not allowed",
                            ptc__escape(em, sizeof em, it->module, it->module_len, false),
                            ptc__escape(en, sizeof en, it->name, it->name_len, false));
        if (salvage) /* any valid name becomes a symbolic global, allowed or not */
            return 0;
        const char *m = it->module, *n = it->name;
        ptc__pickle_map_name(&m, &n);
        ptc__gid id;
        ptc_dtype dt;
        return ptc__policy_lookup(policy, m, n, &id, &dt, "", -1, e);
    }
    case PTC__SCAN_DYNAMIC:
        return ptc__err(e, PTC_EUNSAFE, "", -1,
                        "%s computes a global at run time and is not allowed",
                        ptc__pickle_opname(it->opcode));
    case PTC__SCAN_OPCODE:
        if (it->opcode == 'o' || it->opcode == 0x92)
            return ptc__err(e, PTC_EUNSAFE, "", -1, "opcode %s calls a class and is not allowed",
                            ptc__pickle_opname(it->opcode));
        return 0;
    default:
        return 0;
    }
}

static int prescan_item(void *ud, const ptc__scan_item *it)
{
    prescan_ctx *c = ud;
    ptc_error e;
    int rc = prescan_check(c->policy, c->salvage, it, &e);
    if (rc == 0)
        return 0;
    /* torch 2.6 never reads past the first STOP: what the scan refuses there, ptc alone does. */
    if (c->after_stop)
        return ptc__err_stricter(c->err, rc, c->member, (int64_t)it->offset, "%s", e.message);
    return ptc__err(c->err, rc, c->member, (int64_t)it->offset, "%s", e.message);
}

int ptc__pth_prescan(const ptc_policy *p, bool salvage, const uint8_t *data, size_t len,
                     const char *member, uint64_t base_offset, bool whole, size_t *consumed,
                     ptc_error *err)
{
    prescan_ctx c = {p, salvage, member, false, err};
    ptc_error scan_err;
    size_t first = 0, rest = 0;
    int rc =
        ptc__pickle_scan(data, len, member, base_offset, true, prescan_item, &c, &first, &scan_err);
    /* With whole, the bytes after the first STOP are scanned as well, on their own. */
    if (rc == 0 && whole && first < len) {
        c.after_stop = true;
        rc = ptc__pickle_scan(data + first, len - first, member, base_offset + first, false,
                              prescan_item, &c, &rest, &scan_err);
    }
    if (consumed)
        *consumed = first + rest;
    if (rc == PTC_EUNSAFE)
        return rc; /* err was filled by prescan_item */
    /* A structural problem found by the scan is left for the machine to report precisely. */
    return 0;
}
