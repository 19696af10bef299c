/*
 * pickle_build.h - building protocol-2 pickles byte by byte for the salvage unit tests
 * (test_salvage, test_salvage_build, test_salvage_cycle): a growing buffer, the opcodes with
 * arguments they need, and numpy arrays as numpy pickles them. Static inline: each test uses
 * a part. An allocation failure aborts the test.
 */
#ifndef PTC_TESTS_PICKLE_BUILD_H
#define PTC_TESTS_PICKLE_BUILD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pk {
    uint8_t *p;
    size_t n, cap;
} pk;

static inline void put(pk *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
#define PUT(b, lit) put(b, lit, sizeof(lit) - 1)

static inline void put_u32(pk *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, le, 4);
}

/* BINUNICODE s */
static inline void put_str(pk *b, const char *s)
{
    PUT(b, "X");
    put_u32(b, (uint32_t)strlen(s));
    put(b, s, strlen(s));
}

/* BININT v */
static inline void put_int(pk *b, int32_t v)
{
    PUT(b, "J");
    put_u32(b, (uint32_t)v);
}

/* bytes at protocol 2: _codecs.encode(latin-1 text as UTF-8, 'latin1'); b'' as bytes(). */
static inline void put_bytes(pk *b, const uint8_t *raw, size_t n)
{
    if (n == 0) {
        PUT(b, "c__builtin__\nbytes\n)R");
        return;
    }
    pk t = {0};
    for (size_t i = 0; i < n; i++) {
        uint8_t u[2] = {(uint8_t)(0xC0 | (raw[i] >> 6)), (uint8_t)(0x80 | (raw[i] & 0x3F))};
        put(&t, raw[i] < 0x80 ? raw + i : u, raw[i] < 0x80 ? 1 : 2);
    }
    PUT(b, "c_codecs\nencode\nX");
    put_u32(b, (uint32_t)t.n);
    put(b, t.p, t.n);
    PUT(b, "X\x06\x00\x00\x00latin1\x86R");
    free(t.p);
}

/* numpy.dtype(code, False, True) with BUILD (3, order, None, None, None, -1, -1, 0). */
static inline void put_dtype(pk *b, const char *code, const char *order)
{
    PUT(b, "cnumpy\ndtype\n");
    put_str(b, code);
    PUT(b, "\x89\x88\x87R(K\x03");
    put_str(b, order);
    PUT(b, "NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb");
}

/* An array of class cls ("ndarray" for numpy's own) as numpy 2 pickles it (numpy 1 when np1):
 * _reconstruct(numpy.<cls>, (0,), b'b'), then BUILD (version, shape, dtype, fortran, data), the
 * version left out when it is 0. */
static inline void put_array_as(pk *b, bool np1, const char *cls, int version, const int32_t *shape,
                                int ndim, const char *code, const char *order, bool fortran,
                                const void *raw, size_t n)
{
    if (np1)
        PUT(b, "cnumpy.core.multiarray\n_reconstruct\n");
    else
        PUT(b, "cnumpy._core.multiarray\n_reconstruct\n");
    PUT(b, "cnumpy\n");
    put(b, cls, strlen(cls));
    PUT(b, "\nK\x00\x85");
    put_bytes(b, (const uint8_t *)"b", 1);
    PUT(b, "\x87R(");
    if (version)
        put_int(b, version);
    PUT(b, "(");
    for (int d = 0; d < ndim; d++)
        put_int(b, shape[d]);
    PUT(b, "t");
    put_dtype(b, code, order);
    put(b, fortran ? "\x88" : "\x89", 1);
    put_bytes(b, raw, n);
    PUT(b, "tb");
}

#endif /* PTC_TESTS_PICKLE_BUILD_H */
