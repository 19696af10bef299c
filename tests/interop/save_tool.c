/*
 * save_tool.c - the writer side of the interop tests (the Python scripts beside it), through the
 * public API only (<ptc/ptc.h>), so that what the tests check is what an application gets.
 *
 *   save_tool copy IN OUT [--archive-name NAME] [--no-serialization-id] [--format
 * auto|pth|safetensors] opens the checkpoint IN with the default policy and ptc_save's its root,
 * unchanged, to OUT. save_tool build-state-dict OUT builds from scratch, with the ptc_doc_*
 * builder, the state dict that nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).state_dict()
 * returns once its tensors hold the values of sd_value() below: an OrderedDict of 7 tensors with a
 * _metadata attribute whose three {'version': n} dicts share ONE 'version' str node, as the dicts
 * torch builds share one interned str. byte_identity.py compares the file with torch.save's, byte
 * for byte. save_tool build-mixed OUT builds a dict of every value kind the builder offers (ints up
 * to 2**100, floats with NaN, -0.0 and infinities, str with NUL and non-ASCII, bytes, complex,
 * dtype, device, torch.Size, set, None/int keys, an OrderedDict) and tensors: three views of one
 * float32 storage, uint16 (the _rebuild_tensor_v3 path), bfloat16, bool, a 0-d int64, an empty
 * tensor and a float64 tensor with requires_grad. roundtrip.py builds the same object in Python and
 * compares what torch.load returns.
 *
 * Exit status: 0 saved, 1 ptc refused or failed (its message on stderr), 2 usage error.
 */
#include <ptc/ptc.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: save_tool copy IN OUT [--archive-name NAME] [--no-serialization-id]\n"
                    "                 [--format auto|pth|safetensors]\n"
                    "       save_tool build-state-dict OUT\n"
                    "       save_tool build-mixed OUT\n");
    return 2;
}

static int report(const char *what, const ptc_error *err)
{
    fprintf(stderr, "save_tool: %s: %s (%s)\n", what, err->message, ptc_err_name(err->code));
    return 1;
}

static int cmd_copy(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *in = argv[0], *out = argv[1];
    ptc_save_params sp;
    ptc_save_params_default(&sp);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--archive-name") == 0 && i + 1 < argc) {
            sp.archive_name = argv[++i];
        } else if (strcmp(argv[i], "--no-serialization-id") == 0) {
            sp.serialization_id = 0;
        } else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            const char *f = argv[++i];
            if (strcmp(f, "auto") == 0)
                sp.format = PTC_SAVE_AUTO;
            else if (strcmp(f, "pth") == 0)
                sp.format = PTC_SAVE_PTH;
            else if (strcmp(f, "safetensors") == 0)
                sp.format = PTC_SAVE_SAFETENSORS;
            else
                return usage();
        } else {
            return usage();
        }
    }
    ptc_ckpt *c = NULL;
    ptc_error err;
    memset(&err, 0, sizeof err);
    if (ptc_ckpt_open(&c, in, NULL, &err) < 0)
        return report(in, &err);
    int rc = 0;
    if (ptc_save(ptc_ckpt_root(c), out, &sp, &err) < 0)
        rc = report(out, &err);
    ptc_ckpt_close(c);
    return rc;
}

/* ---- build-state-dict ------------------------------------------------------------------------ */

/* Element i of the k-th tensor (key order): small multiples of 1/4, exact in float32. running_var
 * (k == 5) stays positive. byte_identity.py computes the same numbers. */
static float sd_value(int k, int i)
{
    if (k == 5)
        return 1.0f + 0.5f * (float)i;
    return 0.25f * (float)(10 * k + i) - 1.0f;
}

/* Builder calls return NULL or a negative code on failure; the document keeps the reason. */
#define NEED(x)                                                                                    \
    do {                                                                                           \
        if (!(x))                                                                                  \
            goto fail;                                                                             \
    } while (0)
#define OK(x)                                                                                      \
    do {                                                                                           \
        if ((x) < 0)                                                                               \
            goto fail;                                                                             \
    } while (0)

static ptc_value *str(ptc_doc *d, const char *s)
{
    return ptc_doc_str(d, s, (size_t)-1);
}

static int save_doc(ptc_doc *d, const ptc_value *root, const char *out)
{
    ptc_save_params sp;
    ptc_save_params_default(&sp);
    ptc_error err;
    memset(&err, 0, sizeof err);
    if (ptc_save(root, out, &sp, &err) < 0)
        return report(out, &err);
    (void)d;
    return 0;
}

static int cmd_build_state_dict(const char *out)
{
    static const char *keys[] = {"0.weight",
                                 "0.bias",
                                 "1.weight",
                                 "1.bias",
                                 "1.running_mean",
                                 "1.running_var",
                                 "1.num_batches_tracked"};
    static const int ndims[] = {2, 1, 1, 1, 1, 1, 0};
    static const int64_t shapes[][2] = {{2, 3}, {2, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}, {0, 0}};
    static const char *mod_names[] = {"", "0", "1"};
    static const int mod_versions[] = {1, 1, 2}; /* Module._version; BatchNorm's _NormBase: 2 */

    ptc_doc *d = NULL;
    ptc_error err;
    int rc;
    memset(&err, 0, sizeof err);
    if (ptc_doc_new(&d, &err) < 0)
        return report("ptc_doc_new", &err);

    ptc_value *sd, *meta, *attrs, *version;
    NEED(sd = ptc_doc_dict(d, 1));
    for (int k = 0; k < 7; k++) {
        ptc_value *t;
        if (ndims[k] == 0) {
            int64_t nbt = 7;
            ptc_storage *s;
            NEED(s = ptc_doc_storage(d, PTC_INT64, 8, &nbt, 1, NULL));
            NEED(t = ptc_doc_tensor(d, s, PTC_INT64, 0, NULL, NULL, 0, 0));
        } else {
            int64_t n = shapes[k][0] * (ndims[k] == 2 ? shapes[k][1] : 1);
            ptc_storage *s;
            NEED(s = ptc_doc_storage(d, PTC_FLOAT32, n * 4, NULL, 1, NULL));
            float *f = ptc_storage_mutable(s);
            NEED(f);
            for (int i = 0; i < n; i++)
                f[i] = sd_value(k, i);
            NEED(t = ptc_doc_tensor(d, s, PTC_FLOAT32, ndims[k], shapes[k], NULL, 0, 0));
        }
        ptc_value *key;
        NEED(key = str(d, keys[k]));
        OK(ptc_doc_set(d, sd, key, t));
    }
    /* One 'version' node for every module's dict, as in the objects torch pickles. */
    NEED(version = str(d, "version"));
    NEED(meta = ptc_doc_dict(d, 1));
    for (int m = 0; m < 3; m++) {
        ptc_value *local, *name, *v;
        NEED(local = ptc_doc_dict(d, 0));
        NEED(v = ptc_doc_int(d, mod_versions[m]));
        OK(ptc_doc_set(d, local, version, v));
        NEED(name = str(d, mod_names[m]));
        OK(ptc_doc_set(d, meta, name, local));
    }
    ptc_value *mkey;
    NEED(attrs = ptc_doc_dict(d, 0));
    NEED(mkey = str(d, "_metadata"));
    OK(ptc_doc_set(d, attrs, mkey, meta));
    OK(ptc_doc_set_attrs(d, sd, attrs));

    rc = save_doc(d, sd, out);
    ptc_doc_free(d);
    return rc;
fail:
    rc = report("build-state-dict", ptc_doc_error(d));
    ptc_doc_free(d);
    return rc;
}

/* ---- build-mixed ----------------------------------------------------------------------------- */

/* d[key] = val with a str key. */
static int put(ptc_doc *d, ptc_value *dict, const char *key, const ptc_value *val)
{
    ptc_value *k = str(d, key);
    if (!k || !val)
        return -1;
    return ptc_doc_set(d, dict, k, val);
}

static int cmd_build_mixed(const char *out)
{
    ptc_doc *d = NULL;
    ptc_error err;
    int rc;
    memset(&err, 0, sizeof err);
    if (ptc_doc_new(&d, &err) < 0)
        return report("ptc_doc_new", &err);
    ptc_value *root, *seq, *v;
    NEED(root = ptc_doc_dict(d, 0));

    /* ints: the edges of BININT1, BININT2, BININT, LONG1 */
    static const int64_t ints[] = {0,         1,        -1,         255,           256,
                                   65535,     65536,    2147483647, -2147483648LL, 2147483648LL,
                                   INT64_MAX, INT64_MIN};
    NEED(seq = ptc_doc_seq(d, PTC_VALUE_LIST));
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        OK(ptc_doc_push(d, seq, ptc_doc_int(d, ints[i])));
    uint8_t big[13] = {0}; /* 2**100, little-endian two's complement */
    big[12] = 0x10;
    OK(ptc_doc_push(d, seq, ptc_doc_int_bytes(d, big, sizeof big)));
    uint8_t neg[9]; /* -2**70 - 3 = ~(2**70 + 2) */
    memset(neg, 0, sizeof neg);
    neg[0] = 2;
    neg[8] = 0x40;
    for (size_t i = 0; i < sizeof neg; i++)
        neg[i] = (uint8_t)~neg[i];
    OK(ptc_doc_push(d, seq, ptc_doc_int_bytes(d, neg, sizeof neg)));
    OK(put(d, root, "ints", seq));

    static const double floats[] = {1.5, -0.0, NAN, INFINITY, -INFINITY, 5e-324};
    NEED(seq = ptc_doc_seq(d, PTC_VALUE_TUPLE));
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        OK(ptc_doc_push(d, seq, ptc_doc_float(d, floats[i])));
    OK(put(d, root, "floats", seq));

    static const char s[] = "h\xc3\xa9llo \xe2\x9c\x93 \0 end"; /* 'héllo ✓ \x00 end' */
    OK(put(d, root, "str", ptc_doc_str(d, s, sizeof s - 1)));
    static const uint8_t b[] = {0x00, 0x01, 0xff, 'a', 'b', 'c'};
    OK(put(d, root, "bytes", ptc_doc_bytes(d, b, sizeof b)));
    OK(put(d, root, "none", ptc_doc_none(d)));
    OK(put(d, root, "true", ptc_doc_bool(d, 1)));
    OK(put(d, root, "false", ptc_doc_bool(d, 0)));
    OK(put(d, root, "complex", ptc_doc_complex(d, 1.5, -2.0)));
    OK(put(d, root, "dtype", ptc_doc_dtype(d, PTC_BFLOAT16)));
    OK(put(d, root, "device", ptc_doc_device(d, "cuda", 1)));
    OK(put(d, root, "device_cpu", ptc_doc_device(d, "cpu", -1)));
    NEED(seq = ptc_doc_seq(d, PTC_VALUE_SIZE));
    OK(ptc_doc_push(d, seq, ptc_doc_int(d, 2)));
    OK(ptc_doc_push(d, seq, ptc_doc_int(d, 3)));
    OK(put(d, root, "size", seq));
    NEED(seq = ptc_doc_seq(d, PTC_VALUE_SET));
    for (int i = 1; i <= 3; i++)
        OK(ptc_doc_push(d, seq, ptc_doc_int(d, i)));
    OK(put(d, root, "set", seq));
    OK(ptc_doc_set(d, root, ptc_doc_int(d, 7), str(d, "int key")));
    OK(ptc_doc_set(d, root, ptc_doc_none(d), str(d, "none key")));
    OK(ptc_doc_set(d, root, ptc_doc_int(d, -3), str(d, "neg key")));

    /* tensors */
    ptc_value *ts;
    NEED(ts = ptc_doc_dict(d, 0));
    ptc_storage *st;
    NEED(st = ptc_doc_storage(d, PTC_FLOAT32, 12 * 4, NULL, 1, NULL));
    float *f = ptc_storage_mutable(st);
    NEED(f);
    for (int i = 0; i < 12; i++)
        f[i] = (float)i;
    {
        int64_t sh[2] = {3, 4}, tsh[2] = {4, 3}, tst[2] = {1, 4}, ssh[2] = {2, 2}, sst[2] = {4, 2};
        OK(put(d, ts, "base", ptc_doc_tensor(d, st, PTC_FLOAT32, 2, sh, NULL, 0, 0)));
        OK(put(d, ts, "t", ptc_doc_tensor(d, st, PTC_FLOAT32, 2, tsh, tst, 0, 0))); /* base.t() */
        OK(put(d, ts, "slice",
               ptc_doc_tensor(d, st, PTC_FLOAT32, 2, ssh, sst, 4, 0))); /* base[1:, ::2] */
    }
    {
        uint16_t u[6] = {0, 1, 255, 256, 65534, 65535};
        int64_t sh[2] = {2, 3};
        NEED(st = ptc_doc_storage(d, PTC_UINT16, sizeof u, u, 1, NULL));
        OK(put(d, ts, "u16", ptc_doc_tensor(d, st, PTC_UINT16, 2, sh, NULL, 0, 0)));
    }
    {
        uint16_t bf[4] = {0x3f80, 0xc000, 0x7fc0, 0x0001}; /* 1, -2, NaN, smallest subnormal */
        int64_t sh[1] = {4};
        NEED(st = ptc_doc_storage(d, PTC_BFLOAT16, sizeof bf, bf, 1, NULL));
        OK(put(d, ts, "bf16", ptc_doc_tensor(d, st, PTC_BFLOAT16, 1, sh, NULL, 0, 0)));
    }
    {
        int64_t x = 42;
        NEED(st = ptc_doc_storage(d, PTC_INT64, 8, &x, 1, NULL));
        OK(put(d, ts, "scalar", ptc_doc_tensor(d, st, PTC_INT64, 0, NULL, NULL, 0, 0)));
    }
    {
        int64_t sh[2] = {0, 4};
        NEED(st = ptc_doc_storage(d, PTC_FLOAT32, 0, NULL, 1, NULL));
        OK(put(d, ts, "empty", ptc_doc_tensor(d, st, PTC_FLOAT32, 2, sh, NULL, 0, 0)));
    }
    {
        uint8_t fl[3] = {1, 0, 1};
        int64_t sh[1] = {3};
        NEED(st = ptc_doc_storage(d, PTC_BOOL, 3, fl, 1, NULL));
        OK(put(d, ts, "flag", ptc_doc_tensor(d, st, PTC_BOOL, 1, sh, NULL, 0, 0)));
    }
    {
        double g[3] = {0.5, -1.25, 3.0};
        int64_t sh[1] = {3};
        NEED(st = ptc_doc_storage(d, PTC_FLOAT64, sizeof g, g, 1, NULL));
        OK(put(d, ts, "grad", ptc_doc_tensor(d, st, PTC_FLOAT64, 1, sh, NULL, 0, 1)));
    }
    OK(put(d, root, "tensors", ts));

    NEED(v = ptc_doc_dict(d, 1));
    OK(put(d, v, "b", ptc_doc_int(d, 1)));
    OK(put(d, v, "a", ptc_doc_int(d, 2)));
    OK(put(d, root, "od", v));

    rc = save_doc(d, root, out);
    ptc_doc_free(d);
    return rc;
fail:
    rc = report("build-mixed", ptc_doc_error(d));
    ptc_doc_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    if (strcmp(argv[1], "copy") == 0)
        return cmd_copy(argc - 2, argv + 2);
    if (argc == 3 && strcmp(argv[1], "build-state-dict") == 0)
        return cmd_build_state_dict(argv[2]);
    if (argc == 3 && strcmp(argv[1], "build-mixed") == 0)
        return cmd_build_mixed(argv[2]);
    return usage();
}
