/*
 * test_show.c - the library calls behind what ptc's commands show (issue 15, section 4):
 * ptc_escape, ptc_json_escape_hidden, ptc_utf8_valid, ptc_key_text, ptc_value_int_text,
 * ptc_float_text, ptc_walk_next_value, ptc_dtype_element_f64, ptc_tensor_read_f64,
 * ptc_state_dict_rename, ptc_report_json, ptc_sarif_* and ptc_value_text. Each
 * expected text is written out here by hand (the rename cases from torch 2.6's
 * consume_prefix_in_state_dict_if_present, run once and copied); `ptc verify --json` itself is
 * compared with ptc_report_json by tests/fixtures/check_report_json.sh, and `ptc verify --sarif`
 * checked against the SARIF schema and a SARIF reader by tests/fixtures/check_verify_sarif.py.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ptc/ptc.h>

#include "check.h"

/* ptc_escape into a static buffer, with the returned length checked against strlen. */
static const char *esc(const char *s, size_t n, unsigned flags)
{
    static char out[256];
    size_t len = ptc_escape(out, sizeof out, s, n, flags);
    CHECK_INT(len, strlen(out));
    return out;
}

static void test_escape(void)
{
    CHECK_STR(esc("conv1.weight", 12, 0), "conv1.weight");
    CHECK_STR(esc("a\\b", 3, 0), "a\\\\b");
    CHECK_STR(esc("a\\b", 3, PTC_ESC_RAW_BACKSLASH), "a\\b");
    CHECK_STR(esc("say \"hi\"", 8, 0), "say \"hi\"");
    CHECK_STR(esc("say \"hi\"", 8, PTC_ESC_QUOTE), "say \\\"hi\\\"");
    CHECK_STR(esc("a\nb\tc\rd", 7, 0), "a\\nb\\tc\\rd");
    CHECK_STR(esc("\x01\x7f\x1b[2J", 6, 0), "\\x01\\x7f\\x1b[2J");
    CHECK_STR(esc("nul\0x", 5, 0), "nul\\x00x");
    /* valid UTF-8 stays readable; invalid bytes, overlong forms and surrogates do not */
    CHECK_STR(esc("caf\xc3\xa9 \xe4\xb8\xad", 9, 0), "caf\xc3\xa9 \xe4\xb8\xad");
    CHECK_STR(esc("\xff\xc0\x80", 3, 0), "\\xff\\xc0\\x80");
    CHECK_STR(esc("\xed\xa0\x80", 3, 0), "\\xed\\xa0\\x80");
    /* the hidden characters: byte order mark U+FEFF (the drift issue 15 names), C1 CSI, soft
     * hyphen, zero-width joiner, right-to-left override, line separator, a tag (4 bytes) */
    CHECK_STR(esc("\xef\xbb\xbfkey", 6, 0), "\\xef\\xbb\\xbfkey");
    CHECK_STR(esc("\xc2\x9b", 2, 0), "\\xc2\\x9b");
    CHECK_STR(esc("\xc2\xad", 2, 0), "\\xc2\\xad");
    CHECK_STR(esc("\xe2\x80\x8d", 3, 0), "\\xe2\\x80\\x8d");
    CHECK_STR(esc("\xe2\x80\xae", 3, 0), "\\xe2\\x80\\xae");
    CHECK_STR(esc("\xe2\x80\xa8", 3, 0), "\\xe2\\x80\\xa8");
    CHECK_STR(esc("\xf3\xa0\x81\x81", 4, 0), "\\xf3\\xa0\\x81\\x81");
    /* a character outside the hidden ranges next to them stays */
    CHECK_STR(esc("\xef\xbb\xbe", 3, 0), "\xef\xbb\xbe");

    /* snprintf's contract: the full length back, at most size - 1 bytes and a NUL written */
    char small[5] = "zzzz";
    CHECK_INT(ptc_escape(small, sizeof small, "\x01\x02", 2, 0), 8);
    CHECK_STR(small, "\\x01");
    CHECK_INT(ptc_escape(NULL, 0, "\xef\xbb\xbf", 3, 0), 12);
    CHECK_INT(ptc_escape(small, 0, "abc", 3, 0), 3);
    CHECK_STR(small, "\\x01"); /* size 0: nothing written */
    CHECK_INT(ptc_escape(small, sizeof small, NULL, 7, 0), 0);
    CHECK_STR(small, "");
    /* the bound the header gives: never more than 4 bytes per input byte */
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    CHECK(ptc_escape(NULL, 0, all, sizeof all, PTC_ESC_QUOTE) <= 4 * sizeof all);
}

static void test_json_hidden(void)
{
    char out[128];
    const char *in = "{\"k\": \"a\xef\xbb\xbf"
                     "b\xc2\x85"
                     "c\xf3\xa0\x81\x81\", \"\xc3\xa9\": 1}";
    size_t n = ptc_json_escape_hidden(out, sizeof out, in, strlen(in));
    CHECK_STR(out, "{\"k\": \"a\\ufeffb\\u0085c\\udb40\\udc41\", \"\xc3\xa9\": 1}");
    CHECK_INT(n, strlen(out));
    CHECK_INT(ptc_json_escape_hidden(NULL, 0, "\xe2\x80\xae", 3), 6);
    CHECK_INT(ptc_json_escape_hidden(out, sizeof out, "[1, 2]", 6), 6);
    CHECK_STR(out, "[1, 2]");
}

static void test_utf8_valid(void)
{
    CHECK_INT(ptc_utf8_valid("abc\xc3\xa9", 5), 1);
    CHECK_INT(ptc_utf8_valid("\xef\xbb\xbf", 3), 1); /* valid, merely hidden */
    CHECK_INT(ptc_utf8_valid("\xc0\x80", 2), 0);
    CHECK_INT(ptc_utf8_valid("\xed\xa0\x80", 3), 0);
    CHECK_INT(ptc_utf8_valid("\xf4\x90\x80\x80", 4), 0);
    CHECK_INT(ptc_utf8_valid("\xc3", 1), 0);
    CHECK_INT(ptc_utf8_valid(NULL, 0), 1);
    CHECK_INT(ptc_utf8_valid(NULL, 1), 0);
}

/* ptc_key_text of v into a static buffer (NUL bytes of a str key shown as '@'). */
static const char *key(const ptc_value *v)
{
    static char out[4096];
    size_t n = ptc_key_text(v, out, sizeof out);
    CHECK(n < sizeof out);
    CHECK_INT(ptc_key_text(v, NULL, 0), n);
    for (size_t i = 0; i < n && i < sizeof out; i++)
        if (out[i] == '\0')
            out[i] = '@';
    return out;
}

/* A little-endian two's-complement int of n bytes: 1 << (8 * (n - 1)), negated when neg. */
static ptc_value *big(ptc_doc *d, size_t n, int neg)
{
    uint8_t b[1100] = {0};
    b[n - 1] = 1;
    if (neg) { /* -x = ~x + 1 */
        unsigned carry = 1;
        for (size_t i = 0; i < n; i++) {
            unsigned v = (uint8_t)~b[i] + carry;
            b[i] = (uint8_t)v;
            carry = v >> 8;
        }
    }
    return ptc_doc_int_bytes(d, b, n);
}

static void test_key_text(void)
{
    ptc_doc *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    if (!d)
        return;
    CHECK_STR(key(ptc_doc_str(d, "layer1.0.conv1", (size_t)-1)), "layer1.0.conv1");
    /* a str key is the path segment as it is: raw, escaped only when shown */
    CHECK_STR(key(ptc_doc_str(d, "\xef\xbb\xbfw", 4)), "\xef\xbb\xbfw");
    CHECK_STR(esc(key(ptc_doc_str(d, "\xef\xbb\xbfw", 4)), 4, 0), "\\xef\\xbb\\xbfw");
    CHECK_STR(key(ptc_doc_str(d, "a\0b", 3)), "a@b");
    CHECK_STR(key(ptc_doc_int(d, -42)), "-42");
    CHECK_STR(key(ptc_doc_int(d, INT64_MIN)), "-9223372036854775808");
    CHECK_STR(key(big(d, 9, 0)), "18446744073709551616");                     /* 2^64 */
    CHECK_STR(key(big(d, 9, 1)), "-18446744073709551616");                    /* -2^64 */
    CHECK_STR(key(big(d, 17, 0)), "340282366920938463463374607431768211456"); /* 2^128 */
    CHECK(strlen(key(big(d, 256, 0))) == 615); /* 2^2040: still digits at PTC_KEY_INT_MAX */
    CHECK_STR(key(big(d, 257, 0)), "<int of 257 bytes>");
    CHECK_STR(key(ptc_doc_bool(d, 1)), "True");
    CHECK_STR(key(ptc_doc_bool(d, 0)), "False");
    CHECK_STR(key(ptc_doc_none(d)), "None");
    CHECK_STR(key(ptc_doc_float(d, 0.1)), "0.1");
    CHECK_STR(key(ptc_doc_float(d, 1.0)), "1.0");
    CHECK_STR(key(ptc_doc_float(d, 1e-05)), "1e-05");
    CHECK_STR(key(ptc_doc_float(d, 1e22)), "1e+22");
    CHECK_STR(key(ptc_doc_float(d, NAN)), "nan");
    CHECK_STR(key(ptc_doc_float(d, -INFINITY)), "-inf");
    CHECK_STR(key(ptc_doc_dtype(d, PTC_BFLOAT16)), "torch.bfloat16");
    CHECK_STR(key(ptc_doc_seq(d, PTC_VALUE_TUPLE)), "<tuple>");
    CHECK_STR(key(NULL), "?");

    /* truncation: the full length back, the prefix that fits written */
    char small[6];
    CHECK_INT(ptc_key_text(ptc_doc_str(d, "running_mean", (size_t)-1), small, sizeof small), 12);
    CHECK_STR(small, "runni");

    /* ptc_value_int_text: the same digits, its own limit */
    char out[2600];
    CHECK_INT(ptc_value_int_text(big(d, 9, 1), 0, out, sizeof out), 21);
    CHECK_STR(out, "-18446744073709551616");
    CHECK_INT(ptc_value_int_text(ptc_doc_int(d, 7), 1, out, sizeof out), 1);
    CHECK_STR(out, "7"); /* an int that fits int64 is never "<int of ...>" */
    ptc_value_int_text(big(d, 300, 0), 0, out, sizeof out);
    CHECK(out[0] == '1' && strlen(out) == 721); /* 2^2392 */
    CHECK_INT(ptc_value_int_text(big(d, 300, 0), 299, out, sizeof out), 18);
    CHECK_STR(out, "<int of 300 bytes>");
    ptc_value_int_text(big(d, 1025, 0), 4096, out, sizeof out);
    CHECK_STR(out, "<int of 1025 bytes>"); /* max_bytes is capped at PTC_INT_TEXT_MAX */
    ptc_value_int_text(big(d, 1024, 1), 0, out, sizeof out);
    CHECK(out[0] == '-' && strlen(out) == 2465); /* -2^8184 */
    CHECK_INT(ptc_value_int_text(ptc_doc_str(d, "7", 1), 0, out, sizeof out), 1);
    CHECK_STR(out, "?");
    CHECK_INT(ptc_value_int_text(NULL, 0, out, sizeof out), 1);
    ptc_doc_free(d);
}

/* ptc_float_text against Python's repr (the expected texts are repr's). */
static void test_float_text(void)
{
    static const struct {
        double x;
        const char *repr;
    } cases[] = {
        {0.1, "0.1"},
        {100.0, "100.0"},
        {1e15, "1000000000000000.0"},
        {1e16, "1e+16"},
        {1.5e16, "1.5e+16"},
        {1e-05, "1e-05"},
        {0.0001, "0.0001"},
        {-0.0, "-0.0"},
        {5.0, "5.0"},
        {1e22, "1e+22"},
        {123.456, "123.456"},
        {2.5e-308, "2.5e-308"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {-1234567890123456.8, "-1234567890123456.8"},
        {NAN, "nan"},
        {INFINITY, "inf"},
        {-INFINITY, "-inf"},
        /* next to a power of two the nearest 16-digit decimal does not read back, its other
         * neighbour does: repr gives 16 digits, not 17 */
        {5.9604644775390625e-08, "5.960464477539063e-08"},   /* 2^-24 */
        {-6.1897001964269014e+26, "-6.189700196426902e+26"}, /* a bfloat16 */
        {-3.1554436208840472e-30, "-3.1554436208840472e-30"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[32];
        size_t n = ptc_float_text(cases[i].x, out, sizeof out);
        CHECK_STR(out, cases[i].repr);
        CHECK_INT(n, strlen(cases[i].repr));
        CHECK(n <= 24);
    }
    char small[4];
    CHECK_INT(ptc_float_text(100.0, small, sizeof small), 5);
    CHECK_STR(small, "100");
}

/* The tree {"a": {"b": t, "": [1, {}]}, 100.0: t, "c": set()} made in d. */
static ptc_value *walk_tree(ptc_doc *d)
{
    static const float one = 1.0f;
    const int64_t shape[1] = {1};
    ptc_storage *s = ptc_doc_storage(d, PTC_FLOAT32, sizeof one, &one, 1, NULL);
    ptc_value *t = ptc_doc_tensor(d, s, PTC_FLOAT32, 1, shape, NULL, 0, 0);
    ptc_value *root = ptc_doc_dict(d, 0), *a = ptc_doc_dict(d, 0),
              *l = ptc_doc_seq(d, PTC_VALUE_LIST);
    ptc_doc_push(d, l, ptc_doc_int(d, 1));
    ptc_doc_push(d, l, ptc_doc_dict(d, 0));
    ptc_doc_set(d, a, ptc_doc_str(d, "b", 1), t);
    ptc_doc_set(d, a, ptc_doc_str(d, "", 0), l);
    ptc_doc_set(d, root, ptc_doc_str(d, "a", 1), a);
    ptc_doc_set(d, root, ptc_doc_float(d, 100.0), t);
    ptc_doc_set(d, root, ptc_doc_str(d, "c", 1), ptc_doc_seq(d, PTC_VALUE_SET));
    return root;
}

static void test_walk_values(void)
{
    ptc_doc *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    if (!d)
        return;
    ptc_value *root = walk_tree(d);
    ptc_walk *w = NULL;
    CHECK_CODE(ptc_walk_new(&w, root, &err), 0, &err);
    char seen[512] = "";
    const ptc_value *v;
    const char *path;
    size_t len, depth, o = 0;
    int rc;
    while ((rc = ptc_walk_next_value(w, &v, &path, &len, &depth)) > 0) {
        CHECK_INT(len, strlen(path));
        o += (size_t)snprintf(seen + o, sizeof seen - o, "%s[%s@%zu]", o ? " " : "", path, depth);
        o += (size_t)snprintf(seen + o, sizeof seen - o, "%s",
                              ptc_value_kind_name(ptc_value_kind_of(v)));
    }
    CHECK_INT(rc, 0);
    /* pre-order, root first; '' keys joined as ptc_walk_next joins them ("a." then "a..0") */
    CHECK_STR(seen, "[@0]dict [a@1]dict [a.b@2]tensor [a.@2]list [a..0@3]int [a..1@3]dict "
                    "[100.0@1]tensor [c@1]set");
    CHECK_INT(ptc_walk_next_value(w, &v, &path, &len, &depth), 0); /* stays at the end */
    /* stepped one way only */
    const ptc_tensor *t;
    CHECK_CODE(ptc_walk_next(w, &path, &t), PTC_EINVAL, ptc_walk_error(w));
    ptc_walk_free(w);

    /* the tensors ptc_walk_next reports carry the same paths */
    CHECK_CODE(ptc_walk_new(&w, root, &err), 0, &err);
    char tensors[128] = "";
    o = 0;
    while (ptc_walk_next(w, &path, &t) > 0)
        o += (size_t)snprintf(tensors + o, sizeof tensors - o, "%s%s", o ? " " : "", path);
    CHECK_STR(tensors, "a.b 100.0");
    CHECK_CODE(ptc_walk_next_value(w, &v, NULL, NULL, NULL), PTC_EINVAL, ptc_walk_error(w));
    ptc_walk_free(w);

    /* budget exhaustion through the value walk: one node and the path's bytes per value */
    ptc_budget b = {.max_nodes = 3, .max_bytes = 1000};
    CHECK_CODE(ptc_walk_new(&w, root, &err), 0, &err);
    ptc_walk_set_budget(w, &b);
    int n = 0;
    while ((rc = ptc_walk_next_value(w, &v, NULL, NULL, NULL)) > 0)
        n++;
    CHECK_INT(n, 3);
    CHECK_INT(rc, PTC_ELIMIT);
    CHECK(strstr(ptc_walk_error(w)->message, "work budget exceeded") != NULL);
    CHECK_INT(b.nodes, 3);
    CHECK_INT(b.bytes, 0 + 1 + 3); /* "", "a", "a.b" */
    ptc_walk_free(w);
    b = (ptc_budget){.max_nodes = 100, .max_bytes = 6, .bytes_explicit = 1};
    CHECK_CODE(ptc_walk_new(&w, root, &err), 0, &err);
    ptc_walk_set_budget(w, &b);
    n = 0;
    while ((rc = ptc_walk_next_value(w, &v, NULL, NULL, NULL)) > 0)
        n++;
    CHECK_INT(n, 4); /* "", "a", "a.b", "a." are 6 bytes; "a..0" is over */
    CHECK_INT(rc, PTC_ELIMIT);
    CHECK(strstr(ptc_walk_error(w)->message, "--budget") != NULL);
    ptc_walk_free(w);

    /* a path past PTC_PATH_MAX is refused before it is reported */
    char *longkey = malloc(PTC_PATH_MAX + 1);
    if (longkey) {
        memset(longkey, 'k', PTC_PATH_MAX + 1);
        ptc_value *deep = ptc_doc_dict(d, 0);
        ptc_doc_set(d, deep, ptc_doc_str(d, longkey, PTC_PATH_MAX + 1), ptc_doc_int(d, 1));
        CHECK_CODE(ptc_walk_new(&w, deep, &err), 0, &err);
        CHECK_INT(ptc_walk_next_value(w, &v, NULL, NULL, NULL), 1);
        CHECK_CODE(ptc_walk_next_value(w, &v, NULL, NULL, NULL), PTC_ELIMIT, ptc_walk_error(w));
        CHECK(strstr(ptc_walk_error(w)->message, "at depth 1") != NULL);
        ptc_walk_free(w);
        free(longkey);
    }
    /* NULL arguments, an empty walk */
    CHECK_INT(ptc_walk_next_value(NULL, &v, NULL, NULL, NULL), PTC_EINVAL);
    CHECK_CODE(ptc_walk_new(&w, NULL, &err), 0, &err);
    CHECK_CODE(ptc_walk_next_value(w, NULL, NULL, NULL, NULL), PTC_EINVAL, ptc_walk_error(w));
    ptc_walk_free(w);
    CHECK_CODE(ptc_walk_new(&w, NULL, &err), 0, &err);
    CHECK_INT(ptc_walk_next_value(w, &v, NULL, NULL, NULL), 0);
    ptc_walk_free(w);
    ptc_doc_free(d);
}

/* Element decoding: one element of dtype dt from its little-endian bytes. */
static double el(ptc_dtype dt, const void *p, double *im)
{
    double re = -12345;
    CHECK_INT(ptc_dtype_element_f64(dt, p, &re, im), 0);
    return re;
}

static void test_element(void)
{
    double im;
    uint8_t b[16];
    CHECK(el(PTC_FLOAT16, "\x00\x3c", NULL) == 1.0);
    CHECK(el(PTC_FLOAT16, "\x01\x00", NULL) == ldexp(1, -24)); /* smallest subnormal */
    CHECK(isinf(el(PTC_FLOAT16, "\x00\xfc", NULL)) && el(PTC_FLOAT16, "\x00\xfc", NULL) < 0);
    CHECK(el(PTC_BFLOAT16, "\x80\x3f", NULL) == 1.0);
    CHECK(el(PTC_FLOAT8_E4M3FN, "\x7e", NULL) == 448.0);
    CHECK(isnan(el(PTC_FLOAT8_E4M3FN, "\x7f", NULL)));
    CHECK(el(PTC_FLOAT8_E5M2, "\x7b", NULL) == 57344.0);
    CHECK(isinf(el(PTC_FLOAT8_E5M2, "\x7c", NULL)));
    CHECK(isnan(el(PTC_FLOAT8_E4M3FNUZ, "\x80", NULL)));
    CHECK(el(PTC_FLOAT8_E4M3FNUZ, "\x7f", NULL) == 240.0);
    CHECK(el(PTC_FLOAT8_E5M2FNUZ, "\x7f", NULL) == 57344.0);
    CHECK(el(PTC_INT8, "\xff", NULL) == -1.0);
    CHECK(el(PTC_UINT16, "\xff\xff", NULL) == 65535.0);
    CHECK(el(PTC_UINT32, "\xff\xff\xff\xff", NULL) == 4294967295.0);
    CHECK(el(PTC_UINT64, "\xff\xff\xff\xff\xff\xff\xff\xff", NULL) == 18446744073709551615.0);
    CHECK(el(PTC_INT64, "\x00\x00\x00\x00\x00\x00\x00\x80", NULL) == -9223372036854775808.0);
    CHECK(el(PTC_BOOL, "\x01", &im) == 1.0 && im == 0.0);
    float c64[2] = {1.5f, -2.0f};
    memcpy(b, c64, 8);
    CHECK(el(PTC_COMPLEX64, b, &im) == 1.5 && im == -2.0);
    CHECK(el(PTC_COMPLEX32, "\x00\x3c\x00\xc0", &im) == 1.0 && im == -2.0);
    double re = 0;
    CHECK_INT(ptc_dtype_element_f64(PTC_QUINT8, "\x01", &re, NULL), PTC_EUNSUPPORTED);
    CHECK_INT(ptc_dtype_element_f64(PTC_BITS8, "\x01", &re, NULL), PTC_EUNSUPPORTED);
    CHECK_INT(ptc_dtype_element_f64((ptc_dtype)999, "\x01", &re, NULL), PTC_EUNSUPPORTED);
    CHECK_INT(ptc_dtype_element_f64(PTC_FLOAT32, NULL, &re, NULL), PTC_EINVAL);
    CHECK_INT(ptc_dtype_element_f64(PTC_FLOAT32, b, NULL, NULL), PTC_EINVAL);
}

static void test_read_f64(void)
{
    ptc_doc *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    if (!d)
        return;
    /* float16 [[1, 2, 3], [4, 5, 6]], read through its transpose (a strided view) */
    const uint16_t h[6] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600};
    ptc_storage *s = ptc_doc_storage(d, PTC_FLOAT16, sizeof h, h, 1, NULL);
    const int64_t shape[2] = {3, 2}, stride[2] = {1, 3};
    const ptc_tensor *t =
        ptc_value_tensor(ptc_doc_tensor(d, s, PTC_FLOAT16, 2, shape, stride, 0, 0));
    CHECK(t != NULL);
    double out[8] = {0};
    CHECK_CODE(ptc_tensor_read_f64(t, out, 6, &err), 0, &err);
    CHECK(out[0] == 1 && out[1] == 4 && out[2] == 2 && out[3] == 5 && out[4] == 3 && out[5] == 6);
    CHECK_CODE(ptc_tensor_read_f64(t, out, 5, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "6 doubles") != NULL);
    CHECK_CODE(ptc_tensor_read_f64(NULL, out, 8, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_tensor_read_f64(t, NULL, 8, NULL), PTC_EINVAL, NULL);

    /* complex64: two doubles per element */
    const float c[4] = {1.0f, -1.0f, 0.5f, 2.0f};
    ptc_storage *sc = ptc_doc_storage(d, PTC_COMPLEX64, sizeof c, c, 1, NULL);
    const int64_t n2[1] = {2};
    const ptc_tensor *tc =
        ptc_value_tensor(ptc_doc_tensor(d, sc, PTC_COMPLEX64, 1, n2, NULL, 0, 0));
    CHECK_CODE(ptc_tensor_read_f64(tc, out, 4, &err), 0, &err);
    CHECK(out[0] == 1.0 && out[1] == -1.0 && out[2] == 0.5 && out[3] == 2.0);
    CHECK_CODE(ptc_tensor_read_f64(tc, out, 3, &err), PTC_EINVAL, &err);

    /* quint8 has no numeric value here */
    ptc_storage *sq = ptc_doc_storage(d, PTC_QUINT8, 2, "\x01\x02", 1, NULL);
    const ptc_tensor *tq = ptc_value_tensor(ptc_doc_tensor(d, sq, PTC_QUINT8, 1, n2, NULL, 0, 0));
    if (tq) {
        CHECK_CODE(ptc_tensor_read_f64(tq, out, 8, &err), PTC_EUNSUPPORTED, &err);
        CHECK(strstr(err.message, "quint8") != NULL);
    }
    ptc_doc_free(d);
}

/* "k=v k=v ..." for a dict of str -> int (or -> dict with an int "version"). */
static const char *items(const ptc_value *v)
{
    static char out[512];
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < ptc_value_len(v); i++) {
        const char *k;
        size_t kl;
        int64_t x = -1;
        const ptc_value *val = ptc_dict_value(v, i);
        if (ptc_value_kind_of(val) == PTC_VALUE_DICT)
            val = ptc_dict_get(val, "version");
        ptc_value_int(val, &x);
        if (ptc_value_str(ptc_dict_key(v, i), &k, &kl) < 0)
            k = "?", kl = 1;
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s=%lld", i ? " " : "", (int)kl, k,
                              (long long)x);
    }
    return out;
}

static ptc_value *meta_entry(ptc_doc *d, int version)
{
    ptc_value *m = ptc_doc_dict(d, 0);
    ptc_doc_set(d, m, ptc_doc_str(d, "version", (size_t)-1), ptc_doc_int(d, version));
    return m;
}

static void test_rename(void)
{
    ptc_doc *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    if (!d)
        return;
    /* torch 2.6:
     *   sd = OrderedDict([('module.a', 1), ('c', 3), ('module.b', 2), ('a', 5)])
     *   sd._metadata = OrderedDict([('', {'version': 1}), ('module', {'version': 2}),
     *                               ('module.a', {'version': 3})])
     *   consume_prefix_in_state_dict_if_present(sd, 'module.')
     *   -> [('c', 3), ('a', 1), ('b', 2)]; _metadata [('', {'version': 2}), ('a', {'version': 3})] */
    ptc_value *sd = ptc_doc_dict(d, 1), *md = ptc_doc_dict(d, 1), *attrs = ptc_doc_dict(d, 0);
    const char *names[] = {"module.a", "c", "module.b", "a"};
    const int vals[] = {1, 3, 2, 5};
    for (int i = 0; i < 4; i++)
        ptc_doc_set(d, sd, ptc_doc_str(d, names[i], (size_t)-1), ptc_doc_int(d, vals[i]));
    ptc_doc_set(d, md, ptc_doc_str(d, "", 0), meta_entry(d, 1));
    ptc_doc_set(d, md, ptc_doc_str(d, "module", (size_t)-1), meta_entry(d, 2));
    ptc_doc_set(d, md, ptc_doc_str(d, "module.a", (size_t)-1), meta_entry(d, 3));
    ptc_doc_set(d, attrs, ptc_doc_str(d, "_metadata", (size_t)-1), md);
    CHECK_CODE(ptc_doc_set_attrs(d, sd, attrs), 0, ptc_doc_error(d));

    const ptc_value *out = NULL;
    int stripped = -1;
    CHECK_CODE(ptc_state_dict_rename(d, sd, "module.", NULL, &out, &stripped, &err), 0, &err);
    CHECK_INT(stripped, 1);
    CHECK(out != sd);
    CHECK_STR(items(out), "c=3 a=1 b=2");
    CHECK(ptc_dict_is_ordered(out));
    const ptc_value *nattrs = ptc_dict_attrs(out);
    CHECK(nattrs != NULL);
    if (nattrs)
        CHECK_STR(items(ptc_dict_get(nattrs, "_metadata")), "=2 a=3");
    CHECK_STR(items(sd), "module.a=1 c=3 module.b=2 a=5"); /* the input is never modified */

    /* adding back: '' names the wrapper, a copy of the root entry stays under '' */
    const ptc_value *back = NULL;
    CHECK_CODE(ptc_state_dict_rename(d, out, NULL, "module.", &back, NULL, &err), 0, &err);
    CHECK_STR(items(back), "module.c=3 module.a=1 module.b=2");
    if (ptc_dict_attrs(back))
        CHECK_STR(items(ptc_dict_get(ptc_dict_attrs(back), "_metadata")), "=2 module=2 module.a=3");

    /* nothing to strip: the root itself, stripped 0 */
    CHECK_CODE(ptc_state_dict_rename(d, out, "encoder.", NULL, &back, &stripped, &err), 0, &err);
    CHECK(back == out);
    CHECK_INT(stripped, 0);
    CHECK_CODE(ptc_state_dict_rename(d, out, NULL, NULL, &back, &stripped, &err), 0, &err);
    CHECK(back == out);

    /* refusals */
    CHECK_CODE(ptc_state_dict_rename(d, ptc_doc_int(d, 1), "m.", NULL, &back, NULL, &err),
               PTC_EINVAL, &err);
    CHECK(strstr(err.message, "not a dict") != NULL);
    CHECK_CODE(ptc_state_dict_rename(NULL, sd, "m.", NULL, &back, NULL, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_state_dict_rename(d, sd, "m.", NULL, NULL, NULL, NULL), PTC_EINVAL, NULL);
    ptc_doc_free(d);
}

/* A growable text the JSON is written into; fail_after > 0 makes the nth write fail. */
typedef struct sink {
    char buf[32768]; /* a SARIF log's head, rules included, is about 4 KiB */
    size_t len;
    int writes, fail_after;
} sink;

static int sink_write(void *ctx, const void *p, size_t n)
{
    sink *s = ctx;
    if (s->fail_after && ++s->writes >= s->fail_after)
        return PTC_EIO;
    if (s->len + n >= sizeof s->buf)
        return PTC_ENOMEM;
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return 0;
}

static void test_report_json(void)
{
    ptc_error err, fail = {.code = PTC_EIO, .offset = -1};
    snprintf(fail.message, sizeof fail.message, "No such file or directory");
    sink s = {0};
    CHECK_CODE(ptc_report_json("m\xef\xbb\xbf.pth", NULL, &fail, 4, sink_write, &s, &err), 0, &err);
    /* the path is valid UTF-8: kept, its hidden character written as \ufeff */
    CHECK_STR(s.buf, "{\n"
                     "      \"path\": \"m\\ufeff.pth\",\n"
                     "      \"verdict\": \"error\",\n"
                     "      \"error\": \"EIO\",\n"
                     "      \"message\": \"No such file or directory\"\n"
                     "    }");
    memset(&s, 0, sizeof s);
    CHECK_CODE(ptc_report_json("bad\xff", NULL, &fail, 0, sink_write, &s, &err), 0, &err);
    CHECK(strstr(s.buf, "\"path\": \"bad\\\\xff\",\n  \"verdict\"") != NULL);

    /* a real report: a file that is not a checkpoint */
    ptc_report *r = NULL;
    static const char junk[] = "this is not a checkpoint";
    CHECK_CODE(ptc_verify_memory(&r, junk, sizeof junk - 1, NULL, &err), 0, &err);
    if (r) {
        memset(&s, 0, sizeof s);
        CHECK_CODE(ptc_report_json(NULL, r, NULL, 2, sink_write, &s, &err), 0, &err);
        const char *head = "{\n    \"path\": \"\",\n    \"verdict\": \"malformed\",\n";
        CHECK(strncmp(s.buf, head, strlen(head)) == 0);
        CHECK(strstr(s.buf, "\"findings\": [\n") != NULL);
        CHECK(strstr(s.buf, "\"globals\": [],\n    \"dropped\": 0\n  }") != NULL);
        if (ptc_report_nfindings(r) > 0)
            CHECK(strstr(s.buf, ptc_err_name(ptc_report_finding(r, 0)->code)) != NULL);
        /* a write that fails stops the writing; its code comes back (the report is formed in
         * memory and handed over in one write, so that write is the first and the last) */
        sink f = {.fail_after = 1};
        CHECK_CODE(ptc_report_json("x", r, NULL, 4, sink_write, &f, &err), PTC_EIO, &err);
        CHECK_INT(f.writes, 1);
        CHECK_INT(f.len, 0);
        ptc_report_free(r);
    }
    printf("ptc_report_json of a malformed file:\n%s\n", s.buf);
    CHECK_CODE(ptc_report_json("x", NULL, NULL, 0, sink_write, &s, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_report_json("x", NULL, &fail, 0, NULL, &s, &err), PTC_EINVAL, &err);
}

/* The SARIF writer's contract: arguments, one log of a report and a failure, URIs, a failing
 * write that stops everything. The log's schema and meaning are checked by check_verify_sarif.py. */
static void test_sarif(void)
{
    ptc_error err, fail = {.code = PTC_EIO, .offset = -1};
    snprintf(fail.message, sizeof fail.message, "No such file or directory");
    ptc_sarif *w = NULL;
    static sink s;
    memset(&s, 0, sizeof s);
    CHECK_CODE(ptc_sarif_begin(NULL, NULL, sink_write, &s, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sarif_begin(&w, NULL, NULL, &s, &err), PTC_EINVAL, &err);
    ptc_sarif_params p;
    ptc_sarif_params_default(&p);
    CHECK_INT(p.size, sizeof p);
    p.size = 0;
    CHECK_CODE(ptc_sarif_begin(&w, &p, sink_write, &s, &err), PTC_EINVAL, &err);
    p.size = sizeof p + 8;
    CHECK_CODE(ptc_sarif_begin(&w, &p, sink_write, &s, &err), PTC_EINVAL, &err);
    CHECK(w == NULL && s.len == 0);
    CHECK_CODE(ptc_sarif_file(NULL, "x", NULL, &fail, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sarif_end(NULL, &err), PTC_EINVAL, &err);
    ptc_sarif_free(NULL);

    ptc_report *r = NULL;
    static const char junk[] = "this is not a checkpoint";
    CHECK_CODE(ptc_verify_memory(&r, junk, sizeof junk - 1, NULL, &err), 0, &err);
    ptc_sarif_params_default(&p);
    p.policy = "default";
    CHECK_CODE(ptc_sarif_begin(&w, &p, sink_write, &s, &err), 0, &err);
    if (!w || !r) {
        ptc_sarif_free(w);
        ptc_report_free(r);
        return;
    }
    CHECK_CODE(ptc_sarif_file(w, NULL, NULL, NULL, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sarif_file(w, "dir/a b%#:\xff.pth", r, NULL, &err), 0, &err);
    CHECK_CODE(ptc_sarif_file(w, "/abs/missing.pth", NULL, &fail, &err), 0, &err);
    CHECK_CODE(ptc_sarif_end(w, &err), 0, &err);
    CHECK(strncmp(s.buf, "{\n  \"$schema\": \"https://docs.oasis-open.org/sarif/", 47) == 0);
    CHECK(strstr(s.buf, "\"version\": \"2.1.0\",\n  \"runs\": [\n") != NULL);
    CHECK(strstr(s.buf, "\"name\": \"ptc\"") != NULL);
    CHECK(strstr(s.buf, "\"id\": \"PTC-HIDDEN-PICKLE\"") != NULL);
    /* junk is malformed: a warning under PTC-LOAD, in the file itself */
    CHECK(strstr(s.buf, "\"ruleId\": \"PTC-LOAD\"") != NULL);
    CHECK(strstr(s.buf, "\"level\": \"warning\"") != NULL);
    CHECK(strstr(s.buf, "\"uri\": \"dir/a%20b%25%23%3A%FF.pth\"") != NULL);
    CHECK(strstr(s.buf, "\"uri\": \"file:///abs/missing.pth\"") != NULL);
    CHECK(strstr(s.buf, "\"executionSuccessful\": false") != NULL);
    CHECK(strstr(s.buf, "could not be verified: No such file or directory") != NULL);
    CHECK(strstr(s.buf, "\"policy\": \"default\"") != NULL);
    CHECK(s.len > 2 && strcmp(s.buf + s.len - 2, "}\n") == 0);

    /* a write that fails: begin gives its code and no log; later, every call gives it */
    sink f = {.fail_after = 2};
    w = NULL;
    CHECK_CODE(ptc_sarif_begin(&w, NULL, sink_write, &f, &err), PTC_EIO, &err);
    CHECK(w == NULL);
    sink g = {0};
    CHECK_CODE(ptc_sarif_begin(&w, NULL, sink_write, &g, &err), 0, &err);
    g.fail_after = g.writes + 1;
    if (w) {
        CHECK_CODE(ptc_sarif_file(w, "x", r, NULL, &err), PTC_EIO, &err);
        CHECK_CODE(ptc_sarif_file(w, "y", r, NULL, &err), PTC_EIO, &err);
        CHECK_CODE(ptc_sarif_end(w, &err), PTC_EIO, &err);
    }
    ptc_report_free(r);
}

/* ptc_value_text of v, with or without PTC_TEXT_ESCAPE, into a static buffer. */
static const char *vtext(const ptc_value *v, unsigned flags)
{
    static sink s;
    ptc_error err;
    memset(&s, 0, sizeof s);
    CHECK_CODE(ptc_value_text(v, flags, NULL, sink_write, &s, &err), 0, &err);
    return s.buf;
}

static void test_value_text(void)
{
    ptc_doc *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    if (!d)
        return;
    CHECK_STR(vtext(ptc_doc_none(d), 0), "None");
    CHECK_STR(vtext(ptc_doc_bool(d, 1), 0), "True");
    CHECK_STR(vtext(ptc_doc_int(d, -42), 0), "-42");
    CHECK_STR(vtext(big(d, 17, 0), 0), "340282366920938463463374607431768211456");
    CHECK_STR(vtext(big(d, 1025, 0), 0), "<int of 1025 bytes>");
    CHECK_STR(vtext(ptc_doc_float(d, 1e-05), 0), "1e-05");
    CHECK_STR(vtext(ptc_doc_dtype(d, PTC_FLOAT16), 0), "torch.float16");
    CHECK_STR(vtext(ptc_doc_device(d, "cuda", 0), 0), "device(type='cuda', index=0)");
    CHECK_STR(vtext(ptc_doc_device(d, "cpu", -1), 0), "device(type='cpu')");
    CHECK_STR(vtext(ptc_doc_bytes(d, "a'\\\0", 4), 0), "b'a\\'\\\\\\x00'");
    /* a str: raw without the flag, escaped (quotes too) with it */
    const ptc_value *str = ptc_doc_str(d, "q\"\xef\xbb\xbf", 5);
    CHECK_STR(vtext(str, 0), "\"q\"\xef\xbb\xbf\"");
    CHECK_STR(vtext(str, PTC_TEXT_ESCAPE), "\"q\\\"\\xef\\xbb\\xbf\"");
    char longs[300];
    memset(longs, 'x', sizeof longs);
    const char *lt = vtext(ptc_doc_str(d, longs, sizeof longs), 0);
    CHECK_INT(strlen(lt), 1 + 256 + 1 + strlen("... (300 bytes)"));
    CHECK(strstr(lt, "\"... (300 bytes)") != NULL);

    /* containers: Python's notation, a one-tuple's comma, an empty set, 16 items shown */
    ptc_value *t1 = ptc_doc_seq(d, PTC_VALUE_TUPLE), *set = ptc_doc_seq(d, PTC_VALUE_SET);
    CHECK_CODE(ptc_doc_push(d, t1, ptc_doc_int(d, 1)), 0, &err);
    CHECK_STR(vtext(t1, 0), "(1,)");
    CHECK_STR(vtext(set, 0), "set()");
    ptc_value *list = ptc_doc_seq(d, PTC_VALUE_LIST);
    for (int i = 0; i < 20; i++)
        CHECK_CODE(ptc_doc_push(d, list, ptc_doc_int(d, i)), 0, &err);
    CHECK_STR(vtext(list, 0),
              "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... (20 items)]");
    ptc_value *dict = ptc_doc_dict(d, 0);
    CHECK_CODE(ptc_doc_set(d, dict, ptc_doc_str(d, "k", 1), t1), 0, &err);
    CHECK_STR(vtext(dict, 0), "{\"k\": (1,)}");
    /* nesting past 4 levels inside the value shows as "..." */
    ptc_value *nest = ptc_doc_seq(d, PTC_VALUE_LIST);
    for (int i = 0; i < 6; i++) {
        ptc_value *outer = ptc_doc_seq(d, PTC_VALUE_LIST);
        CHECK_CODE(ptc_doc_push(d, outer, nest), 0, &err);
        nest = outer;
    }
    CHECK_STR(vtext(nest, 0), "[[[[[...]]]]]");

    /* a budget of 5 nodes: the 21-node list writes nothing and says why */
    ptc_budget b;
    ptc_budget_init(&b, NULL, 0);
    b.max_nodes = 5;
    sink s = {0};
    CHECK_CODE(ptc_value_text(list, 0, &b, sink_write, &s, &err), PTC_ELIMIT, &err);
    CHECK_INT(s.len, 0);
    /* NULL arguments; a failing write's code comes back */
    CHECK_CODE(ptc_value_text(NULL, 0, NULL, sink_write, &s, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_value_text(list, 0, NULL, NULL, &s, &err), PTC_EINVAL, &err);
    sink f = {.fail_after = 1};
    CHECK_CODE(ptc_value_text(list, 0, NULL, sink_write, &f, &err), PTC_EIO, &err);
    ptc_doc_free(d);
}

int main(void)
{
    test_escape();
    test_json_hidden();
    test_utf8_valid();
    test_key_text();
    test_float_text();
    test_walk_values();
    test_element();
    test_read_f64();
    test_rename();
    test_report_json();
    test_sarif();
    test_value_text();
    return check_exit("test_show");
}
