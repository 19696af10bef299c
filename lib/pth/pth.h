/*
 * pth.h - torch semantics on top of the archive and pickle layers: the allowlist policy, the hooks
 * that rebuild tensors, storages bound to records, and the checkpoint handle.
 */
#ifndef PTC_PTH_PTH_H
#define PTC_PTH_PTH_H

#include "archive/archive.h"
#include "pickle/pickle.h"
#include "tensor/tensor.h"

/* ptc__err, or ptc__err_stricter (PTC_ERR_STRICTER) when stricter says that torch 2.6 would
 * accept what is refused; err is the ptc_error * in scope. */
#define PTC__ERR_IF(stricter, ...)                                                                 \
    ((stricter) ? ptc__err_stricter(err, __VA_ARGS__) : ptc__err(err, __VA_ARGS__))

/* What an allowed global is; stored in ptc_value.u.g.id of PTC_VALUE_GLOBAL values. */
typedef enum ptc__gid {
    G_NONE = 0,
    G_ORDERED_DICT,
    G_COUNTER,
    G_PARAMETER,
    G_GET_LAYOUT,
    G_SIZE,
    G_TENSOR,
    G_DEVICE,
    G_CODECS_ENCODE,
    G_BYTEARRAY,
    G_SET,
    G_COMPLEX,
    G_LEGACY_TENSOR_CLASS, /* torch.FloatTensor, torch.cuda.LongTensor, ... */
    G_STORAGE, /* legacy typed storage class: torch.FloatStorage, torch.cuda.HalfStorage */
    G_UNTYPED_STORAGE,
    G_TYPED_STORAGE,
    G_QSCHEME,
    G_REBUILD_PARAMETER,
    G_REBUILD_PARAMETER_WITH_STATE,
    G_REBUILD_QTENSOR,
    G_REBUILD_TENSOR,
    G_REBUILD_TENSOR_V2,
    G_REBUILD_TENSOR_V3,
    G_REBUILD_SPARSE,
    G_REBUILD_META,
    G_REBUILD_NESTED,
    G_REBUILD_WRAPPER,
    G_REBUILD_DEVICE_NUMPY,
    G_REBUILD_DEVICE_CPU,
    G_REBUILD_FROM_TYPE_V2,
    G_DTYPE,   /* torch.float32 ...: becomes a PTC_VALUE_DTYPE, never a GLOBAL */
    G_USER,    /* allowed by ptc_policy_allow_global */
    G_SYMBOLIC /* outside the policy, read symbolically (PTC_OPEN_SALVAGE): a name, never called */
} ptc__gid;

/* Classifies "module"."name" (already mapped from Python 2 names) under a policy: the id, and for
 * G_DTYPE the dtype. Returns 0 when allowed; PTC_EUNSAFE with a message otherwise. */
int ptc__policy_lookup(const ptc_policy *p, const char *module, const char *name, ptc__gid *id,
                       ptc_dtype *dtype, const char *member, int64_t offset, ptc_error *err);
bool ptc__module_blocked(const char *module);
/* Calls fn once for every "module"."name" the default policy allows by itself (its built-in
 * allowlist, after the Python 2 mapping), with strict telling whether the strict policy keeps it,
 * in a fixed order; stops at and returns the first non-zero value fn returns, else 0. For tests
 * that compare the allowlist with torch's (tests/interop/allowlist_dump.c). */
int ptc__policy_each_builtin(int (*fn)(void *ud, const char *module, const char *name, bool strict),
                             void *ud);

/* Scans one pickle for references outside the policy before it runs (fail closed). With salvage
 * (PTC_OPEN_SALVAGE), a GLOBAL by a valid name outside the policy passes (the machine reads it
 * symbolically); what reaches a callable by other means (STACK_GLOBAL, INST, EXT*, OBJ,
 * NEWOBJ_EX) is refused all the same. */
int ptc__pth_prescan(const ptc_policy *p, bool salvage, const uint8_t *data, size_t len,
                     const char *member, uint64_t base_offset, bool whole, size_t *consumed,
                     ptc_error *err);

struct ptc_ckpt {
    ptc_format format;
    ptc__source *src;
    ptc__zip *zip;
    ptc__budget budget;
    ptc__arena *arena;
    ptc_limits limits;
    ptc_policy *default_policy; /* owned when the caller gave none */
    const ptc_policy *policy;
    unsigned flags;
    const char *prefix;
    bool big_endian;
    const ptc_value *root;
    ptc_storage **storages; /* in order of first reference */
    size_t nstorages, capstorages;
    uint32_t *sindex; /* hash of storage keys: index + 1 into storages, 0 = empty */
    size_t sindex_cap;
    size_t nbound;    /* zip: storages bound to their data/<key> record, each to its own */
    bool legacy_mode; /* persistent ids are 6-tuples */
    uint64_t nops;    /* opcodes executed by every pickle read (the work budget's node base) */
    /* Salvage (lib/pth/salvage.c): the symbolic globals met, at most PTC__SALVAGE_MAX_SYMBOLS */
    ptc_symbol *symbols; /* [nsymbols] in the arena, in order of first reference */
    size_t nsymbols, capsymbols;
    ptc_value *symbol_index;  /* dict: raw "module.name" str -> itself, at the symbol's position */
    uint64_t symbols_dropped; /* GLOBAL opcodes naming a global the full table had no room for */
    uint64_t narrays;         /* numpy arrays salvaged: their storages are "numpy.<n>" */
};

/* ---- salvage (lib/pth/salvage.c) ---------------------------------------------------------------
 * The hooks' symbolic side, reached only with PTC_OPEN_SALVAGE. The cap on distinct symbols: a
 * hostile file names as many globals as it has GLOBAL opcodes, and each entry costs memory. */
#define PTC__SALVAGE_MAX_SYMBOLS PTC_SYMBOLS_MAX
/* Records the symbolic global g (a GLOBAL outside the policy, id G_SYMBOLIC) in c's table. */
int ptc__salvage_note_global(ptc_ckpt *c, ptc__vm *vm, const ptc_value *g, ptc_error *err);
/* REDUCE / NEWOBJ of a symbolic global or of an object: a symbolic object (or, for numpy's
 * scalar, a 0-d tensor). */
int ptc__salvage_call(ptc_ckpt *c, ptc__vm *vm, ptc_value *fn, ptc_value *args, ptc_value **out,
                      ptc_error *err);
/* BUILD on a symbolic object: its state; a numpy array becomes a tensor in place. */
int ptc__salvage_build(ptc_ckpt *c, ptc__vm *vm, ptc_value *target, ptc_value *state,
                       ptc_error *err);

/* The unpickling hooks of a checkpoint (ud = the ptc_ckpt). */
extern const ptc__vm_hooks ptc__pth_hooks_template;
int ptc__pth_run_pickle(ptc_ckpt *c, const uint8_t *data, size_t len, const char *member,
                        uint64_t base_offset, bool allow_trailing, ptc_value **root,
                        size_t *consumed, ptc_error *err);
ptc_storage *ptc__ckpt_find_storage(ptc_ckpt *c, const char *key);
int ptc__ckpt_add_storage(ptc_ckpt *c, ptc_storage *s, ptc_error *err);
/* Appends ptc_key_text(key) to b (lib/pth/keytext.c): the walk's path segments. 0 or PTC_ENOMEM. */
int ptc__key_text_append(ptc__buf *b, const ptc_value *key);
/* Zip: loads and the legacy stream loader. */
int ptc__load_zip(ptc_ckpt *c, ptc_error *err);
int ptc__load_legacy(ptc_ckpt *c, ptc_error *err);

/* safetensors (lib/pth/safetensors.c): the loader behind ptc_ckpt_open and the writer behind
 * ptc_save. */
int ptc__load_safetensors(ptc_ckpt *c, ptc_error *err);
int ptc__save_safetensors(const ptc_value *root, const char *path, const ptc_save_params *p,
                          ptc_error *err);

/* The JSON writers' common parts (lib/pth/report_json.c), for ptc_report_json and
 * ptc_sarif_*: a str value of s (valid UTF-8 as it is, else escaped as ptc_escape does; NULL
 * when out of memory), and o written as jansson's two-space indented text with hidden
 * characters as \uXXXX (ptc_json_escape_hidden), each line after the first indented by indent
 * more spaces, no newline at the end. ptc__json_emit returns 0, PTC_ENOMEM (o NULL included) or
 * write's code; o stays the caller's. */
/* The size of the file a report is about (lib/pth/verify.c); 0 for r NULL. */
uint64_t ptc__report_size(const ptc_report *r);
struct json_t;
struct json_t *ptc__json_text(const char *s);
int ptc__json_emit(struct json_t *o, unsigned indent, ptc_write_fn write, void *ctx);

#endif /* PTC_PTH_PTH_H */
