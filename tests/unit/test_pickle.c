/*
 * test_pickle.c - the restricted pickle machine and the static scanner, on hand-assembled streams:
 * every value kind, memo sharing, Python dict semantics, each structural rejection and limit, and
 * the scanner's view of globals (after STOP, behind STACK_GLOBAL).
 */
#include "pickle/pickle.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Permissive hooks: any global becomes a GLOBAL value, calls return None, BINPERSID returns its
 * argument. The tests of the torch rules live in test_pth.c. */
static int g_global(void *ud, ptc__vm *vm, const char *m, const char *n, ptc_value **out,
                    ptc_error *err)
{
    (void)ud;
    (void)err;
    ptc_value *v = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_GLOBAL);
    char *full = ptc__arena_alloc(ptc__vm_arena(vm), strlen(m) + strlen(n) + 2);
    if (!v || !full)
        return PTC_ENOMEM;
    memcpy(full, m, strlen(m));
    full[strlen(m)] = '.';
    memcpy(full + strlen(m) + 1, n, strlen(n) + 1);
    v->u.g.module = m;
    v->u.g.name = n;
    v->u.g.full = full;
    *out = v;
    return 0;
}

static int g_call(void *ud, ptc__vm *vm, ptc_value *f, ptc_value *a, ptc_value **out,
                  ptc_error *err)
{
    (void)ud;
    (void)f;
    (void)a;
    (void)err;
    *out = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_NONE);
    return *out ? 0 : PTC_ENOMEM;
}

static int g_pers(void *ud, ptc__vm *vm, ptc_value *pid, ptc_value **out, ptc_error *err)
{
    (void)ud;
    (void)vm;
    (void)err;
    *out = pid;
    return 0;
}

static const ptc__vm_hooks hooks = {NULL, g_global, g_call, g_call, NULL, g_pers};

static ptc__arena *arena;
static ptc_limits limits;

/* A small pickle builder: C hex escapes swallow following hex digits, so streams with text are
 * assembled from pieces rather than written as one literal. */
typedef struct pk {
    char b[4096];
    size_t n;
} pk;
static void op(pk *p, int c)
{
    p->b[p->n++] = (char)c;
}
static void raw(pk *p, const void *d, size_t n)
{
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void u32(pk *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        op(p, (int)((v >> (8 * k)) & 0xff));
}
static void ustr(pk *p, const char *s)
{
    op(p, 'X');
    u32(p, (uint32_t)strlen(s));
    raw(p, s, strlen(s));
}
#define RAW(p, lit) raw(p, lit, sizeof(lit) - 1)
static void binfloat(pk *p, double f)
{
    uint64_t bits;
    memcpy(&bits, &f, 8);
    op(p, 'G');
    for (int k = 7; k >= 0; k--)
        op(p, (int)((bits >> (8 * k)) & 0xff));
}

static int run(const char *bytes, size_t n, ptc_value **root, ptc_error *err)
{
    ptc__pickle_params p = {
        .member = "data.pkl", .limits = &limits, .arena = arena, .hooks = &hooks};
    return ptc__pickle_run((const uint8_t *)bytes, n, &p, root, NULL, err);
}
#define RUN(lit, root, err) run(lit, sizeof(lit) - 1, root, err)

static void test_values(void)
{
    ptc_value *v;
    ptc_error err;
    /* {'a': [1, -2, 300, 70000, True, None, 1.5], 'b': ('x', 'é'), 'c': 2**70, 'd': -1} */
    pk p = {.n = 0};
    RAW(&p, "\x80\x02}(");
    ustr(&p, "a");
    RAW(&p, "](K\x01J\xfe\xff\xff\xffM\x2c\x01J\x70\x11\x01\x00\x88N");
    binfloat(&p, 1.5);
    op(&p, 'e');
    ustr(&p, "b");
    ustr(&p, "x");
    ustr(&p, "\xc3\xa9");
    op(&p, 0x86);
    ustr(&p, "c");
    RAW(&p, "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40");
    ustr(&p, "d");
    RAW(&p, "\x8a\x01\xffu.");
    CHECK_CODE(run(p.b, p.n, &v, &err), 0, &err);
    CHECK_INT(ptc_value_kind_of(v), PTC_VALUE_DICT);
    CHECK_INT(ptc_value_len(v), 4);
    const ptc_value *a = ptc_dict_get(v, "a");
    CHECK_INT(ptc_value_kind_of(a), PTC_VALUE_LIST);
    CHECK_INT(ptc_value_len(a), 7);
    int64_t i;
    CHECK(ptc_value_int(ptc_value_item(a, 0), &i) == 0 && i == 1);
    CHECK(ptc_value_int(ptc_value_item(a, 1), &i) == 0 && i == -2);
    CHECK(ptc_value_int(ptc_value_item(a, 2), &i) == 0 && i == 300);
    CHECK(ptc_value_int(ptc_value_item(a, 3), &i) == 0 && i == 70000);
    int b;
    CHECK(ptc_value_bool(ptc_value_item(a, 4), &b) == 0 && b == 1);
    CHECK_INT(ptc_value_kind_of(ptc_value_item(a, 5)), PTC_VALUE_NONE);
    double f;
    CHECK(ptc_value_float(ptc_value_item(a, 6), &f) == 0 && f == 1.5);
    const ptc_value *t = ptc_dict_get(v, "b");
    const char *s;
    size_t n;
    CHECK_INT(ptc_value_kind_of(t), PTC_VALUE_TUPLE);
    CHECK(ptc_value_str(ptc_value_item(t, 1), &s, &n) == 0 && n == 2 &&
          memcmp(s, "\xc3\xa9", 2) == 0);
    const ptc_value *big = ptc_dict_get(v, "c");
    CHECK_INT(ptc_value_int(big, &i), PTC_ERANGE);
    const uint8_t *bytes;
    CHECK(ptc_value_int_bytes(big, &bytes, &n) == 0 && n == 9 && bytes[8] == 0x40);
    CHECK(ptc_value_int(ptc_dict_get(v, "d"), &i) == 0 && i == -1);
    CHECK(ptc_value_int_bytes(ptc_dict_get(v, "d"), &bytes, &n) == 0 && n == 1 && bytes[0] == 0xff);
}

static void test_memo_and_dicts(void)
{
    ptc_value *v;
    ptc_error err;
    /* l = []; (l, l): both slots are the same node (memo holds references). */
    static const char p1[] = "\x80\x02]q\x00h\x00\x86q\x01.";
    CHECK_CODE(RUN(p1, &v, &err), 0, &err);
    CHECK(ptc_value_item(v, 0) == ptc_value_item(v, 1));
    /* ((3,), (3,)): two objects in Python, so two nodes (the JSON document and ptc_save tell
     * objects apart by node: one node would show the second as a reference to the first). */
    static const char p2[] = "\x80\x02K\x03\x85K\x03\x85\x86.";
    CHECK_CODE(RUN(p2, &v, &err), 0, &err);
    CHECK(ptc_value_item(v, 0) != ptc_value_item(v, 1));
    CHECK_INT(ptc_value_len(ptc_value_item(v, 1)), 1);
    /* {1: 'a', True: 'b', 1.0: 'c'}: one key; Python keeps the first key and the last value. */
    pk p = {.n = 0};
    RAW(&p, "\x80\x02}(K\x01");
    ustr(&p, "a");
    op(&p, 0x88);
    ustr(&p, "b");
    binfloat(&p, 1.0);
    ustr(&p, "c");
    RAW(&p, "u.");
    CHECK_CODE(run(p.b, p.n, &v, &err), 0, &err);
    CHECK_INT(ptc_value_len(v), 1);
    const char *s;
    size_t n;
    CHECK(ptc_value_str(ptc_dict_value(v, 0), &s, &n) == 0 && s[0] == 'c');
    CHECK_INT(ptc_value_kind_of(ptc_dict_key(v, 0)), PTC_VALUE_INT);
    /* A dict of 2500 int keys in three batches, as torch.save writes more than 1000 items. */
    size_t cap = 64 + 2500 * 10;
    char *q = malloc(cap), *w = q;
    memcpy(w, "\x80\x02}", 3);
    w += 3;
    for (int batch = 0; batch < 3; batch++) {
        *w++ = '(';
        for (int k = batch * 1000; k < 2500 && k < (batch + 1) * 1000; k++) {
            *w++ = 'J';
            for (int j = 0; j < 4; j++)
                *w++ = (char)((k >> (8 * j)) & 0xff);
            *w++ = 'N';
        }
        *w++ = 'u';
    }
    *w++ = '.';
    CHECK_CODE(run(q, (size_t)(w - q), &v, &err), 0, &err);
    CHECK_INT(ptc_value_len(v), 2500);
    int64_t i;
    CHECK(ptc_value_int(ptc_dict_key(v, 2499), &i) == 0 && i == 2499);
    free(q);
}

typedef struct reject_case {
    const char *name;
    const char *bytes;
    size_t len;
    int code;
} reject_case;
#define R(name, lit, code)                                                                         \
    {                                                                                              \
        name, lit, sizeof(lit) - 1, code                                                           \
    }

static void test_rejections(void)
{
    static const reject_case cases[] = {
        R("empty", "", PTC_EFORMAT),
        R("stop only", ".", PTC_EFORMAT),
        R("no STOP", "\x80\x02N", PTC_EFORMAT),
        R("bytes after STOP", "\x80\x02N.junk", PTC_EFORMAT),
        R("TUPLE3 with two items", "\x80\x02NN\x87.", PTC_EFORMAT),
        R("REDUCE on empty stack", "\x80\x02R.", PTC_EFORMAT),
        R("SETITEM with one item", "\x80\x02}Ns.", PTC_EFORMAT),
        R("odd SETITEMS", "\x80\x02}(NNNu.", PTC_EFORMAT),
        R("APPENDS without MARK", "\x80\x02]Ne.", PTC_EFORMAT),
        R("BINGET before BINPUT", "\x80\x02h\x05.", PTC_EFORMAT),
        R("huge LONG_BINPUT", "\x80\x02Nr\xff\xff\xff\xff.", PTC_EFORMAT),
        R("list cycle",
          "\x80\x02]q\x00h\x00"
          "a.",
          PTC_EFORMAT),
        R("APPEND on dict", "\x80\x02}Na.", PTC_EFORMAT),
        R("SETITEM on list, index None", "\x80\x02]NaNNs.", PTC_EFORMAT),
        R("SETITEM on list, index out of range", "\x80\x02]NaK\x01Ns.", PTC_EFORMAT),
        R("SETITEM on tuple", "\x80\x02N\x85K\x00Ns.", PTC_EUNSAFE),
        R("no PROTO, first opcode pops", "\x86.", PTC_EFORMAT),
        R("protocol 4 with FRAME", "\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00N.", PTC_EFORMAT),
        R("PROTO as the last byte", "\x80\x02N\x80", PTC_EFORMAT),
        R("STOP on an empty stack", "\x80\x02.", PTC_EFORMAT),
        R("STOP with nothing above the MARK", "\x80\x02N(.", PTC_EFORMAT),
        R("short string lone surrogate", "\x80\x02U\x03\xed\xa0\x80.", PTC_EFORMAT),
        R("BUILD on plain dict", "\x80\x02}}b.", PTC_EFORMAT),
        R("BINUNICODE length lie",
          "\x80\x02X\xff\xff\xff\x7f"
          "abc",
          PTC_EFORMAT),
        R("SHORT_BINSTRING length lie",
          "\x80\x02U\xff"
          "a",
          PTC_EFORMAT),
        R("LONG1 past end", "\x80\x02\x8a\xc8", PTC_EFORMAT),
        R("bad UTF-8", "\x80\x02X\x02\x00\x00\x00\xff\xfe.", PTC_EFORMAT),
        R("unterminated GLOBAL",
          "\x80\x02"
          "ctorch._utils\n_rebuild_tensor_v2",
          PTC_EFORMAT),
        R("FRAME", "\x80\x02\x95\x01\x00\x00\x00\x00\x00\x00\x00N.", PTC_EFORMAT),
        R("BINBYTES",
          "\x80\x02"
          "B\x01\x00\x00\x00x.",
          PTC_EFORMAT),
        R("DUP", "\x80\x02N2.", PTC_EFORMAT),
        R("POP", "\x80\x02NN0.", PTC_EFORMAT),
        R("MEMOIZE", "\x80\x02N\x94.", PTC_EFORMAT),
        R("invalid opcode", "\x80\x02\xff.", PTC_EFORMAT),
        R("STACK_GLOBAL", "\x80\x02X\x02\x00\x00\x00osX\x06\x00\x00\x00system\x93.", PTC_EUNSAFE),
        R("INST", "\x80\x02(ibuiltins\nprint\n.", PTC_EUNSAFE),
        R("REDUCE args not a tuple",
          "\x80\x02"
          "cm\nf\nNR.",
          PTC_EFORMAT),
        R("REDUCE on an int", "\x80\x02K\x01)R.", PTC_EFORMAT),
        R("unhashable key", "\x80\x02}]Ns.", PTC_EFORMAT),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ptc_value *v;
        ptc_error err;
        int rc = run(cases[i].bytes, cases[i].len, &v, &err);
        if (rc != cases[i].code)
            fprintf(stderr, "  case \"%s\": got %s (%s)\n", cases[i].name, ptc_err_name(rc),
                    rc ? err.message : "");
        CHECK_INT(rc, cases[i].code);
        if (rc < 0)
            for (const char *m = err.message; *m; m++)
                CHECK((unsigned char)*m >= 0x20 && *m != 0x7f);
    }
}

/* A dict key costs at most a bounded walk: a tuple nested 100,000 deep (TUPLE1 after TUPLE1, no
 * MARK) and a tuple shared 80 levels deep (2^80 paths) are refused as keys at once, without deep
 * recursion or an endless hash (a fuzzing campaign found the first as a stack overflow). */
static void test_key_bounds(void)
{
    ptc_value *v;
    ptc_error err;
    size_t depth = 100000;
    char *p = malloc(depth + 16), *w = p;
    *w++ = '\x80';
    *w++ = '\x02';
    *w++ = '}';               /* EMPTY_DICT */
    *w++ = 'N';               /* NONE, the innermost item */
    memset(w, '\x85', depth); /* TUPLE1 */
    w += depth;
    *w++ = 'N'; /* the value */
    *w++ = 's'; /* SETITEM */
    *w++ = '.';
    CHECK_CODE(run(p, (size_t)(w - p), &v, &err), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "not hashable") != NULL);
    free(p);
    pk q = {{0}, 0};
    RAW(&q, "\x80\x02}N");
    for (int i = 0; i < 80; i++) {
        RAW(&q, "q\x00h\x00\x86"); /* BINPUT 0, BINGET 0, TUPLE2: (t, t) */
    }
    RAW(&q, "Ns.");
    CHECK_CODE(run(q.b, q.n, &v, &err), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "not hashable") != NULL);
}

static void test_limits(void)
{
    ptc_value *v;
    ptc_error err;
    /* 200,000 nested lists: the machine is iterative, the tree check caps the depth. */
    size_t depth = 200000, n = 2 + depth + (depth - 1) + 1;
    char *p = malloc(n), *w = p;
    *w++ = '\x80';
    *w++ = '\x02';
    memset(w, ']', depth);
    w += depth;
    memset(w, 'a', depth - 1);
    w += depth - 1;
    *w++ = '.';
    CHECK_CODE(run(p, (size_t)(w - p), &v, &err), PTC_ELIMIT, &err);
    free(p);
    /* MARK nesting beyond max_depth. */
    char marks[1200];
    memcpy(marks, "\x80\x02", 2);
    memset(marks + 2, '(', sizeof marks - 3);
    marks[sizeof marks - 1] = '.';
    CHECK_CODE(run(marks, sizeof marks, &v, &err), PTC_ELIMIT, &err);
    /* Billion laughs: level k is a tuple holding level k-1 three times (memo references), so
     * 30 levels expand to 3^30 nodes; the tree check refuses it before any walk can blow up. */
    char t3[5 + 30 * 7 + 1], *r = t3;
    *r++ = '\x80';
    *r++ = '\x02';
    *r++ = ')';
    *r++ = 'q';
    *r++ = 0;
    for (int k = 1; k <= 30; k++) {
        /* the previous level is on the stack; fetch it twice more and pack the three */
        *r++ = 'h';
        *r++ = (char)(k - 1);
        *r++ = 'h';
        *r++ = (char)(k - 1);
        *r++ = '\x87';
        *r++ = 'q';
        *r++ = (char)k;
    }
    *r++ = '.';
    CHECK_CODE(run(t3, (size_t)(r - t3), &v, &err), PTC_ELIMIT, &err);
    /* The memo is an array indexed by memo index, capped at max_memo entries: index 3 fits a
     * limit of 4, index 4 does not, even with a single entry set (the array would grow to it). */
    ptc_limits saved = limits;
    limits.max_memo = 4;
    static const char memo_ok[] = "\x80\x02NNNNNq\x03.", memo_over[] = "\x80\x02NNNNNq\x04.";
    CHECK_CODE(run(memo_ok, sizeof memo_ok - 1, &v, &err), 0, &err);
    CHECK_CODE(run(memo_over, sizeof memo_over - 1, &v, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "more than the limit of 4 memo entries") != NULL);
    CHECK(err.flags & PTC_ERR_STRICTER);
    limits = saved;
}

typedef struct scan_log {
    int globals, dynamic, opcodes;
    char last[128];
} scan_log;

static int log_item(void *ud, const ptc__scan_item *it)
{
    scan_log *l = ud;
    if (it->kind == PTC__SCAN_GLOBAL) {
        l->globals++;
        snprintf(l->last, sizeof l->last, "%s.%s", it->module, it->name);
    } else if (it->kind == PTC__SCAN_DYNAMIC) {
        l->dynamic++;
    } else if (it->kind == PTC__SCAN_OPCODE) {
        l->opcodes++;
    }
    return 0;
}

static void test_scan(void)
{
    ptc_error err;
    scan_log l = {0};
    /* A global hidden after STOP is still seen when scanning the whole member. */
    static const char p1[] = "\x80\x02N.cposix\nsystem\nX\x02\x00\x00\x00lsR.";
    CHECK_CODE(ptc__pickle_scan((const uint8_t *)p1, sizeof p1 - 1, "data.pkl", 0, false, log_item,
                                &l, NULL, &err),
               0, &err);
    CHECK_INT(l.globals, 1);
    CHECK_STR(l.last, "posix.system");
    /* STACK_GLOBAL names resolved from the two preceding string pushes. */
    memset(&l, 0, sizeof l);
    static const char p2[] = "\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93)R.";
    CHECK_CODE(ptc__pickle_scan((const uint8_t *)p2, sizeof p2 - 1, "data.pkl", 0, false, log_item,
                                &l, NULL, &err),
               0, &err);
    CHECK_INT(l.globals, 1);
    CHECK_STR(l.last, "os.system");
    CHECK(l.opcodes >= 3); /* SHORT_BINUNICODE, MEMOIZE are outside the subset */
    /* A payload followed by garbage: reported, then the scan fails. */
    memset(&l, 0, sizeof l);
    static const char p3[] = "\x80\x02"
                             "cbuiltins\neval\n\xff\xff";
    CHECK_CODE(ptc__pickle_scan((const uint8_t *)p3, sizeof p3 - 1, "data.pkl", 0, false, log_item,
                                &l, NULL, &err),
               PTC_EFORMAT, &err);
    CHECK_INT(l.globals, 1);
    /* Python-2 names map like torch's. */
    const char *m = "__builtin__", *n = "set";
    ptc__pickle_map_name(&m, &n);
    CHECK_STR(m, "builtins");
    CHECK_STR(n, "set");
    m = "__builtin__";
    n = "long";
    ptc__pickle_map_name(&m, &n);
    CHECK_STR(n, "int");
    CHECK(ptc__pickle_in_subset('X') && !ptc__pickle_in_subset(0x95));
    CHECK_STR(ptc__pickle_opname(0x93), "STACK_GLOBAL");
}

typedef struct sweep_log {
    int n;
    char seen[8][64]; /* "module.name@offset" */
} sweep_log;

static int log_sweep(void *ud, const ptc__scan_item *it)
{
    sweep_log *l = ud;
    if (it->kind == PTC__SCAN_GLOBAL && l->n < 8)
        snprintf(l->seen[l->n++], sizeof l->seen[0], "%s.%s@%llu", it->module, it->name,
                 (unsigned long long)it->offset);
    return 0;
}

#define SWEEP(lit, at_start, q, nq, l, err)                                                        \
    ptc__pickle_sweep((const uint8_t *)(lit), sizeof(lit) - 1, 0, at_start, q, nq, "r", log_sweep, \
                      l, err)

static void test_sweep(void)
{
    ptc_error err;
    sweep_log l = {0};
    /* A pickle wrapped in BINBYTES, read as an argument by the decode from the first byte. */
    static const char w1[] = "B\x1d\x00\x00\x00\x80\x02"
                             "cposix\nsystem\nX\x04\x00\x00\x00true\x85R.";
    CHECK_CODE(SWEEP(w1, true, NULL, 0, &l, &err), 0, &err);
    CHECK_INT(l.n, 1);
    CHECK_STR(l.seen[0], "posix.system@7");
    /* ... and in a STRING line, in FB's id and length read as FLOAT. */
    memset(&l, 0, sizeof l);
    static const char w2[] = "FB\x1c\x00\x80\x02"
                             "cposix\nsystem\n.";
    CHECK_CODE(SWEEP(w2, true, NULL, 0, &l, &err), 0, &err);
    CHECK_INT(l.n, 1);
    CHECK_STR(l.seen[0], "posix.system@6");
    /* A PROTO that a decode reads as its own opcode starts none: reported once. */
    memset(&l, 0, sizeof l);
    static const char w3[] = "\x80\x02N\x80\x02"
                             "cposix\nsystem\n.";
    CHECK_CODE(SWEEP(w3, true, NULL, 0, &l, &err), 0, &err);
    CHECK_INT(l.n, 1);
    /* STRING constants unquoted, in either quotes; an escaped literal counts when Python's
     * escape_decode makes a name of it (listed as written), and not otherwise. */
    memset(&l, 0, sizeof l);
    static const char s1[] =
        "\x80\x03S'posix'\nS\"system\"\n\x93.\x80\x03S'po\\x73ix'\nS'system'\n\x93."
        "\x80\x03S'po\\x2fix'\nS'system'\n\x93.";
    CHECK_CODE(SWEEP(s1, false, NULL, 0, &l, &err), 0, &err);
    CHECK_INT(l.n, 2);
    CHECK_STR(l.seen[0], "posix.system@21");
    CHECK_STR(l.seen[1], "po\\x73ix.system@47");
    /* UNICODE with \\u and \\U escapes (raw-unicode-escape), names through NONE POP and MARK
     * POP_MARK, and through the memo. */
    memset(&l, 0, sizeof l);
    static const char s2[] = "\x80\x02V\\u0070osix\nVsystem\n\x93."
                             "\x80\x04\x8c\x02osN0\x8c\x04path(1\x93."
                             "\x80\x04\x8c\x03sysq\x00\x8c\x04"
                             "exitq\x01h\x00h\x01\x93.";
    CHECK_CODE(SWEEP(s2, false, NULL, 0, &l, &err), 0, &err);
    CHECK_INT(l.n, 3);
    CHECK_STR(l.seen[0], "\\u0070osix.system@22");
    CHECK_STR(l.seen[1], "os.path@40");
    CHECK_STR(l.seen[2], "sys.exit@63");
    /* Two decodes that meet keep both modules STACK_GLOBAL could take, through memo opcodes. */
    memset(&l, 0, sizeof l);
    static const char m1[] = "\x80\x02\x8c\x05posix\x95\x80\x02U\x02osq\x00\x94\x94"
                             "\x8c\x06system\x94\x93.";
    CHECK_CODE(SWEEP(m1, false, NULL, 0, &l, &err), 0, &err);
    CHECK_INT(l.n, 2);
    CHECK((strcmp(l.seen[0], "posix.system@29") == 0 && strcmp(l.seen[1], "os.system@29") == 0) ||
          (strcmp(l.seen[1], "posix.system@29") == 0 && strcmp(l.seen[0], "os.system@29") == 0));
    /* A quiet span (read by a full scan) reports nothing of its own, but what its arguments
     * wrap, and goes on after STOP inside the span. */
    memset(&l, 0, sizeof l);
    static const char q1[] = "\x80\x02"
                             "cos\nsystem\nN.cos\nsystem\nC\x10\x80\x02"
                             "cposix\nsystem\n..";
    ptc__span q = {0, sizeof q1 - 1};
    CHECK_CODE(SWEEP(q1, false, &q, 1, &l, &err), 0, &err);
    CHECK_INT(l.n, 1);
    CHECK_STR(l.seen[0], "posix.system@30");
    /* Nested wrappers ending at distinct offsets: refused past the cap, not slow. */
    size_t k = PTC__SWEEP_MAX_WALKS + 8, len = k * 8;
    uint8_t *nest = malloc(len);
    CHECK(nest != NULL);
    if (nest) {
        for (size_t i = 0; i < k; i++) {
            uint32_t rest = (uint32_t)((k - i - 1) * 8);
            memcpy(nest + i * 7,
                   "\x80\x02"
                   "B",
                   3);
            memcpy(nest + i * 7 + 3, &rest, 4); /* little-endian hosts only, as the tests run */
        }
        memset(nest + k * 7, 'N', k);
        memset(&l, 0, sizeof l);
        CHECK_CODE(ptc__pickle_sweep(nest, len, 0, false, NULL, 0, "r", log_sweep, &l, &err),
                   PTC_ELIMIT, &err);
        free(nest);
    }
}

/* Hooks for the relaxations: calls return their arguments, but collections.OrderedDict() gives
 * an empty OrderedDict and builtins.bytearray(s) a bytearray sharing s's bytes, as the rebuild
 * hooks make them. */
static int e_call(void *ud, ptc__vm *vm, ptc_value *f, ptc_value *a, ptc_value **out,
                  ptc_error *err)
{
    (void)ud;
    (void)err;
    *out = a;
    if (strcmp(f->u.g.full, "collections.OrderedDict") == 0) {
        if (!(*out = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_DICT)))
            return PTC_ENOMEM;
        (*out)->flags |= PTC__V_ORDERED;
    } else if (strcmp(f->u.g.full, "builtins.bytearray") == 0) {
        if (!(*out = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_BYTES)))
            return PTC_ENOMEM;
        (*out)->flags |= PTC__V_BYTEARRAY;
        (*out)->u.s = a->u.seq.items[0]->u.s;
    }
    return 0;
}

static const ptc__vm_hooks echo_hooks = {NULL, g_global, e_call, e_call, NULL, g_pers};

static int run_echo(const char *bytes, size_t n, ptc_value **root, ptc_error *err)
{
    ptc__pickle_params p = {
        .member = "data.pkl", .limits = &limits, .arena = arena, .hooks = &echo_hooks};
    return ptc__pickle_run((const uint8_t *)bytes, n, &p, root, NULL, err);
}
#define RUN_ECHO(lit, root, err) run_echo(lit, sizeof(lit) - 1, root, err)

static int64_t int_of(const ptc_value *v)
{
    int64_t i = -999;
    CHECK(ptc_value_int(v, &i) == 0);
    return i;
}

/* Pickles torch 2.6 reads that ptc once refused, now read as torch reads them. */
static void test_read_as_torch(void)
{
    ptc_value *v;
    ptc_error err;
    const char *s;
    size_t n;
    /* PROTO is optional, may come anywhere, and any number but a FRAME-using 4 or 5 is read. */
    CHECK_CODE(RUN("K\x07.", &v, &err), 0, &err);
    CHECK_INT(int_of(v), 7);
    CHECK_CODE(RUN("\x80\x02\x80\x02K\x07.", &v, &err), 0, &err);
    CHECK_INT(int_of(v), 7);
    CHECK_CODE(RUN("]\x80\x03K\x07"
                   "a.",
                   &v, &err),
               0, &err);
    CHECK_INT(int_of(ptc_value_item(v, 0)), 7);
    CHECK_CODE(RUN("\x80\x04K\x07.", &v, &err), 0, &err);
    CHECK_INT(int_of(v), 7);
    CHECK_CODE(RUN("\x80\x00K\x07.", &v, &err), 0, &err);
    CHECK_CODE(RUN("\x80\x06K\x07.", &v, &err), 0, &err);
    CHECK_INT(int_of(v), 7);
    /* STOP takes the top of the innermost stack, as Python's pickle does. */
    CHECK_CODE(RUN("\x80\x02K\x01K\x02.", &v, &err), 0, &err);
    CHECK_INT(int_of(v), 2);
    CHECK_CODE(RUN("\x80\x02K\x01(K\x02K\x03.", &v, &err), 0, &err);
    CHECK_INT(int_of(v), 3);
    /* BINUNICODE with a lone surrogate: the bytes as they are (Python's surrogatepass). */
    CHECK_CODE(RUN("\x80\x02X\x04\x00\x00\x00"
                   "a\xed\xa0\x80.",
                   &v, &err),
               0, &err);
    CHECK(ptc_value_str(v, &s, &n) == 0 && n == 4 && memcmp(s, "a\xed\xa0\x80", 4) == 0);
    /* SETITEM(S) on a list: indices in range, negative ones from the end. */
    CHECK_CODE(RUN("\x80\x02](K\x01K\x02K\x03"
                   "eJ\xff\xff\xff\xffK\x09s(K\x00K\x08u.",
                   &v, &err),
               0, &err);
    CHECK_INT(ptc_value_len(v), 3);
    CHECK_INT(int_of(ptc_value_item(v, 0)), 8);
    CHECK_INT(int_of(ptc_value_item(v, 1)), 2);
    CHECK_INT(int_of(ptc_value_item(v, 2)), 9);
    /* SETITEM on a bytearray: the bytes it shares with the str it was made from stay as they
     * were. */
    CHECK_CODE(RUN_ECHO("\x80\x02X\x02\x00\x00\x00"
                        "abq\x00"
                        "cbuiltins\nbytearray\nh\x00\x85RK\x00K\x7as"
                        "h\x00\x86.",
                        &v, &err),
               0, &err);
    const uint8_t *b;
    CHECK(ptc_value_bytes(ptc_value_item(v, 0), &b, &n) == 0 && n == 2 && memcmp(b, "zb", 2) == 0);
    CHECK(ptc_value_str(ptc_value_item(v, 1), &s, &n) == 0 && n == 2 && memcmp(s, "ab", 2) == 0);
    /* REDUCE with a list of arguments: the call gets them as a tuple. */
    CHECK_CODE(RUN_ECHO("\x80\x02"
                        "cm\nf\n](K\x01K\x02"
                        "eR.",
                        &v, &err),
               0, &err);
    CHECK_INT(ptc_value_kind_of(v), PTC_VALUE_TUPLE);
    CHECK_INT(ptc_value_len(v), 2);
    CHECK_INT(int_of(ptc_value_item(v, 1)), 2);
    /* BUILD on an OrderedDict: a list of pairs, and attribute names that are not str, as
     * __dict__.update() takes them. */
    CHECK_CODE(RUN_ECHO("\x80\x02"
                        "ccollections\nOrderedDict\n)R"
                        "]X\x01\x00\x00\x00"
                        "aK\x01\x86"
                        "ab"
                        "}K\x05K\x06sb.",
                        &v, &err),
               0, &err);
    const ptc_value *attrs = ptc_dict_attrs(v);
    CHECK_INT(ptc_value_len(attrs), 2);
    CHECK_INT(int_of(ptc_dict_get(attrs, "a")), 1);
    CHECK_INT(ptc_value_kind_of(ptc_dict_key(attrs, 1)), PTC_VALUE_INT);
    CHECK_INT(int_of(ptc_dict_value(attrs, 1)), 6);
    /* What __dict__.update() refuses stays refused: an int, a pair of three. */
    CHECK_CODE(RUN_ECHO("\x80\x02"
                        "ccollections\nOrderedDict\n)RK\x01"
                        "b.",
                        &v, &err),
               PTC_EFORMAT, &err);
    CHECK_CODE(RUN_ECHO("\x80\x02"
                        "ccollections\nOrderedDict\n)R]NNN\x87"
                        "ab.",
                        &v, &err),
               PTC_EFORMAT, &err);
}

int main(void)
{
    ptc_limits_default(&limits);
    ptc__budget budget = {0, 1ull << 30};
    if (ptc__arena_new(&arena, &budget) < 0)
        return 1;
    test_values();
    test_memo_and_dicts();
    test_rejections();
    test_read_as_torch();
    test_limits();
    test_key_bounds();
    test_scan();
    test_sweep();
    ptc__arena_free(arena);
    return check_exit("test_pickle");
}
