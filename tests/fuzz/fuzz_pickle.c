/*
 * fuzz_pickle.c - fuzz target for the pickle layer alone (lib/pickle): the static scanner and the
 * restricted machine.
 *
 * The input is one pickle stream, or several concatenated as in a legacy checkpoint. It goes
 *   1. through ptc__pickle_scan over the whole input (stop_at_first false), checking each item it
 *      reports;
 *   2. through ptc__pickle_run as a data.pkl would (bytes after STOP rejected);
 *   3. through ptc__pickle_run pickle after pickle with trailing bytes allowed, as a legacy stream
 *      would. When step 2 accepted the input, step 3 must accept the same single pickle.
 * Every tree the machine finishes is checked again with ptc__value_check_tree and then walked node
 * by node, so that a dangling or half-built node shows up under ASan.
 *
 * The hooks are permissive on purpose: the policy lives in lib/pth and has its own target
 * (fuzz_load.c); here every GLOBAL resolves and every call yields None, so that the fuzzer reaches
 * the machine's stack, memo and container code behind any global a pickle names.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define FUZZ_BUDGET_BYTES (256ull << 20)
/* A legacy file holds five pickles; a few more lets the fuzzer play with concatenation without
 * turning one input into thousands of runs. */
#define FUZZ_MAX_PICKLES 16
/* The tree may share nodes (BINGET of a memoised list), so a naive walk can be exponential in the
 * input size; the walk stops after this many visits. */
#define FUZZ_MAX_VISITS (1u << 20)

/* ---- scanner ------------------------------------------------------------------------------- */
typedef struct scan_state {
    size_t size;
    size_t nitems;
} scan_state;

static int on_scan_item(void *ud, const ptc__scan_item *item)
{
    scan_state *st = ud;
    st->nitems++;
    FUZZ_REQUIRE(item->offset < st->size);
    FUZZ_REQUIRE(ptc__pickle_opname(item->opcode) != NULL);
    if (item->kind == PTC__SCAN_GLOBAL) {
        FUZZ_REQUIRE(item->module != NULL && item->name != NULL);
        FUZZ_REQUIRE(item->module[item->module_len] == '\0');
        FUZZ_REQUIRE(item->name[item->name_len] == '\0');
    }
    return 0;
}

/* ---- permissive hooks ----------------------------------------------------------------------- */
static int hook_nomem(ptc__vm *vm, ptc_error *err)
{
    return ptc__err(err, PTC_ENOMEM, ptc__vm_member(vm), ptc__vm_offset(vm), "out of memory");
}

static int hook_global(void *ud, ptc__vm *vm, const char *module, const char *name, ptc_value **out,
                       ptc_error *err)
{
    (void)ud;
    ptc__arena *a = ptc__vm_arena(vm);
    size_t nmodule = strlen(module), nname = strlen(name);
    ptc_value *v = ptc__value_new(a, PTC_VALUE_GLOBAL);
    char *m = ptc__arena_strndup(a, module, nmodule);
    char *n = ptc__arena_strndup(a, name, nname);
    char *full = ptc__arena_alloc(a, nmodule + nname + 2);
    if (!v || !m || !n || !full)
        return hook_nomem(vm, err);
    memcpy(full, module, nmodule);
    full[nmodule] = '.';
    memcpy(full + nmodule + 1, name, nname + 1);
    v->u.g.module = m;
    v->u.g.name = n;
    v->u.g.full = full;
    v->u.g.id = 0;
    *out = v;
    return 0;
}

static int new_none(ptc__vm *vm, ptc_value **out, ptc_error *err)
{
    *out = ptc__value_new(ptc__vm_arena(vm), PTC_VALUE_NONE);
    return *out ? 0 : hook_nomem(vm, err);
}

static int hook_reduce(void *ud, ptc__vm *vm, ptc_value *callable, ptc_value *args, ptc_value **out,
                       ptc_error *err)
{
    (void)ud;
    (void)callable;
    (void)args;
    return new_none(vm, out, err);
}

static int hook_newobj(void *ud, ptc__vm *vm, ptc_value *cls, ptc_value *args, ptc_value **out,
                       ptc_error *err)
{
    (void)ud;
    (void)cls;
    (void)args;
    return new_none(vm, out, err);
}

static int hook_build(void *ud, ptc__vm *vm, ptc_value *target, ptc_value *state, ptc_error *err)
{
    (void)ud;
    (void)vm;
    (void)target;
    (void)state;
    (void)err;
    return 0;
}

static int hook_persistent_load(void *ud, ptc__vm *vm, ptc_value *pid, ptc_value **out,
                                ptc_error *err)
{
    (void)ud;
    (void)pid;
    return new_none(vm, out, err);
}

static const ptc__vm_hooks permissive_hooks = {
    .ud = NULL,
    .global = hook_global,
    .reduce = hook_reduce,
    .newobj = hook_newobj,
    .build = hook_build,
    .persistent_load = hook_persistent_load,
};

/* ---- tree walk ------------------------------------------------------------------------------ */
static void touch_value(const ptc_value *v, unsigned *visits);

static void touch_seq(const ptc__seq *seq, unsigned *visits)
{
    FUZZ_REQUIRE(seq->n <= seq->cap || seq->cap == 0);
    FUZZ_REQUIRE(seq->n == 0 || seq->items != NULL);
    for (size_t i = 0; i < seq->n && *visits < FUZZ_MAX_VISITS; i++)
        touch_value(seq->items[i], visits);
}

static void touch_value(const ptc_value *v, unsigned *visits)
{
    FUZZ_REQUIRE(v != NULL);
    if (++*visits >= FUZZ_MAX_VISITS)
        return;
    switch ((ptc_value_kind)v->kind) {
    case PTC_VALUE_INT:
        if (v->u.i.bytes && v->u.i.nbytes > 0) {
            volatile uint8_t last = v->u.i.bytes[v->u.i.nbytes - 1];
            (void)last;
        }
        break;
    case PTC_VALUE_STR:
    case PTC_VALUE_BYTES:
        FUZZ_REQUIRE(v->u.s.p != NULL && v->u.s.p[v->u.s.n] == '\0');
        break;
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
    case PTC_VALUE_SIZE:
        touch_seq(&v->u.seq, visits);
        break;
    case PTC_VALUE_DICT:
        FUZZ_REQUIRE(v->u.dict.n == 0 || (v->u.dict.keys && v->u.dict.vals));
        for (size_t i = 0; i < v->u.dict.n && *visits < FUZZ_MAX_VISITS; i++) {
            touch_value(v->u.dict.keys[i], visits);
            touch_value(v->u.dict.vals[i], visits);
        }
        if (v->u.dict.attrs)
            touch_value(v->u.dict.attrs, visits);
        break;
    case PTC_VALUE_GLOBAL:
        FUZZ_REQUIRE(v->u.g.module && v->u.g.name && v->u.g.full);
        break;
    default:
        /* What is left must be a scalar without pointers: neither the machine nor these hooks
         * ever build tensors, objects, dtypes or devices, so any other kind is a corrupt node. */
        FUZZ_REQUIRE(v->kind == PTC_VALUE_NONE || v->kind == PTC_VALUE_BOOL ||
                     v->kind == PTC_VALUE_FLOAT || v->kind == PTC_VALUE_COMPLEX);
        break;
    }
}

/* ---- one run of the machine -------------------------------------------------------------------
 * Returns the machine's status; *consumed receives how much of the input the pickle used. */
static int run_one(const uint8_t *data, size_t len, uint64_t base, bool allow_trailing,
                   const ptc_limits *limits, size_t *consumed)
{
    ptc__budget budget = {0, FUZZ_BUDGET_BYTES};
    ptc__arena *arena = NULL;
    ptc_value *root = NULL;
    ptc_error err;
    ptc__err_clear(&err);
    *consumed = 0;
    if (ptc__arena_new(&arena, &budget) < 0)
        return PTC_ENOMEM;

    ptc__pickle_params p = {
        .member = "fuzz.pkl",
        .base_offset = base,
        .limits = limits,
        .arena = arena,
        .budget = &budget,
        .hooks = &permissive_hooks,
        .allow_trailing = allow_trailing,
    };
    int rc = ptc__pickle_run(data, len, &p, &root, consumed, &err);
    if (rc == 0) {
        FUZZ_REQUIRE(root != NULL);
        if (allow_trailing)
            FUZZ_REQUIRE(*consumed > 0 && *consumed <= len);
        /* The machine checks its result itself; checking again from outside catches a tree
         * that changed after that check, and exercises the checker on every accepted tree. */
        rc = ptc__value_check_tree(root, limits->max_depth, limits->max_objects, NULL, "fuzz.pkl",
                                   &err);
        if (rc == 0) {
            unsigned visits = 0;
            touch_value(root, &visits);
        }
    }
    if (rc < 0)
        FUZZ_REQUIRE(err.code == rc && err.message[0] != '\0');
    ptc__arena_free(arena);
    /* The machine gives back what it charged for its stack and memo, the arena what it charged
     * for values: a budget left in use would make a long-lived caller run out of it. */
    FUZZ_REQUIRE(budget.used == 0);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_limits limits;
    ptc_limits_default(&limits);

    scan_state st = {size, 0};
    size_t consumed = 0;
    ptc_error err;
    ptc__err_clear(&err);
    if (ptc__pickle_scan(data, size, "fuzz.pkl", 0, false, on_scan_item, &st, &consumed, &err) == 0)
        FUZZ_REQUIRE(consumed <= size);

    int strict_rc = run_one(data, size, 0, false, &limits, &consumed);

    size_t off = 0;
    for (int i = 0; i < FUZZ_MAX_PICKLES && off < size; i++) {
        int rc = run_one(data + off, size - off, off, true, &limits, &consumed);
        if (i == 0 && strict_rc == 0)
            FUZZ_REQUIRE(rc == 0 && consumed == size);
        if (rc < 0)
            break;
        off += consumed;
    }
    return 0;
}
