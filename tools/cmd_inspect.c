/*
 * cmd_inspect.c - `ptc inspect [--json] [--hash] [--no-values] FILE`: what a checkpoint holds.
 *
 * The file is opened through the public API under the default policy (nothing from the file ever
 * runs), then shown in two parts: the tensors, in the order ptc_walk_next reports them, with the
 * storage each one views and which of them share one; and the other values (ints, strings, None,
 * dtypes ...) found by a walk of the value tree of our own, with the same path rules. Text output
 * is for people; --json prints one object whose schema is documented in ptc-inspect(1) and kept
 * stable. That object is written as a stream, entry by entry (a 5 MB file can list five million
 * values): a first walk checks and counts, and one walk per array then writes its entries, so
 * that memory stays that of the loaded file plus one entry.
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
    uint64_t budget; /* --budget BYTES, 0 for the default */
    const char *path;
};

/* One tensor of the text listing, as ptc_walk_next reported it. */
typedef struct row {
    char *path; /* owned copy: the walk's pointer lives only until its next call */
    const ptc_tensor *t;
    size_t shared_with; /* first row on the same storage, NO_ROW for that first row itself */
    uint8_t sha256[32];
} row;

/* A container (dict, list or tuple with items) of the tree, for --json's walk: how many times the
 * tree reaches it and, once listed, where it was first met and what its subtree added. */
typedef struct shared {
    const ptc_value *v;
    uint32_t refs;               /* times the tree reaches it; 2 or more: shared */
    int listed;                  /* LISTED_*: once listed, later meetings are {"$ref"} entries */
    int has_tensors, has_values; /* its listing added tensor rows, value entries */
    char *tpath;                 /* its first path (ptc_walk's, for tensors and values alike) */
    uint64_t ntensors, numel, nbytes; /* what its subtree adds to the totals */
} shared;

enum { LISTED_NOT, LISTED_OPEN, LISTED_DONE }; /* shared.listed: not yet, being listed, listed */

typedef struct shared_map {
    shared *e;
    size_t cap, n; /* cap: 0 or a power of two */
} shared_map;

/* --json --hash: a tensor to hash, once however many paths reach it. */
typedef struct digest {
    const ptc_tensor *t;
    char path[65]; /* its first path, as much of it as an error message shows */
    uint8_t sha256[32];
} digest;

typedef struct digest_set {
    digest *d; /* in the order the walk first meets them */
    size_t n, capd;
    size_t *slot; /* open addressing on the tensor pointer: index in d + 1, 0 when empty */
    size_t cap;   /* 0 or a power of two */
} digest_set;

typedef struct inspect {
    const struct options *opt;
    ptc_ckpt *c;
    ptc_budget budget; /* every walk, rendering and hash below is charged to it */
    row *rows; /* text output: the tensors */
    size_t nrows;
    size_t caprows;
    uint64_t tot_tensors, tot_numel, tot_bytes; /* --json: totals with the $ref rows expanded */
    size_t ntrows;                              /* --json: entries of "tensors" */
    shared_map shared;                          /* --json: the containers of the tree */
    digest_set digests;                         /* --json --hash: the tensors, each once */
} inspect;

/* The budget charged by render() and json_value(), which recurse through a value's items, and
 * why it ran out (the CLI is single-threaded; cmd_inspect sets it and clears it). */
static ptc_budget *render_budget;
static ptc_error render_err;
static int render_failed;
static int json_counting; /* json_value for the scan: charge a str's bytes, build nothing */

/* 1 when rendering may go on: charges one node to the budget. */
/* Bytes a str takes once written as escaped JSON text, an upper bound: a control byte becomes
 * \u00XX, a quote or backslash two bytes, a C1 control (0xC2 0x80-0x9F) and a character that
 * reorders or hides text or a lone surrogate (UTF-8 starting 0xE2, 0xED or 0xEF) \uXXXX. */
static uint64_t json_text_cost(const char *s, size_t len)
{
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            n += 6;
        else if (c == '"' || c == '\\')
            n += 2;
        else if (c == 0xC2) /* a C1 control: \u0080 for two bytes */
            n += 5;
        else if (c == 0xE2 || c == 0xED || c == 0xEF) /* \uXXXX for three bytes */
            n += 4;
        else
            n += 1;
    }
    return n;
}

static int render_charge(void)
{
    if (render_failed)
        return 0;
    if (render_budget && ptc_budget_charge(render_budget, 1, 0, &render_err) < 0)
        render_failed = 1;
    return !render_failed;
}

/* 1 when rendering may go on: charges n bytes written (a path, a value's text) to the budget. */
static int render_charge_bytes(uint64_t n)
{
    if (render_failed)
        return 0;
    if (render_budget && ptc_budget_charge(render_budget, 0, n, &render_err) < 0)
        render_failed = 1;
    return !render_failed;
}

/* 1 when a path of len bytes, depth levels deep, may be built: within PTC_PATH_MAX. */
static int render_path_ok(size_t len, size_t depth)
{
    if (render_failed)
        return 0;
    if (cli_path_check(len, depth, &render_err) < 0)
        render_failed = 1;
    return !render_failed;
}

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
    "usage: ptc inspect [--json] [--hash] [--no-values] [--budget BYTES] FILE\n"
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
    "  --budget BYTES\n"
    "               tensor bytes that --hash may read (4G, 512M, ...; default 64 x the file's\n"
    "               size + 1 GiB); the nodes visited are bounded by 16 x the pickle's opcodes\n"
    "               + 1,000,000\n"
    "  -h, --help   show this help\n";

/* ---- rendering values as one line of text ----------------------------------------------------
 * flags: ESCAPE renders strings escaped for a terminal (values); without it strings are copied raw
 * (dict keys that become path segments, which are escaped once when the path is printed). */
enum { R_ESCAPE = 1 };

static void render(cli_buf *b, const ptc_value *v, int depth, unsigned flags);

/* Decimal, any length up to BIGINT_MAX_BYTES ("?" for what is not an int). */
static void render_int(cli_buf *b, const ptc_value *v)
{
    char small[64];
    size_t len = ptc_value_int_text(v, BIGINT_MAX_BYTES, small, sizeof small);
    if (len < sizeof small) {
        cli_buf_putn(b, small, len);
        return;
    }
    char *big = malloc(len + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    ptc_value_int_text(v, BIGINT_MAX_BYTES, big, len + 1);
    cli_buf_putn(b, big, len);
    free(big);
}

static void render_double(cli_buf *b, double x)
{
    char s[40];
    ptc_float_text(x, s, sizeof s);
    cli_buf_puts(b, s);
}

/* Python's complex repr: "(1+2j)", "2.5j", "(nan+infj)". */
static void render_complex(cli_buf *b, double re, double im)
{
    char r[40], i[40];
    ptc_float_text(re, r, sizeof r);
    ptc_float_text(im, i, sizeof i);
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

    if (!render_charge() ||
        (depth > INLINE_MAX_DEPTH && (k == PTC_VALUE_TUPLE || k == PTC_VALUE_LIST ||
                                      k == PTC_VALUE_DICT || k == PTC_VALUE_SET))) {
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
    if (ptc_utf8_valid(s, len))
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

/* ---- the --json document, written as a stream -------------------------------------------------
 * The document is never built whole: its arrays can hold millions of entries (a list of five
 * million None is a 5 MB file). Each entry is built as a small jansson object, dumped and freed;
 * the braces, brackets, commas and keys around the entries are written here, so that the bytes
 * are those json_dumps(root, JSON_FLAGS) would give for the whole document. */
#define JSON_FLAGS (JSON_INDENT(JSON_STEP) | JSON_PRESERVE_ORDER)
#define JSON_STEP 2 /* spaces per nesting level, as JSON_INDENT(2) indents */

/* A line break, then the indentation of nesting level depth. */
static void json_newline(int depth)
{
    static const char spaces[] = "\n                                ";
    size_t n = 1 + (size_t)depth * JSON_STEP; /* the document nests 3 levels deep at most */
    fwrite(spaces, 1, n < sizeof spaces - 1 ? n : sizeof spaces - 1, stdout);
}

/* Writes j at nesting level depth of the document and frees it; -1 when j is NULL or out of
 * memory. json_dumps indents j as a document of its own, so each of its line breaks (all
 * structural: JSON strings hold none) gets depth levels more. jansson keeps UTF-8 and escapes C0
 * controls; cli_put_json_text escapes the other characters a terminal would act on. */
static int json_write(json_t *j, int depth)
{
    char *text = j ? json_dumps(j, JSON_FLAGS | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!text)
        return -1;
    const char *p = text;
    for (;;) {
        const char *nl = strchr(p, '\n');
        cli_put_json_text(stdout, p, nl ? (size_t)(nl - p) : strlen(p));
        if (!nl)
            break;
        json_newline(depth);
        p = nl + 1;
    }
    free(text);
    return 0;
}

/* The next member of the document (nesting level 1): its key, ready for its value. */
static void json_member(size_t *nmembers, const char *key)
{
    fputs((*nmembers)++ ? "," : "{", stdout);
    json_newline(1);
    printf("\"%s\": ", key);
}

/* An array of the document, written entry by entry. */
typedef struct json_stream {
    int depth; /* the array's nesting level */
    size_t n;  /* entries written */
} json_stream;

static void json_stream_open(json_stream *a, size_t *nmembers, const char *key)
{
    json_member(nmembers, key);
    fputs("[", stdout);
    *a = (json_stream){.depth = 1};
}

/* Writes e as the array's next entry and frees it; -1 when e is NULL or out of memory. */
static int json_stream_put(json_stream *a, json_t *e)
{
    if (!e)
        return -1;
    if (a->n++)
        putchar(',');
    json_newline(a->depth + 1);
    return json_write(e, a->depth + 1);
}

static void json_stream_close(json_stream *a)
{
    if (a->n)
        json_newline(a->depth);
    putchar(']');
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

    if (!render_charge())
        return json_null(); /* the walk reports the exceeded budget */
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
        if (ptc_value_str(v, &s, &len) < 0)
            return json_null();
        /* Written whole, as escaped JSON: a str shared by many keys adds up. */
        if (!render_charge_bytes(json_text_cost(s, len)) || json_counting)
            return json_null();
        return json_text(s, len);
    case PTC_VALUE_BYTES: {
        if (ptc_value_bytes(v, &bytes, &len) < 0)
            return json_null();
        static const char hex[] = "0123456789abcdef";
        size_t shown = len > JSON_MAX_BYTES ? JSON_MAX_BYTES : len;
        if (!render_charge_bytes(2 * (uint64_t)shown))
            return json_null();
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

/* What one --json walk of the tree does (walk_json): the first counts and charges, writes nothing;
 * each of the others writes the entries of one array of the document. */
enum { JW_SCAN, JW_TENSORS, JW_VALUES, JW_METADATA };

typedef struct value_sink {
    const struct options *opt;
    int mode;           /* --json: JW_* */
    json_stream *array; /* --json: the array the walk writes to */
    size_t count;       /* lines or entries emitted, metadata included (JW_SCAN with --json) */
    size_t nvalues;     /* --json, JW_SCAN: entries of "values" */
    size_t nmeta;       /* --json, JW_SCAN: entries of "metadata" */
    int truncated;      /* stopped after MAX_VALUE_VISITS */
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
    if (!render_charge_bytes(path->len)) /* the path written (charged by the scan in --json) */
        return;
    if (out->opt->json) {
        if (out->mode == JW_SCAN) {
            /* Rendered and dropped: the scan charges the budget as the written entry will. */
            json_counting = 1;
            json_t *j = json_value(v, 0);
            json_counting = 0;
            out->nvalues++;
            out->oom |= !j;
            json_decref(j);
            return;
        }
        if (out->mode != JW_VALUES)
            return;
        json_t *e = json_object();
        if (!e || json_put(e, "path", json_text(cli_buf_str(path), path->len)) < 0 ||
            json_put(e, "type", json_string(kind_name(ptc_value_kind_of(v)))) < 0 ||
            json_put(e, "value", json_value(v, 0)) < 0) {
            json_decref(e);
            out->oom = 1;
        } else if (json_stream_put(out->array, e) < 0) {
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
    if (!render_charge_bytes(out->line.len))
        return;
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
    if (!render_charge_bytes(path->len))
        return;
    if (out->opt->json) {
        if (out->mode == JW_SCAN)
            out->nmeta++;
        if (out->mode != JW_METADATA)
            return;
        json_t *e = json_object();
        json_t *jmodules = has_modules ? json_integer((json_int_t)modules) : json_null();
        if (!e || json_put(e, "path", json_text(cli_buf_str(path), path->len)) < 0 ||
            json_put(e, "modules", jmodules) < 0 ||
            json_put(e, "attributes", json_integer((json_int_t)nattrs)) < 0) {
            json_decref(e);
            out->oom = 1;
        } else if (json_stream_put(out->array, e) < 0) {
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

/* Lists every non-tensor leaf of the tree under root (and every dict's attributes), depth-first in
 * container order, as ptc_walk_next_value visits the tree: its paths are ptc_walk's. Each value
 * below the root is charged one node (render_charge), each line its bytes; the listing stops after
 * MAX_VALUE_VISITS values. */
static void walk_values(value_sink *out, const ptc_value *root)
{
    ptc_walk *w = NULL;
    const ptc_value *v;
    const char *p;
    size_t len, depth, visits = 0;
    int rc;

    if (!root)
        return;
    if (ptc_walk_new(&w, root, NULL) < 0) {
        out->oom = 1;
        return;
    }
    while ((rc = ptc_walk_next_value(w, &v, &p, &len, &depth)) > 0) {
        if (depth > 0) {
            if (!render_charge())
                break;
            if (++visits > MAX_VALUE_VISITS) {
                out->truncated = 1;
                break;
            }
        }
        /* emit_* read the path through a cli_buf: a borrowed view of the walk's */
        const cli_buf path = {(char *)p, len, len + 1, 0};
        ptc_value_kind k = ptc_value_kind_of(v);
        if (k == PTC_VALUE_DICT && ptc_dict_attrs(v))
            emit_attrs(out, &path, ptc_dict_attrs(v));
        if (!(is_container(k) && ptc_value_len(v) > 0) && k != PTC_VALUE_TENSOR)
            emit_leaf(out, &path, v); /* scalars, sets, sizes, and empty containers */
        if (out->oom)
            break;
    }
    if (rc < 0 && !render_failed) {
        /* a path past PTC_PATH_MAX, refused as the tensor listing refuses it; or out of memory */
        if (rc == PTC_ELIMIT) {
            render_err = *ptc_walk_error(w);
            render_failed = 1;
        } else {
            out->oom = 1;
        }
    }
    ptc_walk_free(w);
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

static int add_row(inspect *in, const char *path, const ptc_tensor *t)
{
    if (in->nrows == in->caprows) {
        size_t ncap = in->caprows ? in->caprows * 2 : 64;
        row *nr = realloc(in->rows, ncap * sizeof *nr);
        if (!nr)
            return PTC_ENOMEM;
        in->rows = nr;
        in->caprows = ncap;
    }
    char *copy = copy_str(path ? path : "");
    if (!copy)
        return PTC_ENOMEM;
    in->rows[in->nrows++] = (row){.path = copy, .t = t, .shared_with = NO_ROW};
    return 0;
}

/* The text listing's tensors: every path ptc_walk reports (a tensor reached twice is listed
 * twice), the walk charged to the budget. */
static int collect_tensors(inspect *in, ptc_error *err)
{
    ptc_walk *w = NULL;
    const char *path;
    const ptc_tensor *t;
    int rc = ptc_walk_new(&w, ptc_ckpt_root(in->c), err);
    if (rc < 0)
        return rc;
    ptc_walk_set_budget(w, &in->budget);
    while ((rc = ptc_walk_next(w, &path, &t)) > 0) {
        if (t && (rc = add_row(in, path, t)) < 0)
            break;
    }
    if (rc < 0 && err) {
        const ptc_error *we = ptc_walk_error(w);
        if (we && we->code == rc && we->message[0]) {
            *err = *we;
            if (rc == PTC_ELIMIT) {
                char msg[sizeof err->message];
                snprintf(msg, sizeof msg, "listing the tensors: %.*s", (int)sizeof msg - 32,
                         we->message);
                memcpy(err->message, msg, sizeof msg);
            }
        } else {
            err->code = rc;
            err->offset = -1;
            err->member[0] = '\0';
            snprintf(err->message, sizeof err->message, "listing the tensors: %s",
                     ptc_strerror(rc));
        }
    }
    ptc_walk_free(w);
    return rc < 0 ? rc : 0;
}

/* ---- the --json walk: shared containers listed once -------------------------------------------
 * A container with items that the tree reaches from more than one place (a memo DAG: the same
 * tuple twice in a tuple, twenty levels deep) is listed where the walk first meets it; each later
 * meeting is one {"path": P, "$ref": FIRST} entry, in "tensors" when the container's listing held
 * tensors and in "values" when it held other values. Paths follow the rules of each array. */

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* v's entry; when absent, NULL, or with insert a new entry (refs 0; NULL when out of memory). */
static shared *shared_find(shared_map *m, const ptc_value *v, int insert)
{
    if (insert && (m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        shared *ne = calloc(ncap, sizeof *ne);
        if (!ne)
            return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->e[i].v)
                continue;
            size_t j = ptr_hash(m->e[i].v, ncap);
            while (ne[j].v)
                j = (j + 1) & (ncap - 1);
            ne[j] = m->e[i];
        }
        free(m->e);
        m->e = ne;
        m->cap = ncap;
    }
    if (m->cap == 0)
        return NULL;
    size_t j = ptr_hash(v, m->cap);
    while (m->e[j].v && m->e[j].v != v)
        j = (j + 1) & (m->cap - 1);
    if (m->e[j].v)
        return &m->e[j];
    if (!insert)
        return NULL;
    m->e[j] = (shared){.v = v};
    m->n++;
    return &m->e[j];
}

static void shared_free(shared_map *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        free(m->e[i].tpath);
    }
    free(m->e);
    *m = (shared_map){0};
}

/* t's digest; when absent, NULL, or with insert a new one (*added set; NULL when out of
 * memory). */
static digest *digest_find(digest_set *m, const ptc_tensor *t, int insert, int *added)
{
    if (added)
        *added = 0;
    if (insert && (m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        size_t *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slot[i])
                continue;
            size_t j = ptr_hash(m->d[m->slot[i] - 1].t, ncap);
            while (ns[j])
                j = (j + 1) & (ncap - 1);
            ns[j] = m->slot[i];
        }
        free(m->slot);
        m->slot = ns;
        m->cap = ncap;
    }
    if (m->cap == 0)
        return NULL;
    size_t j = ptr_hash(t, m->cap);
    while (m->slot[j] && m->d[m->slot[j] - 1].t != t)
        j = (j + 1) & (m->cap - 1);
    if (m->slot[j])
        return &m->d[m->slot[j] - 1];
    if (!insert)
        return NULL;
    if (m->n == m->capd) {
        size_t ncap = m->capd ? m->capd * 2 : 64;
        digest *nd = realloc(m->d, ncap * sizeof *nd);
        if (!nd)
            return NULL;
        m->d = nd;
        m->capd = ncap;
    }
    m->d[m->n] = (digest){.t = t};
    m->slot[j] = ++m->n;
    if (added)
        *added = 1;
    return &m->d[m->n - 1];
}

static void digest_free(digest_set *m)
{
    free(m->d);
    free(m->slot);
    *m = (digest_set){0};
}

static int is_listed_container(const ptc_value *v)
{
    return v && is_container(ptc_value_kind_of(v)) && ptc_value_len(v) > 0;
}

static const ptc_value *child_of(const ptc_value *v, size_t i)
{
    return ptc_value_kind_of(v) == PTC_VALUE_DICT ? ptc_dict_value(v, i) : ptc_value_item(v, i);
}

/* How many times the tree reaches each container: each distinct one is expanded once. */
static int count_refs(inspect *in, const ptc_value *root, ptc_error *err)
{
    const ptc_value **stack = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    if (!is_listed_container(root))
        return 0;
    shared *e = shared_find(&in->shared, root, 1);
    if (!e)
        return PTC_ENOMEM;
    e->refs = 1;
    const ptc_value *v = root;
    while (v && rc == 0) {
        size_t len = ptc_value_len(v);
        for (size_t i = 0; i < len && rc == 0; i++) {
            const ptc_value *c = child_of(v, i);
            if (!is_listed_container(c))
                continue;
            if ((rc = ptc_budget_charge(&in->budget, 1, 0, err)) < 0)
                break;
            if (!(e = shared_find(&in->shared, c, 1))) {
                rc = PTC_ENOMEM;
                break;
            }
            if (e->refs++ > 0)
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                const ptc_value **ns = realloc(stack, ncap * sizeof *ns);
                if (!ns) {
                    rc = PTC_ENOMEM;
                    break;
                }
                stack = ns;
                cap = ncap;
            }
            stack[n++] = c;
        }
        v = n > 0 ? stack[--n] : NULL;
    }
    free(stack);
    return rc;
}

static uint64_t sat_sub(uint64_t now, uint64_t before)
{
    return now == UINT64_MAX ? UINT64_MAX : now - before;
}

static void add_totals(inspect *in, uint64_t ntensors, uint64_t numel, uint64_t nbytes)
{
    in->tot_tensors = cli_add_sat(in->tot_tensors, ntensors);
    in->tot_numel = cli_add_sat(in->tot_numel, numel);
    in->tot_bytes = cli_add_sat(in->tot_bytes, nbytes);
}

static json_t *json_tensor(inspect *in, const char *path, const ptc_tensor *t);

typedef struct jframe {
    const ptc_value *v;
    size_t i, n;
    size_t tlen; /* length of v's path */
    shared *sh; /* v's entry when it is shared, else NULL */
    size_t rows0, count0;
    uint64_t ntensors0, numel0, nbytes0;
} jframe;

/* A shared container met again: its {"$ref"} entries, and (JW_SCAN) its subtree's totals. One met
 * again inside its own listing (a cycle) has no entries yet: it adds nothing. */
static int emit_ref(inspect *in, value_sink *out, const shared *sh, const cli_buf *tpath)
{
    if (sh->listed != LISTED_DONE)
        return 0;
    int value_ref = sh->has_values && in->opt->values && !out->truncated;
    json_t *e;
    switch (out->mode) {
    case JW_SCAN:
        /* The paths the {"$ref"} entries will write. */
        if ((sh->has_tensors && !render_charge_bytes(tpath->len + strlen(sh->tpath))) ||
            (value_ref && !render_charge_bytes(tpath->len + strlen(sh->tpath))))
            return PTC_ELIMIT;
        add_totals(in, sh->ntensors, sh->numel, sh->nbytes);
        in->ntrows += sh->has_tensors != 0;
        if (value_ref) {
            out->count++;
            out->nvalues++;
        }
        return 0;
    case JW_TENSORS:
        if (!sh->has_tensors)
            return 0;
        e = json_object();
        if (!e || json_put(e, "path", json_cstr(cli_buf_str(tpath))) < 0 ||
            json_put(e, "$ref", json_cstr(sh->tpath)) < 0) {
            json_decref(e);
            return PTC_ENOMEM;
        }
        return json_stream_put(out->array, e) < 0 ? PTC_ENOMEM : 0;
    case JW_VALUES:
        if (!value_ref)
            return 0;
        e = json_object();
        if (!e || json_put(e, "path", json_text(cli_buf_str(tpath), tpath->len)) < 0 ||
            json_put(e, "$ref", json_cstr(sh->tpath)) < 0) {
            json_decref(e);
            return PTC_ENOMEM;
        }
        return json_stream_put(out->array, e) < 0 ? PTC_ENOMEM : 0;
    }
    return 0;
}

/* A tensor met at path tpath: JW_SCAN adds it to the totals (and with --hash to the tensors to
 * hash, once each), JW_TENSORS writes its entry. */
static int emit_tensor(inspect *in, value_sink *out, const cli_buf *tpath, const ptc_tensor *t)
{
    if (out->mode == JW_TENSORS)
        return json_stream_put(out->array, json_tensor(in, cli_buf_str(tpath), t)) < 0
                   ? PTC_ENOMEM
                   : 0;
    if (out->mode != JW_SCAN)
        return 0;
    if (!render_charge_bytes(tpath->len)) /* the entry's path, written by JW_TENSORS */
        return PTC_ELIMIT;
    int64_t ne = ptc_tensor_numel(t), nb = ptc_tensor_nbytes(t);
    add_totals(in, 1, ne > 0 ? (uint64_t)ne : 0, nb > 0 ? (uint64_t)nb : 0);
    in->ntrows++;
    if (in->opt->hash) {
        int added;
        digest *d = digest_find(&in->digests, t, 1, &added);
        if (!d)
            return PTC_ENOMEM;
        if (added) {
            const char *p = cli_buf_str(tpath);
            size_t n = strnlen(p, sizeof d->path - 1);
            memcpy(d->path, p, n);
            d->path[n] = '\0';
        }
    }
    return 0;
}

/* One --json walk of the tree, with the tensor paths of ptc_walk (shared containers once) and the
 * value paths of walk_values. JW_SCAN walks first: it charges the budget (the only walk that
 * does), counts the entries and the totals, and learns what each shared container holds; each
 * later walk, the same steps in the same order, writes the entries of one array. */
static int walk_json(inspect *in, value_sink *out, ptc_error *err)
{
    const ptc_value *v = ptc_ckpt_root(in->c);
    cli_buf tpath = {0};
    jframe *st = NULL;
    size_t nst = 0, cap = 0, visits = 0;
    int scan = out->mode == JW_SCAN;
    int values = in->opt->values;
    int rc = 0;

    if (scan)
        rc = count_refs(in, v, err);
    else
        for (size_t i = 0; i < in->shared.cap; i++)
            in->shared.e[i].listed = 0;
    if (v && rc == 0 && !render_charge())
        rc = PTC_ELIMIT;
    while (v && rc == 0) {
        ptc_value_kind k = ptc_value_kind_of(v);
        shared *sh = is_listed_container(v) ? shared_find(&in->shared, v, 0) : NULL;
        if (sh && sh->refs < 2)
            sh = NULL;
        if (sh && sh->listed) {
            rc = emit_ref(in, out, sh, &tpath);
        } else if (k == PTC_VALUE_TENSOR) {
            const ptc_tensor *t = ptc_value_tensor(v);
            if (t)
                rc = emit_tensor(in, out, &tpath, t);
        } else {
            if (k == PTC_VALUE_DICT && values && !out->truncated && ptc_dict_attrs(v))
                emit_attrs(out, &tpath, ptc_dict_attrs(v));
            if (is_listed_container(v)) {
                if (nst == cap) {
                    size_t ncap = cap ? cap * 2 : 32;
                    jframe *ns = realloc(st, ncap * sizeof *ns);
                    if (!ns) {
                        rc = PTC_ENOMEM;
                        break;
                    }
                    st = ns;
                    cap = ncap;
                }
                if (sh) {
                    sh->listed = LISTED_OPEN;
                    if (scan) {
                        sh->tpath = copy_str(cli_buf_str(&tpath));
                        if (!sh->tpath) {
                            rc = PTC_ENOMEM;
                            break;
                        }
                    }
                }
                st[nst++] = (jframe){v,           0,           ptc_value_len(v), tpath.len,
                                     sh,          in->ntrows,
                                     out->count,  in->tot_tensors, in->tot_numel, in->tot_bytes};
            } else if (values && !out->truncated) {
                emit_leaf(out, &tpath, v); /* scalars, sets, sizes, and empty containers */
            }
        }
        if (rc == 0 && (out->oom || tpath.oom))
            rc = PTC_ENOMEM;
        if (rc < 0 || render_failed)
            break;

        /* The next item: the first unlisted item of the innermost unfinished container. */
        v = NULL;
        while (nst > 0 && !v) {
            jframe *f = &st[nst - 1];
            if (f->i == f->n) {
                if (f->sh && scan) {
                    f->sh->has_tensors = in->ntrows > f->rows0;
                    f->sh->has_values = out->count > f->count0;
                    f->sh->ntensors = sat_sub(in->tot_tensors, f->ntensors0);
                    f->sh->numel = sat_sub(in->tot_numel, f->numel0);
                    f->sh->nbytes = sat_sub(in->tot_bytes, f->nbytes0);
                }
                if (f->sh)
                    f->sh->listed = LISTED_DONE;
                nst--;
                continue;
            }
            size_t i = f->i++;
            const ptc_value *c = child_of(f->v, i);
            if (!c)
                continue;
            int dict = ptc_value_kind_of(f->v) == PTC_VALUE_DICT;
            cli_buf_truncate(&tpath, f->tlen);
            if (f->tlen)
                cli_buf_puts(&tpath, ".");
            if (dict) {
                cli_key_text(&tpath, ptc_dict_key(f->v, i));
            } else {
                cli_buf_printf(&tpath, "%zu", i);
            }
            if (!render_path_ok(tpath.len, nst))
                break;
            v = c;
        }
        if (v && !render_charge())
            break;
        if (v && ++visits > MAX_VALUE_VISITS)
            out->truncated = 1;
    }
    if (rc == 0 && render_failed)
        rc = PTC_ELIMIT;
    if (rc == PTC_ELIMIT && render_failed && err)
        *err = render_err;
    free(st);
    cli_buf_free(&tpath);
    return rc;
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
        s[i] = (by_storage){in->rows[i].t ? (uintptr_t)ptc_tensor_storage(in->rows[i].t) : 0, i};
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
    /* Each "(shared with FIRST)" writes FIRST's path once more (the walk charged each row's). */
    for (size_t i = 0; i < in->nrows; i++)
        if (in->rows[i].shared_with != NO_ROW &&
            !render_charge_bytes(strlen(in->rows[in->rows[i].shared_with].path)))
            return PTC_ELIMIT;
    return 0;
}

/* The digest of every tensor row. A tensor listed at several paths is read once (the rows are
 * matched by tensor pointer); each read is charged to the budget, numel x element size whatever
 * the strides, before a byte is read: a stride-0 view of 2^40 elements is refused, not hashed. */
static int hash_one(inspect *in, const ptc_tensor *t, const char *path, uint8_t sha256[32],
                    ptc_error *err)
{
    int64_t nb = ptc_tensor_nbytes(t);
    int rc = ptc_budget_charge(&in->budget, 0, nb >= 0 ? (uint64_t)nb : UINT64_MAX, err);
    if (rc < 0) {
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "hashing tensor %.64s (%" PRId64 " bytes): %.*s",
                 path[0] ? path : "(root)", nb, (int)sizeof msg - 128, err->message);
        memcpy(err->message, msg, sizeof msg);
        return rc;
    }
    return ptc_tensor_sha256(t, sha256, err);
}

static int hash_tensors(inspect *in, ptc_error *err)
{
    cli_progress p;
    int rc = 0;
    by_storage *s = malloc((in->nrows ? in->nrows : 1) * sizeof *s);
    size_t *first = malloc((in->nrows ? in->nrows : 1) * sizeof *first);
    if (!s || !first) {
        free(s);
        free(first);
        return PTC_ENOMEM;
    }
    for (size_t i = 0; i < in->nrows; i++) {
        s[i] = (by_storage){(uintptr_t)in->rows[i].t, i};
        first[i] = i;
    }
    qsort(s, in->nrows, sizeof *s, cmp_by_storage);
    for (size_t i = 1; i < in->nrows; i++)
        if (s[i].storage == s[i - 1].storage)
            first[s[i].row] = first[s[i - 1].row];
    free(s);

    cli_progress_start(&p, "hashing tensors", in->nrows);
    for (size_t i = 0; i < in->nrows && rc == 0; i++) {
        row *r = &in->rows[i];
        if (!r->t)
            continue;
        if (first[i] != i) {
            memcpy(r->sha256, in->rows[first[i]].sha256, sizeof r->sha256);
            continue;
        }
        rc = hash_one(in, r->t, r->path, r->sha256, err);
        cli_progress_update(&p, i + 1);
    }
    cli_progress_end(&p);
    free(first);
    return rc;
}

/* --json --hash: the digest of each tensor the scan met, in the order it met them (the order in
 * which hash_tensors goes through the rows). */
static int hash_digests(inspect *in, ptc_error *err)
{
    cli_progress p;
    int rc = 0;
    cli_progress_start(&p, "hashing tensors", in->digests.n);
    for (size_t i = 0; i < in->digests.n && rc == 0; i++) {
        digest *d = &in->digests.d[i];
        rc = hash_one(in, d->t, d->path, d->sha256, err);
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
        if (render_failed)
            return PTC_ELIMIT;
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

/* The "tensors" entry of tensor t, met at path. */
static json_t *json_tensor(inspect *in, const char *path, const ptc_tensor *t)
{
    const ptc_storage *s = ptc_tensor_storage(t);
    int ndim = ptc_tensor_ndim(t);
    json_t *e = json_object();
    if (!e)
        return NULL;
    int bad = json_put(e, "path", json_cstr(path)) < 0 ||
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
        const digest *d = digest_find(&in->digests, t, 0, NULL);
        char hex[65];
        bad = !d;
        if (d) {
            sha256_hex(hex, d->sha256);
            bad = json_put(e, "sha256", json_string(hex)) < 0;
        }
    }
    if (bad) {
        json_decref(e);
        return NULL;
    }
    return e;
}

/* One later walk of the tree (walk_json), writing the entries of one array; the budget was
 * charged by the scan, which took the same steps. */
static int write_entries(inspect *in, int mode, json_stream *a)
{
    value_sink out = {.opt = in->opt, .mode = mode, .array = a};
    int rc = walk_json(in, &out, NULL);
    cli_buf_free(&out.line);
    return rc;
}

/* The document, written as the scan (walk_json's JW_SCAN, whose counts are in scan) found it.
 * Every array is written entry by entry, so that memory does not grow with their length. */
static int print_json(inspect *in, const value_sink *scan)
{
    const struct options *opt = in->opt;
    ptc_ckpt *c = in->c;
    size_t nmembers = 0;
    json_stream a;
    json_t *e;
    int bad = 0;

    render_budget = NULL; /* the later walks repeat the scan, which was charged */

    json_member(&nmembers, "file");
    bad |= json_write(json_cstr(opt->path), 1);
    json_member(&nmembers, "format");
    bad |= json_write(json_string(format_name(c)), 1);
    json_member(&nmembers, "prefix");
    bad |= json_write(json_cstr(ptc_ckpt_prefix(c)), 1);
    json_member(&nmembers, "byteorder");
    bad |= json_write(json_cstr(ptc_ckpt_byteorder(c)), 1);

    if (!bad && ptc_ckpt_format(c) == PTC_FORMAT_ZIP) {
        json_stream_open(&a, &nmembers, "records");
        for (size_t i = 0; !bad && i < ptc_ckpt_nrecords(c); i++) {
            e = json_object();
            if (!e || json_put(e, "name", json_cstr(ptc_ckpt_record_name(c, i))) < 0 ||
                json_put(e, "size", json_u64(ptc_ckpt_record_size(c, i))) < 0) {
                json_decref(e);
                e = NULL;
            }
            bad |= json_stream_put(&a, e);
        }
        json_stream_close(&a);
    }

    if (!bad) {
        json_stream_open(&a, &nmembers, "storages");
        for (size_t i = 0; !bad && i < ptc_ckpt_nstorages(c); i++) {
            const ptc_storage *s = ptc_ckpt_storage(c, i);
            if (!s)
                continue;
            e = json_object();
            if (!e || json_put(e, "key", json_cstr(ptc_storage_key(s))) < 0 ||
                json_put(e, "dtype", json_cstr(ptc_dtype_name(ptc_storage_dtype(s)))) < 0 ||
                json_put(e, "nbytes", json_integer((json_int_t)ptc_storage_nbytes(s))) < 0 ||
                json_put(e, "location", json_cstr(ptc_storage_location(s))) < 0 ||
                json_put(e, "mapped", json_boolean(ptc_storage_is_mapped(s))) < 0) {
                json_decref(e);
                e = NULL;
            }
            bad |= json_stream_put(&a, e);
        }
        json_stream_close(&a);
    }

    if (!bad) {
        json_stream_open(&a, &nmembers, "tensors");
        if (in->ntrows > 0)
            bad |= write_entries(in, JW_TENSORS, &a) < 0;
        json_stream_close(&a);
    }

    if (!bad && opt->values) {
        json_stream_open(&a, &nmembers, "values");
        if (scan->nvalues > 0)
            bad |= write_entries(in, JW_VALUES, &a) < 0;
        json_stream_close(&a);
    }
    if (!bad && opt->values) {
        json_stream_open(&a, &nmembers, "metadata");
        if (scan->nmeta > 0)
            bad |= write_entries(in, JW_METADATA, &a) < 0;
        json_stream_close(&a);
    }
    if (!bad && opt->values && scan->truncated) {
        json_member(&nmembers, "values_truncated");
        bad |= json_write(json_true(), 1);
    }

    if (!bad) {
        /* Counted as if every {"$ref"} were written out in full (as ptc_walk reports them). */
        e = json_object();
        if (!e || json_put(e, "tensors", json_u64(in->tot_tensors)) < 0 ||
            json_put(e, "elements", json_u64(in->tot_numel)) < 0 ||
            json_put(e, "nbytes", json_u64(in->tot_bytes)) < 0) {
            json_decref(e);
            e = NULL;
        }
        json_member(&nmembers, "totals");
        bad |= json_write(e, 1);
    }

    if (!bad) {
        json_newline(0);
        fputs("}\n", stdout);
    }
    return bad ? PTC_ENOMEM : 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

static int parse_options(int argc, char **argv, struct options *opt, int *done)
{
    enum { OPT_JSON = 256, OPT_HASH, OPT_NO_VALUES, OPT_BUDGET };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"budget", required_argument, NULL, OPT_BUDGET},
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
        case OPT_BUDGET: {
            int status = cli_parse_budget(optarg, &opt->budget);
            if (status != CLI_EXIT_OK)
                return status;
            break;
        }
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

    ptc_budget_init(&in.budget, in.c, opt.budget);
    render_budget = &in.budget;
    render_failed = 0;
    memset(&render_err, 0, sizeof render_err);

    memset(&err, 0, sizeof err);
    value_sink scan = {.opt = &opt, .mode = JW_SCAN};
    if (opt.json) {
        /* The scan checks and counts all; only then is the document written, walk by walk. */
        rc = walk_json(&in, &scan, &err);
        if (rc == 0 && opt.hash)
            rc = hash_digests(&in, &err);
        if (rc == 0)
            rc = print_json(&in, &scan);
    } else {
        rc = collect_tensors(&in, &err);
        if (rc == 0)
            rc = find_sharing(&in);
        if (rc == 0 && opt.hash)
            rc = hash_tensors(&in, &err);
        if (rc == 0)
            rc = print_text(&in);
    }
    if (rc == PTC_ELIMIT && render_failed)
        err = render_err;

    status = rc < 0 ? cli_report_budget(rc, &err) : CLI_EXIT_OK;
    cli_buf_free(&scan.line);
    render_budget = NULL;
    free_rows(&in);
    shared_free(&in.shared);
    digest_free(&in.digests);
    ptc_ckpt_close(in.c);
    return status;
}
