/*
 * pickle.h - the restricted pickle machine, the value tree it builds, and the static scanner.
 *
 * The machine executes the protocol-2 subset that torch 2.6's weights-only unpickler accepts
 * (docs/internals/pickle.md): 34 opcodes, nothing else. It never imports or calls
 * anything: GLOBAL, REDUCE, NEWOBJ, BUILD and BINPERSID are handed to hooks (lib/pth supplies the
 * torch semantics), and the machine itself only builds containers and scalars. This layer knows
 * nothing of zip files or tensors.
 *
 * Limits (ptc_limits): the stack and the MARK stack are bounded by max_depth for MARKs and by the
 * input length for the stack (each push consumes at least one input byte); memo indices must be
 * below the number of opcodes executed so far (torch.save numbers them sequentially), and the memo
 * may hold at most max_memo entries; at most max_objects values; container nesting above max_depth
 * and cycles are rejected when the tree is finished (a cycle cannot exist in weights; salvage
 * cuts cycles instead, see ptc__value_check_tree).
 *
 * Values live in an arena owned by the caller and are freed with it.
 */
#ifndef PTC_PICKLE_PICKLE_H
#define PTC_PICKLE_PICKLE_H

#include "base/base.h"
#include "pickle/opcodes.h"

/* ---- values ---------------------------------------------------------------------------------- */
enum {
    PTC__V_ORDERED = 1u << 0,   /* dict: collections.OrderedDict */
    PTC__V_COUNTER = 1u << 1,   /* dict: collections.Counter */
    PTC__V_BYTEARRAY = 1u << 2, /* bytes: builtins.bytearray */
    PTC__V_PARAMETER = 1u << 3, /* tensor wrapped in nn.Parameter */
    PTC__V_OWN_BYTES = 1u << 4, /* bytearray: its bytes are its own, not shared with a bytes */
    /* global or object read symbolically (PTC_OPEN_SALVAGE): it holds names and arguments and
     * means nothing else. A symbolic object is hashable by identity, as Python hashes an
     * instance without __hash__. */
    PTC__V_SYMBOLIC = 1u << 5,
    PTC__V_CALLED = 1u << 6, /* object: the callable of another object (never rebuilt in place) */
    /* global (with PTC__V_SYMBOLIC): the placeholder that salvage puts where an edge closed a
     * cycle (ptc__value_check_tree with a cut arena). A leaf, hashable by identity; u.g.name is
     * what it stood for (the enclosing object's class, or a container's kind). */
    PTC__V_BACKREF = 1u << 7
};

typedef struct ptc__seq {
    ptc_value **items;
    size_t n, cap;
} ptc__seq;

/* A dict's index, built past 8 pairs: kept out of the dict itself so that every value is 64
 * bytes, not 80 (a checkpoint of 20,000 tensors makes some 300,000 values). */
typedef struct ptc__dict_ix {
    uint64_t seed;   /* the hash seed, random per dict: crafted keys cannot collide */
    size_t cap;      /* slots, a power of two */
    uint32_t slot[]; /* open addressing: key positions + 1 (0 = empty) */
} ptc__dict_ix;

typedef struct ptc__dict {
    ptc_value **keys, **vals;
    size_t n, cap;
    ptc__dict_ix *ix; /* NULL up to 8 pairs */
    ptc_value *attrs; /* dict set by BUILD (OrderedDict's {'_metadata': ...}) or NULL */
} ptc__dict;

/* A value kind of the hooks' own that never leaves the library (a storage between BINPERSID and
 * the rebuild call that consumes it). */
#define PTC__VALUE_OPAQUE 200

struct ptc_value {
    uint8_t kind;      /* ptc_value_kind or PTC__VALUE_OPAQUE */
    uint8_t flags;     /* PTC__V_* */
    uint8_t mark;      /* scratch for tree checks (cycle / depth) */
    uint64_t expanded; /* nodes of the subtree with shared parts counted each time (tree check);
                        * while the check has the node on its path, its frame's index there */
    union {
        void *opaque;
        bool b;
        struct {
            int64_t v;
            const uint8_t *bytes; /* minimal two's-complement little-endian bytes (LONG1's form) */
            uint32_t nbytes;
            uint8_t small[8]; /* holds bytes for values that fit in 64 bits */
            bool fits;        /* v holds the value exactly */
        } i;
        double f;
        struct {
            double re, im;
        } c;
        struct {
            const char *p; /* NUL-terminated copy */
            size_t n;
        } s;          /* str and bytes */
        ptc__seq seq; /* tuple, list, set, torch.Size */
        ptc__dict dict;
        struct {
            const char *module, *name, *full; /* full = "module.name" */
            int id;                           /* the hook's own tag for the global */
        } g;
        struct {
            const ptc_value *cls; /* a global; read symbolically, also an object */
            ptc_value *args;
            ptc_value *state;
            /* Read symbolically: what SETITEM(S) (a dict) or APPEND(S) (a list) put into the
             * object (a dict or list subclass: defaultdict, a custom list), or NULL. */
            ptc_value *items;
            /* Read symbolically: why salvage left it symbolic where it knows (a numpy array it
             * could not rebuild), or NULL; static or in the arena. */
            const char *note;
        } obj;
        ptc_tensor *t;
        ptc_dtype dt;
        struct {
            const char *type;
            int64_t index;
        } dev;
    } u;
};

/* The most items one tuple, list, set, torch.Size or dict may hold (PTC_ELIMIT beyond): a dict's
 * index stores positions as uint32 and keeps twice as many slots as items. A pickle within the
 * default limits cannot reach it (each item costs at least one opcode byte); a document built
 * through ptc_doc can. */
#define PTC__VALUE_MAX_ITEMS ((size_t)1 << 30)

ptc_value *ptc__value_new(ptc__arena *a, ptc_value_kind kind);
ptc_value *ptc__value_int(ptc__arena *a, int64_t v);
/* Makes the int value v hold x (a value the caller made and shares with no one). */
void ptc__value_int_set(ptc_value *v, int64_t x);
ptc_value *ptc__value_str(ptc__arena *a, ptc_value_kind kind, const char *s, size_t n);
/* Makes room for more items in a tuple, list, set or torch.Size (one arena allocation). Both
 * return 0, PTC_ENOMEM, or PTC_ELIMIT past PTC__VALUE_MAX_ITEMS items (they fill no ptc_error). */
int ptc__seq_reserve(ptc__arena *a, ptc_value *seq, size_t more);
int ptc__seq_push(ptc__arena *a, ptc_value *seq, ptc_value *item);
/* dict[key] = val with Python semantics: an equal key keeps its position and takes the new value.
 * Keys must be hashable (None, bool, int, float, str, bytes, tuple of those, dtype, global,
 * tensor, device, symbolic object);
 * anything else is PTC_EFORMAT. */
int ptc__dict_set(ptc__arena *a, ptc_value *dict, ptc_value *key, ptc_value *val, ptc_error *err,
                  const char *member, int64_t offset);
/* Python equality of two hashable values (1 equal, 0 not). */
int ptc__value_equal(const ptc_value *a, const ptc_value *b);
/* The position of the key equal to key in dict, or SIZE_MAX when there is none. */
size_t ptc__dict_index(const ptc_value *dict, const ptc_value *key);
/* Whether v is a key ptc__dict_set takes: Python could hash it. */
bool ptc__value_hashable(const ptc_value *v);
/* Fills a dict's index again after a key changed its hash (salvage cut an edge inside it); the
 * index keeps its slots, nothing is allocated. A dict of 8 pairs or fewer has none. */
void ptc__dict_reindex(ptc_value *dict);
/* Python's truth value of v: false for None, False, zeros and empty strings and containers. */
bool ptc__value_truthy(const ptc_value *v);

/* ---- the machine ------------------------------------------------------------------------------ */
typedef struct ptc__vm ptc__vm;

typedef struct ptc__vm_hooks {
    void *ud;
    /* GLOBAL module name (after the Python-2 name mapping): a value to push, or an error
     * (PTC_EUNSAFE for anything outside the policy). */
    int (*global)(void *ud, ptc__vm *vm, const char *module, const char *name, ptc_value **out,
                  ptc_error *err);
    /* REDUCE callable(*args): args is a tuple. */
    int (*reduce)(void *ud, ptc__vm *vm, ptc_value *callable, ptc_value *args, ptc_value **out,
                  ptc_error *err);
    /* NEWOBJ cls.__new__(cls, *args). */
    int (*newobj)(void *ud, ptc__vm *vm, ptc_value *cls, ptc_value *args, ptc_value **out,
                  ptc_error *err);
    /* BUILD on anything but a dict (the machine itself attaches dict state to dicts). */
    int (*build)(void *ud, ptc__vm *vm, ptc_value *target, ptc_value *state, ptc_error *err);
    /* BINPERSID: the persistent id (any value) to the object it names. */
    int (*persistent_load)(void *ud, ptc__vm *vm, ptc_value *pid, ptc_value **out, ptc_error *err);
} ptc__vm_hooks;

/* Runs one pickle starting at data[0]. The stream must end with STOP; with allow_trailing false,
 * STOP must be the last byte (bytes after STOP are PTC_EFORMAT); with it true, *consumed receives
 * the length up to and including STOP (legacy streams concatenate pickles). member labels errors;
 * offsets in errors are relative to data plus base_offset. */
typedef struct ptc__pickle_params {
    const char *member;
    uint64_t base_offset;
    const ptc_limits *limits;
    ptc__arena *arena;
    ptc__budget *budget; /* charged for the stack and memo; may be NULL */
    const ptc__vm_hooks *hooks;
    bool allow_trailing;
    uint64_t *nops; /* when not NULL, the opcodes executed are added to it */
    /* REDUCE and NEWOBJ hand a PTC_VALUE_OBJECT callable to the hooks as well (symbolic reading:
     * getattr(cls, 'x')(...) calls an object); without it only a global is callable. */
    bool call_objects;
    /* Salvage: a cycle in the finished tree is cut (ptc__value_check_tree with the arena) instead
     * of refused. */
    bool cut_cycles;
} ptc__pickle_params;

int ptc__pickle_run(const uint8_t *data, size_t len, const ptc__pickle_params *p, ptc_value **root,
                    size_t *consumed, ptc_error *err);

/* For hooks: where the machine is, to label errors, and the arena to build values in. */
const char *ptc__vm_member(const ptc__vm *vm);
int64_t ptc__vm_offset(const ptc__vm *vm); /* offset of the opcode being executed */
ptc__arena *ptc__vm_arena(ptc__vm *vm);
const ptc_limits *ptc__vm_limits(const ptc__vm *vm);
/* Counts n values made outside the machine (a hook's copy) against max_objects: 0, or PTC_ELIMIT
 * naming the limit. */
int ptc__vm_charge(ptc__vm *vm, uint64_t n, ptc_error *err);

/* Checks a finished tree: no cycles (PTC_EFORMAT), nesting at most max_depth, and the tree with
 * every shared subtree counted each time it is reached at most max_expanded nodes (PTC_ELIMIT),
 * so that no walk of an accepted tree can blow up ("billion laughs").
 *
 * With cut not NULL (salvage), a cycle is not refused but cut: the depth-first walk from the root
 * in the tree's order (items; dict keys and values in turn, then the attributes; an object's
 * args, state, items, callable) replaces each edge that leads to a node on its own path (a back
 * edge) by a placeholder allocated in cut: a symbolic global (PTC__V_BACKREF) named "<back-
 * reference to an enclosing CLASS object>" or "<back-reference to an enclosing KIND>", one per
 * node pointed back to, with no children. The walk then goes on exactly as the walk of the
 * original graph would (it never enters a node on its path), so the edges cut are that graph's
 * back edges in that order: what remains is acyclic and every node stays reachable, and depth
 * and expansion are checked on what remains. A dict whose keys changed hash is re-indexed.
 * PTC_ENOMEM when a placeholder cannot be made. */
int ptc__value_check_tree(ptc_value *root, uint32_t max_depth, uint64_t max_expanded,
                          ptc__arena *cut, const char *member, ptc_error *err);

/* ---- static scanner --------------------------------------------------------------------------
 * Decodes every opcode of pickle protocols 0 to 5 without executing anything and reports each
 * reference to a global: GLOBAL and INST (module and name from the stream), STACK_GLOBAL (module
 * and name when the two preceding pushes were string constants, else dynamic), and EXT1/2/4
 * (extension registry codes, always dynamic). Also reports opcodes outside the weights-only subset.
 * Stops at STOP (or at the end of the input when stop_at_first is false, to see concatenated
 * pickles); a truncated stream or an unknown opcode ends the scan with PTC_EFORMAT after every item
 * seen before it was reported. */
typedef enum ptc__scan_kind {
    PTC__SCAN_GLOBAL,  /* module/name known */
    PTC__SCAN_DYNAMIC, /* a global whose name is computed at run time */
    PTC__SCAN_OPCODE,  /* an opcode outside the weights-only subset */
    PTC__SCAN_PROTO    /* a PROTO opcode (value in proto) */
} ptc__scan_kind;

typedef struct ptc__scan_item {
    ptc__scan_kind kind;
    uint8_t opcode;
    int proto;
    uint64_t offset;    /* of the opcode, base_offset included */
    const char *module; /* raw bytes as in the stream, NUL-terminated; NULL when dynamic */
    size_t module_len;  /* bytes in module (a name may hold NUL bytes) */
    const char *name;
    size_t name_len;
    bool truncated; /* module or name was longer than 1023 bytes and is cut there */
} ptc__scan_item;

typedef int (*ptc__scan_fn)(void *ud, const ptc__scan_item *item);

int ptc__pickle_scan(const uint8_t *data, size_t len, const char *member, uint64_t base_offset,
                     bool stop_at_first, ptc__scan_fn fn, void *ud, size_t *consumed,
                     ptc_error *err);
/* The same with two more controls, for sweeps that start a decode at many offsets of a region:
 * line arguments (GLOBAL, INST, the text opcodes) end at a '\n' found in data[0..line_limit) only
 * (pass one past the region's last '\n': a line with no '\n' after it then fails at once instead
 * of searching to the end), and *reach (may be NULL) receives one past the last byte the decode
 * read, the failing opcode and the arguments it read included, whether it succeeded or not. */
int ptc__pickle_scan_ex(const uint8_t *data, size_t len, size_t line_limit, const char *member,
                        uint64_t base_offset, bool stop_at_first, ptc__scan_fn fn, void *ud,
                        size_t *consumed, size_t *reach, ptc_error *err);

/* A name Python's find_class could import or look up: dot-separated identifiers (ASCII letters,
 * digits and '_', not starting with a digit; any non-ASCII UTF-8, which Python may accept in
 * identifiers). Bytes that are not such a name raise before anything is imported. */
bool ptc__python_name(const uint8_t *s, size_t n);

/* A byte range [a, b) of a region. */
typedef struct ptc__span {
    uint64_t a, b;
} ptc__span;

/* The sweep of bytes that are mostly not pickles (tensor data, headers, comments): decodes
 * data[0..len) from every PROTO opcode (0x80 then 2 to 5) that is not an opcode of another decode,
 * PROTOs inside the arguments of other decodes included (a pickle wrapped in BINBYTES, a STRING
 * line, an extra field's payload), and from data[0] when at_start. Each decode stops at its STOP
 * or at the first byte that does not parse. quiet[0..nquiet) (sorted by a) are spans a full scan
 * already decoded from their first byte, pickle after pickle: they are decoded again from there
 * without reporting (their references were reported) so that the PROTOs inside their arguments
 * start decodes and their opcodes do not. Only references by two Python names are reported
 * (GLOBAL, INST, STACK_GLOBAL over two string constants, a protocol-0 STRING unquoted), each once.
 * Linear in len (see scan.c). Returns 0, fn's nonzero result, PTC_ENOMEM, or PTC_ELIMIT when more
 * than PTC__SWEEP_MAX_WALKS decodes are under way at one offset (only built bytes do that). */
#define PTC__SWEEP_MAX_WALKS (1u << 20)
int ptc__pickle_sweep(const uint8_t *data, size_t len, uint64_t base_offset, bool at_start,
                      const ptc__span *quiet, size_t nquiet, const char *member, ptc__scan_fn fn,
                      void *ud, ptc_error *err);

/* torch's Python-2 name mapping (IMPORT_MAPPING / NAME_MAPPING): rewrites *module and *name
 * when they name a Python-2 location ("__builtin__", "set" -> "builtins", "set"). The results
 * point to static strings or to the inputs. */
void ptc__pickle_map_name(const char **module, const char **name);

/* ---- the writer -------------------------------------------------------------------------------
 * Emits protocol-2 opcodes with the choices CPython's pickler makes (so that what torch.save would
 * write can be reproduced byte for byte): BININT1 / BININT2 / BININT / LONG1 by magnitude,
 * big-endian BINFLOAT, BINUNICODE for every str, BINPUT / LONG_BINPUT with sequential memo indices
 * and BINGET / LONG_BINGET for objects already written. The memo is keyed by an address that
 * stands for object identity (the value node, or a static for a constant such as 'storage').
 * Failures are sticky: check ptc__pw_failed once at the end, and ptc__pw_error for the code:
 * PTC_ENOMEM, or PTC_ELIMIT when the pickle would exceed PTC__PW_MAX_BYTES (the default
 * max_pickle_bytes: ptc writes no pickle its own reader refuses by default) or
 * PTC__PW_MAX_MEMO memo entries (LONG_BINPUT's u32 index). The memo's hash holds at most twice
 * as many slots as entries. */
#define PTC__PW_MAX_BYTES ((size_t)1 << 30)
#define PTC__PW_MAX_MEMO  UINT32_MAX
typedef struct ptc__pw {
    ptc__buf out;
    const void **keys; /* open addressing: memo key -> index in vals */
    uint32_t *vals;
    size_t cap, n;
    uint32_t next; /* next memo index */
    int failed;    /* 0, or the first error (PTC_ENOMEM, PTC_ELIMIT) */
} ptc__pw;

void ptc__pw_init(ptc__pw *w);
void ptc__pw_free(ptc__pw *w);
bool ptc__pw_failed(const ptc__pw *w);
int ptc__pw_error(const ptc__pw *w);
void ptc__pw_op(ptc__pw *w, uint8_t op);
/* Writes BINGET for key and returns true when key was memoized; false (writing nothing) else. */
bool ptc__pw_get(ptc__pw *w, const void *key);
/* Memoizes the object just written under key (NULL: an object that is never referenced again). */
void ptc__pw_put(ptc__pw *w, const void *key);
void ptc__pw_int(ptc__pw *w, int64_t v);
void ptc__pw_long(ptc__pw *w, const uint8_t *bytes, size_t n); /* LONG1, two's complement LE */
void ptc__pw_float(ptc__pw *w, double f);
void ptc__pw_str(ptc__pw *w, const char *s, size_t n);
void ptc__pw_global(ptc__pw *w, const char *module, const char *name);

/* The name of a pickle opcode ("BINUNICODE"), or NULL for a byte that is no opcode. */
const char *ptc__pickle_opname(uint8_t op);
/* 1 if op is one of the 34 opcodes of the weights-only subset. */
int ptc__pickle_in_subset(uint8_t op);

#endif /* PTC_PICKLE_PICKLE_H */
