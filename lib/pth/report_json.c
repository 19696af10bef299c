/*
 * report_json.c - ptc_report_json: one verified file as the JSON object `ptc verify --json` lists
 * (the schema is in ptc.h and ptc-verify(1)). The command and an embedder get the same bytes.
 * Its text and emit helpers (ptc__json_text, ptc__json_emit) serve the SARIF writer too
 * (report_sarif.c), so both documents escape file bytes alike.
 */
#include "pth/pth.h"

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

static json_t *report_object(const char *path, const ptc_report *r, const ptc_error *failure)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "path", ptc__json_text(path));
    if (!r) {
        json_object_set_new(o, "verdict", json_string("error"));
        json_object_set_new(o, "error", json_string(ptc_err_name(failure->code)));
        json_object_set_new(
            o, "message",
            ptc__json_text(failure->message[0] ? failure->message : ptc_strerror(failure->code)));
        return o;
    }
    json_object_set_new(o, "verdict", json_string(ptc_verdict_name(ptc_report_verdict(r))));
    json_object_set_new(o, "format", json_string(ptc_report_format(r)));
    ptc_torch_answer t = ptc_report_torch(r);
    json_object_set_new(o, "torch_loads",
                        t == PTC_TORCH_UNKNOWN ? json_null() : json_boolean(t == PTC_TORCH_LOADS));
    json_t *fs = json_array();
    for (size_t i = 0; i < ptc_report_nfindings(r); i++) {
        const ptc_finding *f = ptc_report_finding(r, i);
        json_t *jf = json_object();
        json_object_set_new(jf, "verdict", json_string(ptc_verdict_name(f->verdict)));
        json_object_set_new(jf, "code", json_string(ptc_err_name(f->code)));
        json_object_set_new(jf, "kind", json_string(f->kind));
        json_object_set_new(jf, "member", ptc__json_text(f->member));
        json_object_set_new(jf, "offset", f->offset >= 0 ? json_integer(f->offset) : json_null());
        json_object_set_new(jf, "file_offset",
                            f->file_offset >= 0 ? json_integer(f->file_offset) : json_null());
        json_object_set_new(jf, "detail", ptc__json_text(f->detail));
        json_object_set_new(jf, "torch_refuses", json_boolean(f->torch_refuses));
        json_array_append_new(fs, jf);
    }
    json_object_set_new(o, "findings", fs);
    json_t *gs = json_array();
    for (size_t i = 0; i < ptc_report_nglobals(r); i++) {
        const ptc_global_ref *g = ptc_report_global(r, i);
        json_t *jg = json_object();
        json_object_set_new(jg, "member", ptc__json_text(g->member));
        json_object_set_new(jg, "offset", json_integer(g->offset));
        json_object_set_new(jg, "opcode", json_string(g->opcode));
        json_object_set_new(jg, "global", g->global ? ptc__json_text(g->global) : json_null());
        json_object_set_new(jg, "allowed", json_boolean(g->allowed));
        json_object_set_new(jg, "torch_allows", json_boolean(g->torch_allows));
        json_array_append_new(gs, jg);
    }
    json_object_set_new(o, "globals", gs);
    json_object_set_new(o, "dropped", json_integer((json_int_t)ptc_report_dropped(r)));
    return o;
}

/* Writes s[0..n) with its hidden characters as \uXXXX. */
static int write_text(ptc_write_fn write, void *ctx, const char *s, size_t n)
{
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
    json_t *o = report_object(path ? path : "", r, failure);
    int rc = ptc__json_emit(o, indent, write, ctx);
    json_decref(o);
    if (rc == PTC_ENOMEM)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory writing a report as JSON");
    if (rc < 0)
        return ptc__err(err, rc, "", -1, "ptc_report_json: writing the JSON failed: %s",
                        ptc_strerror(rc));
    return 0;
}
