/*
 * safetensors.c - reading and writing safetensors files (huggingface/safetensors), the format
 * whose safety rules ptc's own loader borrows (docs/internals/safetensors.md, docs/security.md).
 *
 * On disk (all integers little-endian):
 *
 *     u64 N                 size of the header in bytes
 *     N bytes               the header: a UTF-8 JSON object, padded with spaces (writers pad N
 *                           to a multiple of 8 so that the data region is 8-byte aligned)
 *     data region           the tensors' bytes, row-major, little-endian
 *
 * The header maps each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets":
 * [begin, end]} (offsets relative to the data region) and may hold "__metadata__": {str: str}.
 *
 * What the reader accepts (everything else is PTC_EFORMAT, naming the tensor):
 *   - 2 <= N <= 100,000,000 (the reference implementation's cap) and N <= file size - 8;
 *   - the header is valid UTF-8, starts with '{', and after the JSON object holds only spaces;
 *     the object has no duplicate keys at any level (JSON_REJECT_DUPLICATES);
 *   - "__metadata__" is an object of strings (or null, as the Python library accepts);
 *   - every other entry is an object with exactly the fields dtype, shape and data_offsets; dtype
 *     one of the names below (F4, F6_E2M3, F6_E3M2 and F8_E8M0 are known to safetensors but have
 *     no ptc dtype: PTC_EUNSUPPORTED); shape a list of at most limits.max_ndim non-negative ints;
 *     data_offsets two non-negative ints, begin <= end;
 *   - end - begin == numel * element size, computed with overflow checks;
 *   - sorted by (begin, end), the tensors tile the data region exactly: the first begins at 0,
 *     each begins where the previous ends (no gap, no overlap), and the last ends at the end of
 *     the file (no trailing bytes, so no polyglot).
 * The reader is stricter than the Python library 0.8, which also accepts leading whitespace, tabs
 * and newlines as padding, duplicate keys (the last wins) and unknown fields in a tensor entry.
 * jansson cannot hold a NUL byte in an object key, so a tensor name or metadata key with "\u0000"
 * is refused (PTC_EFORMAT on read, PTC_EINVAL on write); NUL inside metadata values is fine.
 *
 * Before jansson sees the header, one pass over its bytes finds the end of the object, refuses
 * nesting deeper than a header has (3) and arrays longer than a shape can be, and estimates the
 * memory jansson's tree will take, which is charged to the checkpoint's heap budget: a header of
 * 100 MB of "0," would otherwise become gigabytes of JSON nodes.
 *
 * The checkpoint: the root is an OrderedDict of name -> tensor in header order (jansson keeps
 * object keys in file order), with {"__metadata__": {str: str}} as the dict's attributes when the
 * header has metadata. Each tensor has its own storage, keyed "0", "1", ... in header order, used
 * in place from the mapping when it is aligned for its dtype (always, for files the Python library
 * writes) and copied otherwise, or when opened with PTC_OPEN_COPY or through a read callback.
 *
 * The writer produces what the Python library (safetensors 0.8.0, measured) writes for the same
 * tensors: entries sorted by dtype in descending order of the library's Dtype enum (U64, I64, F64,
 * C64, F32, U32, I32, BF16, F16, U16, I16, F8_E5M2FNUZ, F8_E4M3FNUZ, F8_E4M3, F8_E5M2, I8, U8,
 * BOOL), then by name in byte order; "__metadata__" first; compact JSON as serde_json writes it
 * (jansson's output, with the hex digits of \u escapes made lowercase as serde_json spells them);
 * padding with spaces to a multiple of 8. The library keeps metadata in a hash map, so with more
 * than one metadata key its order varies from run to run; ptc writes the dict's order.
 */
#include "pth/pth.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000u
#define ST_MAX_DEPTH  3  /* root object, tensor entry / metadata, shape / data_offsets */
#define ST_NODE_BYTES 96 /* estimated heap of one jansson node, with malloc's overhead */

typedef struct st_dtype {
    const char *name;
    ptc_dtype dt;
} st_dtype;

/* In the order of the library's Dtype enum: the writer sorts by the reverse of this order. */
static const st_dtype st_dtypes[] = {
    {"BOOL", PTC_BOOL},
    {"U8", PTC_UINT8},
    {"I8", PTC_INT8},
    {"F8_E5M2", PTC_FLOAT8_E5M2},
    {"F8_E4M3", PTC_FLOAT8_E4M3FN},
    {"F8_E4M3FNUZ", PTC_FLOAT8_E4M3FNUZ},
    {"F8_E5M2FNUZ", PTC_FLOAT8_E5M2FNUZ},
    {"I16", PTC_INT16},
    {"U16", PTC_UINT16},
    {"F16", PTC_FLOAT16},
    {"BF16", PTC_BFLOAT16},
    {"I32", PTC_INT32},
    {"U32", PTC_UINT32},
    {"F32", PTC_FLOAT32},
    {"C64", PTC_COMPLEX64},
    {"F64", PTC_FLOAT64},
    {"I64", PTC_INT64},
    {"U64", PTC_UINT64},
};
#define ST_NDTYPES (sizeof st_dtypes / sizeof *st_dtypes)

/* Known to safetensors, without a ptc dtype (sub-byte and exponent-only formats). */
static const char *const st_unsupported[] = {"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0"};

static int st_rank_of(ptc_dtype dt)
{
    for (size_t i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt)
            return (int)i;
    return -1;
}

static bool host_is_little(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* A name from the file, escaped for a message. */
static const char *shown(char *buf, size_t n, const char *s, size_t len)
{
    return ptc__escape(buf, n, s, len, true);
}

/* ---- reading --------------------------------------------------------------------------------- */

/* The structural pass described at the top. h[0] is '{'. */
static int prescan(const uint8_t *h, size_t n, uint32_t max_items, size_t *end, uint64_t *nodes,
                   ptc_error *err)
{
    int depth = 0;
    bool in_str = false, is_array[ST_MAX_DEPTH + 1] = {false};
    uint32_t items[ST_MAX_DEPTH + 1] = {0};
    uint64_t count = 1;
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = h[i];
        if (in_str) {
            if (ch == '\\')
                i++; /* the escaped byte is never a quote that ends the string */
            else if (ch == '"')
                in_str = false;
            continue;
        }
        switch (ch) {
        case '"':
            in_str = true;
            break;
        case '{':
        case '[':
            if (++depth > ST_MAX_DEPTH)
                return ptc__err(err, PTC_EFORMAT, "", 8 + (int64_t)i,
                                "safetensors header nests deeper than %d levels", ST_MAX_DEPTH);
            is_array[depth] = ch == '[';
            items[depth] = 0;
            count++;
            break;
        case '}':
        case ']':
            if (--depth == 0) {
                *end = i + 1;
                *nodes = count;
                return 0;
            }
            break;
        case ',':
            count++;
            if (is_array[depth] && ++items[depth] >= max_items)
                return ptc__err(err, PTC_EFORMAT, "", 8 + (int64_t)i,
                                "safetensors header holds a list of more than %u items", max_items);
            break;
        case ':':
            count++;
            break;
        default:
            break;
        }
    }
    return ptc__err(err, PTC_EFORMAT, "", 8, "safetensors header: the JSON object never ends");
}

typedef struct st_entry {
    const char *name; /* borrowed from the JSON tree */
    size_t name_len;
    ptc_dtype dt;
    int ndim;
    int64_t *shape; /* [ndim], in the checkpoint's arena */
    int64_t numel;
    uint64_t begin, end;
    size_t order; /* position in the header */
} st_entry;

/* A non-negative JSON integer. */
static bool json_uint(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static int parse_entry(ptc_ckpt *c, const char *name, size_t name_len, json_t *v, st_entry *e,
                       ptc_error *err)
{
    char nm[160];
    shown(nm, sizeof nm, name, name_len);
    if (!json_is_object(v))
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "safetensors tensor \"%s\": its entry is not a JSON object", nm);
    json_t *dtype = NULL, *shape = NULL, *offs = NULL;
    for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
        const char *k = json_object_iter_key(it);
        size_t kl = json_object_iter_key_len(it);
        json_t *x = json_object_iter_value(it);
        if (kl == 5 && memcmp(k, "dtype", 5) == 0)
            dtype = x;
        else if (kl == 5 && memcmp(k, "shape", 5) == 0)
            shape = x;
        else if (kl == 12 && memcmp(k, "data_offsets", 12) == 0)
            offs = x;
        else {
            char kk[96];
            return ptc__err(err, PTC_EFORMAT, "", -1,
                            "safetensors tensor \"%s\": unexpected field \"%s\"", nm,
                            shown(kk, sizeof kk, k, kl));
        }
    }
    if (!dtype || !shape || !offs)
        return ptc__err(err, PTC_EFORMAT, "", -1, "safetensors tensor \"%s\": no %s field", nm,
                        !dtype   ? "dtype"
                        : !shape ? "shape"
                                 : "data_offsets");
    if (!json_is_string(dtype))
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "safetensors tensor \"%s\": dtype is not a string", nm);
    const char *ds = json_string_value(dtype);
    size_t dl = json_string_length(dtype);
    size_t k;
    for (k = 0; k < ST_NDTYPES; k++)
        if (strlen(st_dtypes[k].name) == dl && memcmp(st_dtypes[k].name, ds, dl) == 0)
            break;
    char dd[64];
    if (k == ST_NDTYPES) {
        for (size_t u = 0; u < sizeof st_unsupported / sizeof *st_unsupported; u++)
            if (strlen(st_unsupported[u]) == dl && memcmp(st_unsupported[u], ds, dl) == 0)
                return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                                "safetensors tensor \"%s\": dtype %s has no ptc equivalent", nm,
                                st_unsupported[u]);
        return ptc__err(err, PTC_EFORMAT, "", -1, "safetensors tensor \"%s\": unknown dtype \"%s\"",
                        nm, shown(dd, sizeof dd, ds, dl));
    }
    e->dt = st_dtypes[k].dt;
    if (!json_is_array(shape))
        return ptc__err(err, PTC_EFORMAT, "", -1, "safetensors tensor \"%s\": shape is not a list",
                        nm);
    size_t nd = json_array_size(shape);
    if (nd > c->limits.max_ndim)
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "safetensors tensor \"%s\" has %zu dimensions (limit %u)", nm, nd,
                        c->limits.max_ndim);
    e->ndim = (int)nd;
    e->shape = ptc__arena_alloc(c->arena, (nd ? nd : 1) * sizeof *e->shape);
    if (!e->shape)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    uint64_t numel = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t s;
        if (!json_uint(json_array_get(shape, d), &s) || s > INT64_MAX)
            return ptc__err(err, PTC_EFORMAT, "", -1,
                            "safetensors tensor \"%s\": shape[%zu] is not a non-negative integer",
                            nm, d);
        e->shape[d] = (int64_t)s;
        if (!ptc__mul_u64_ok(numel, s, &numel) || numel > INT64_MAX)
            return ptc__err(err, PTC_EFORMAT, "", -1,
                            "safetensors tensor \"%s\": element count overflows", nm);
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !json_uint(json_array_get(offs, 0), &e->begin) ||
        !json_uint(json_array_get(offs, 1), &e->end))
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "safetensors tensor \"%s\": data_offsets is not a list of two "
                        "non-negative integers",
                        nm);
    if (e->end < e->begin)
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "safetensors tensor \"%s\": data_offsets [%llu, %llu] end before they "
                        "begin",
                        nm, (unsigned long long)e->begin, (unsigned long long)e->end);
    uint64_t nbytes;
    if (!ptc__mul_u64_ok(numel, ptc_dtype_size(e->dt), &nbytes) || nbytes > INT64_MAX)
        return ptc__err(err, PTC_EFORMAT, "", -1, "safetensors tensor \"%s\": byte size overflows",
                        nm);
    if (e->end - e->begin != nbytes)
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "safetensors tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes but "
                        "%s shape of %llu elements needs %llu",
                        nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                        (unsigned long long)(e->end - e->begin), st_dtypes[k].name,
                        (unsigned long long)numel, (unsigned long long)nbytes);
    e->name = name;
    e->name_len = name_len;
    e->numel = (int64_t)numel;
    return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The tensors must tile [0, data_len) exactly. */
static int check_tiling(st_entry *ents, size_t n, uint64_t data_len, ptc_error *err)
{
    st_entry **by = ptc__calloc(n ? n : 1, sizeof *by);
    if (!by)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    for (size_t i = 0; i < n; i++)
        by[i] = &ents[i];
    qsort(by, n, sizeof *by, cmp_offsets);
    uint64_t pos = 0;
    int rc = 0;
    char a[160], b[160];
    for (size_t i = 0; i < n && rc == 0; i++) {
        const st_entry *e = by[i];
        if (e->begin > pos)
            rc = ptc__err(err, PTC_EFORMAT, "", -1,
                          "safetensors tensor \"%s\" begins at data offset %llu, leaving a gap of "
                          "%llu bytes after offset %llu that no tensor covers",
                          shown(a, sizeof a, e->name, e->name_len), (unsigned long long)e->begin,
                          (unsigned long long)(e->begin - pos), (unsigned long long)pos);
        else if (e->begin < pos)
            rc = ptc__err(err, PTC_EFORMAT, "", -1,
                          "safetensors tensor \"%s\" at data offsets [%llu, %llu] overlaps "
                          "tensor \"%s\", which ends at %llu",
                          shown(a, sizeof a, e->name, e->name_len), (unsigned long long)e->begin,
                          (unsigned long long)e->end,
                          shown(b, sizeof b, by[i - 1]->name, by[i - 1]->name_len),
                          (unsigned long long)pos);
        else if (e->end > data_len)
            rc = ptc__err(err, PTC_EFORMAT, "", -1,
                          "safetensors tensor \"%s\" ends at data offset %llu, beyond the %llu "
                          "bytes of data the file holds",
                          shown(a, sizeof a, e->name, e->name_len), (unsigned long long)e->end,
                          (unsigned long long)data_len);
        pos = e->end;
    }
    if (rc == 0 && pos != data_len)
        rc = ptc__err(err, PTC_EFORMAT, "", -1,
                      "safetensors data region holds %llu bytes after the last tensor, which ends "
                      "at data offset %llu",
                      (unsigned long long)(data_len - pos), (unsigned long long)pos);
    ptc__free(by);
    return rc;
}

static ptc_value *str_value(ptc__arena *a, const char *s, size_t n)
{
    return ptc__value_str(a, PTC_VALUE_STR, s, n);
}

/* "__metadata__" -> the dict's attributes {"__metadata__": {str: str}}. */
static int build_metadata(ptc_ckpt *c, json_t *meta, ptc_value *root, ptc_error *err)
{
    if (json_is_null(meta))
        return 0;
    if (!json_is_object(meta))
        return ptc__err(err, PTC_EFORMAT, "", -1, "safetensors __metadata__ is not an object");
    ptc_value *m = ptc__value_new(c->arena, PTC_VALUE_DICT);
    ptc_value *attrs = ptc__value_new(c->arena, PTC_VALUE_DICT);
    ptc_value *mk = str_value(c->arena, "__metadata__", 12);
    if (!m || !attrs || !mk)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    for (void *it = json_object_iter(meta); it; it = json_object_iter_next(meta, it)) {
        const char *k = json_object_iter_key(it);
        size_t kl = json_object_iter_key_len(it);
        json_t *v = json_object_iter_value(it);
        char kk[160];
        if (!json_is_string(v))
            return ptc__err(err, PTC_EFORMAT, "", -1,
                            "safetensors __metadata__ \"%s\" is not a string",
                            shown(kk, sizeof kk, k, kl));
        ptc_value *key = str_value(c->arena, k, kl);
        ptc_value *val = str_value(c->arena, json_string_value(v), json_string_length(v));
        if (!key || !val)
            return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        int rc = ptc__dict_set(c->arena, m, key, val, err, "", -1);
        if (rc < 0)
            return rc;
    }
    int rc = ptc__dict_set(c->arena, attrs, mk, m, err, "", -1);
    if (rc < 0)
        return rc;
    root->u.dict.attrs = attrs;
    return 0;
}

/* One tensor's storage: in place from the mapping when possible, else a copy. */
static int bind_storage(ptc_ckpt *c, const st_entry *e, uint64_t data_off, ptc_storage *s,
                        ptc_error *err)
{
    static const uint8_t empty[8];
    uint64_t nbytes = e->end - e->begin, off = data_off + e->begin;
    const uint8_t *map = ptc__source_map(c->src);
    size_t es = ptc_dtype_size(e->dt);
    bool swap = !host_is_little() && ptc__dtype_info_of(e->dt)->swap > 1;
    s->dtype = e->dt;
    s->nbytes = (int64_t)nbytes;
    s->referenced = true;
    if (nbytes == 0) {
        s->data = empty;
        s->mapped = map != NULL;
        return 0;
    }
    if (map && !swap && !(c->flags & PTC_OPEN_COPY) && (uintptr_t)(map + off) % es == 0) {
        s->data = map + off;
        s->mapped = true;
        return 0;
    }
    if (nbytes > SIZE_MAX)
        return ptc__err(err, PTC_ELIMIT, "", (int64_t)off, "tensor too large for this machine");
    char nm[160];
    if (ptc__budget_take(&c->budget, nbytes, err, "", (int64_t)off) < 0) {
        ptc__err_prefix(err,
                        "safetensors tensor \"%s\": ", shown(nm, sizeof nm, e->name, e->name_len));
        return PTC_ELIMIT;
    }
    uint8_t *p = ptc__malloc((size_t)nbytes);
    if (!p) {
        ptc__budget_give(&c->budget, nbytes);
        return ptc__err(err, PTC_ENOMEM, "", (int64_t)off, "out of memory copying %llu bytes",
                        (unsigned long long)nbytes);
    }
    int rc = 0;
    if (map)
        memcpy(p, map + off, (size_t)nbytes);
    else
        rc = ptc__source_read(c->src, off, p, (size_t)nbytes, err);
    if (rc < 0) {
        ptc__free(p);
        ptc__budget_give(&c->budget, nbytes);
        return rc;
    }
    if (swap)
        ptc__byteswap(p, (size_t)nbytes, e->dt);
    s->data = p;
    s->owned = p;
    s->mapped = false;
    return 0;
}

static int build_tensors(ptc_ckpt *c, st_entry *ents, size_t n, uint64_t data_off, ptc_value *root,
                         ptc_error *err)
{
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = &ents[i];
        char key[24];
        snprintf(key, sizeof key, "%zu", i);
        ptc_storage *s = ptc__arena_alloc(c->arena, sizeof *s);
        ptc_tensor *t = ptc__arena_alloc(c->arena, sizeof *t);
        int64_t *dims = ptc__arena_alloc(c->arena, 2 * (size_t)(e->ndim ? e->ndim : 1) * 8);
        ptc_value *v = ptc__value_new(c->arena, PTC_VALUE_TENSOR);
        ptc_value *k = str_value(c->arena, e->name, e->name_len);
        if (!s || !t || !dims || !v || !k ||
            !(s->key = ptc__arena_strndup(c->arena, key, strlen(key))) ||
            !(s->location = ptc__arena_strndup(c->arena, "cpu", 3)))
            return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        /* Registered before its bytes are bound, so that the checkpoint owns any copy made. */
        int rc = ptc__ckpt_add_storage(c, s, err);
        if (rc < 0 || (rc = bind_storage(c, e, data_off, s, err)) < 0)
            return rc;
        t->dtype = e->dt;
        t->ndim = e->ndim;
        t->shape = dims;
        t->stride = dims + (e->ndim ? e->ndim : 1);
        int64_t stride = 1;
        for (int d = e->ndim - 1; d >= 0; d--) {
            t->shape[d] = e->shape[d];
            t->stride[d] = stride;
            /* Sizes of 0 count as 1, as in torch's contiguous strides; with a 0 elsewhere the
             * product of the others was never checked. */
            if (d > 0 && !ptc__mul_i64_ok(stride, e->shape[d] ? e->shape[d] : 1, &stride)) {
                char nm[160];
                return ptc__err(err, PTC_EFORMAT, "", -1,
                                "safetensors tensor \"%s\": strides overflow",
                                shown(nm, sizeof nm, e->name, e->name_len));
            }
        }
        t->numel = e->numel;
        t->storage = s;
        if ((rc = ptc__tensor_check(t, c->limits.max_ndim, "", -1, err)) < 0)
            return rc;
        v->u.t = t;
        if ((rc = ptc__dict_set(c->arena, root, k, v, err, "", -1)) < 0)
            return rc;
    }
    return 0;
}

int ptc__load_safetensors(ptc_ckpt *c, ptc_error *err)
{
    uint64_t size = ptc__source_size(c->src);
    uint8_t nb[8];
    if (size < 8)
        return ptc__err(err, PTC_EFORMAT, "", 0, "safetensors file of %llu bytes has no header",
                        (unsigned long long)size);
    int rc = ptc__source_read(c->src, 0, nb, 8, err);
    if (rc < 0)
        return rc;
    uint64_t n = ptc__le64(nb);
    if (n > ST_MAX_HEADER)
        return ptc__err(err, PTC_EFORMAT, "", 0,
                        "safetensors header size %llu exceeds the limit of %u bytes",
                        (unsigned long long)n, ST_MAX_HEADER);
    if (n > size - 8)
        return ptc__err(err, PTC_EFORMAT, "", 0,
                        "safetensors header size %llu runs past the end of the %llu-byte file",
                        (unsigned long long)n, (unsigned long long)size);
    if (n < 2)
        return ptc__err(err, PTC_EFORMAT, "", 0, "safetensors header size %llu is too small",
                        (unsigned long long)n);
    c->nops = n; /* each value of the header takes at least one of its bytes */

    /* The header bytes: in place when the file is mapped, else read into a charged buffer. */
    const uint8_t *map = ptc__source_map(c->src);
    uint8_t *copy = NULL;
    const uint8_t *h = map ? map + 8 : NULL;
    uint64_t charged = 0, data_off = 8 + n;
    json_t *root_json = NULL;
    st_entry *ents = NULL;
    size_t nents = 0, end = 0;
    uint64_t nodes = 0;
    ptc_value *root = NULL;
    json_error_t jerr;
    if (!h) {
        if ((rc = ptc__budget_take(&c->budget, n, err, "", 8)) < 0)
            return rc;
        charged = n;
        copy = ptc__malloc((size_t)n);
        if (!copy) {
            rc = ptc__err(err, PTC_ENOMEM, "", 8, "out of memory reading the header");
            goto fail;
        }
        if ((rc = ptc__source_read(c->src, 8, copy, (size_t)n, err)) < 0)
            goto fail;
        h = copy;
    }
    if (h[0] != '{') {
        char b[16];
        rc = ptc__err(err, PTC_EFORMAT, "", 8, "safetensors header must start with '{', not '%s'",
                      ptc__escape(b, sizeof b, h, 1, false));
        goto fail;
    }
    if (!ptc__utf8_valid(h, (size_t)n)) {
        rc = ptc__err(err, PTC_EFORMAT, "", 8, "safetensors header is not valid UTF-8");
        goto fail;
    }
    uint32_t max_items = c->limits.max_ndim > 2 ? c->limits.max_ndim : 2;
    if ((rc = prescan(h, (size_t)n, max_items, &end, &nodes, err)) < 0)
        goto fail;
    for (size_t i = end; i < n; i++) {
        if (h[i] != ' ') {
            char b[16];
            rc = ptc__err(err, PTC_EFORMAT, "", 8 + (int64_t)i,
                          "safetensors header holds '%s' after its JSON object; only spaces may "
                          "pad it",
                          ptc__escape(b, sizeof b, h + i, 1, false));
            goto fail;
        }
    }
    if (nodes > c->limits.max_objects) {
        rc = ptc__err(err, PTC_ELIMIT, "", 8,
                      "safetensors header holds about %llu JSON values (limit %llu)",
                      (unsigned long long)nodes, (unsigned long long)c->limits.max_objects);
        goto fail;
    }
    uint64_t tree = nodes * ST_NODE_BYTES + end;
    if ((rc = ptc__budget_take(&c->budget, tree, err, "", 8)) < 0) {
        ptc__err_prefix(err, "parsing the safetensors header: ");
        goto fail;
    }
    charged += tree;

    root_json = json_loadb((const char *)h, end, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root_json) {
        char t[200];
        rc = ptc__err(err, PTC_EFORMAT, "", 8 + (int64_t)jerr.position,
                      "safetensors header is not valid JSON: %s",
                      ptc__escape(t, sizeof t, jerr.text, strlen(jerr.text), true));
        goto fail;
    }
    if (!json_is_object(root_json)) { /* cannot happen after '{', kept for clarity */
        rc = ptc__err(err, PTC_EFORMAT, "", 8, "safetensors header is not a JSON object");
        goto fail;
    }
    size_t nkeys = json_object_size(root_json);
    if (nkeys > c->limits.max_records) {
        rc = ptc__err(err, PTC_ELIMIT, "", 8, "safetensors header lists %zu tensors (limit %llu)",
                      nkeys, (unsigned long long)c->limits.max_records);
        goto fail;
    }
    if ((rc = ptc__budget_take(&c->budget, (uint64_t)nkeys * sizeof *ents, err, "", 8)) < 0)
        goto fail;
    charged += (uint64_t)nkeys * sizeof *ents;
    ents = ptc__calloc(nkeys ? nkeys : 1, sizeof *ents);
    if (!ents) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        goto fail;
    }
    root = ptc__value_new(c->arena, PTC_VALUE_DICT);
    if (!root) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        goto fail;
    }
    root->flags = PTC__V_ORDERED;
    for (void *it = json_object_iter(root_json); it; it = json_object_iter_next(root_json, it)) {
        const char *k = json_object_iter_key(it);
        size_t kl = json_object_iter_key_len(it);
        json_t *v = json_object_iter_value(it);
        if (kl == 12 && memcmp(k, "__metadata__", 12) == 0) {
            if ((rc = build_metadata(c, v, root, err)) < 0)
                goto fail;
            continue;
        }
        ents[nents].order = nents;
        if ((rc = parse_entry(c, k, kl, v, &ents[nents], err)) < 0)
            goto fail;
        nents++;
    }
    if ((rc = check_tiling(ents, nents, size - data_off, err)) < 0)
        goto fail;
    if ((rc = build_tensors(c, ents, nents, data_off, root, err)) < 0)
        goto fail;
    c->root = root;
    rc = 0;
fail:
    ptc__free(ents);
    json_decref(root_json);
    ptc__free(copy);
    ptc__budget_give(&c->budget, charged);
    return rc;
}

/* ---- writing --------------------------------------------------------------------------------- */

typedef struct wr_entry {
    const char *name;
    size_t name_len;
    const ptc_tensor *t;
    int rank;
    uint64_t begin, end;
} wr_entry;

/* Descending dtype rank, then the names in byte order (Rust's String ordering). */
static int cmp_write(const void *a, const void *b)
{
    const wr_entry *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank > y->rank ? -1 : 1;
    size_t m = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, m);
    if (c)
        return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

/* jansson writes "\u001F", serde_json "\u001f": lowercase every \u escape's hex digits. JSON
 * output has backslashes only inside strings, each starting an escape. */
static void lowercase_escapes(char *s)
{
    for (; *s; s++) {
        if (*s != '\\')
            continue;
        if (s[1] == 'u')
            for (int k = 2; k < 6 && s[k]; k++)
                if (s[k] >= 'A' && s[k] <= 'F')
                    s[k] = (char)(s[k] - 'A' + 'a');
        if (s[1])
            s++;
    }
}

/* Checks the metadata dict: str -> str. */
static int check_metadata(const ptc_value *m, ptc_error *err)
{
    if (ptc_value_kind_of(m) != PTC_VALUE_DICT)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "safetensors metadata must be a dict of str to str, not a %s",
                        ptc_value_kind_name(ptc_value_kind_of(m)));
    for (size_t i = 0; i < ptc_value_len(m); i++) {
        const ptc_value *k = ptc_dict_key(m, i), *v = ptc_dict_value(m, i);
        if (ptc_value_kind_of(k) != PTC_VALUE_STR || ptc_value_kind_of(v) != PTC_VALUE_STR)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "safetensors metadata must be a dict of str to str; item %zu is %s "
                            "to %s",
                            i, ptc_value_kind_name(ptc_value_kind_of(k)),
                            ptc_value_kind_name(ptc_value_kind_of(v)));
    }
    return 0;
}

/* The header JSON, padded: a new buffer (ptc__malloc) in *out of *len bytes. */
static int build_header(const wr_entry *ents, size_t n, const ptc_value *meta, char **out,
                        size_t *len, ptc_error *err)
{
    char *buf = NULL;
    int rc;
    json_t *root = json_object();
    if (!root)
        goto nomem;
    if (meta) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m) != 0)
            goto nomem;
        for (size_t i = 0; i < ptc_value_len(meta); i++) {
            const char *k, *v;
            size_t kl, vl;
            ptc_value_str(ptc_dict_key(meta, i), &k, &kl);
            ptc_value_str(ptc_dict_value(meta, i), &v, &vl);
            if (json_object_setn_new(m, k, kl, json_stringn(v, vl)) != 0)
                goto nomem;
        }
    }
    /* Each container is attached to its parent as soon as it exists, so that freeing the root
     * frees everything (the *_new calls take the reference even when they fail). Fields go in
     * the order the library writes them: dtype, shape, data_offsets. */
    for (size_t i = 0; i < n; i++) {
        const wr_entry *e = &ents[i];
        json_t *info = json_object();
        if (json_object_setn_new(root, e->name, e->name_len, info) < 0)
            goto nomem; /* info is gone */
        json_t *shape = json_array(), *offs = json_array();
        int r1 = json_object_set_new(info, "dtype", json_string(st_dtypes[e->rank].name));
        int r2 = json_object_set_new(info, "shape", shape);
        int r3 = json_object_set_new(info, "data_offsets", offs);
        if (r1 != 0 || r2 != 0 || r3 != 0)
            goto nomem;
        for (int d = 0; d < ptc_tensor_ndim(e->t); d++)
            if (json_array_append_new(shape, json_integer(ptc_tensor_shape(e->t)[d])) != 0)
                goto nomem;
        if (json_array_append_new(offs, json_integer((json_int_t)e->begin)) != 0 ||
            json_array_append_new(offs, json_integer((json_int_t)e->end)) != 0)
            goto nomem;
    }
    /* Measured first, then dumped into memory of the library's allocator. */
    size_t tl = json_dumpb(root, NULL, 0, JSON_COMPACT);
    size_t padded = (tl + 7) / 8 * 8;
    if (tl && padded > ST_MAX_HEADER) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1,
                      "the safetensors header would take %zu bytes; readers refuse more than %u",
                      padded, ST_MAX_HEADER);
        goto fail;
    }
    if (!tl || !(buf = ptc__malloc(padded + 1)) || json_dumpb(root, buf, tl, JSON_COMPACT) != tl)
        goto nomem;
    json_decref(root);
    buf[tl] = '\0';
    lowercase_escapes(buf);
    memset(buf + tl, ' ', padded - tl);
    *out = buf;
    *len = padded;
    return 0;
nomem:
    rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory building the safetensors header");
fail:
    json_decref(root);
    ptc__free(buf);
    return rc;
}

typedef struct wr_ctx {
    ptc__afile *f;
    ptc_error *err;
    const ptc_save_params *p;
    uint64_t total;
} wr_ctx;

static int write_sink(void *ud, const uint8_t *p, size_t n)
{
    wr_ctx *w = ud;
    int rc = ptc__afile_write(w->f, p, n, w->err);
    if (rc == 0 && w->p && w->p->progress)
        w->p->progress(w->p->progress_ctx, ptc__afile_offset(w->f), w->total);
    return rc;
}

int ptc__save_safetensors(const ptc_value *root, const char *path, const ptc_save_params *p,
                          ptc_error *err)
{
    if (!root || !path)
        return ptc__err(err, PTC_EINVAL, "", -1, "safetensors: missing value or path");
    if (ptc_value_kind_of(root) != PTC_VALUE_DICT)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "safetensors holds a dict of str to tensor; the value is a %s",
                        ptc_value_kind_name(ptc_value_kind_of(root)));
    const ptc_value *meta = p ? p->metadata : NULL;
    /* A dict read from a safetensors file carries its "__metadata__" as an attribute; writing it
     * back keeps it unless the caller gives other metadata. */
    if (!meta)
        meta = ptc_dict_get(ptc_dict_attrs(root), "__metadata__");
    int rc;
    if (meta && (rc = check_metadata(meta, err)) < 0)
        return rc;
    size_t n = ptc_value_len(root);
    wr_entry *ents = ptc__calloc(n ? n : 1, sizeof *ents);
    if (!ents)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    char *header = NULL;
    size_t hlen = 0;
    ptc__afile *f = NULL;
    char nm[160];
    for (size_t i = 0; i < n; i++) {
        const ptc_value *k = ptc_dict_key(root, i), *v = ptc_dict_value(root, i);
        wr_entry *e = &ents[i];
        if (ptc_value_kind_of(k) != PTC_VALUE_STR) {
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "safetensors tensor names are str; key %zu is a %s", i,
                          ptc_value_kind_name(ptc_value_kind_of(k)));
            goto fail;
        }
        ptc_value_str(k, &e->name, &e->name_len);
        shown(nm, sizeof nm, e->name, e->name_len);
        e->t = ptc_value_tensor(v);
        if (!e->t) {
            rc = ptc__err(err, PTC_EINVAL, "", -1, "safetensors holds only tensors; \"%s\" is a %s",
                          nm, ptc_value_kind_name(ptc_value_kind_of(v)));
            goto fail;
        }
        if (e->name_len == 12 && memcmp(e->name, "__metadata__", 12) == 0) {
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "a tensor cannot be named __metadata__ in safetensors");
            goto fail;
        }
        if (!ptc__utf8_valid((const uint8_t *)e->name, e->name_len)) {
            rc = ptc__err(err, PTC_EINVAL, "", -1, "tensor name \"%s\" is not valid UTF-8", nm);
            goto fail;
        }
        if (memchr(e->name, 0, e->name_len)) {
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "tensor name \"%s\" holds a NUL byte, which no JSON object key read "
                          "by ptc may hold",
                          nm);
            goto fail;
        }
        e->rank = st_rank_of(ptc_tensor_dtype(e->t));
        if (e->rank < 0) {
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "tensor \"%s\" is %s, which safetensors cannot store", nm,
                          ptc_dtype_name(ptc_tensor_dtype(e->t)));
            goto fail;
        }
    }
    if (meta) {
        for (size_t i = 0; i < ptc_value_len(meta); i++) {
            const char *s;
            size_t sl;
            for (int kv = 0; kv < 2; kv++) {
                ptc_value_str(kv ? ptc_dict_value(meta, i) : ptc_dict_key(meta, i), &s, &sl);
                if (!ptc__utf8_valid((const uint8_t *)s, sl) || (!kv && memchr(s, 0, sl))) {
                    rc = ptc__err(err, PTC_EINVAL, "", -1,
                                  "safetensors metadata item %zu is not valid UTF-8 or has a NUL "
                                  "byte in its key",
                                  i);
                    goto fail;
                }
            }
        }
    }
    qsort(ents, n, sizeof *ents, cmp_write);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        ents[i].begin = off;
        if (!ptc__add_u64_ok(off, (uint64_t)ptc_tensor_nbytes(ents[i].t), &off) ||
            off > INT64_MAX) {
            rc = ptc__err(err, PTC_EINVAL, "", -1, "the tensors' total size overflows");
            goto fail;
        }
        ents[i].end = off;
    }
    /* safetensors stores every tensor contiguously: a view larger than its storage (a stride-0
     * expand of one element to 2^40) is written out whole, so the bytes are charged first. */
    if (p && p->budget && (rc = ptc_budget_charge(p->budget, (uint64_t)n + 1, off, err)) < 0) {
        char where[160], big[320] = "";
        const wr_entry *worst = NULL;
        uint64_t wn = 0;
        for (size_t i = 0; i < n; i++) {
            const ptc_storage *st = ptc_tensor_storage(ents[i].t);
            uint64_t tn = ents[i].end - ents[i].begin;
            if (st && tn > (uint64_t)ptc_storage_nbytes(st) && tn > wn) {
                worst = &ents[i];
                wn = tn;
            }
        }
        if (worst) {
            shown(nm, sizeof nm, worst->name, worst->name_len);
            snprintf(big, sizeof big, " (\"%.80s\" is a view of %llu bytes over a storage of %llu)",
                     nm, (unsigned long long)wn,
                     (unsigned long long)ptc_storage_nbytes(ptc_tensor_storage(worst->t)));
        }
        ptc__escape(where, sizeof where, path, strlen(path), true);
        ptc__err_prefix(err,
                        "%s: safetensors stores every tensor contiguously, so this would "
                        "write %llu bytes of tensor data%s: ",
                        where, (unsigned long long)off, big);
        goto fail;
    }
    if ((rc = build_header(ents, n, meta, &header, &hlen, err)) < 0)
        goto fail;
    uint8_t nb[8];
    ptc__put_le64(nb, hlen);
    wr_ctx w = {NULL, err, p, 8 + hlen + off};
    if ((rc = ptc__afile_open(&f, path, err)) < 0)
        goto fail;
    w.f = f;
    if ((rc = write_sink(&w, nb, 8)) < 0 ||
        (rc = write_sink(&w, (const uint8_t *)header, hlen)) < 0)
        goto fail;
    for (size_t i = 0; i < n; i++)
        if ((rc = ptc__tensor_readout(ents[i].t, write_sink, &w, err)) < 0)
            goto fail;
    rc = ptc__afile_commit(f, err);
    f = NULL; /* commit frees the handle, success or not */
fail:
    ptc__afile_abort(f);
    ptc__free(header);
    ptc__free(ents);
    return rc;
}
