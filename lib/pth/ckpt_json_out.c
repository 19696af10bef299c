/*
 * ckpt_json_out.c - the JSON writer of ptc_ckpt_json: values as small jansson objects, and the
 * document's bytes batched in the call's OUT_BUF_BYTES buffer, with the entries a checkpoint has by
 * the thousand (records, storages, tensors, $ref rows, totals) written directly in the bytes
 * json_dumps would give. Text is kept when it is valid UTF-8 (jansson escapes C0 controls, the
 * hidden characters are written as \uXXXX by ptc_json_escape_hidden) and given in its ptc_escape
 * form otherwise, since JSON cannot hold invalid UTF-8.
 */
#include "pth/ckpt_json_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#define JSON_MAX_BYTES 65536 /* bytes of a bytes value given as hex in JSON */
#define JSON_MAX_DEPTH 16    /* nesting of a set / tuple rendered as a JSON array */
#define JSON_FLAGS     (JSON_INDENT(JSON_STEP) | JSON_PRESERVE_ORDER)

/* ---- values as JSON -------------------------------------------------------------------------
 * Names of the kinds in the "type" field. The document owns these rather than borrowing
 * ptc_value_kind_name, because they are part of its documented output schema. */
const char *ptc__cj_kind_name(ptc_value_kind k)
{
    switch (k) {
    case PTC_VALUE_NONE:
        return "none";
    case PTC_VALUE_BOOL:
        return "bool";
    case PTC_VALUE_INT:
        return "int";
    case PTC_VALUE_FLOAT:
        return "float";
    case PTC_VALUE_STR:
        return "str";
    case PTC_VALUE_BYTES:
        return "bytes";
    case PTC_VALUE_TUPLE:
        return "tuple";
    case PTC_VALUE_LIST:
        return "list";
    case PTC_VALUE_DICT:
        return "dict";
    case PTC_VALUE_SET:
        return "set";
    case PTC_VALUE_COMPLEX:
        return "complex";
    case PTC_VALUE_TENSOR:
        return "tensor";
    case PTC_VALUE_DTYPE:
        return "dtype";
    case PTC_VALUE_DEVICE:
        return "device";
    case PTC_VALUE_SIZE:
        return "size";
    case PTC_VALUE_GLOBAL:
        return "global";
    case PTC_VALUE_OBJECT:
        return "object";
    }
    return "unknown";
}

/* A JSON string for text from the file: as it is when it is valid UTF-8 (jansson escapes control
 * characters), otherwise its escaped rendering, since JSON cannot hold invalid UTF-8. */
json_t *ptc__cj_json_text(const char *s, size_t len)
{
    if (!s)
        return json_null();
    if (ptc_utf8_valid(s, len))
        return json_stringn(s, len);
    sbuf b = {0};
    ptc__sb_escape(&b, s, len, 0);
    json_t *j = b.oom ? NULL : json_stringn(ptc__sb_str(&b), b.len);
    ptc__sb_free(&b);
    return j;
}

json_t *ptc__cj_json_cstr(const char *s)
{
    return ptc__cj_json_text(s, s ? strlen(s) : 0);
}

/* The text rendering of v as a JSON string (for what has no natural JSON form). */
static json_t *json_rendered(cj *in, const ptc_value *v)
{
    sbuf b = {0};
    ptc__cj_render(in, &b, v, 0, 0);
    json_t *j = b.oom ? NULL : ptc__cj_json_text(ptc__sb_str(&b), b.len);
    ptc__sb_free(&b);
    return j;
}

/* A double, or "nan" / "inf" / "-inf", which JSON numbers cannot express. */
static json_t *json_double(double x)
{
    if (isnan(x))
        return json_string("nan");
    if (isinf(x))
        return json_string(x > 0 ? "inf" : "-inf");
    return json_real(x);
}

int ptc__cj_json_put(json_t *obj, const char *key, json_t *val)
{
    return json_object_set_new(obj, key, val) == 0 ? 0 : -1; /* a NULL val is refused, not leaked */
}

static int json_push(json_t *arr, json_t *val)
{
    return json_array_append_new(arr, val) == 0 ? 0 : -1;
}

/* ---- the document, written as a stream -------------------------------------------------
 * The document is never built whole: its arrays can hold millions of entries (a list of five
 * million None is a 5 MB file). The entries a checkpoint has by the thousand (records, storages,
 * tensors, {"$ref"} tensor rows, totals) are written directly (out_tensor and its helpers below);
 * each "values" and "metadata" entry is built as a small jansson object, dumped and freed. The
 * braces, brackets, commas and keys around the entries are written here, so that the bytes are
 * those json_dumps(root, JSON_FLAGS) would give for the whole document. */

/* Hands the batched bytes to the caller's function; after a failure, nothing more (in->wrc keeps
 * the first error). */
void ptc__cj_out_flush(cj *in)
{
    if (in->wrc == 0 && in->olen > 0) {
        int rc = in->write(in->ctx, in->obuf, in->olen);
        if (rc < 0)
            in->wrc = rc;
    }
    in->olen = 0;
}

/* out's way when p[0..n) does not fit beside what obuf holds. */
void ptc__cj_out_long(cj *in, const char *p, size_t n)
{
    ptc__cj_out_flush(in);
    if (n >= sizeof in->obuf) {
        if (in->wrc == 0) {
            int rc = in->write(in->ctx, p, n);
            if (rc < 0)
                in->wrc = rc;
        }
        return;
    }
    memcpy(in->obuf, p, n);
    in->olen = n;
}

/* Writes s[0..n) with its hidden characters as \uXXXX (ptc_json_escape_hidden). */
static void out_json_text(cj *in, const char *s, size_t n)
{
    size_t ascii = 0;
    while (ascii < n && (unsigned char)s[ascii] < 0x80)
        ascii++;
    if (ascii == n) { /* nothing hidden in ASCII: the common case, written as it is */
        ptc__cj_out(in, s, n);
        return;
    }
    char small[512];
    size_t len = ptc_json_escape_hidden(NULL, 0, s, n);
    char *t = len < sizeof small ? small : ptc__malloc(len + 1);
    if (!t) {
        if (in->wrc == 0)
            in->wrc = PTC_ENOMEM;
        return;
    }
    ptc_json_escape_hidden(t, len + 1, s, n);
    ptc__cj_out(in, t, len);
    if (t != small)
        ptc__free(t);
}

/* A line break, then the indentation of nesting level depth. */
void ptc__cj_json_newline(cj *in, int depth)
{
    static const char spaces[] = "\n                                ";
    size_t n = 1 + (size_t)depth * JSON_STEP; /* the document nests 3 levels deep at most */
    ptc__cj_out(in, spaces, n < sizeof spaces - 1 ? n : sizeof spaces - 1);
}

/* Writes j at nesting level depth of the document and frees it; -1 when j is NULL, out of memory
 * or the write failed. json_dumps indents j as a document of its own, so each of its line breaks
 * (all structural: JSON strings hold none) gets depth levels more. jansson keeps UTF-8 and escapes
 * C0 controls; out_json_text escapes the other characters a terminal would act on. */
int ptc__cj_json_write(cj *in, json_t *j, int depth)
{
    char *text = j ? json_dumps(j, JSON_FLAGS | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!text)
        return -1;
    const char *p = text;
    for (;;) {
        const char *nl = strchr(p, '\n');
        out_json_text(in, p, nl ? (size_t)(nl - p) : strlen(p));
        if (!nl)
            break;
        ptc__cj_json_newline(in, depth);
        p = nl + 1;
    }
    json_malloc_t jmalloc;
    json_free_t jfree;
    json_get_alloc_funcs(&jmalloc, &jfree); /* text is jansson's, from its own allocator */
    jfree(text);
    return in->wrc < 0 ? -1 : 0;
}

/* The next member of the document (nesting level 1): its key, ready for its value. */
void ptc__cj_json_member(cj *in, size_t *nmembers, const char *key)
{
    ptc__cj_out_s(in, (*nmembers)++ ? "," : "{");
    ptc__cj_json_newline(in, 1);
    ptc__cj_out_s(in, "\"");
    ptc__cj_out_s(in, key);
    ptc__cj_out_s(in, "\": ");
}

void ptc__cj_json_stream_open(cj *in, json_stream *a, size_t *nmembers, const char *key)
{
    ptc__cj_json_member(in, nmembers, key);
    ptc__cj_out_s(in, "[");
    *a = (json_stream){.in = in, .depth = 1};
}

/* Writes e as the array's next entry and frees it; -1 when e is NULL or out of memory. */
int ptc__cj_json_stream_put(json_stream *a, json_t *e)
{
    if (!e)
        return -1;
    if (a->n++)
        ptc__cj_out_s(a->in, ",");
    ptc__cj_json_newline(a->in, a->depth + 1);
    return ptc__cj_json_write(a->in, e, a->depth + 1);
}

void ptc__cj_json_stream_close(json_stream *a)
{
    if (a->n)
        ptc__cj_json_newline(a->in, a->depth);
    ptc__cj_out_s(a->in, "]");
}

/* ---- entries written directly ---------------------------------------------------------------
 * The entries a checkpoint has by the thousand (records, storages, tensors, totals) are written
 * here without a jansson object each, in the bytes json_write would give for the same object:
 * jansson's indentation (JSON_INDENT(JSON_STEP), members in order, "key": value, "[]" and "{}" for
 * empty containers), integers as "%lld". A string is written as it is when it is printable ASCII
 * without '"' or '\\' (all jansson would do is quote it); any other goes through json_text and
 * json_write as before, so its escaping is jansson's and ptc_json_escape_hidden's. */

/* Starts the array's next entry: the comma and line break before it. Its nesting level is
 * a->depth + 1. */
int ptc__cj_json_stream_next(json_stream *a)
{
    if (a->n++)
        ptc__cj_out_s(a->in, ",");
    ptc__cj_json_newline(a->in, a->depth + 1);
    return a->depth + 1;
}

void ptc__cj_out_i64(cj *in, int64_t x)
{
    char buf[24], *e = buf + sizeof buf, *p = e;
    uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        *--p = '-';
    ptc__cj_out(in, p, (size_t)(e - p));
}

/* A count as the document gives it: an integer up to INT64_MAX, a string of its digits beyond
 * (JSON readers lose integers past 2^63). */
void ptc__cj_out_u64(cj *in, uint64_t x)
{
    if (x <= (uint64_t)INT64_MAX) {
        ptc__cj_out_i64(in, (int64_t)x);
        return;
    }
    char s[24];
    int n = snprintf(s, sizeof s, "\"%" PRIu64 "\"", x);
    ptc__cj_out(in, s, (size_t)n);
}

void ptc__cj_out_bool(cj *in, int b)
{
    ptc__cj_out_s(in, b ? "true" : "false");
}

/* ptc__cj_json_cstr(s) as json_write writes it; -1 when out of memory or the write failed. */
int ptc__cj_out_cstr(cj *in, const char *s)
{
    if (!s) {
        ptc__cj_out_s(in, "null");
        return in->wrc < 0 ? -1 : 0;
    }
    size_t n = 0;
    for (unsigned char ch; (ch = (unsigned char)s[n]) != 0; n++)
        if (ch < 0x20 || ch > 0x7E || ch == '"' || ch == '\\')
            return ptc__cj_json_write(in, ptc__cj_json_cstr(s),
                                      0); /* a string holds no line break */
    if (n + 2 >= sizeof in->obuf) {
        ptc__cj_out_s(in, "\"");
        ptc__cj_out(in, s, n);
        ptc__cj_out_s(in, "\"");
    } else {
        char *p = ptc__cj_out_room(in, n + 2);
        p[0] = '"';
        memcpy(p + 1, s, n);
        p[n + 1] = '"';
        in->olen += n + 2;
    }
    return in->wrc < 0 ? -1 : 0;
}

void ptc__cj_jobj_close(jobj *o)
{
    if (o->n) {
        ptc__cj_json_newline(o->in, o->depth);
        ptc__cj_out_s(o->in, "}");
    } else {
        ptc__cj_out_s(o->in, "{}");
    }
}

/* A shape or stride: an array of integers at nesting level depth. */
void ptc__cj_out_dims(cj *in, int depth, int ndim, const int64_t *dims)
{
    if (ndim <= 0) {
        ptc__cj_out_s(in, "[]");
        return;
    }
    ptc__cj_out_s(in, "[");
    for (int d = 0; d < ndim; d++) {
        if (d)
            ptc__cj_out_s(in, ",");
        ptc__cj_json_newline(in, depth + 1);
        ptc__cj_out_i64(in, dims[d]);
    }
    ptc__cj_json_newline(in, depth);
    ptc__cj_out_s(in, "]");
}

static json_t *json_items(cj *in, const ptc_value *v, int depth)
{
    json_t *a = json_array();
    size_t n = ptc_value_len(v);
    for (size_t i = 0; a && i < n; i++) {
        const ptc_value *item = ptc_value_item(v, i);
        if (json_push(a, item ? ptc__cj_json_value(in, item, depth + 1) : json_null()) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* The JSON form of a leaf value (schema in ptc-inspect(1)). NULL only when out of memory. */
json_t *ptc__cj_json_value(cj *in, const ptc_value *v, int depth)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int flag;
    int64_t x;
    double re, im;
    const char *s;
    const uint8_t *bytes;
    size_t len;
    json_t *j;

    if (!ptc__cj_render_charge(in))
        return json_null(); /* the walk reports the exceeded budget */
    switch (k) {
    case PTC_VALUE_NONE:
        return json_null();
    case PTC_VALUE_BOOL:
        return ptc_value_bool(v, &flag) == 0 ? json_boolean(flag) : json_null();
    case PTC_VALUE_INT:
        if (ptc_value_int(v, &x) == 0)
            return json_integer((json_int_t)x);
        return json_rendered(in, v); /* beyond 64 bits: decimal digits in a string */
    case PTC_VALUE_FLOAT:
        return ptc_value_float(v, &re) == 0 ? json_double(re) : json_null();
    case PTC_VALUE_COMPLEX:
        if (ptc_value_complex(v, &re, &im) < 0)
            return json_null();
        j = json_object();
        if (j && (ptc__cj_json_put(j, "real", json_double(re)) < 0 ||
                  ptc__cj_json_put(j, "imag", json_double(im)) < 0)) {
            json_decref(j);
            return NULL;
        }
        return j;
    case PTC_VALUE_STR:
        if (ptc_value_str(v, &s, &len) < 0)
            return json_null();
        /* Written whole, as escaped JSON: a str shared by many keys adds up. */
        if (!ptc__cj_render_charge_bytes(in, ptc__cj_json_text_cost(s, len)) || in->counting)
            return json_null();
        return ptc__cj_json_text(s, len);
    case PTC_VALUE_BYTES: {
        if (ptc_value_bytes(v, &bytes, &len) < 0)
            return json_null();
        static const char hex[] = "0123456789abcdef";
        size_t shown = len > JSON_MAX_BYTES ? JSON_MAX_BYTES : len;
        if (!ptc__cj_render_charge_bytes(in, 2 * (uint64_t)shown))
            return json_null();
        char *h = ptc__malloc(2 * shown + 1);
        if (!h)
            return NULL;
        for (size_t i = 0; i < shown; i++) {
            h[2 * i] = hex[bytes[i] >> 4];
            h[2 * i + 1] = hex[bytes[i] & 15];
        }
        h[2 * shown] = '\0';
        j = json_object();
        if (j && (ptc__cj_json_put(j, "len", json_integer((json_int_t)len)) < 0 ||
                  ptc__cj_json_put(j, "hex", json_string(h)) < 0 ||
                  (shown < len && ptc__cj_json_put(j, "truncated", json_true()) < 0))) {
            json_decref(j);
            j = NULL;
        }
        ptc__free(h);
        return j;
    }
    case PTC_VALUE_SIZE:
        return json_items(in, v, depth);
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
        return depth < JSON_MAX_DEPTH ? json_items(in, v, depth) : json_rendered(in, v);
    case PTC_VALUE_DICT:
        /* Dicts are listed entry by entry; one reaches here only empty, or inside a set or a
         * dict key, where a string of its rendering is enough. */
        return ptc_value_len(v) == 0 ? json_object() : json_rendered(in, v);
    case PTC_VALUE_DEVICE: {
        int64_t index;
        if (ptc_value_device(v, &s, &index) < 0)
            return json_null();
        sbuf b = {0};
        ptc__sb_puts(&b, s ? s : "?");
        if (index >= 0)
            ptc__sb_printf(&b, ":%" PRId64, index);
        j = b.oom ? NULL : ptc__cj_json_text(ptc__sb_str(&b), b.len);
        ptc__sb_free(&b);
        return j;
    }
    case PTC_VALUE_DTYPE:
    case PTC_VALUE_TENSOR:
        return json_rendered(in, v);
    case PTC_VALUE_GLOBAL:
    case PTC_VALUE_OBJECT:
        return ptc__cj_json_cstr(ptc_value_global_name(v));
    }
    return json_rendered(in, v);
}
