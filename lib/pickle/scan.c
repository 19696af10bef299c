/*
 * scan.c - the static scanner: walks every opcode of a pickle (protocols 0 to 5) without executing
 * anything and reports each reference to a global, each opcode outside the weights-only subset and
 * each PROTO. It is what lets ptc refuse a file for the payload it carries even when the stream is
 * broken after it (nullifAI) and list every global of every pickle (like torch's
 * get_unsafe_globals_in_checkpoint, but over all pickles).
 *
 * The argument layout and the scanner's role of each opcode come from the table in opcodes.h:
 * none; a '\n'-terminated line; two lines (GLOBAL, INST); 1, 2, 4 or 8 fixed bytes; a u8 / u32 /
 * u64 little-endian length followed by that many bytes. Lengths are checked against the remaining
 * input before anything is skipped.
 */
#include "pickle/pickle.h"

#include <string.h>

/* The opcode table (opcodes.h) as the scanner reads it: for each byte, its argument layout + 1
 * (0 for a byte that is no opcode), and what the scanner does with it. */
static const uint8_t KIND1[256] = {
#define X(name, byte, arg, proto, subset, scan) [byte] = PTC__ARG_##arg + 1,
    PTC__PICKLE_OPCODES(X)
#undef X
};

static const uint8_t ROLE[256] = {
#define X(name, byte, arg, proto, subset, scan) [byte] = PTC__SCAN_ROLE_##scan,
    PTC__PICKLE_OPCODES(X)
#undef X
};

typedef struct strref {
    const uint8_t *p;
    size_t n;
} strref;

/* The value a string push gives a name: STRING's argument is Python source, a quoted literal
 * ('posix' or "posix"); plain names are read without their quotes. A literal with a backslash is
 * left quoted (escape_decode could make anything of it): never a Python name then. */
static strref string_value(uint8_t op, const uint8_t *arg, size_t n)
{
    if (op == PTC__OP_STRING && n >= 2 && (arg[0] == '\'' || arg[0] == '"') &&
        arg[n - 1] == arg[0] && !memchr(arg + 1, '\\', n - 2))
        return (strref){arg + 1, n - 2};
    return (strref){arg, n};
}

bool ptc__python_name(const uint8_t *s, size_t n)
{
    if (n == 0 || !ptc__utf8_valid(s, n))
        return false;
    bool start = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = s[i];
        if (ch == '.') {
            if (start)
                return false;
            start = true;
            continue;
        }
        bool alpha =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch >= 0x80;
        if (!alpha && !(ch >= '0' && ch <= '9' && !start))
            return false;
        start = false;
    }
    return !start;
}

#define NAME_COPY 1024

static int report(ptc__scan_fn fn, void *ud, ptc__scan_kind kind, uint8_t op, uint64_t off,
                  const uint8_t *m, size_t mn, const uint8_t *nm, size_t nn, int proto)
{
    char mod[NAME_COPY], name[NAME_COPY];
    ptc__scan_item it = {.kind = kind, .opcode = op, .offset = off, .proto = proto};
    if (m) {
        size_t k = mn < NAME_COPY - 1 ? mn : NAME_COPY - 1;
        memcpy(mod, m, k);
        mod[k] = '\0';
        it.module = mod;
        it.module_len = k;
        it.truncated |= k < mn;
    }
    if (nm) {
        size_t k = nn < NAME_COPY - 1 ? nn : NAME_COPY - 1;
        memcpy(name, nm, k);
        name[k] = '\0';
        it.name = name;
        it.name_len = k;
        it.truncated |= k < nn;
    }
    return fn(ud, &it);
}

int ptc__pickle_scan(const uint8_t *data, size_t len, const char *member, uint64_t base_offset,
                     bool stop_at_first, ptc__scan_fn fn, void *ud, size_t *consumed,
                     ptc_error *err)
{
    return ptc__pickle_scan_ex(data, len, len, member, base_offset, stop_at_first, fn, ud, consumed,
                               NULL, err);
}

int ptc__pickle_scan_ex(const uint8_t *data, size_t len, size_t line_limit, const char *member,
                        uint64_t base_offset, bool stop_at_first, ptc__scan_fn fn, void *ud,
                        size_t *consumed, size_t *reach, ptc_error *err)
{
    size_t pos = 0;
    if (line_limit > len)
        line_limit = len;
    strref last[2] = {{NULL, 0}, {NULL, 0}}; /* the two most recent string pushes */
    bool ended_with_stop = false;
    int rc;
    while (pos < len) {
        size_t at = pos;
        uint64_t off = base_offset + at;
        uint8_t op = data[pos++];
        if (!KIND1[op]) {
            if (consumed)
                *consumed = at;
            if (reach)
                *reach = pos;
            return ptc__err(err, PTC_EFORMAT, member, (int64_t)off, "invalid opcode 0x%02x", op);
        }
        ptc__op_arg k = (ptc__op_arg)(KIND1[op] - 1);
        const uint8_t *arg = data + pos, *arg2 = NULL;
        size_t alen = 0, alen2 = 0;
        uint64_t n = 0;
        bool truncated = false;
        switch (k) {
        case PTC__ARG_NONE:
            break;
        case PTC__ARG_LINE:
        case PTC__ARG_LINE2: {
            const uint8_t *nl =
                pos < line_limit ? memchr(data + pos, '\n', line_limit - pos) : NULL;
            if (!nl) {
                truncated = true;
                break;
            }
            alen = (size_t)(nl - (data + pos));
            pos += alen + 1;
            if (k == PTC__ARG_LINE2) {
                arg2 = data + pos;
                nl = pos < line_limit ? memchr(data + pos, '\n', line_limit - pos) : NULL;
                if (!nl) {
                    truncated = true;
                    break;
                }
                alen2 = (size_t)(nl - arg2);
                pos += alen2 + 1;
            }
            break;
        }
        case PTC__ARG_F1:
        case PTC__ARG_F2:
        case PTC__ARG_F4:
        case PTC__ARG_F8: {
            size_t w = k == PTC__ARG_F1 ? 1 : k == PTC__ARG_F2 ? 2 : k == PTC__ARG_F4 ? 4 : 8;
            if (len - pos < w)
                truncated = true;
            else
                pos += w;
            alen = w;
            break;
        }
        case PTC__ARG_L1:
        case PTC__ARG_L4:
        case PTC__ARG_S4:
        case PTC__ARG_L8: {
            size_t w = k == PTC__ARG_L1 ? 1 : k == PTC__ARG_L8 ? 8 : 4;
            if (len - pos < w) {
                truncated = true;
                break;
            }
            n = w == 1 ? data[pos] : w == 4 ? ptc__le32(data + pos) : ptc__le64(data + pos);
            if (k == PTC__ARG_S4 && (int32_t)n < 0) {
                if (consumed)
                    *consumed = at;
                if (reach)
                    *reach = pos;
                return ptc__err(err, PTC_EFORMAT, member, (int64_t)off, "%s with a negative length",
                                ptc__pickle_opname(op));
            }
            pos += w;
            if (n > len - pos) {
                truncated = true;
                break;
            }
            arg = data + pos;
            alen = (size_t)n;
            pos += (size_t)n;
            break;
        }
        }
        if (truncated) {
            if (consumed)
                *consumed = at;
            if (reach)
                *reach = pos;
            return ptc__err(err, PTC_EFORMAT, member, (int64_t)off,
                            "truncated: %s runs past the end of the pickle",
                            ptc__pickle_opname(op));
        }

        /* Report what matters. */
        ptc__scan_role role = (ptc__scan_role)ROLE[op];
        if (role == PTC__SCAN_ROLE_PROTO) {
            if ((rc = report(fn, ud, PTC__SCAN_PROTO, op, off, NULL, 0, NULL, 0, arg[0])) != 0)
                return rc;
        } else if (role == PTC__SCAN_ROLE_GLOBAL) {
            if ((rc = report(fn, ud, PTC__SCAN_GLOBAL, op, off, arg, alen, arg2, alen2, 0)) != 0)
                return rc;
        } else if (role == PTC__SCAN_ROLE_STACK) {
            if (last[0].p && last[1].p)
                rc = report(fn, ud, PTC__SCAN_GLOBAL, op, off, last[0].p, last[0].n, last[1].p,
                            last[1].n, 0);
            else
                rc = report(fn, ud, PTC__SCAN_DYNAMIC, op, off, NULL, 0, NULL, 0, 0);
            if (rc != 0)
                return rc;
        } else if (role == PTC__SCAN_ROLE_EXT) {
            if ((rc = report(fn, ud, PTC__SCAN_DYNAMIC, op, off, NULL, 0, NULL, 0, 0)) != 0)
                return rc;
        }
        /* Globals were reported as such above; any other opcode outside the subset is reported
         * as an opcode. */
        if (!ptc__pickle_in_subset(op) && role != PTC__SCAN_ROLE_GLOBAL &&
            role != PTC__SCAN_ROLE_STACK && role != PTC__SCAN_ROLE_EXT) {
            if ((rc = report(fn, ud, PTC__SCAN_OPCODE, op, off, NULL, 0, NULL, 0, 0)) != 0)
                return rc;
        }

        /* Track string pushes for STACK_GLOBAL; memo opcodes leave the stack as it is. */
        if (role == PTC__SCAN_ROLE_STRING) {
            last[0] = last[1];
            last[1] = string_value(op, arg, alen); /* STRING unquoted, escapes left quoted */
        } else if (role != PTC__SCAN_ROLE_MEMO) {
            last[0] = last[1] = (strref){NULL, 0};
        }

        ended_with_stop = op == PTC__OP_STOP;
        if (op == PTC__OP_STOP && stop_at_first) {
            if (consumed)
                *consumed = pos;
            if (reach)
                *reach = pos;
            return 0;
        }
    }
    if (consumed)
        *consumed = pos;
    if (reach)
        *reach = pos;
    if (!ended_with_stop)
        return ptc__err(err, PTC_EFORMAT, member, (int64_t)(base_offset + len),
                        "truncated: the pickle ends without STOP");
    return 0;
}

/* ---- the sweep -------------------------------------------------------------------------------
 *
 * A decode from a PROTO is a walk over opcode offsets, each determined by the one before: once
 * two walks stand on the same offset they read the same opcodes from there on. The sweep moves
 * every walk of the region in one pass, always the one at the lowest offset (a binary heap of
 * parked walks, a hash from offset to parked walk), and merges walks that meet, so that:
 *
 *   - each offset is decoded as an opcode at most once: when a walk steps there, every other
 *     walk is at a higher offset (it was the lowest) and walks only move forward;
 *   - a PROTO starts a walk unless a walk stands on it (it is then that walk's opcode, and a walk
 *     started there would read what that walk reads: PROTO leaves no string on the stack);
 *     PROTOs inside arguments (BINBYTES, a STRING line, FRAME's size) therefore start walks;
 *   - the only state a walk carries that a merge could lose is what STACK_GLOBAL takes, the last
 *     two string pushes. A walk keeps the set of (module, name) pairs it could hold, as a list of
 *     elements, of Python names only (anything else is never reported): a merge concatenates
 *     the lists, a push of a name turns each (a, b) into (b, name) (or starts (-, name) on an
 *     empty list; an escaped STRING or UNICODE literal counts when its decoded value is a name),
 *     and STACK_GLOBAL reports every pair and empties it, as GLOBAL and INST do. Other opcodes
 *     leave the list: a push and a pop between the two names (NONE POP, MARK POP_MARK, a memo
 *     get) do not stop STACK_GLOBAL from taking them. A list holds at most SW_MAX_ELEMS pairs:
 *     a merge past that empties it and marks the walk, whose next STACK_GLOBAL is reported as the
 *     unresolved global "?.?" (outside any policy). A step costs O(SW_MAX_ELEMS) at most.
 *     Known gap: a name pushed, then two more names, then one popped leaves the walk's last pair
 *     on the later names; STACK_GLOBAL is then reported with those (outside the policy unless
 *     they name an allowed global).
 *
 * Line arguments look for their '\n' with memchr; the first line of an opcode is looked for from
 * offsets that never decrease (walks step in offset order), as are second lines (GLOBAL, INST),
 * so each of the two caches below answers from its last search or searches bytes past it: at most
 * 2 * len bytes searched in all. The PROTO search moves forward only (len bytes), string pushes
 * check at most NAME_COPY - 1 bytes (a longer name is never reported), and each step costs O(1)
 * plus O(log W) heap work when a walk jumps past another, W the walks parked at once. Total:
 * O(len log W) time; memory O(W), W at most PTC__SWEEP_MAX_WALKS (only nested wrappers built on
 * purpose park many walks at distinct offsets; past the cap the sweep refuses with PTC_ELIMIT).
 *
 * Quiet spans replay a full scan (see pickle.h): a walk is quiet while its offset is below its
 * quiet_end, and a quiet walk reports no GLOBAL and no STACK_GLOBAL pair whose two pushes were
 * both quiet; it goes on after STOP while inside its span, as the full scan did. */

#define NONE UINT32_MAX

typedef struct sw_elem {
    size_t ao, al, bo, bl; /* module (al == 0: none yet) and name pushed, offsets in the region */
    bool aloud, bloud;     /* pushed where the walk was not quiet */
    uint32_t next;
} sw_elem;

typedef struct sw_walk {
    size_t pos;       /* the next opcode */
    size_t quiet_end; /* quiet while pos < quiet_end */
    uint32_t head, tail;
    uint32_t nelems; /* elements in the list */
    bool many;       /* merges brought more than SW_MAX_ELEMS pairs: STACK_GLOBAL is unresolved */
} sw_walk;

/* Pairs one walk keeps; past it the walk only remembers that a STACK_GLOBAL could take a name
 * the sweep no longer knows, and reports it unresolved (outside any policy). */
#define SW_MAX_ELEMS 32
/* Walks a sweep holds without allocating (a power of two). */
#define SW_INLINE 8

typedef struct sweep {
    const uint8_t *d;
    size_t len, line_limit;
    size_t nl_from[2], nl_at[2]; /* no '\n' in [nl_from, nl_at), one at nl_at (SIZE_MAX: none) */
    size_t g, g_from; /* the next PROTO not yet started or stood on (SIZE_MAX: not searched past
                         g_from yet) */
    sw_walk *w;
    uint32_t nw, capw, wfree, alive;
    sw_elem *e;
    uint32_t ne, cape, efree, elive;
    uint32_t *heap, nheap;
    uint32_t *ht;            /* walk index + 1, 0 empty; capacity 2 * capw, a power of two */
    sw_walk w_in[SW_INLINE]; /* w, heap and ht while capw is SW_INLINE */
    uint32_t heap_in[SW_INLINE], ht_in[2 * SW_INLINE];
    size_t htmask;
    bool hton; /* the parked walks are in ht (with few, park() looks through the heap) */
    uint64_t base;
    const char *member;
    ptc__scan_fn fn;
    void *ud;
} sweep;

/* Frees w, heap and ht unless they are the sweep's own inline arrays. */
static void free_arrays(sweep *s)
{
    if (s->w != s->w_in) {
        ptc__free(s->w);
        ptc__free(s->heap);
        ptc__free(s->ht);
    }
}

static size_t find_nl(sweep *s, int which, size_t q)
{
    if (q >= s->line_limit)
        return SIZE_MAX;
    if (s->nl_at[which] != SIZE_MAX && q >= s->nl_from[which] && q <= s->nl_at[which])
        return s->nl_at[which];
    /* line_limit is one past the region's last '\n': found */
    const uint8_t *p = memchr(s->d + q, '\n', s->line_limit - q);
    s->nl_from[which] = q;
    s->nl_at[which] = (size_t)(p - s->d);
    return s->nl_at[which];
}

/* The first PROTO in [g_from, lim) (searched once: g_from only moves forward), or SIZE_MAX. */
static size_t proto_before(sweep *s, size_t lim)
{
    if (s->g != SIZE_MAX)
        return s->g < lim ? s->g : SIZE_MAX;
    const uint8_t *d = s->d;
    if (lim > s->len - 1)
        lim = s->len - 1; /* a PROTO needs its protocol byte */
    size_t from = s->g_from;
    /* PROTOs are often close by (dense in built bytes): look at a few bytes before memchr. */
    for (size_t near = from + 16 < lim ? from + 16 : lim; from < near; from++)
        if (d[from] == PTC__OP_PROTO && d[from + 1] >= 2 && d[from + 1] <= 5)
            return s->g = s->g_from = from;
    while (from < lim) {
        const uint8_t *p = memchr(d + from, PTC__OP_PROTO, lim - from);
        if (!p)
            break;
        from = (size_t)(p - d);
        if (d[from + 1] >= 2 && d[from + 1] <= 5)
            return s->g = s->g_from = from;
        from++;
    }
    if (lim > s->g_from)
        s->g_from = lim;
    return SIZE_MAX;
}

static void clear_elems(sweep *s, sw_walk *w)
{
    w->nelems = 0;
    if (w->head == NONE)
        return;
    s->e[w->tail].next = s->efree;
    s->efree = w->head;
    w->head = w->tail = NONE;
}

static size_t ht_slot(const sweep *s, size_t pos);
static void ht_fill(sweep *s);

static void free_walk(sweep *s, uint32_t wi)
{
    clear_elems(s, &s->w[wi]);
    s->w[wi].head = s->wfree;
    s->wfree = wi;
    s->alive--;
}

static int new_walk(sweep *s, size_t pos, size_t quiet_end, uint32_t *out, ptc_error *err)
{
    if (s->alive >= PTC__SWEEP_MAX_WALKS)
        return ptc__err(err, PTC_ELIMIT, s->member, (int64_t)(s->base + pos),
                        "more than %u decodes of overlapping pickles under way at once",
                        PTC__SWEEP_MAX_WALKS);
    uint32_t wi;
    if (s->wfree != NONE) {
        wi = s->wfree;
        s->wfree = s->w[wi].head;
    } else {
        if (s->nw == s->capw) {
            /* The first SW_INLINE walks live in the sweep itself: a region of tensor data
             * (thousands of small records in one file) then costs no allocation at all. */
            uint32_t cap = s->capw ? s->capw * 2 : SW_INLINE;
            sw_walk *nw = s->w_in;
            uint32_t *nh = s->heap_in, *ht = s->ht_in;
            if (s->capw) {
                nw = ptc__malloc((size_t)cap * sizeof *nw);
                nh = ptc__malloc((size_t)cap * sizeof *nh);
                ht = ptc__calloc((size_t)cap * 2, sizeof *ht);
                if (!nw || !nh || !ht) {
                    ptc__free(nw);
                    ptc__free(nh);
                    ptc__free(ht);
                    return ptc__err(err, PTC_ENOMEM, s->member, -1, "out of memory");
                }
                memcpy(nw, s->w, (size_t)s->capw * sizeof *nw);
                memcpy(nh, s->heap, (size_t)s->capw * sizeof *nh);
                free_arrays(s);
            }
            s->w = nw;
            s->heap = nh;
            s->ht = ht;
            s->htmask = (size_t)cap * 2 - 1;
            s->capw = cap;
            if (s->hton)
                ht_fill(s);
        }
        wi = s->nw++;
    }
    s->w[wi] = (sw_walk){
        .pos = pos, .quiet_end = quiet_end, .head = NONE, .tail = NONE, .nelems = 0, .many = false};
    s->alive++;
    *out = wi;
    return 0;
}

static void ht_fill(sweep *s)
{
    for (uint32_t i = 0; i < s->nheap; i++)
        s->ht[ht_slot(s, s->w[s->heap[i]].pos)] = s->heap[i] + 1;
}

static size_t ht_slot(const sweep *s, size_t pos)
{
    size_t h = (size_t)((pos * 0x9E3779B97F4A7C15ull) >> 20) & s->htmask;
    while (s->ht[h] && s->w[s->ht[h] - 1].pos != pos)
        h = (h + 1) & s->htmask;
    return h;
}

static void ht_remove(sweep *s, size_t pos)
{
    size_t i = ht_slot(s, pos);
    s->ht[i] = 0;
    /* backward-shift deletion (linear probing) */
    for (size_t j = (i + 1) & s->htmask; s->ht[j]; j = (j + 1) & s->htmask) {
        size_t k = (size_t)((s->w[s->ht[j] - 1].pos * 0x9E3779B97F4A7C15ull) >> 20) & s->htmask;
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
            s->ht[i] = s->ht[j];
            s->ht[j] = 0;
            i = j;
        }
    }
}

static size_t heap_key(const sweep *s)
{
    return s->nheap ? s->w[s->heap[0]].pos : SIZE_MAX;
}

static uint32_t heap_pop(sweep *s)
{
    uint32_t top = s->heap[0], last = s->heap[--s->nheap];
    size_t i = 0, n = s->nheap, key = s->w[last].pos;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && s->w[s->heap[c + 1]].pos < s->w[s->heap[c]].pos)
            c++;
        if (s->w[s->heap[c]].pos >= key)
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    if (s->hton) {
        ht_remove(s, s->w[top].pos);
        s->hton = n > 0; /* empty now: the next parks look through the heap again */
    }
    return top;
}

/* Moves src's state into dst and frees src. */
static void merge_walk(sweep *s, uint32_t dst, uint32_t src)
{
    sw_walk *a = &s->w[dst], *b = &s->w[src];
    if (b->quiet_end > a->quiet_end)
        a->quiet_end = b->quiet_end;
    a->many |= b->many;
    if (b->head != NONE) {
        if (a->head == NONE)
            a->head = b->head;
        else
            s->e[a->tail].next = b->head;
        a->tail = b->tail;
        a->nelems += b->nelems;
        b->head = b->tail = NONE;
        b->nelems = 0;
    }
    if (a->nelems > SW_MAX_ELEMS) {
        clear_elems(s, a);
        a->many = true;
    }
    free_walk(s, src);
}

/* Parks walk wi at its offset: merged into the walk parked there, if any. */
#define HT_FROM 16

static void park(sweep *s, uint32_t wi)
{
    size_t pos = s->w[wi].pos;
    if (s->hton) {
        size_t h = ht_slot(s, pos);
        if (s->ht[h]) {
            merge_walk(s, s->ht[h] - 1, wi);
            return;
        }
        s->ht[h] = wi + 1;
    } else {
        for (uint32_t i = 0; i < s->nheap; i++)
            if (s->w[s->heap[i]].pos == pos) {
                merge_walk(s, s->heap[i], wi);
                return;
            }
    }
    size_t i = s->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->w[s->heap[p]].pos <= pos)
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = wi;
    if (!s->hton && s->nheap >= HT_FROM) {
        s->hton = true;
        ht_fill(s);
    }
}

static int hexval(uint8_t c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Whether an escaped STRING ('S': Python's escape_decode) or UNICODE ('V': raw-unicode-escape)
 * literal decodes to a Python name. Only the ASCII of the value matters (every other character
 * counts as a letter, as ptc__python_name counts bytes >= 0x80). */
static bool escaped_name(uint8_t op, const uint8_t *p, size_t n)
{
    uint8_t out[NAME_COPY];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = p[i];
        if (p[i] == '\\' && i + 1 < n) {
            uint8_t e = p[i + 1];
            if (op == PTC__OP_UNICODE) {
                int w = e == 'u' ? 4 : e == 'U' ? 8 : 0;
                if (w && i + 1 + (size_t)w < n + 0 && i + 2 + (size_t)w <= n) {
                    uint32_t v = 0;
                    int j;
                    for (j = 0; j < w && hexval(p[i + 2 + j]) >= 0; j++)
                        v = v * 16 + (uint32_t)hexval(p[i + 2 + j]);
                    if (j == w) {
                        c = v;
                        i += 1 + (size_t)w;
                    }
                }
            } else {
                static const char simple[] = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
                const char *m = NULL;
                for (size_t q = 0; q + 1 < sizeof simple && !m; q += 2)
                    if ((uint8_t)simple[q] == e)
                        m = &simple[q + 1];
                if (m) {
                    c = (uint8_t)*m;
                    i++;
                } else if (e == 'x' && i + 3 < n + 0 && hexval(p[i + 2]) >= 0 &&
                           hexval(p[i + 3]) >= 0) {
                    c = (uint32_t)(hexval(p[i + 2]) * 16 + hexval(p[i + 3]));
                    i += 3;
                } else if (e >= '0' && e <= '7') {
                    uint32_t v = 0;
                    size_t j = i + 1;
                    for (int d = 0; d < 3 && j < n && p[j] >= '0' && p[j] <= '7'; d++, j++)
                        v = v * 8 + (uint32_t)(p[j] - '0');
                    c = v & 0xff;
                    i = j - 1;
                } else if (e == '\n') {
                    i++;
                    continue; /* a line continuation adds nothing */
                }
            }
        }
        if (k == sizeof out)
            return false;
        out[k++] = c < 0x80 ? (uint8_t)c : 0x80;
    }
    /* ptc__python_name wants valid UTF-8: stand each non-ASCII character in for a letter. */
    for (size_t i = 0; i < k; i++)
        if (out[i] == 0x80)
            out[i] = 'a';
    return ptc__python_name(out, k);
}

/* A string push: a Python name (named true: already checked, an escaped literal whose decoded
 * value is one) shifts every pair; anything else leaves them, since STACK_GLOBAL may still take
 * the names below it once it is popped. */
static int push_name(sweep *s, uint32_t wi, const uint8_t *p, size_t n, bool named, bool loud,
                     ptc_error *err)
{
    sw_walk *w = &s->w[wi];
    if (n >= NAME_COPY || (!named && !ptc__python_name(p, n)))
        return 0;
    size_t off = (size_t)(p - s->d);
    if (w->head == NONE) {
        uint32_t ei;
        if (s->efree != NONE) {
            ei = s->efree;
            s->efree = s->e[ei].next;
        } else {
            if (s->ne == s->cape) {
                if (s->cape >= PTC__SWEEP_MAX_WALKS)
                    return ptc__err(err, PTC_ELIMIT, s->member, (int64_t)(s->base + off),
                                    "more than %u decodes of overlapping pickles under way at once",
                                    PTC__SWEEP_MAX_WALKS);
                uint32_t cap = s->cape ? s->cape * 2 : 64;
                sw_elem *ne = ptc__realloc(s->e, (size_t)cap * sizeof *ne);
                if (!ne)
                    return ptc__err(err, PTC_ENOMEM, s->member, -1, "out of memory");
                s->e = ne;
                s->cape = cap;
            }
            ei = s->ne++;
        }
        s->e[ei] = (sw_elem){.bo = off, .bl = n, .bloud = loud, .next = NONE};
        w->head = w->tail = ei;
        w->nelems = 1;
        return 0;
    }
    for (uint32_t ei = w->head; ei != NONE; ei = s->e[ei].next) {
        sw_elem *e = &s->e[ei];
        e->ao = e->bo;
        e->al = e->bl;
        e->aloud = e->bloud;
        e->bo = off;
        e->bl = n;
        e->bloud = loud;
    }
    return 0;
}

/* Decodes the opcode at walk wi's offset; *on tells whether the walk goes on. Returns 0, fn's
 * nonzero result or an error. */
static int sweep_step(sweep *s, uint32_t wi, bool *on, ptc_error *err)
{
    sw_walk *w = &s->w[wi];
    const uint8_t *d = s->d;
    size_t at = w->pos, pos = at + 1, len = s->len;
    bool quiet = at < w->quiet_end;
    uint8_t op = d[at];
    *on = false;
    if (!KIND1[op])
        return 0;
    ptc__op_arg k = (ptc__op_arg)(KIND1[op] - 1);
    const uint8_t *arg = d + pos, *arg2 = NULL;
    size_t alen = 0, alen2 = 0;
    switch (k) {
    case PTC__ARG_NONE:
        break;
    case PTC__ARG_LINE:
    case PTC__ARG_LINE2: {
        size_t nl = find_nl(s, 0, pos);
        if (nl == SIZE_MAX)
            return 0;
        alen = nl - pos;
        pos = nl + 1;
        if (k == PTC__ARG_LINE2) {
            arg2 = d + pos;
            if ((nl = find_nl(s, 1, pos)) == SIZE_MAX)
                return 0;
            alen2 = nl - pos;
            pos = nl + 1;
        }
        break;
    }
    case PTC__ARG_F1:
    case PTC__ARG_F2:
    case PTC__ARG_F4:
    case PTC__ARG_F8: {
        size_t fw = k == PTC__ARG_F1 ? 1 : k == PTC__ARG_F2 ? 2 : k == PTC__ARG_F4 ? 4 : 8;
        if (len - pos < fw)
            return 0;
        pos += fw;
        break;
    }
    case PTC__ARG_L1:
    case PTC__ARG_L4:
    case PTC__ARG_S4:
    case PTC__ARG_L8: {
        size_t lw = k == PTC__ARG_L1 ? 1 : k == PTC__ARG_L8 ? 8 : 4;
        if (len - pos < lw)
            return 0;
        uint64_t n = lw == 1 ? d[pos] : lw == 4 ? ptc__le32(d + pos) : ptc__le64(d + pos);
        if (k == PTC__ARG_S4 && (int32_t)n < 0)
            return 0;
        pos += lw;
        if (n > len - pos)
            return 0;
        arg = d + pos;
        alen = (size_t)n;
        pos += (size_t)n;
        break;
    }
    }
    int rc = 0;
    ptc__scan_role role = (ptc__scan_role)ROLE[op];
    if (role == PTC__SCAN_ROLE_GLOBAL) {
        clear_elems(s, w);
        w->many = false;
        if (!quiet && alen < NAME_COPY && alen2 < NAME_COPY && ptc__python_name(arg, alen) &&
            ptc__python_name(arg2, alen2))
            rc =
                report(s->fn, s->ud, PTC__SCAN_GLOBAL, op, s->base + at, arg, alen, arg2, alen2, 0);
    } else if (role == PTC__SCAN_ROLE_STACK) {
        for (uint32_t ei = w->head; ei != NONE && rc == 0; ei = s->e[ei].next) {
            const sw_elem *e = &s->e[ei];
            if (e->al && (!quiet || e->aloud || e->bloud))
                rc = report(s->fn, s->ud, PTC__SCAN_GLOBAL, op, s->base + at, d + e->ao, e->al,
                            d + e->bo, e->bl, 0);
        }
        if (rc == 0 && w->many && !quiet)
            rc = report(s->fn, s->ud, PTC__SCAN_GLOBAL, op, s->base + at, (const uint8_t *)"?", 1,
                        (const uint8_t *)"?", 1, 0);
        clear_elems(s, w);
        w->many = false;
    } else if (role == PTC__SCAN_ROLE_STRING) {
        strref v = string_value(op, arg, alen);
        bool named = false;
        if ((op == PTC__OP_STRING || op == PTC__OP_UNICODE) && memchr(v.p, '\\', v.n)) {
            /* Escapes: Python decodes them before STACK_GLOBAL sees the name. The literal is
             * kept as written (and so never matches the policy) when its value is a name. */
            if (op == PTC__OP_STRING && v.n >= 2 && (v.p[0] == '\'' || v.p[0] == '"') &&
                v.p[v.n - 1] == v.p[0])
                v = (strref){v.p + 1, v.n - 2};
            named = escaped_name(op, v.p, v.n);
        }
        rc = push_name(s, wi, v.p, v.n, named, !quiet, err);
        w = &s->w[wi];
    }
    /* Other opcodes leave the pairs: a pop or a push between the two names (NONE POP, MARK
     * POP_MARK, a memo get) does not stop STACK_GLOBAL from taking them. */
    if (rc || (op == PTC__OP_STOP && pos >= w->quiet_end))
        return rc;
    w->pos = pos;
    *on = pos < len && KIND1[d[pos]]; /* a walk at no opcode would end there */
    return 0;
}

int ptc__pickle_sweep(const uint8_t *data, size_t len, uint64_t base_offset, bool at_start,
                      const ptc__span *quiet, size_t nquiet, const char *member, ptc__scan_fn fn,
                      void *ud, ptc_error *err)
{
    if (len == 0)
        return 0;
    sweep s = {.d = data,
               .len = len,
               .wfree = NONE,
               .efree = NONE,
               .base = base_offset,
               .member = member,
               .fn = fn,
               .ud = ud,
               .nl_at = {SIZE_MAX, SIZE_MAX},
               .g = SIZE_MAX};
    const uint8_t *last_nl = memrchr(data, '\n', len);
    s.line_limit = last_nl ? (size_t)(last_nl - data) + 1 : 0;
    size_t qi = 0;
    while (qi < nquiet && quiet[qi].b <= quiet[qi].a)
        qi++;
    int rc = 0;
    uint32_t cur = NONE;
    if (at_start && (rc = new_walk(&s, 0, 0, &cur, err)) < 0)
        goto out;
    for (;;) {
        size_t qa = qi < nquiet ? (size_t)quiet[qi].a : SIZE_MAX;
        if (cur == NONE) {
            size_t top = heap_key(&s), x = top < qa ? top : qa;
            size_t g = proto_before(&s, x < len ? x : len);
            if (g != SIZE_MAX)
                x = g;
            if (x >= len)
                break;
            if (top == x)
                cur = heap_pop(&s);
            else if ((rc = new_walk(&s, x, 0, &cur, err)) < 0)
                goto out;
        }
        size_t pos = s.w[cur].pos;
        /* A PROTO before this walk starts a walk first; one here is this walk's opcode. */
        size_t g =
            (s.g == SIZE_MAX ? s.g_from > pos : s.g > pos) ? SIZE_MAX : proto_before(&s, pos + 1);
        if (g < pos) {
            park(&s, cur);
            cur = NONE;
            continue;
        }
        if (g == pos) {
            s.g = SIZE_MAX;
            s.g_from = pos + 1;
        }
        /* Whatever else starts or stands here joins this walk. */
        while (qa == pos) {
            if (quiet[qi].b > s.w[cur].quiet_end)
                s.w[cur].quiet_end = (size_t)quiet[qi].b;
            do
                qi++;
            while (qi < nquiet && quiet[qi].b <= quiet[qi].a);
            qa = qi < nquiet ? (size_t)quiet[qi].a : SIZE_MAX;
        }
        if (heap_key(&s) == pos)
            merge_walk(&s, cur, heap_pop(&s));
        if (heap_key(&s) < pos || qa < pos) {
            park(&s, cur);
            cur = NONE;
            continue;
        }
        bool on;
        if ((rc = sweep_step(&s, cur, &on, err)) != 0)
            goto out;
        if (!on) {
            free_walk(&s, cur);
            cur = NONE;
        }
    }
out:
    free_arrays(&s);
    ptc__free(s.e);
    return rc;
}
