/*
 * test_salvage_cycle.c - cycles read with PTC_OPEN_SALVAGE, on pickles built here opcode by
 * opcode: an object whose state holds itself, a list appended to itself inside a symbolic object,
 * OmegaConf-like parent pointers (a Lightning checkpoint's hparams), a memo DAG with a cycle, a
 * tuple dict key that points back (the dict re-indexed), a callable that points back, a plain dict
 * that holds itself, and a billion-laughs DAG over a cycle. Salvage cuts each back edge of the
 * depth-first walk and puts a placeholder there (ptc.h "Cycles"); a strict open still refuses
 * each file: PTC_EUNSAFE for its globals, and PTC_EFORMAT for the cycle itself when a policy
 * allows the classes. Expected trees are written out here, never taken from ptc.
 */
#include "ptc/ptc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "archive/archive.h"
#include "check.h"
#include "pickle_build.h"

/* ---- building pickles and opening them (as test_salvage.c does) ------------------------------ */

static void begin(pk *b)
{
    b->n = 0;
    PUT(b, "\x80\x02");
}

/* A float32 tensor of two elements over storage "0" (torch.save's protocol-2 form). */
#define TENSOR0                                                                                    \
    "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"          \
    "X\x01\x00\x00\x00"                                                                            \
    "0X\x03\x00\x00\x00"                                                                           \
    "cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89"                                                        \
    "ccollections\nOrderedDict\n)RtR"
static const float W01[2] = {1.0f, 2.0f};

static char tmpdir[] = "/tmp/ptc-salvage-cycle-XXXXXX";

/* Writes a torch zip checkpoint holding the pickle and, when it names a storage, storage "0" of
 * two floats, and opens it with flags, the policy (NULL: default) and limits (NULL: default). */
static int open_zip(const pk *pkl, unsigned flags, const ptc_policy *pol, const ptc_limits *lim,
                    ptc_ckpt **c, ptc_error *err)
{
    char path[256];
    snprintf(path, sizeof path, "%s/c.pth", tmpdir);
    ptc__zipw *w = NULL;
    ptc_error e;
    if (ptc__zipw_open(&w, path, "archive", &e) < 0 ||
        ptc__zipw_add(w, "data.pkl", pkl->p, pkl->n, &e) < 0 ||
        ptc__zipw_add(w, "version", "3\n", 2, &e) < 0 ||
        (memmem(pkl->p, pkl->n, "FloatStorage", 12) &&
         ptc__zipw_add(w, "data/0", W01, sizeof W01, &e) < 0) ||
        ptc__zipw_finish(w, &e) < 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, e.message);
        abort();
    }
    ptc_open_params p;
    ptc_open_params_default(&p);
    p.flags = flags;
    p.policy = pol;
    p.limits = lim;
    *c = NULL;
    return ptc_ckpt_open(c, path, &p, err);
}

/* A policy that allows the given "module.name"s (NULL-terminated): the strict reader then runs
 * the pickle and meets the cycle itself. */
static ptc_policy *allowing(const char *const *names)
{
    ptc_policy *p = NULL;
    ptc_error err;
    CHECK_CODE(ptc_policy_new(&p, PTC_POLICY_DEFAULT, &err), 0, &err);
    for (; *names; names++)
        CHECK_CODE(ptc_policy_allow_global(p, *names, &err), 0, &err);
    return p;
}

/* The strict open refuses the pickle: PTC_EUNSAFE with the default policy, and, when allow is
 * not NULL, PTC_EFORMAT naming a cycle with a policy that allows those classes. */
static void strict_refuses(const pk *b, const char *const *allow)
{
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(b, 0, NULL, NULL, &c, &err), PTC_EUNSAFE, &err);
    if (!allow)
        return;
    ptc_policy *p = allowing(allow);
    CHECK_CODE(open_zip(b, 0, p, NULL, &c, &err), PTC_EFORMAT, &err);
    if (!strstr(err.message, "contains a cycle")) {
        fprintf(stderr, "strict refusal without a cycle: %s\n", err.message);
        CHECK(0);
    }
    ptc_policy_free(p);
}

/* v is a placeholder whose name is want. */
static void check_backref(const ptc_value *v, const char *want)
{
    CHECK_INT(ptc_value_kind_of(v), PTC_VALUE_GLOBAL);
    CHECK_INT(ptc_value_is_symbolic(v), 1);
    CHECK_INT(ptc_value_is_back_reference(v), 1);
    CHECK_STR(ptc_value_global_name(v), want);
    CHECK(ptc_object_callable(v) == NULL && ptc_value_len(v) == 0);
}

static void check_w01(const ptc_value *v)
{
    const ptc_tensor *t = ptc_value_tensor(v);
    float got[2] = {0, 0};
    ptc_error err;
    CHECK(t != NULL);
    if (t)
        CHECK_CODE(ptc_tensor_read(t, got, sizeof got, &err), 0, &err);
    CHECK(got[0] == W01[0] && got[1] == W01[1]);
}

typedef struct text {
    char s[256];
    size_t n;
} text;

static int text_write(void *ctx, const void *p, size_t n)
{
    text *t = ctx;
    if (n >= sizeof t->s - t->n)
        return -1;
    memcpy(t->s + t->n, p, n);
    t->n += n;
    t->s[t->n] = '\0';
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------------ */

/* x = m.f(); x.__dict__ = {'self': x, 'w': tensor}: the state's edge back to x is cut. */
static void test_self_state(void)
{
    static const char *const allow[] = {"m.f", NULL};
    pk b = {0};
    begin(&b);
    PUT(&b, "cm\nf\n)\x81q\x00}(X\x04\x00\x00\x00selfh\x00X\x01\x00\x00\x00w" TENSOR0 "ub.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c), *st = ptc_object_state(root);
    CHECK_STR(ptc_value_global_name(root), "m.f");
    CHECK_INT(ptc_value_is_back_reference(root), 0);
    check_backref(ptc_dict_get(st, "self"), "<back-reference to an enclosing m.f object>");
    check_w01(ptc_dict_get(st, "w"));
    /* ptc inspect's text of the placeholder says what it is. */
    text t = {{0}, 0};
    CHECK_CODE(
        ptc_value_text(ptc_dict_get(st, "self"), PTC_TEXT_ESCAPE, NULL, text_write, &t, &err), 0,
        &err);
    CHECK_STR(t.s, "<back-reference to an enclosing m.f object>");
    /* The placeholder is never written back. */
    char path[300];
    snprintf(path, sizeof path, "%s/out.pth", tmpdir);
    CHECK(ptc_save(st, path, NULL, &err) == PTC_EINVAL);
    ptc_ckpt_close(c);
    /* A class the policy allows is no symbol, and its cycle is cut the same way. */
    ptc_policy *p = allowing(allow);
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, p, NULL, &c, &err), 0, &err);
    root = ptc_ckpt_root(c);
    CHECK_INT(ptc_value_is_symbolic(root), 0);
    check_backref(ptc_dict_get(ptc_object_state(root), "self"),
                  "<back-reference to an enclosing m.f object>");
    CHECK_INT(ptc_ckpt_nsymbols(c), 0);
    ptc_ckpt_close(c);
    ptc_policy_free(p);
    strict_refuses(&b, allow);
    /* The state is the object itself (BUILD x with x). */
    begin(&b);
    PUT(&b, "cm\nf\n)Rq\x00h\x00"
            "b.");
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    check_backref(ptc_object_state(ptc_ckpt_root(c)),
                  "<back-reference to an enclosing m.f object>");
    ptc_ckpt_close(c);
    strict_refuses(&b, allow);
    free(b.p);
}

/* m.f() whose state is l = [1, l]: the list's edge to itself is cut, inside the object. */
static void test_list_in_object(void)
{
    static const char *const allow[] = {"m.f", NULL};
    pk b = {0};
    begin(&b);
    PUT(&b, "cm\nf\n)R]q\x01(K\x01h\x01"
            "eb.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    const ptc_value *l = ptc_object_state(ptc_ckpt_root(c));
    CHECK_INT(ptc_value_kind_of(l), PTC_VALUE_LIST);
    CHECK_INT(ptc_value_len(l), 2);
    int64_t one = 0;
    CHECK_CODE(ptc_value_int(ptc_value_item(l, 0), &one), 0, NULL);
    CHECK_INT(one, 1);
    check_backref(ptc_value_item(l, 1), "<back-reference to an enclosing list>");
    ptc_ckpt_close(c);
    strict_refuses(&b, allow);
    free(b.p);
}

/* {'hparams': DictConfig, 'state_dict': {'w': tensor}} where the DictConfig's _content holds a
 * ListConfig and an AnyNode whose _parent is the DictConfig, and the ListConfig's item's _parent
 * the ListConfig: OmegaConf as a Lightning checkpoint pickles it. */
static void test_omegaconf_parents(void)
{
    static const char *const allow[] = {"omegaconf.dictconfig.DictConfig",
                                        "omegaconf.listconfig.ListConfig",
                                        "omegaconf.nodes.AnyNode", NULL};
    pk b = {0};
    begin(&b);
    PUT(&b, "}q\x00(");
    put_str(&b, "hparams");
    PUT(&b, "comegaconf.dictconfig\nDictConfig\nq\x01)\x81q\x02}(");
    put_str(&b, "_parent");
    PUT(&b, "N");
    put_str(&b, "_content");
    PUT(&b, "}(");
    put_str(&b, "a");
    /* a: ListConfig(_parent=DictConfig, _content=[AnyNode(_parent=ListConfig, _val=1)]) */
    PUT(&b, "comegaconf.listconfig\nListConfig\n)\x81q\x03}(");
    put_str(&b, "_parent");
    PUT(&b, "h\x02");
    put_str(&b, "_content");
    PUT(&b, "](comegaconf.nodes\nAnyNode\nq\x04)\x81}(");
    put_str(&b, "_parent");
    PUT(&b, "h\x03");
    put_str(&b, "_val");
    PUT(&b, "K\x01ubeub");
    /* b: AnyNode(_parent=DictConfig, _val=2) */
    put_str(&b, "b");
    PUT(&b, "h\x04)\x81}(");
    put_str(&b, "_parent");
    PUT(&b, "h\x02");
    put_str(&b, "_val");
    PUT(&b, "K\x02ubuub");
    put_str(&b, "state_dict");
    PUT(&b, "}(X\x01\x00\x00\x00w" TENSOR0 "uu.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c);
    const ptc_value *hp = ptc_dict_get(root, "hparams");
    CHECK_STR(ptc_value_global_name(hp), "omegaconf.dictconfig.DictConfig");
    const ptc_value *content = ptc_dict_get(ptc_object_state(hp), "_content");
    const ptc_value *a = ptc_dict_get(content, "a"), *bn = ptc_dict_get(content, "b");
    CHECK_STR(ptc_value_global_name(a), "omegaconf.listconfig.ListConfig");
    const ptc_value *up_a = ptc_dict_get(ptc_object_state(a), "_parent");
    const ptc_value *up_b = ptc_dict_get(ptc_object_state(bn), "_parent");
    check_backref(up_a, "<back-reference to an enclosing omegaconf.dictconfig.DictConfig object>");
    /* One placeholder per object pointed back to. */
    CHECK(up_a == up_b);
    const ptc_value *item = ptc_value_item(ptc_dict_get(ptc_object_state(a), "_content"), 0);
    check_backref(ptc_dict_get(ptc_object_state(item), "_parent"),
                  "<back-reference to an enclosing omegaconf.listconfig.ListConfig object>");
    CHECK(ptc_dict_get(ptc_object_state(hp), "_parent") != NULL);
    CHECK_INT(ptc_value_kind_of(ptc_dict_get(ptc_object_state(hp), "_parent")), PTC_VALUE_NONE);
    check_w01(ptc_dict_get(ptc_dict_get(root, "state_dict"), "w"));
    /* The walk of tensors ends, and finds the weight. */
    ptc_walk *w = NULL;
    const char *path;
    const ptc_tensor *t;
    CHECK_CODE(ptc_walk_new(&w, root, &err), 0, &err);
    int n = 0, rc;
    while ((rc = ptc_walk_next(w, &path, &t)) > 0) {
        n++;
        CHECK_STR(path, "state_dict.w");
    }
    CHECK_INT(rc, 0);
    CHECK_INT(n, 1);
    ptc_walk_free(w);
    ptc_ckpt_close(c);
    strict_refuses(&b, allow);
    free(b.p);
}

/* l = [x]; x = m.f() with state {'up': l}; root (l, l): the memo shares l, the cut inside x is
 * seen from both paths, and the same file gives the same tree each time. */
static void test_dag_with_cycle(void)
{
    static const char *const allow[] = {"m.f", NULL};
    pk b = {0};
    begin(&b);
    PUT(&b, "]q\x00"
            "cm\nf\n)\x81q\x01}X\x02\x00\x00\x00uph\x00sbah\x00h\x00\x86.");
    for (int round = 0; round < 2; round++) {
        ptc_ckpt *c;
        ptc_error err;
        CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
        const ptc_value *root = ptc_ckpt_root(c);
        const ptc_value *l0 = ptc_value_item(root, 0), *l1 = ptc_value_item(root, 1);
        CHECK(l0 == l1);
        CHECK_INT(ptc_value_len(l0), 1);
        const ptc_value *x = ptc_value_item(l0, 0);
        CHECK_STR(ptc_value_global_name(x), "m.f");
        check_backref(ptc_dict_get(ptc_object_state(x), "up"),
                      "<back-reference to an enclosing list>");
        ptc_ckpt_close(c);
    }
    strict_refuses(&b, allow);
    /* A billion laughs over a cycle: y(k+1) = (y(k), y(k)) 40 times from y0 = x above. The cut
     * leaves the DAG, whose expansion is still refused. */
    begin(&b);
    PUT(&b, "cm\nf\n)\x81q\x00}X\x02\x00\x00\x00uph\x00sbq\x01");
    for (int i = 0; i < 40; i++)
        PUT(&b, "h\x01h\x01\x86q\x01");
    PUT(&b, ".");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), PTC_ELIMIT, &err);
    /* So is a cycle that nests deeper than max_depth before it closes. */
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_depth = 8;
    begin(&b);
    PUT(&b, "]q\x00");
    for (int i = 0; i < 12; i++) /* l0 holds l1 ... holds l12, which holds l0 */
        PUT(&b, "]");
    PUT(&b, "h\x00");
    for (int i = 0; i < 13; i++)
        PUT(&b, "a");
    PUT(&b, ".");
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, &lim, &c, &err), PTC_ELIMIT, &err);
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    ptc_ckpt_close(c);
    free(b.p);
}

/* x = m.f() with state d = {'k0': 0, ..., 'k8': 8, (x,): 9}: the key tuple's edge back to x is
 * cut, the dict (past 8 pairs: indexed) is re-indexed, and its str keys are still found. */
static void test_key_cut(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "cm\nf\n)\x81q\x00}q\x01(");
    for (int i = 0; i < 9; i++) {
        char k[4] = {'k', (char)('0' + i), 0, 0};
        put_str(&b, k);
        uint8_t v[2] = {'K', (uint8_t)i};
        put(&b, v, 2);
    }
    PUT(&b, "h\x00\x85K\x09ub.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    const ptc_value *d = ptc_object_state(ptc_ckpt_root(c));
    CHECK_INT(ptc_value_len(d), 10);
    for (int i = 0; i < 9; i++) {
        char k[3] = {'k', (char)('0' + i), 0};
        int64_t v = -1;
        CHECK_CODE(ptc_value_int(ptc_dict_get(d, k), &v), 0, NULL);
        CHECK_INT(v, i);
    }
    const ptc_value *key = ptc_dict_key(d, 9);
    CHECK_INT(ptc_value_kind_of(key), PTC_VALUE_TUPLE);
    check_backref(ptc_value_item(key, 0), "<back-reference to an enclosing m.f object>");
    ptc_ckpt_close(c);
    strict_refuses(&b, NULL);
    free(b.p);
}

/* c = m.f(); x = c(); c.__setstate__(x); root (c, x): the walk meets c first, so x's callable is
 * the edge cut, and x still names its class. */
static void test_callable_cut(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "cm\nf\n)Rq\x00h\x00)Rq\x01"
            "bh\x01\x86.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    const ptc_value *cc = ptc_value_item(ptc_ckpt_root(c), 0),
                    *x = ptc_value_item(ptc_ckpt_root(c), 1);
    CHECK(ptc_object_state(cc) == x);
    check_backref(ptc_object_callable(x), "<back-reference to an enclosing m.f object>");
    CHECK_STR(ptc_value_global_name(x), "m.f");
    ptc_ckpt_close(c);
    strict_refuses(&b, NULL);
    free(b.p);
}

/* d = {'s': d}, all allowed: a strict open refuses the cycle, salvage cuts it (and has no
 * symbol). */
static void test_plain_dict(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "}q\x00X\x01\x00\x00\x00sh\x00s.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, 0, NULL, NULL, &c, &err), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "contains a cycle") != NULL);
    CHECK_CODE(open_zip(&b, PTC_OPEN_SALVAGE, NULL, NULL, &c, &err), 0, &err);
    check_backref(ptc_dict_get(ptc_ckpt_root(c), "s"), "<back-reference to an enclosing dict>");
    CHECK_INT(ptc_ckpt_nsymbols(c), 0);
    ptc_ckpt_close(c);
    free(b.p);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    CHECK_INT(ptc_value_is_back_reference(NULL), 0);
    test_self_state();
    test_list_in_object();
    test_omegaconf_parents();
    test_dag_with_cycle();
    test_key_cut();
    test_callable_cut();
    test_plain_dict();
    char path[300];
    snprintf(path, sizeof path, "%s/c.pth", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/out.pth", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    return check_exit("test_salvage_cycle");
}
