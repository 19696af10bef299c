/*
 * test_salvage_sd.c - ptc_salvage_state_dict: modules back to the state dict torch's
 * Module.state_dict() gives, on pickles assembled here opcode by opcode exactly as pickle's
 * protocol 2 writes a module (NEWOBJ of the class, BUILD with its __dict__), read through a policy
 * that allows the test's class names and again through PTC_OPEN_SALVAGE (the objects are the
 * same). The expected keys follow torch 2.6's Module.state_dict rules (parameters, persistent
 * buffers, children in order; None skipped; a module reached twice listed twice; tied weights
 * shared), written out by hand below, never taken from ptc's output. The end-to-end check against
 * real torch is tests/interop/check_salvage.py. Also: every file of the hostile corpus through
 * PTC_OPEN_SALVAGE and ptc_salvage_state_dict (clean errors, printable messages), and an
 * allocation-failure sweep of open + salvage (a clean PTC_ENOMEM, nothing leaked).
 */
#include "ptc/ptc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* ---- a protocol 2 pickle, assembled --------------------------------------------------------- */

typedef struct pk {
    uint8_t b[1 << 16];
    size_t n;
    uint32_t memo;
} pk;

static void raw(pk *p, const void *s, size_t n)
{
    if (p->n + n > sizeof p->b) {
        fprintf(stderr, "test pickle too long\n");
        exit(99);
    }
    memcpy(p->b + p->n, s, n);
    p->n += n;
}
static void op(pk *p, uint8_t c)
{
    raw(p, &c, 1);
}
static void u32(pk *p, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    raw(p, b, 4);
}
static void str_n(pk *p, const char *s, size_t n) /* BINUNICODE of n bytes (NUL allowed) */
{
    op(p, 'X');
    u32(p, (uint32_t)n);
    raw(p, s, n);
}
static void str(pk *p, const char *s)
{
    str_n(p, s, strlen(s));
}
static void global(pk *p, const char *mod, const char *name) /* GLOBAL */
{
    op(p, 'c');
    raw(p, mod, strlen(mod));
    op(p, '\n');
    raw(p, name, strlen(name));
    op(p, '\n');
}
static void small_int(pk *p, uint8_t v) /* BININT1 */
{
    op(p, 'K');
    op(p, v);
}
static uint32_t put(pk *p) /* LONG_BINPUT: the memo index of the top of the stack */
{
    op(p, 'r');
    u32(p, p->memo);
    return p->memo++;
}
static void get(pk *p, uint32_t i) /* LONG_BINGET */
{
    op(p, 'j');
    u32(p, i);
}

/* A float32 tensor of n elements over legacy storage KEY (torch._utils._rebuild_tensor_v2). */
static void tensor(pk *p, const char *key, uint8_t n)
{
    global(p, "torch._utils", "_rebuild_tensor_v2");
    op(p, '(');
    op(p, '(');
    str(p, "storage");
    global(p, "torch", "FloatStorage");
    str(p, key);
    str(p, "cpu");
    small_int(p, n);
    op(p, 'N');
    op(p, 't');
    op(p, 'Q'); /* BINPERSID */
    small_int(p, 0);
    small_int(p, n);
    op(p, 0x85); /* TUPLE1: size */
    small_int(p, 1);
    op(p, 0x85); /* stride */
    op(p, 0x89); /* requires_grad False */
    global(p, "collections", "OrderedDict");
    op(p, ')');
    op(p, 'R');
    op(p, 't');
    op(p, 'R');
}

/* nn.Parameter(tensor over KEY), requires_grad True (torch._utils._rebuild_parameter). */
static void parameter(pk *p, const char *key, uint8_t n)
{
    global(p, "torch._utils", "_rebuild_parameter");
    op(p, '(');
    tensor(p, key, n);
    op(p, 0x88); /* True */
    global(p, "collections", "OrderedDict");
    op(p, ')');
    op(p, 'R');
    op(p, 't');
    op(p, 'R');
}

/* Opens a module: NEWOBJ of test.m.<cls>, then its state dict with 'training' and the dicts that
 * follow are the caller's (begin_dict / end_dict), then end_module BUILDs it. */
static void begin_module(pk *p, const char *cls)
{
    global(p, "test.m", cls);
    op(p, ')');
    op(p, 0x81); /* NEWOBJ */
    op(p, '}');
    op(p, '(');
    str(p, "training");
    op(p, 0x88);
}
static void end_module(pk *p)
{
    op(p, 'u'); /* SETITEMS */
    op(p, 'b'); /* BUILD */
}
static void begin_dict(pk *p, const char *key)
{
    str(p, key);
    op(p, '}');
    op(p, '(');
}
static void end_dict(pk *p)
{
    op(p, 'u');
}
static void empty_dict(pk *p, const char *key)
{
    str(p, key);
    op(p, '}');
}
/* A module with one parameter "w" over KEY, no buffers or children. */
static uint32_t leaf(pk *p, const char *cls, const char *pname, const char *key)
{
    begin_module(p, cls);
    begin_dict(p, "_parameters");
    str(p, pname);
    parameter(p, key, 2);
    end_dict(p);
    empty_dict(p, "_buffers");
    empty_dict(p, "_modules");
    end_module(p);
    return put(p);
}

/* The legacy stream around pickle obj: magic, protocol 1001, sys_info, obj, the key list, then
 * each storage (u64 element count, then float32 data): storage "sK" holds {10K+1, 10K+2}. */
static size_t legacy(uint8_t *out, size_t cap, const pk *obj, const char *const *keys, size_t nk)
{
    static const uint8_t magic[] = {0x80, 0x02, 0x8A, 0x0A, 0x6C, 0xFC, 0x9C, 0x46,
                                    0xF9, 0x20, 0x6A, 0xA8, 0x50, 0x19, 0x2E};
    pk *k = calloc(1, sizeof *k);
    if (!k)
        exit(99);
    raw(k, "\x80\x02]", 3);
    op(k, '(');
    for (size_t i = 0; i < nk; i++)
        str(k, keys[i]);
    raw(k, "e.", 2);
    size_t o = 0, need = sizeof magic + 10 + obj->n + k->n + nk * 16;
    if (need > cap)
        exit(99);
    memcpy(out, magic, sizeof magic);
    o += sizeof magic;
    memcpy(out + o, "\x80\x02M\xe9\x03.\x80\x02}.", 10);
    o += 10;
    memcpy(out + o, obj->b, obj->n);
    o += obj->n;
    memcpy(out + o, k->b, k->n);
    o += k->n;
    for (size_t i = 0; i < nk; i++) {
        uint8_t count[8] = {2};
        int id = atoi(keys[i] + 1);
        float v[2] = {(float)(10 * id + 1), (float)(10 * id + 2)};
        memcpy(out + o, count, 8);
        memcpy(out + o + 8, v, 8);
        o += 16;
    }
    free(k);
    return o;
}

/* How the suite opens its pickles: through a policy that allows test.m's classes, or through
 * PTC_OPEN_SALVAGE under the default policy (main runs it both ways: the trees are the same). */
static ptc_policy *policy;
static unsigned open_flags;

static ptc_ckpt *open_pk(const pk *p, const char *const *keys, size_t nk, uint8_t *buf, size_t cap)
{
    size_t n = legacy(buf, cap, p, keys, nk);
    ptc_open_params op;
    ptc_open_params_default(&op);
    op.policy = open_flags ? NULL : policy;
    op.flags = open_flags;
    ptc_ckpt *c = NULL;
    ptc_error err;
    int rc = ptc_ckpt_open_memory(&c, buf, n, &op, &err);
    if (rc < 0)
        fprintf(stderr, "open: %s\n", err.message);
    CHECK_INT(rc, 0);
    return c;
}

static const char *key_at(const ptc_value *d, size_t i)
{
    const char *s = NULL;
    size_t n;
    return ptc_value_str(ptc_dict_key(d, i), &s, &n) == 0 ? s : "?";
}

static float first(const ptc_value *v)
{
    float f[2] = {0, 0};
    ptc_error err;
    const ptc_tensor *t = ptc_value_tensor(v);
    if (t)
        CHECK_INT(ptc_tensor_read(t, f, sizeof f, &err), 0);
    return f[0];
}

/* ---- the checkpoint of the main test -------------------------------------------------------
 * {"epoch": 5, "junk": test.m.Junk(1), "model": Net} with
 *   Net:  _parameters {w: P(s0), b: None}, _buffers {rm: T(s1), tmp: T(s2), nb: None},
 *         _non_persistent_buffers_set {"tmp"},
 *         _modules {a: Sub(w: P(s3)), none: None, b: <the same Sub again>, head: Lin(weight: the
 *                   Parameter w of Net, tied)}
 * state_dict(): w, rm, a.w, b.w, head.weight; w and head.weight share s0, a.w and b.w share s3. */
static void build_main(pk *p)
{
    raw(p, "\x80\x02", 2);
    op(p, '}');
    op(p, '(');
    str(p, "epoch");
    small_int(p, 5);
    str(p, "junk");
    global(p, "test.m", "Junk");
    small_int(p, 1);
    op(p, 0x85);
    op(p, 'R');
    str(p, "model");
    begin_module(p, "Net");
    begin_dict(p, "_parameters");
    str(p, "w");
    parameter(p, "s0", 2);
    uint32_t w = put(p);
    str(p, "b");
    op(p, 'N');
    end_dict(p);
    begin_dict(p, "_buffers");
    str(p, "rm");
    tensor(p, "s1", 2);
    str(p, "tmp");
    tensor(p, "s2", 2);
    str(p, "nb");
    op(p, 'N');
    end_dict(p);
    str(p, "_non_persistent_buffers_set");
    global(p, "builtins", "set");
    op(p, ']');
    str(p, "tmp");
    op(p, 'a'); /* APPEND */
    op(p, 0x85);
    op(p, 'R');
    begin_dict(p, "_modules");
    str(p, "a");
    uint32_t sub = leaf(p, "Sub", "w", "s3");
    str(p, "none");
    op(p, 'N');
    str(p, "b");
    get(p, sub);
    str(p, "head");
    begin_module(p, "Lin");
    begin_dict(p, "_parameters");
    str(p, "weight");
    get(p, w);
    end_dict(p);
    empty_dict(p, "_buffers");
    empty_dict(p, "_modules");
    end_module(p);
    end_dict(p);
    end_module(p);
    op(p, 'u');
    op(p, '.');
}

static const char *const main_keys[] = {"s0", "s1", "s2", "s3"};

static void test_main(void)
{
    static uint8_t buf[1 << 17];
    pk *p = calloc(1, sizeof *p);
    build_main(p);
    ptc_ckpt *c = open_pk(p, main_keys, 4, buf, sizeof buf);
    free(p);
    if (!c)
        return;
    const ptc_value *root = ptc_ckpt_root(c);
    CHECK(!ptc_salvage_is_module(root));
    CHECK(ptc_salvage_is_module(ptc_dict_get(root, "model")));
    CHECK(!ptc_salvage_is_module(ptc_dict_get(root, "junk")));

    ptc_doc *d = NULL;
    ptc_error err;
    const ptc_value *sd = NULL;
    const char *chosen = NULL;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    CHECK_CODE(ptc_salvage_state_dict(d, root, NULL, NULL, &sd, &chosen, &err), 0, &err);
    CHECK_STR(chosen, "model");
    static const char *const want[] = {"w", "rm", "a.w", "b.w", "head.weight"};
    static const float want_first[] = {1, 11, 31, 31, 1};
    CHECK_INT(ptc_value_len(sd), 5);
    CHECK(ptc_dict_is_ordered(sd));
    CHECK(ptc_dict_attrs(sd) == NULL);
    for (size_t i = 0; i < 5 && i < ptc_value_len(sd); i++) {
        const ptc_value *v = ptc_dict_value(sd, i);
        const ptc_tensor *t = ptc_value_tensor(v);
        CHECK_STR(key_at(sd, i), want[i]);
        CHECK(t != NULL);
        if (!t)
            continue;
        CHECK_INT(ptc_tensor_is_parameter(t), 0);
        CHECK_INT(ptc_tensor_requires_grad(t), 0);
        CHECK_INT(ptc_tensor_numel(t), 2);
        CHECK_INT((int)first(v), (int)want_first[i]);
    }
    const ptc_tensor *tw = ptc_state_dict_get(sd, "w"), *th = ptc_state_dict_get(sd, "head.weight");
    const ptc_tensor *ta = ptc_state_dict_get(sd, "a.w"), *tb = ptc_state_dict_get(sd, "b.w");
    CHECK(tw && th && tw != th && ptc_tensor_storage(tw) == ptc_tensor_storage(th));
    CHECK(ta && tb && ptc_tensor_storage(ta) == ptc_tensor_storage(tb));
    /* The source Parameter is untouched: detaching made new nodes. */
    const ptc_value *src =
        ptc_dict_get(ptc_object_state(ptc_dict_get(root, "model")), "_parameters");
    CHECK_INT(ptc_tensor_is_parameter(ptc_value_tensor(ptc_dict_get(src, "w"))), 1);

    /* Saved, the tied pair stays one storage: 3 storages for 5 tensors. */
    char path[] = "/tmp/ptc-salvage-sd-XXXXXX.pth";
    int fd = mkstemps(path, 4);
    CHECK(fd >= 0);
    if (fd >= 0) {
        close(fd);
        CHECK_CODE(ptc_save(sd, path, NULL, &err), 0, &err);
        ptc_ckpt *back = NULL;
        CHECK_CODE(ptc_ckpt_open(&back, path, NULL, &err), 0, &err);
        CHECK_INT(ptc_ckpt_nstorages(back), 3);
        CHECK_INT(ptc_value_len(ptc_ckpt_root(back)), 5);
        CHECK(ptc_dict_is_ordered(ptc_ckpt_root(back)));
        CHECK_STR(key_at(ptc_ckpt_root(back), 4), "head.weight");
        ptc_ckpt_close(back);
        unlink(path);
    }

    /* Explicit paths: through dict keys and _modules names. */
    CHECK_CODE(ptc_salvage_state_dict(d, root, "model.a", NULL, &sd, &chosen, &err), 0, &err);
    CHECK_STR(chosen, "model.a");
    CHECK_INT(ptc_value_len(sd), 1);
    CHECK_STR(key_at(sd, 0), "w");
    CHECK_CODE(ptc_salvage_state_dict(d, root, "model.head", NULL, &sd, NULL, &err), 0, &err);
    CHECK_STR(key_at(sd, 0), "weight");
    CHECK_INT((int)first(ptc_dict_value(sd, 0)), 1);
    CHECK_CODE(ptc_salvage_state_dict(d, root, "model.none", NULL, &sd, &chosen, &err),
               PTC_ENOTFOUND, &err);
    CHECK(sd == NULL && chosen == NULL);
    CHECK_CODE(ptc_salvage_state_dict(d, root, "epoch", NULL, &sd, NULL, &err), PTC_ENOTFOUND,
               &err);
    CHECK(strstr(err.message, "'epoch' is int") != NULL);
    CHECK_CODE(ptc_salvage_state_dict(d, root, "model.zz", NULL, &sd, NULL, &err), PTC_ENOTFOUND,
               &err);
    CHECK(strstr(err.message, "names nothing") != NULL);
    /* An object that is not a module (a payload's result) is refused by name. */
    CHECK_CODE(ptc_salvage_state_dict(d, root, "junk", NULL, &sd, NULL, &err), PTC_ENOTFOUND, &err);
    CHECK(strstr(err.message, "test.m.Junk") != NULL);

    /* A budget too small for the walk: PTC_ELIMIT, nothing returned. */
    ptc_budget b;
    ptc_budget_init(&b, c, 0);
    b.max_nodes = 4;
    CHECK_CODE(ptc_salvage_state_dict(d, root, NULL, &b, &sd, NULL, &err), PTC_ELIMIT, &err);
    CHECK(sd == NULL);

    /* NULL arguments. */
    CHECK_CODE(ptc_salvage_state_dict(NULL, root, NULL, NULL, &sd, NULL, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_salvage_state_dict(d, NULL, NULL, NULL, &sd, NULL, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_salvage_state_dict(d, root, NULL, NULL, NULL, NULL, &err), PTC_EINVAL, &err);
    CHECK(!ptc_salvage_is_module(NULL));
    ptc_doc_free(d);
    ptc_ckpt_close(c);
}

/* The defaults beyond "model": the root module itself; the first module of the root dict; a
 * state dict already (returned as it is); nothing to take (PTC_ENOTFOUND). */
static void test_defaults(void)
{
    static uint8_t buf[1 << 17];
    static const char *const k1[] = {"s0"};
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd;
    const char *chosen;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    pk *p = calloc(1, sizeof *p);

    /* torch.save(model): the root is the module. */
    raw(p, "\x80\x02", 2);
    leaf(p, "Lin", "weight", "s0");
    op(p, '.');
    ptc_ckpt *c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err), 0,
                   &err);
        CHECK_STR(chosen, "");
        CHECK_INT(ptc_value_len(sd), 1);
        CHECK_STR(key_at(sd, 0), "weight");
        ptc_ckpt_close(c);
    }

    /* {"opt": {}, "ema": Lin, "net": Lin}: the first module in order, "ema". */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    empty_dict(p, "opt");
    str(p, "ema");
    leaf(p, "Lin", "weight", "s0");
    str(p, "net");
    leaf(p, "Lin", "bias", "s0");
    raw(p, "u.", 2);
    c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err), 0,
                   &err);
        CHECK_STR(chosen, "ema");
        CHECK_STR(key_at(sd, 0), "weight");
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "net", NULL, &sd, &chosen, &err), 0,
                   &err);
        CHECK_STR(key_at(sd, 0), "bias");
        ptc_ckpt_close(c);
    }

    /* {"x.y": T}: a state dict already, given back as it is; a dotted key found whole. */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    str(p, "x.y");
    tensor(p, "s0", 2);
    raw(p, "u.", 2);
    c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err), 0,
                   &err);
        CHECK(sd == ptc_ckpt_root(c));
        CHECK_STR(chosen, "");
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "x.y", NULL, &sd, &chosen, &err),
                   PTC_ENOTFOUND, &err);
        CHECK(strstr(err.message, "'x.y' is tensor") != NULL);
        ptc_ckpt_close(c);
    }

    /* {"epoch": 5}: neither a module nor a state dict. */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    str(p, "epoch");
    small_int(p, 5);
    raw(p, "u.", 2);
    c = open_pk(p, NULL, 0, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err),
                   PTC_ENOTFOUND, &err);
        CHECK(strstr(err.message, "no module") != NULL);
        ptc_ckpt_close(c);
    }
    free(p);
    ptc_doc_free(d);
}

/* Refusals inside a module: a child that is not a module, a parameter that is not a tensor. */
static void test_refusals(void)
{
    static uint8_t buf[1 << 17];
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    pk *p = calloc(1, sizeof *p);
    raw(p, "\x80\x02", 2);
    begin_module(p, "Net");
    begin_dict(p, "_parameters");
    end_dict(p);
    empty_dict(p, "_buffers");
    begin_dict(p, "_modules");
    str(p, "evil");
    global(p, "test.m", "Junk");
    small_int(p, 1);
    op(p, 0x85);
    op(p, 'R');
    end_dict(p);
    end_module(p);
    op(p, '.');
    ptc_ckpt *c = open_pk(p, NULL, 0, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, NULL, &err),
                   PTC_EUNSUPPORTED, &err);
        CHECK(strstr(err.message, "submodule 'evil'") && strstr(err.message, "test.m.Junk"));
        ptc_ckpt_close(c);
    }
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02", 2);
    begin_module(p, "Net");
    begin_dict(p, "_parameters");
    str(p, "w");
    small_int(p, 3);
    end_dict(p);
    empty_dict(p, "_buffers");
    empty_dict(p, "_modules");
    end_module(p);
    op(p, '.');
    c = open_pk(p, NULL, 0, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, NULL, &err),
                   PTC_EUNSUPPORTED, &err);
        CHECK(strstr(err.message, "parameter 'w' is int") != NULL);
        ptc_ckpt_close(c);
    }
    free(p);
    ptc_doc_free(d);
}

/* A DAG of modules: each level's _modules holds the level below twice (memo). state_dict()
 * visits it 2^levels times, and so does the walk: 10 levels give 1024 keys; 18 levels (what the
 * reader's expansion limit still lets in) are stopped by a budget of 100,000 nodes. */
static ptc_ckpt *open_dag(int levels, uint8_t *buf, size_t cap, const char *left)
{
    pk *p = calloc(1, sizeof *p);
    /* {"L0": leaf, "L1": level 1, ...}: a weights-only pickle has no POP, so the levels stay. */
    raw(p, "\x80\x02}(", 4);
    str(p, "L0");
    uint32_t prev = leaf(p, "Lin", "w", "s0");
    for (int i = 1; i <= levels; i++) {
        char name[16];
        snprintf(name, sizeof name, "L%d", i);
        str(p, name);
        begin_module(p, "Net");
        empty_dict(p, "_parameters");
        empty_dict(p, "_buffers");
        begin_dict(p, "_modules");
        str(p, left);
        get(p, prev);
        str(p, "r");
        get(p, prev);
        end_dict(p);
        end_module(p);
        prev = put(p);
    }
    raw(p, "u.", 2);
    static const char *const k1[] = {"s0"};
    ptc_ckpt *c = open_pk(p, k1, 1, buf, cap);
    free(p);
    return c;
}

static void test_dag(void)
{
    static uint8_t buf[1 << 17];
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    ptc_ckpt *c = open_dag(10, buf, sizeof buf, "l");
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "L10", NULL, &sd, NULL, &err), 0,
                   &err);
        CHECK_INT(ptc_value_len(sd), 1024);
        CHECK_STR(key_at(sd, 0), "l.l.l.l.l.l.l.l.l.l.w");
        CHECK_STR(key_at(sd, 1023), "r.r.r.r.r.r.r.r.r.r.w");
        ptc_ckpt_close(c);
    }
    c = open_dag(18, buf, sizeof buf, "l");
    if (c) {
        ptc_budget b;
        ptc_budget_init(&b, c, 0);
        b.max_nodes = 100000;
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "L18", &b, &sd, NULL, &err),
                   PTC_ELIMIT, &err);
        CHECK(sd == NULL);
        ptc_ckpt_close(c);
    }
    ptc_doc_free(d);
}

/* The outside check's amplifier: 17 levels whose _modules name the level below under 382 bytes
 * and under "b" (16 KB of pickle). state_dict() would give 131,072 keys holding 440 MB of text;
 * the default budget would let it through, the key text cap refuses it. */
static void test_key_text_cap(void)
{
    static uint8_t buf[1 << 17];
    char left[383];
    memset(left, 'a', 382);
    left[382] = '\0';
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    ptc_ckpt *c = open_dag(17, buf, sizeof buf, left);
    if (c) {
        ptc_budget b;
        ptc_budget_init(&b, c, 0);
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "L17", &b, &sd, NULL, &err),
                   PTC_ELIMIT, &err);
        CHECK(strstr(err.message, "bytes of text (SALVAGE_KEY_TEXT") != NULL);
        printf("amplifier: %s\n", err.message);
        ptc_ckpt_close(c);
    }
    ptc_doc_free(d);
}

/* 2,000 buffers of which 1,500 are non-persistent (a list here; torch writes a set): the lookup
 * is hashed, so the default budget (16 x ~9,000 opcodes + 1,000,000 nodes) holds it; a linear scan
 * per buffer costs 3 million. All 2,000 share one tensor (memo), to stay within the test pickle. */
static void test_many_nonpersistent(void)
{
    static uint8_t buf[1 << 17];
    static const char *const k1[] = {"s0"};
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd;
    char name[16];
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    pk *p = calloc(1, sizeof *p);
    raw(p, "\x80\x02", 2);
    begin_module(p, "Net");
    empty_dict(p, "_parameters");
    begin_dict(p, "_buffers");
    uint32_t t = 0;
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "b%d", i);
        str(p, name);
        if (i == 0) {
            tensor(p, "s0", 2);
            t = put(p);
        } else {
            get(p, t);
        }
    }
    end_dict(p);
    str(p, "_non_persistent_buffers_set");
    raw(p, "](", 2);
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "b%d", i);
        if (i % 4)
            str(p, name);
    }
    op(p, 'e'); /* APPENDS */
    empty_dict(p, "_modules");
    end_module(p);
    op(p, '.');
    ptc_ckpt *c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        ptc_budget b;
        ptc_budget_init(&b, c, 0);
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, &b, &sd, NULL, &err), 0, &err);
        CHECK_INT(ptc_value_len(sd), 500);
        CHECK_STR(key_at(sd, 1), "b4");
        CHECK(b.nodes < 20000);
        printf("2,000 buffers, 1,500 non-persistent: %zu keys, %llu nodes charged\n",
               ptc_value_len(sd), (unsigned long long)b.nodes);
        ptc_ckpt_close(c);
    }
    free(p);
    ptc_doc_free(d);
}

/* Paths and picks: an ambiguous path, a root key holding NUL, a dict keyed by globals, a state
 * dict whose _metadata holds a symbolic object, the first state dict entry by default, the
 * candidates named when nothing is found. */
static void test_picks(void)
{
    static uint8_t buf[1 << 17];
    static const char *const k1[] = {"s0"};
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd, *pick, *name;
    const char *chosen, *np;
    size_t nn;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    pk *p = calloc(1, sizeof *p);

    /* {"a.b": {"c": Lin}, "a": {"b.c": Lin}}: "a.b.c" reads two ways. */
    raw(p, "\x80\x02}(", 4);
    begin_dict(p, "a.b");
    str(p, "c");
    leaf(p, "Lin", "first", "s0");
    end_dict(p);
    begin_dict(p, "a");
    str(p, "b.c");
    leaf(p, "Lin", "second", "s0");
    end_dict(p);
    raw(p, "u.", 2);
    ptc_ckpt *c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "a.b.c", NULL, &sd, NULL, &err),
                   PTC_EINVAL, &err);
        CHECK(strstr(err.message, "ambiguous") && strstr(err.message, "root['a.b']['c']") &&
              strstr(err.message, "root['a']['b.c']"));
        ptc_ckpt_close(c);
    }

    /* {"a": 1, "mod\0el": Lin}: the pick keeps the key's 6 bytes and the module's class. */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    str(p, "a");
    small_int(p, 1);
    str_n(p, "mod\0el", 6);
    leaf(p, "Lin", "w", "s0");
    raw(p, "u.", 2);
    c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_pick(d, ptc_ckpt_root(c), NULL, NULL, &pick, &name, &err), 0, &err);
        CHECK_INT(ptc_value_str(name, &np, &nn), 0);
        CHECK_INT(nn, 6);
        CHECK(nn == 6 && memcmp(np, "mod\0el", 6) == 0);
        CHECK_STR(ptc_value_global_name(pick), "test.m.Lin");
        ptc_ckpt_close(c);
    }

    /* {"epoch": 5, "state_dict": {"w": T}} (Lightning): the state dict entry by default. */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    str(p, "epoch");
    small_int(p, 5);
    begin_dict(p, "state_dict");
    str(p, "w");
    tensor(p, "s0", 2);
    end_dict(p);
    raw(p, "u.", 2);
    c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err), 0,
                   &err);
        CHECK_STR(chosen, "state_dict");
        CHECK_INT(ptc_value_len(sd), 1);
        ptc_ckpt_close(c);
    }

    /* {"epoch": 5, "opt": {"lr": 1}}: nothing; the message names 'opt' and --state-dict. */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    str(p, "epoch");
    small_int(p, 5);
    begin_dict(p, "opt");
    str(p, "lr");
    small_int(p, 1);
    end_dict(p);
    raw(p, "u.", 2);
    c = open_pk(p, NULL, 0, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err),
                   PTC_ENOTFOUND, &err);
        CHECK(strstr(err.message, "'opt'") && strstr(err.message, "--state-dict PATH"));
        ptc_ckpt_close(c);
    }

    /* {test.m.Junk: T}: keys that are globals make no state dict. */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02}(", 4);
    global(p, "test.m", "Junk");
    tensor(p, "s0", 2);
    raw(p, "u.", 2);
    c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err),
                   PTC_ENOTFOUND, &err);
        ptc_ckpt_close(c);
    }

    /* OrderedDict {"w": T} with _metadata {"": {"version": test.m.Junk()}}: read symbolically,
     * given back as a copy without _metadata (no writer writes a symbolic object back). */
    memset(p, 0, sizeof *p);
    raw(p, "\x80\x02", 2);
    global(p, "collections", "OrderedDict");
    raw(p, ")R(", 3);
    str(p, "w");
    tensor(p, "s0", 2);
    op(p, 'u');
    op(p, '}');
    str(p, "_metadata");
    global(p, "collections", "OrderedDict");
    raw(p, ")R(", 3);
    str(p, "");
    op(p, '}');
    str(p, "version");
    global(p, "test.m", "Junk");
    raw(p, ")R", 2);
    op(p, 's');
    raw(p, "us", 2);
    raw(p, "b.", 2);
    c = open_pk(p, k1, 1, buf, sizeof buf);
    if (c) {
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, &chosen, &err), 0,
                   &err);
        CHECK_INT(ptc_value_len(sd), 1);
        if (open_flags & PTC_OPEN_SALVAGE)
            CHECK(sd != ptc_ckpt_root(c) && ptc_dict_attrs(sd) == NULL);
        ptc_ckpt_close(c);
    }
    free(p);
    ptc_doc_free(d);
}

/* A legacy stream of a whole module names its class through a persistent id ('module', cls,
 * source_file, source), which torch's _legacy_load answers with cls: read symbolically, the
 * module is found behind it; a strict load (even one whose policy allows the class) refuses it. */
static void test_legacy_module_pid(void)
{
    static uint8_t buf[1 << 16];
    static const char *const k1[] = {"s0"};
    pk *p = calloc(1, sizeof *p);
    raw(p, "\x80\x02", 2);
    op(p, '(');
    str(p, "module");
    global(p, "test.m", "Lin");
    op(p, 'N');
    op(p, 'N');
    op(p, 't');
    op(p, 'Q');
    op(p, ')');
    op(p, 0x81);
    op(p, '}');
    op(p, '(');
    begin_dict(p, "_parameters");
    str(p, "weight");
    parameter(p, "s0", 2);
    end_dict(p);
    empty_dict(p, "_buffers");
    empty_dict(p, "_modules");
    end_module(p);
    op(p, '.');
    size_t n = legacy(buf, sizeof buf, p, k1, 1);
    free(p);
    ptc_open_params op;
    ptc_open_params_default(&op);
    op.flags = PTC_OPEN_SALVAGE;
    ptc_ckpt *c = NULL;
    ptc_error err;
    ptc_doc *d = NULL;
    const ptc_value *sd = NULL;
    CHECK_CODE(ptc_ckpt_open_memory(&c, buf, n, &op, &err), 0, &err);
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    if (c) {
        CHECK(ptc_salvage_is_module(ptc_ckpt_root(c)));
        CHECK_STR(ptc_value_global_name(ptc_ckpt_root(c)), "test.m.Lin");
        CHECK_CODE(ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, NULL, &sd, NULL, &err), 0,
                   &err);
        CHECK_INT(ptc_value_len(sd), 1);
        CHECK_STR(key_at(sd, 0), "weight");
        CHECK_INT((int)first(ptc_dict_value(sd, 0)), 1);
        ptc_ckpt_close(c);
        c = NULL;
    }
    op.flags = 0;
    op.policy = policy;
    CHECK_CODE(ptc_ckpt_open_memory(&c, buf, n, &op, &err), PTC_EFORMAT, &err);
    ptc_ckpt_close(c);
    ptc_doc_free(d);
}

/* ---- allocation failures -------------------------------------------------------------------
 * A counting allocator fails the fail_at-th request; live counts the blocks not yet freed. */
typedef struct counting {
    long n, fail_at, live;
    int failed;
} counting;

static void *count_realloc(void *ctx, void *p, size_t size)
{
    counting *c = ctx;
    if (size == 0) {
        if (p) {
            c->live--;
            free(p);
        }
        return NULL;
    }
    if (++c->n == c->fail_at) {
        c->failed = 1;
        return NULL;
    }
    void *q = realloc(p, size);
    if (q && !p)
        c->live++;
    return q;
}

/* The main checkpoint opened with PTC_OPEN_SALVAGE and salvaged, with the N-th allocation
 * failing, for every N until a run requests fewer: each run ends in success (the 5 keys) or a
 * clean PTC_ENOMEM, and leaves nothing allocated. */
static void test_alloc_failures(void)
{
    static uint8_t buf[1 << 17];
    pk *p = calloc(1, sizeof *p);
    build_main(p);
    size_t n = legacy(buf, sizeof buf, p, main_keys, 4);
    free(p);
    long runs = 0;
    int done = 0;
    for (long fail_at = 1; fail_at < 100000 && !done; fail_at++) {
        counting c = {0, fail_at, 0, 0};
        ptc_set_allocator(count_realloc, &c);
        ptc_open_params op;
        ptc_open_params_default(&op);
        op.flags = PTC_OPEN_SALVAGE;
        ptc_ckpt *ck = NULL;
        ptc_doc *d = NULL;
        const ptc_value *sd = NULL;
        ptc_error err;
        size_t keys = 0;
        int rc = ptc_ckpt_open_memory(&ck, buf, n, &op, &err);
        if (rc == 0)
            rc = ptc_doc_new(&d, &err);
        if (rc == 0)
            rc = ptc_salvage_state_dict(d, ptc_ckpt_root(ck), NULL, NULL, &sd, NULL, &err);
        if (rc == 0)
            keys = ptc_value_len(sd);
        ptc_doc_free(d);
        ptc_ckpt_close(ck);
        ptc_set_allocator(NULL, NULL);
        runs++;
        if (rc < 0) {
            CHECK_INT(rc, PTC_ENOMEM);
            CHECK(c.failed);
            CHECK_INT(err.code, rc);
        } else {
            CHECK_INT(keys, 5);
        }
        CHECK_INT(c.live, 0);
        if (!c.failed) {
            CHECK_INT(rc, 0);
            done = 1;
        }
    }
    CHECK(done);
    printf("allocation failures: %ld runs\n", runs);
}

/* 1 when s is printable text: no C0 control, DEL or raw escape byte reaches a terminal. */
static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

/* Every file of the hostile corpus, opened with PTC_OPEN_SALVAGE, then given to
 * ptc_salvage_state_dict with the defaults and the checkpoint's default budget: a clean error
 * (a PTC_E* code with a printable message) or a dict of tensors, never a crash (this test runs
 * under ASan in the sanitizer build). */
static void test_hostile_corpus(void)
{
    const char *top = getenv("top_srcdir");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/testdata/hostile/files", top ? top : ".");
    DIR *dh = opendir(dir);
    CHECK(dh != NULL);
    if (!dh)
        return;
    size_t files = 0, opened = 0, salvaged = 0;
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        files++;
        ptc_open_params op;
        ptc_open_params_default(&op);
        op.flags = PTC_OPEN_SALVAGE;
        ptc_ckpt *c = NULL;
        ptc_error err;
        if (ptc_ckpt_open(&c, path, &op, &err) < 0)
            continue;
        opened++;
        ptc_doc *d = NULL;
        const ptc_value *sd = NULL;
        const char *chosen = NULL;
        ptc_budget b;
        ptc_budget_init(&b, c, 0);
        CHECK_INT(ptc_doc_new(&d, &err), 0);
        memset(&err, 0, sizeof err);
        int rc = ptc_salvage_state_dict(d, ptc_ckpt_root(c), NULL, &b, &sd, &chosen, &err);
        if (rc == 0) {
            salvaged++;
            CHECK(sd != NULL && chosen != NULL);
            CHECK_INT(ptc_value_kind_of(sd), PTC_VALUE_DICT);
            for (size_t i = 0, n = ptc_value_len(sd); i < n; i++)
                CHECK(ptc_value_tensor(ptc_dict_value(sd, i)) != NULL);
        } else {
            CHECK(rc == err.code && ptc_err_name(rc) != NULL);
            CHECK(sd == NULL && chosen == NULL);
            CHECK(err.message[0] && printable(err.message));
            if (!err.message[0] || !printable(err.message))
                fprintf(stderr, "%s: %s\n", e->d_name, err.message);
        }
        ptc_doc_free(d);
        ptc_ckpt_close(c);
    }
    closedir(dh);
    printf("hostile corpus: %zu files, %zu opened with PTC_OPEN_SALVAGE, %zu gave a state dict\n",
           files, opened, salvaged);
    CHECK(files >= 150);
}

int main(void)
{
    ptc_error err;
    CHECK_INT(ptc_policy_new(&policy, PTC_POLICY_DEFAULT, &err), 0);
    static const char *const classes[] = {"test.m.Net", "test.m.Sub", "test.m.Lin", "test.m.Junk"};
    for (size_t i = 0; i < sizeof classes / sizeof *classes; i++)
        CHECK_INT(ptc_policy_allow_global(policy, classes[i], &err), 0);
    for (int pass = 0; pass < 2; pass++) {
        open_flags = pass ? PTC_OPEN_SALVAGE : 0;
        test_main();
        test_defaults();
        test_refusals();
        test_dag();
        test_key_text_cap();
        test_many_nonpersistent();
        test_picks();
    }
    test_legacy_module_pid();
    test_hostile_corpus();
    test_alloc_failures();
    ptc_policy_free(policy);
    return check_exit("test_salvage_sd");
}
