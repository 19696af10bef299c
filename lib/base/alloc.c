/*
 * alloc.c - the replaceable allocator, heap budgets, the arena that value trees live in, and the
 * growable byte buffer.
 *
 * The allocator pointer is one of the three pieces of process-wide state in libptc (ptc.h lists
 * them: the allocator, the module table of plugin.c, the temporary-name table of afile.c); it is
 * set before any handle exists (ptc_set_allocator documents this), so it needs no lock.
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *default_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static ptc_realloc_fn g_realloc = default_realloc;
static void *g_realloc_ctx;

void ptc_set_allocator(ptc_realloc_fn fn, void *ctx)
{
    g_realloc = fn ? fn : default_realloc;
    g_realloc_ctx = fn ? ctx : NULL;
}

void *ptc__realloc(void *ptr, size_t size)
{
    return g_realloc(g_realloc_ctx, ptr, size);
}
void *ptc__malloc(size_t size)
{
    return g_realloc(g_realloc_ctx, NULL, size ? size : 1);
}
void ptc__free(void *ptr)
{
    if (ptr)
        g_realloc(g_realloc_ctx, ptr, 0);
}

void *ptc__calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        return NULL;
    void *p = ptc__malloc(total);
    if (p)
        memset(p, 0, total ? total : 1);
    return p;
}

char *ptc__strndup(const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *d = ptc__malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *ptc__strdup(const char *s)
{
    return ptc__strndup(s, strlen(s));
}

/* ---- budgets ------------------------------------------------------------------------------- */

int ptc__budget_take(ptc__budget *b, uint64_t n, ptc_error *err, const char *member, int64_t offset)
{
    if (!b)
        return 0;
    uint64_t total;
    if (!ptc__add_u64_ok(b->used, n, &total) || total > b->limit)
        return ptc__err(err, PTC_ELIMIT, member, offset,
                        "loading needs more than the heap limit of %llu bytes",
                        (unsigned long long)b->limit);
    b->used = total;
    return 0;
}

void ptc__budget_give(ptc__budget *b, uint64_t n)
{
    if (b)
        b->used = n > b->used ? 0 : b->used - n;
}

/* ---- arena --------------------------------------------------------------------------------- */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t size, used; /* of the usable bytes at data, which is what the budget is charged */
    unsigned char *data;
    _Alignas(16) unsigned char mem[];
} arena_chunk;

struct ptc__arena {
    arena_chunk *head;
    ptc__budget *budget;
    size_t step; /* the size of the next ordinary chunk (0 before the first) */
};

/* Chunks start at 64 KiB, so that a small tree costs little, and double up to 4 MiB, so that a
 * checkpoint of 20,000 tensors (some 30 MiB of values) takes a dozen chunks instead of 500 and
 * the big ones can be backed by huge pages (one fault per 2 MiB instead of 512): a chunk of 2 MiB
 * or more is allocated 2 MiB larger and its usable bytes start on a 2 MiB boundary, so that all
 * of it is whole huge pages (the extra is address space only, never touched, so the budget is not
 * charged for it). What a budget is charged at most doubles what the tree uses, as a growing
 * container already may. */
#define ARENA_CHUNK_MIN ((size_t)64 * 1024)
#define ARENA_CHUNK_MAX ((size_t)4 * 1024 * 1024)
#define ARENA_HUGE_PAGE ((size_t)2 * 1024 * 1024)

int ptc__arena_new(ptc__arena **out, ptc__budget *budget)
{
    ptc__arena *a = ptc__calloc(1, sizeof *a);
    if (!a)
        return PTC_ENOMEM;
    a->budget = budget;
    *out = a;
    return 0;
}

void ptc__arena_free(ptc__arena *a)
{
    if (!a)
        return;
    for (arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        ptc__budget_give(a->budget, c->size);
        ptc__free(c);
    }
    ptc__free(a);
}

/* Asks the kernel to back the whole 2 MiB pages inside a chunk with huge pages (transparent huge
 * pages in "madvise" mode, the common default, give them only to regions that ask). Advice only:
 * where it is refused (memory that is not anonymous, from a caller's allocator; a kernel without
 * THP) nothing changes, so its result is ignored. */
static void arena_advise_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    uintptr_t lo = ((uintptr_t)p + ARENA_HUGE_PAGE - 1) & ~(uintptr_t)(ARENA_HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(ARENA_HUGE_PAGE - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

void *ptc__arena_alloc(ptc__arena *a, size_t size)
{
    size = (size + 15u) & ~(size_t)15u;
    if (size == 0)
        size = 16;
    arena_chunk *c = a->head;
    if (!c || c->size - c->used < size) {
        size_t step = a->step ? a->step : ARENA_CHUNK_MIN;
        bool large = size > step / 4; /* a block of its own, not a new ordinary chunk */
        size_t csize = large ? size : step;
        bool huge = csize >= ARENA_HUGE_PAGE;
        size_t total = csize + (huge ? ARENA_HUGE_PAGE : 0);
        if (csize > SIZE_MAX - sizeof *c - ARENA_HUGE_PAGE)
            return NULL;
        if (a->budget && ptc__budget_take(a->budget, csize, NULL, NULL, -1) < 0)
            return NULL;
        arena_chunk *n = ptc__malloc(sizeof *n + total);
        if (!n) {
            ptc__budget_give(a->budget, csize);
            return NULL;
        }
        n->size = csize;
        n->used = 0;
        n->data = n->mem;
        if (huge) {
            uintptr_t at =
                ((uintptr_t)n->mem + ARENA_HUGE_PAGE - 1) & ~(uintptr_t)(ARENA_HUGE_PAGE - 1);
            n->data = n->mem + (at - (uintptr_t)n->mem);
        }
        if (c && large) {
            /* A large block goes behind the current chunk so the current chunk keeps serving. */
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
            if (step < ARENA_CHUNK_MAX)
                a->step = step * 2;
        }
        if (csize >= ARENA_HUGE_PAGE)
            arena_advise_huge(n->data, csize);
        c = n;
    }
    unsigned char *p = c->data + c->used;
    c->used += size;
    /* Most blocks are a value (64 bytes) or a short array: zeroed by 16-byte stores that the
     * compiler emits inline, not by a call to memset for each of some 200,000 blocks. */
    if (size <= 64)
        for (size_t k = 0; k < size; k += 16)
            memset(p + k, 0, 16);
    else
        memset(p, 0, size);
    return p;
}

char *ptc__arena_strndup(ptc__arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *d = ptc__arena_alloc(a, n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- buffers ------------------------------------------------------------------------------- */

int ptc__buf_reserve(ptc__buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t need, max = b->max ? b->max : PTC__BUF_MAX_DEFAULT;
    if (__builtin_add_overflow(b->len, extra, &need) || need > max)
        return PTC_ELIMIT;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > max / 2 ? max : cap * 2;
    uint8_t *d = ptc__realloc(b->data, cap);
    if (!d)
        return PTC_ENOMEM;
    b->data = d;
    b->cap = cap;
    return 0;
}

int ptc__buf_append(ptc__buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int rc = ptc__buf_reserve(b, n);
    if (rc < 0)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int ptc__buf_printf(ptc__buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return PTC_EINVAL;
    int rc = ptc__buf_reserve(b, (size_t)n + 1);
    if (rc < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void ptc__buf_free(ptc__buf *b)
{
    ptc__free(b->data);
    b->data = NULL;
    b->len = b->cap = 0; /* max stays: the buffer may be used again */
}
