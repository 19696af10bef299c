/*
 * ckpt_json.c - ptc_ckpt_json: an open checkpoint as the JSON object `ptc inspect --json` prints
 * (the schema is in ptc.h and ptc-inspect(1)), so that the command and an embedder get the same
 * bytes.
 *
 * The object is written as a stream, entry by entry (a 5 MB file can list five million values):
 * a first walk of the tree (the scan) checks, counts and charges the budget, and one walk per
 * array then writes its entries, so that memory stays that of the loaded file plus one entry.
 * Containers that the tree reaches more than once are listed once; later meetings are {"$ref"}
 * entries, and the totals count each as if it were written out in full (as ptc_walk reports).
 *
 * Text from the file is kept when it is valid UTF-8 (jansson escapes C0 controls, the hidden
 * characters are written as \uXXXX by ptc_json_escape_hidden) and given in its ptc_escape form
 * otherwise, since JSON cannot hold invalid UTF-8. The walk is iterative (only the one-line
 * renderer of a value recurses, to a fixed depth) and the values listing stops after
 * MAX_VALUE_VISITS nodes, so a tree that shares nodes many times over cannot run for ever.
 *
 * The one-line renderer (render) is also public, as ptc_value_text: `ptc inspect` prints its
 * values with it, so the text listing and the JSON document render a value the same way.
 */
#include "pth/pth.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#define MAX_VALUE_VISITS (1u << 22) /* nodes the value listing visits before it stops */
#define INLINE_MAX_DEPTH 4          /* nesting shown inside one rendered value */
#define INLINE_MAX_ITEMS 16         /* items shown of one container inside a rendered value */
#define TEXT_MAX_STR     256        /* bytes of a str shown in a rendered value */
#define TEXT_MAX_BYTES   32         /* bytes of a bytes value shown in a rendered value */
#define JSON_MAX_BYTES   65536      /* bytes of a bytes value given as hex in JSON */
#define BIGINT_MAX_BYTES 1024       /* longest int rendered in decimal (the conversion is O(n^2)) */
#define JSON_MAX_DEPTH   16         /* nesting of a set / tuple rendered as a JSON array */
#define OUT_BUF_BYTES    65536      /* output batched per call of the caller's write function */

/* A container (dict, list or tuple with items) of the tree: how many times the tree reaches it
 * and, once listed, where it was first met and what its subtree added. */
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

/* With hash: a tensor to hash, once however many paths reach it. */
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

/* One call's state: nothing is global, so that several threads may write several documents. */
typedef struct cj {
    ptc_ckpt_json_params p; /* the caller's, completed with the defaults */
    const ptc_ckpt *c;
    ptc_budget budget;    /* every walk, rendering and hash is charged to it */
    ptc_budget *charging; /* &budget during the scan; NULL in the later walks, which repeat it */
    int failed;           /* the budget or a path limit ran out: err says which */
    ptc_error err;
    int counting; /* json_value for the scan: charge a str's bytes, build nothing */
    ptc_write_fn write;
    void *ctx;
    int wrc;                                    /* the first write error */
    size_t olen;                                /* bytes waiting in obuf */
    char obuf[OUT_BUF_BYTES];                   /* writes batched for the caller's function */
    uint64_t tot_tensors, tot_numel, tot_bytes; /* totals with the $ref rows expanded */
    size_t ntrows;                              /* entries of "tensors" */
    shared_map shared;                          /* the containers of the tree */
    digest_set digests;                         /* with hash: the tensors, each once */
} cj;

/* ---- a growable string ------------------------------------------------------------------------
 * Appends never fail loudly: an allocation failure sets oom, later appends do nothing, and the
 * caller checks oom once at the end. data is NUL-terminated once anything was appended. */
typedef struct sbuf {
    char *data;
    size_t len;
    size_t cap;
    int oom;
} sbuf;

static int sb_reserve(sbuf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (n >= PTC__BUF_MAX_DEFAULT - b->len) {
        b->oom = 1;
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 64;
        while (ncap < b->len + n + 1)
            ncap *= 2;
        char *nd = ptc__realloc(b->data, ncap);
        if (!nd) {
            b->oom = 1;
            return -1;
        }
        b->data = nd;
        b->cap = ncap;
    }
    return 0;
}

static void sb_putn(sbuf *b, const void *p, size_t n)
{
    if (sb_reserve(b, n) < 0)
        return;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static void sb_printf(sbuf *b, const char *fmt, ...) PTC_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sb_reserve(b, (size_t)n) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Appends s[0..n) as ptc_escape writes it. */
static void sb_escape(sbuf *b, const void *s, size_t n, unsigned flags)
{
    size_t len = ptc_escape(NULL, 0, s, n, flags);
    if (sb_reserve(b, len) < 0)
        return;
    ptc_escape(b->data + b->len, len + 1, s, n, flags);
    b->len += len;
}

/* Appends the path segment ptc_walk_next writes for a dict key. */
static void sb_key(sbuf *b, const ptc_value *key)
{
    size_t len = ptc_key_text(key, NULL, 0);
    if (sb_reserve(b, len) < 0)
        return;
    ptc_key_text(key, b->data + b->len, len + 1);
    b->len += len;
}

static void sb_truncate(sbuf *b, size_t len)
{
    if (b->data && len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

static const char *sb_str(const sbuf *b)
{
    return b->data ? b->data : "";
}

static void sb_free(sbuf *b)
{
    ptc__free(b->data);
    *b = (sbuf){0};
}

/* Saturating addition, for totals over counts a file controls. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* 0 when a path of len bytes, depth levels deep, is within PTC_PATH_MAX; else PTC_ELIMIT with
 * ptc_walk_next's message, so that this walk refuses the paths ptc_walk refuses. */
static int path_check(size_t len, size_t depth, ptc_error *err)
{
    if (len <= PTC_PATH_MAX)
        return 0;
    return ptc__err(err, PTC_ELIMIT, "", -1,
                    "path longer than %zu bytes (at depth %zu): the file's dict keys make paths "
                    "far longer than any checkpoint's; ptc refuses them",
                    (size_t)PTC_PATH_MAX, depth);
}

/* ---- the budget -------------------------------------------------------------------------------
 * Charged by render() and json_value(), which recurse through a value's items: once it runs out,
 * in->failed stays set and in->err says why. */

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

static int render_charge(cj *in)
{
    if (in->failed)
        return 0;
    if (in->charging && ptc_budget_charge(in->charging, 1, 0, &in->err) < 0)
        in->failed = 1;
    return !in->failed;
}

/* 1 when rendering may go on: charges n bytes written (a path, a value's text) to the budget. */
static int render_charge_bytes(cj *in, uint64_t n)
{
    if (in->failed)
        return 0;
    if (in->charging && ptc_budget_charge(in->charging, 0, n, &in->err) < 0)
        in->failed = 1;
    return !in->failed;
}

/* 1 when a path of len bytes, depth levels deep, may be built: within PTC_PATH_MAX. */
static int render_path_ok(cj *in, size_t len, size_t depth)
{
    if (in->failed)
        return 0;
    if (path_check(len, depth, &in->err) < 0)
        in->failed = 1;
    return !in->failed;
}

/* The container's name as the document spells it ("format"). */
static const char *format_name(const ptc_ckpt *c)
{
    switch (ptc_ckpt_format(c)) {
    case PTC_FORMAT_ZIP:
        return "zip";
    case PTC_FORMAT_LEGACY:
        return "legacy";
    case PTC_FORMAT_SAFETENSORS:
        return "safetensors";
    }
    return "unknown";
}

/* ---- rendering values as one line of text ----------------------------------------------------
 * flags: ESCAPE renders strings escaped for a terminal (values); without it strings are copied raw
 * (dict keys that become path segments, which are escaped once when the path is printed). */
enum { R_ESCAPE = 1 };

static void render(cj *in, sbuf *b, const ptc_value *v, int depth, unsigned flags);

/* Decimal, any length up to BIGINT_MAX_BYTES ("?" for what is not an int). */
static void render_int(sbuf *b, const ptc_value *v)
{
    char small[64];
    size_t len = ptc_value_int_text(v, BIGINT_MAX_BYTES, small, sizeof small);
    if (len < sizeof small) {
        sb_putn(b, small, len);
        return;
    }
    char *big = ptc__malloc(len + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    ptc_value_int_text(v, BIGINT_MAX_BYTES, big, len + 1);
    sb_putn(b, big, len);
    ptc__free(big);
}

static void render_double(sbuf *b, double x)
{
    char s[40];
    ptc_float_text(x, s, sizeof s);
    sb_puts(b, s);
}

/* Python's complex repr: "(1+2j)", "2.5j", "(nan+infj)". */
static void render_complex(sbuf *b, double re, double im)
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
        sb_printf(b, "%sj", i);
    else
        sb_printf(b, "(%s%s%sj)", r, i[0] == '-' ? "" : "+", i);
}

static void render_str(sbuf *b, const char *s, size_t len, unsigned flags)
{
    size_t shown = len > TEXT_MAX_STR ? TEXT_MAX_STR : len;
    sb_puts(b, "\"");
    if (flags & R_ESCAPE)
        sb_escape(b, s, shown, PTC_ESC_QUOTE);
    else
        sb_putn(b, s, shown);
    sb_puts(b, "\"");
    if (shown < len)
        sb_printf(b, "... (%zu bytes)", len);
}

/* bytes as Python shows them: b'ab\x00'. Every byte outside printable ASCII is escaped. */
static void render_bytes(sbuf *b, const uint8_t *p, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t shown = len > TEXT_MAX_BYTES ? TEXT_MAX_BYTES : len;
    sb_puts(b, "b'");
    for (size_t i = 0; i < shown; i++) {
        uint8_t c = p[i];
        char e[4] = {'\\', 0, 0, 0};
        if (c == '\\' || c == '\'') {
            e[1] = (char)c;
            sb_putn(b, e, 2);
        } else if (c >= 0x20 && c < 0x7F) {
            sb_putn(b, &c, 1);
        } else {
            e[1] = 'x';
            e[2] = hex[c >> 4];
            e[3] = hex[c & 15];
            sb_putn(b, e, 4);
        }
    }
    sb_puts(b, "'");
    if (shown < len)
        sb_printf(b, "... (%zu bytes)", len);
}

static void render_text(sbuf *b, const char *s, unsigned flags)
{
    if (!s)
        s = "?";
    if (flags & R_ESCAPE)
        sb_escape(b, s, strlen(s), 0);
    else
        sb_puts(b, s);
}

static void render_shape(sbuf *b, int ndim, const int64_t *dims)
{
    sb_puts(b, "[");
    for (int d = 0; d < ndim; d++)
        sb_printf(b, "%s%" PRId64, d ? ", " : "", dims[d]);
    sb_puts(b, "]");
}

/* Items of a tuple, list, set or torch.Size between open and close, at most INLINE_MAX_ITEMS. */
static void render_items(cj *in, sbuf *b, const ptc_value *v, const char *open, const char *close,
                         int depth, unsigned flags)
{
    size_t n = ptc_value_len(v);
    sb_puts(b, open);
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_puts(b, ", ");
        if (i == INLINE_MAX_ITEMS) {
            sb_printf(b, "... (%zu items)", n);
            break;
        }
        const ptc_value *item = ptc_value_item(v, i);
        if (item)
            render(in, b, item, depth + 1, flags);
        else
            sb_puts(b, "?");
    }
    if (n == 1 && ptc_value_kind_of(v) == PTC_VALUE_TUPLE)
        sb_puts(b, ",");
    sb_puts(b, close);
}

static void render_dict(cj *in, sbuf *b, const ptc_value *v, int depth, unsigned flags)
{
    size_t n = ptc_value_len(v);
    sb_puts(b, "{");
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_puts(b, ", ");
        if (i == INLINE_MAX_ITEMS) {
            sb_printf(b, "... (%zu items)", n);
            break;
        }
        const ptc_value *k = ptc_dict_key(v, i), *x = ptc_dict_value(v, i);
        if (k)
            render(in, b, k, depth + 1, flags);
        sb_puts(b, ": ");
        if (x)
            render(in, b, x, depth + 1, flags);
    }
    sb_puts(b, "}");
}

/* One value as one line, in Python's notation where it has one. Depth-bounded: containers deeper
 * than INLINE_MAX_DEPTH show as "...". */
static void render(cj *in, sbuf *b, const ptc_value *v, int depth, unsigned flags)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int flag;
    double re, im;
    const char *s;
    size_t len;
    const uint8_t *bytes;
    ptc_dtype dt;
    int64_t index;

    if (!render_charge(in) ||
        (depth > INLINE_MAX_DEPTH && (k == PTC_VALUE_TUPLE || k == PTC_VALUE_LIST ||
                                      k == PTC_VALUE_DICT || k == PTC_VALUE_SET))) {
        sb_puts(b, "...");
        return;
    }
    switch (k) {
    case PTC_VALUE_NONE:
        sb_puts(b, "None");
        break;
    case PTC_VALUE_BOOL:
        sb_puts(b, ptc_value_bool(v, &flag) < 0 ? "?" : flag ? "True" : "False");
        break;
    case PTC_VALUE_INT:
        render_int(b, v);
        break;
    case PTC_VALUE_FLOAT:
        if (ptc_value_float(v, &re) == 0)
            render_double(b, re);
        else
            sb_puts(b, "?");
        break;
    case PTC_VALUE_COMPLEX:
        if (ptc_value_complex(v, &re, &im) == 0)
            render_complex(b, re, im);
        else
            sb_puts(b, "?");
        break;
    case PTC_VALUE_STR:
        if (ptc_value_str(v, &s, &len) == 0)
            render_str(b, s, len, flags);
        else
            sb_puts(b, "?");
        break;
    case PTC_VALUE_BYTES:
        if (ptc_value_bytes(v, &bytes, &len) == 0)
            render_bytes(b, bytes, len);
        else
            sb_puts(b, "?");
        break;
    case PTC_VALUE_TUPLE:
        render_items(in, b, v, "(", ")", depth, flags);
        break;
    case PTC_VALUE_LIST:
        render_items(in, b, v, "[", "]", depth, flags);
        break;
    case PTC_VALUE_SET:
        if (ptc_value_len(v) == 0)
            sb_puts(b, "set()");
        else
            render_items(in, b, v, "set({", "})", depth, flags);
        break;
    case PTC_VALUE_DICT:
        render_dict(in, b, v, depth, flags);
        break;
    case PTC_VALUE_SIZE:
        render_items(in, b, v, "torch.Size([", "])", depth, flags);
        break;
    case PTC_VALUE_TENSOR: {
        const ptc_tensor *t = ptc_value_tensor(v);
        if (!t) {
            sb_puts(b, "tensor(?)");
            break;
        }
        sb_puts(b, "tensor(");
        render_text(b, ptc_dtype_name(ptc_tensor_dtype(t)), 0);
        sb_puts(b, ", ");
        render_shape(b, ptc_tensor_ndim(t), ptc_tensor_shape(t));
        sb_puts(b, ")");
        break;
    }
    case PTC_VALUE_DTYPE:
        sb_puts(b, "torch.");
        render_text(b, ptc_value_dtype(v, &dt) == 0 ? ptc_dtype_name(dt) : NULL, 0);
        break;
    case PTC_VALUE_DEVICE:
        if (ptc_value_device(v, &s, &index) < 0) {
            sb_puts(b, "device(?)");
            break;
        }
        sb_puts(b, "device(type='");
        render_text(b, s, flags);
        if (index >= 0)
            sb_printf(b, "', index=%" PRId64 ")", index);
        else
            sb_puts(b, "')");
        break;
    case PTC_VALUE_GLOBAL:
        /* Salvage's placeholder for a cut cycle names itself: "<back-reference to ...>". */
        if (ptc_value_is_back_reference(v)) {
            render_text(b, ptc_value_global_name(v), flags);
            break;
        }
        sb_puts(b, "<global ");
        render_text(b, ptc_value_global_name(v), flags);
        sb_puts(b, ">");
        break;
    case PTC_VALUE_OBJECT:
        sb_puts(b, "<");
        render_text(b, ptc_value_global_name(v), flags);
        sb_puts(b, " object>");
        /* Salvage's reason to leave a numpy array symbolic (already escaped text). */
        if (ptc_object_note(v)) {
            sb_puts(b, " (numpy array left symbolic: ");
            sb_puts(b, ptc_object_note(v));
            sb_puts(b, ")");
        }
        break;
    default:
        sb_printf(b, "<value of kind %d>", (int)k);
        break;
    }
}

/* The public entry to render(): the text `ptc inspect` prints after "PATH = " and the "value" of
 * ptc_ckpt_json for what has no JSON form. Rendered whole into a buffer first, so that a budget
 * that runs out midway writes nothing. */
int ptc_value_text(const ptc_value *v, unsigned flags, ptc_budget *budget, ptc_write_fn write,
                   void *ctx, ptc_error *err)
{
    if (!v || !write)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_value_text: %s is NULL",
                        !v ? "the value" : "write");
    cj in = {.charging = budget};
    sbuf b = {0};
    render(&in, &b, v, 0, (flags & PTC_TEXT_ESCAPE) ? R_ESCAPE : 0);
    int rc = 0;
    if (in.failed) {
        rc = in.err.code ? in.err.code : PTC_ELIMIT;
        if (err)
            *err = in.err;
    } else if (b.oom) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1,
                      "out of memory rendering a value (or its text passed %zu bytes)",
                      (size_t)PTC__BUF_MAX_DEFAULT);
    } else {
        rc = write(ctx, sb_str(&b), b.len);
        if (rc < 0)
            ptc__err(err, rc, "", -1, "ptc_value_text: the write callback failed (%s)",
                     ptc_err_name(rc));
        else
            rc = 0;
    }
    sb_free(&b);
    return rc;
}

/* ---- values as JSON -------------------------------------------------------------------------
 * Names of the kinds in the "type" field. The document owns these rather than borrowing
 * ptc_value_kind_name, because they are part of its documented output schema. */
static const char *kind_name(ptc_value_kind k)
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
static json_t *json_text(const char *s, size_t len)
{
    if (!s)
        return json_null();
    if (ptc_utf8_valid(s, len))
        return json_stringn(s, len);
    sbuf b = {0};
    sb_escape(&b, s, len, 0);
    json_t *j = b.oom ? NULL : json_stringn(sb_str(&b), b.len);
    sb_free(&b);
    return j;
}

static json_t *json_cstr(const char *s)
{
    return json_text(s, s ? strlen(s) : 0);
}

/* The text rendering of v as a JSON string (for what has no natural JSON form). */
static json_t *json_rendered(cj *in, const ptc_value *v)
{
    sbuf b = {0};
    render(in, &b, v, 0, 0);
    json_t *j = b.oom ? NULL : json_text(sb_str(&b), b.len);
    sb_free(&b);
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

/* ---- the document, written as a stream -------------------------------------------------
 * The document is never built whole: its arrays can hold millions of entries (a list of five
 * million None is a 5 MB file). The entries a checkpoint has by the thousand (records, storages,
 * tensors, {"$ref"} tensor rows, totals) are written directly (out_tensor and its helpers below);
 * each "values" and "metadata" entry is built as a small jansson object, dumped and freed. The
 * braces, brackets, commas and keys around the entries are written here, so that the bytes are
 * those json_dumps(root, JSON_FLAGS) would give for the whole document. */
#define JSON_FLAGS (JSON_INDENT(JSON_STEP) | JSON_PRESERVE_ORDER)
#define JSON_STEP  2 /* spaces per nesting level, as JSON_INDENT(2) indents */

/* Hands the batched bytes to the caller's function; after a failure, nothing more (in->wrc keeps
 * the first error). */
static void out_flush(cj *in)
{
    if (in->wrc == 0 && in->olen > 0) {
        int rc = in->write(in->ctx, in->obuf, in->olen);
        if (rc < 0)
            in->wrc = rc;
    }
    in->olen = 0;
}

/* out's way when p[0..n) does not fit beside what obuf holds. */
static void out_long(cj *in, const char *p, size_t n)
{
    out_flush(in);
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

/* Writes p[0..n): batched in obuf, so that a document of 20,000 entries costs a few hundred
 * calls of the caller's function rather than a dozen per entry. The bytes are the same; after a
 * write failed, out_flush drops what gathers. */
static inline void out(cj *in, const char *p, size_t n)
{
    if (n <= sizeof in->obuf - in->olen) {
        memcpy(in->obuf + in->olen, p, n);
        in->olen += n;
        return;
    }
    out_long(in, p, n);
}

static inline void out_s(cj *in, const char *s)
{
    out(in, s, strlen(s)); /* inlined, strlen of a literal is a constant */
}

/* Room for n more bytes at the end of obuf (n below OUT_BUF_BYTES), flushing first when needed:
 * where to write them; the caller then advances olen. */
static inline char *out_room(cj *in, size_t n)
{
    if (n > sizeof in->obuf - in->olen)
        out_flush(in);
    return in->obuf + in->olen;
}

/* Writes s[0..n) with its hidden characters as \uXXXX (ptc_json_escape_hidden). */
static void out_json_text(cj *in, const char *s, size_t n)
{
    size_t ascii = 0;
    while (ascii < n && (unsigned char)s[ascii] < 0x80)
        ascii++;
    if (ascii == n) { /* nothing hidden in ASCII: the common case, written as it is */
        out(in, s, n);
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
    out(in, t, len);
    if (t != small)
        ptc__free(t);
}

/* A line break, then the indentation of nesting level depth. */
static void json_newline(cj *in, int depth)
{
    static const char spaces[] = "\n                                ";
    size_t n = 1 + (size_t)depth * JSON_STEP; /* the document nests 3 levels deep at most */
    out(in, spaces, n < sizeof spaces - 1 ? n : sizeof spaces - 1);
}

/* Writes j at nesting level depth of the document and frees it; -1 when j is NULL, out of memory
 * or the write failed. json_dumps indents j as a document of its own, so each of its line breaks
 * (all structural: JSON strings hold none) gets depth levels more. jansson keeps UTF-8 and escapes
 * C0 controls; out_json_text escapes the other characters a terminal would act on. */
static int json_write(cj *in, json_t *j, int depth)
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
        json_newline(in, depth);
        p = nl + 1;
    }
    json_malloc_t jmalloc;
    json_free_t jfree;
    json_get_alloc_funcs(&jmalloc, &jfree); /* text is jansson's, from its own allocator */
    jfree(text);
    return in->wrc < 0 ? -1 : 0;
}

/* The next member of the document (nesting level 1): its key, ready for its value. */
static void json_member(cj *in, size_t *nmembers, const char *key)
{
    out_s(in, (*nmembers)++ ? "," : "{");
    json_newline(in, 1);
    out_s(in, "\"");
    out_s(in, key);
    out_s(in, "\": ");
}

/* An array of the document, written entry by entry. */
typedef struct json_stream {
    cj *in;
    int depth; /* the array's nesting level */
    size_t n;  /* entries written */
} json_stream;

static void json_stream_open(cj *in, json_stream *a, size_t *nmembers, const char *key)
{
    json_member(in, nmembers, key);
    out_s(in, "[");
    *a = (json_stream){.in = in, .depth = 1};
}

/* Writes e as the array's next entry and frees it; -1 when e is NULL or out of memory. */
static int json_stream_put(json_stream *a, json_t *e)
{
    if (!e)
        return -1;
    if (a->n++)
        out_s(a->in, ",");
    json_newline(a->in, a->depth + 1);
    return json_write(a->in, e, a->depth + 1);
}

static void json_stream_close(json_stream *a)
{
    if (a->n)
        json_newline(a->in, a->depth);
    out_s(a->in, "]");
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
static int json_stream_next(json_stream *a)
{
    if (a->n++)
        out_s(a->in, ",");
    json_newline(a->in, a->depth + 1);
    return a->depth + 1;
}

static void out_i64(cj *in, int64_t x)
{
    char buf[24], *e = buf + sizeof buf, *p = e;
    uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        *--p = '-';
    out(in, p, (size_t)(e - p));
}

/* A count as the document gives it: an integer up to INT64_MAX, a string of its digits beyond
 * (JSON readers lose integers past 2^63). */
static void out_u64(cj *in, uint64_t x)
{
    if (x <= (uint64_t)INT64_MAX) {
        out_i64(in, (int64_t)x);
        return;
    }
    char s[24];
    int n = snprintf(s, sizeof s, "\"%" PRIu64 "\"", x);
    out(in, s, (size_t)n);
}

static void out_bool(cj *in, int b)
{
    out_s(in, b ? "true" : "false");
}

/* json_cstr(s) as json_write writes it; -1 when out of memory or the write failed. */
static int out_cstr(cj *in, const char *s)
{
    if (!s) {
        out_s(in, "null");
        return in->wrc < 0 ? -1 : 0;
    }
    size_t n = 0;
    for (unsigned char ch; (ch = (unsigned char)s[n]) != 0; n++)
        if (ch < 0x20 || ch > 0x7E || ch == '"' || ch == '\\')
            return json_write(in, json_cstr(s), 0); /* a string holds no line break */
    if (n + 2 >= sizeof in->obuf) {
        out_s(in, "\"");
        out(in, s, n);
        out_s(in, "\"");
    } else {
        char *p = out_room(in, n + 2);
        p[0] = '"';
        memcpy(p + 1, s, n);
        p[n + 1] = '"';
        in->olen += n + 2;
    }
    return in->wrc < 0 ? -1 : 0;
}

/* An object at nesting level depth, written member by member. */
typedef struct jobj {
    cj *in;
    int depth;
    size_t n; /* members written */
} jobj;

/* The member's separator, line break, indentation and key, in one piece (keys are this file's
 * own short constants: inlined, their lengths are constants). */
static inline void jobj_key(jobj *o, const char *key)
{
    size_t klen = strlen(key), ind = (size_t)(o->depth + 1) * JSON_STEP;
    if (ind > 32)
        ind = 32; /* json_newline's most */
    char *p = out_room(o->in, klen + ind + 6), *p0 = p;
    *p++ = o->n++ ? ',' : '{';
    *p++ = '\n';
    memset(p, ' ', ind);
    p += ind;
    *p++ = '"';
    memcpy(p, key, klen);
    p += klen;
    memcpy(p, "\": ", 3);
    p += 3;
    o->in->olen += (size_t)(p - p0);
}

static void jobj_close(jobj *o)
{
    if (o->n) {
        json_newline(o->in, o->depth);
        out_s(o->in, "}");
    } else {
        out_s(o->in, "{}");
    }
}

/* A shape or stride: an array of integers at nesting level depth. */
static void out_dims(cj *in, int depth, int ndim, const int64_t *dims)
{
    if (ndim <= 0) {
        out_s(in, "[]");
        return;
    }
    out_s(in, "[");
    for (int d = 0; d < ndim; d++) {
        if (d)
            out_s(in, ",");
        json_newline(in, depth + 1);
        out_i64(in, dims[d]);
    }
    json_newline(in, depth);
    out_s(in, "]");
}

static json_t *json_value(cj *in, const ptc_value *v, int depth);

static json_t *json_items(cj *in, const ptc_value *v, int depth)
{
    json_t *a = json_array();
    size_t n = ptc_value_len(v);
    for (size_t i = 0; a && i < n; i++) {
        const ptc_value *item = ptc_value_item(v, i);
        if (json_push(a, item ? json_value(in, item, depth + 1) : json_null()) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* The JSON form of a leaf value (schema in ptc-inspect(1)). NULL only when out of memory. */
static json_t *json_value(cj *in, const ptc_value *v, int depth)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int flag;
    int64_t x;
    double re, im;
    const char *s;
    const uint8_t *bytes;
    size_t len;
    json_t *j;

    if (!render_charge(in))
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
        if (!render_charge_bytes(in, json_text_cost(s, len)) || in->counting)
            return json_null();
        return json_text(s, len);
    case PTC_VALUE_BYTES: {
        if (ptc_value_bytes(v, &bytes, &len) < 0)
            return json_null();
        static const char hex[] = "0123456789abcdef";
        size_t shown = len > JSON_MAX_BYTES ? JSON_MAX_BYTES : len;
        if (!render_charge_bytes(in, 2 * (uint64_t)shown))
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
        if (j && (json_put(j, "len", json_integer((json_int_t)len)) < 0 ||
                  json_put(j, "hex", json_string(h)) < 0 ||
                  (shown < len && json_put(j, "truncated", json_true()) < 0))) {
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
        sb_puts(&b, s ? s : "?");
        if (index >= 0)
            sb_printf(&b, ":%" PRId64, index);
        j = b.oom ? NULL : json_text(sb_str(&b), b.len);
        sb_free(&b);
        return j;
    }
    case PTC_VALUE_DTYPE:
    case PTC_VALUE_TENSOR:
        return json_rendered(in, v);
    case PTC_VALUE_GLOBAL:
    case PTC_VALUE_OBJECT:
        return json_cstr(ptc_value_global_name(v));
    }
    return json_rendered(in, v);
}

/* ---- the value walk ------------------------------------------------------------------------- */

/* What one walk of the tree does (walk_json): the first counts and charges, writes nothing;
 * each of the others writes the entries of one array of the document. */
enum { JW_SCAN, JW_TENSORS, JW_VALUES, JW_METADATA };

typedef struct value_sink {
    cj *in;
    int mode;           /* JW_* */
    json_stream *array; /* the array the walk writes to */
    size_t count;       /* entries emitted, metadata included (JW_SCAN) */
    size_t nvalues;     /* JW_SCAN: entries of "values" */
    size_t nmeta;       /* JW_SCAN: entries of "metadata" */
    int truncated;      /* stopped after MAX_VALUE_VISITS */
    int oom;
} value_sink;

/* A value that is not listed further (a scalar, a set, a size, an empty container): a "values"
 * entry. */
static void emit_leaf(value_sink *out, const sbuf *path, const ptc_value *v)
{
    cj *in = out->in;
    out->count++;
    if (!render_charge_bytes(in, path->len)) /* the path written (charged by the scan) */
        return;
    if (out->mode == JW_SCAN) {
        /* Rendered and dropped: the scan charges the budget as the written entry will. */
        in->counting = 1;
        json_t *j = json_value(in, v, 0);
        in->counting = 0;
        out->nvalues++;
        out->oom |= !j;
        json_decref(j);
        return;
    }
    if (out->mode != JW_VALUES)
        return;
    json_t *e = json_object();
    if (!e || json_put(e, "path", json_text(sb_str(path), path->len)) < 0 ||
        json_put(e, "type", json_string(kind_name(ptc_value_kind_of(v)))) < 0 ||
        json_put(e, "value", json_value(in, v, 0)) < 0) {
        json_decref(e);
        out->oom = 1;
    } else if (json_stream_put(out->array, e) < 0) {
        out->oom = 1;
    }
}

/* A dict's attributes: torch's state dicts carry {'_metadata': {module: {'version': n}}}. */
static void emit_attrs(value_sink *out, const sbuf *path, const ptc_value *attrs)
{
    cj *in = out->in;
    const ptc_value *meta = ptc_dict_get(attrs, "_metadata");
    int has_modules = meta && ptc_value_kind_of(meta) == PTC_VALUE_DICT;
    size_t modules = has_modules ? ptc_value_len(meta) : 0;
    size_t nattrs = ptc_value_kind_of(attrs) == PTC_VALUE_DICT ? ptc_value_len(attrs) : 0;

    out->count++;
    if (!render_charge_bytes(in, path->len))
        return;
    if (out->mode == JW_SCAN)
        out->nmeta++;
    if (out->mode != JW_METADATA)
        return;
    json_t *e = json_object();
    json_t *jmodules = has_modules ? json_integer((json_int_t)modules) : json_null();
    if (!e || json_put(e, "path", json_text(sb_str(path), path->len)) < 0 ||
        json_put(e, "modules", jmodules) < 0 ||
        json_put(e, "attributes", json_integer((json_int_t)nattrs)) < 0) {
        json_decref(e);
        out->oom = 1;
    } else if (json_stream_put(out->array, e) < 0) {
        out->oom = 1;
    }
}

static int is_container(ptc_value_kind k)
{
    return k == PTC_VALUE_DICT || k == PTC_VALUE_LIST || k == PTC_VALUE_TUPLE;
}

static char *copy_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ptc__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- the walk: shared containers listed once -------------------------------------------
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
        shared *ne = ptc__calloc(ncap, sizeof *ne);
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
        ptc__free(m->e);
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
        ptc__free(m->e[i].tpath);
    }
    ptc__free(m->e);
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
        size_t *ns = ptc__calloc(ncap, sizeof *ns);
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
        ptc__free(m->slot);
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
        digest *nd = ptc__realloc(m->d, ncap * sizeof *nd);
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
    ptc__free(m->d);
    ptc__free(m->slot);
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
static int count_refs(cj *in, const ptc_value *root, ptc_error *err)
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
                const ptc_value **ns = ptc__realloc(stack, ncap * sizeof *ns);
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
    ptc__free(stack);
    return rc;
}

static uint64_t sat_sub(uint64_t now, uint64_t before)
{
    return now == UINT64_MAX ? UINT64_MAX : now - before;
}

static void add_totals(cj *in, uint64_t ntensors, uint64_t numel, uint64_t nbytes)
{
    in->tot_tensors = add_sat(in->tot_tensors, ntensors);
    in->tot_numel = add_sat(in->tot_numel, numel);
    in->tot_bytes = add_sat(in->tot_bytes, nbytes);
}

static int out_tensor(cj *in, json_stream *a, const char *path, const ptc_tensor *t);

typedef struct jframe {
    const ptc_value *v;
    size_t i, n;
    size_t tlen; /* length of v's path */
    shared *sh;  /* v's entry when it is shared, else NULL */
    size_t rows0, count0;
    uint64_t ntensors0, numel0, nbytes0;
} jframe;

/* A shared container met again: its {"$ref"} entries, and (JW_SCAN) its subtree's totals. One met
 * again inside its own listing (a cycle) has no entries yet: it adds nothing. */
static int emit_ref(cj *in, value_sink *out, const shared *sh, const sbuf *tpath)
{
    if (sh->listed != LISTED_DONE)
        return 0;
    int value_ref = sh->has_values && in->p.values && !out->truncated;
    json_t *e;
    switch (out->mode) {
    case JW_SCAN:
        /* The paths the {"$ref"} entries will write. */
        if ((sh->has_tensors && !render_charge_bytes(in, tpath->len + strlen(sh->tpath))) ||
            (value_ref && !render_charge_bytes(in, tpath->len + strlen(sh->tpath))))
            return PTC_ELIMIT;
        add_totals(in, sh->ntensors, sh->numel, sh->nbytes);
        in->ntrows += sh->has_tensors != 0;
        if (value_ref) {
            out->count++;
            out->nvalues++;
        }
        return 0;
    case JW_TENSORS: {
        if (!sh->has_tensors)
            return 0;
        jobj o = {.in = in, .depth = json_stream_next(out->array)};
        jobj_key(&o, "path");
        int bad = out_cstr(in, sb_str(tpath)) < 0;
        jobj_key(&o, "$ref");
        bad |= out_cstr(in, sh->tpath) < 0;
        jobj_close(&o);
        return bad ? PTC_ENOMEM : 0;
    }
    case JW_VALUES:
        if (!value_ref)
            return 0;
        e = json_object();
        if (!e || json_put(e, "path", json_text(sb_str(tpath), tpath->len)) < 0 ||
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
static int emit_tensor(cj *in, value_sink *out, const sbuf *tpath, const ptc_tensor *t)
{
    if (out->mode == JW_TENSORS)
        return out_tensor(in, out->array, sb_str(tpath), t) < 0 ? PTC_ENOMEM : 0;
    if (out->mode != JW_SCAN)
        return 0;
    if (!render_charge_bytes(in, tpath->len)) /* the entry's path, written by JW_TENSORS */
        return PTC_ELIMIT;
    int64_t ne = ptc_tensor_numel(t), nb = ptc_tensor_nbytes(t);
    add_totals(in, 1, ne > 0 ? (uint64_t)ne : 0, nb > 0 ? (uint64_t)nb : 0);
    in->ntrows++;
    if (in->p.hash) {
        int added;
        digest *d = digest_find(&in->digests, t, 1, &added);
        if (!d)
            return PTC_ENOMEM;
        if (added) {
            const char *p = sb_str(tpath);
            size_t n = strnlen(p, sizeof d->path - 1);
            memcpy(d->path, p, n);
            d->path[n] = '\0';
        }
    }
    return 0;
}

/* One walk of the tree, with the tensor paths of ptc_walk (shared containers once) and the
 * value paths of walk_values. JW_SCAN walks first: it charges the budget (the only walk that
 * does), counts the entries and the totals, and learns what each shared container holds; each
 * later walk, the same steps in the same order, writes the entries of one array. */
static int walk_json(cj *in, value_sink *out, ptc_error *err)
{
    const ptc_value *v = ptc_ckpt_root(in->c);
    sbuf tpath = {0};
    jframe *st = NULL;
    size_t nst = 0, cap = 0, visits = 0;
    int scan = out->mode == JW_SCAN;
    int values = in->p.values;
    int rc = 0;

    if (scan)
        rc = count_refs(in, v, err);
    else
        for (size_t i = 0; i < in->shared.cap; i++)
            in->shared.e[i].listed = 0;
    if (v && rc == 0 && !render_charge(in))
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
                    jframe *ns = ptc__realloc(st, ncap * sizeof *ns);
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
                        sh->tpath = copy_str(sb_str(&tpath));
                        if (!sh->tpath) {
                            rc = PTC_ENOMEM;
                            break;
                        }
                    }
                }
                st[nst++] = (jframe){
                    v,          0,          ptc_value_len(v), tpath.len,     sh,
                    in->ntrows, out->count, in->tot_tensors,  in->tot_numel, in->tot_bytes};
            } else if (values && !out->truncated) {
                emit_leaf(out, &tpath, v); /* scalars, sets, sizes, and empty containers */
            }
        }
        if (rc == 0 && (out->oom || tpath.oom))
            rc = PTC_ENOMEM;
        if (rc < 0 || in->failed)
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
            sb_truncate(&tpath, f->tlen);
            if (f->tlen)
                sb_puts(&tpath, ".");
            if (dict) {
                sb_key(&tpath, ptc_dict_key(f->v, i));
            } else {
                sb_printf(&tpath, "%zu", i);
            }
            if (!render_path_ok(in, tpath.len, nst))
                break;
            v = c;
        }
        if (v && !render_charge(in))
            break;
        if (v && ++visits > MAX_VALUE_VISITS)
            out->truncated = 1;
    }
    if (rc == 0 && in->failed)
        rc = PTC_ELIMIT;
    if (rc == PTC_ELIMIT && in->failed && err)
        *err = in->err;
    ptc__free(st);
    sb_free(&tpath);
    return rc;
}

/* A tensor listed at several paths is hashed once (the rows are matched by tensor pointer); each
 * read is charged to the budget before a byte is read (ptc_tensor_sha256_charged). */

/* With hash: the digest of each tensor the scan met, in the order it met them (the order in
 * which the text listing of `ptc inspect --hash` goes through its rows). */
static int hash_digests(cj *in, ptc_error *err)
{
    int rc = 0;
    if (in->p.progress)
        in->p.progress(in->p.progress_ctx, 0, in->digests.n);
    for (size_t i = 0; i < in->digests.n && rc == 0; i++) {
        digest *d = &in->digests.d[i];
        rc = ptc_tensor_sha256_charged(d->t, &in->budget, d->path, d->sha256, err);
        if (in->p.progress)
            in->p.progress(in->p.progress_ctx, i + 1, in->digests.n);
    }
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

/* ---- JSON output ---------------------------------------------------------------------------- */

/* The "tensors" entry of tensor t, met at path, as the array's next entry; -1 when out of memory
 * or the write failed. */
static int out_tensor(cj *in, json_stream *a, const char *path, const ptc_tensor *t)
{
    const ptc_storage *s = ptc_tensor_storage(t);
    int ndim = ptc_tensor_ndim(t);
    jobj o = {.in = in, .depth = json_stream_next(a)};
    jobj_key(&o, "path");
    int bad = out_cstr(in, path) < 0;
    jobj_key(&o, "dtype");
    bad |= out_cstr(in, ptc_dtype_name(ptc_tensor_dtype(t))) < 0;
    jobj_key(&o, "shape");
    out_dims(in, o.depth + 1, ndim, ptc_tensor_shape(t));
    jobj_key(&o, "stride");
    out_dims(in, o.depth + 1, ndim, ptc_tensor_stride(t));
    jobj_key(&o, "storage_offset");
    out_i64(in, ptc_tensor_storage_offset(t));
    jobj_key(&o, "storage");
    bad |= out_cstr(in, s ? ptc_storage_key(s) : NULL) < 0;
    jobj_key(&o, "numel");
    out_i64(in, ptc_tensor_numel(t));
    jobj_key(&o, "nbytes");
    out_i64(in, ptc_tensor_nbytes(t));
    jobj_key(&o, "requires_grad");
    out_bool(in, ptc_tensor_requires_grad(t));
    jobj_key(&o, "parameter");
    out_bool(in, ptc_tensor_is_parameter(t));
    if (in->p.hash) {
        const digest *d = digest_find(&in->digests, t, 0, NULL);
        char hex[65];
        if (!d)
            return -1;
        sha256_hex(hex, d->sha256);
        jobj_key(&o, "sha256");
        bad |= out_cstr(in, hex) < 0;
    }
    jobj_close(&o);
    return bad || in->wrc < 0 ? -1 : 0;
}

/* One later walk of the tree (walk_json), writing the entries of one array; the budget was
 * charged by the scan, which took the same steps. */
static int write_entries(cj *in, int mode, json_stream *a)
{
    value_sink out = {.in = in, .mode = mode, .array = a};
    return walk_json(in, &out, NULL);
}

/* The document, written as the scan (walk_json's JW_SCAN, whose counts are in scan) found it.
 * Every array is written entry by entry, so that memory does not grow with their length. */
static int print_json(cj *in, const value_sink *scan)
{
    const ptc_ckpt *c = in->c;
    size_t nmembers = 0;
    json_stream a;
    int bad = 0;

    in->charging = NULL; /* the later walks repeat the scan, which was charged */

    json_member(in, &nmembers, "file");
    bad |= json_write(in, json_cstr(in->p.file), 1);
    json_member(in, &nmembers, "format");
    bad |= json_write(in, json_string(format_name(c)), 1);
    json_member(in, &nmembers, "prefix");
    bad |= json_write(in, json_cstr(ptc_ckpt_prefix(c)), 1);
    json_member(in, &nmembers, "byteorder");
    bad |= json_write(in, json_cstr(ptc_ckpt_byteorder(c)), 1);

    if (!bad && ptc_ckpt_format(c) == PTC_FORMAT_ZIP) {
        json_stream_open(in, &a, &nmembers, "records");
        for (size_t i = 0; !bad && i < ptc_ckpt_nrecords(c); i++) {
            jobj o = {.in = in, .depth = json_stream_next(&a)};
            jobj_key(&o, "name");
            bad |= out_cstr(in, ptc_ckpt_record_name(c, i));
            jobj_key(&o, "size");
            out_u64(in, ptc_ckpt_record_size(c, i));
            jobj_close(&o);
            bad |= in->wrc < 0 ? -1 : 0;
        }
        json_stream_close(&a);
    }

    if (!bad) {
        json_stream_open(in, &a, &nmembers, "storages");
        for (size_t i = 0; !bad && i < ptc_ckpt_nstorages(c); i++) {
            const ptc_storage *s = ptc_ckpt_storage(c, i);
            if (!s)
                continue;
            jobj o = {.in = in, .depth = json_stream_next(&a)};
            jobj_key(&o, "key");
            bad |= out_cstr(in, ptc_storage_key(s));
            jobj_key(&o, "dtype");
            bad |= out_cstr(in, ptc_dtype_name(ptc_storage_dtype(s)));
            jobj_key(&o, "nbytes");
            out_i64(in, ptc_storage_nbytes(s));
            jobj_key(&o, "location");
            bad |= out_cstr(in, ptc_storage_location(s));
            jobj_key(&o, "mapped");
            out_bool(in, ptc_storage_is_mapped(s));
            jobj_close(&o);
            bad |= in->wrc < 0 ? -1 : 0;
        }
        json_stream_close(&a);
    }

    if (!bad) {
        json_stream_open(in, &a, &nmembers, "tensors");
        if (in->ntrows > 0)
            bad |= write_entries(in, JW_TENSORS, &a) < 0;
        json_stream_close(&a);
    }

    if (!bad && in->p.values) {
        json_stream_open(in, &a, &nmembers, "values");
        if (scan->nvalues > 0)
            bad |= write_entries(in, JW_VALUES, &a) < 0;
        json_stream_close(&a);
    }
    if (!bad && in->p.values) {
        json_stream_open(in, &a, &nmembers, "metadata");
        if (scan->nmeta > 0)
            bad |= write_entries(in, JW_METADATA, &a) < 0;
        json_stream_close(&a);
    }
    if (!bad && in->p.values && scan->truncated) {
        json_member(in, &nmembers, "values_truncated");
        bad |= json_write(in, json_true(), 1);
    }

    if (!bad) {
        /* Counted as if every {"$ref"} were written out in full (as ptc_walk reports them). */
        json_member(in, &nmembers, "totals");
        jobj o = {.in = in, .depth = 1};
        jobj_key(&o, "tensors");
        out_u64(in, in->tot_tensors);
        jobj_key(&o, "elements");
        out_u64(in, in->tot_numel);
        jobj_key(&o, "nbytes");
        out_u64(in, in->tot_bytes);
        jobj_close(&o);
        bad |= in->wrc < 0 ? -1 : 0;
    }

    if (!bad) {
        json_newline(in, 0);
        out_s(in, "}\n");
    }
    if (in->wrc < 0)
        return in->wrc;
    return bad ? PTC_ENOMEM : 0;
}

/* ---- the call -------------------------------------------------------------------------------- */

void ptc_ckpt_json_params_default(ptc_ckpt_json_params *p)
{
    if (p)
        *p = (ptc_ckpt_json_params){.size = sizeof *p, .values = 1};
}

int ptc_ckpt_json(const ptc_ckpt *c, const ptc_ckpt_json_params *p, ptc_write_fn write, void *ctx,
                  ptc_error *err)
{
    if (!c || !write)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_ckpt_json: missing argument");
    cj *in = ptc__calloc(1, sizeof *in);
    if (!in)
        return ptc__err(err, PTC_ENOMEM, "", -1, "ptc_ckpt_json: out of memory");
    ptc_ckpt_json_params_default(&in->p);
    int rc = ptc__params_read(&in->p, sizeof in->p, p, "ptc_ckpt_json_params", err);
    if (rc < 0) {
        ptc__free(in);
        return rc;
    }
    in->c = c;
    in->write = write;
    in->ctx = ctx;
    ptc_budget_init(&in->budget, c, in->p.budget);
    in->charging = &in->budget;

    /* The scan checks and counts all; only then is the document written, walk by walk. */
    ptc_error e = {0};
    value_sink scan = {.in = in, .mode = JW_SCAN};
    rc = walk_json(in, &scan, &e);
    if (rc == 0 && in->p.hash)
        rc = hash_digests(in, &e);
    if (rc == 0)
        rc = print_json(in, &scan);
    out_flush(in); /* what was written stays written, even when the document stops short */
    if (rc == 0 && in->wrc < 0)
        rc = in->wrc;
    if (rc == PTC_ELIMIT && in->failed)
        e = in->err;
    if (rc < 0) {
        if (rc == in->wrc && !e.code)
            ptc__err(&e, rc, "", -1, "ptc_ckpt_json: writing the JSON failed: %s",
                     ptc_strerror(rc));
        else if (!e.code)
            ptc__err(&e, rc, "", -1, "ptc_ckpt_json: %s", ptc_strerror(rc));
        if (err)
            *err = e;
    }
    shared_free(&in->shared);
    digest_free(&in->digests);
    ptc__free(in);
    return rc;
}
