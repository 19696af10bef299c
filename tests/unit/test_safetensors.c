/*
 * test_safetensors.c - the safetensors reader and writer (lib/pth/safetensors.c).
 *
 *   1. Files written by the Python safetensors library (testdata/safetensors/, made by
 *      tests/interop/gen_safetensors.py; versions in its manifest.json): dtypes, shapes, sha256 of
 *      every tensor, header order, metadata, zero-copy storages, and the same through memory,
 *      callback and PTC_OPEN_COPY.
 *   2. Every rejection rule, on files made here: header size (too small, too large, past the end),
 *      header start and padding, UTF-8, JSON syntax, duplicate keys, fields, dtypes, shapes,
 *      offsets (gap, overlap, trailing bytes, truncation, size mismatch, overflow), metadata,
 *      limits. Each must fail with its code and a message naming the problem.
 *   3. Writing: load -> write -> load keeps every tensor and the metadata; the bytes ptc writes
 *      equal the library's for every fixture, from the .safetensors file itself and from a torch
 *      .pt file holding the same tensors in another order and as views; writer argument errors;
 *      no file and no temporary file is left behind by a refused save.
 */
#include "pth/pth.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char st_dir[4096];
static char tmp_dir[4096];
static json_t *manifest;

static const char *fixture(const char *name, const char *ext)
{
    static char path[4300];
    snprintf(path, sizeof path, "%s/%s%s", st_dir, name, ext);
    return path;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void hex(char out[65], const uint8_t d[32])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* ---- 1. library-written files ---------------------------------------------------------------- */

typedef struct mem_ctx {
    const uint8_t *p;
    size_t n;
} mem_ctx;

static int64_t read_cb(void *ctx, uint64_t off, void *buf, size_t len)
{
    mem_ctx *m = ctx;
    if (off > m->n)
        return -1;
    size_t k = m->n - off < len ? m->n - off : len;
    memcpy(buf, m->p + off, k);
    return (int64_t)k;
}

/* Compares an open checkpoint with the manifest entry of its fixture. */
static void check_against_manifest(const char *name, ptc_ckpt *c, int expect_mapped)
{
    json_t *fx = json_object_get(json_object_get(manifest, "files"), name);
    json_t *tensors = json_object_get(fx, "tensors");
    CHECK(fx && tensors);
    if (!fx || !tensors)
        return;
    CHECK_INT(ptc_ckpt_format(c), PTC_FORMAT_SAFETENSORS);
    const ptc_value *root = ptc_ckpt_root(c);
    CHECK_INT(ptc_value_kind_of(root), PTC_VALUE_DICT);
    CHECK(ptc_dict_is_ordered(root));
    CHECK_INT(ptc_value_len(root), json_array_size(tensors));
    CHECK_INT(ptc_ckpt_nstorages(c), json_array_size(tensors));
    for (size_t i = 0; i < json_array_size(tensors) && i < ptc_value_len(root); i++) {
        json_t *e = json_array_get(tensors, i);
        const char *kn;
        size_t kl;
        CHECK_INT(ptc_value_str(ptc_dict_key(root, i), &kn, &kl), 0);
        json_t *jn = json_object_get(e, "name");
        CHECK(kl == json_string_length(jn) && memcmp(kn, json_string_value(jn), kl) == 0);
        const ptc_tensor *t = ptc_value_tensor(ptc_dict_value(root, i));
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK_STR(ptc_dtype_name(ptc_tensor_dtype(t)),
                  json_string_value(json_object_get(e, "dtype")));
        json_t *shape = json_object_get(e, "shape");
        CHECK_INT(ptc_tensor_ndim(t), json_array_size(shape));
        for (size_t d = 0; d < json_array_size(shape) && (int)d < ptc_tensor_ndim(t); d++)
            CHECK_INT(ptc_tensor_shape(t)[d], json_integer_value(json_array_get(shape, d)));
        CHECK(ptc_tensor_is_contiguous(t));
        uint8_t dg[32];
        char hx[65];
        ptc_error err;
        CHECK_INT(ptc_tensor_sha256(t, dg, &err), 0);
        hex(hx, dg);
        CHECK_STR(hx, json_string_value(json_object_get(e, "sha256")));
        const ptc_storage *s = ptc_tensor_storage(t);
        char key[32];
        snprintf(key, sizeof key, "%zu", i);
        CHECK_STR(ptc_storage_key(s), key);
        CHECK_STR(ptc_storage_location(s), "cpu");
        CHECK_INT(ptc_storage_nbytes(s), ptc_tensor_nbytes(t));
        if (ptc_tensor_nbytes(t) > 0) {
            CHECK_INT(ptc_storage_is_mapped(s), expect_mapped);
            CHECK((uintptr_t)ptc_storage_data(s) % ptc_dtype_size(ptc_tensor_dtype(t)) == 0);
        }
    }
    /* Metadata: the dict's attributes {"__metadata__": {...}}. */
    json_t *meta = json_object_get(fx, "metadata");
    const ptc_value *attrs = ptc_dict_attrs(root);
    if (!meta || json_is_null(meta)) {
        CHECK(attrs == NULL);
    } else {
        const ptc_value *m = ptc_dict_get(attrs, "__metadata__");
        CHECK(m && ptc_value_kind_of(m) == PTC_VALUE_DICT);
        CHECK_INT(ptc_value_len(m), json_object_size(meta));
        size_t i = 0;
        for (void *it = json_object_iter(meta); it && m; it = json_object_iter_next(meta, it)) {
            const char *k, *v;
            size_t klen, vlen;
            CHECK_INT(ptc_value_str(ptc_dict_key(m, i), &k, &klen), 0);
            CHECK_INT(ptc_value_str(ptc_dict_value(m, i), &v, &vlen), 0);
            json_t *jv = json_object_iter_value(it);
            CHECK(klen == json_object_iter_key_len(it) &&
                  memcmp(k, json_object_iter_key(it), klen) == 0);
            CHECK(vlen == json_string_length(jv) && memcmp(v, json_string_value(jv), vlen) == 0);
            i++;
        }
    }
}

static const char *const fixtures[] = {"basic", "nometa", "empty", "empty_meta", "escapes", "big"};

/* Written by the library, refused by ptc: jansson cannot hold a NUL byte in an object key. */
static void test_nul_name(void)
{
    ptc_ckpt *c = NULL;
    ptc_error err;
    CHECK_CODE(ptc_ckpt_open(&c, fixture("nul_name", ".safetensors"), NULL, &err), PTC_EFORMAT,
               &err);
    CHECK(strstr(err.message, "NUL") != NULL);
    ptc_ckpt_close(c);
}
#define NFIXTURES (sizeof fixtures / sizeof *fixtures)

static void test_library_files(void)
{
    for (size_t f = 0; f < NFIXTURES; f++) {
        const char *name = fixtures[f];
        ptc_ckpt *c = NULL;
        ptc_error err;
        int rc = ptc_ckpt_open(&c, fixture(name, ".safetensors"), NULL, &err);
        CHECK_CODE(rc, 0, &err);
        if (rc == 0)
            check_against_manifest(name, c, 1);
        ptc_ckpt_close(c);

        size_t len;
        uint8_t *buf = slurp(fixture(name, ".safetensors"), &len);
        CHECK(buf != NULL);
        if (!buf)
            continue;
        ptc_open_params p;
        ptc_open_params_default(&p);
        p.flags = PTC_OPEN_COPY;
        c = NULL;
        CHECK_CODE(rc = ptc_ckpt_open_memory(&c, buf, len, &p, &err), 0, &err);
        if (rc == 0)
            check_against_manifest(name, c, 0);
        ptc_ckpt_close(c);
        mem_ctx m = {buf, len};
        c = NULL;
        CHECK_CODE(rc = ptc_ckpt_open_callback(&c, read_cb, &m, len, NULL, &err), 0, &err);
        if (rc == 0)
            check_against_manifest(name, c, 0);
        ptc_ckpt_close(c);
        free(buf);
    }
    /* A few values spelled out (the generator's arange / tensor literals). */
    ptc_ckpt *c = NULL;
    ptc_error err;
    if (ptc_ckpt_open(&c, fixture("basic", ".safetensors"), NULL, &err) == 0) {
        const ptc_value *root = ptc_ckpt_root(c);
        float a[5];
        const ptc_tensor *t = ptc_state_dict_get(root, "a");
        CHECK(t && ptc_tensor_read(t, a, sizeof a, &err) == 0 && a[0] == 0 && a[4] == 4);
        t = ptc_state_dict_get(root, "layer.weight");
        CHECK(t && ptc_tensor_ndim(t) == 2 && ptc_tensor_shape(t)[0] == 3 &&
              ptc_tensor_shape(t)[1] == 4 && ((const float *)ptc_tensor_data(t))[11] == 11.0f / 8);
        t = ptc_state_dict_get(root, "scalar");
        CHECK(t && ptc_tensor_ndim(t) == 0 && *(const double *)ptc_tensor_data(t) == 2.5);
        t = ptc_state_dict_get(root, "u64");
        CHECK(t && ptc_tensor_dtype(t) == PTC_UINT64 &&
              ((const uint64_t *)ptc_tensor_data(t))[1] == (1ull << 63) + 5);
        t = ptc_state_dict_get(root, "empty3d");
        CHECK(t && ptc_tensor_numel(t) == 0 && ptc_tensor_shape(t)[2] == 3);
    } else {
        CHECK(!"basic.safetensors opens");
    }
    ptc_ckpt_close(c);
}

/* ---- 2. rejections --------------------------------------------------------------------------- */

/* A file: u64 N (given, or the header's length when n_override is ~0), the header, data_len
 * bytes of data (0, 1, 2, ...). */
static uint8_t *make(const char *header, size_t hlen, uint64_t n_override, size_t data_len,
                     size_t *len)
{
    uint64_t n = n_override == ~0ull ? hlen : n_override;
    *len = 8 + hlen + data_len;
    uint8_t *b = malloc(*len);
    if (!b)
        abort();
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hlen + i] = (uint8_t)i;
    return b;
}

typedef struct bad_case {
    const char *what;
    const char *header; /* NULL: see hlen */
    size_t data_len;
    int code;
    const char *needle; /* must appear in the message */
} bad_case;

#define T4 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static int open_bytes(const uint8_t *b, size_t len, const ptc_limits *lim, ptc_ckpt **c,
                      ptc_error *err)
{
    ptc_open_params p;
    ptc_open_params_default(&p);
    p.limits = lim;
    *c = NULL;
    return ptc_ckpt_open_memory(c, b, len, &p, err);
}

static void expect(const char *what, const uint8_t *b, size_t len, const ptc_limits *lim, int code,
                   const char *needle)
{
    ptc_ckpt *c;
    ptc_error err;
    memset(&err, 0, sizeof err);
    int rc = open_bytes(b, len, lim, &c, &err);
    check_count++;
    if (rc != code || (needle && !strstr(err.message, needle))) {
        check_failures++;
        fprintf(stderr, "%s: got %s \"%s\", expected %s with \"%s\"\n", what, ptc_err_name(rc),
                err.message, ptc_err_name(code), needle ? needle : "");
    }
    ptc_ckpt_close(c);
}

static void test_rejections(void)
{
    static const bad_case cases[] = {
        {"ok, one tensor", "{\"t\":" T4 "}", 4, 0, NULL},
        {"gap before the first", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, PTC_EFORMAT, "gap of 4 bytes"},
        {"gap between",
         "{\"a\":" T4 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[8,12]}}",
         12, PTC_EFORMAT, "gap"},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, PTC_EFORMAT, "overlaps"},
        {"same range twice", "{\"a\":" T4 ",\"b\":" T4 "}", 4, PTC_EFORMAT, "overlaps"},
        {"trailing bytes", "{\"t\":" T4 "}", 5, PTC_EFORMAT, "1 bytes after the last tensor"},
        {"no tensors, trailing bytes", "{}", 3, PTC_EFORMAT, "3 bytes after the last tensor"},
        {"truncated data", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10,
         PTC_EFORMAT, "beyond the 10 bytes"},
        {"shape/size mismatch", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
         4, PTC_EFORMAT, "needs 8"},
        {"dtype/size mismatch", "{\"t\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, PTC_EFORMAT, "needs 8"},
        {"end before begin", "{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
         PTC_EFORMAT, "end before"},
        {"numel overflow",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
         "\"data_offsets\":[0,0]}}",
         0, PTC_EFORMAT, "overflows"},
        {"byte size overflow",
         "{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
         "\"data_offsets\":[0,0]}}",
         0, PTC_EFORMAT, "overflows"},
        {"empty, strides overflow",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[0,4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,0]}}",
         0, PTC_EFORMAT, "strides overflow"},
        {"empty, huge dims first",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
         "\"data_offsets\":[0,0]}}",
         0, PTC_EFORMAT, "element count overflows"}, /* as the reference implementation */
        {"duplicate tensor", "{\"t\":" T4 ",\"t\":" T4 "}", 4, PTC_EFORMAT, "duplicate"},
        {"duplicate field",
         "{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[0,4]}}",
         4, PTC_EFORMAT, "duplicate"},
        {"duplicate metadata key", "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"},\"t\":" T4 "}", 4,
         PTC_EFORMAT, "duplicate"},
        {"unknown dtype", "{\"t\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         PTC_EFORMAT, "unknown dtype \"f32\""},
        {"dtype not a string", "{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         PTC_EFORMAT, "dtype is not a string"},
        {"sub-byte dtype", "{\"t\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
         PTC_EUNSUPPORTED, "F4"},
        {"negative dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         PTC_EFORMAT, "shape[0]"},
        {"float dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
         PTC_EFORMAT, "shape[0]"},
        {"bool dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}}", 4,
         PTC_EFORMAT, "shape[0]"},
        {"shape not a list", "{\"t\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4,
         PTC_EFORMAT, "shape is not a list"},
        {"three offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4,
         PTC_EFORMAT, "data_offsets"},
        {"negative offset", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
         PTC_EFORMAT, "data_offsets"},
        {"missing field", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, PTC_EFORMAT,
         "no shape"},
        {"unknown field",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
         "\"x\":1}}",
         4, PTC_EFORMAT, "unexpected field \"x\""},
        {"entry not an object", "{\"t\":[1,2]}", 0, PTC_EFORMAT, "not a JSON object"},
        {"metadata not strings", "{\"__metadata__\":{\"a\":1},\"t\":" T4 "}", 4, PTC_EFORMAT,
         "\"a\" is not a string"},
        {"metadata not an object", "{\"__metadata__\":[],\"t\":" T4 "}", 4, PTC_EFORMAT,
         "not an object"},
        {"metadata null", "{\"__metadata__\":null,\"t\":" T4 "}", 4, 0, NULL},
        {"nested too deep", "{\"__metadata__\":{\"a\":{\"b\":{}}}}", 0, PTC_EFORMAT, "deeper"},
        {"list too long",
         "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
         "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
         "1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         4, PTC_EFORMAT, "more than 64 items"},
        {"never ends", "{\"t\":" T4 "    ", 0, PTC_EFORMAT, "never ends"},
        {"bad JSON", "{\"t\" " T4 "}", 4, PTC_EFORMAT, "not valid JSON"},
        {"NUL padding", "{\"t\":" T4 "}\0\0\0", 4, PTC_EFORMAT, "only spaces"},
        {"newline padding", "{\"t\":" T4 "}\n", 4, PTC_EFORMAT, "only spaces"},
        {"tab padding", "{\"t\":" T4 "}\t", 4, PTC_EFORMAT, "only spaces"},
        {"space padding", "{\"t\":" T4 "}   ", 4, 0, NULL},
        {"invalid UTF-8", "{\"t\xff\":" T4 "}", 4, PTC_EFORMAT, "UTF-8"},
        {"zero-size tensors share an offset",
         "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],"
         "\"data_offsets\":[0,0]},\"t\":" T4 ",\"y\":{\"dtype\":\"I8\",\"shape\":[2,0],"
         "\"data_offsets\":[4,4]}}",
         4, 0, NULL},
        {"header order differs from offsets",
         "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[4,8]},\"a\":" T4 "}",
         8, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *k = &cases[i];
        size_t hlen = strlen(k->header);
        if (strcmp(k->what, "NUL padding") == 0)
            hlen += 3;
        size_t len;
        uint8_t *b = make(k->header, hlen, ~0ull, k->data_len, &len);
        expect(k->what, b, len, NULL, k->code, k->needle);
        free(b);
    }

    /* Header sizes. */
    size_t len;
    uint8_t *b = make("{\"t\":" T4 "}", strlen("{\"t\":" T4 "}"), 1000, 4, &len);
    expect("header size past the end", b, len, NULL, PTC_EFORMAT, "runs past the end");
    free(b);
    b = make("{}", 2, 100000001, 0, &len);
    expect("header size above 100 MB", b, len, NULL, PTC_EFORMAT, "exceeds the limit");
    free(b);
    b = make("{}", 2, ~0ull >> 1, 0, &len);
    expect("huge header size", b, len, NULL, PTC_EFORMAT, "exceeds the limit");
    free(b);
    b = make("{}", 2, 1, 0, &len);
    expect("header size 1", b, len, NULL, PTC_ENOTZIP, NULL);
    free(b);
    b = make("[]", 2, ~0ull, 0, &len);
    expect("array header (not recognised)", b, len, NULL, PTC_ENOTZIP, NULL);
    free(b);
    b = make(" {}", 3, ~0ull, 0, &len);
    expect("leading space (not recognised)", b, len, NULL, PTC_ENOTZIP, NULL);
    free(b);
    b = make("{\"t\":" T4 "}", strlen("{\"t\":" T4 "}"), ~0ull, 4, &len);
    expect("file cut inside the header", b, 20, NULL, PTC_EFORMAT, "runs past the end");
    free(b);

    /* The header must not cost more memory than the budget allows. */
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_heap_bytes = 4096;
    char hdr[4096];
    size_t hl = (size_t)snprintf(hdr, sizeof hdr, "{\"__metadata__\":{");
    for (int i = 0; i < 100; i++)
        hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s\"k%d\":\"\"", i ? "," : "", i);
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}}");
    b = make(hdr, hl, ~0ull, 0, &len);
    expect("header over the heap budget", b, len, &lim, PTC_ELIMIT, "header");
    expect("the same within the default budget", b, len, NULL, 0, NULL);
    free(b);
    ptc_limits_default(&lim);
    lim.max_records = 1;
    const char *two = "{\"a\":" T4 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                      "\"data_offsets\":[4,8]}}";
    b = make(two, strlen(two), ~0ull, 8, &len);
    expect("more tensors than max_records", b, len, &lim, PTC_ELIMIT, "2 tensors");
    free(b);
    ptc_limits_default(&lim);
    lim.max_ndim = 2;
    const char *nd3 = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1],\"data_offsets\":[0,1]}}";
    b = make(nd3, strlen(nd3), ~0ull, 1, &len);
    expect("max_ndim 2, ndim 2", b, len, &lim, 0, NULL);
    free(b);
    nd3 = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1],\"data_offsets\":[0,1]}}";
    b = make(nd3, strlen(nd3), ~0ull, 1, &len);
    expect("max_ndim 2, ndim 3", b, len, &lim, PTC_EFORMAT, "more than 2 items");
    free(b);

    /* Header order is the dict's order, whatever the offsets; unaligned data is copied. */
    const char *odd = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    b = make(odd, strlen(odd), ~0ull, 8, &len); /* 8 + 95 bytes: data at an odd offset */
    CHECK(strlen(odd) % 2 == 1);
    float one = 1.5f, two_f = -2.0f;
    memcpy(b + len - 8, &one, 4);
    memcpy(b + len - 4, &two_f, 4);
    ptc_ckpt *c;
    ptc_error err;
    int rc = open_bytes(b, len, NULL, &c, &err);
    CHECK_CODE(rc, 0, &err);
    if (rc == 0) {
        const ptc_value *root = ptc_ckpt_root(c);
        const char *k0;
        size_t kl;
        ptc_value_str(ptc_dict_key(root, 0), &k0, &kl);
        CHECK_STR(k0, "b");
        const ptc_tensor *ta = ptc_state_dict_get(root, "a"), *tb = ptc_state_dict_get(root, "b");
        CHECK(ta && tb && *(const float *)ptc_tensor_data(ta) == 1.5f &&
              *(const float *)ptc_tensor_data(tb) == -2.0f);
        CHECK(ta && !ptc_storage_is_mapped(ptc_tensor_storage(ta)));
        CHECK_STR(ptc_storage_key(ptc_tensor_storage(tb)), "0");
    }
    ptc_ckpt_close(c);
    free(b);
}

/* ---- 3. writing ------------------------------------------------------------------------------ */

static const char *tmp_path(const char *name)
{
    static char path[4300];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    return path;
}

/* Bytes of two files equal; prints the first difference. */
static void check_same_file(const char *what, const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    uint8_t *x = slurp(a, &la), *y = slurp(b, &lb);
    check_count++;
    if (!x || !y || la != lb || memcmp(x, y, la) != 0) {
        check_failures++;
        size_t i = 0;
        while (x && y && i < la && i < lb && x[i] == y[i])
            i++;
        fprintf(stderr, "%s: %s (%zu bytes) differs from %s (%zu bytes) at byte %zu\n", what, a, la,
                b, lb, i);
        if (x && y && i < la && i < lb)
            fprintf(stderr, "  ptc: ...%.60s\n  lib: ...%.60s\n", (const char *)x + i,
                    (const char *)y + i);
    }
    free(x);
    free(y);
}

static const ptc_value *metadata_of(const ptc_ckpt *c)
{
    return ptc_dict_get(ptc_dict_attrs(ptc_ckpt_root(c)), "__metadata__");
}

static void test_write_identical(void)
{
    for (size_t f = 0; f < NFIXTURES; f++) {
        const char *name = fixtures[f];
        char lib[4300];
        snprintf(lib, sizeof lib, "%s", fixture(name, ".safetensors"));
        ptc_ckpt *st = NULL, *pt = NULL;
        ptc_error err;
        int rc = ptc_ckpt_open(&st, lib, NULL, &err);
        CHECK_CODE(rc, 0, &err);
        if (rc < 0)
            continue;
        ptc_save_params p;
        ptc_save_params_default(&p);
        p.format = PTC_SAVE_SAFETENSORS;
        p.metadata = metadata_of(st);
        /* library file -> ptc -> file: the same bytes */
        const char *out = tmp_path("fromst.safetensors");
        CHECK_CODE(rc = ptc__save_safetensors(ptc_ckpt_root(st), out, &p, &err), 0, &err);
        if (rc == 0) {
            check_same_file(name, out, lib);
            /* and it reads back to the same tensors */
            ptc_ckpt *back = NULL;
            CHECK_CODE(rc = ptc_ckpt_open(&back, out, NULL, &err), 0, &err);
            if (rc == 0)
                check_against_manifest(name, back, 1);
            ptc_ckpt_close(back);
        }
        /* torch .pt (other order, views) -> ptc -> file: the same bytes */
        rc = ptc_ckpt_open(&pt, fixture(name, ".pt"), NULL, &err);
        CHECK_CODE(rc, 0, &err);
        if (rc == 0) {
            out = tmp_path("frompt.safetensors");
            CHECK_CODE(rc = ptc__save_safetensors(ptc_ckpt_root(pt), out, &p, &err), 0, &err);
            if (rc == 0)
                check_same_file(name, out, lib);
            /* the same through the public entry point, format from the extension */
            p.format = PTC_SAVE_AUTO;
            out = tmp_path("public.safetensors");
            CHECK_CODE(rc = ptc_save(ptc_ckpt_root(pt), out, &p, &err), 0, &err);
            if (rc == 0)
                check_same_file(name, out, lib);
        }
        ptc_ckpt_close(pt);
        ptc_ckpt_close(st);
    }
}

static int progress_calls;
static uint64_t progress_last, progress_total;

static void progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    progress_calls++;
    progress_last = done;
    progress_total = total;
}

/* Counts the entries of tmp_dir. */
static int dir_entries(void)
{
    DIR *d = opendir(tmp_dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void test_write_errors(void)
{
    ptc__arena *a = NULL;
    CHECK_INT(ptc__arena_new(&a, NULL), 0);
    if (!a)
        return;
    ptc_error err;
    /* A tensor to place: the first of nometa.safetensors. */
    ptc_ckpt *c = NULL;
    CHECK_CODE(ptc_ckpt_open(&c, fixture("nometa", ".safetensors"), NULL, &err), 0, &err);
    const ptc_value *tv = c ? ptc_dict_value(ptc_ckpt_root(c), 0) : NULL;
    if (!tv) {
        ptc__arena_free(a);
        ptc_ckpt_close(c);
        return;
    }
    char out[4300];
    snprintf(out, sizeof out, "%s", tmp_path("err.safetensors"));
    /* An existing file under the name: refused saves must leave it untouched. */
    FILE *f = fopen(out, "wb");
    if (f) {
        fputs("previous", f);
        fclose(f);
    }
    int before = dir_entries();
    ptc_save_params p;
    ptc_save_params_default(&p);

    ptc_value *list = ptc__value_new(a, PTC_VALUE_LIST);
    CHECK_CODE(ptc__save_safetensors(list, out, &p, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "list") != NULL);

    ptc_value *d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_int(a, 3), (ptc_value *)tv, &err, "", -1);
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "int") != NULL);

    d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_str(a, PTC_VALUE_STR, "x", 1), ptc__value_int(a, 1), &err, "",
                  -1);
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "\"x\" is a int") != NULL);

    d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_str(a, PTC_VALUE_STR, "__metadata__", 12), (ptc_value *)tv, &err,
                  "", -1);
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "__metadata__") != NULL);

    /* A dtype safetensors has no name for. */
    ptc_tensor *t = ptc__arena_alloc(a, sizeof *t);
    *t = *ptc_value_tensor(tv);
    t->dtype = PTC_QINT8;
    ptc_value *qv = ptc__value_new(a, PTC_VALUE_TENSOR);
    qv->u.t = t;
    d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_str(a, PTC_VALUE_STR, "q", 1), qv, &err, "", -1);
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "qint8") != NULL);

    /* Metadata that is not str -> str. */
    d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_str(a, PTC_VALUE_STR, "w", 1), (ptc_value *)tv, &err, "", -1);
    ptc_value *m = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, m, ptc__value_str(a, PTC_VALUE_STR, "k", 1), ptc__value_int(a, 1), &err, "",
                  -1);
    p.metadata = m;
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    p.metadata = list;
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    p.metadata = NULL;

    size_t len;
    uint8_t *prev = slurp(out, &len);
    CHECK(prev && len == 8 && memcmp(prev, "previous", 8) == 0);
    free(prev);
    CHECK_INT(dir_entries(), before); /* no temporary file left */

    /* A save into a folder that does not exist fails cleanly. */
    CHECK_CODE(ptc__save_safetensors(d, tmp_path("nope/x.safetensors"), &p, &err), PTC_EIO, &err);

    /* A NUL in a name: JSON allows it, but ptc could not read the file back. */
    d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_str(a, PTC_VALUE_STR, "a\0b", 3), (ptc_value *)tv, &err, "", -1);
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "NUL") != NULL);
    CHECK_INT(dir_entries(), before);

    /* Success replaces the file, reports progress, and keeps an odd but valid name. */
    d = ptc__value_new(a, PTC_VALUE_DICT);
    ptc__dict_set(a, d, ptc__value_str(a, PTC_VALUE_STR, "a\x01\"b", 4), (ptc_value *)tv, &err, "",
                  -1);
    p.progress = progress;
    CHECK_CODE(ptc__save_safetensors(d, out, &p, &err), 0, &err);
    CHECK(progress_calls > 0 && progress_last == progress_total);
    ptc_ckpt *back = NULL;
    int rc = ptc_ckpt_open(&back, out, NULL, &err);
    CHECK_CODE(rc, 0, &err);
    if (rc == 0) {
        const char *k;
        size_t kl;
        ptc_value_str(ptc_dict_key(ptc_ckpt_root(back), 0), &k, &kl);
        CHECK(kl == 4 && memcmp(k, "a\x01\"b", 4) == 0);
    }
    size_t flen = 0;
    uint8_t *fb = slurp(out, &flen);
    CHECK(fb && progress_total == flen);
    free(fb);
    ptc_ckpt_close(back);
    CHECK_INT(dir_entries(), before);
    unlink(out);
    ptc_ckpt_close(c);
    ptc__arena_free(a);
}

/* ---- 4. allocation failures ------------------------------------------------------------------ */

static long fail_at, alloc_count;

static void *failing_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size && ++alloc_count == fail_at)
        return NULL;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

/* Fails the 1st, 2nd, ... allocation of a load and of a save until one succeeds: every failure
 * must be clean (ENOMEM, or ELIMIT where a budget is charged first; ASan's leak check at exit
 * finds anything not freed) and leave no file behind. */
static void test_alloc_failures(void)
{
    size_t len;
    uint8_t *buf = slurp(fixture("basic", ".safetensors"), &len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    char out[4300];
    snprintf(out, sizeof out, "%s", tmp_path("alloc.safetensors"));
    int before = dir_entries(), runs = 0, bad = 0;
    for (int phase = 0; phase < 2; phase++) {
        for (fail_at = 1;; fail_at++) {
            ptc_ckpt *c = NULL;
            ptc_error err;
            int rc;
            alloc_count = 0;
            ptc_set_allocator(failing_realloc, NULL);
            if (phase == 0) {
                rc = ptc_ckpt_open_memory(&c, buf, len, NULL, &err);
            } else {
                long keep = fail_at;
                fail_at = 0; /* the load itself succeeds */
                rc = ptc_ckpt_open_memory(&c, buf, len, NULL, &err);
                fail_at = keep;
                alloc_count = 0;
                if (rc == 0) {
                    ptc_save_params p;
                    ptc_save_params_default(&p);
                    p.metadata = metadata_of(c);
                    rc = ptc__save_safetensors(ptc_ckpt_root(c), out, &p, &err);
                }
            }
            ptc_ckpt_close(c);
            ptc_set_allocator(NULL, NULL);
            runs++;
            if (rc != 0 && rc != PTC_ENOMEM && rc != PTC_ELIMIT) {
                bad++;
                fprintf(stderr, "%s, allocation %ld failed: %s %s\n", phase ? "save" : "load",
                        fail_at, ptc_err_name(rc), err.message);
            }
            if (rc == 0 || fail_at > 10000)
                break;
        }
        unlink(out);
    }
    CHECK_INT(bad, 0);
    CHECK_INT(dir_entries(), before);
    printf("allocation failures: %d runs\n", runs);
    free(buf);
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    snprintf(st_dir, sizeof st_dir, "%s/testdata/safetensors", top ? top : ".");
    json_error_t jerr;
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", st_dir);
    manifest = json_load_file(mpath, JSON_ALLOW_NUL, &jerr);
    if (!manifest) {
        fprintf(stderr, "cannot read %s: %s\n", mpath, jerr.text);
        return 99;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/ptc-test-st-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 99;
    }
    test_library_files();
    test_nul_name();
    test_rejections();
    test_write_identical();
    test_write_errors();
    test_alloc_failures();
    unlink(tmp_path("fromst.safetensors"));
    unlink(tmp_path("frompt.safetensors"));
    unlink(tmp_path("public.safetensors"));
    rmdir(tmp_dir);
    json_decref(manifest);
    return check_exit("test_safetensors");
}
