/*
 * cmd_inspect.c - `ptc inspect [--json] [--hash] [--no-values] FILE`: what a checkpoint holds.
 *
 * The file is opened through the public API under the default policy (nothing from the file ever
 * runs), then shown in two parts: the tensors, in the order ptc_walk_next reports them, with the
 * storage each one views and which of them share one; and the other values (ints, strings, None,
 * dtypes ...) found by a walk of the value tree of our own, with the same path rules. Text output
 * is for people; --json prints one object whose schema is documented in ptc-inspect(1) and kept
 * stable.
 *
 * Every byte that came from the file (keys, strings, storage keys, the prefix) is escaped before it
 * is printed (cli_escape_*). In JSON, jansson escapes C0 controls, cli_put_json_text the C1
 * controls and bidi overrides, and text that is not valid UTF-8 is given in its escaped form.
 *
 * The value walk is iterative (only the one-line renderer recurses, to a fixed depth) and stops
 * after MAX_VALUE_VISITS nodes, so a file whose tree shares nodes many times over cannot make the
 * listing run for ever.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define NO_ROW SIZE_MAX
#define MAX_VALUE_VISITS (1u << 22) /* nodes the value listing visits before it stops */
#define INLINE_MAX_DEPTH 4          /* nesting shown inside one rendered value */
#define INLINE_MAX_ITEMS 16         /* items shown of one container inside a rendered value */
#define TEXT_MAX_STR 256            /* bytes of a str shown in text output */
#define TEXT_MAX_BYTES 32           /* bytes of a bytes value shown in text output */
#define JSON_MAX_BYTES 65536        /* bytes of a bytes value given as hex in JSON */
#define BIGINT_MAX_BYTES 1024       /* longest int rendered in decimal (the conversion is O(n^2)) */
#define JSON_MAX_DEPTH 16           /* nesting of a set / tuple rendered as a JSON array */
#define PATH_COL_MAX 60             /* widest path column; longer paths push their line out */

struct options {
    int json;
    int hash;
    int values;
    const char *path;
};

/* One tensor as ptc_walk_next reported it. */
typedef struct row {
    char *path; /* owned copy: the walk's pointer lives only until its next call */
    const ptc_tensor *t;
    size_t shared_with; /* first row on the same storage, NO_ROW for that first row itself */
    uint8_t sha256[32];
} row;

typedef struct inspect {
    const struct options *opt;
    ptc_ckpt *c;
    row *rows;
    size_t nrows;
    size_t caprows;
} inspect;

/* The container's name as the JSON and text outputs spell it. */
static const char *format_name(const ptc_ckpt *c)
{
    switch (ptc_ckpt_format(c)) {
    case PTC_FORMAT_ZIP: return "zip";
    case PTC_FORMAT_LEGACY: return "legacy";
    case PTC_FORMAT_SAFETENSORS: return "safetensors";
    }
    return "unknown";
}

static const char usage_text[] =
    "usage: ptc inspect [--json] [--hash] [--no-values] FILE\n"
    "\n"
    "Show what a PyTorch checkpoint holds: its format, its storages, every tensor (path, dtype,\n"
    "shape, size, which tensors share a storage) and the other values (numbers, strings, ...).\n"
    "Nothing from the file is ever run; a file outside torch.load(weights_only=True)'s allowlist\n"
    "is refused with the reason.\n"
    "\n"
    "Options:\n"
    "  --json       print one JSON object instead of text (schema in ptc-inspect(1))\n"
    "  --hash       add the SHA-256 of each tensor's data (reads every byte)\n"
    "  --no-values  list the tensors only, not the other values\n"
    "  -h, --help   show this help\n";

/* ---- rendering values as one line of text ----------------------------------------------------
 * flags: ESCAPE renders strings escaped for a terminal (values); without it strings are copied raw
 * (dict keys that become path segments, which are escaped once when the path is printed). */
enum { R_ESCAPE = 1 };

static void render(cli_buf *b, const ptc_value *v, int depth, unsigned flags);

/* Decimal digits of a two's-complement little-endian integer of any length. */
static void render_bigint(cli_buf *b, const uint8_t *bytes, size_t len)
{
    if (len == 0) {
        cli_buf_puts(b, "0");
        return;
    }
    if (len > BIGINT_MAX_BYTES) {
        cli_buf_printf(b, "<int of %zu bytes>", len);
        return;
    }
    uint8_t *mag = malloc(len);
    uint32_t *chunk = malloc((len / 3 + 2) * sizeof *chunk); /* base 1e9, least significant first */
    if (!mag || !chunk) {
        free(mag);
        free(chunk);
        b->oom = 1;
        return;
    }
    int neg = (bytes[len - 1] & 0x80) != 0;
    unsigned carry = 1;
    for (size_t i = 0; i < len; i++) {
        if (neg) { /* magnitude = ~x + 1 */
            unsigned s = (uint8_t)~bytes[i] + carry;
            mag[i] = (uint8_t)s;
            carry = s >> 8;
        } else {
            mag[i] = bytes[i];
        }
    }
    size_t top = len, nchunk = 0;
    while (top > 0 && mag[top - 1] == 0)
        top--;
    while (top > 0) {
        uint64_t rem = 0;
        for (size_t i = top; i-- > 0;) {
            uint64_t cur = (rem << 8) | mag[i];
            mag[i] = (uint8_t)(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        chunk[nchunk++] = (uint32_t)rem;
        while (top > 0 && mag[top - 1] == 0)
            top--;
    }
    if (nchunk == 0) {
        cli_buf_puts(b, "0");
    } else {
        cli_buf_printf(b, "%s%u", neg ? "-" : "", (unsigned)chunk[nchunk - 1]);
        for (size_t i = nchunk - 1; i-- > 0;)
            cli_buf_printf(b, "%09u", (unsigned)chunk[i]);
    }
    free(mag);
    free(chunk);
}

static void render_int(cli_buf *b, const ptc_value *v)
{
    int64_t x;
    const uint8_t *bytes;
    size_t len;
    if (ptc_value_int(v, &x) == 0)
        cli_buf_printf(b, "%" PRId64, x);
    else if (ptc_value_int_bytes(v, &bytes, &len) == 0)
        render_bigint(b, bytes, len);
    else
        cli_buf_puts(b, "?");
}

static void render_double(cli_buf *b, double x)
{
    char s[40];
    cli_format_double(s, sizeof s, x);
    cli_buf_puts(b, s);
}

/* Python's complex repr: "(1+2j)", "2.5j", "(nan+infj)". */
static void render_complex(cli_buf *b, double re, double im)
{
    char r[40], i[40];
    cli_format_double(r, sizeof r, re);
    cli_format_double(i, sizeof i, im);
    /* Python drops ".0" from the parts of a complex. */
    size_t rl = strlen(r), il = strlen(i);
    if (rl > 2 && strcmp(r + rl - 2, ".0") == 0)
        r[rl - 2] = '\0';
    if (il > 2 && strcmp(i + il - 2, ".0") == 0)
        i[il - 2] = '\0';
    if (re == 0.0 && !signbit(re))
        cli_buf_printf(b, "%sj", i);
    else
        cli_buf_printf(b, "(%s%s%sj)", r, i[0] == '-' ? "" : "+", i);
}

static void render_str(cli_buf *b, const char *s, size_t len, unsigned flags)
{
    size_t shown = len > TEXT_MAX_STR ? TEXT_MAX_STR : len;
    cli_buf_puts(b, "\"");
    if (flags & R_ESCAPE)
        cli_buf_escape(b, s, shown, CLI_ESC_QUOTE);
    else
        cli_buf_putn(b, s, shown);
    cli_buf_puts(b, "\"");
    if (shown < len)
        cli_buf_printf(b, "... (%zu bytes)", len);
}

/* bytes as Python shows them: b'ab\x00'. Every byte outside printable ASCII is escaped. */
static void render_bytes(cli_buf *b, const uint8_t *p, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t shown = len > TEXT_MAX_BYTES ? TEXT_MAX_BYTES : len;
    cli_buf_puts(b, "b'");
    for (size_t i = 0; i < shown; i++) {
        uint8_t c = p[i];
        char e[4] = {'\\', 0, 0, 0};
        if (c == '\\' || c == '\'') {
            e[1] = (char)c;
            cli_buf_putn(b, e, 2);
        } else if (c >= 0x20 && c < 0x7F) {
            cli_buf_putn(b, &c, 1);
        } else {
            e[1] = 'x';
            e[2] = hex[c >> 4];
            e[3] = hex[c & 15];
            cli_buf_putn(b, e, 4);
        }
    }
    cli_buf_puts(b, "'");
    if (shown < len)
        cli_buf_printf(b, "... (%zu bytes)", len);
}

static void render_text(cli_buf *b, const char *s, unsigned flags)
{
    if (!s)
        s = "?";
    if (flags & R_ESCAPE)
        cli_buf_escape(b, s, strlen(s), 0);
    else
        cli_buf_puts(b, s);
}

static void render_shape(cli_buf *b, int ndim, const int64_t *dims)
{
    cli_buf_puts(b, "[");
    for (int d = 0; d < ndim; d++)
        cli_buf_printf(b, "%s%" PRId64, d ? ", " : "", dims[d]);
    cli_buf_puts(b, "]");
}

/* Items of a tuple, list, set or torch.Size between open and close, at most INLINE_MAX_ITEMS. */
static void render_items(cli_buf *b, const ptc_value *v, const char *open, const char *close,
                         int depth, unsigned flags)
{
    size_t n = ptc_value_len(v);
    cli_buf_puts(b, open);
    for (size_t i = 0; i < n; i++) {
        if (i)
            cli_buf_puts(b, ", ");
        if (i == INLINE_MAX_ITEMS) {
            cli_buf_printf(b, "... (%zu items)", n);
            break;
        }
        const ptc_value *item = ptc_value_item(v, i);
        if (item)
            render(b, item, depth + 1, flags);
        else
            cli_buf_puts(b, "?");
    }
    if (n == 1 && ptc_value_kind_of(v) == PTC_VALUE_TUPLE)
        cli_buf_puts(b, ",");
    cli_buf_puts(b, close);
}

static void render_dict(cli_buf *b, const ptc_value *v, int depth, unsigned flags)
{
    size_t n = ptc_value_len(v);
    cli_buf_puts(b, "{");
    for (size_t i = 0; i < n; i++) {
        if (i)
            cli_buf_puts(b, ", ");
        if (i == INLINE_MAX_ITEMS) {
            cli_buf_printf(b, "... (%zu items)", n);
            break;
        }
        const ptc_value *k = ptc_dict_key(v, i), *x = ptc_dict_value(v, i);
        if (k)
            render(b, k, depth + 1, flags);
        cli_buf_puts(b, ": ");
        if (x)
            render(b, x, depth + 1, flags);
    }
    cli_buf_puts(b, "}");
}

/* One value as one line, in Python's notation where it has one. Depth-bounded: containers deeper
 * than INLINE_MAX_DEPTH show as "...". */
static void render(cli_buf *b, const ptc_value *v, int depth, unsigned flags)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int flag;
    double re, im;
    const char *s;
    size_t len;
    const uint8_t *bytes;
    ptc_dtype dt;
    int64_t index;

    if (depth > INLINE_MAX_DEPTH && (k == PTC_VALUE_TUPLE || k == PTC_VALUE_LIST ||
                                     k == PTC_VALUE_DICT || k == PTC_VALUE_SET)) {
        cli_buf_puts(b, "...");
        return;
    }
    switch (k) {
    case PTC_VALUE_NONE:
        cli_buf_puts(b, "None");
        break;
    case PTC_VALUE_BOOL:
        cli_buf_puts(b, ptc_value_bool(v, &flag) < 0 ? "?" : flag ? "True" : "False");
        break;
    case PTC_VALUE_INT:
        render_int(b, v);
        break;
    case PTC_VALUE_FLOAT:
        if (ptc_value_float(v, &re) == 0)
            render_double(b, re);
        else
            cli_buf_puts(b, "?");
        break;
    case PTC_VALUE_COMPLEX:
        if (ptc_value_complex(v, &re, &im) == 0)
            render_complex(b, re, im);
        else
            cli_buf_puts(b, "?");
        break;
    case PTC_VALUE_STR:
        if (ptc_value_str(v, &s, &len) == 0)
            render_str(b, s, len, flags);
        else
            cli_buf_puts(b, "?");
        break;
    case PTC_VALUE_BYTES:
        if (ptc_value_bytes(v, &bytes, &len) == 0)
            render_bytes(b, bytes, len);
        else
            cli_buf_puts(b, "?");
        break;
    case PTC_VALUE_TUPLE:
        render_items(b, v, "(", ")", depth, flags);
        break;
    case PTC_VALUE_LIST:
        render_items(b, v, "[", "]", depth, flags);
        break;
    case PTC_VALUE_SET:
        if (ptc_value_len(v) == 0)
            cli_buf_puts(b, "set()");
        else
            render_items(b, v, "set({", "})", depth, flags);
        break;
    case PTC_VALUE_DICT:
        render_dict(b, v, depth, flags);
        break;
    case PTC_VALUE_SIZE:
        render_items(b, v, "torch.Size([", "])", depth, flags);
        break;
    case PTC_VALUE_TENSOR: {
        const ptc_tensor *t = ptc_value_tensor(v);
        if (!t) {
            cli_buf_puts(b, "tensor(?)");
            break;
        }
        cli_buf_puts(b, "tensor(");
        render_text(b, ptc_dtype_name(ptc_tensor_dtype(t)), 0);
        cli_buf_puts(b, ", ");
        render_shape(b, ptc_tensor_ndim(t), ptc_tensor_shape(t));
        cli_buf_puts(b, ")");
        break;
    }
    case PTC_VALUE_DTYPE:
        cli_buf_puts(b, "torch.");
        render_text(b, ptc_value_dtype(v, &dt) == 0 ? ptc_dtype_name(dt) : NULL, 0);
        break;
    case PTC_VALUE_DEVICE:
        if (ptc_value_device(v, &s, &index) < 0) {
            cli_buf_puts(b, "device(?)");
            break;
        }
        cli_buf_puts(b, "device(type='");
        render_text(b, s, flags);
        if (index >= 0)
            cli_buf_printf(b, "', index=%" PRId64 ")", index);
        else
            cli_buf_puts(b, "')");
        break;
    case PTC_VALUE_GLOBAL:
        cli_buf_puts(b, "<global ");
        render_text(b, ptc_value_global_name(v), flags);
        cli_buf_puts(b, ">");
        break;
    case PTC_VALUE_OBJECT:
        cli_buf_puts(b, "<");
        render_text(b, ptc_value_global_name(v), flags);
        cli_buf_puts(b, " object>");
        break;
    default:
        cli_buf_printf(b, "<value of kind %d>", (int)k);
        break;
    }
}

/* ---- values as JSON -------------------------------------------------------------------------
 * Names of the kinds in the "type" field. The tool owns these rather than borrowing
 * ptc_value_kind_name, because they are part of its documented output schema. */
static const char *kind_name(ptc_value_kind k)
{
    switch (k) {
    case PTC_VALUE_NONE: return "none";
    case PTC_VALUE_BOOL: return "bool";
    case PTC_VALUE_INT: return "int";
    case PTC_VALUE_FLOAT: return "float";
    case PTC_VALUE_STR: return "str";
    case PTC_VALUE_BYTES: return "bytes";
    case PTC_VALUE_TUPLE: return "tuple";
    case PTC_VALUE_LIST: return "list";
    case PTC_VALUE_DICT: return "dict";
    case PTC_VALUE_SET: return "set";
    case PTC_VALUE_COMPLEX: return "complex";
    case PTC_VALUE_TENSOR: return "tensor";
    case PTC_VALUE_DTYPE: return "dtype";
    case PTC_VALUE_DEVICE: return "device";
    case PTC_VALUE_SIZE: return "size";
    case PTC_VALUE_GLOBAL: return "global";
    case PTC_VALUE_OBJECT: return "object";
    }
    return "unknown";
}

/* A JSON string for text from the file: as it is when it is valid UTF-8 (jansson escapes control
 * characters), otherwise its escaped rendering, since JSON cannot hold invalid UTF-8. */
static json_t *json_text(const char *s, size_t len)
{
    if (!s)
        return json_null();
    if (cli_utf8_valid(s, len))
        return json_stringn(s, len);
    cli_buf b = {0};
    cli_buf_escape(&b, s, len, 0);
    json_t *j = b.oom ? NULL : json_stringn(cli_buf_str(&b), b.len);
    cli_buf_free(&b);
    return j;
}

static json_t *json_cstr(const char *s)
{
    return json_text(s, s ? strlen(s) : 0);
}

/* The text rendering of v as a JSON string (for what has no natural JSON form). */
static json_t *json_rendered(const ptc_value *v)
{
    cli_buf b = {0};
    render(&b, v, 0, 0);
    json_t *j = b.oom ? NULL : json_text(cli_buf_str(&b), b.len);
    cli_buf_free(&b);
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

static int json_put(json_t *obj, const char *key, json_t *val)
{
    return json_object_set_new(obj, key, val) == 0 ? 0 : -1; /* a NULL val is refused, not leaked */
}

static int json_push(json_t *arr, json_t *val)
{
    return json_array_append_new(arr, val) == 0 ? 0 : -1;
}

static json_t *json_value(const ptc_value *v, int depth);

static json_t *json_items(const ptc_value *v, int depth)
{
    json_t *a = json_array();
    size_t n = ptc_value_len(v);
    for (size_t i = 0; a && i < n; i++) {
        const ptc_value *item = ptc_value_item(v, i);
        if (json_push(a, item ? json_value(item, depth + 1) : json_null()) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* The JSON form of a leaf value (schema in ptc-inspect(1)). NULL only when out of memory. */
static json_t *json_value(const ptc_value *v, int depth)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int flag;
    int64_t x;
    double re, im;
    const char *s;
    const uint8_t *bytes;
    size_t len;
    json_t *j;

    switch (k) {
    case PTC_VALUE_NONE:
        return json_null();
    case PTC_VALUE_BOOL:
        return ptc_value_bool(v, &flag) == 0 ? json_boolean(flag) : json_null();
    case PTC_VALUE_INT:
        if (ptc_value_int(v, &x) == 0)
            return json_integer((json_int_t)x);
        return json_rendered(v); /* beyond 64 bits: decimal digits in a string */
    case PTC_VALUE_FLOAT:
        return ptc_value_float(v, &re) == 0 ? json_double(re) : json_null();
    case PTC_VALUE_COMPLEX:
        if (ptc_value_complex(v, &re, &im) < 0)
            return json_null();
        j = json_object();
        if (j && (json_put(j, "real", json_double(re)) < 0 ||
                  json_put(j, "imag", json_double(im)) < 0)) {
            json_decref(j);
            return NULL;
        }
        return j;
    case PTC_VALUE_STR:
        return ptc_value_str(v, &s, &len) == 0 ? json_text(s, len) : json_null();
    case PTC_VALUE_BYTES: {
        if (ptc_value_bytes(v, &bytes, &len) < 0)
            return json_null();
        static const char hex[] = "0123456789abcdef";
        size_t shown = len > JSON_MAX_BYTES ? JSON_MAX_BYTES : len;
        char *h = malloc(2 * shown + 1);
        if (!h)
            return NULL;
        for (size_t i = 0; i < shown; i++) {
            h[2 * i] = hex[bytes[i] >> 4];
            h[2 * i + 1] = hex[bytes[i] & 15];
        }
        h[2 * shown] = '\0';
        j = json_object();
        if (j && (json_put(j, "len", json_integer((json_int_t)len)) < 0 ||
                  json_put(j, "hex", json_string(h)) < 0 ||
                  (shown < len && json_put(j, "truncated", json_true()) < 0))) {
            json_decref(j);
            j = NULL;
        }
        free(h);
        return j;
    }
    case PTC_VALUE_SIZE:
        return json_items(v, depth);
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SET:
        return depth < JSON_MAX_DEPTH ? json_items(v, depth) : json_rendered(v);
    case PTC_VALUE_DICT:
        /* Dicts are listed entry by entry; one reaches here only empty, or inside a set or a
         * dict key, where a string of its rendering is enough. */
        return ptc_value_len(v) == 0 ? json_object() : json_rendered(v);
    case PTC_VALUE_DEVICE: {
        int64_t index;
        if (ptc_value_device(v, &s, &index) < 0)
            return json_null();
        cli_buf b = {0};
        cli_buf_puts(&b, s ? s : "?");
        if (index >= 0)
            cli_buf_printf(&b, ":%" PRId64, index);
        j = b.oom ? NULL : json_text(cli_buf_str(&b), b.len);
        cli_buf_free(&b);
        return j;
    }
    case PTC_VALUE_DTYPE:
    case PTC_VALUE_TENSOR:
        return json_rendered(v);
    case PTC_VALUE_GLOBAL:
    case PTC_VALUE_OBJECT:
        return json_cstr(ptc_value_global_name(v));
    }
    return json_rendered(v);
}

/* ---- the value walk ------------------------------------------------------------------------- */

typedef struct value_sink {
    const struct options *opt;
    json_t *values;   /* --json: the "values" array */
    json_t *metadata; /* --json: the "metadata" array */
    size_t count;     /* lines or entries emitted, metadata included */
    int truncated;    /* stopped after MAX_VALUE_VISITS */
    int oom;
    cli_buf line;
} value_sink;

static void print_path(const char *path, size_t len)
{
    if (len == 0)
        fputs("(root)", stdout);
    else
        cli_escape_put(stdout, path, len, 0);
}

static void emit_leaf(value_sink *out, const cli_buf *path, const ptc_value *v)
{
    out->count++;
    if (out->opt->json) {
        json_t *e = json_object();
        if (!e || json_put(e, "path", json_text(cli_buf_str(path), path->len)) < 0 ||
            json_put(e, "type", json_string(kind_name(ptc_value_kind_of(v)))) < 0 ||
            json_put(e, "value", json_value(v, 0)) < 0 || json_push(out->values, e) < 0) {
            json_decref(e);
            out->oom = 1;
        }
        return;
    }
    cli_buf_truncate(&out->line, 0);
    render(&out->line, v, 0, R_ESCAPE);
    if (out->line.oom) {
        out->oom = 1;
        return;
    }
    fputs("  ", stdout);
    print_path(cli_buf_str(path), path->len);
    printf(" = %s\n", cli_buf_str(&out->line));
}

/* A dict's attributes: torch's state dicts carry {'_metadata': {module: {'version': n}}}. */
static void emit_attrs(value_sink *out, const cli_buf *path, const ptc_value *attrs)
{
    const ptc_value *meta = ptc_dict_get(attrs, "_metadata");
    int has_modules = meta && ptc_value_kind_of(meta) == PTC_VALUE_DICT;
    size_t modules = has_modules ? ptc_value_len(meta) : 0;
    size_t nattrs = ptc_value_kind_of(attrs) == PTC_VALUE_DICT ? ptc_value_len(attrs) : 0;
    size_t others = meta && nattrs > 0 ? nattrs - 1 : nattrs;

    out->count++;
    if (out->opt->json) {
        json_t *e = json_object();
        json_t *jmodules = has_modules ? json_integer((json_int_t)modules) : json_null();
        if (!e || json_put(e, "path", json_text(cli_buf_str(path), path->len)) < 0 ||
            json_put(e, "modules", jmodules) < 0 ||
            json_put(e, "attributes", json_integer((json_int_t)nattrs)) < 0 ||
            json_push(out->metadata, e) < 0) {
            json_decref(e);
            out->oom = 1;
        }
        return;
    }
    fputs("  ", stdout);
    print_path(cli_buf_str(path), path->len);
    if (has_modules)
        printf(" (state dict metadata: %zu module%s", modules, modules == 1 ? "" : "s");
    else
        printf(" (dict attributes: %zu", nattrs);
    if (has_modules && others > 0)
        printf("; %zu other attribute%s", others, others == 1 ? "" : "s");
    fputs(")\n", stdout);
}

static int is_container(ptc_value_kind k)
{
    return k == PTC_VALUE_DICT || k == PTC_VALUE_LIST || k == PTC_VALUE_TUPLE;
}

typedef struct frame {
    const ptc_value *v; /* the dict, list or tuple being listed */
    size_t i, n;        /* next item, item count */
    size_t path_len;    /* length of v's path in the path buffer */
    int is_root;        /* items of the root get no leading '.' */
} frame;

/* Appends the path segment for a dict key: strings as written, ints in decimal, anything else as
 * its one-line rendering (raw: the whole path is escaped when printed). */
static void append_key(cli_buf *path, const ptc_value *key)
{
    const char *s;
    size_t len;
    if (!key)
        cli_buf_puts(path, "?");
    else if (ptc_value_kind_of(key) == PTC_VALUE_STR && ptc_value_str(key, &s, &len) == 0)
        cli_buf_putn(path, s, len);
    else
        render(path, key, 0, 0);
}

/* Lists every non-tensor leaf of the tree under root, depth-first in container order, with the
 * path rules of ptc_walk_next. Iterative: the stack lives on the heap and grows with the tree's
 * depth, which the library bounds at load time; the visit budget bounds the work. */
static void walk_values(value_sink *out, const ptc_value *root)
{
    cli_buf path = {0};
    frame *stack = NULL;
    size_t nstack = 0, cap = 0;
    size_t visits = 0;
    const ptc_value *v = root;
    int is_root = 1;

    if (!v)
        return;
    for (;;) {
        /* Visit v, whose path is in the buffer. */
        ptc_value_kind k = ptc_value_kind_of(v);
        size_t n = is_container(k) ? ptc_value_len(v) : 0;
        if (k == PTC_VALUE_DICT) {
            const ptc_value *attrs = ptc_dict_attrs(v);
            if (attrs)
                emit_attrs(out, &path, attrs);
        }
        if (is_container(k) && n > 0) {
            if (nstack == cap) {
                size_t ncap = cap ? cap * 2 : 32;
                frame *ns = realloc(stack, ncap * sizeof *ns);
                if (!ns) {
                    out->oom = 1;
                    break;
                }
                stack = ns;
                cap = ncap;
            }
            stack[nstack++] = (frame){v, 0, n, path.len, is_root};
        } else if (k != PTC_VALUE_TENSOR) {
            emit_leaf(out, &path, v); /* scalars, sets, sizes, and empty containers */
        }
        if (out->oom || path.oom)
            break;

        /* Find the next item: the first unlisted item of the innermost unfinished container. */
        v = NULL;
        while (nstack > 0 && !v) {
            frame *f = &stack[nstack - 1];
            if (f->i == f->n) {
                nstack--;
                continue;
            }
            size_t i = f->i++;
            cli_buf_truncate(&path, f->path_len);
            if (!f->is_root)
                cli_buf_puts(&path, ".");
            if (ptc_value_kind_of(f->v) == PTC_VALUE_DICT) {
                append_key(&path, ptc_dict_key(f->v, i));
                v = ptc_dict_value(f->v, i);
            } else {
                cli_buf_printf(&path, "%zu", i);
                v = ptc_value_item(f->v, i);
            }
        }
        if (!v)
            break;
        if (++visits > MAX_VALUE_VISITS) {
            out->truncated = 1;
            break;
        }
        is_root = 0;
    }
    if (path.oom)
        out->oom = 1;
    free(stack);
    cli_buf_free(&path);
}

/* ---- tensors -------------------------------------------------------------------------------- */

static void free_rows(inspect *in)
{
    for (size_t i = 0; i < in->nrows; i++)
        free(in->rows[i].path);
    free(in->rows);
    in->rows = NULL;
    in->nrows = in->caprows = 0;
}

static char *copy_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int collect_tensors(inspect *in, ptc_error *err)
{
    ptc_walk *w = NULL;
    const char *path;
    const ptc_tensor *t;
    int rc = ptc_walk_new(&w, ptc_ckpt_root(in->c), err);
    if (rc < 0)
        return rc;
    while ((rc = ptc_walk_next(w, &path, &t)) > 0) {
        if (!t)
            continue;
        if (in->nrows == in->caprows) {
            size_t ncap = in->caprows ? in->caprows * 2 : 64;
            row *nr = realloc(in->rows, ncap * sizeof *nr);
            if (!nr) {
                rc = PTC_ENOMEM;
                break;
            }
            in->rows = nr;
            in->caprows = ncap;
        }
        char *copy = copy_str(path ? path : "");
        if (!copy) {
            rc = PTC_ENOMEM;
            break;
        }
        in->rows[in->nrows++] = (row){.path = copy, .t = t, .shared_with = NO_ROW};
    }
    ptc_walk_free(w);
    if (rc < 0 && err) {
        /* ptc_walk_next gives a code but no detail. */
        err->code = rc;
        err->offset = -1;
        err->member[0] = '\0';
        snprintf(err->message, sizeof err->message, "listing the tensors: %s", ptc_strerror(rc));
    }
    return rc < 0 ? rc : 0;
}

typedef struct by_storage {
    uintptr_t storage;
    size_t row;
} by_storage;

static int cmp_by_storage(const void *pa, const void *pb)
{
    const by_storage *a = pa, *b = pb;
    if (a->storage != b->storage)
        return a->storage < b->storage ? -1 : 1;
    return a->row < b->row ? -1 : a->row > b->row;
}

/* Marks each tensor whose storage an earlier tensor already views with that earlier tensor. */
static int find_sharing(inspect *in)
{
    if (in->nrows < 2)
        return 0;
    by_storage *s = malloc(in->nrows * sizeof *s);
    if (!s)
        return PTC_ENOMEM;
    for (size_t i = 0; i < in->nrows; i++)
        s[i] = (by_storage){(uintptr_t)ptc_tensor_storage(in->rows[i].t), i};
    qsort(s, in->nrows, sizeof *s, cmp_by_storage);
    for (size_t i = 1; i < in->nrows; i++) {
        if (s[i].storage == 0 || s[i].storage != s[i - 1].storage)
            continue;
        size_t first = s[i - 1].row;
        if (in->rows[first].shared_with != NO_ROW)
            first = in->rows[first].shared_with;
        in->rows[s[i].row].shared_with = first;
    }
    free(s);
    return 0;
}

static int hash_tensors(inspect *in, ptc_error *err)
{
    cli_progress p;
    int rc = 0;
    cli_progress_start(&p, "hashing tensors", in->nrows);
    for (size_t i = 0; i < in->nrows && rc == 0; i++) {
        rc = ptc_tensor_sha256(in->rows[i].t, in->rows[i].sha256, err);
        cli_progress_update(&p, i + 1);
    }
    cli_progress_end(&p);
    return rc;
}

static void sha256_hex(char out[65], const uint8_t d[32])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
}

static const char *storage_key(const ptc_storage *s)
{
    const char *k = s ? ptc_storage_key(s) : NULL;
    return k ? k : "?";
}

/* ---- text output ---------------------------------------------------------------------------- */

enum { COL_PATH, COL_DTYPE, COL_SHAPE, COL_BYTES, COL_STORAGE, COL_EXTRA, NCOLS };

static void bytes_cell(cli_buf *b, uint64_t n)
{
    char h[32];
    cli_format_bytes(h, sizeof h, n);
    cli_buf_puts(b, h);
    if (n >= 1024)
        cli_buf_printf(b, " (%" PRIu64 ")", n);
}

/* The cells of one tensor line, each escaped and ready to print. */
static void tensor_cells(const inspect *in, size_t i, cli_buf cell[NCOLS])
{
    const row *r = &in->rows[i];
    const ptc_tensor *t = r->t;
    int ndim = ptc_tensor_ndim(t);
    const ptc_storage *s = ptc_tensor_storage(t);

    for (int c = 0; c < NCOLS; c++)
        cli_buf_truncate(&cell[c], 0);
    if (r->path[0])
        cli_buf_escape(&cell[COL_PATH], r->path, strlen(r->path), 0);
    else
        cli_buf_puts(&cell[COL_PATH], "(root)");
    render_text(&cell[COL_DTYPE], ptc_dtype_name(ptc_tensor_dtype(t)), 0);
    render_shape(&cell[COL_SHAPE], ndim, ptc_tensor_shape(t));
    int64_t nbytes = ptc_tensor_nbytes(t);
    bytes_cell(&cell[COL_BYTES], nbytes > 0 ? (uint64_t)nbytes : 0);

    cli_buf_puts(&cell[COL_STORAGE], "storage ");
    render_text(&cell[COL_STORAGE], storage_key(s), R_ESCAPE);
    if (r->shared_with != NO_ROW) {
        const char *first = in->rows[r->shared_with].path;
        cli_buf_puts(&cell[COL_STORAGE], " (shared with ");
        if (first[0])
            cli_buf_escape(&cell[COL_STORAGE], first, strlen(first), 0);
        else
            cli_buf_puts(&cell[COL_STORAGE], "(root)");
        cli_buf_puts(&cell[COL_STORAGE], ")");
    }

    /* Flags after the fixed columns: what makes this tensor differ from a plain dense one. */
    cli_buf *x = &cell[COL_EXTRA];
    int64_t off = ptc_tensor_storage_offset(t);
    if (off != 0)
        cli_buf_printf(x, "%soffset %" PRId64, x->len ? "  " : "", off);
    if (!ptc_tensor_is_contiguous(t)) {
        cli_buf_puts(x, x->len ? "  stride " : "stride ");
        render_shape(x, ndim, ptc_tensor_stride(t));
    }
    if (ptc_tensor_is_parameter(t))
        cli_buf_puts(x, x->len ? "  param" : "param");
    if (ptc_tensor_requires_grad(t))
        cli_buf_puts(x, x->len ? "  requires_grad" : "requires_grad");
    if (ptc_tensor_is_conj(t))
        cli_buf_puts(x, x->len ? "  conj" : "conj");
    if (ptc_tensor_is_neg(t))
        cli_buf_puts(x, x->len ? "  neg" : "neg");
    if (in->opt->hash) {
        char hex[65];
        sha256_hex(hex, r->sha256);
        cli_buf_printf(x, "%ssha256 %s", x->len ? "  " : "", hex);
    }
}

static void print_padded(const char *s, size_t width, int right)
{
    size_t w = cli_display_width(s);
    if (right)
        for (size_t i = w; i < width; i++)
            putchar(' ');
    fputs(s, stdout);
    if (!right)
        for (size_t i = w; i < width; i++)
            putchar(' ');
}


/* Where the storages were saved, when any was saved elsewhere than on the CPU: each location with
 * its count, the first few in order of appearance. The data is read to the host all the same, as
 * torch.load(map_location="cpu") places it. */
static void text_locations(ptc_ckpt *c)
{
    enum { SHOWN = 4 };
    const char *loc[SHOWN];
    size_t count[SHOWN], nloc = 0, others = 0, n = ptc_ckpt_nstorages(c);
    int elsewhere = 0;
    for (size_t i = 0; i < n; i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        const char *l = s ? ptc_storage_location(s) : NULL;
        if (!l)
            continue;
        elsewhere |= strcmp(l, "cpu") != 0;
        size_t j = 0;
        while (j < nloc && strcmp(loc[j], l) != 0)
            j++;
        if (j < nloc) {
            count[j]++;
        } else if (nloc < SHOWN) {
            loc[nloc] = l;
            count[nloc++] = 1;
        } else {
            others++;
        }
    }
    if (!elsewhere)
        return;
    fputs("saved on   ", stdout);
    for (size_t j = 0; j < nloc; j++) {
        fputs(j ? ", " : "", stdout);
        cli_escape_put(stdout, loc[j], strlen(loc[j]), 0);
        printf(" (%zu)", count[j]);
    }
    if (others)
        printf(", %zu storages elsewhere", others);
    fputs("; read to the CPU, as map_location=\"cpu\" would\n", stdout);
}
static int print_text(inspect *in)
{
    const struct options *opt = in->opt;
    ptc_ckpt *c = in->c;
    int zip = ptc_ckpt_format(c) == PTC_FORMAT_ZIP;
    const char *prefix = ptc_ckpt_prefix(c), *byteorder = ptc_ckpt_byteorder(c);
    size_t nstorages = ptc_ckpt_nstorages(c);
    uint64_t storage_bytes = 0;
    char h[32];

    for (size_t i = 0; i < nstorages; i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        int64_t nb = s ? ptc_storage_nbytes(s) : 0;
        storage_bytes = cli_add_sat(storage_bytes, nb > 0 ? (uint64_t)nb : 0);
    }

    fputs("file       ", stdout);
    cli_escape_put(stdout, opt->path, strlen(opt->path), 0);
    printf("\nformat     %s\n", format_name(c));
    if (zip) {
        fputs("prefix     ", stdout);
        cli_escape_put(stdout, prefix ? prefix : "", prefix ? strlen(prefix) : 0, 0);
        putchar('\n');
    }
    fputs("byteorder  ", stdout);
    cli_escape_put(stdout, byteorder ? byteorder : "?", byteorder ? strlen(byteorder) : 1, 0);
    putchar('\n');
    if (zip)
        printf("records    %zu\n", ptc_ckpt_nrecords(c));
    cli_format_bytes(h, sizeof h, storage_bytes);
    printf("storages   %zu (%s", nstorages, h);
    if (storage_bytes >= 1024)
        printf(", %" PRIu64 " bytes", storage_bytes);
    printf(")\n");
    text_locations(c);

    /* Tensors: one pass to size the columns, one to print. */
    cli_buf cell[NCOLS] = {{0}};
    size_t width[NCOLS] = {0};
    static const char *const head[NCOLS] = {"path", "dtype", "shape", "bytes", "storage", ""};
    uint64_t numel = 0, tensor_bytes = 0;
    int oom = 0;

    printf("\ntensors (%zu)\n", in->nrows);
    for (int k = 0; k < NCOLS; k++)
        width[k] = strlen(head[k]);
    for (size_t i = 0; i < in->nrows; i++) {
        tensor_cells(in, i, cell);
        for (int k = 0; k < NCOLS; k++) {
            size_t w = cli_display_width(cli_buf_str(&cell[k]));
            if (w > width[k] && !(k == COL_PATH && w > PATH_COL_MAX))
                width[k] = w;
        }
        int64_t ne = ptc_tensor_numel(in->rows[i].t), nb = ptc_tensor_nbytes(in->rows[i].t);
        numel = cli_add_sat(numel, ne > 0 ? (uint64_t)ne : 0);
        tensor_bytes = cli_add_sat(tensor_bytes, nb > 0 ? (uint64_t)nb : 0);
    }
    if (in->nrows > 0) {
        fputs("  ", stdout);
        for (int k = 0; k < COL_EXTRA; k++) {
            print_padded(head[k], k == COL_STORAGE ? 0 : width[k], k == COL_BYTES);
            fputs(k + 1 < COL_EXTRA ? "  " : "\n", stdout);
        }
    }
    for (size_t i = 0; i < in->nrows; i++) {
        tensor_cells(in, i, cell);
        fputs("  ", stdout);
        for (int k = 0; k < NCOLS; k++) {
            if (cell[k].oom)
                oom = 1;
            int last = k == NCOLS - 1 || (k == COL_STORAGE && cell[COL_EXTRA].len == 0);
            print_padded(cli_buf_str(&cell[k]), last ? 0 : width[k], k == COL_BYTES);
            if (last)
                break;
            fputs("  ", stdout);
        }
        putchar('\n');
    }
    for (int k = 0; k < NCOLS; k++)
        cli_buf_free(&cell[k]);
    if (oom)
        return PTC_ENOMEM;

    if (opt->values) {
        value_sink out = {.opt = opt};
        printf("\nvalues\n");
        walk_values(&out, ptc_ckpt_root(c));
        cli_buf_free(&out.line);
        if (out.oom)
            return PTC_ENOMEM;
        if (out.count == 0)
            printf("  (none)\n");
        if (out.truncated)
            printf("  ... (listing stopped after %u nodes)\n", (unsigned)MAX_VALUE_VISITS);
    }

    cli_format_bytes(h, sizeof h, tensor_bytes);
    printf("\ntotal      %zu tensor%s, %" PRIu64 " element%s, %s (%" PRIu64 " bytes)\n", in->nrows,
           in->nrows == 1 ? "" : "s", numel, numel == 1 ? "" : "s", h, tensor_bytes);
    return 0;
}

/* ---- JSON output ---------------------------------------------------------------------------- */

static json_t *json_dims(int ndim, const int64_t *dims)
{
    json_t *a = json_array();
    for (int d = 0; a && d < ndim; d++) {
        if (json_push(a, json_integer((json_int_t)dims[d])) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *json_u64(uint64_t x)
{
    if (x <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)x);
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, x);
    return json_string(s);
}

static json_t *json_tensor(const inspect *in, size_t i)
{
    const row *r = &in->rows[i];
    const ptc_tensor *t = r->t;
    const ptc_storage *s = ptc_tensor_storage(t);
    int ndim = ptc_tensor_ndim(t);
    json_t *e = json_object();
    if (!e)
        return NULL;
    int bad = json_put(e, "path", json_cstr(r->path)) < 0 ||
              json_put(e, "dtype", json_cstr(ptc_dtype_name(ptc_tensor_dtype(t)))) < 0 ||
              json_put(e, "shape", json_dims(ndim, ptc_tensor_shape(t))) < 0 ||
              json_put(e, "stride", json_dims(ndim, ptc_tensor_stride(t))) < 0 ||
              json_put(e, "storage_offset",
                       json_integer((json_int_t)ptc_tensor_storage_offset(t))) < 0 ||
              json_put(e, "storage", s ? json_cstr(ptc_storage_key(s)) : json_null()) < 0 ||
              json_put(e, "numel", json_integer((json_int_t)ptc_tensor_numel(t))) < 0 ||
              json_put(e, "nbytes", json_integer((json_int_t)ptc_tensor_nbytes(t))) < 0 ||
              json_put(e, "requires_grad", json_boolean(ptc_tensor_requires_grad(t))) < 0 ||
              json_put(e, "parameter", json_boolean(ptc_tensor_is_parameter(t))) < 0;
    if (!bad && in->opt->hash) {
        char hex[65];
        sha256_hex(hex, r->sha256);
        bad = json_put(e, "sha256", json_string(hex)) < 0;
    }
    if (bad) {
        json_decref(e);
        return NULL;
    }
    return e;
}

static int print_json(inspect *in)
{
    const struct options *opt = in->opt;
    ptc_ckpt *c = in->c;
    int zip = ptc_ckpt_format(c) == PTC_FORMAT_ZIP;
    uint64_t numel = 0, tensor_bytes = 0;
    int bad = 0;
    json_t *root = json_object(), *a, *e;
    if (!root)
        return PTC_ENOMEM;

    bad |= json_put(root, "file", json_cstr(opt->path));
    bad |= json_put(root, "format", json_string(format_name(c)));
    bad |= json_put(root, "prefix", json_cstr(ptc_ckpt_prefix(c)));
    bad |= json_put(root, "byteorder", json_cstr(ptc_ckpt_byteorder(c)));

    if (zip) {
        bad |= json_put(root, "records", a = json_array());
        for (size_t i = 0; !bad && i < ptc_ckpt_nrecords(c); i++) {
            e = json_object();
            bad |= !e || json_put(e, "name", json_cstr(ptc_ckpt_record_name(c, i))) < 0 ||
                   json_put(e, "size", json_u64(ptc_ckpt_record_size(c, i))) < 0;
            bad |= json_push(a, e);
        }
    }

    bad |= json_put(root, "storages", a = json_array());
    for (size_t i = 0; !bad && i < ptc_ckpt_nstorages(c); i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        if (!s)
            continue;
        e = json_object();
        bad |= !e || json_put(e, "key", json_cstr(ptc_storage_key(s))) < 0 ||
               json_put(e, "dtype", json_cstr(ptc_dtype_name(ptc_storage_dtype(s)))) < 0 ||
               json_put(e, "nbytes", json_integer((json_int_t)ptc_storage_nbytes(s))) < 0 ||
               json_put(e, "location", json_cstr(ptc_storage_location(s))) < 0 ||
               json_put(e, "mapped", json_boolean(ptc_storage_is_mapped(s))) < 0;
        bad |= json_push(a, e);
    }

    bad |= json_put(root, "tensors", a = json_array());
    for (size_t i = 0; !bad && i < in->nrows; i++) {
        bad |= json_push(a, json_tensor(in, i));
        int64_t ne = ptc_tensor_numel(in->rows[i].t), nb = ptc_tensor_nbytes(in->rows[i].t);
        numel = cli_add_sat(numel, ne > 0 ? (uint64_t)ne : 0);
        tensor_bytes = cli_add_sat(tensor_bytes, nb > 0 ? (uint64_t)nb : 0);
    }

    if (!bad && opt->values) {
        value_sink out = {.opt = opt, .values = json_array(), .metadata = json_array()};
        bad |= json_put(root, "values", out.values);
        bad |= json_put(root, "metadata", out.metadata);
        if (!bad)
            walk_values(&out, ptc_ckpt_root(c));
        cli_buf_free(&out.line);
        bad |= out.oom;
        if (!bad && out.truncated)
            bad |= json_put(root, "values_truncated", json_true());
    }

    if (!bad) {
        bad |= json_put(root, "totals", e = json_object());
        bad |= !e || json_put(e, "tensors", json_u64(in->nrows)) < 0 ||
               json_put(e, "elements", json_u64(numel)) < 0 ||
               json_put(e, "nbytes", json_u64(tensor_bytes)) < 0;
    }

    if (!bad) {
        /* Indented for people who read it. jansson keeps UTF-8 and escapes C0 controls;
         * cli_put_json_text escapes the other characters a terminal would act on. */
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) {
            cli_put_json_text(stdout, text, strlen(text));
            putchar('\n');
            free(text);
        } else {
            bad = 1;
        }
    }
    json_decref(root);
    return bad ? PTC_ENOMEM : 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

static int parse_options(int argc, char **argv, struct options *opt, int *done)
{
    enum { OPT_JSON = 256, OPT_HASH, OPT_NO_VALUES };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"hash", no_argument, NULL, OPT_HASH},
        {"no-values", no_argument, NULL, OPT_NO_VALUES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    *done = 0;
    memset(opt, 0, sizeof *opt);
    opt->values = 1;
    /* getopt_long prints its own complaints as "ptc inspect: unrecognized option ...", since
     * argv[0] is the display name. */
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case OPT_JSON:
            opt->json = 1;
            break;
        case OPT_HASH:
            opt->hash = 1;
            break;
        case OPT_NO_VALUES:
            opt->values = 0;
            break;
        case 'h':
            fputs(usage_text, stdout);
            *done = 1;
            return CLI_EXIT_OK;
        default:
            fprintf(stderr, "Try '%s --help' for more information.\n", cli_prog());
            return CLI_EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return cli_usage_error("no checkpoint file given");
    if (argc - optind > 1)
        return cli_usage_error("one checkpoint file at a time (%d given)", argc - optind);
    opt->path = argv[optind];
    return CLI_EXIT_OK;
}

int cmd_inspect(int argc, char **argv)
{
    struct options opt;
    inspect in = {.opt = &opt};
    ptc_open_params params;
    ptc_error err;
    int done, rc;

    int status = parse_options(argc, argv, &opt, &done);
    if (status != CLI_EXIT_OK || done)
        return status;

    memset(&err, 0, sizeof err);
    ptc_open_params_default(&params);
    rc = ptc_ckpt_open(&in.c, opt.path, &params, &err);
    if (rc < 0)
        return cli_report(rc, &err);

    memset(&err, 0, sizeof err);
    rc = collect_tensors(&in, &err);
    if (rc == 0)
        rc = find_sharing(&in);
    if (rc == 0 && opt.hash)
        rc = hash_tensors(&in, &err);
    if (rc == 0)
        rc = opt.json ? print_json(&in) : print_text(&in);

    status = rc < 0 ? cli_report(rc, &err) : CLI_EXIT_OK;
    free_rows(&in);
    ptc_ckpt_close(in.c);
    return status;
}
