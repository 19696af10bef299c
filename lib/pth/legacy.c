/*
 * legacy.c - the pickle-stream checkpoint format of PyTorch before 1.6 (still written by
 * torch.save(..., _use_new_zipfile_serialization=False)).
 *
 * On-disk layout (docs/internals/legacy.md): five protocol-2 pickles back to back -
 *   1. the magic number 0x1950A86A20F9469CFC6C (a 10-byte LONG1),
 *   2. the protocol version 1001,
 *   3. a sys_info dict (read and ignored, as torch does),
 *   4. the object, whose storages are persistent ids ('storage', class, key, location, numel,
 *      view_metadata),
 *   5. the list of storage keys, in the order their data follows -
 * then for each key: an int64 little-endian element count followed by count * element size bytes,
 * little-endian. Nothing may follow the last storage.
 *
 * Like torch 2.6, sys_info is read and ignored whatever it is, and the keys are taken from a list,
 * a tuple or a dict's keys. torch 2.6 is looser still: it iterates a set of keys in an order that
 * changes from process to process (string hashes are randomised), reads a storage once per time
 * its key is listed (so the bytes after it shift), leaves an unlisted one uninitialised (its
 * tensors show whatever the heap held), and never looks past the last storage it reads (bytes
 * there are a hiding place). Those refusals carry PTC_ERR_STRICTER.
 *
 * Every pickle is scanned for references outside the policy before it runs. No storage memory is
 * allocated from a declared size: data is used in place when aligned, and copied (after its bytes
 * are proven present) when not.
 */
#include "pth/pth.h"

#include <string.h>

static const uint8_t magic_long[10] = {0x6C, 0xFC, 0x9C, 0x46, 0xF9, 0x20, 0x6A, 0xA8, 0x50, 0x19};

static const char *const part_names[5] = {"legacy magic", "legacy protocol", "legacy sys_info",
                                          "legacy object", "legacy keys"};

/* The keys torch iterates: the items of a list, tuple or set, or a dict's keys. */
static bool key_items(const ptc_value *v, ptc_value *const **items, size_t *n)
{
    switch (v->kind) {
    case PTC_VALUE_LIST:
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_SET:
        *items = v->u.seq.items;
        *n = v->u.seq.n;
        return true;
    case PTC_VALUE_DICT:
        *items = v->u.dict.keys;
        *n = v->u.dict.n;
        return true;
    default:
        return false;
    }
}

/* Whether torch finds the storage of every key (it asserts that each key was declared). */
static bool torch_finds_keys(ptc_ckpt *c, const ptc_value *keys)
{
    ptc_value *const *items;
    size_t n;
    if (!key_items(keys, &items, &n))
        return false;
    for (size_t i = 0; i < n; i++) {
        const ptc_value *k = items[i];
        const ptc_storage *s =
            k->kind == PTC_VALUE_STR ? ptc__ckpt_find_storage(c, k->u.s.p) : NULL;
        if (!s || s->parent || s->salvaged)
            return false;
    }
    return true;
}

int ptc__load_legacy(ptc_ckpt *c, ptc_error *err)
{
    c->legacy_mode = true;
    uint64_t size = ptc__source_size(c->src);
    const uint8_t *data = ptc__source_map(c->src);
    if (!data) {
        /* Callback sources: the stream is sequential, so it is read whole (within the budget,
         * a limit torch does not have). */
        if (size > SIZE_MAX || ptc__budget_take(&c->budget, size, NULL, "", 0) < 0)
            return ptc__err_stricter(err, PTC_ELIMIT, "", 0,
                                     "reading the stream of %llu bytes would exceed the heap "
                                     "limit of %llu bytes",
                                     (unsigned long long)size, (unsigned long long)c->budget.limit);
        uint8_t *buf = ptc__arena_alloc(c->arena, (size_t)size);
        if (!buf)
            return ptc__err(err, PTC_ENOMEM, "", 0, "out of memory reading the stream");
        int rc = ptc__source_read(c->src, 0, buf, (size_t)size, err);
        if (rc < 0)
            return rc;
        data = buf;
    }
    uint64_t pos = 0;
    ptc_value *parts[5];
    for (int i = 0; i < 5; i++) {
        size_t used = 0;
        int rc = ptc__pth_run_pickle(c, data + pos, (size_t)(size - pos), part_names[i], pos, true,
                                     &parts[i], &used, err);
        if (rc < 0)
            return rc;
        const ptc_value *v = parts[i];
        switch (i) {
        case 0:
            if (v->kind != PTC_VALUE_INT || v->u.i.nbytes != sizeof magic_long ||
                memcmp(v->u.i.bytes, magic_long, sizeof magic_long) != 0)
                return ptc__err(err, PTC_EFORMAT, part_names[i], (int64_t)pos,
                                "invalid magic number; not a legacy checkpoint");
            break;
        case 1:
            if (v->kind != PTC_VALUE_INT || !v->u.i.fits || v->u.i.v != 1001)
                return ptc__err(err, PTC_EFORMAT, part_names[i], (int64_t)pos,
                                "invalid protocol version (expected 1001)");
            break;
        case 4: {
            /* A container torch iterates: a list as torch writes it, a tuple, a dict's keys. A set
             * of several keys is refused: Python iterates strings in a set in an order that
             * changes from one process to the next (hash randomisation), so which bytes belong to
             * which storage would differ between two readings. */
            ptc_value *const *items;
            size_t nitems;
            if (!key_items(v, &items, &nitems))
                return ptc__err(err, PTC_EFORMAT, part_names[i], (int64_t)pos,
                                "the storage key list is a %s, not a list",
                                ptc_value_kind_name((ptc_value_kind)v->kind));
            if (v->kind == PTC_VALUE_SET && nitems > 1)
                return PTC__ERR_IF(torch_finds_keys(c, v), PTC_EFORMAT, part_names[i], (int64_t)pos,
                                   "the storage keys are a set of %zu, whose order Python does "
                                   "not fix",
                                   nitems);
            break;
        }
        default:
            break;
        }
        pos += used;
    }
    c->root = parts[3];

    /* The key list must name every root storage exactly once and nothing else (a salvaged numpy
     * array's storage has no data in the stream). */
    const ptc_value *keys = parts[4];
    ptc_value *const *kitems = NULL;
    size_t nkeys = 0, nroots = 0;
    key_items(keys, &kitems, &nkeys);
    for (size_t i = 0; i < c->nstorages; i++)
        nroots += c->storages[i]->parent == NULL && !c->storages[i]->salvaged;
    if (nkeys != nroots)
        return PTC__ERR_IF(torch_finds_keys(c, keys), PTC_EFORMAT, "legacy keys", -1,
                           "the key list names %zu storages but the object declares %zu", nkeys,
                           nroots);
    for (size_t i = 0; i < nkeys; i++) {
        const ptc_value *k = kitems[i];
        if (k->kind != PTC_VALUE_STR)
            return ptc__err(err, PTC_EFORMAT, "legacy keys", -1, "key %zu is not a str", i);
        ptc_storage *s = ptc__ckpt_find_storage(c, k->u.s.p);
        if (!s || s->parent || s->salvaged)
            return ptc__err(err, PTC_EFORMAT, "legacy keys", -1,
                            "key %zu names no storage declared by the object", i);
        if (s->mapped || s->owned) /* already read: the key was listed before */
            return ptc__err_stricter(err, PTC_EFORMAT, "legacy keys", -1,
                                     "storage key listed twice");
        size_t es = ptc_dtype_size(s->dtype);
        if (size - pos < 8)
            return ptc__err(err, PTC_EFORMAT, "", (int64_t)pos,
                            "truncated: storage %s has no element count", s->key);
        uint64_t count = ptc__le64(data + pos);
        uint64_t expect = (uint64_t)s->nbytes / es;
        if (count != expect)
            return ptc__err(err, PTC_EFORMAT, "", (int64_t)pos,
                            "storage %s holds %llu elements but the object declares %llu", s->key,
                            (unsigned long long)count, (unsigned long long)expect);
        pos += 8;
        if ((uint64_t)s->nbytes > size - pos)
            return ptc__err(err, PTC_EFORMAT, "", (int64_t)pos,
                            "truncated: storage %s needs %lld bytes, %llu remain", s->key,
                            (long long)s->nbytes, (unsigned long long)(size - pos));
        const uint8_t *p = data + pos;
        if (((uintptr_t)p % es) != 0 || (c->flags & PTC_OPEN_COPY)) {
            if (ptc__budget_take(&c->budget, (uint64_t)s->nbytes, NULL, "", (int64_t)pos) < 0)
                return ptc__err_stricter(err, PTC_ELIMIT, "", (int64_t)pos,
                                         "copying storage %s of %lld bytes would exceed the heap "
                                         "limit of %llu bytes",
                                         s->key, (long long)s->nbytes,
                                         (unsigned long long)c->budget.limit);
            void *copy = ptc__malloc(s->nbytes ? (size_t)s->nbytes : 1);
            if (!copy)
                return ptc__err(err, PTC_ENOMEM, "", (int64_t)pos, "out of memory");
            memcpy(copy, p, (size_t)s->nbytes);
            s->owned = copy;
            s->data = copy;
        } else {
            s->data = p;
            s->mapped = true;
        }
        pos += (uint64_t)s->nbytes;
    }
    if (pos != size)
        return ptc__err_stricter(err, PTC_EFORMAT, "", (int64_t)pos,
                                 "%llu bytes follow the last storage",
                                 (unsigned long long)(size - pos));
    /* Views share their root's bytes. */
    for (size_t i = 0; i < c->nstorages; i++) {
        ptc_storage *s = c->storages[i];
        if (s->parent) {
            s->data = s->parent->data + s->parent_offset;
            s->mapped = s->parent->mapped;
        }
    }
    return 0;
}
