/*
 * test_salvage_build.c - salvage (PTC_OPEN_SALVAGE) where a strict read has no counterpart: a
 * second BUILD on a symbolic object (applied as Python's default BUILD applies it), a tensor of
 * a subclass outside the policy (a plain tensor or Parameter), the reason a numpy array stays
 * symbolic (ptc_object_note and ptc_value_text), and an endless path that cannot be mapped
 * (/dev/zero, a FIFO) bounded by max_heap_bytes.
 *
 * The pickles are built here opcode by opcode. The merged states expected below are what
 * CPython 3's pickle.loads gives for the same bytes with stand-in classes (a plain class for the
 * dict states; one with __slots__ = ('s', 't', '__dict__') for the slot states), written out
 * here, never taken from ptc.
 */
#include "ptc/ptc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "archive/archive.h"
#include "check.h"
#include "pickle_build.h"

/* ---- building pickles (as test_salvage.c) ----------------------------------------------------- */

/* An ndarray as numpy 2 pickles it, C order. */
static void put_array(pk *b, const int32_t *shape, int ndim, const char *code, const char *order,
                      const uint8_t *raw, size_t n)
{
    put_array_as(b, false, "ndarray", 1, shape, ndim, code, order, false, raw, n);
}

/* A float32 tensor of two elements over storage "0" (torch.save's protocol-2 form). */
#define TENSOR0_ARGS                                                                               \
    "((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"                            \
    "0X\x03\x00\x00\x00"                                                                           \
    "cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89"                                                        \
    "ccollections\nOrderedDict\n)Rt"
#define TENSOR0 "ctorch._utils\n_rebuild_tensor_v2\n" TENSOR0_ARGS "R"
static const float W01[2] = {1.0f, 2.0f};

static char tmpdir[] = "/tmp/ptc-salvage-build-XXXXXX";

static void path_in_tmp(char *path, size_t n, const char *name)
{
    snprintf(path, n, "%s/%s", tmpdir, name);
}

/* Writes a torch zip checkpoint holding the pickle (PROTO 2 ... STOP added) and storage "0" of
 * two floats to path. */
static void write_zip(const char *path, const pk *pkl, bool with0)
{
    pk full = {0};
    PUT(&full, "\x80\x02");
    put(&full, pkl->p, pkl->n);
    PUT(&full, ".");
    ptc__zipw *w = NULL;
    ptc_error e;
    if (ptc__zipw_open(&w, path, "archive", &e) < 0 ||
        ptc__zipw_add(w, "data.pkl", full.p, full.n, &e) < 0 ||
        ptc__zipw_add(w, "version", "3\n", 2, &e) < 0 ||
        (with0 && ptc__zipw_add(w, "data/0", W01, sizeof W01, &e) < 0) ||
        ptc__zipw_finish(w, &e) < 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, e.message);
        abort();
    }
    free(full.p);
}

static int open_pickle(const pk *pkl, unsigned flags, const ptc_limits *lim, ptc_ckpt **c,
                       ptc_error *err)
{
    char path[256];
    path_in_tmp(path, sizeof path, "c.pth");
    /* Storage "0" only when the pickle names it (an unused record is refused). */
    bool names0 = false;
    for (size_t i = 0; i + 7 <= pkl->n && !names0; i++)
        names0 = memcmp(pkl->p + i, "storage", 7) == 0;
    write_zip(path, pkl, names0);
    ptc_open_params p;
    ptc_open_params_default(&p);
    p.flags = flags;
    p.limits = lim;
    *c = NULL;
    return ptc_ckpt_open(c, path, &p, err);
}

static int64_t int_at(const ptc_value *d, const char *key)
{
    int64_t v = -1;
    if (ptc_value_int(ptc_dict_get(d, key), &v) < 0)
        return -1;
    return v;
}

/* The keys of a dict, joined: "a,b,c". */
static const char *keys_of(const ptc_value *d, char *buf, size_t n)
{
    buf[0] = 0;
    for (size_t i = 0; i < ptc_value_len(d); i++) {
        const char *s;
        size_t len;
        if (ptc_value_str(ptc_dict_key(d, i), &s, &len) < 0)
            s = "?";
        if (i)
            strncat(buf, ",", n - strlen(buf) - 1);
        strncat(buf, s, n - strlen(buf) - 1);
    }
    return buf;
}

/* ---- D1: a second BUILD ----------------------------------------------------------------------- */

static void test_build_twice_dicts(void)
{
    /* (K() with BUILD {a:1, b:2} (memoised as 1) then BUILD {b:3, c:4}, that first state).
     * CPython: o.__dict__ == {'a': 1, 'b': 3, 'c': 4}; the first state is still {'a': 1, 'b': 2}. */
    pk b = {0};
    PUT(&b, "(cmod\nK\n)\x81q\x00}q\x01(X\x01\x00\x00\x00"
            "aK\x01X\x01\x00\x00\x00"
            "bK\x02ub}(X\x01\x00\x00\x00"
            "bK\x03X\x01\x00\x00\x00"
            "cK\x04ubh\x01t");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_pickle(&b, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *o = ptc_value_item(ptc_ckpt_root(c), 0);
    const ptc_value *first = ptc_value_item(ptc_ckpt_root(c), 1);
    const ptc_value *st = ptc_object_state(o);
    char keys[64];
    CHECK_INT(ptc_value_kind_of(st), PTC_VALUE_DICT);
    CHECK_STR(keys_of(st, keys, sizeof keys), "a,b,c");
    CHECK_INT(int_at(st, "a"), 1);
    CHECK_INT(int_at(st, "b"), 3);
    CHECK_INT(int_at(st, "c"), 4);
    CHECK(st != first);
    CHECK_STR(keys_of(first, keys, sizeof keys), "a,b");
    CHECK_INT(int_at(first, "b"), 2);
    ptc_ckpt_close(c);

    /* A false second state ({} or None) sets nothing: the first stays, the same node. */
    for (int k = 0; k < 2; k++) {
        b.n = 0;
        PUT(&b, "(cmod\nK\n)\x81q\x00}q\x01(X\x01\x00\x00\x00"
                "aK\x01ub");
        put(&b, k ? "N" : "}", 1);
        PUT(&b, "bh\x01t");
        CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
        CHECK(ptc_object_state(ptc_value_item(ptc_ckpt_root(c), 0)) ==
              ptc_value_item(ptc_ckpt_root(c), 1));
        ptc_ckpt_close(c);
    }

    /* nn.Module: the second _parameters replaces the first (__dict__.update), as torch's
     * state_dict() of the object shows only 'v'. */
    b.n = 0;
    PUT(&b,
        "ctorch.nn.modules.module\nModule\n)\x81}(X\x08\x00\x00\x00training\x88"
        "X\x0b\x00\x00\x00_parametersccollections\nOrderedDict\n)RX\x01\x00\x00\x00w" TENSOR0
        "sub}X\x0b\x00\x00\x00_parametersccollections\nOrderedDict\n)RX\x01\x00\x00\x00v" TENSOR0
        "ssb");
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    st = ptc_object_state(ptc_ckpt_root(c));
    CHECK_STR(keys_of(st, keys, sizeof keys), "training,_parameters");
    CHECK_STR(keys_of(ptc_dict_get(st, "_parameters"), keys, sizeof keys), "v");
    ptc_ckpt_close(c);
    free(b.p);
}

static void test_build_twice_slots(void)
{
    /* BUILD {a:1}, then (None, {s:5}). CPython: o.__dict__ == {'a': 1}, o.s == 5. */
    pk b = {0};
    PUT(&b, "cmod\nK\n)\x81q\x00}(X\x01\x00\x00\x00"
            "aK\x01ubN}(X\x01\x00\x00\x00sK\x05u\x86"
            "b");
    ptc_ckpt *c;
    ptc_error err;
    char keys[64];
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *st = ptc_object_state(ptc_ckpt_root(c));
    CHECK_INT(ptc_value_kind_of(st), PTC_VALUE_TUPLE);
    CHECK_INT(ptc_value_len(st), 2);
    CHECK_STR(keys_of(ptc_value_item(st, 0), keys, sizeof keys), "a");
    CHECK_STR(keys_of(ptc_value_item(st, 1), keys, sizeof keys), "s");
    CHECK_INT(int_at(ptc_value_item(st, 1), "s"), 5);
    ptc_ckpt_close(c);

    /* ({a:1}, {s:1}), then ({b:2}, {s:2, t:3}). CPython: __dict__ {'a': 1, 'b': 2}, s 2, t 3. */
    b.n = 0;
    PUT(&b, "cmod\nK\n)\x81q\x00}(X\x01\x00\x00\x00"
            "aK\x01u}(X\x01\x00\x00\x00sK\x01u\x86"
            "b"
            "}(X\x01\x00\x00\x00"
            "bK\x02u}(X\x01\x00\x00\x00sK\x02X\x01\x00\x00\x00tK\x03u\x86"
            "b");
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    st = ptc_object_state(ptc_ckpt_root(c));
    CHECK_INT(ptc_value_len(st), 2);
    CHECK_STR(keys_of(ptc_value_item(st, 0), keys, sizeof keys), "a,b");
    CHECK_STR(keys_of(ptc_value_item(st, 1), keys, sizeof keys), "s,t");
    CHECK_INT(int_at(ptc_value_item(st, 1), "s"), 2);
    CHECK_INT(int_at(ptc_value_item(st, 1), "t"), 3);
    ptc_ckpt_close(c);
    free(b.p);
}

/* States that are not dicts or (dict, slots) pairs: what the class's __setstate__ does with two
 * of them is unknown, so the file is refused rather than read with either state. */
static void test_build_twice_refused(void)
{
#define CASE(lit)                                                                                  \
    {                                                                                              \
        lit, sizeof(lit) - 1                                                                       \
    }
    static const struct {
        const char *p;
        size_t n;
    } cases[] = {
        /* a list, then a dict */
        CASE("cmod\nK\n)\x81q\x00]K\x01\x61"
             "b}(X\x01\x00\x00\x00"
             "aK\x01ub"),
        /* a dict, then a 3-tuple */
        CASE("cmod\nK\n)\x81q\x00}(X\x01\x00\x00\x00"
             "aK\x01ubK\x01K\x02K\x03\x87"
             "b"),
        /* (dict, int) pair */
        CASE("cmod\nK\n)\x81q\x00}(X\x01\x00\x00\x00"
             "aK\x01ub}K\x07\x86"
             "b"),
    };
#undef CASE
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pk b = {0};
        put(&b, cases[i].p, cases[i].n);
        ptc_ckpt *c;
        ptc_error err;
        CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EFORMAT, &err);
        if (!strstr(err.message, "second BUILD on a symbolic mod.K object")) {
            check_failures++;
            fprintf(stderr, "case %zu: message %s\n", i, err.message);
        }
        free(b.p);
    }
}

/* Repeated BUILDs of a big state copy it each time: every pair copied counts against
 * max_objects. 50 ints in the first state, then 50 BUILDs of one pair: about 250 values made by
 * the pickle, about 2600 with the copies. */
static void test_build_twice_bounded(void)
{
    pk b = {0};
    PUT(&b, "cmod\nK\n)\x81q\x00}(");
    for (int i = 0; i < 50; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%02d", i);
        put_str(&b, k);
        PUT(&b, "K\x01");
    }
    PUT(&b, "ub");
    for (int i = 0; i < 50; i++)
        PUT(&b, "}X\x01\x00\x00\x00zK\x02sb");
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_objects = 1000;
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, &lim, &c, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "limit of 1000 objects") != NULL);
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    CHECK_INT(ptc_value_len(ptc_object_state(ptc_ckpt_root(c))), 51);
    ptc_ckpt_close(c);
    free(b.p);
}

/* ---- D5: a tensor subclass outside the policy ------------------------------------------------- */

static void test_tensor_subclass(void)
{
    /* {'a': _rebuild_from_type_v2(_rebuild_tensor_v2, __main__.Sub, args, {'x': 1}),
     *  'b': the same with the state {'__class__': 1}, which a strict read would refuse: the
     *  subclass's state is not applied, so nothing of it is checked}. torch writes a Parameter
     *  subclass as a plain Parameter (_rebuild_parameter), so func is a tensor rebuild here. */
    pk b = {0};
    PUT(&b, "}(X\x01\x00\x00\x00"
            "actorch._tensor\n_rebuild_from_type_v2\n"
            "(ctorch._utils\n_rebuild_tensor_v2\nc__main__\nSub\n" TENSOR0_ARGS
            "}X\x01\x00\x00\x00xK\x01stR"
            "X\x01\x00\x00\x00"
            "bctorch._tensor\n_rebuild_from_type_v2\n"
            "(ctorch._utils\n_rebuild_tensor_v2\nc__main__\nSub\n" TENSOR0_ARGS
            "}X\t\x00\x00\x00__class__K\x01stRu");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_pickle(&b, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    CHECK(strstr(err.message, "__main__.Sub") != NULL);
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c);
    for (int k = 0; k < 2; k++) {
        const ptc_value *v = ptc_dict_get(root, k ? "b" : "a");
        const ptc_tensor *t = ptc_value_tensor(v);
        CHECK(t != NULL);
        if (!t)
            continue;
        float got[2] = {0, 0};
        CHECK_CODE(ptc_tensor_read(t, got, sizeof got, &err), 0, &err);
        CHECK(got[0] == 1.0f && got[1] == 2.0f);
        CHECK_INT(ptc_tensor_is_parameter(t), 0);
    }
    CHECK_INT(ptc_ckpt_nsymbols(c), 1);
    if (ptc_ckpt_nsymbols(c) == 1) {
        CHECK_STR(ptc_ckpt_symbol(c, 0)->global, "__main__.Sub");
        CHECK_INT(ptc_ckpt_symbol(c, 0)->refs, 2);
    }
    ptc_ckpt_close(c);
    free(b.p);
}

/* ---- D6: why a numpy array stays symbolic ----------------------------------------------------- */

typedef struct text_buf {
    char s[512];
    size_t n;
} text_buf;

static int text_write(void *ctx, const void *p, size_t n)
{
    text_buf *t = ctx;
    if (n >= sizeof t->s - t->n)
        return PTC_ELIMIT;
    memcpy(t->s + t->n, p, n);
    t->n += n;
    t->s[t->n] = 0;
    return 0;
}

static void test_numpy_notes(void)
{
    static const int32_t s24[2] = {2, 4}, neg[2] = {-2, 4}, huge[3] = {1 << 30, 1 << 30, 1 << 30};
    uint8_t raw[48] = {0};
    static const struct {
        const int32_t *shape;
        int ndim;
        const char *code, *order;
        size_t n;
        const char *note;
    } cases[] = {
        {s24, 2, "f4", "<", 24, "its data holds 24 bytes; its shape and dtype need 32"},
        {neg, 2, "f4", "<", 24, "dimension 0 of its shape is not a non-negative int"},
        {huge, 3, "f8", "<", 8, "the number of elements of its shape overflows"},
        {s24, 2, "U5", "<", 40, "dtype '<U5' has no tensor dtype"},
        {s24, 2, "O8", "|", 48, "dtype '|O8' has no tensor dtype"},
        {s24, 2, "S3", "|", 24, "dtype '|S3' has no tensor dtype"},
        {s24, 2, "M8", "<", 48, "dtype '<M8' has no tensor dtype"},
        {s24, 2, "f4", "|", 32, "dtype 'f4' has byte order '|'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pk b = {0};
        put_array(&b, cases[i].shape, cases[i].ndim, cases[i].code, cases[i].order, raw,
                  cases[i].n);
        ptc_ckpt *c;
        ptc_error err;
        CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
        const ptc_value *root = ptc_ckpt_root(c);
        CHECK_INT(ptc_value_kind_of(root), PTC_VALUE_OBJECT);
        CHECK_STR(ptc_object_note(root), cases[i].note);
        ptc_ckpt_close(c);
        free(b.p);
    }
    /* A symbolic dtype (another class where the numpy.dtype goes), shown by ptc_value_text. */
    pk b = {0};
    PUT(&b, "cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85");
    put_bytes(&b, (const uint8_t *)"b", 1);
    PUT(&b, "\x87R(K\x01(K\x02tcevil\nDType\n)R\x89");
    put_bytes(&b, raw, 8);
    PUT(&b, "tb");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    CHECK_STR(ptc_object_note(ptc_ckpt_root(c)), "its dtype is not a numpy.dtype object");
    text_buf t = {{0}, 0};
    CHECK_CODE(ptc_value_text(ptc_ckpt_root(c), 0, NULL, text_write, &t, &err), 0, &err);
    const char *text = t.s;
    CHECK_STR(text, "<numpy._core.multiarray._reconstruct object> (numpy array left symbolic: its "
                    "dtype is not a numpy.dtype object)");
    /* The state-dict extraction says why when it is pointed at such an array. */
    ptc_doc *d = NULL;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    const ptc_value *sd = NULL;
    const char *chosen = NULL;
    CHECK_INT(ptc_salvage_state_dict(d, ptc_ckpt_root(c), "", NULL, &sd, &chosen, &err),
              PTC_ENOTFOUND);
    CHECK(strstr(err.message, "of numpy._core.multiarray._reconstruct (left symbolic: its dtype "
                              "is not a numpy.dtype object), neither a module") != NULL);
    ptc_doc_free(d);
    /* Any other object has no note; neither has NULL nor a non-object. */
    CHECK(ptc_object_note(ptc_object_args(ptc_ckpt_root(c))) == NULL);
    CHECK(ptc_object_note(NULL) == NULL);
    ptc_ckpt_close(c);
    b.n = 0;
    PUT(&b, "cmod\nK\n)R");
    CHECK_CODE(open_pickle(&b, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    CHECK(ptc_object_note(ptc_ckpt_root(c)) == NULL);
    ptc_ckpt_close(c);
    free(b.p);
}

/* ---- E: a path that cannot be mapped ---------------------------------------------------------- */

/* A FIFO written by a child: n bytes of file (repeated), then closed. */
static pid_t feed_fifo(const char *fifo, const uint8_t *file, size_t len, size_t n)
{
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        int fd = open(fifo, O_WRONLY);
        size_t done = 0;
        while (fd >= 0 && done < n) {
            size_t k = n - done < len ? n - done : len;
            ssize_t w = write(fd, file, k);
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        _exit(done == n ? 0 : 1);
    }
    return child;
}

static void test_unmappable(void)
{
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_heap_bytes = 1 << 20;
    ptc_open_params p;
    ptc_open_params_default(&p);
    p.limits = &lim;
    ptc_verify_params vp;
    ptc_verify_params_default(&vp);
    vp.limits = &lim;
    ptc_ckpt *c = NULL;
    ptc_report *r = NULL;
    ptc_error err;
    /* /dev/zero never ends: the read stops one byte past the heap limit. */
    CHECK_CODE(ptc_ckpt_open(&c, "/dev/zero", &p, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "more than 1048576 bytes") != NULL);
    CHECK(strstr(err.message, "max_heap_bytes") != NULL);
    CHECK_CODE(ptc_verify(&r, "/dev/zero", &vp, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "max_heap_bytes") != NULL);

    /* A FIFO holding a real checkpoint under the limit opens; one with 2 MiB does not. */
    char path[256], fifo[256];
    path_in_tmp(path, sizeof path, "w.pth");
    path_in_tmp(fifo, sizeof fifo, "fifo");
    pk b = {0};
    PUT(&b, "}X\x01\x00\x00\x00w" TENSOR0 "s");
    write_zip(path, &b, true);
    free(b.p);
    FILE *f = fopen(path, "rb");
    uint8_t file[4096];
    size_t len = f ? fread(file, 1, sizeof file, f) : 0;
    if (f)
        fclose(f);
    CHECK(len > 0 && len < sizeof file);
    CHECK_INT(mkfifo(fifo, 0600), 0);
    pid_t child = feed_fifo(fifo, file, len, len);
    CHECK_CODE(ptc_ckpt_open(&c, fifo, &p, &err), 0, &err);
    CHECK_INT(ptc_value_len(ptc_ckpt_root(c)), 1);
    ptc_ckpt_close(c);
    int status = 1;
    waitpid(child, &status, 0);
    CHECK_INT(status, 0);
    child = feed_fifo(fifo, file, len, (size_t)2 << 20);
    CHECK_CODE(ptc_ckpt_open(&c, fifo, &p, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "more than 1048576 bytes") != NULL);
    kill(child, SIGKILL); /* it may still be blocked writing what was not read */
    waitpid(child, &status, 0);
    unlink(fifo);
    unlink(path);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_build_twice_dicts();
    test_build_twice_slots();
    test_build_twice_refused();
    test_build_twice_bounded();
    test_tensor_subclass();
    test_numpy_notes();
    test_unmappable();
    char path[256];
    path_in_tmp(path, sizeof path, "c.pth");
    unlink(path);
    rmdir(tmpdir);
    return check_exit("test_salvage_build");
}
