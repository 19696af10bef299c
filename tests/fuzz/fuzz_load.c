/*
 * fuzz_load.c - fuzz target for the whole load path: the input is a checkpoint file held in memory.
 *
 * ptc_ckpt_open_memory runs everything a user's load runs (format detection, zip or legacy
 * container, pickle machine under the default policy, tensor and storage checks) with CRC
 * verification on, and once more without it when only a CRC failed. When the file is accepted,
 * the target then does what a careless caller might: walks every tensor and hashes it, reads every
 * storage's first and last byte, and visits every other value through the public getters. ptc
 * promises at load time that every element a tensor can address lies in its storage and every
 * storage in its record, so any out-of-bounds access here is a load-time check that is missing.
 * The target also cross-checks paths that must agree: the SHA-256 of ptc_tensor_read's bytes
 * against ptc_tensor_sha256, and the tensors of the checkpoint opened in place against those of
 * the same input opened with PTC_OPEN_COPY.
 *
 * Every input also goes through ptc_verify_memory, which must always produce a report (the input is
 * in memory, so nothing but memory can fail) that agrees with the load: a file the load accepts is
 * ok with no finding, or unsafe only for pickles found where no loader reads, a refused one is rejected with at least one finding (unsafe when the load
 * said EUNSAFE), and every member and detail is printable. The verifier's static pass reads bytes
 * no loader reads (every zip member, every local header, tar members), which is where a scanner
 * differs most from the loader it guards.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ptc/ptc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A tensor with stride 0 can legitimately claim terabytes while addressing one element, so hashing
 * is capped per input: the target hunts memory errors, and hashing costs time linear in the claim,
 * which says nothing about the loader. */
#define FUZZ_MAX_HASH_BYTES (64ll << 20)
/* Tensors whose bytes are also read whole for the differential check. */
#define FUZZ_MAX_READ_BYTES (1ll << 20)
/* A tensor shared by many containers is reported once per path; bound the walk and the value
 * visit, which can both be exponential in the size of a tree that shares nodes. */
#define FUZZ_MAX_TENSORS (1u << 16)
#define FUZZ_MAX_VISITS  (1u << 20)

static void touch_bytes(const void *p, size_t n)
{
    if (n == 0)
        return;
    FUZZ_REQUIRE(p != NULL);
    volatile uint8_t sink = ((const uint8_t *)p)[0];
    sink = ((const uint8_t *)p)[n - 1];
    (void)sink;
}

static void check_tensor(const ptc_tensor *t, int64_t *hash_left)
{
    ptc_dtype dt = ptc_tensor_dtype(t);
    FUZZ_REQUIRE(ptc_dtype_name(dt) != NULL);
    int ndim = ptc_tensor_ndim(t);
    FUZZ_REQUIRE(ndim >= 0 && ndim <= 64);
    const int64_t *shape = ptc_tensor_shape(t), *stride = ptc_tensor_stride(t);
    FUZZ_REQUIRE(ndim == 0 || (shape != NULL && stride != NULL));
    for (int d = 0; d < ndim; d++)
        FUZZ_REQUIRE(shape[d] >= 0);
    int64_t numel = ptc_tensor_numel(t), nbytes = ptc_tensor_nbytes(t);
    FUZZ_REQUIRE(numel >= 0 && ptc_tensor_storage_offset(t) >= 0);
    int64_t expect;
    FUZZ_REQUIRE(!__builtin_mul_overflow(numel, (int64_t)ptc_dtype_size(dt), &expect));
    FUZZ_REQUIRE(nbytes == expect);
    (void)ptc_tensor_requires_grad(t);
    (void)ptc_tensor_is_parameter(t);
    (void)ptc_tensor_is_contiguous(t);
    (void)ptc_tensor_is_conj(t);
    (void)ptc_tensor_is_neg(t);
    FUZZ_REQUIRE(ptc_tensor_storage(t) != NULL);
    if (numel > 0)
        FUZZ_REQUIRE(ptc_tensor_data(t) != NULL);

    if (nbytes > *hash_left)
        return;
    *hash_left -= nbytes;
    uint8_t digest[32];
    ptc_error err;
    if (ptc_tensor_sha256(t, digest, &err) < 0) {
        FUZZ_REQUIRE(err.code < 0);
        return;
    }
    if (nbytes > FUZZ_MAX_READ_BYTES)
        return;
    /* Exactly nbytes, so that a write past the end is caught (one byte for an empty tensor). */
    uint8_t *buf = malloc(nbytes > 0 ? (size_t)nbytes : 1);
    if (!buf)
        return;
    if (ptc_tensor_read(t, buf, (size_t)nbytes, &err) == 0) {
        ptc__sha256 sha;
        uint8_t again[32];
        FUZZ_REQUIRE(ptc__sha256_init(&sha, NULL) == 0);
        ptc__sha256_update(&sha, buf, (size_t)nbytes);
        FUZZ_REQUIRE(ptc__sha256_final(&sha, again, NULL) == 0);
        FUZZ_REQUIRE(memcmp(digest, again, sizeof digest) == 0);
    }
    free(buf);
}

static void touch_value(const ptc_value *v, unsigned *visits)
{
    FUZZ_REQUIRE(v != NULL);
    if (++*visits >= FUZZ_MAX_VISITS)
        return;
    ptc_value_kind kind = ptc_value_kind_of(v);
    FUZZ_REQUIRE(ptc_value_kind_name(kind) != NULL);
    switch (kind) {
    case PTC_VALUE_NONE:
        break;
    case PTC_VALUE_BOOL: {
        int b;
        FUZZ_REQUIRE(ptc_value_bool(v, &b) == 0);
        break;
    }
    case PTC_VALUE_INT: {
        int64_t i;
        const uint8_t *bytes;
        size_t n;
        int rc = ptc_value_int(v, &i);
        FUZZ_REQUIRE(rc == 0 || rc == PTC_ERANGE);
        FUZZ_REQUIRE(ptc_value_int_bytes(v, &bytes, &n) == 0);
        touch_bytes(bytes, n);
        break;
    }
    case PTC_VALUE_FLOAT: {
        double f;
        FUZZ_REQUIRE(ptc_value_float(v, &f) == 0);
        break;
    }
    case PTC_VALUE_COMPLEX: {
        double re, im;
        FUZZ_REQUIRE(ptc_value_complex(v, &re, &im) == 0);
        break;
    }
    case PTC_VALUE_STR: {
        const char *s;
        size_t n;
        FUZZ_REQUIRE(ptc_value_str(v, &s, &n) == 0);
        FUZZ_REQUIRE(s != NULL && s[n] == '\0');
        break;
    }
    case PTC_VALUE_BYTES: {
        const uint8_t *b;
        size_t n;
        FUZZ_REQUIRE(ptc_value_bytes(v, &b, &n) == 0);
        touch_bytes(b, n);
        break;
    }
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE: {
        size_t n = ptc_value_len(v);
        for (size_t i = 0; i < n && *visits < FUZZ_MAX_VISITS; i++)
            touch_value(ptc_value_item(v, i), visits);
        break;
    }
    case PTC_VALUE_DICT: {
        size_t n = ptc_value_len(v);
        (void)ptc_dict_is_ordered(v);
        for (size_t i = 0; i < n && *visits < FUZZ_MAX_VISITS; i++) {
            const ptc_value *k = ptc_dict_key(v, i), *val = ptc_dict_value(v, i);
            touch_value(k, visits);
            touch_value(val, visits);
            /* Keys are unique, so a lookup by a key without NUL finds this very pair. */
            const char *s;
            size_t len;
            if (ptc_value_str(k, &s, &len) == 0 && strlen(s) == len)
                FUZZ_REQUIRE(ptc_dict_get(v, s) == val);
        }
        const ptc_value *attrs = ptc_dict_attrs(v);
        if (attrs)
            touch_value(attrs, visits);
        break;
    }
    case PTC_VALUE_TENSOR:
        /* The data is checked through the walk; here only the link. */
        FUZZ_REQUIRE(ptc_value_tensor(v) != NULL);
        break;
    case PTC_VALUE_DTYPE: {
        ptc_dtype dt;
        FUZZ_REQUIRE(ptc_value_dtype(v, &dt) == 0 && ptc_dtype_name(dt) != NULL);
        break;
    }
    case PTC_VALUE_DEVICE: {
        const char *type;
        int64_t index;
        FUZZ_REQUIRE(ptc_value_device(v, &type, &index) == 0 && type != NULL);
        break;
    }
    case PTC_VALUE_GLOBAL:
        FUZZ_REQUIRE(ptc_value_global_name(v) != NULL);
        break;
    case PTC_VALUE_OBJECT: {
        FUZZ_REQUIRE(ptc_value_global_name(v) != NULL);
        const ptc_value *args = ptc_object_args(v), *state = ptc_object_state(v);
        if (args)
            touch_value(args, visits);
        if (state)
            touch_value(state, visits);
        break;
    }
    default:
        FUZZ_REQUIRE(!"value of unknown kind");
    }
}

static void check_ckpt(const ptc_ckpt *c)
{
    FUZZ_REQUIRE(ptc_ckpt_prefix(c) != NULL && ptc_ckpt_byteorder(c) != NULL);
    ptc_format fmt = ptc_ckpt_format(c);
    FUZZ_REQUIRE(fmt == PTC_FORMAT_ZIP || fmt == PTC_FORMAT_LEGACY ||
                 fmt == PTC_FORMAT_SAFETENSORS);

    size_t nrecords = ptc_ckpt_nrecords(c);
    for (size_t i = 0; i < nrecords; i++) {
        FUZZ_REQUIRE(ptc_ckpt_record_name(c, i) != NULL);
        (void)ptc_ckpt_record_size(c, i);
    }

    size_t nstorages = ptc_ckpt_nstorages(c);
    for (size_t i = 0; i < nstorages; i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        FUZZ_REQUIRE(s != NULL);
        FUZZ_REQUIRE(ptc_storage_key(s) != NULL && ptc_storage_location(s) != NULL);
        FUZZ_REQUIRE(ptc_dtype_name(ptc_storage_dtype(s)) != NULL);
        int64_t nbytes = ptc_storage_nbytes(s);
        FUZZ_REQUIRE(nbytes >= 0);
        (void)ptc_storage_is_mapped(s);
        touch_bytes(ptc_storage_data(s), (size_t)nbytes);
    }

    const ptc_value *root = ptc_ckpt_root(c);
    FUZZ_REQUIRE(root != NULL);

    ptc_walk *w = NULL;
    ptc_error err;
    if (ptc_walk_new(&w, root, &err) == 0) {
        const char *path;
        const ptc_tensor *t;
        int64_t hash_left = FUZZ_MAX_HASH_BYTES;
        for (unsigned n = 0; n < FUZZ_MAX_TENSORS && ptc_walk_next(w, &path, &t) > 0; n++) {
            FUZZ_REQUIRE(path != NULL && t != NULL);
            (void)strlen(path);
            (void)ptc_state_dict_get(root, path);
            check_tensor(t, &hash_left);
        }
        ptc_walk_free(w);
    }

    unsigned visits = 0;
    touch_value(root, &visits);
}

/* Opens the input again with PTC_OPEN_COPY and checks that it describes the same tensors with the
 * same bytes: storages used in place from the input and storages copied to the heap must not
 * differ in anything but where they live. */
static void compare_with_copy(const ptc_ckpt *c, const uint8_t *data, size_t size,
                              ptc_open_params params)
{
    ptc_ckpt *copy = NULL;
    ptc_walk *w1 = NULL, *w2 = NULL;
    ptc_error err;
    params.flags |= PTC_OPEN_COPY;
    int rc = ptc_ckpt_open_memory(&copy, data, size, &params, &err);
    if (rc == PTC_ELIMIT || rc == PTC_ENOMEM)
        return; /* copies need heap that the mapping did not */
    FUZZ_REQUIRE(rc == 0);
    FUZZ_REQUIRE(ptc_ckpt_nstorages(copy) == ptc_ckpt_nstorages(c));
    if (ptc_walk_new(&w1, ptc_ckpt_root(c), &err) == 0 &&
        ptc_walk_new(&w2, ptc_ckpt_root(copy), &err) == 0) {
        const char *p1, *p2;
        const ptc_tensor *t1, *t2;
        int64_t hash_left = FUZZ_MAX_HASH_BYTES;
        for (unsigned n = 0; n < FUZZ_MAX_TENSORS; n++) {
            int r1 = ptc_walk_next(w1, &p1, &t1);
            int r2 = ptc_walk_next(w2, &p2, &t2);
            FUZZ_REQUIRE(r1 == r2);
            if (r1 <= 0)
                break;
            FUZZ_REQUIRE(strcmp(p1, p2) == 0);
            FUZZ_REQUIRE(ptc_tensor_dtype(t1) == ptc_tensor_dtype(t2));
            int64_t nbytes = ptc_tensor_nbytes(t1);
            FUZZ_REQUIRE(nbytes == ptc_tensor_nbytes(t2));
            if (nbytes > hash_left)
                continue;
            hash_left -= nbytes;
            uint8_t d1[32], d2[32];
            if (ptc_tensor_sha256(t1, d1, &err) == 0 && ptc_tensor_sha256(t2, d2, &err) == 0)
                FUZZ_REQUIRE(memcmp(d1, d2, sizeof d1) == 0);
        }
    }
    ptc_walk_free(w1);
    ptc_walk_free(w2);
    ptc_ckpt_close(copy);
}

static void require_printable(const char *s)
{
    size_t n = strlen(s);
    FUZZ_REQUIRE(ptc__utf8_valid((const uint8_t *)s, n));
    for (size_t i = 0; i < n; i++)
        FUZZ_REQUIRE((uint8_t)s[i] >= 0x20 && s[i] != 0x7f);
}

static void check_verify(const uint8_t *data, size_t size, int open_rc)
{
    ptc_report *r = NULL;
    ptc_error err;
    int rc = ptc_verify_memory(&r, data, size, NULL, &err);
    FUZZ_REQUIRE(rc == 0 && r != NULL);
    ptc_verdict v = ptc_report_verdict(r);
    size_t nf = ptc_report_nfindings(r);
    if (open_rc == 0) {
        /* A file the load accepts is ok, or unsafe only for a pickle the sweep found where no
         * loader reads (a dot-record, a tensor record, a comment, an extra field): never
         * malformed. */
        FUZZ_REQUIRE((v == PTC_VERDICT_OK && nf == 0) || (v == PTC_VERDICT_UNSAFE && nf > 0));
        for (size_t i = 0; i < nf; i++) {
            const ptc_finding *f = ptc_report_finding(r, i);
            /* What the static pass says about those pickles (an opcode outside the subset in
             * one) may be malformed; the load's own findings cannot be there. */
            FUZZ_REQUIRE(strcmp(f->kind, "load") != 0 && strcmp(f->kind, "crc") != 0);
        }
    } else {
        FUZZ_REQUIRE(v != PTC_VERDICT_OK && nf > 0);
        if (open_rc == PTC_EUNSAFE)
            FUZZ_REQUIRE(v == PTC_VERDICT_UNSAFE);
    }
    for (size_t i = 0; i < nf; i++) {
        const ptc_finding *f = ptc_report_finding(r, i);
        FUZZ_REQUIRE(f->verdict == PTC_VERDICT_UNSAFE || f->verdict == PTC_VERDICT_MALFORMED);
        FUZZ_REQUIRE(f->code < 0 && f->kind != NULL);
        require_printable(f->member);
        require_printable(f->detail);
        if (f->verdict == PTC_VERDICT_UNSAFE)
            FUZZ_REQUIRE(v == PTC_VERDICT_UNSAFE);
    }
    for (size_t i = 0; i < ptc_report_nglobals(r); i++) {
        const ptc_global_ref *g = ptc_report_global(r, i);
        require_printable(g->member);
        if (g->global)
            require_printable(g->global);
        if (!g->allowed)
            FUZZ_REQUIRE(v == PTC_VERDICT_UNSAFE);
    }
    FUZZ_REQUIRE(ptc_report_torch(r) <= PTC_TORCH_UNKNOWN);
    ptc_report_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_open_params params;
    ptc_open_params_default(&params);
    params.flags = PTC_OPEN_VERIFY_CRC;

    ptc_ckpt *c = NULL;
    ptc_error err;
    int rc = ptc_ckpt_open_memory(&c, data, size, &params, &err);
    check_verify(data, size, rc);
    if (rc == PTC_ECRC) {
        /* libFuzzer cannot fix up a CRC-32, so almost every mutation inside a record would end
         * here. Opening again without verification lets mutated pickles and storages reach the
         * layers behind the container. */
        FUZZ_REQUIRE(err.code == PTC_ECRC);
        params.flags = 0;
        rc = ptc_ckpt_open_memory(&c, data, size, &params, &err);
    }
    if (rc < 0) {
        /* A rejection must say why: a code and a printable message. */
        FUZZ_REQUIRE(err.code < 0 && err.message[0] != '\0');
        return 0;
    }
    check_ckpt(c);
    compare_with_copy(c, data, size, params);
    ptc_ckpt_close(c);
    return 0;
}
