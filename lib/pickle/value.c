/*
 * value.c - the value tree: constructors used by the pickle machine and the torch hooks, Python's
 * dict semantics (equal keys replace, insertion order kept), and the public read-only accessors
 * of ptc.h. The check of a finished tree (cycles, depth, expansion) is tree.c's.
 *
 * Every node lives in an arena; growable arrays double inside the arena (the abandoned arrays stay
 * until the arena is freed, which at most doubles the memory of a container).
 */
#include "pickle/pickle.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

ptc_value *ptc__value_new(ptc__arena *a, ptc_value_kind kind)
{
    ptc_value *v = ptc__arena_alloc(a, sizeof *v);
    if (v)
        v->kind = (uint8_t)kind;
    return v;
}

ptc_value *ptc__value_int(ptc__arena *a, int64_t x)
{
    ptc_value *v = ptc__value_new(a, PTC_VALUE_INT);
    if (v)
        ptc__value_int_set(v, x);
    return v;
}

void ptc__value_int_set(ptc_value *v, int64_t x)
{
    v->u.i.v = x;
    v->u.i.fits = true;
    /* The minimal two's-complement form, as LONG1 writes it (0 has no bytes). */
    size_t n = 0;
    if (x != 0) {
        for (n = 1; n < 8; n++) {
            int64_t lim = (int64_t)1 << (8 * n - 1);
            if (x >= -lim && x < lim)
                break;
        }
    }
    for (size_t k = 0; k < n; k++)
        v->u.i.small[k] = (uint8_t)((uint64_t)x >> (8 * k));
    v->u.i.bytes = v->u.i.small;
    v->u.i.nbytes = (uint32_t)n;
}

ptc_value *ptc__value_str(ptc__arena *a, ptc_value_kind kind, const char *s, size_t n)
{
    ptc_value *v = ptc__value_new(a, kind);
    if (!v)
        return NULL;
    char *p = ptc__arena_strndup(a, s, n);
    if (!p)
        return NULL;
    v->u.s.p = p;
    v->u.s.n = n;
    return v;
}

/* Makes room for item n of a container: PTC_ELIMIT past PTC__VALUE_MAX_ITEMS items. */
static int grow(ptc__arena *a, void **items, size_t *cap, size_t n, size_t elsize)
{
    if (n < *cap)
        return 0;
    if (n >= PTC__VALUE_MAX_ITEMS)
        return PTC_ELIMIT;
    size_t ncap = *cap ? *cap * 2 : 4;
    if (ncap > PTC__VALUE_MAX_ITEMS)
        ncap = PTC__VALUE_MAX_ITEMS;
    void *d = ptc__arena_alloc(a, ncap * elsize);
    if (!d)
        return PTC_ENOMEM;
    if (n)
        memcpy(d, *items, n * elsize);
    *items = d;
    *cap = ncap;
    return 0;
}

int ptc__seq_reserve(ptc__arena *a, ptc_value *seq, size_t more)
{
    ptc__seq *s = &seq->u.seq;
    if (more <= s->cap - s->n)
        return 0;
    if (more > PTC__VALUE_MAX_ITEMS - s->n)
        return PTC_ELIMIT;
    size_t ncap = s->n + more;
    /* Keep doubling's amortised cost for lists built by many small APPENDS. */
    if (ncap < s->cap * 2)
        ncap = s->cap * 2 < PTC__VALUE_MAX_ITEMS ? s->cap * 2 : PTC__VALUE_MAX_ITEMS;
    ptc_value **d = ptc__arena_alloc(a, ncap * sizeof *d);
    if (!d)
        return PTC_ENOMEM;
    if (s->n)
        memcpy(d, s->items, s->n * sizeof *d);
    s->items = d;
    s->cap = ncap;
    return 0;
}

int ptc__seq_push(ptc__arena *a, ptc_value *seq, ptc_value *item)
{
    ptc__seq *s = &seq->u.seq;
    int rc = grow(a, (void **)&s->items, &s->cap, s->n, sizeof *s->items);
    if (rc < 0)
        return rc;
    s->items[s->n++] = item;
    return 0;
}

/* ---- hashing and equality with Python's rules ----------------------------------------------
 * Python treats 1, 1.0 and True as the same dict key; numbers hash by value so that equal numbers
 * land in the same slot. */

/* A dict key's cost is bounded: hashing and comparing walk it with sharing expanded, so a tuple
 * that nests deeper than KEY_MAX_DEPTH or expands to more than KEY_MAX_NODES values is refused as a
 * key (a pickle can build tuples as deep as it has opcodes, and share one 64 levels deep into 2^64
 * paths). Hashing and equality below stop at the same depth, so they stay within the bound. */
#define KEY_MAX_DEPTH 64
#define KEY_MAX_NODES 4096

static bool hashable_rec(const ptc_value *v, int depth, size_t *nodes)
{
    if (++*nodes > KEY_MAX_NODES || depth > KEY_MAX_DEPTH)
        return false;
    switch (v->kind) {
    case PTC_VALUE_NONE:
    case PTC_VALUE_BOOL:
    case PTC_VALUE_INT:
    case PTC_VALUE_FLOAT:
    case PTC_VALUE_STR:
    case PTC_VALUE_BYTES:
    case PTC_VALUE_COMPLEX:
    case PTC_VALUE_DTYPE:
    case PTC_VALUE_GLOBAL:
    case PTC_VALUE_TENSOR:
    case PTC_VALUE_DEVICE:
        return !(v->kind == PTC_VALUE_BYTES && (v->flags & PTC__V_BYTEARRAY));
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_SIZE:
        for (size_t i = 0; i < v->u.seq.n; i++)
            if (v->u.seq.items[i] == v || !hashable_rec(v->u.seq.items[i], depth + 1, nodes))
                return false;
        return true;
    case PTC_VALUE_OBJECT:
        /* Python hashes an instance by its identity unless its class says otherwise, which ptc
         * cannot know of a class it reads symbolically: identity it is (enums are dict keys). */
        return (v->flags & PTC__V_SYMBOLIC) != 0;
    default:
        return false;
    }
}

static bool hashable(const ptc_value *v)
{
    size_t nodes = 0;
    return hashable_rec(v, 0, &nodes);
}

bool ptc__value_hashable(const ptc_value *v)
{
    return hashable(v);
}

bool ptc__value_truthy(const ptc_value *v)
{
    switch (v->kind) {
    case PTC_VALUE_NONE:
        return false;
    case PTC_VALUE_BOOL:
        return v->u.b;
    case PTC_VALUE_INT:
        return !v->u.i.fits || v->u.i.v != 0;
    case PTC_VALUE_FLOAT:
        return v->u.f != 0;
    case PTC_VALUE_COMPLEX:
        return v->u.c.re != 0 || v->u.c.im != 0;
    case PTC_VALUE_STR:
    case PTC_VALUE_BYTES:
        return v->u.s.n != 0;
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        return v->u.seq.n != 0;
    case PTC_VALUE_DICT:
        return v->u.dict.n != 0;
    default:
        return true;
    }
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* Python compares numbers by value, whatever their types: 1 == 1.0 == True == (1+0j). Every
 * integral number has one canonical form here, the minimal two's-complement little-endian bytes
 * LONG1 writes (no bytes for 0), so that an int of any size and a float are compared exactly. */
enum { INT_FORM_CAP = 136 }; /* a double's integer part fits in 129 bytes */

/* The float value of a float, or of a complex with no imaginary part. */
static bool as_float(const ptc_value *v, double *f)
{
    if (v->kind == PTC_VALUE_FLOAT)
        *f = v->u.f;
    else if (v->kind == PTC_VALUE_COMPLEX && v->u.c.im == 0)
        *f = v->u.c.re;
    else
        return false;
    return true;
}

/* The canonical bytes of an integral double; -1 when f is not a finite integer. */
static int float_int_form(double f, uint8_t *out)
{
    if (!isfinite(f) || f != floor(f))
        return -1;
    memset(out, 0, INT_FORM_CAP);
    if (f == 0)
        return 0;
    int e;
    double frac = frexp(fabs(f), &e); /* |f| = frac * 2^e, frac in [0.5, 1), e <= 1024 */
    uint64_t mant = (uint64_t)ldexp(frac, 53);
    int shift = e - 53;
    if (shift < 0) { /* exact: f is an integer */
        mant >>= -shift;
        shift = 0;
    }
    for (int b = 0; b < 64; b++)
        if ((mant >> b) & 1)
            out[(b + shift) / 8] |= (uint8_t)(1u << ((b + shift) % 8));
    size_t n = (size_t)e / 8 + 2;
    if (f < 0) {
        unsigned carry = 1;
        for (size_t k = 0; k < n; k++) {
            unsigned x = (uint8_t)~out[k] + carry;
            out[k] = (uint8_t)x;
            carry = x >> 8;
        }
    }
    while (n > 1 && ((out[n - 1] == 0x00 && !(out[n - 2] & 0x80)) ||
                     (out[n - 1] == 0xFF && (out[n - 2] & 0x80))))
        n--;
    return (int)n;
}

/* The canonical bytes of a bool, an int or an integral float or complex: *p and the length, or
 * -1 when v is no integer. buf holds the bytes when they are made here. */
static int int_form(const ptc_value *v, uint8_t *buf, const uint8_t **p)
{
    double f;
    *p = buf;
    if (v->kind == PTC_VALUE_BOOL) {
        buf[0] = 1;
        return v->u.b ? 1 : 0;
    }
    if (v->kind == PTC_VALUE_INT) {
        *p = v->u.i.bytes;
        return (int)v->u.i.nbytes;
    }
    return as_float(v, &f) ? float_int_form(f, buf) : -1;
}

static bool is_number_kind(const ptc_value *v)
{
    double f;
    return v->kind == PTC_VALUE_BOOL || v->kind == PTC_VALUE_INT || as_float(v, &f);
}

/* Python's == between two numbers. */
static int numbers_equal(const ptc_value *a, const ptc_value *b)
{
    double fa, fb;
    if (as_float(a, &fa) && as_float(b, &fb))
        return fa == fb;
    uint8_t ba[INT_FORM_CAP], bb[INT_FORM_CAP];
    const uint8_t *pa, *pb;
    int na = int_form(a, ba, &pa), nb = int_form(b, bb, &pb);
    return na >= 0 && na == nb && memcmp(pa, pb, (size_t)na) == 0;
}

/* A hash that equal numbers share: integers by their value (by their bytes beyond 64 bits),
 * other floats by their bits. */
static uint64_t hash_number(const ptc_value *v)
{
    uint8_t buf[INT_FORM_CAP];
    const uint8_t *p;
    int n = int_form(v, buf, &p);
    if (n > 8)
        return hash_bytes(p, (size_t)n);
    if (n >= 0) {
        uint64_t u = 0;
        for (int k = 0; k < n; k++)
            u |= (uint64_t)p[k] << (8 * k);
        if (n > 0 && n < 8 && (p[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n);
        return mix(u);
    }
    double f = 0;
    as_float(v, &f);
    /* No NaN equals another, and Python hashes each by its identity: so does ptc, or a file of
     * many NaN keys would put them all in one chain. */
    if (isnan(f))
        return mix((uint64_t)(uintptr_t)v ^ 0x7ff8);
    uint64_t bits;
    memcpy(&bits, &f, sizeof bits);
    return mix(bits ^ 0x5bd1e995);
}

static uint64_t hash_value(const ptc_value *v, int depth)
{
    if (is_number_kind(v))
        return hash_number(v);
    switch (v->kind) {
    case PTC_VALUE_NONE:
        return 0x9e3779b97f4a7c15ULL;
    case PTC_VALUE_STR:
        return hash_bytes(v->u.s.p, v->u.s.n);
    case PTC_VALUE_BYTES:
        return ~hash_bytes(v->u.s.p, v->u.s.n);
    case PTC_VALUE_DTYPE:
        return mix(0xd7 + (uint64_t)v->u.dt);
    case PTC_VALUE_GLOBAL:
        /* A placeholder for a cut cycle stands for one node: identity. */
        if (v->flags & PTC__V_BACKREF)
            return mix((uint64_t)(uintptr_t)v);
        return hash_bytes(v->u.g.full, strlen(v->u.g.full));
    case PTC_VALUE_TENSOR:
    case PTC_VALUE_OBJECT:
        /* Identity, the node's address: a symbolic numpy array becomes a tensor in place (BUILD)
         * and keeps its place in any dict it is already a key of. */
        return mix((uint64_t)(uintptr_t)v);
    case PTC_VALUE_COMPLEX:
        return mix((uint64_t)(int64_t)(v->u.c.re * 1000003 + v->u.c.im));
    case PTC_VALUE_DEVICE:
        return hash_bytes(v->u.dev.type, strlen(v->u.dev.type)) ^ (uint64_t)v->u.dev.index;
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_SIZE: {
        uint64_t h = 0x345678;
        if (depth > 64)
            return h;
        for (size_t k = 0; k < v->u.seq.n; k++)
            h = mix(h * 1000003 ^ hash_value(v->u.seq.items[k], depth + 1));
        return h;
    }
    default:
        return 0;
    }
}

static int equal_depth(const ptc_value *a, const ptc_value *b, int depth)
{
    if (a == b)
        return 1;
    if (depth > 64)
        return 0;
    if (is_number_kind(a) || is_number_kind(b))
        return is_number_kind(a) && is_number_kind(b) && numbers_equal(a, b);
    if (a->kind != b->kind) {
        bool seq_a = a->kind == PTC_VALUE_TUPLE || a->kind == PTC_VALUE_SIZE;
        bool seq_b = b->kind == PTC_VALUE_TUPLE || b->kind == PTC_VALUE_SIZE;
        if (!(seq_a && seq_b))
            return 0;
    }
    switch (a->kind) {
    case PTC_VALUE_NONE:
        return 1;
    case PTC_VALUE_STR:
    case PTC_VALUE_BYTES:
        return a->u.s.n == b->u.s.n && memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
    case PTC_VALUE_COMPLEX:
        return a->u.c.re == b->u.c.re && a->u.c.im == b->u.c.im;
    case PTC_VALUE_DTYPE:
        return a->u.dt == b->u.dt;
    case PTC_VALUE_GLOBAL:
        if ((a->flags | b->flags) & PTC__V_BACKREF)
            return 0; /* identity (checked above) */
        return strcmp(a->u.g.full, b->u.g.full) == 0;
    case PTC_VALUE_DEVICE:
        return strcmp(a->u.dev.type, b->u.dev.type) == 0 && a->u.dev.index == b->u.dev.index;
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_SIZE:
        if (a->u.seq.n != b->u.seq.n)
            return 0;
        for (size_t k = 0; k < a->u.seq.n; k++)
            if (!equal_depth(a->u.seq.items[k], b->u.seq.items[k], depth + 1))
                return 0;
        return 1;
    default:
        return 0; /* tensors and objects compare by identity (checked above) */
    }
}

int ptc__value_equal(const ptc_value *a, const ptc_value *b)
{
    return equal_depth(a, b, 0);
}

/* A secret of this process, from the system's entropy (its clock and address layout if that
 * fails): dict indexes are seeded from it, so that a file cannot pick keys whose hashes collide
 * and make every lookup walk the whole index. */
static uint64_t process_secret(void)
{
    static uint64_t secret;
    uint64_t s = __atomic_load_n(&secret, __ATOMIC_RELAXED);
    if (s)
        return s;
    if (getentropy(&s, sizeof s) != 0 || s == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&secret) |
            1;
    }
    __atomic_store_n(&secret, s, __ATOMIC_RELAXED);
    return s;
}

/* The first index slot of a key: its hash mixed with the dict's seed. */
static size_t first_slot(const ptc__dict *d, const ptc_value *key)
{
    return (size_t)mix(hash_value(key, 0) ^ d->ix->seed) & (d->ix->cap - 1);
}

static int index_insert(ptc__dict *d, ptc__arena *a, size_t pos)
{
    (void)a;
    size_t mask = d->ix->cap - 1;
    size_t h = first_slot(d, d->keys[pos]);
    while (d->ix->slot[h])
        h = (h + 1) & mask;
    d->ix->slot[h] = (uint32_t)(pos + 1);
    return 0;
}

static int index_rebuild(ptc__dict *d, ptc__arena *a, size_t want)
{
    size_t cap = 16;
    while (cap < want * 2)
        cap *= 2;
    if (cap > UINT32_MAX)
        return PTC_ELIMIT;
    ptc__dict_ix *ix = ptc__arena_alloc(a, sizeof *ix + cap * sizeof *ix->slot);
    if (!ix)
        return PTC_ENOMEM;
    ix->seed = d->ix ? d->ix->seed : mix(process_secret() ^ (uint64_t)(uintptr_t)d);
    ix->cap = cap;
    d->ix = ix;
    for (size_t i = 0; i < d->n; i++)
        index_insert(d, a, i);
    return 0;
}

size_t ptc__dict_index(const ptc_value *dict, const ptc_value *key)
{
    const ptc__dict *d = &dict->u.dict;
    if (!hashable(key))
        return SIZE_MAX;
    if (d->ix) {
        size_t mask = d->ix->cap - 1;
        for (size_t h = first_slot(d, key); d->ix->slot[h]; h = (h + 1) & mask)
            if (ptc__value_equal(d->keys[d->ix->slot[h] - 1], key))
                return d->ix->slot[h] - 1;
        return SIZE_MAX;
    }
    for (size_t i = 0; i < d->n; i++)
        if (ptc__value_equal(d->keys[i], key))
            return i;
    return SIZE_MAX;
}

int ptc__dict_set(ptc__arena *a, ptc_value *dict, ptc_value *key, ptc_value *val, ptc_error *err,
                  const char *member, int64_t offset)
{
    ptc__dict *d = &dict->u.dict;
    if (!hashable(key))
        return ptc__err(err, PTC_EFORMAT, member, offset,
                        "dict key of type %s is not hashable (or, a tuple, nests deeper than %d or "
                        "holds more than %d values)",
                        ptc_value_kind_name((ptc_value_kind)key->kind), KEY_MAX_DEPTH,
                        KEY_MAX_NODES);
    /* An equal key replaces the value in place, as in Python. */
    if (d->ix) {
        size_t mask = d->ix->cap - 1;
        for (size_t h = first_slot(d, key); d->ix->slot[h]; h = (h + 1) & mask) {
            size_t pos = d->ix->slot[h] - 1;
            if (ptc__value_equal(d->keys[pos], key)) {
                d->vals[pos] = val;
                return 0;
            }
        }
    } else {
        for (size_t i = 0; i < d->n; i++) {
            if (ptc__value_equal(d->keys[i], key)) {
                d->vals[i] = val;
                return 0;
            }
        }
    }
    size_t kcap = d->cap, vcap = d->cap;
    int grc;
    if ((grc = grow(a, (void **)&d->keys, &kcap, d->n, sizeof *d->keys)) < 0 ||
        (grc = grow(a, (void **)&d->vals, &vcap, d->n, sizeof *d->vals)) < 0) {
        if (grc == PTC_ELIMIT)
            return ptc__err_stricter(err, PTC_ELIMIT, member, offset,
                                     "a dict would hold more than the limit of %zu items",
                                     (size_t)PTC__VALUE_MAX_ITEMS);
        return ptc__err(err, PTC_ENOMEM, member, offset, "out of memory growing a dict");
    }
    d->cap = kcap;
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->n > 8) {
        if (!d->ix || d->n * 2 > d->ix->cap) {
            if (index_rebuild(d, a, d->n) < 0)
                return ptc__err(err, PTC_ENOMEM, member, offset, "out of memory indexing a dict");
        } else {
            index_insert(d, a, d->n - 1);
        }
    }
    return 0;
}

/* Fills a dict's index again: a key changed its hash (a placeholder now stands in a tuple key,
 * or is the key). The slots stay; no allocation. */
void ptc__dict_reindex(ptc_value *dict)
{
    ptc__dict *d = &dict->u.dict;
    if (!d->ix)
        return;
    memset(d->ix->slot, 0, d->ix->cap * sizeof *d->ix->slot);
    for (size_t i = 0; i < d->n; i++)
        index_insert(d, NULL, i);
}

/* ---- public accessors ------------------------------------------------------------------------ */

ptc_value_kind ptc_value_kind_of(const ptc_value *v)
{
    return v ? (ptc_value_kind)v->kind : PTC_VALUE_NONE;
}

const char *ptc_value_kind_name(ptc_value_kind k)
{
    static const char *const names[] = {"none",  "bool",   "int",  "float",  "str",     "bytes",
                                        "tuple", "list",   "dict", "set",    "complex", "tensor",
                                        "dtype", "device", "size", "global", "object"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "unknown";
}

int ptc_value_bool(const ptc_value *v, int *out)
{
    if (!v || v->kind != PTC_VALUE_BOOL)
        return PTC_EINVAL;
    *out = v->u.b;
    return 0;
}

int ptc_value_int(const ptc_value *v, int64_t *out)
{
    if (!v || v->kind != PTC_VALUE_INT)
        return PTC_EINVAL;
    if (!v->u.i.fits)
        return PTC_ERANGE;
    *out = v->u.i.v;
    return 0;
}

int ptc_value_int_bytes(const ptc_value *v, const uint8_t **bytes, size_t *len)
{
    if (!v || v->kind != PTC_VALUE_INT)
        return PTC_EINVAL;
    *bytes = v->u.i.bytes;
    *len = v->u.i.nbytes;
    return 0;
}

int ptc_value_float(const ptc_value *v, double *out)
{
    if (!v || v->kind != PTC_VALUE_FLOAT)
        return PTC_EINVAL;
    *out = v->u.f;
    return 0;
}

int ptc_value_complex(const ptc_value *v, double *re, double *im)
{
    if (!v || v->kind != PTC_VALUE_COMPLEX)
        return PTC_EINVAL;
    *re = v->u.c.re;
    *im = v->u.c.im;
    return 0;
}

int ptc_value_str(const ptc_value *v, const char **s, size_t *len)
{
    if (!v || v->kind != PTC_VALUE_STR)
        return PTC_EINVAL;
    *s = v->u.s.p;
    *len = v->u.s.n;
    return 0;
}

int ptc_value_bytes(const ptc_value *v, const uint8_t **b, size_t *len)
{
    if (!v || v->kind != PTC_VALUE_BYTES)
        return PTC_EINVAL;
    *b = (const uint8_t *)v->u.s.p;
    *len = v->u.s.n;
    return 0;
}

size_t ptc_value_len(const ptc_value *v)
{
    if (!v)
        return 0;
    switch (v->kind) {
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        return v->u.seq.n;
    case PTC_VALUE_DICT:
        return v->u.dict.n;
    case PTC_VALUE_STR:
    case PTC_VALUE_BYTES:
        return v->u.s.n;
    default:
        return 0;
    }
}

const ptc_value *ptc_value_item(const ptc_value *v, size_t i)
{
    if (!v)
        return NULL;
    switch (v->kind) {
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        return i < v->u.seq.n ? v->u.seq.items[i] : NULL;
    default:
        return NULL;
    }
}

const ptc_value *ptc_dict_key(const ptc_value *v, size_t i)
{
    return v && v->kind == PTC_VALUE_DICT && i < v->u.dict.n ? v->u.dict.keys[i] : NULL;
}

const ptc_value *ptc_dict_value(const ptc_value *v, size_t i)
{
    return v && v->kind == PTC_VALUE_DICT && i < v->u.dict.n ? v->u.dict.vals[i] : NULL;
}

const ptc_value *ptc_dict_get(const ptc_value *v, const char *key)
{
    if (!v || v->kind != PTC_VALUE_DICT || !key)
        return NULL;
    size_t n = strlen(key);
    ptc_value probe = {.kind = PTC_VALUE_STR};
    probe.u.s.p = key;
    probe.u.s.n = n;
    const ptc__dict *d = &v->u.dict;
    if (d->ix) {
        size_t mask = d->ix->cap - 1;
        for (size_t h = first_slot(d, &probe); d->ix->slot[h]; h = (h + 1) & mask) {
            size_t pos = d->ix->slot[h] - 1;
            if (ptc__value_equal(d->keys[pos], &probe))
                return d->vals[pos];
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (ptc__value_equal(d->keys[i], &probe))
            return d->vals[i];
    return NULL;
}

int ptc_dict_is_ordered(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_DICT && (v->flags & (PTC__V_ORDERED | PTC__V_COUNTER)) != 0;
}

const ptc_value *ptc_dict_attrs(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_DICT ? v->u.dict.attrs : NULL;
}

int ptc_value_dtype(const ptc_value *v, ptc_dtype *out)
{
    if (!v || v->kind != PTC_VALUE_DTYPE)
        return PTC_EINVAL;
    *out = v->u.dt;
    return 0;
}

int ptc_value_device(const ptc_value *v, const char **type, int64_t *index)
{
    if (!v || v->kind != PTC_VALUE_DEVICE)
        return PTC_EINVAL;
    *type = v->u.dev.type;
    *index = v->u.dev.index;
    return 0;
}

const char *ptc_value_global_name(const ptc_value *v)
{
    if (!v)
        return NULL;
    /* An object's callable is a global or, read symbolically, an object made before it: the
     * chain ends at a global. */
    bool called = false;
    while (v && v->kind == PTC_VALUE_OBJECT) {
        v = v->u.obj.cls;
        called = true;
    }
    if (!v || v->kind != PTC_VALUE_GLOBAL)
        return NULL;
    /* Salvage cut the edge to a callable that pointed back to an enclosing object: the object
     * is of the class that one was of, which the placeholder kept. */
    return called && (v->flags & PTC__V_BACKREF) ? v->u.g.name : v->u.g.full;
}

int ptc_value_is_symbolic(const ptc_value *v)
{
    return v && (v->kind == PTC_VALUE_GLOBAL || v->kind == PTC_VALUE_OBJECT) &&
           (v->flags & PTC__V_SYMBOLIC);
}

int ptc_value_is_back_reference(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_GLOBAL && (v->flags & PTC__V_BACKREF);
}

const ptc_value *ptc_object_callable(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_OBJECT ? v->u.obj.cls : NULL;
}

const ptc_value *ptc_object_items(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_OBJECT ? v->u.obj.items : NULL;
}

const ptc_value *ptc_object_args(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_OBJECT ? v->u.obj.args : NULL;
}

const ptc_value *ptc_object_state(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_OBJECT ? v->u.obj.state : NULL;
}

const char *ptc_object_note(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_OBJECT ? v->u.obj.note : NULL;
}

const ptc_tensor *ptc_value_tensor(const ptc_value *v)
{
    return v && v->kind == PTC_VALUE_TENSOR ? v->u.t : NULL;
}
