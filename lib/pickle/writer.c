/*
 * writer.c - the pickle writer: protocol-2 opcodes with CPython's encoding choices, and the memo.
 *
 * CPython's pickler memoizes every object that is not None, a bool, an int or a float, numbering
 * memo entries 0, 1, 2, ... in the order objects are first written; a second reference to the
 * same object (identity, not equality) is a BINGET. The writer reproduces that numbering given an
 * identity key per object, which is what makes byte-identical output possible.
 */
#include "pickle/pickle.h"

#include <string.h>

void ptc__pw_init(ptc__pw *w)
{
    memset(w, 0, sizeof *w);
    w->out.max = PTC__PW_MAX_BYTES;
}

void ptc__pw_free(ptc__pw *w)
{
    ptc__buf_free(&w->out);
    ptc__free(w->keys);
    ptc__free(w->vals);
    memset(w, 0, sizeof *w);
}

bool ptc__pw_failed(const ptc__pw *w)
{
    return w->failed != 0;
}

int ptc__pw_error(const ptc__pw *w)
{
    return w->failed;
}

static void emit(ptc__pw *w, const void *p, size_t n)
{
    int rc;
    if (!w->failed && (rc = ptc__buf_append(&w->out, p, n)) < 0)
        w->failed = rc;
}

void ptc__pw_op(ptc__pw *w, uint8_t op)
{
    emit(w, &op, 1);
}

static size_t slot_of(const ptc__pw *w, const void *key)
{
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15ULL;
    return (size_t)(h ^ (h >> 29)) & (w->cap - 1);
}

static bool lookup(const ptc__pw *w, const void *key, uint32_t *idx)
{
    if (!w->cap)
        return false;
    for (size_t i = slot_of(w, key); w->keys[i]; i = (i + 1) & (w->cap - 1)) {
        if (w->keys[i] == key) {
            *idx = w->vals[i];
            return true;
        }
    }
    return false;
}

static void insert(ptc__pw *w, const void *key, uint32_t idx)
{
    if ((w->n + 1) * 2 > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        const void **keys = ptc__calloc(cap, sizeof *keys);
        uint32_t *vals = ptc__calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            ptc__free(keys);
            ptc__free(vals);
            w->failed = PTC_ENOMEM;
            return;
        }
        const void **ok = w->keys;
        uint32_t *ov = w->vals;
        size_t ocap = w->cap;
        w->keys = keys;
        w->vals = vals;
        w->cap = cap;
        for (size_t i = 0; i < ocap; i++) {
            if (!ok[i])
                continue;
            size_t j = slot_of(w, ok[i]);
            while (w->keys[j])
                j = (j + 1) & (cap - 1);
            w->keys[j] = ok[i];
            w->vals[j] = ov[i];
        }
        ptc__free(ok);
        ptc__free(ov);
    }
    size_t j = slot_of(w, key);
    while (w->keys[j])
        j = (j + 1) & (w->cap - 1);
    w->keys[j] = key;
    w->vals[j] = idx;
    w->n++;
}

static void memo_op(ptc__pw *w, uint8_t small, uint8_t large, uint32_t idx)
{
    uint8_t b[5];
    if (idx < 256) {
        b[0] = small;
        b[1] = (uint8_t)idx;
        emit(w, b, 2);
    } else {
        b[0] = large;
        ptc__put_le32(b + 1, idx);
        emit(w, b, 5);
    }
}

bool ptc__pw_get(ptc__pw *w, const void *key)
{
    uint32_t idx;
    if (!key || !lookup(w, key, &idx))
        return false;
    memo_op(w, PTC__OP_BINGET, PTC__OP_LONG_BINGET, idx);
    return true;
}

void ptc__pw_put(ptc__pw *w, const void *key)
{
    /* LONG_BINPUT's index is a u32: that many memo entries and no more. */
    if (w->next == PTC__PW_MAX_MEMO) {
        if (!w->failed)
            w->failed = PTC_ELIMIT;
        return;
    }
    uint32_t idx = w->next++;
    memo_op(w, PTC__OP_BINPUT, PTC__OP_LONG_BINPUT, idx);
    if (key)
        insert(w, key, idx);
}

void ptc__pw_int(ptc__pw *w, int64_t v)
{
    uint8_t b[10];
    if (v >= 0 && v <= 0xFF) {
        b[0] = PTC__OP_BININT1;
        b[1] = (uint8_t)v;
        emit(w, b, 2);
    } else if (v >= 0 && v <= 0xFFFF) {
        b[0] = PTC__OP_BININT2;
        ptc__put_le16(b + 1, (uint16_t)v);
        emit(w, b, 3);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        b[0] = PTC__OP_BININT;
        ptc__put_le32(b + 1, (uint32_t)(int32_t)v);
        emit(w, b, 5);
    } else {
        /* LONG1 with the minimal two's-complement length, as CPython's encode_long. */
        uint8_t bytes[8];
        size_t n = 8;
        for (size_t k = 0; k < 8; k++)
            bytes[k] = (uint8_t)((uint64_t)v >> (8 * k));
        while (n > 1 && ((bytes[n - 1] == 0x00 && !(bytes[n - 2] & 0x80)) ||
                         (bytes[n - 1] == 0xFF && (bytes[n - 2] & 0x80))))
            n--;
        ptc__pw_long(w, bytes, n);
    }
}

void ptc__pw_long(ptc__pw *w, const uint8_t *bytes, size_t n)
{
    if (n > 255) {
        uint8_t b[5] = {PTC__OP_LONG4};
        ptc__put_le32(b + 1, (uint32_t)n);
        emit(w, b, 5);
    } else {
        uint8_t b[2] = {PTC__OP_LONG1, (uint8_t)n};
        emit(w, b, 2);
    }
    emit(w, bytes, n);
}

void ptc__pw_float(ptc__pw *w, double f)
{
    uint8_t b[9] = {PTC__OP_BINFLOAT};
    uint64_t bits;
    memcpy(&bits, &f, sizeof bits);
    for (int k = 0; k < 8; k++)
        b[1 + k] = (uint8_t)(bits >> (56 - 8 * k));
    emit(w, b, 9);
}

void ptc__pw_str(ptc__pw *w, const char *s, size_t n)
{
    if (n > UINT32_MAX) { /* BINUNICODE's length is a u32 (the output cap is smaller anyway) */
        if (!w->failed)
            w->failed = PTC_ELIMIT;
        return;
    }
    uint8_t b[5] = {PTC__OP_BINUNICODE};
    ptc__put_le32(b + 1, (uint32_t)n);
    emit(w, b, 5);
    emit(w, s, n);
}

void ptc__pw_global(ptc__pw *w, const char *module, const char *name)
{
    /* Protocol 2 with fix_imports writes Python 2 names for the builtins. */
    if (strcmp(module, "builtins") == 0)
        module = "__builtin__";
    ptc__pw_op(w, PTC__OP_GLOBAL);
    emit(w, module, strlen(module));
    emit(w, "\n", 1);
    emit(w, name, strlen(name));
    emit(w, "\n", 1);
}
