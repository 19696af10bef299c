/*
 * value_text.c - the one-line rendering of a value (ptc_value_text, and the "value" of
 * ptc_ckpt_json for what has no JSON form), so that the text listing of `ptc inspect` and the JSON
 * document render a value the same way; with the growable string and the budget charges that
 * ptc_ckpt_json's walk shares. The renderer recurses to a fixed depth (INLINE_MAX_DEPTH).
 */
#include "pth/ckpt_json_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#define INLINE_MAX_DEPTH 4    /* nesting shown inside one rendered value */
#define INLINE_MAX_ITEMS 16   /* items shown of one container inside a rendered value */
#define TEXT_MAX_STR     256  /* bytes of a str shown in a rendered value */
#define TEXT_MAX_BYTES   32   /* bytes of a bytes value shown in a rendered value */
#define BIGINT_MAX_BYTES 1024 /* longest int rendered in decimal (the conversion is O(n^2)) */

/* ---- the growable string (sbuf, in ckpt_json_int.h) ----------------------------------------- */

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

void ptc__sb_puts(sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

void ptc__sb_printf(sbuf *b, const char *fmt, ...)
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
void ptc__sb_escape(sbuf *b, const void *s, size_t n, unsigned flags)
{
    size_t len = ptc_escape(NULL, 0, s, n, flags);
    if (sb_reserve(b, len) < 0)
        return;
    ptc_escape(b->data + b->len, len + 1, s, n, flags);
    b->len += len;
}

/* Appends the path segment ptc_walk_next writes for a dict key. */
void ptc__sb_key(sbuf *b, const ptc_value *key)
{
    size_t len = ptc_key_text(key, NULL, 0);
    if (sb_reserve(b, len) < 0)
        return;
    ptc_key_text(key, b->data + b->len, len + 1);
    b->len += len;
}

void ptc__sb_truncate(sbuf *b, size_t len)
{
    if (b->data && len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

const char *ptc__sb_str(const sbuf *b)
{
    return b->data ? b->data : "";
}

void ptc__sb_free(sbuf *b)
{
    ptc__free(b->data);
    *b = (sbuf){0};
}

/* Saturating addition, for totals over counts a file controls. */
uint64_t ptc__cj_add_sat(uint64_t a, uint64_t b)
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
 * Charged by ptc__cj_render() and ptc__cj_json_value(), which recurse through a value's items: once it runs out,
 * in->failed stays set and in->err says why. */

/* Bytes a str takes once written as escaped JSON text, an upper bound: a control byte becomes
 * \u00XX, a quote or backslash two bytes, a C1 control (0xC2 0x80-0x9F) and a character that
 * reorders or hides text or a lone surrogate (UTF-8 starting 0xE2, 0xED or 0xEF) \uXXXX. */
uint64_t ptc__cj_json_text_cost(const char *s, size_t len)
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

int ptc__cj_render_charge(cj *in)
{
    if (in->failed)
        return 0;
    if (in->charging && ptc_budget_charge(in->charging, 1, 0, &in->err) < 0)
        in->failed = 1;
    return !in->failed;
}

/* 1 when rendering may go on: charges n bytes written (a path, a value's text) to the budget. */
int ptc__cj_render_charge_bytes(cj *in, uint64_t n)
{
    if (in->failed)
        return 0;
    if (in->charging && ptc_budget_charge(in->charging, 0, n, &in->err) < 0)
        in->failed = 1;
    return !in->failed;
}

/* 1 when a path of len bytes, depth levels deep, may be built: within PTC_PATH_MAX. */
int ptc__cj_render_path_ok(cj *in, size_t len, size_t depth)
{
    if (in->failed)
        return 0;
    if (path_check(len, depth, &in->err) < 0)
        in->failed = 1;
    return !in->failed;
}

/* ---- rendering values as one line of text ----------------------------------------------------
 * flags: ESCAPE renders strings escaped for a terminal (values); without it strings are copied raw
 * (dict keys that become path segments, which are escaped once when the path is printed). */
enum { R_ESCAPE = 1 };

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
    ptc__sb_puts(b, s);
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
        ptc__sb_printf(b, "%sj", i);
    else
        ptc__sb_printf(b, "(%s%s%sj)", r, i[0] == '-' ? "" : "+", i);
}

static void render_str(sbuf *b, const char *s, size_t len, unsigned flags)
{
    size_t shown = len > TEXT_MAX_STR ? TEXT_MAX_STR : len;
    ptc__sb_puts(b, "\"");
    if (flags & R_ESCAPE)
        ptc__sb_escape(b, s, shown, PTC_ESC_QUOTE);
    else
        sb_putn(b, s, shown);
    ptc__sb_puts(b, "\"");
    if (shown < len)
        ptc__sb_printf(b, "... (%zu bytes)", len);
}

/* bytes as Python shows them: b'ab\x00'. Every byte outside printable ASCII is escaped. */
static void render_bytes(sbuf *b, const uint8_t *p, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t shown = len > TEXT_MAX_BYTES ? TEXT_MAX_BYTES : len;
    ptc__sb_puts(b, "b'");
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
    ptc__sb_puts(b, "'");
    if (shown < len)
        ptc__sb_printf(b, "... (%zu bytes)", len);
}

static void render_text(sbuf *b, const char *s, unsigned flags)
{
    if (!s)
        s = "?";
    if (flags & R_ESCAPE)
        ptc__sb_escape(b, s, strlen(s), 0);
    else
        ptc__sb_puts(b, s);
}

static void render_shape(sbuf *b, int ndim, const int64_t *dims)
{
    ptc__sb_puts(b, "[");
    for (int d = 0; d < ndim; d++)
        ptc__sb_printf(b, "%s%" PRId64, d ? ", " : "", dims[d]);
    ptc__sb_puts(b, "]");
}

/* Items of a tuple, list, set or torch.Size between open and close, at most INLINE_MAX_ITEMS. */
static void render_items(cj *in, sbuf *b, const ptc_value *v, const char *open, const char *close,
                         int depth, unsigned flags)
{
    size_t n = ptc_value_len(v);
    ptc__sb_puts(b, open);
    for (size_t i = 0; i < n; i++) {
        if (i)
            ptc__sb_puts(b, ", ");
        if (i == INLINE_MAX_ITEMS) {
            ptc__sb_printf(b, "... (%zu items)", n);
            break;
        }
        const ptc_value *item = ptc_value_item(v, i);
        if (item)
            ptc__cj_render(in, b, item, depth + 1, flags);
        else
            ptc__sb_puts(b, "?");
    }
    if (n == 1 && ptc_value_kind_of(v) == PTC_VALUE_TUPLE)
        ptc__sb_puts(b, ",");
    ptc__sb_puts(b, close);
}

static void render_dict(cj *in, sbuf *b, const ptc_value *v, int depth, unsigned flags)
{
    size_t n = ptc_value_len(v);
    ptc__sb_puts(b, "{");
    for (size_t i = 0; i < n; i++) {
        if (i)
            ptc__sb_puts(b, ", ");
        if (i == INLINE_MAX_ITEMS) {
            ptc__sb_printf(b, "... (%zu items)", n);
            break;
        }
        const ptc_value *k = ptc_dict_key(v, i), *x = ptc_dict_value(v, i);
        if (k)
            ptc__cj_render(in, b, k, depth + 1, flags);
        ptc__sb_puts(b, ": ");
        if (x)
            ptc__cj_render(in, b, x, depth + 1, flags);
    }
    ptc__sb_puts(b, "}");
}

/* One value as one line, in Python's notation where it has one. Depth-bounded: containers deeper
 * than INLINE_MAX_DEPTH show as "...". */
void ptc__cj_render(cj *in, sbuf *b, const ptc_value *v, int depth, unsigned flags)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int flag;
    double re, im;
    const char *s;
    size_t len;
    const uint8_t *bytes;
    ptc_dtype dt;
    int64_t index;

    if (!ptc__cj_render_charge(in) ||
        (depth > INLINE_MAX_DEPTH && (k == PTC_VALUE_TUPLE || k == PTC_VALUE_LIST ||
                                      k == PTC_VALUE_DICT || k == PTC_VALUE_SET))) {
        ptc__sb_puts(b, "...");
        return;
    }
    switch (k) {
    case PTC_VALUE_NONE:
        ptc__sb_puts(b, "None");
        break;
    case PTC_VALUE_BOOL:
        ptc__sb_puts(b, ptc_value_bool(v, &flag) < 0 ? "?" : flag ? "True" : "False");
        break;
    case PTC_VALUE_INT:
        render_int(b, v);
        break;
    case PTC_VALUE_FLOAT:
        if (ptc_value_float(v, &re) == 0)
            render_double(b, re);
        else
            ptc__sb_puts(b, "?");
        break;
    case PTC_VALUE_COMPLEX:
        if (ptc_value_complex(v, &re, &im) == 0)
            render_complex(b, re, im);
        else
            ptc__sb_puts(b, "?");
        break;
    case PTC_VALUE_STR:
        if (ptc_value_str(v, &s, &len) == 0)
            render_str(b, s, len, flags);
        else
            ptc__sb_puts(b, "?");
        break;
    case PTC_VALUE_BYTES:
        if (ptc_value_bytes(v, &bytes, &len) == 0)
            render_bytes(b, bytes, len);
        else
            ptc__sb_puts(b, "?");
        break;
    case PTC_VALUE_TUPLE:
        render_items(in, b, v, "(", ")", depth, flags);
        break;
    case PTC_VALUE_LIST:
        render_items(in, b, v, "[", "]", depth, flags);
        break;
    case PTC_VALUE_SET:
        if (ptc_value_len(v) == 0)
            ptc__sb_puts(b, "set()");
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
            ptc__sb_puts(b, "tensor(?)");
            break;
        }
        ptc__sb_puts(b, "tensor(");
        render_text(b, ptc_dtype_name(ptc_tensor_dtype(t)), 0);
        ptc__sb_puts(b, ", ");
        render_shape(b, ptc_tensor_ndim(t), ptc_tensor_shape(t));
        ptc__sb_puts(b, ")");
        break;
    }
    case PTC_VALUE_DTYPE:
        ptc__sb_puts(b, "torch.");
        render_text(b, ptc_value_dtype(v, &dt) == 0 ? ptc_dtype_name(dt) : NULL, 0);
        break;
    case PTC_VALUE_DEVICE:
        if (ptc_value_device(v, &s, &index) < 0) {
            ptc__sb_puts(b, "device(?)");
            break;
        }
        ptc__sb_puts(b, "device(type='");
        render_text(b, s, flags);
        if (index >= 0)
            ptc__sb_printf(b, "', index=%" PRId64 ")", index);
        else
            ptc__sb_puts(b, "')");
        break;
    case PTC_VALUE_GLOBAL:
        /* Salvage's placeholder for a cut cycle names itself: "<back-reference to ...>". */
        if (ptc_value_is_back_reference(v)) {
            render_text(b, ptc_value_global_name(v), flags);
            break;
        }
        ptc__sb_puts(b, "<global ");
        render_text(b, ptc_value_global_name(v), flags);
        ptc__sb_puts(b, ">");
        break;
    case PTC_VALUE_OBJECT:
        ptc__sb_puts(b, "<");
        render_text(b, ptc_value_global_name(v), flags);
        ptc__sb_puts(b, " object>");
        /* Salvage's reason to leave a numpy array symbolic (already escaped text). */
        if (ptc_object_note(v)) {
            ptc__sb_puts(b, " (numpy array left symbolic: ");
            ptc__sb_puts(b, ptc_object_note(v));
            ptc__sb_puts(b, ")");
        }
        break;
    default:
        ptc__sb_printf(b, "<value of kind %d>", (int)k);
        break;
    }
}

/* The public entry to ptc__cj_render(): the text `ptc inspect` prints after "PATH = " and the "value" of
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
    ptc__cj_render(&in, &b, v, 0, (flags & PTC_TEXT_ESCAPE) ? R_ESCAPE : 0);
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
        rc = write(ctx, ptc__sb_str(&b), b.len);
        if (rc < 0)
            ptc__err(err, rc, "", -1, "ptc_value_text: the write callback failed (%s)",
                     ptc_err_name(rc));
        else
            rc = 0;
    }
    ptc__sb_free(&b);
    return rc;
}
