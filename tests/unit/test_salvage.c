/*
 * test_salvage.c - symbolic reading (PTC_OPEN_SALVAGE) through the public API, on pickles built
 * here opcode by opcode: a whole module object, an os.system payload next to the weights, objects
 * as dict keys, a callable that is an object, numpy arrays of every dtype ptc maps (big-endian,
 * Fortran order, 0-d, empty, scalars), numpy states left symbolic, dict and list subclasses, the symbol table (offsets,
 * counts, escaping, its cap), the limits of the strict machine, the legacy stream, and that
 * nothing changes without the flag. Expected values are written out here (the pickles are
 * numpy 2.4's and torch 2.6's protocol-2 forms, studied with pickletools), never taken from ptc.
 */
#include "ptc/ptc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "archive/archive.h"
#include "check.h"
#include "pickle_build.h"

/* ---- building pickles ------------------------------------------------------------------------- */

static void put_array(pk *b, bool np1, const int32_t *shape, int ndim, const char *code,
                      const char *order, bool fortran, const void *raw, size_t n)
{
    put_array_as(b, np1, "ndarray", 1, shape, ndim, code, order, fortran, raw, n);
}

/* A float32 tensor of two elements over storage "0" (torch.save's protocol-2 form). */
#define TENSOR0                                                                                    \
    "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"          \
    "X\x01\x00\x00\x00"                                                                            \
    "0X\x03\x00\x00\x00"                                                                           \
    "cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89"                                                        \
    "ccollections\nOrderedDict\n)RtR"
static const float W01[2] = {1.0f, 2.0f};

/* ---- opening --------------------------------------------------------------------------------- */

static char tmpdir[] = "/tmp/ptc-salvage-XXXXXX";

/* Writes a torch zip checkpoint holding the pickle (and storage "0" of two floats when with0,
 * and an extra record when extra is not NULL) and opens it with flags and limits (NULL:
 * default). */
static int open_zip(const pk *pkl, bool with0, const char *extra, unsigned flags,
                    const ptc_limits *lim, ptc_ckpt **c, ptc_error *err)
{
    char path[256];
    snprintf(path, sizeof path, "%s/c.pth", tmpdir);
    ptc__zipw *w = NULL;
    ptc_error e;
    if (ptc__zipw_open(&w, path, "archive", &e) < 0 ||
        ptc__zipw_add(w, "data.pkl", pkl->p, pkl->n, &e) < 0 ||
        ptc__zipw_add(w, "version", "3\n", 2, &e) < 0 ||
        (with0 && ptc__zipw_add(w, "data/0", W01, sizeof W01, &e) < 0) ||
        (extra && ptc__zipw_add(w, extra, "x", 1, &e) < 0) || ptc__zipw_finish(w, &e) < 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, e.message);
        abort();
    }
    ptc_open_params p;
    ptc_open_params_default(&p);
    p.flags = flags;
    p.limits = lim;
    *c = NULL;
    return ptc_ckpt_open(c, path, &p, err);
}

/* The pickle wrapped in PROTO 2 ... STOP. */
static void begin(pk *b)
{
    b->n = 0;
    PUT(b, "\x80\x02");
}
static void end(pk *b)
{
    PUT(b, ".");
}

static void check_w01(const ptc_value *v)
{
    const ptc_tensor *t = ptc_value_tensor(v);
    CHECK(t != NULL);
    if (!t)
        return;
    float got[2] = {0, 0};
    ptc_error err;
    CHECK_INT(ptc_tensor_numel(t), 2);
    CHECK_CODE(ptc_tensor_read(t, got, sizeof got, &err), 0, &err);
    CHECK(got[0] == W01[0] && got[1] == W01[1]);
}

/* The offset of the first occurrence of needle in the pickle. */
static int64_t offset_of(const pk *b, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= b->n; i++)
        if (memcmp(b->p + i, needle, n) == 0)
            return (int64_t)i;
    return -1;
}

/* ---- tests ------------------------------------------------------------------------------------ */

/* torch.save(model): NEWOBJ of the module class, BUILD with its __dict__. */
static void test_module_object(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "c__main__\nNet\nq\x00)\x81q\x01}q\x02(X\x08\x00\x00\x00trainingq\x03\x88"
            "X\x0b\x00\x00\x00_parametersccollections\nOrderedDict\n)R"
            "X\x06\x00\x00\x00weight" TENSOR0 "sX\x08\x00\x00\x00_modules}ub");
    end(&b);
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, true, NULL, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    CHECK(strstr(err.message, "__main__.Net") != NULL);
    CHECK_INT(ptc_ckpt_nsymbols(c), 0);
    CHECK_CODE(open_zip(&b, true, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c);
    CHECK_INT(ptc_value_kind_of(root), PTC_VALUE_OBJECT);
    CHECK_INT(ptc_value_is_symbolic(root), 1);
    CHECK_STR(ptc_value_global_name(root), "__main__.Net");
    const ptc_value *cls = ptc_object_callable(root);
    CHECK_INT(ptc_value_kind_of(cls), PTC_VALUE_GLOBAL);
    CHECK_INT(ptc_value_is_symbolic(cls), 1);
    CHECK_INT(ptc_value_len(ptc_object_args(root)), 0);
    const ptc_value *state = ptc_object_state(root);
    CHECK_INT(ptc_value_kind_of(state), PTC_VALUE_DICT);
    const ptc_value *params = ptc_dict_get(state, "_parameters");
    CHECK(params && ptc_dict_is_ordered(params));
    CHECK_INT(ptc_value_is_symbolic(params), 0);
    check_w01(ptc_dict_get(params, "weight"));
    CHECK_INT(ptc_ckpt_nsymbols(c), 1);
    const ptc_symbol *s = ptc_ckpt_symbol(c, 0);
    CHECK(s != NULL && ptc_ckpt_symbol(c, 1) == NULL);
    if (s) {
        CHECK_STR(s->global, "__main__.Net");
        CHECK_STR(s->member, "data.pkl");
        CHECK_INT(s->offset, 2);
        CHECK_INT(s->refs, 1);
        CHECK_INT(s->calls, 1);
    }
    CHECK_INT(ptc_ckpt_symbols_dropped(c), 0);
    /* Never written back. */
    char path[256];
    snprintf(path, sizeof path, "%s/out.pth", tmpdir);
    CHECK_CODE(ptc_save(root, path, NULL, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_save(cls, path, NULL, &err), PTC_EINVAL, &err);
    CHECK(access(path, F_OK) != 0);
    ptc_ckpt_close(c);
    free(b.p);
}

/* A __reduce__ payload (posix.system, a blocked module) beside the weights: the weights come out,
 * the payload is a name with its offset and one call, and the file is still unsafe. */
static void test_payload(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "}q\x00(X\x03\x00\x00\x00pwncposix\nsystem\nq\x01X\x08\x00\x00\x00touch /x\x85R"
            "X\x01\x00\x00\x00w" TENSOR0 "X\x04\x00\x00\x00morecposix\nsystem\nu.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, true, NULL, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    CHECK_CODE(open_zip(&b, true, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c);
    check_w01(ptc_dict_get(root, "w"));
    const ptc_value *pwn = ptc_dict_get(root, "pwn");
    CHECK_STR(ptc_value_global_name(pwn), "posix.system");
    CHECK_INT(ptc_value_kind_of(pwn), PTC_VALUE_OBJECT);
    const char *arg = NULL;
    size_t n = 0;
    CHECK_CODE(ptc_value_str(ptc_value_item(ptc_object_args(pwn), 0), &arg, &n), 0, NULL);
    CHECK(arg && strcmp(arg, "touch /x") == 0);
    CHECK_INT(ptc_ckpt_nsymbols(c), 1);
    const ptc_symbol *s = ptc_ckpt_symbol(c, 0);
    if (s) {
        CHECK_STR(s->global, "posix.system");
        CHECK_INT(s->offset, offset_of(&b, "cposix"));
        CHECK_INT(s->refs, 2);
        CHECK_INT(s->calls, 1);
    }
    ptc_ckpt_close(c);

    char path[256];
    snprintf(path, sizeof path, "%s/c.pth", tmpdir);
    ptc_report *r = NULL;
    CHECK_CODE(ptc_verify(&r, path, NULL, &err), 0, &err);
    CHECK(r && ptc_report_verdict(r) == PTC_VERDICT_UNSAFE);
    ptc_report_free(r);
    free(b.p);
}

/* Enum members and other instances as dict keys and set items: equal only to themselves. */
static void test_object_keys(void)
{
    pk b = {0};
    begin(&b);
    /* {Color(1): 'a', Color(1): 'b', <memo 9>: 'c'} where memo 9 is the first key again, and a
     * set of the two keys. */
    PUT(&b, "]q\x00(}q\x01(cmod\nColor\nq\x02K\x01\x85Rq\x09X\x01\x00\x00\x00"
            "ah\x02K\x01\x85RX\x01\x00\x00\x00"
            "bh\x09X\x01\x00\x00\x00"
            "cucbuiltins\nset\n]q\x03(h\x09h\x09h\x02K\x01\x85Re\x85R"
            "e.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *d = ptc_value_item(ptc_ckpt_root(c), 0);
    CHECK_INT(ptc_value_len(d), 2);
    const char *s = NULL;
    size_t n;
    CHECK_CODE(ptc_value_str(ptc_dict_value(d, 0), &s, &n), 0, NULL);
    CHECK(s && strcmp(s, "c") == 0); /* the first key took the third value */
    CHECK_INT(ptc_value_len(ptc_value_item(ptc_ckpt_root(c), 1)), 2);
    if (ptc_ckpt_symbol(c, 0))
        CHECK_INT(ptc_ckpt_symbol(c, 0)->calls, 3);
    ptc_ckpt_close(c);
    free(b.p);
}

/* getattr(mod.K, 'new')(1) and NEWOBJ of an object: the callable is an object, whose chain of
 * callables ends at the global that names it. A second BUILD updates the first state, as Python's
 * __dict__.update does (test_salvage_build.c has the cases). */
static void test_object_callable(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "(cbuiltins\ngetattr\ncmod\nK\nX\x03\x00\x00\x00new\x86Rq\x00K\x01\x85R"
            "h\x00)\x81}X\x01\x00\x00\x00kK\x07sb}X\x01\x00\x00\x00kK\x08sbt.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, false, NULL, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c);
    const ptc_value *r = ptc_value_item(root, 0), *o = ptc_value_item(root, 1);
    const ptc_value *ga = ptc_object_callable(r);
    CHECK_INT(ptc_value_kind_of(ga), PTC_VALUE_OBJECT);
    CHECK(ptc_object_callable(o) == ga);
    CHECK_STR(ptc_value_global_name(r), "builtins.getattr");
    CHECK_STR(ptc_value_global_name(ptc_object_callable(ga)), "builtins.getattr");
    int64_t k = 0;
    CHECK_CODE(ptc_value_int(ptc_dict_get(ptc_object_state(o), "k"), &k), 0, NULL);
    CHECK_INT(k, 8);
    CHECK_INT(ptc_ckpt_nsymbols(c), 2);
    if (ptc_ckpt_nsymbols(c) == 2) {
        CHECK_STR(ptc_ckpt_symbol(c, 0)->global, "builtins.getattr");
        CHECK_INT(ptc_ckpt_symbol(c, 0)->calls, 1);
        CHECK_STR(ptc_ckpt_symbol(c, 1)->global, "mod.K");
        CHECK_INT(ptc_ckpt_symbol(c, 1)->calls, 0);
    }
    ptc_ckpt_close(c);
    /* Something that is not callable stays refused: an int. */
    begin(&b);
    PUT(&b, "K\x01)R.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EFORMAT, &err);
    free(b.p);
}

/* A dict subclass and a list subclass (collections.defaultdict(list), class L(list)) as
 * protocol 2 writes them: the items go to the object's items, in order; one object cannot take
 * both kinds. */
static void test_object_items(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "(ccollections\ndefaultdict\ncbuiltins\nlist\n\x85R(X\x01\x00\x00\x00"
            "a]K\x01"
            "aX\x01\x00\x00\x00"
            "b]uc__main__\nL\n)\x81(K\x01K\x02"
            "eK\x03"
            "at.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, false, NULL, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *dd = ptc_value_item(ptc_ckpt_root(c), 0);
    const ptc_value *l = ptc_value_item(ptc_ckpt_root(c), 1);
    CHECK_STR(ptc_value_global_name(dd), "collections.defaultdict");
    const ptc_value *d = ptc_object_items(dd);
    CHECK_INT(ptc_value_kind_of(d), PTC_VALUE_DICT);
    CHECK_INT(ptc_value_len(d), 2);
    CHECK_INT(ptc_value_len(ptc_dict_get(d, "a")), 1);
    const ptc_value *li = ptc_object_items(l);
    CHECK_INT(ptc_value_kind_of(li), PTC_VALUE_LIST);
    CHECK_INT(ptc_value_len(li), 3);
    int64_t x = 0;
    CHECK_CODE(ptc_value_int(ptc_value_item(li, 2), &x), 0, NULL);
    CHECK_INT(x, 3);
    CHECK(ptc_object_items(ptc_object_callable(dd)) == NULL);
    ptc_ckpt_close(c);
    begin(&b);
    PUT(&b, "c__main__\nL\n)\x81K\x01"
            "aK\x01K\x02s.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EFORMAT, &err);
    /* An object that holds itself among its items is a cycle: salvage cuts it, the edge becomes
     * a placeholder (test_salvage_cycle.c has the cycles). */
    begin(&b);
    PUT(&b, "c__main__\nL\n)\x81q\x00h\x00"
            "a.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    CHECK_INT(ptc_value_is_back_reference(ptc_value_item(ptc_object_items(ptc_ckpt_root(c)), 0)),
              1);
    ptc_ckpt_close(c);
    free(b.p);
}

/* ---- numpy ------------------------------------------------------------------------------------ */

typedef struct np_case {
    const char *code, *order;
    ptc_dtype dt;
    size_t size;
} np_case;

/* Every dtype ptc maps, as a 2 x 3 array whose elements are 0..5 in that dtype (bool: 0,1,0,...;
 * complex: real part i, imaginary part -i), written little- and big-endian in C order and once in
 * Fortran order, read back through ptc_tensor_read (row-major, little-endian). */
static void fill(const np_case *k, int i, uint8_t *out)
{
    switch (k->dt) {
    case PTC_BOOL:
        out[0] = (uint8_t)(i % 2 ? (i == 3 ? 7 : 1) : 0); /* numpy keeps any byte; 7 is True */
        return;
    case PTC_FLOAT16: {
        static const uint16_t h[6] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500};
        memcpy(out, &h[i], 2);
        return;
    }
    case PTC_FLOAT32: {
        float f = (float)i;
        memcpy(out, &f, 4);
        return;
    }
    case PTC_FLOAT64: {
        double f = i;
        memcpy(out, &f, 8);
        return;
    }
    case PTC_COMPLEX64: {
        float f[2] = {(float)i, (float)-i};
        memcpy(out, f, 8);
        return;
    }
    case PTC_COMPLEX128: {
        double f[2] = {i, -i};
        memcpy(out, f, 16);
        return;
    }
    default: {
        uint64_t v = (uint64_t)i;
        memcpy(out, &v, k->size); /* little-endian host */
        return;
    }
    }
}

static void swap_elem(const np_case *k, uint8_t *e)
{
    size_t w = k->dt == PTC_COMPLEX64 ? 4 : k->dt == PTC_COMPLEX128 ? 8 : k->size;
    for (size_t o = 0; o < k->size; o += w)
        for (size_t a = 0, z = w - 1; a < z; a++, z--) {
            uint8_t t = e[o + a];
            e[o + a] = e[o + z];
            e[o + z] = t;
        }
}

static void test_numpy_dtypes(void)
{
    static const np_case cases[] = {
        {"b1", "|", PTC_BOOL, 1},      {"u1", "|", PTC_UINT8, 1},
        {"i1", "|", PTC_INT8, 1},      {"i2", "<", PTC_INT16, 2},
        {"i4", "<", PTC_INT32, 4},     {"i8", "<", PTC_INT64, 8},
        {"u2", "<", PTC_UINT16, 2},    {"u4", "<", PTC_UINT32, 4},
        {"u8", "<", PTC_UINT64, 8},    {"f2", "<", PTC_FLOAT16, 2},
        {"f4", "<", PTC_FLOAT32, 4},   {"f8", "<", PTC_FLOAT64, 8},
        {"c8", "<", PTC_COMPLEX64, 8}, {"c16", "<", PTC_COMPLEX128, 16},
    };
    static const int32_t shape[2] = {2, 3};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const np_case *k = &cases[ci];
        for (int variant = 0; variant < 3; variant++) { /* 0 '<' C, 1 '>' C, 2 '<' Fortran */
            if (variant == 1 && k->size == 1)
                continue;
            uint8_t want[6 * 16], raw[6 * 16];
            for (int i = 0; i < 6; i++)
                fill(k, i, want + i * k->size);
            for (int r = 0; r < 2; r++)
                for (int col = 0; col < 3; col++) {
                    int i = r * 3 + col, at = variant == 2 ? col * 2 + r : i;
                    memcpy(raw + at * k->size, want + i * k->size, k->size);
                    if (variant == 1)
                        swap_elem(k, raw + at * k->size);
                }
            if (k->dt == PTC_BOOL)
                want[3] = 1;
            pk b = {0};
            begin(&b);
            PUT(&b, "}X\x01\x00\x00\x00"
                    "a");
            put_array(&b, variant == 1, shape, 2, k->code, variant == 1 ? ">" : k->order,
                      variant == 2, raw, 6 * k->size);
            PUT(&b, "s");
            end(&b);
            ptc_ckpt *c;
            ptc_error err;
            int rc = open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err);
            CHECK_CODE(rc, 0, &err);
            const ptc_tensor *t =
                rc == 0 ? ptc_value_tensor(ptc_dict_get(ptc_ckpt_root(c), "a")) : NULL;
            CHECK(t != NULL);
            if (t) {
                CHECK_INT(ptc_tensor_dtype(t), k->dt);
                CHECK_INT(ptc_tensor_ndim(t), 2);
                CHECK_INT(ptc_tensor_shape(t)[0], 2);
                CHECK_INT(ptc_tensor_shape(t)[1], 3);
                CHECK_INT(ptc_tensor_stride(t)[0], variant == 2 ? 1 : 3);
                CHECK_INT(ptc_tensor_stride(t)[1], variant == 2 ? 2 : 1);
                uint8_t got[6 * 16];
                CHECK_CODE(ptc_tensor_read(t, got, 6 * k->size, &err), 0, &err);
                if (memcmp(got, want, 6 * k->size) != 0) {
                    check_failures++;
                    fprintf(stderr, "numpy %s%s variant %d: elements differ\n", k->order, k->code,
                            variant);
                }
                CHECK_STR(ptc_storage_key(ptc_tensor_storage(t)), "numpy.0");
                CHECK_INT(ptc_ckpt_nstorages(c), 1);
            }
            ptc_ckpt_close(c);
            free(b.p);
        }
    }
}

/* numpy 1's module name, a 0-d array, an empty array (b'' as bytes()), a scalar, the same array
 * under two keys (one node through the memo), an array as a dict key, and the state without its
 * version. */
static void test_numpy_shapes(void)
{
    pk b = {0};
    begin(&b);
    double d = 2.5, d3[3] = {1, 2, 3};
    int32_t one = 7;
    static const int32_t empty[2] = {0, 3}, three[1] = {3};
    PUT(&b, "}(X\x04\x00\x00\x00zero");
    put_array(&b, true, NULL, 0, "f8", "<", false, &d, 8);
    PUT(&b, "X\x05\x00\x00\x00"
            "empty");
    put_array(&b, false, empty, 2, "f4", "<", false, NULL, 0);
    PUT(&b, "X\x06\x00\x00\x00scalarcnumpy._core.multiarray\nscalar\n");
    put_dtype(&b, "i4", "<");
    put_bytes(&b, (const uint8_t *)&one, 4);
    PUT(&b, "\x86RX\x03\x00\x00\x00vec");
    put_array(&b, false, three, 1, "f8", "<", false, d3, 24);
    PUT(&b, "q\x07X\x04\x00\x00\x00same\x68\x07X\x05\x00\x00\x00keyed}h\x07K\x01s"
            "X\x03\x00\x00\x00old");
    put_array_as(&b, true, "ndarray", 0, three, 1, "f8", "<", false, d3, 24);
    PUT(&b, "u.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    const ptc_value *root = ptc_ckpt_root(c);
    const ptc_tensor *t = ptc_value_tensor(ptc_dict_get(root, "zero"));
    double got = 0, got3[3] = {0};
    CHECK(t && ptc_tensor_ndim(t) == 0 && ptc_tensor_numel(t) == 1);
    if (t) {
        CHECK_CODE(ptc_tensor_read(t, &got, 8, &err), 0, &err);
        CHECK(got == 2.5);
    }
    t = ptc_value_tensor(ptc_dict_get(root, "empty"));
    CHECK(t && ptc_tensor_ndim(t) == 2 && ptc_tensor_numel(t) == 0);
    t = ptc_value_tensor(ptc_dict_get(root, "scalar"));
    CHECK(t && ptc_tensor_ndim(t) == 0 && ptc_tensor_dtype(t) == PTC_INT32);
    if (t) {
        int32_t v = 0;
        CHECK_CODE(ptc_tensor_read(t, &v, 4, &err), 0, &err);
        CHECK_INT(v, 7);
    }
    const ptc_value *vec = ptc_dict_get(root, "vec");
    CHECK(vec && ptc_dict_get(root, "same") == vec && ptc_value_tensor(vec));
    const ptc_value *keyed = ptc_dict_get(root, "keyed");
    CHECK(keyed && ptc_value_len(keyed) == 1 && ptc_dict_key(keyed, 0) == vec);
    t = ptc_value_tensor(ptc_dict_get(root, "old"));
    CHECK(t && ptc_tensor_numel(t) == 3);
    if (t) {
        CHECK_CODE(ptc_tensor_read(t, got3, 24, &err), 0, &err);
        CHECK(got3[0] == 1 && got3[1] == 2 && got3[2] == 3);
    }
    CHECK_INT(ptc_ckpt_nstorages(c), 5);
    ptc_ckpt_close(c);

    /* A record data/numpy.0 belongs to no storage: the salvaged ones have none. */
    CHECK_CODE(open_zip(&b, false, "data/numpy.0", PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EFORMAT,
               &err);
    /* The arrays' bytes count against the heap limit. */
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_heap_bytes = (2u << 20) + (1u << 19);
    int32_t big[1] = {1 << 18}; /* 1 MiB of float32: 2 MiB in the pickle's values, 1 copied */
    float *zeros = calloc((size_t)big[0], sizeof *zeros);
    begin(&b);
    put_array(&b, false, big, 1, "f4", "<", false, zeros, (size_t)big[0] * sizeof *zeros);
    end(&b);
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, &lim, &c, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "numpy array") != NULL);
    lim.max_heap_bytes = 16u << 20;
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, &lim, &c, &err), 0, &err);
    ptc_ckpt_close(c);
    free(zeros);
    free(b.p);
}

/* States that are not an array ptc can describe leave the object symbolic. */
static void test_numpy_left_symbolic(void)
{
    static const int32_t s23[2] = {2, 3}, neg[2] = {-2, -3}, huge[3] = {1 << 30, 1 << 30, 1 << 30};
    uint8_t raw[48] = {0};
    static const struct {
        const char *what;
        const int32_t *shape;
        int ndim;
        const char *code, *order;
        size_t n;
    } cases[] = {
        {"one byte short", s23, 2, "f4", "<", 23},
        {"one byte long", s23, 2, "f4", "<", 25},
        {"negative dimensions", neg, 2, "f4", "<", 24},
        {"sizes that overflow", huge, 3, "f8", "<", 8},
        {"an object dtype", s23, 2, "O8", "|", 48},
        {"a string dtype", s23, 2, "U1", "<", 24},
        {"'|' for a 4-byte type", s23, 2, "f4", "|", 24},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pk b = {0};
        begin(&b);
        put_array(&b, false, cases[i].shape, cases[i].ndim, cases[i].code, cases[i].order, false,
                  raw, cases[i].n);
        end(&b);
        ptc_ckpt *c;
        ptc_error err;
        CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
        const ptc_value *root = ptc_ckpt_root(c);
        if (ptc_value_kind_of(root) != PTC_VALUE_OBJECT || !ptc_value_is_symbolic(root)) {
            check_failures++;
            fprintf(stderr, "numpy state with %s: became a %s, not a symbolic object\n",
                    cases[i].what, ptc_value_kind_name(ptc_value_kind_of(root)));
        }
        CHECK_INT(ptc_ckpt_nstorages(c), 0);
        ptc_ckpt_close(c);
        free(b.p);
    }
    /* A structured dtype (fields), an object array of a list, a version-2 state, an ndarray
     * subclass. */
    for (int i = 0; i < 4; i++) {
        pk b = {0};
        begin(&b);
        static const int32_t two[1] = {2};
        if (i == 0)
            PUT(&b, "cnumpy\ndtype\nX\x02\x00\x00\x00V8\x89\x88\x87R(K\x03X\x01\x00\x00\x00|N("
                    "X\x01\x00\x00\x00"
                    "at}NNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x10tb.");
        if (i == 1) {
            PUT(&b, "cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85X\x01\x00"
                    "\x00\x00"
                    "b\x87R(K\x01K\x02\x85");
            put_dtype(&b, "O8", "|");
            PUT(&b, "\x89](K\x01K\x02"
                    "etb.");
        }
        if (i >= 2) {
            put_array_as(&b, false, i == 2 ? "ndarray" : "MaskedArray", i == 2 ? 2 : 1, two, 1,
                         "u1", "|", false, raw, 2);
            end(&b);
        }
        ptc_ckpt *c;
        ptc_error err;
        CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
        CHECK_INT(ptc_value_kind_of(ptc_ckpt_root(c)), PTC_VALUE_OBJECT);
        CHECK_INT(ptc_ckpt_nstorages(c), 0);
        ptc_ckpt_close(c);
        free(b.p);
    }
}

/* ---- the table and the limits ------------------------------------------------------------------ */

static void test_symbol_table(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "](");
    char line[64];
    int nglobals = PTC_SYMBOLS_MAX + 904;
    for (int i = 0; i < nglobals; i++) {
        int n = snprintf(line, sizeof line, "cm\nf%d\n", i);
        put(&b, line, (size_t)n);
    }
    PUT(&b, "cm\nf0\ncm\nf5000\n");
    /* A name with a quote, a backslash and a control byte: escaped in the table. */
    PUT(&b, "cweird\x01mod\nna\"me\\\ne.");
    ptc_ckpt *c;
    ptc_error err;
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    CHECK_INT(ptc_ckpt_nsymbols(c), PTC_SYMBOLS_MAX);
    CHECK_INT(ptc_ckpt_symbols_dropped(c), 904 + 1 + 1);
    if (ptc_ckpt_nsymbols(c) == PTC_SYMBOLS_MAX) {
        CHECK_STR(ptc_ckpt_symbol(c, 0)->global, "m.f0");
        CHECK_INT(ptc_ckpt_symbol(c, 0)->refs, 2);
        CHECK_STR(ptc_ckpt_symbol(c, PTC_SYMBOLS_MAX - 1)->global, "m.f4095");
    }
    ptc_ckpt_close(c);
    begin(&b);
    PUT(&b, "cweird\x01mod\nna\"me\\\n.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    if (ptc_ckpt_nsymbols(c) == 1)
        CHECK_STR(ptc_ckpt_symbol(c, 0)->global, "weird\\x01mod.na\\\"me\\\\");
    ptc_ckpt_close(c);
    free(b.p);
}

static void test_limits(void)
{
    ptc_ckpt *c;
    ptc_error err;
    pk b = {0};
    /* Memo indices stay bounded. */
    begin(&b);
    PUT(&b, "cm\nf\n)Rr\xff\xff\xff\x7f.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EFORMAT, &err);
    /* A chain of 40 calls, each calling the previous object: nesting through callables. */
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_depth = 16;
    begin(&b);
    PUT(&b, "cm\nf\n");
    for (int i = 0; i < 40; i++)
        PUT(&b, ")R");
    end(&b);
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, &lim, &c, &err), PTC_ELIMIT, &err);
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), 0, &err);
    ptc_ckpt_close(c);
    /* Billion laughs through arguments: x(k+1) = f(x(k), x(k)), 40 times. */
    begin(&b);
    PUT(&b, "cm\nf\nq\x00)Rq\x01");
    for (int i = 0; i < 40; i++)
        PUT(&b, "h\x00h\x01h\x01\x86Rq\x01");
    end(&b);
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_ELIMIT, &err);
    /* Opcodes outside the subset stay refused: STACK_GLOBAL, INST. */
    begin(&b);
    PUT(&b, "X\x01\x00\x00\x00mX\x01\x00\x00\x00"
            "f\x93.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EUNSAFE, &err);
    begin(&b);
    PUT(&b, "(im\nf\n.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EUNSAFE, &err);
    /* A symbolic name reaches a message escaped (found by fuzz_salvage: a storage class). */
    begin(&b);
    PUT(&b, "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagector\x01"
            "ch\nFloatStorage\nX\x01\x00\x00\x00"
            "0X\x03\x00\x00\x00"
            "cpuK\x02tQ.");
    CHECK_CODE(open_zip(&b, true, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EFORMAT, &err);
    CHECK(strstr(err.message, "tor\\x01ch.FloatStorage") != NULL);
    for (const char *q = err.message; *q; q++)
        CHECK((unsigned char)*q >= 0x20 && *q != 0x7f);
    /* Rebuilds ptc does not implement stay errors. */
    begin(&b);
    PUT(&b, "ctorch._utils\n_rebuild_qtensor\n)R.");
    CHECK_CODE(open_zip(&b, false, NULL, PTC_OPEN_SALVAGE, NULL, &c, &err), PTC_EUNSUPPORTED, &err);
    free(b.p);
}

/* Allowed globals keep their strict meaning; a class the policy allows is no symbol. */
static void test_strict_unchanged(void)
{
    pk b = {0};
    begin(&b);
    PUT(&b, "}(X\x01\x00\x00\x00w" TENSOR0 "X\x01\x00\x00\x00ocmy\nCls\n)\x81u.");
    ptc_policy *p;
    ptc_error err;
    CHECK_CODE(ptc_policy_new(&p, PTC_POLICY_DEFAULT, &err), 0, &err);
    CHECK_CODE(ptc_policy_allow_global(p, "my.Cls", &err), 0, &err);
    char path[256];
    snprintf(path, sizeof path, "%s/c.pth", tmpdir);
    ptc_ckpt *c;
    CHECK_CODE(open_zip(&b, true, NULL, 0, NULL, &c, &err), PTC_EUNSAFE, &err);
    ptc_open_params prm;
    ptc_open_params_default(&prm);
    prm.policy = p;
    prm.flags = PTC_OPEN_SALVAGE;
    CHECK_CODE(ptc_ckpt_open(&c, path, &prm, &err), 0, &err);
    check_w01(ptc_dict_get(ptc_ckpt_root(c), "w"));
    const ptc_value *o = ptc_dict_get(ptc_ckpt_root(c), "o");
    CHECK_INT(ptc_value_kind_of(o), PTC_VALUE_OBJECT);
    CHECK_INT(ptc_value_is_symbolic(o), 0);
    CHECK_INT(ptc_value_is_symbolic(ptc_object_callable(o)), 0);
    CHECK_INT(ptc_ckpt_nsymbols(c), 0);
    ptc_ckpt_close(c);
    ptc_policy_free(p);
    CHECK_INT(ptc_value_is_symbolic(NULL), 0);
    CHECK(ptc_object_callable(NULL) == NULL);
    CHECK(ptc_ckpt_symbol(NULL, 0) == NULL);
    CHECK_INT(ptc_ckpt_nsymbols(NULL), 0);
    CHECK_INT(ptc_ckpt_symbols_dropped(NULL), 0);
    free(b.p);
}

/* The legacy stream: a symbolic object (its class declared by a 'module' persistent id) around a
 * tensor and a numpy array; the key list names the file's storage only; symbol offsets are the
 * file's. */
static void test_legacy(void)
{
    static const uint8_t magic[] = {0x80, 0x02, 0x8A, 0x0A, 0x6C, 0xFC, 0x9C, 0x46,
                                    0xF9, 0x20, 0x6A, 0xA8, 0x50, 0x19, 0x2E};
    pk b = {0};
    put(&b, magic, sizeof magic);
    PUT(&b, "\x80\x02M\xe9\x03.\x80\x02}.");
    size_t obj_at = b.n;
    /* The class declared as torch's legacy writer declares module classes: a persistent id
     * ('module', cls, source_file, source), which torch's loader turns into the class. */
    PUT(&b, "\x80\x02(X\x06\x00\x00\x00modulecmod\nNet\nX\x04\x00\x00\x00"
            "f.pyX\x0a\x00\x00\x00"
            "class Net:tQ)\x81}(X\x01\x00\x00\x00w"
            "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
            "X\x01\x00\x00\x00"
            "7X\x03\x00\x00\x00"
            "cpuK\x02NtQK\x00K\x02\x85K\x01\x85\x89NtRX\x01\x00\x00\x00n");
    static const int32_t two[1] = {2};
    put_array(&b, false, two, 1, "f4", "<", false, W01, sizeof W01);
    PUT(&b, "ub.\x80\x02]X\x01\x00\x00\x00"
            "7a.\x02\x00\x00\x00\x00\x00\x00\x00");
    put(&b, W01, sizeof W01);
    ptc_ckpt *c = NULL;
    ptc_error err;
    ptc_open_params p;
    ptc_open_params_default(&p);
    CHECK_CODE(ptc_ckpt_open_memory(&c, b.p, b.n, &p, &err), PTC_EUNSAFE, &err);
    p.flags = PTC_OPEN_SALVAGE;
    CHECK_CODE(ptc_ckpt_open_memory(&c, b.p, b.n, &p, &err), 0, &err);
    const ptc_value *st = ptc_object_state(ptc_ckpt_root(c));
    check_w01(ptc_dict_get(st, "w"));
    check_w01(ptc_dict_get(st, "n"));
    CHECK_INT(ptc_ckpt_nstorages(c), 2);
    const ptc_symbol *s = ptc_ckpt_symbol(c, 0);
    if (s) {
        CHECK_STR(s->global, "mod.Net");
        CHECK_STR(s->member, "");
        CHECK_INT(s->offset, offset_of(&b, "cmod\nNet"));
        CHECK(s->offset > (int64_t)obj_at);
        CHECK_INT(s->calls, 1);
    }
    ptc_ckpt_close(c);
    free(b.p);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_module_object();
    test_payload();
    test_object_keys();
    test_object_callable();
    test_object_items();
    test_numpy_dtypes();
    test_numpy_shapes();
    test_numpy_left_symbolic();
    test_symbol_table();
    test_limits();
    test_strict_unchanged();
    test_legacy();
    char path[256];
    snprintf(path, sizeof path, "%s/c.pth", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    return check_exit("test_salvage");
}
