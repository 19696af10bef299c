/*
 * vm.c - the restricted pickle machine.
 *
 * Executes exactly the 34 opcodes of torch 2.6's weights-only unpickler (protocol 2 subset):
 *   PROTO STOP MARK NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 BINFLOAT BINUNICODE
 *   SHORT_BINSTRING EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST APPEND APPENDS EMPTY_DICT
 *   SETITEM SETITEMS EMPTY_SET GLOBAL REDUCE NEWOBJ BUILD BINPERSID BINPUT LONG_BINPUT BINGET
 *   LONG_BINGET
 * Opcodes that can reach a callable by other means (STACK_GLOBAL, INST, OBJ, EXT1/2/4, NEWOBJ_EX)
 * are PTC_EUNSAFE; every other byte is PTC_EFORMAT. Read as torch 2.6 reads them: PROTO anywhere
 * with any number (protocols 4 and 5 fail on FRAME), a pickle without PROTO, STOP taking the top
 * of the innermost stack, SETITEM(S) on a list or bytearray, a list of REDUCE arguments, BUILD
 * state as __dict__.update() takes it, BINUNICODE with lone surrogates (surrogatepass). Stricter
 * than torch only where that stops an attack: nothing may follow STOP (a second pickle hides
 * there), no SETITEM(S) on a tensor (CVE-2026-24747), memo indices below the opcode count (an
 * array memo, as in CPython's _pickle, allocates up to the index), and the limits. Those refusals
 * carry PTC_ERR_STRICTER.
 *
 * Encodings (docs/internals/pickle.md): BININT int32 LE; BININT1 u8; BININT2 u16 LE; LONG1 u8
 * length + two's-complement LE; BINFLOAT IEEE double big-endian; BINUNICODE u32 LE length + UTF-8;
 * SHORT_BINSTRING u8 length + bytes (decoded as UTF-8, as torch.load passes encoding='utf-8');
 * GLOBAL two '\n'-terminated lines; BINPUT/BINGET u8; LONG_BINPUT/LONG_BINGET u32 LE.
 */
#include "pickle/pickle.h"

#include <string.h>

/* The opcode table (opcodes.h) as the machine looks things up in it: the name of each byte, and
 * whether it is one of the weights-only subset. */
static const struct {
    const char *name;
    uint8_t subset;
} OPS[256] = {
#define X(name_, byte, arg, proto, subset_, scan) [byte] = {.name = #name_, .subset = subset_},
    PTC__PICKLE_OPCODES(X)
#undef X
};

const char *ptc__pickle_opname(uint8_t op)
{
    return OPS[op].name;
}

int ptc__pickle_in_subset(uint8_t op)
{
    return OPS[op].subset;
}

/* torch's Python-2 mapping (torch/_utils.py IMPORT_MAPPING and NAME_MAPPING), the entries that can
 * matter for a weights-only load; unmapped names pass through unchanged. */
void ptc__pickle_map_name(const char **module, const char **name)
{
    static const struct {
        const char *from_mod, *from_name, *to_mod, *to_name;
    } names[] = {
        {"__builtin__", "xrange", "builtins", "range"},
        {"__builtin__", "reduce", "functools", "reduce"},
        {"__builtin__", "intern", "sys", "intern"},
        {"__builtin__", "unichr", "builtins", "chr"},
        {"__builtin__", "unicode", "builtins", "str"},
        {"__builtin__", "long", "builtins", "int"},
        {"__builtin__", "basestring", "builtins", "str"},
        {"itertools", "izip", "builtins", "zip"},
        {"itertools", "imap", "builtins", "map"},
        {"itertools", "ifilter", "builtins", "filter"},
        {"itertools", "ifilterfalse", "itertools", "filterfalse"},
        {"itertools", "izip_longest", "itertools", "zip_longest"},
        {"UserDict", "IterableUserDict", "collections", "UserDict"},
        {"UserList", "UserList", "collections", "UserList"},
        {"UserString", "UserString", "collections", "UserString"},
        {"whichdb", "whichdb", "dbm", "whichdb"},
        {"_socket", "fromfd", "socket", "fromfd"},
        {"_multiprocessing", "Connection", "multiprocessing.connection", "Connection"},
        {"multiprocessing.process", "Process", "multiprocessing.context", "Process"},
        {"multiprocessing.forking", "Popen", "multiprocessing.popen_fork", "Popen"},
        {"urllib", "ContentTooShortError", "urllib.error", "ContentTooShortError"},
        {"urllib", "getproxies", "urllib.request", "getproxies"},
        {"urllib", "pathname2url", "urllib.request", "pathname2url"},
        {"urllib", "quote_plus", "urllib.parse", "quote_plus"},
        {"urllib", "quote", "urllib.parse", "quote"},
        {"urllib", "unquote_plus", "urllib.parse", "unquote_plus"},
        {"urllib", "unquote", "urllib.parse", "unquote"},
        {"urllib", "url2pathname", "urllib.request", "url2pathname"},
        {"urllib", "urlcleanup", "urllib.request", "urlcleanup"},
        {"urllib", "urlencode", "urllib.parse", "urlencode"},
        {"urllib", "urlopen", "urllib.request", "urlopen"},
        {"urllib", "urlretrieve", "urllib.request", "urlretrieve"},
        {"urllib2", "HTTPError", "urllib.error", "HTTPError"},
        {"urllib2", "URLError", "urllib.error", "URLError"},
    };
    static const struct {
        const char *from, *to;
    } modules[] = {
        {"__builtin__", "builtins"},
        {"copy_reg", "copyreg"},
        {"Queue", "queue"},
        {"SocketServer", "socketserver"},
        {"ConfigParser", "configparser"},
        {"repr", "reprlib"},
        {"tkFileDialog", "tkinter.filedialog"},
        {"tkSimpleDialog", "tkinter.simpledialog"},
        {"tkColorChooser", "tkinter.colorchooser"},
        {"tkCommonDialog", "tkinter.commondialog"},
        {"Dialog", "tkinter.dialog"},
        {"Tkdnd", "tkinter.dnd"},
        {"tkFont", "tkinter.font"},
        {"tkMessageBox", "tkinter.messagebox"},
        {"ScrolledText", "tkinter.scrolledtext"},
        {"Tkconstants", "tkinter.constants"},
        {"Tix", "tkinter.tix"},
        {"ttk", "tkinter.ttk"},
        {"Tkinter", "tkinter"},
        {"markupbase", "_markupbase"},
        {"_winreg", "winreg"},
        {"thread", "_thread"},
        {"dummy_thread", "_dummy_thread"},
        {"dbhash", "dbm.bsd"},
        {"dumbdbm", "dbm.dumb"},
        {"dbm", "dbm.ndbm"},
        {"gdbm", "dbm.gnu"},
        {"xmlrpclib", "xmlrpc.client"},
        {"SimpleXMLRPCServer", "xmlrpc.server"},
        {"httplib", "http.client"},
        {"htmlentitydefs", "html.entities"},
        {"HTMLParser", "html.parser"},
        {"Cookie", "http.cookies"},
        {"cookielib", "http.cookiejar"},
        {"BaseHTTPServer", "http.server"},
        {"test.test_support", "test.support"},
        {"commands", "subprocess"},
        {"urlparse", "urllib.parse"},
        {"robotparser", "urllib.robotparser"},
        {"urllib2", "urllib.request"},
        {"anydbm", "dbm"},
        {"_abcoll", "collections.abc"},
        {"cPickle", "pickle"},
        {"_elementtree", "xml.etree.ElementTree"},
        {"FileDialog", "tkinter.filedialog"},
        {"SimpleDialog", "tkinter.simpledialog"},
        {"DocXMLRPCServer", "xmlrpc.server"},
        {"SimpleHTTPServer", "http.server"},
        {"CGIHTTPServer", "http.server"},
        {"UserDict", "collections"},
        {"UserList", "collections"},
        {"UserString", "collections"},
        {"whichdb", "dbm"},
        {"StringIO", "io"},
        {"cStringIO", "io"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (strcmp(*module, names[i].from_mod) == 0 && strcmp(*name, names[i].from_name) == 0) {
            *module = names[i].to_mod;
            *name = names[i].to_name;
            return;
        }
    }
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++) {
        if (strcmp(*module, modules[i].from) == 0) {
            *module = modules[i].to;
            return;
        }
    }
}

/* ---- the machine ----------------------------------------------------------------------------- */

struct ptc__vm {
    const uint8_t *data;
    size_t len, pos;
    size_t op_pos; /* offset of the opcode being executed */
    const ptc__pickle_params *p;
    ptc__arena *arena;
    ptc_value **stack;
    size_t nstack, capstack;
    size_t *marks;
    size_t nmarks, capmarks;
    ptc_value **memo;
    size_t capmemo, nmemo_set;
    uint64_t nops, nobjects;
    /* None, False and True are immutable, so one node of each serves every NONE, NEWFALSE and
     * NEWTRUE of the pickle (a list of 5 M None costs its item pointers, not 5 M nodes); each is
     * still counted against max_objects like any other value. */
    ptc_value *singletons[3];
    /* Ints and the empty tuple are immutable too, and Python itself keeps one object of each
     * int in -5..256 and of (): one node per int in 0..255 (the offsets, sizes, strides and
     * numels of small tensors) and one empty tuple (the args of every backward-hooks
     * OrderedDict) serve the whole pickle, made on first use and counted like the others.
     * Other tuples are not shared: two equal (3,) are two objects in Python, and the JSON
     * document and ptc_save tell objects apart by node. */
    ptc_value *small_ints[256];
    ptc_value *empty_tuple;
};

const char *ptc__vm_member(const ptc__vm *vm)
{
    return vm->p->member;
}
int64_t ptc__vm_offset(const ptc__vm *vm)
{
    return (int64_t)(vm->p->base_offset + vm->op_pos);
}
ptc__arena *ptc__vm_arena(ptc__vm *vm)
{
    return vm->arena;
}
const ptc_limits *ptc__vm_limits(const ptc__vm *vm)
{
    return vm->p->limits;
}

#define VM_ERR(vm, code, ...) ptc__err(err, code, (vm)->p->member, ptc__vm_offset(vm), __VA_ARGS__)

int ptc__vm_charge(ptc__vm *vm, uint64_t n, ptc_error *err)
{
    uint64_t max = vm->p->limits->max_objects;
    if (n > max || vm->nobjects > max - n)
        return ptc__err_stricter(err, PTC_ELIMIT, vm->p->member, ptc__vm_offset(vm),
                                 "the pickle builds more than the limit of %llu objects",
                                 (unsigned long long)max);
    vm->nobjects += n;
    return 0;
}
/* A refusal torch 2.6 would not make (PTC_ERR_STRICTER). */
#define VM_STRICTER(vm, code, ...)                                                                 \
    ptc__err_stricter(err, code, (vm)->p->member, ptc__vm_offset(vm), __VA_ARGS__)

/* VM_ERR, or VM_STRICTER when stricter is true. */
#define VM_ERR_IF(vm, stricter, code, ...)                                                         \
    ((stricter) ? VM_STRICTER(vm, code, __VA_ARGS__) : VM_ERR(vm, code, __VA_ARGS__))

/* Grows one of the machine's arrays (stack, MARK stack, memo) to hold need entries; more than max
 * entries is PTC_ELIMIT naming what, whatever the budget says. */
static int grow_array(ptc__vm *vm, void **arr, size_t *cap, size_t need, size_t elsize,
                      uint64_t max, const char *what, ptc_error *err)
{
    if (need <= *cap)
        return 0;
    if (need > max)
        return VM_STRICTER(vm, PTC_ELIMIT, "the %s would hold more than its limit of %llu entries",
                           what, (unsigned long long)max);
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need)
        ncap *= 2;
    if (ncap > max)
        ncap = (size_t)max;
    if (ncap > SIZE_MAX / elsize)
        return VM_ERR(vm, PTC_ELIMIT, "pickle machine array too large");
    if (ptc__budget_take(vm->p->budget, (uint64_t)(ncap - *cap) * elsize, err, vm->p->member,
                         ptc__vm_offset(vm)) < 0)
        return PTC_ELIMIT;
    void *n = ptc__realloc(*arr, ncap * elsize);
    if (!n) {
        ptc__budget_give(vm->p->budget, (uint64_t)(ncap - *cap) * elsize);
        return VM_ERR(vm, PTC_ENOMEM, "out of memory");
    }
    *arr = n;
    *cap = ncap;
    return 0;
}

static ptc_value *new_value(ptc__vm *vm, ptc_value_kind kind, ptc_error *err, int *rc)
{
    if (++vm->nobjects > vm->p->limits->max_objects) {
        *rc = VM_STRICTER(vm, PTC_ELIMIT, "the pickle builds more than the limit of %llu objects",
                          (unsigned long long)vm->p->limits->max_objects);
        return NULL;
    }
    ptc_value *v = ptc__value_new(vm->arena, kind);
    if (!v)
        *rc = VM_ERR(vm, PTC_ENOMEM, "out of memory building a %s", ptc_value_kind_name(kind));
    return v;
}

/* The shared node of NONE, NEWFALSE or NEWTRUE (see ptc__vm.singletons). */
static ptc_value *singleton(ptc__vm *vm, uint8_t op, ptc_error *err, int *rc)
{
    int k = op == PTC__OP_NONE ? 0 : op == PTC__OP_NEWFALSE ? 1 : 2;
    ptc_value *v = vm->singletons[k];
    if (v) {
        if (++vm->nobjects > vm->p->limits->max_objects) {
            *rc =
                VM_STRICTER(vm, PTC_ELIMIT, "the pickle builds more than the limit of %llu objects",
                            (unsigned long long)vm->p->limits->max_objects);
            return NULL;
        }
        return v;
    }
    if (!(v = new_value(vm, k == 0 ? PTC_VALUE_NONE : PTC_VALUE_BOOL, err, rc)))
        return NULL;
    v->u.b = k == 2;
    return vm->singletons[k] = v;
}

static int push(ptc__vm *vm, ptc_value *v, ptc_error *err)
{
    if (vm->nstack < vm->capstack) { /* the common case, without a call */
        vm->stack[vm->nstack++] = v;
        return 0;
    }
    /* Every push consumes at least one byte of input, so the stack never holds more entries than
     * a pickle may have bytes. */
    int rc = grow_array(vm, (void **)&vm->stack, &vm->capstack, vm->nstack + 1, sizeof *vm->stack,
                        vm->p->limits->max_pickle_bytes, "stack", err);
    if (rc < 0)
        return rc;
    vm->stack[vm->nstack++] = v;
    return 0;
}

/* Number of stack items above the innermost MARK (or the whole stack when no MARK is open). */
static size_t floor_of(const ptc__vm *vm)
{
    return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
}

static int need(ptc__vm *vm, size_t n, uint8_t op, ptc_error *err)
{
    if (vm->nstack - floor_of(vm) < n)
        return VM_ERR(vm, PTC_EFORMAT, "%s needs %zu stack item%s but %zu are above the mark",
                      ptc__pickle_opname(op), n, n == 1 ? "" : "s", vm->nstack - floor_of(vm));
    return 0;
}

static int read_bytes(ptc__vm *vm, size_t n, const uint8_t **out, ptc_error *err)
{
    if (vm->len - vm->pos < n)
        return VM_ERR(vm, PTC_EFORMAT, "truncated: %s needs %zu bytes, %zu remain",
                      ptc__pickle_opname(vm->data[vm->op_pos]), n, vm->len - vm->pos);
    *out = vm->data + vm->pos;
    vm->pos += n;
    return 0;
}

static int pop_mark(ptc__vm *vm, uint8_t op, size_t *start, ptc_error *err)
{
    if (vm->nmarks == 0)
        return VM_ERR(vm, PTC_EFORMAT, "%s without a MARK", ptc__pickle_opname(op));
    *start = vm->marks[--vm->nmarks];
    return 0;
}

/* Whether Python decodes s with errors='surrogatepass', as torch 2.6 decodes BINUNICODE: UTF-8
 * that may also encode the surrogates U+D800..U+DFFF (ED A0..BF 80..BF). */
static bool utf8_surrogatepass(const uint8_t *s, size_t n)
{
    size_t i = 0, last = 0;
    while (i < n) {
        if (s[i] == 0xED && n - i >= 3 && s[i + 1] >= 0xA0 && s[i + 1] <= 0xBF &&
            (s[i + 2] & 0xC0) == 0x80) {
            if (!ptc__utf8_valid(s + last, i - last))
                return false;
            i += 3;
            last = i;
        } else {
            i++;
        }
    }
    return ptc__utf8_valid(s + last, n - last);
}

/* strict says how torch decodes the string: SHORT_BINSTRING strictly, BINUNICODE with
 * surrogatepass. */
static int make_string(ptc__vm *vm, ptc_value_kind kind, const uint8_t *s, size_t n, bool strict,
                       ptc_error *err)
{
    /* BINUNICODE may encode lone surrogates, as torch reads them: the bytes are kept as they are
     * (ptc's strings are byte strings; every message escapes them). */
    if (kind == PTC_VALUE_STR && !ptc__utf8_valid(s, n) && (strict || !utf8_surrogatepass(s, n))) {
        char esc[64];
        return VM_ERR(vm, PTC_EFORMAT, "string is not valid UTF-8: \"%s\"",
                      ptc__escape(esc, sizeof esc, s, n, false));
    }
    int rc = 0;
    if (++vm->nobjects > vm->p->limits->max_objects)
        return VM_STRICTER(vm, PTC_ELIMIT, "the pickle builds more than the limit of %llu objects",
                           (unsigned long long)vm->p->limits->max_objects);
    ptc_value *v = ptc__value_str(vm->arena, kind, (const char *)s, n);
    if (!v)
        return VM_ERR(vm, PTC_ENOMEM, "out of memory for a string of %zu bytes", n);
    rc = push(vm, v, err);
    return rc;
}

static int tuple_from(ptc__vm *vm, size_t start, ptc_error *err)
{
    int rc = 0;
    ptc_value *t = new_value(vm, PTC_VALUE_TUPLE, err, &rc);
    if (!t)
        return rc;
    size_t n = vm->nstack - start;
    if (n) {
        t->u.seq.items = ptc__arena_alloc(vm->arena, n * sizeof *t->u.seq.items);
        if (!t->u.seq.items)
            return VM_ERR(vm, PTC_ENOMEM, "out of memory for a tuple of %zu items", n);
        memcpy(t->u.seq.items, vm->stack + start, n * sizeof *t->u.seq.items);
        t->u.seq.n = t->u.seq.cap = n;
    }
    vm->nstack = start;
    return push(vm, t, err);
}

static int memo_put(ptc__vm *vm, uint32_t idx, ptc_error *err)
{
    if (vm->nstack == 0 || vm->nstack == floor_of(vm))
        return VM_ERR(vm, PTC_EFORMAT, "memo put with nothing above the mark");
    /* torch.save numbers memo entries 0, 1, 2 ... so an index can never exceed the number of
     * opcodes executed; larger ones only serve to make a reader allocate (torch's memo is a dict
     * and takes any index). */
    if ((uint64_t)idx >= vm->nops)
        return VM_STRICTER(vm, PTC_EFORMAT, "memo index %u is beyond the %llu opcodes executed",
                           idx, (unsigned long long)vm->nops);
    /* The memo is an array indexed by memo index, capped at max_memo entries: in torch.save's
     * sequential numbering an index at or above max_memo means more entries than that. */
    if ((uint64_t)idx >= vm->p->limits->max_memo)
        return VM_STRICTER(vm, PTC_ELIMIT, "more than the limit of %llu memo entries",
                           (unsigned long long)vm->p->limits->max_memo);
    int rc = 0;
    if (idx >= vm->capmemo) {
        size_t old = vm->capmemo;
        rc = grow_array(vm, (void **)&vm->memo, &vm->capmemo, (size_t)idx + 1, sizeof *vm->memo,
                        vm->p->limits->max_memo, "memo", err);
        if (rc < 0)
            return rc;
        memset(vm->memo + old, 0, (vm->capmemo - old) * sizeof *vm->memo);
    }
    if (!vm->memo[idx]) {
        if (++vm->nmemo_set > vm->p->limits->max_memo)
            return VM_STRICTER(vm, PTC_ELIMIT, "more than the limit of %llu memo entries",
                               (unsigned long long)vm->p->limits->max_memo);
    }
    vm->memo[idx] = vm->stack[vm->nstack - 1];
    return 0;
}

static int memo_get(ptc__vm *vm, uint32_t idx, ptc_error *err)
{
    if (idx >= vm->capmemo || !vm->memo[idx])
        return VM_ERR(vm, PTC_EFORMAT, "memo index %u was never set", idx);
    return push(vm, vm->memo[idx], err);
}

static int op_long1(ptc__vm *vm, ptc_error *err)
{
    const uint8_t *p;
    int rc = read_bytes(vm, 1, &p, err);
    if (rc < 0)
        return rc;
    size_t n = p[0];
    rc = read_bytes(vm, n, &p, err);
    if (rc < 0)
        return rc;
    /* Strip redundant sign bytes so that equal numbers have equal forms. */
    while (n > 0) {
        uint8_t top = p[n - 1];
        bool neg_below = n >= 2 && (p[n - 2] & 0x80);
        if ((top == 0x00 && !(n >= 2 && neg_below)) || (top == 0xFF && n >= 2 && neg_below))
            n--;
        else
            break;
    }
    if (n == 1 && p[0] == 0)
        n = 0;
    if (n <= 8) {
        uint64_t u = 0;
        for (size_t k = 0; k < n; k++)
            u |= (uint64_t)p[k] << (8 * k);
        if (n > 0 && n < 8 && (p[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
        ptc_value *v = ptc__value_int(vm->arena, (int64_t)u);
        if (!v)
            return VM_ERR(vm, PTC_ENOMEM, "cannot build an int");
        if (++vm->nobjects > vm->p->limits->max_objects)
            return VM_STRICTER(vm, PTC_ELIMIT, "cannot build an int: too many objects");
        return push(vm, v, err);
    }
    int rc2 = 0;
    ptc_value *v = new_value(vm, PTC_VALUE_INT, err, &rc2);
    if (!v)
        return rc2;
    uint8_t *copy = ptc__arena_alloc(vm->arena, n);
    if (!copy)
        return VM_ERR(vm, PTC_ENOMEM, "out of memory for an int");
    memcpy(copy, p, n);
    v->u.i.bytes = copy;
    v->u.i.nbytes = (uint32_t)n;
    v->u.i.fits = false;
    v->u.i.v = (p[n - 1] & 0x80) ? INT64_MIN : INT64_MAX; /* saturated, for comparisons only */
    return push(vm, v, err);
}

/* GLOBAL: two '\n'-terminated lines, each valid UTF-8 without control bytes. */
static int op_global(ptc__vm *vm, ptc_error *err)
{
    const char *lines[2];
    size_t lens[2];
    for (int k = 0; k < 2; k++) {
        const uint8_t *start = vm->data + vm->pos;
        const uint8_t *nl = memchr(start, '\n', vm->len - vm->pos);
        if (!nl)
            return VM_ERR(vm, PTC_EFORMAT, "GLOBAL %s line is not terminated",
                          k == 0 ? "module" : "name");
        lens[k] = (size_t)(nl - start);
        lines[k] = (const char *)start;
        vm->pos += lens[k] + 1;
        if (lens[k] == 0 || !ptc__utf8_valid(start, lens[k]) || memchr(start, 0, lens[k])) {
            char esc[96];
            return VM_ERR(vm, PTC_EFORMAT, "GLOBAL %s is not a valid name: \"%s\"",
                          k == 0 ? "module" : "name",
                          ptc__escape(esc, sizeof esc, start, lens[k], false));
        }
    }
    char *module = ptc__arena_strndup(vm->arena, lines[0], lens[0]);
    char *name = ptc__arena_strndup(vm->arena, lines[1], lens[1]);
    if (!module || !name)
        return VM_ERR(vm, PTC_ENOMEM, "out of memory");
    const char *m = module, *nm = name;
    ptc__pickle_map_name(&m, &nm);
    ptc_value *v = NULL;
    int rc = vm->p->hooks->global(vm->p->hooks->ud, vm, m, nm, &v, err);
    if (rc < 0)
        return rc;
    if (++vm->nobjects > vm->p->limits->max_objects)
        return VM_STRICTER(vm, PTC_ELIMIT, "too many objects");
    return push(vm, v, err);
}

/* Whether index is an int in [-n, n), Python's range for a sequence of n items. */
static bool index_ok(const ptc_value *index, int64_t n)
{
    int64_t i;
    if (index->kind == PTC_VALUE_BOOL)
        i = index->u.b;
    else if (index->kind == PTC_VALUE_INT && index->u.i.fits)
        i = index->u.i.v;
    else
        return false;
    return i >= -n && i < n;
}

/* Whether Python's target[key] = val succeeds, which is all torch 2.6 does for SETITEM: for a
 * list or bytearray an index in range (and a byte for a bytearray); for a tensor that does not
 * require grad an index per leading dimension and a number. Other targets of ptc's values either
 * are dicts or take no items. */
static bool torch_sets_item(const ptc_value *target, const ptc_value *key, const ptc_value *val)
{
    switch (target->kind) {
    case PTC_VALUE_LIST:
        return index_ok(key, (int64_t)target->u.seq.n);
    case PTC_VALUE_BYTES:
        return (target->flags & PTC__V_BYTEARRAY) && index_ok(key, (int64_t)target->u.s.n) &&
               val->kind == PTC_VALUE_INT && val->u.i.fits && val->u.i.v >= 0 && val->u.i.v <= 255;
    case PTC_VALUE_TENSOR: {
        const ptc_tensor *t = target->u.t;
        const int64_t *shape = ptc_tensor_shape(t);
        bool number = val->kind == PTC_VALUE_INT || val->kind == PTC_VALUE_FLOAT ||
                      val->kind == PTC_VALUE_BOOL;
        if (!number || ptc_tensor_requires_grad(t))
            return false;
        if (key->kind != PTC_VALUE_TUPLE)
            return ptc_tensor_ndim(t) >= 1 && index_ok(key, shape[0]);
        if (key->u.seq.n > (size_t)ptc_tensor_ndim(t))
            return false;
        for (size_t i = 0; i < key->u.seq.n; i++)
            if (!index_ok(key->u.seq.items[i], shape[i]))
                return false;
        return true;
    }
    default:
        return false;
    }
}

/* SETITEM(S) on a list or a bytearray, as torch 2.6 carries it out: target[key] = val pair by
 * pair, an index in Python's range (negative from the end), a byte for a bytearray. A pair torch
 * would fail on fails the pickle; the pairs before it stay assigned, as in torch. */
static int seq_setitems(ptc__vm *vm, ptc_value *d, size_t start, uint8_t op, ptc_error *err)
{
    const char *what = ptc_value_kind_name((ptc_value_kind)d->kind);
    for (size_t i = start; i < vm->nstack; i += 2) {
        if (i + 1 == vm->nstack)
            return VM_ERR(vm, PTC_EFORMAT, "%s on a %s with a key but no value",
                          ptc__pickle_opname(op), what);
        const ptc_value *key = vm->stack[i];
        ptc_value *val = vm->stack[i + 1];
        if (!torch_sets_item(d, key, val))
            return VM_ERR(vm, PTC_EFORMAT, "%s on a %s: index or value out of range",
                          ptc__pickle_opname(op), what);
        int64_t k = key->kind == PTC_VALUE_BOOL ? key->u.b : key->u.i.v;
        if (d->kind == PTC_VALUE_LIST) {
            k += k < 0 ? (int64_t)d->u.seq.n : 0;
            d->u.seq.items[k] = val;
        } else {
            /* bytearray(b) may share b's bytes: the first assignment gives it its own copy. */
            if (!(d->flags & PTC__V_OWN_BYTES)) {
                char *own = ptc__arena_alloc(vm->arena, d->u.s.n + 1);
                if (!own)
                    return VM_ERR(vm, PTC_ENOMEM, "out of memory copying a bytearray");
                memcpy(own, d->u.s.p, d->u.s.n + 1);
                d->u.s.p = own;
                d->flags |= PTC__V_OWN_BYTES;
            }
            k += k < 0 ? (int64_t)d->u.s.n : 0;
            ((char *)d->u.s.p)[k] = (char)val->u.i.v;
        }
    }
    vm->nstack = start;
    return 0;
}

/* The items container of a symbolic object (a dict or list subclass, read with
 * PTC_OPEN_SALVAGE) into *out: made of kind at the first SETITEM(S) or APPEND(S). PTC_EFORMAT
 * when the object already holds the other kind; the limits and PTC_ENOMEM of new_value. */
static int symbolic_items(ptc__vm *vm, ptc_value *obj, ptc_value_kind kind, uint8_t op,
                          ptc_value **out, ptc_error *err)
{
    int rc = 0;
    if (!obj->u.obj.items && !(obj->u.obj.items = new_value(vm, kind, err, &rc)))
        return rc;
    if (obj->u.obj.items->kind != kind)
        return VM_ERR(vm, PTC_EFORMAT, "%s on an object that already holds %s",
                      ptc__pickle_opname(op), kind == PTC_VALUE_DICT ? "list items" : "dict items");
    *out = obj->u.obj.items;
    return 0;
}

static int op_setitems(ptc__vm *vm, size_t start, uint8_t op, ptc_error *err)
{
    if (start == 0)
        return VM_ERR(vm, PTC_EFORMAT, "%s with no dict below the items", ptc__pickle_opname(op));
    ptc_value *d = vm->stack[start - 1];
    size_t n = vm->nstack - start;
    int rc;
    if (d->kind == PTC_VALUE_OBJECT && (d->flags & PTC__V_SYMBOLIC) &&
        (rc = symbolic_items(vm, d, PTC_VALUE_DICT, op, &d, err)) < 0)
        return rc;
    if (d->kind == PTC_VALUE_LIST || (d->kind == PTC_VALUE_BYTES && (d->flags & PTC__V_BYTEARRAY)))
        return seq_setitems(vm, d, start, op, err);
    if (d->kind != PTC_VALUE_DICT) {
        /* Item assignment into a tensor is how torch 2.6 is made to write outside a storage
         * (CVE-2026-24747): refused even where torch 2.6 would carry it out. */
        bool torch_ok = n % 2 == 0;
        for (size_t i = start; torch_ok && i < vm->nstack; i += 2)
            torch_ok = torch_sets_item(d, vm->stack[i], vm->stack[i + 1]);
        return VM_ERR_IF(vm, torch_ok, PTC_EUNSAFE, "%s on a %s: only dicts take items",
                         ptc__pickle_opname(op), ptc_value_kind_name((ptc_value_kind)d->kind));
    }
    if (n % 2)
        return VM_ERR(vm, PTC_EFORMAT, "%s with an odd number (%zu) of keys and values",
                      ptc__pickle_opname(op), n);
    for (size_t i = start; i < vm->nstack; i += 2) {
        rc = ptc__dict_set(vm->arena, d, vm->stack[i], vm->stack[i + 1], err, vm->p->member,
                           ptc__vm_offset(vm));
        if (rc < 0)
            return rc;
    }
    vm->nstack = start;
    return 0;
}

static int op_appends(ptc__vm *vm, size_t start, uint8_t op, ptc_error *err)
{
    if (start == 0)
        return VM_ERR(vm, PTC_EFORMAT, "%s with no list below the items", ptc__pickle_opname(op));
    ptc_value *l = vm->stack[start - 1];
    int rc;
    if (l->kind == PTC_VALUE_OBJECT && (l->flags & PTC__V_SYMBOLIC) &&
        (rc = symbolic_items(vm, l, PTC_VALUE_LIST, op, &l, err)) < 0)
        return rc;
    if (l->kind != PTC_VALUE_LIST)
        return VM_ERR(vm, PTC_EFORMAT, "%s on a %s: only lists can be appended to",
                      ptc__pickle_opname(op), ptc_value_kind_name((ptc_value_kind)l->kind));
    /* Room for all the items at once: growing by doubling would leave the abandoned arrays in
     * the arena (twice the list's final size for a long APPENDS). */
    rc = ptc__seq_reserve(vm->arena, l, vm->nstack - start);
    for (size_t i = start; i < vm->nstack && rc == 0; i++)
        rc = ptc__seq_push(vm->arena, l, vm->stack[i]);
    if (rc == PTC_ELIMIT)
        return VM_STRICTER(vm, PTC_ELIMIT, "a list would hold more than the limit of %zu items",
                           (size_t)PTC__VALUE_MAX_ITEMS);
    if (rc < 0)
        return VM_ERR(vm, PTC_ENOMEM, "out of memory growing a list");
    vm->nstack = start;
    return 0;
}

/* Whether Python's obj.__dict__.update(v) takes v: a dict, or a sequence of pairs. */
static bool dict_update_takes(const ptc_value *v)
{
    if (v->kind == PTC_VALUE_DICT)
        return true;
    if (v->kind != PTC_VALUE_LIST && v->kind != PTC_VALUE_TUPLE)
        return false;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const ptc_value *p = v->u.seq.items[i];
        if ((p->kind != PTC_VALUE_LIST && p->kind != PTC_VALUE_TUPLE) || p->u.seq.n != 2 ||
            !ptc__value_hashable(p->u.seq.items[0]))
            return false;
    }
    return true;
}

/* Whether torch 2.6 applies this BUILD state: an OrderedDict's goes to __dict__.update(); a
 * Counter's as pickle's load_build does, a false state skipped and a (state, slots) pair split. */
static bool torch_builds(const ptc_value *target, const ptc_value *state)
{
    if (target->flags & PTC__V_ORDERED)
        return dict_update_takes(state);
    if (!ptc__value_truthy(state))
        return true;
    if (state->kind == PTC_VALUE_TUPLE && state->u.seq.n == 2) {
        const ptc_value *d = state->u.seq.items[0], *slots = state->u.seq.items[1];
        return (!ptc__value_truthy(d) || dict_update_takes(d)) &&
               (!ptc__value_truthy(slots) || slots->kind == PTC_VALUE_DICT);
    }
    return dict_update_takes(state);
}

/* REDUCE and NEWOBJ unpack a list of arguments as torch does (func(*args)): the hooks get a tuple
 * of the same items, taken as they are now. */
static int list_args(ptc__vm *vm, ptc_value **args, ptc_error *err)
{
    int rc = 0;
    ptc_value *t = new_value(vm, PTC_VALUE_TUPLE, err, &rc);
    if (!t)
        return rc;
    size_t n = (*args)->u.seq.n;
    if (n) {
        t->u.seq.items = ptc__arena_alloc(vm->arena, n * sizeof *t->u.seq.items);
        if (!t->u.seq.items)
            return VM_ERR(vm, PTC_ENOMEM, "out of memory for a tuple of %zu items", n);
        memcpy(t->u.seq.items, (*args)->u.seq.items, n * sizeof *t->u.seq.items);
        t->u.seq.n = t->u.seq.cap = n;
    }
    *args = t;
    return 0;
}

/* Sets one attribute of target (an OrderedDict or Counter) in its attribute dict, which is
 * created on the first one. */
static int set_attr(ptc__vm *vm, ptc_value *target, ptc_value *name, ptc_value *val, ptc_error *err)
{
    int rc = 0;
    /* A dunder name (__class__, __dict__, ...) would reach into the object's Python internals:
     * type confusion in a loader that applies it. */
    if (name->kind == PTC_VALUE_STR && name->u.s.n >= 2 && name->u.s.p[0] == '_' &&
        name->u.s.p[1] == '_') {
        char esc[64];
        return VM_STRICTER(vm, PTC_EFORMAT, "attribute \"%s\" would set a Python internal",
                           ptc__escape(esc, sizeof esc, name->u.s.p, name->u.s.n, true));
    }
    if (!target->u.dict.attrs && !(target->u.dict.attrs = new_value(vm, PTC_VALUE_DICT, err, &rc)))
        return rc;
    return ptc__dict_set(vm->arena, target->u.dict.attrs, name, val, err, vm->p->member,
                         ptc__vm_offset(vm));
}

/* __dict__.update(v): the pairs of a dict, or of a list or tuple of 2-item lists or tuples. Any
 * hashable name is taken, as Python's __dict__ takes it. */
static int update_attrs(ptc__vm *vm, ptc_value *target, const ptc_value *v, ptc_error *err)
{
    bool dict = v->kind == PTC_VALUE_DICT;
    size_t n = dict ? v->u.dict.n : v->u.seq.n;
    for (size_t i = 0; i < n; i++) {
        ptc_value *const *kv = dict ? NULL : v->u.seq.items[i]->u.seq.items;
        int rc = set_attr(vm, target, dict ? v->u.dict.keys[i] : kv[0],
                          dict ? v->u.dict.vals[i] : kv[1], err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* BUILD on an OrderedDict or a Counter, as torch 2.6 applies it: an OrderedDict's state goes to
 * __dict__.update(); a Counter's as pickle's load_build does, a false state skipped and a
 * (state, slots) pair split, the slots set one by one. */
static int build_attrs(ptc__vm *vm, ptc_value *target, ptc_value *state, ptc_error *err)
{
    if (!torch_builds(target, state))
        return VM_ERR(vm, PTC_EFORMAT, "BUILD state of an OrderedDict must be a dict, not %s",
                      ptc_value_kind_name((ptc_value_kind)state->kind));
    if (target->flags & PTC__V_ORDERED)
        return update_attrs(vm, target, state, err);
    if (!ptc__value_truthy(state))
        return 0;
    if (state->kind != PTC_VALUE_TUPLE || state->u.seq.n != 2)
        return update_attrs(vm, target, state, err);
    const ptc_value *d = state->u.seq.items[0], *slots = state->u.seq.items[1];
    int rc = ptc__value_truthy(d) ? update_attrs(vm, target, d, err) : 0;
    for (size_t i = 0; rc == 0 && ptc__value_truthy(slots) && i < slots->u.dict.n; i++) {
        if (slots->u.dict.keys[i]->kind != PTC_VALUE_STR) /* setattr takes str names only */
            return VM_ERR(vm, PTC_EFORMAT, "BUILD slot names must be str");
        rc = set_attr(vm, target, slots->u.dict.keys[i], slots->u.dict.vals[i], err);
    }
    return rc;
}

static int op_build(ptc__vm *vm, ptc_error *err)
{
    ptc_value *state = vm->stack[--vm->nstack];
    ptc_value *target = vm->stack[vm->nstack - 1];
    if (target->kind == PTC_VALUE_DICT) {
        /* OrderedDict / Counter state is attribute assignment (this is how a state dict's
         * _metadata arrives); a plain dict has no attributes in Python. */
        if (!(target->flags & (PTC__V_ORDERED | PTC__V_COUNTER)))
            return VM_ERR(vm, PTC_EFORMAT, "BUILD on a plain dict");
        if (state->kind == PTC_VALUE_DICT && !target->u.dict.attrs) {
            target->u.dict.attrs = state;
            return 0;
        }
        return build_attrs(vm, target, state, err);
    }
    if (!vm->p->hooks->build)
        return VM_ERR(vm, PTC_EFORMAT, "BUILD on a %s",
                      ptc_value_kind_name((ptc_value_kind)target->kind));
    return vm->p->hooks->build(vm->p->hooks->ud, vm, target, state, err);
}

/* Whether torch 2.6 gets past op as the first opcode of a pickle: any opcode of its subset that
 * pops nothing. */
static bool torch_starts_with(uint8_t op)
{
    switch (op) {
    case PTC__OP_MARK:
    case PTC__OP_NONE:
    case PTC__OP_NEWTRUE:
    case PTC__OP_NEWFALSE:
    case PTC__OP_EMPTY_TUPLE:
    case PTC__OP_EMPTY_LIST:
    case PTC__OP_EMPTY_DICT:
    case PTC__OP_EMPTY_SET:
    case PTC__OP_BININT:
    case PTC__OP_BININT1:
    case PTC__OP_BININT2:
    case PTC__OP_BINFLOAT:
    case PTC__OP_BINUNICODE:
    case PTC__OP_SHORT_BINSTRING:
    case PTC__OP_LONG1:
    case PTC__OP_GLOBAL:
        return true;
    default:
        return false;
    }
}

static int run(ptc__vm *vm, ptc_value **root, size_t *consumed, ptc_error *err)
{
    const ptc_limits *lim = vm->p->limits;
    int rc = 0;
    while (vm->pos < vm->len) {
        vm->op_pos = vm->pos;
        uint8_t op = vm->data[vm->pos++];
        vm->nops++;
        const uint8_t *p;
        ptc_value *v;
        size_t start;
        /* PROTO is read anywhere, as torch reads it: it only announces a protocol and changes
         * nothing that follows. A pickle may also start without it, with any opcode that pops
         * nothing. */
        if (vm->nops == 1 && op != PTC__OP_PROTO && !torch_starts_with(op))
            return VM_ERR(vm, PTC_EFORMAT,
                          "the pickle does not start with PROTO 2 (first opcode %s)",
                          ptc__pickle_opname(op) ? ptc__pickle_opname(op) : "unknown");
        switch (op) {
        case PTC__OP_PROTO:
            if ((rc = read_bytes(vm, 1, &p, err)) < 0)
                return rc;
            /* Pickles of protocol 4 and 5 go on with FRAME, which torch refuses: named here,
             * since that is the reason. Any other protocol number is only a number. */
            if (p[0] != 2 && vm->pos < vm->len && vm->data[vm->pos] == PTC__OP_FRAME)
                return VM_ERR(vm, PTC_EFORMAT, "pickle protocol %u; checkpoints use protocol 2",
                              p[0]);
            break;
        case PTC__OP_STOP:
            /* The result is the top of the innermost stack, as for torch and Python's pickle:
             * what lies below it was built and is dropped. */
            if (vm->nstack == floor_of(vm))
                return VM_ERR(vm, PTC_EFORMAT, "STOP with nothing above the %s",
                              vm->nmarks ? "innermost MARK" : "bottom of the stack");
            *root = vm->stack[vm->nstack - 1];
            *consumed = vm->pos;
            if (!vm->p->allow_trailing && vm->pos != vm->len)
                return ptc__err_stricter(err, PTC_EFORMAT, vm->p->member,
                                         (int64_t)(vm->p->base_offset + vm->pos),
                                         "%zu bytes after STOP", vm->len - vm->pos);
            return 0;
        case PTC__OP_MARK:
            if (vm->nmarks >= lim->max_depth)
                return VM_STRICTER(vm, PTC_ELIMIT, "MARKs nest deeper than the limit %u",
                                   lim->max_depth);
            if ((rc = grow_array(vm, (void **)&vm->marks, &vm->capmarks, vm->nmarks + 1,
                                 sizeof *vm->marks, lim->max_depth, "MARK stack", err)) < 0)
                return rc;
            vm->marks[vm->nmarks++] = vm->nstack;
            break;
        case PTC__OP_NONE:
        case PTC__OP_NEWFALSE:
        case PTC__OP_NEWTRUE:
            if (!(v = singleton(vm, op, err, &rc)) || (rc = push(vm, v, err)) < 0)
                return rc;
            break;
        case PTC__OP_BININT:
        case PTC__OP_BININT1:
        case PTC__OP_BININT2: {
            size_t n = op == PTC__OP_BININT ? 4 : op == PTC__OP_BININT1 ? 1 : 2;
            if ((rc = read_bytes(vm, n, &p, err)) < 0)
                return rc;
            int64_t x = op == PTC__OP_BININT    ? (int64_t)(int32_t)ptc__le32(p)
                        : op == PTC__OP_BININT1 ? p[0]
                                                : ptc__le16(p);
            if (++vm->nobjects > lim->max_objects)
                return VM_STRICTER(vm, PTC_ELIMIT, "too many objects");
            bool small = x >= 0 && x < 256;
            if (small && vm->small_ints[x])
                v = vm->small_ints[x];
            else if (!(v = ptc__value_int(vm->arena, x)))
                return VM_ERR(vm, PTC_ENOMEM, "out of memory");
            else if (small)
                vm->small_ints[x] = v;
            if ((rc = push(vm, v, err)) < 0)
                return rc;
            break;
        }
        case PTC__OP_LONG1:
            if ((rc = op_long1(vm, err)) < 0)
                return rc;
            break;
        case PTC__OP_BINFLOAT: {
            if ((rc = read_bytes(vm, 8, &p, err)) < 0)
                return rc;
            uint64_t bits = 0;
            for (int k = 0; k < 8; k++)
                bits = (bits << 8) | p[k];
            if (!(v = new_value(vm, PTC_VALUE_FLOAT, err, &rc)))
                return rc;
            memcpy(&v->u.f, &bits, sizeof bits);
            if ((rc = push(vm, v, err)) < 0)
                return rc;
            break;
        }
        case PTC__OP_BINUNICODE: {
            if ((rc = read_bytes(vm, 4, &p, err)) < 0)
                return rc;
            uint32_t n = ptc__le32(p);
            if ((rc = read_bytes(vm, n, &p, err)) < 0)
                return rc;
            if ((rc = make_string(vm, PTC_VALUE_STR, p, n, false, err)) < 0)
                return rc;
            break;
        }
        case PTC__OP_SHORT_BINSTRING: {
            if ((rc = read_bytes(vm, 1, &p, err)) < 0)
                return rc;
            size_t n = p[0];
            if ((rc = read_bytes(vm, n, &p, err)) < 0)
                return rc;
            if ((rc = make_string(vm, PTC_VALUE_STR, p, n, true, err)) < 0)
                return rc;
            break;
        }
        case PTC__OP_EMPTY_TUPLE:
            if (vm->empty_tuple) {
                if (++vm->nobjects > lim->max_objects)
                    return VM_STRICTER(vm, PTC_ELIMIT,
                                       "the pickle builds more than the limit of %llu objects",
                                       (unsigned long long)lim->max_objects);
                if ((rc = push(vm, vm->empty_tuple, err)) < 0)
                    return rc;
                break;
            }
            if ((rc = tuple_from(vm, vm->nstack, err)) < 0)
                return rc;
            vm->empty_tuple = vm->stack[vm->nstack - 1];
            break;
        case PTC__OP_TUPLE1:
        case PTC__OP_TUPLE2:
        case PTC__OP_TUPLE3: {
            size_t n = (size_t)(op - PTC__OP_TUPLE1 + 1);
            if ((rc = need(vm, n, op, err)) < 0)
                return rc;
            if ((rc = tuple_from(vm, vm->nstack - n, err)) < 0)
                return rc;
            break;
        }
        case PTC__OP_TUPLE:
            if ((rc = pop_mark(vm, op, &start, err)) < 0 || (rc = tuple_from(vm, start, err)) < 0)
                return rc;
            break;
        case PTC__OP_EMPTY_LIST:
        case PTC__OP_EMPTY_DICT:
        case PTC__OP_EMPTY_SET:
            v = new_value(vm,
                          op == PTC__OP_EMPTY_LIST   ? PTC_VALUE_LIST
                          : op == PTC__OP_EMPTY_DICT ? PTC_VALUE_DICT
                                                     : PTC_VALUE_SET,
                          err, &rc);
            if (!v || (rc = push(vm, v, err)) < 0)
                return rc;
            break;
        case PTC__OP_APPEND:
            if ((rc = need(vm, 2, op, err)) < 0 ||
                (rc = op_appends(vm, vm->nstack - 1, op, err)) < 0)
                return rc;
            break;
        case PTC__OP_APPENDS:
            if ((rc = pop_mark(vm, op, &start, err)) < 0)
                return rc;
            if (start == 0 || start <= floor_of(vm))
                return VM_ERR(vm, PTC_EFORMAT, "APPENDS with no list below the MARK");
            if ((rc = op_appends(vm, start, op, err)) < 0)
                return rc;
            break;
        case PTC__OP_SETITEM:
            if ((rc = need(vm, 3, op, err)) < 0 ||
                (rc = op_setitems(vm, vm->nstack - 2, op, err)) < 0)
                return rc;
            break;
        case PTC__OP_SETITEMS:
            if ((rc = pop_mark(vm, op, &start, err)) < 0)
                return rc;
            if (start == 0 || start <= floor_of(vm))
                return VM_ERR(vm, PTC_EFORMAT, "SETITEMS with no dict below the MARK");
            if ((rc = op_setitems(vm, start, op, err)) < 0)
                return rc;
            break;
        case PTC__OP_GLOBAL:
            if ((rc = op_global(vm, err)) < 0)
                return rc;
            break;
        case PTC__OP_REDUCE:
        case PTC__OP_NEWOBJ: {
            if ((rc = need(vm, 2, op, err)) < 0)
                return rc;
            ptc_value *args = vm->stack[vm->nstack - 1];
            ptc_value *fn = vm->stack[vm->nstack - 2];
            /* torch unpacks a list of arguments as well (for an allowed callable). */
            if (fn->kind != PTC_VALUE_GLOBAL &&
                !(vm->p->call_objects && fn->kind == PTC_VALUE_OBJECT))
                return VM_ERR(vm, PTC_EFORMAT, "%s on a %s, which is not callable",
                              ptc__pickle_opname(op),
                              ptc_value_kind_name((ptc_value_kind)fn->kind));
            if (args->kind == PTC_VALUE_LIST && (rc = list_args(vm, &args, err)) < 0)
                return rc;
            if (args->kind != PTC_VALUE_TUPLE)
                return VM_ERR(vm, PTC_EFORMAT, "%s arguments must be a tuple, not %s",
                              ptc__pickle_opname(op),
                              ptc_value_kind_name((ptc_value_kind)args->kind));
            v = NULL;
            rc = op == PTC__OP_REDUCE
                     ? vm->p->hooks->reduce(vm->p->hooks->ud, vm, fn, args, &v, err)
                     : vm->p->hooks->newobj(vm->p->hooks->ud, vm, fn, args, &v, err);
            if (rc < 0)
                return rc;
            if (++vm->nobjects > lim->max_objects)
                return VM_STRICTER(vm, PTC_ELIMIT, "too many objects");
            vm->nstack -= 2;
            if ((rc = push(vm, v, err)) < 0)
                return rc;
            break;
        }
        case PTC__OP_BUILD:
            if ((rc = need(vm, 2, op, err)) < 0 || (rc = op_build(vm, err)) < 0)
                return rc;
            break;
        case PTC__OP_BINPERSID: {
            if ((rc = need(vm, 1, op, err)) < 0)
                return rc;
            ptc_value *pid = vm->stack[vm->nstack - 1];
            v = NULL;
            if (!vm->p->hooks->persistent_load)
                return VM_ERR(vm, PTC_EFORMAT, "BINPERSID is not allowed here");
            if ((rc = vm->p->hooks->persistent_load(vm->p->hooks->ud, vm, pid, &v, err)) < 0)
                return rc;
            vm->stack[vm->nstack - 1] = v;
            break;
        }
        case PTC__OP_BINPUT:
        case PTC__OP_LONG_BINPUT:
        case PTC__OP_BINGET:
        case PTC__OP_LONG_BINGET: {
            bool lng = op == PTC__OP_LONG_BINPUT || op == PTC__OP_LONG_BINGET;
            if ((rc = read_bytes(vm, lng ? 4 : 1, &p, err)) < 0)
                return rc;
            uint32_t idx = lng ? ptc__le32(p) : p[0];
            rc = (op == PTC__OP_BINPUT || op == PTC__OP_LONG_BINPUT) ? memo_put(vm, idx, err)
                                                                     : memo_get(vm, idx, err);
            if (rc < 0)
                return rc;
            break;
        }
        case PTC__OP_STACK_GLOBAL:
        case PTC__OP_INST:
        case PTC__OP_OBJ:
        case PTC__OP_EXT1:
        case PTC__OP_EXT2:
        case PTC__OP_EXT4:
        case PTC__OP_NEWOBJ_EX:
            return VM_ERR(
                vm, PTC_EUNSAFE,
                "opcode %s can reach a callable and is not allowed in a weights-only pickle",
                ptc__pickle_opname(op));
        default:
            if (ptc__pickle_opname(op))
                return VM_ERR(vm, PTC_EFORMAT, "opcode %s is not allowed in a weights-only pickle",
                              ptc__pickle_opname(op));
            return VM_ERR(vm, PTC_EFORMAT, "invalid opcode 0x%02x", op);
        }
    }
    return ptc__err(err, PTC_EFORMAT, vm->p->member, (int64_t)(vm->p->base_offset + vm->len),
                    "truncated: the pickle ends without STOP");
}

int ptc__pickle_run(const uint8_t *data, size_t len, const ptc__pickle_params *p, ptc_value **root,
                    size_t *consumed, ptc_error *err)
{
    if (len > p->limits->max_pickle_bytes)
        return ptc__err_stricter(err, PTC_ELIMIT, p->member, (int64_t)p->base_offset,
                                 "pickle of %zu bytes exceeds the limit of %llu", len,
                                 (unsigned long long)p->limits->max_pickle_bytes);
    ptc__vm vm = {.data = data, .len = len, .p = p, .arena = p->arena};
    size_t used = 0;
    ptc_value *result = NULL;
    int rc = run(&vm, &result, &used, err);
    if (p->nops)
        *p->nops += vm.nops;
    if (rc == 0)
        rc = ptc__value_check_tree(result, p->limits->max_depth, p->limits->max_objects,
                                   p->cut_cycles ? p->arena : NULL, p->member, err);
    if (rc == 0) {
        *root = result;
        if (consumed)
            *consumed = used;
    }
    ptc__budget_give(p->budget, (uint64_t)vm.capstack * sizeof *vm.stack +
                                    (uint64_t)vm.capmarks * sizeof *vm.marks +
                                    (uint64_t)vm.capmemo * sizeof *vm.memo);
    ptc__free(vm.stack);
    ptc__free(vm.marks);
    ptc__free(vm.memo);
    return rc;
}
