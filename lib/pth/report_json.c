/*
 * report_json.c - ptc_report_json: one verified file as the JSON object `ptc verify --json` lists
 * (the schema is in ptc.h and ptc-verify(1)). The command and an embedder get the same bytes.
 * Its text and emit helpers (ptc__json_text, ptc__json_emit) serve the SARIF writer too
 * (report_sarif.c), so both documents escape file bytes alike.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

/* A str for the document: library strings are escaped already (printable, valid UTF-8); file
 * names may be anything and are escaped as ptc_escape does when they are not valid UTF-8. */
json_t *ptc__json_text(const char *s)
{
    size_t n = strlen(s);
    if (ptc_utf8_valid(s, n))
        return json_string(s);
    size_t len = ptc_escape(NULL, 0, s, n, 0);
    char *t = ptc__malloc(len + 1);
    if (!t)
        return NULL;
    ptc_escape(t, len + 1, s, n, 0);
    json_t *j = json_string(t);
    ptc__free(t);
    return j;
}

/* ---- the report, written straight into one buffer ------------------------------------------
 * A report can list 4096 findings and 4096 globals: building them as jansson objects and dumping
 * those cost more than the verification of such a file. The writer below produces the very bytes
 * json_dump_callback(JSON_INDENT(2) | JSON_PRESERVE_ORDER) wrote for those objects, followed by
 * ptc__json_emit's indentation and escape of hidden characters (tests/fixtures/check_report_json
 * and the verify CLI checks compare them), and hands them to the caller's write in one call, so
 * that out of memory still writes nothing. */

typedef struct jw {
    ptc__buf b;
    unsigned indent; /* spaces after every newline, as ptc__json_emit adds */
    int rc;          /* the first append's failure */
} jw;

static void jw_raw(jw *w, const char *s, size_t n)
{
    if (w->rc == 0)
        w->rc = ptc__buf_append(&w->b, s, n);
}

static void jw_lit(jw *w, const char *s)
{
    jw_raw(w, s, strlen(s));
}

/* A newline, then the caller's indent and two spaces per depth (JSON_INDENT(2)). */
static void jw_nl(jw *w, unsigned depth)
{
    static const char spaces[] = "                                ";
    jw_raw(w, "\n", 1);
    for (unsigned left = w->indent + 2 * depth; left > 0 && w->rc == 0;) {
        unsigned k = left < sizeof spaces - 1 ? left : (unsigned)sizeof spaces - 1;
        jw_raw(w, spaces, k);
        left -= k;
    }
}

/* s[0..n), valid UTF-8, as jansson's dump_string writes it (backslash, quote and controls below
 * 0x20 escaped, \u with upper-case hex where no short form exists), then with its hidden
 * characters escaped as ptc_json_escape_hidden does. */
static void jw_utf8(jw *w, const char *s, size_t n)
{
    size_t start = w->b.len;
    bool wide = false;
    jw_raw(w, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n && w->rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        wide |= c >= 0x80;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jw_raw(w, s + run, i - run);
        run = i + 1;
        char esc[8];
        const char *t = esc;
        switch (c) {
        case '"':
            t = "\\\"";
            break;
        case '\\':
            t = "\\\\";
            break;
        case '\b':
            t = "\\b";
            break;
        case '\f':
            t = "\\f";
            break;
        case '\n':
            t = "\\n";
            break;
        case '\r':
            t = "\\r";
            break;
        case '\t':
            t = "\\t";
            break;
        default:
            snprintf(esc, sizeof esc, "\\u%04X", (unsigned)c);
        }
        jw_lit(w, t);
    }
    jw_raw(w, s + run, n - run);
    jw_raw(w, "\"", 1);
    if (!wide || w->rc)
        return;
    const char *seg = (const char *)w->b.data + start;
    size_t segn = w->b.len - start, len = ptc_json_escape_hidden(NULL, 0, seg, segn);
    if (len == segn)
        return;
    char *t = ptc__malloc(len + 1);
    if (!t) {
        w->rc = PTC_ENOMEM;
        return;
    }
    ptc_json_escape_hidden(t, len + 1, seg, segn);
    w->b.len = start;
    jw_raw(w, t, len);
    ptc__free(t);
}

/* A string as ptc__json_text makes it: escaped as ptc_escape does when not valid UTF-8. */
static void jw_text(jw *w, const char *s)
{
    size_t n = strlen(s);
    if (ptc_utf8_valid(s, n)) {
        jw_utf8(w, s, n);
        return;
    }
    size_t len = ptc_escape(NULL, 0, s, n, 0);
    char *t = ptc__malloc(len + 1);
    if (!t) {
        w->rc = PTC_ENOMEM;
        return;
    }
    ptc_escape(t, len + 1, s, n, 0);
    jw_utf8(w, t, len);
    ptc__free(t);
}

/* "key": at depth, after a comma unless it is the first of its object: one append. The keys are
 * the schema's, plain ASCII that needs no escape. */
static void jw_key(jw *w, unsigned depth, bool first, const char *key)
{
    char t[128];
    size_t kl = strlen(key), sp = w->indent + 2 * depth, n = 0;
    if (sp + kl + 8 > sizeof t) { /* a deep indent: piece by piece */
        if (!first)
            jw_raw(w, ",", 1);
        jw_nl(w, depth);
        jw_utf8(w, key, kl);
        jw_raw(w, ": ", 2);
        return;
    }
    if (!first)
        t[n++] = ',';
    t[n++] = '\n';
    memset(t + n, ' ', sp);
    n += sp;
    t[n++] = '"';
    memcpy(t + n, key, kl);
    n += kl;
    memcpy(t + n, "\": ", 3);
    n += 3;
    jw_raw(w, t, n);
}

static void jw_int(jw *w, long long v)
{
    char t[32];
    int n = snprintf(t, sizeof t, "%lld", v);
    jw_raw(w, t, (size_t)n);
}

static void jw_bool(jw *w, bool v)
{
    jw_lit(w, v ? "true" : "false");
}

static void report_write(jw *w, const char *path, const ptc_report *r, const ptc_error *failure)
{
    jw_raw(w, "{", 1);
    jw_key(w, 1, true, "path");
    jw_text(w, path);
    if (!r) {
        jw_key(w, 1, false, "verdict");
        jw_lit(w, "\"error\"");
        jw_key(w, 1, false, "error");
        jw_text(w, ptc_err_name(failure->code));
        jw_key(w, 1, false, "message");
        jw_text(w, failure->message[0] ? failure->message : ptc_strerror(failure->code));
        jw_nl(w, 0);
        jw_raw(w, "}", 1);
        return;
    }
    jw_key(w, 1, false, "verdict");
    jw_text(w, ptc_verdict_name(ptc_report_verdict(r)));
    jw_key(w, 1, false, "format");
    jw_text(w, ptc_report_format(r));
    ptc_torch_answer t = ptc_report_torch(r);
    jw_key(w, 1, false, "torch_loads");
    if (t == PTC_TORCH_UNKNOWN)
        jw_lit(w, "null");
    else
        jw_bool(w, t == PTC_TORCH_LOADS);
    jw_key(w, 1, false, "findings");
    size_t nf = ptc_report_nfindings(r);
    jw_raw(w, "[", 1);
    for (size_t i = 0; i < nf && w->rc == 0; i++) {
        const ptc_finding *f = ptc_report_finding(r, i);
        if (i)
            jw_raw(w, ",", 1);
        jw_nl(w, 2);
        jw_raw(w, "{", 1);
        jw_key(w, 3, true, "verdict");
        jw_text(w, ptc_verdict_name(f->verdict));
        jw_key(w, 3, false, "code");
        jw_text(w, ptc_err_name(f->code));
        jw_key(w, 3, false, "kind");
        jw_text(w, f->kind);
        jw_key(w, 3, false, "member");
        jw_text(w, f->member);
        jw_key(w, 3, false, "offset");
        if (f->offset >= 0)
            jw_int(w, f->offset);
        else
            jw_lit(w, "null");
        jw_key(w, 3, false, "file_offset");
        if (f->file_offset >= 0)
            jw_int(w, f->file_offset);
        else
            jw_lit(w, "null");
        jw_key(w, 3, false, "detail");
        jw_text(w, f->detail);
        jw_key(w, 3, false, "torch_refuses");
        jw_bool(w, f->torch_refuses);
        jw_nl(w, 2);
        jw_raw(w, "}", 1);
    }
    if (nf)
        jw_nl(w, 1);
    jw_raw(w, "]", 1);
    jw_key(w, 1, false, "globals");
    size_t ng = ptc_report_nglobals(r);
    jw_raw(w, "[", 1);
    for (size_t i = 0; i < ng && w->rc == 0; i++) {
        const ptc_global_ref *g = ptc_report_global(r, i);
        if (i)
            jw_raw(w, ",", 1);
        jw_nl(w, 2);
        jw_raw(w, "{", 1);
        jw_key(w, 3, true, "member");
        jw_text(w, g->member);
        jw_key(w, 3, false, "offset");
        jw_int(w, g->offset);
        jw_key(w, 3, false, "opcode");
        jw_text(w, g->opcode);
        jw_key(w, 3, false, "global");
        if (g->global)
            jw_text(w, g->global);
        else
            jw_lit(w, "null");
        jw_key(w, 3, false, "allowed");
        jw_bool(w, g->allowed);
        jw_key(w, 3, false, "torch_allows");
        jw_bool(w, g->torch_allows);
        jw_nl(w, 2);
        jw_raw(w, "}", 1);
    }
    if (ng)
        jw_nl(w, 1);
    jw_raw(w, "]", 1);
    jw_key(w, 1, false, "dropped");
    jw_int(w, (long long)ptc_report_dropped(r));
    jw_nl(w, 0);
    jw_raw(w, "}", 1);
}

/* Writes s[0..n) with its hidden characters as \uXXXX. */
static int write_text(ptc_write_fn write, void *ctx, const char *s, size_t n)
{
    /* Hidden characters are all outside ASCII: a line of ASCII (most lines) is written as it
     * is, without the two passes of the escape. */
    size_t i = 0;
    while (i < n && (unsigned char)s[i] < 0x80)
        i++;
    if (i == n)
        return write(ctx, s, n);
    char small[512];
    size_t len = ptc_json_escape_hidden(NULL, 0, s, n);
    char *t = len < sizeof small ? small : ptc__malloc(len + 1);
    if (!t)
        return PTC_ENOMEM;
    ptc_json_escape_hidden(t, len + 1, s, n);
    int rc = write(ctx, t, len);
    if (t != small)
        ptc__free(t);
    return rc;
}

/* json_dump_callback's sink: the text gathered in a ptc__buf (the library's allocator). jansson
 * (2.14) ignores the sink's failure while it writes an object's key and goes on, so a failure is
 * kept here: every later piece is refused too, and the caller looks at failed, not only at what
 * json_dump_callback returns (test_alloc_fail's SARIF sweep found the text one key short). */
typedef struct gathered {
    ptc__buf text;
    int failed;
} gathered;

static int gather(const char *p, size_t n, void *ud)
{
    gathered *g = ud;
    if (!g->failed && ptc__buf_append(&g->text, p, n) < 0)
        g->failed = 1;
    return g->failed ? -1 : 0;
}

int ptc__json_emit(json_t *o, unsigned indent, ptc_write_fn write, void *ctx)
{
    static const char spaces[] = "                ";
    gathered g = {{0}, 0};
    if (!o || json_dump_callback(o, gather, &g, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
        g.failed) {
        ptc__buf_free(&g.text);
        return PTC_ENOMEM;
    }
    ptc__buf text = g.text;
    /* jansson writes newlines only between tokens (a newline inside a string is escaped), so
     * every line after the first can be indented as an element of an enclosing array. */
    const char *p = (const char *)text.data, *end = p + text.len;
    int rc = 0;
    while (rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        rc = write_text(write, ctx, p, nl ? (size_t)(nl - p) : (size_t)(end - p));
        if (!nl || rc < 0)
            break;
        rc = write(ctx, "\n", 1);
        for (unsigned left = indent; left > 0 && rc == 0;) {
            unsigned k = left < sizeof spaces - 1 ? left : (unsigned)sizeof spaces - 1;
            rc = write(ctx, spaces, k);
            left -= k;
        }
        p = nl + 1;
    }
    ptc__buf_free(&text);
    return rc;
}

int ptc_report_json(const char *path, const ptc_report *r, const ptc_error *failure,
                    unsigned indent, ptc_write_fn write, void *ctx, ptc_error *err)
{
    if (!write || (!r && !failure))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_report_json: missing argument");
    jw w = {.indent = indent};
    report_write(&w, path ? path : "", r, failure);
    int rc = w.rc ? w.rc : write(ctx, w.b.data, w.b.len);
    ptc__buf_free(&w.b);
    if (rc == PTC_ENOMEM || rc == PTC_ELIMIT)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory writing a report as JSON");
    if (rc < 0)
        return ptc__err(err, rc, "", -1, "ptc_report_json: writing the JSON failed: %s",
                        ptc_strerror(rc));
    return 0;
}
