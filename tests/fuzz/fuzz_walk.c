/*
 * fuzz_walk.c - fuzz target for what runs after a load: the budgeted walk, hashing, casts and
 * saving, over any tree the loader accepts. The input is a checkpoint file held in memory.
 *
 * A tree the load accepts may still be built to cost far more than its file: a memo DAG that
 * shares one list twenty levels deep, a stride-0 view claiming terabytes. Everything ptc does with
 * an accepted tree therefore charges a work budget (ptc_budget), and this target checks that the
 * budget holds whatever the tree: with a budget scaled to the input, the walk, the hashes, the
 * casts and the saves either finish or stop with PTC_ELIMIT and a message, and the work actually
 * done never passes the budget (libFuzzer's -timeout and -rss_limit_mb catch the rest).
 *
 * It also checks a round trip: when ptc_save writes the tree (torch's zip format, and safetensors
 * for a flat dict of tensors), the written file loads again and walks to the same paths with the
 * same SHA-256 per tensor.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ptc/ptc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Bytes the target lets one input cost beyond 64 x its size: small, so that libFuzzer spends its
 * time on shapes rather than on hashing. */
#define FUZZ_BYTE_BASE (8u << 20)
/* Tensors remembered for the round trip. */
#define FUZZ_MAX_ROWS 4096

typedef struct row {
    char *path;
    uint8_t digest[32];
} row;

typedef struct listing {
    row rows[FUZZ_MAX_ROWS];
    size_t n;
    int complete; /* every tensor listed, none refused by the budget */
} listing;

static void listing_free(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->rows[i].path);
    l->n = 0;
}

/* Walks root under budget b, hashing each tensor after charging its bytes. Returns 0 when the
 * walk finished, or the PTC_ELIMIT of an exceeded budget. */
static int list_tensors(const ptc_value *root, ptc_budget *b, listing *out)
{
    ptc_walk *w = NULL;
    ptc_error err;
    out->n = 0;
    out->complete = 0;
    FUZZ_REQUIRE(ptc_walk_new(&w, root, &err) == 0);
    ptc_walk_set_budget(w, b);
    const char *path;
    const ptc_tensor *t;
    int rc;
    while ((rc = ptc_walk_next(w, &path, &t)) > 0) {
        FUZZ_REQUIRE(path != NULL && t != NULL);
        int64_t nbytes = ptc_tensor_nbytes(t);
        FUZZ_REQUIRE(nbytes >= 0);
        if ((rc = ptc_budget_charge(b, 0, (uint64_t)nbytes, &err)) < 0) {
            FUZZ_REQUIRE(rc == PTC_ELIMIT && strstr(err.message, "work budget") != NULL);
            break;
        }
        uint8_t digest[32];
        FUZZ_REQUIRE(ptc_tensor_sha256(t, digest, &err) == 0);
        if (out->n < FUZZ_MAX_ROWS) {
            row *r = &out->rows[out->n++];
            r->path = strdup(path);
            FUZZ_REQUIRE(r->path != NULL);
            memcpy(r->digest, digest, sizeof digest);
        }
    }
    if (rc < 0 && rc != PTC_ELIMIT) {
        /* Only the budget or memory may stop a walk. */
        FUZZ_REQUIRE(rc == PTC_ENOMEM);
    }
    if (rc == PTC_ELIMIT && ptc_walk_error(w)->code == PTC_ELIMIT)
        FUZZ_REQUIRE(strstr(ptc_walk_error(w)->message, "work budget") != NULL);
    ptc_walk_free(w);
    FUZZ_REQUIRE(b->nodes <= b->max_nodes && b->bytes <= b->max_bytes);
    out->complete = rc == 0 && out->n < FUZZ_MAX_ROWS;
    return rc < 0 ? rc : 0;
}

/* Casts every tensor of the tree to float32 (where ptc_doc_cast accepts it), charging what each
 * cast writes; the cast values are checked against the source's shape. */
static void cast_all(const ptc_value *root, ptc_budget *b)
{
    ptc_doc *d = NULL;
    ptc_error err;
    FUZZ_REQUIRE(ptc_doc_new(&d, &err) == 0);
    ptc_walk *w = NULL;
    FUZZ_REQUIRE(ptc_walk_new(&w, root, &err) == 0);
    ptc_walk_set_budget(w, b);
    const char *path;
    const ptc_tensor *t;
    while (ptc_walk_next(w, &path, &t) > 0) {
        int64_t numel = ptc_tensor_numel(t);
        if (ptc_budget_charge(b, 0, (uint64_t)numel * 4 + (uint64_t)ptc_tensor_nbytes(t), &err) < 0)
            break;
        const ptc_value *cv = ptc_doc_cast(d, t, PTC_FLOAT32);
        if (!cv)
            continue; /* a dtype casts do not cover: refused with a reason */
        const ptc_tensor *ct = ptc_value_tensor(cv);
        FUZZ_REQUIRE(ct != NULL && ptc_tensor_numel(ct) == numel);
        FUZZ_REQUIRE(ptc_tensor_is_contiguous(ct));
    }
    ptc_walk_free(w);
    ptc_doc_free(d);
}

/* Saves root to path in the given format (charging the tensor bytes it may write), loads it
 * back and checks that it lists the same tensors as before. */
static void round_trip(const ptc_value *root, const listing *before, const char *path,
                       ptc_save_format fmt, ptc_budget *b)
{
    ptc_error err;
    ptc_save_params sp;
    ptc_save_params_default(&sp);
    sp.format = fmt;
    int rc = ptc_save(root, path, &sp, &err);
    if (rc < 0) {
        /* A tree ptc cannot write (an object of an allowed class, a non-flat safetensors tree...)
         * is refused with a reason, and leaves no file. */
        FUZZ_REQUIRE(err.message[0] != '\0');
        FUZZ_REQUIRE(access(path, F_OK) != 0);
        return;
    }
    ptc_ckpt *c = NULL;
    rc = ptc_ckpt_open(&c, path, NULL, &err);
    if (rc < 0)
        fprintf(stderr, "reloading what ptc_save wrote: %s\n", err.message);
    FUZZ_REQUIRE(rc == 0);
    ptc_budget b2;
    ptc_budget_init(&b2, c, b->max_bytes);
    listing *after = calloc(1, sizeof *after);
    FUZZ_REQUIRE(after != NULL);
    FUZZ_REQUIRE(list_tensors(ptc_ckpt_root(c), &b2, after) == 0);
    FUZZ_REQUIRE(after->n == before->n);
    for (size_t i = 0; i < before->n; i++) {
        /* torch's format keeps the order; safetensors stores tensors by name and offset, so
         * there the same names are looked up. */
        size_t j = i;
        if (fmt == PTC_SAVE_SAFETENSORS)
            for (j = 0; j < after->n && strcmp(after->rows[j].path, before->rows[i].path); j++)
                ;
        FUZZ_REQUIRE(j < after->n && strcmp(after->rows[j].path, before->rows[i].path) == 0);
        FUZZ_REQUIRE(memcmp(after->rows[j].digest, before->rows[i].digest, 32) == 0);
    }
    listing_free(after);
    free(after);
    ptc_ckpt_close(c);
    unlink(path);
}

static int is_flat_tensor_dict(const ptc_value *root)
{
    if (ptc_value_kind_of(root) != PTC_VALUE_DICT || ptc_value_len(root) == 0)
        return 0;
    for (size_t i = 0; i < ptc_value_len(root); i++)
        if (ptc_value_kind_of(ptc_dict_key(root, i)) != PTC_VALUE_STR ||
            ptc_value_kind_of(ptc_dict_value(root, i)) != PTC_VALUE_TENSOR)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_open_params params;
    ptc_open_params_default(&params);
    ptc_ckpt *c = NULL;
    ptc_error err;
    if (ptc_ckpt_open_memory(&c, data, size, &params, &err) < 0)
        return 0; /* the load target covers refusals */
    FUZZ_REQUIRE(ptc_ckpt_file_size(c) == size);

    ptc_budget b;
    ptc_budget_init(&b, c, (uint64_t)size * 64 + FUZZ_BYTE_BASE);
    FUZZ_REQUIRE(b.max_nodes >= 1000000 && b.nodes == 0 && b.bytes == 0);
    listing *before = calloc(1, sizeof *before);
    FUZZ_REQUIRE(before != NULL);
    int rc = list_tensors(ptc_ckpt_root(c), &b, before);
    FUZZ_REQUIRE(rc == 0 || rc == PTC_ELIMIT || rc == PTC_ENOMEM);

    ptc_budget cb;
    ptc_budget_init(&cb, c, (uint64_t)size * 64 + FUZZ_BYTE_BASE);
    cast_all(ptc_ckpt_root(c), &cb);
    FUZZ_REQUIRE(cb.bytes <= cb.max_bytes && cb.nodes <= cb.max_nodes);

    /* The round trip only for trees the budget let us list whole, and whose storages are small:
     * saving writes every storage once, whatever the views claim. */
    uint64_t stored = 0;
    for (size_t i = 0; i < ptc_ckpt_nstorages(c); i++)
        stored += (uint64_t)ptc_storage_nbytes(ptc_ckpt_storage(c, i));
    if (rc == 0 && before->complete && stored <= FUZZ_BYTE_BASE) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/ptc-fuzz-walk-%ld.pth", (long)getpid());
        round_trip(ptc_ckpt_root(c), before, path, PTC_SAVE_PTH, &b);
        if (is_flat_tensor_dict(ptc_ckpt_root(c))) {
            snprintf(path, sizeof path, "/tmp/ptc-fuzz-walk-%ld.safetensors", (long)getpid());
            round_trip(ptc_ckpt_root(c), before, path, PTC_SAVE_SAFETENSORS, &b);
        }
    }
    listing_free(before);
    free(before);
    ptc_ckpt_close(c);
    return 0;
}
