/*
 * fuzz_salvage.c - fuzz target for the salvage reader: the input is a checkpoint file held in
 * memory, opened with PTC_OPEN_SALVAGE (globals outside the policy read symbolically, numpy
 * arrays rebuilt as tensors).
 *
 * Invariants checked on every input:
 *   - the salvage open and the strict open differ only where the strict open says EUNSAFE: a file
 *     the strict open loads loads the same tensors (same paths, same SHA-256) with no symbol, and
 *     a file it refuses for another reason than a cycle (which salvage cuts) is refused with the
 *     same code;
 *   - a placeholder for a cut cycle is a symbolic global with a name and no children;
 *   - a refusal has a code and a printable message;
 *   - an accepted tree is visited completely through the public getters, symbolic objects
 *     included (callable, args, state, items): every chain of callables ends at a global that has a
 *     name, every symbolic value is a global or an object, and every tensor met anywhere (in a
 *     module's state, a numpy array) is hashed and read, its storage inside its bytes;
 *   - the symbol table holds at most PTC_SYMBOLS_MAX printable entries with offsets inside the
 *     input, refs at least 1, distinct names;
 *   - ptc_save refuses a tree that holds a symbolic value (it is never written back); the target
 *     only checks that it fails cleanly, on a path that cannot be created;
 *   - ptc_salvage_state_dict (modules back to state dicts, with the defaults and the checkpoint's
 *     default budget) ends in a clean refusal (a code, a printable message, nothing returned) or
 *     a dict whose every value is a tensor, plain (no Parameter, no grad) when built from a
 *     module.
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

/* Bounds of the work per input, as in fuzz_load.c but smaller, since each input is read twice
 * and its tensors hashed three times (the visit, and the walks of both opens): a tree that shares
 * nodes can be exponential to visit, and a stride-0 tensor can claim terabytes. */
#define FUZZ_MAX_HASH_BYTES (16ll << 20)
#define FUZZ_MAX_READ_BYTES (1ll << 20)
#define FUZZ_MAX_VISITS     (1u << 18)
#define FUZZ_MAX_TENSORS    (1u << 12)

/* Tensors hashed by the visit: a shared one is met once per path. */
#define FUZZ_MAX_HASHED 1024

typedef struct visit {
    unsigned visits, hashed;
    int64_t hash_left;
    bool symbolic; /* a symbolic value was met */
} visit;

static void require_printable(const char *s)
{
    size_t n = strlen(s);
    FUZZ_REQUIRE(ptc__utf8_valid((const uint8_t *)s, n));
    for (size_t i = 0; i < n; i++)
        FUZZ_REQUIRE((uint8_t)s[i] >= 0x20 && s[i] != 0x7f);
}

static void check_tensor(const ptc_tensor *t, visit *st)
{
    int ndim = ptc_tensor_ndim(t);
    FUZZ_REQUIRE(ndim >= 0 && ndim <= 64 && ptc_dtype_name(ptc_tensor_dtype(t)) != NULL);
    for (int d = 0; d < ndim; d++)
        FUZZ_REQUIRE(ptc_tensor_shape(t)[d] >= 0);
    int64_t nbytes = ptc_tensor_nbytes(t);
    const ptc_storage *s = ptc_tensor_storage(t);
    FUZZ_REQUIRE(s != NULL && ptc_storage_key(s) != NULL && ptc_storage_nbytes(s) >= 0);
    if (nbytes > st->hash_left || st->hashed >= FUZZ_MAX_HASHED)
        return;
    st->hash_left -= nbytes;
    st->hashed++;
    uint8_t digest[32];
    ptc_error err;
    if (ptc_tensor_sha256(t, digest, &err) < 0 || nbytes > FUZZ_MAX_READ_BYTES)
        return;
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

static void touch(const ptc_value *v, visit *st)
{
    FUZZ_REQUIRE(v != NULL);
    if (++st->visits >= FUZZ_MAX_VISITS)
        return;
    ptc_value_kind kind = ptc_value_kind_of(v);
    FUZZ_REQUIRE(ptc_value_kind_name(kind) != NULL);
    if (ptc_value_is_symbolic(v)) {
        FUZZ_REQUIRE(kind == PTC_VALUE_GLOBAL || kind == PTC_VALUE_OBJECT);
        st->symbolic = true;
    }
    switch (kind) {
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        for (size_t i = 0; i < ptc_value_len(v) && st->visits < FUZZ_MAX_VISITS; i++)
            touch(ptc_value_item(v, i), st);
        break;
    case PTC_VALUE_DICT:
        for (size_t i = 0; i < ptc_value_len(v) && st->visits < FUZZ_MAX_VISITS; i++) {
            touch(ptc_dict_key(v, i), st);
            touch(ptc_dict_value(v, i), st);
        }
        if (ptc_dict_attrs(v))
            touch(ptc_dict_attrs(v), st);
        break;
    case PTC_VALUE_TENSOR:
        check_tensor(ptc_value_tensor(v), st);
        break;
    case PTC_VALUE_GLOBAL:
        FUZZ_REQUIRE(ptc_value_global_name(v) != NULL);
        FUZZ_REQUIRE(ptc_object_callable(v) == NULL);
        if (ptc_value_is_back_reference(v))
            FUZZ_REQUIRE(ptc_value_is_symbolic(v) &&
                         strncmp(ptc_value_global_name(v), "<back-reference to ", 19) == 0);
        break;
    case PTC_VALUE_OBJECT: {
        /* The chain of callables ends at a global, which names the object. */
        const ptc_value *fn = ptc_object_callable(v);
        FUZZ_REQUIRE(fn != NULL);
        FUZZ_REQUIRE(ptc_value_kind_of(fn) == PTC_VALUE_GLOBAL ||
                     ptc_value_kind_of(fn) == PTC_VALUE_OBJECT);
        FUZZ_REQUIRE(ptc_value_global_name(v) != NULL);
        if (ptc_value_kind_of(fn) == PTC_VALUE_OBJECT)
            touch(fn, st);
        if (ptc_object_args(v))
            touch(ptc_object_args(v), st);
        if (ptc_object_state(v))
            touch(ptc_object_state(v), st);
        if (ptc_object_items(v)) {
            FUZZ_REQUIRE(ptc_value_is_symbolic(v));
            FUZZ_REQUIRE(ptc_value_kind_of(ptc_object_items(v)) == PTC_VALUE_DICT ||
                         ptc_value_kind_of(ptc_object_items(v)) == PTC_VALUE_LIST);
            touch(ptc_object_items(v), st);
        }
        break;
    }
    default:
        break;
    }
}

/* The tensors ptc_walk lists (paths and digests), folded into one hash, to compare two opens. */
static uint64_t walk_hash(const ptc_ckpt *c, size_t *n)
{
    uint64_t h = 1469598103934665603ull;
    ptc_walk *w = NULL;
    ptc_error err;
    *n = 0;
    if (ptc_walk_new(&w, ptc_ckpt_root(c), &err) < 0)
        return 0;
    /* A memo DAG of containers with few tensors costs the walk its nodes, not its tensors: both
     * walks stop at the same node. */
    ptc_budget budget;
    ptc_budget_init(&budget, c, 0);
    budget.max_nodes = FUZZ_MAX_VISITS;
    ptc_walk_set_budget(w, &budget);
    const char *path;
    const ptc_tensor *t;
    int64_t left = FUZZ_MAX_HASH_BYTES;
    while (*n < FUZZ_MAX_TENSORS && ptc_walk_next(w, &path, &t) > 0) {
        ++*n;
        for (const char *p = path; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        uint8_t d[32];
        if (ptc_tensor_nbytes(t) <= left && ptc_tensor_sha256(t, d, &err) == 0) {
            left -= ptc_tensor_nbytes(t);
            for (int i = 0; i < 32; i++)
                h = (h ^ d[i]) * 1099511628211ull;
        }
    }
    ptc_walk_free(w);
    return h;
}

static void check_symbols(const ptc_ckpt *c, size_t size)
{
    size_t n = ptc_ckpt_nsymbols(c);
    FUZZ_REQUIRE(n <= PTC_SYMBOLS_MAX);
    FUZZ_REQUIRE(ptc_ckpt_symbol(c, n) == NULL);
    for (size_t i = 0; i < n; i++) {
        const ptc_symbol *s = ptc_ckpt_symbol(c, i);
        FUZZ_REQUIRE(s != NULL && s->global != NULL && s->member != NULL);
        require_printable(s->global);
        require_printable(s->member);
        FUZZ_REQUIRE(s->offset >= 0 && (uint64_t)s->offset < size);
        FUZZ_REQUIRE(s->refs >= 1);
        /* Distinct names (the table is small enough for the square here). */
        for (size_t j = 0; j < i && n <= 256; j++)
            FUZZ_REQUIRE(strcmp(ptc_ckpt_symbol(c, j)->global, s->global) != 0);
    }
    if (ptc_ckpt_symbols_dropped(c) > 0)
        FUZZ_REQUIRE(n == PTC_SYMBOLS_MAX);
}

static void check_state_dict(const ptc_ckpt *c)
{
    ptc_doc *d = NULL;
    ptc_error err;
    if (ptc_doc_new(&d, &err) < 0)
        return;
    ptc_budget b;
    ptc_budget_init(&b, c, 0);
    const ptc_value *sd = NULL, *root = ptc_ckpt_root(c);
    const char *chosen = NULL;
    int rc = ptc_salvage_state_dict(d, root, NULL, &b, &sd, &chosen, &err);
    if (rc < 0) {
        FUZZ_REQUIRE(err.code == rc && sd == NULL && chosen == NULL && err.message[0] != '\0');
        require_printable(err.message);
    } else {
        FUZZ_REQUIRE(sd != NULL && chosen != NULL && ptc_value_kind_of(sd) == PTC_VALUE_DICT);
        /* Built from a module (the chosen path names one), rather than a state dict already. */
        const ptc_value *pick = chosen[0] ? ptc_dict_get(root, chosen) : root;
        int built = ptc_salvage_is_module(pick);
        if (built)
            FUZZ_REQUIRE(ptc_dict_is_ordered(sd) && ptc_dict_attrs(sd) == NULL);
        for (size_t i = 0; i < ptc_value_len(sd); i++) {
            const ptc_tensor *t = ptc_value_tensor(ptc_dict_value(sd, i));
            FUZZ_REQUIRE(t != NULL);
            if (built)
                FUZZ_REQUIRE(!ptc_tensor_is_parameter(t) && !ptc_tensor_requires_grad(t));
        }
    }
    ptc_doc_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_open_params params;
    ptc_open_params_default(&params);
    ptc_ckpt *strict = NULL, *c = NULL;
    ptc_error err, serr;
    int strict_rc = ptc_ckpt_open_memory(&strict, data, size, &params, &serr);
    params.flags = PTC_OPEN_SALVAGE;
    int rc = ptc_ckpt_open_memory(&c, data, size, &params, &err);
    /* Salvage cuts the cycles a strict open refuses: past the cycle, anything clean. */
    if (strict_rc != PTC_EUNSAFE && !(strict_rc < 0 && strstr(serr.message, "contains a cycle")))
        FUZZ_REQUIRE(rc == strict_rc);
    if (rc < 0) {
        FUZZ_REQUIRE(err.code == rc && err.message[0] != '\0');
        require_printable(err.message);
        ptc_ckpt_close(strict);
        return 0;
    }
    FUZZ_REQUIRE(ptc_ckpt_root(c) != NULL);
    check_symbols(c, size);
    for (size_t i = 0; i < ptc_ckpt_nstorages(c); i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        int64_t nbytes = ptc_storage_nbytes(s);
        FUZZ_REQUIRE(nbytes >= 0);
        if (nbytes > 0) {
            volatile uint8_t sink = ((const uint8_t *)ptc_storage_data(s))[0];
            sink = ((const uint8_t *)ptc_storage_data(s))[nbytes - 1];
            (void)sink;
        }
    }
    visit st = {0, 0, FUZZ_MAX_HASH_BYTES, false};
    touch(ptc_ckpt_root(c), &st);
    if (strict_rc == 0) {
        size_t n1, n2;
        FUZZ_REQUIRE(ptc_ckpt_nsymbols(c) == 0 && ptc_ckpt_symbols_dropped(c) == 0);
        FUZZ_REQUIRE(walk_hash(strict, &n1) == walk_hash(c, &n2) && n1 == n2);
    }
    if (st.symbolic && st.visits < FUZZ_MAX_VISITS) {
        /* Never written back: a clean refusal before any file is made. */
        ptc_error e;
        int src = ptc_save(ptc_ckpt_root(c), "/nonexistent-ptc-fuzz/x.pth", NULL, &e);
        FUZZ_REQUIRE(src < 0 && e.code == src);
    }
    check_state_dict(c);
    ptc_ckpt_close(c);
    ptc_ckpt_close(strict);
    return 0;
}
