/*
 * cmd_salvage.c - `ptc inspect --salvage [--json] FILE`: what ptc can take out of a pickle that
 * names classes outside the policy (torch.save(model), YOLO's {"model": Model, ...}) without
 * running it, and what the file would run if torch.load(weights_only=False) were given it.
 *
 * The report has three parts:
 *   1. the state dict salvaged: FILE opened with PTC_OPEN_SALVAGE, the module chosen by
 *      ptc_salvage_state_dict's defaults (its path and class), with its keys, tensors, distinct
 *      storages and their bytes (what `ptc convert --salvage` would write); or why nothing could
 *      be taken;
 *   2. every symbolic global the reader met (ptc_ckpt_symbol): its name, the member and offset of
 *      its first GLOBAL, how often the pickle named and called it;
 *   3. every finding of ptc_verify on the same file that makes it unsafe, as `ptc verify` gives
 *      them: a global outside the policy with its opcode, member and offset (and how often the
 *      salvage read called it), an opcode that imports or calls, a hidden pickle ...
 * So a file whose __reduce__ calls os.system gives up its weights in part 1 and names
 * posix.system with its offset in part 3.
 *
 * Every byte that came from the file is escaped before it is printed (libptc escapes symbol and
 * report strings; the chosen path and the module's class name are raw and are escaped here). --json prints one object
 * (schema in ptc-inspect(1)) through jansson.
 *
 * When the salvage read itself refuses the file (a string that is not valid UTF-8, a limit), the
 * report is printed all the same: part 1 says why, part 2 is empty, part 3 is ptc_verify's, which
 * scans without building values and so still names the payload.
 *
 * Exit status: 0 when a state dict was salvaged; otherwise the status of the reason (1 for a file
 * refused or nothing to salvage, 4 out of memory), after the report is printed; 3 for a file that
 * cannot be read (no report).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct salvage {
    const char *path;
    ptc_ckpt *c;
    ptc_doc *d;
    ptc_report *r; /* ptc_verify's report; NULL when it could not be made */
    ptc_error verr;
    int open_failed;     /* the salvage read itself refused the file: rc and err say why */
    int rc;              /* ptc_salvage_state_dict's (or the failed open's) result */
    ptc_error err;       /* and why it failed */
    const ptc_value *sd; /* the state dict salvaged */
    const char *chosen;  /* its path (raw key text, chosen_len bytes: a key may hold NUL) */
    size_t chosen_len;
    const char *cls; /* the chosen module's class, NULL for a state dict already */
    uint64_t keys, tensors, storages, bytes;
} salvage;

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

/* Keys, tensors, distinct storages and their bytes (what the pth output holds). */
static int count(salvage *s)
{
    size_t n = ptc_value_len(s->sd);
    const void **st = malloc((n ? n : 1) * sizeof *st);
    if (!st)
        return PTC_ENOMEM;
    size_t m = 0;
    s->keys = n;
    for (size_t i = 0; i < n; i++) {
        const ptc_tensor *t = ptc_value_tensor(ptc_dict_value(s->sd, i));
        if (t) {
            s->tensors++;
            st[m++] = ptc_tensor_storage(t);
        }
    }
    qsort(st, m, sizeof *st, cmp_ptr);
    for (size_t i = 0; i < m; i++) {
        if (i && st[i] == st[i - 1])
            continue;
        s->storages++;
        s->bytes = cli_add_sat(s->bytes, (uint64_t)ptc_storage_nbytes(st[i]));
    }
    free(st);
    return 0;
}

/* The chosen path with its length, and the chosen module's class (NULL for a state dict
 * already): ptc_salvage_pick, which keeps the length of a key holding NUL bytes. */
static int chosen_of(salvage *s)
{
    const ptc_value *pick, *name;
    int rc = ptc_salvage_pick(s->d, ptc_ckpt_root(s->c), NULL, NULL, &pick, &name, NULL);
    if (rc < 0)
        return rc;
    ptc_value_str(name, &s->chosen, &s->chosen_len);
    s->cls = ptc_salvage_is_module(pick) ? ptc_value_global_name(pick) : NULL;
    return 0;
}

/* Calls the salvage read made of global name (ptc_ckpt_symbol), 0 when it is no symbol. */
static uint64_t calls_of(const salvage *s, const char *name)
{
    for (size_t i = 0, n = ptc_ckpt_nsymbols(s->c); name && i < n; i++) {
        const ptc_symbol *y = ptc_ckpt_symbol(s->c, i);
        if (y && strcmp(y->global, name) == 0)
            return y->calls;
    }
    return 0;
}

/* The global reference at a finding's member and offset, if the report lists one. */
static const ptc_global_ref *ref_of(const salvage *s, const ptc_finding *f)
{
    for (size_t i = 0, n = ptc_report_nglobals(s->r); i < n; i++) {
        const ptc_global_ref *g = ptc_report_global(s->r, i);
        if (g->offset == f->offset && strcmp(g->member, f->member) == 0)
            return g;
    }
    return NULL;
}

/* The member a symbol is placed in. A legacy file's symbols carry no member (their offsets are
 * file offsets); ptc verify names the legacy part ("legacy object"), and so does this report. */
static const char *symbol_member(const salvage *s, const ptc_symbol *y)
{
    if (y->member[0] || y->offset < 0)
        return y->member;
    for (size_t i = 0, n = ptc_report_nglobals(s->r); i < n; i++) {
        const ptc_global_ref *g = ptc_report_global(s->r, i);
        if (g->offset == y->offset && g->member[0])
            return g->member;
    }
    return y->member;
}

static int is_code(const ptc_finding *f)
{
    return f->verdict == PTC_VERDICT_UNSAFE;
}

/* ---- text ------------------------------------------------------------------------------------ */

static void put_location(const char *member, int64_t offset)
{
    printf("%s%s", member[0] ? member : "the file", offset >= 0 ? " offset " : "");
    if (offset >= 0)
        printf("%" PRId64 " (0x%" PRIx64 ")", offset, (uint64_t)offset);
}

static void print_text(const salvage *s)
{
    cli_escape_put(stdout, s->path, strlen(s->path), 0);
    if (s->rc == 0) {
        char h[32];
        cli_format_bytes(h, sizeof h, s->bytes);
        printf(": salvaged ");
        if (s->cls) {
            printf("the module at '");
            cli_escape_put(stdout, s->chosen, s->chosen_len, 0);
            printf("' (a ");
            cli_escape_put(stdout, s->cls, strlen(s->cls), 0);
            printf(")");
        } else {
            printf("the state dict at '");
            cli_escape_put(stdout, s->chosen, s->chosen_len, 0);
            printf("'");
        }
        printf(": %" PRIu64 " key%s, %" PRIu64 " tensor%s, %" PRIu64 " storage%s, %s (%" PRIu64
               " bytes)\n",
               s->keys, s->keys == 1 ? "" : "s", s->tensors, s->tensors == 1 ? "" : "s",
               s->storages, s->storages == 1 ? "" : "s", h, s->bytes);
    } else {
        printf(": nothing salvaged: %s",
               s->open_failed ? "the salvage read refused the file: " : "");
        const char *m = s->err.message[0] ? s->err.message : ptc_strerror(s->rc);
        cli_escape_put(stdout, m, strlen(m), CLI_ESC_RAW_BACKSLASH);
        putchar('\n');
    }

    size_t ns = ptc_ckpt_nsymbols(s->c);
    printf("symbolic globals: %zu%s\n", ns,
           ns ? " (read by name only; never imported or called)" : "");
    for (size_t i = 0; i < ns; i++) {
        const ptc_symbol *y = ptc_ckpt_symbol(s->c, i);
        printf("  %-40s ", y->global);
        put_location(symbol_member(s, y), y->offset);
        printf("  named %" PRIu64 ", called %" PRIu64 "\n", y->refs, y->calls);
    }

    if (!s->r) {
        printf("code the file would run: unknown: ptc verify failed: ");
        const char *m = s->verr.message[0] ? s->verr.message : ptc_strerror(s->verr.code);
        cli_escape_put(stdout, m, strlen(m), CLI_ESC_RAW_BACKSLASH);
        putchar('\n');
        return;
    }
    size_t nf = ptc_report_nfindings(s->r), ncode = 0;
    for (size_t i = 0; i < nf; i++)
        ncode += is_code(ptc_report_finding(s->r, i));
    printf("code the file would run (ptc verify: %s; torch 2.6 %s it): %zu\n",
           ptc_verdict_name(ptc_report_verdict(s->r)),
           ptc_torch_answer_name(ptc_report_torch(s->r)), ncode);
    for (size_t i = 0; i < nf; i++) {
        const ptc_finding *f = ptc_report_finding(s->r, i);
        if (!is_code(f))
            continue;
        const ptc_global_ref *g = ref_of(s, f);
        if (g && g->global) {
            /* The first global a strict load refuses is verify's "load" finding: a global too. */
            printf("  global: %s at ", g->global);
            put_location(f->member, f->offset);
            uint64_t calls = calls_of(s, g->global);
            printf(" (%s)", g->opcode);
            if (calls)
                printf(", called %" PRIu64 " time%s", calls, calls == 1 ? "" : "s");
            putchar('\n');
        } else {
            printf("  %s: ", f->kind);
            cli_escape_put(stdout, f->detail, strlen(f->detail), CLI_ESC_RAW_BACKSLASH);
            printf(" at ");
            put_location(f->member, f->offset);
            putchar('\n');
        }
    }
    if (ptc_report_dropped(s->r))
        printf("  ... and %" PRIu64 " more findings and references not listed\n",
               ptc_report_dropped(s->r));
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static json_t *jstr_escaped_n(const char *raw, size_t len)
{
    size_t n = ptc_escape(NULL, 0, raw, len, 0);
    char *e = malloc(n + 1);
    if (!e)
        return NULL;
    ptc_escape(e, n + 1, raw, len, 0);
    json_t *j = json_string(e);
    free(e);
    return j;
}

static json_t *jstr_escaped(const char *raw)
{
    return jstr_escaped_n(raw, strlen(raw));
}

static json_t *joffset(int64_t off)
{
    return off >= 0 ? json_integer(off) : json_null();
}

/* The document; NULL when out of memory. */
static json_t *build_json(const salvage *s)
{
    json_t *o = json_object(), *syms = json_array(), *code = json_array();
    if (!o || !syms || !code)
        goto oom;
    json_object_set_new(o, "path", jstr_escaped(s->path));
    if (s->rc == 0) {
        json_object_set_new(
            o, "salvaged",
            json_pack("{s:o,s:o,s:I,s:I,s:I,s:I}", "path", jstr_escaped_n(s->chosen, s->chosen_len),
                      "class", s->cls ? jstr_escaped(s->cls) : json_null(), "keys",
                      (json_int_t)s->keys, "tensors", (json_int_t)s->tensors, "storages",
                      (json_int_t)s->storages, "bytes", (json_int_t)s->bytes));
        json_object_set_new(o, "error", json_null());
    } else {
        json_object_set_new(o, "salvaged", json_null());
        json_object_set_new(o, "error",
                            json_pack("{s:s,s:s,s:b}", "code", ptc_err_name(s->rc), "message",
                                      s->err.message[0] ? s->err.message : ptc_strerror(s->rc),
                                      "open", s->open_failed));
    }
    for (size_t i = 0, n = ptc_ckpt_nsymbols(s->c); i < n; i++) {
        const ptc_symbol *y = ptc_ckpt_symbol(s->c, i);
        json_array_append_new(syms,
                              json_pack("{s:s,s:s,s:o,s:I,s:I}", "global", y->global, "member",
                                        symbol_member(s, y), "offset", joffset(y->offset), "refs",
                                        (json_int_t)y->refs, "calls", (json_int_t)y->calls));
    }
    json_object_set_new(o, "symbols", syms);
    syms = NULL;
    if (s->r) {
        json_object_set_new(o, "verdict", json_string(ptc_verdict_name(ptc_report_verdict(s->r))));
        for (size_t i = 0, n = ptc_report_nfindings(s->r); i < n; i++) {
            const ptc_finding *f = ptc_report_finding(s->r, i);
            if (!is_code(f))
                continue;
            const ptc_global_ref *g = ref_of(s, f);
            json_array_append_new(
                code, json_pack("{s:s,s:o,s:o,s:s,s:o,s:s,s:I}", "kind", f->kind, "global",
                                g && g->global ? json_string(g->global) : json_null(), "opcode",
                                g ? json_string(g->opcode) : json_null(), "member", f->member,
                                "offset", joffset(f->offset), "detail", f->detail, "calls",
                                (json_int_t)(g ? calls_of(s, g->global) : 0)));
        }
    } else {
        json_object_set_new(o, "verdict", json_string("error"));
    }
    json_object_set_new(o, "code", code);
    return o;
oom:
    json_decref(o);
    json_decref(syms);
    json_decref(code);
    return NULL;
}

/* ---- the report ------------------------------------------------------------------------------ */

int cli_salvage_report(const char *path, int json, uint64_t budget_bytes)
{
    salvage s = {.path = path};
    ptc_open_params params;
    ptc_error err;
    int status;

    memset(&err, 0, sizeof err);
    ptc_open_params_default(&params);
    params.flags |= PTC_OPEN_SALVAGE;
    int rc = ptc_ckpt_open(&s.c, path, &params, &err);
    if (rc == PTC_EIO || rc == PTC_ENOMEM || rc == PTC_EINVAL)
        return cli_report(rc, &err); /* no file to report on, or no memory to report with */
    if (rc < 0) {
        /* The salvage read refused the file (a malformed string, a limit): the report is
         * printed all the same, and ptc_verify's part of it still names what would run. */
        s.c = NULL;
        s.open_failed = 1;
        s.rc = rc;
        s.err = err;
    } else if ((rc = ptc_doc_new(&s.d, &err)) < 0) {
        status = cli_report(rc, &err);
        goto done;
    }
    ptc_budget budget;
    if (!s.open_failed) {
        ptc_budget_init(&budget, s.c, budget_bytes);
        s.rc = ptc_salvage_state_dict(s.d, ptc_ckpt_root(s.c), NULL, &budget, &s.sd, &s.chosen,
                                      &s.err);
    }
    if (s.rc == 0) {
        if ((rc = chosen_of(&s)) < 0 || count(&s) < 0) {
            cli_error("out of memory");
            status = CLI_EXIT_NOMEM;
            goto done;
        }
    }
    memset(&s.verr, 0, sizeof s.verr);
    if (ptc_verify(&s.r, path, NULL, &s.verr) < 0)
        s.r = NULL;

    if (json) {
        json_t *o = build_json(&s);
        char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (!text) {
            cli_error("out of memory");
            status = CLI_EXIT_NOMEM;
            goto done;
        }
        cli_put_json_text(stdout, text, strlen(text));
        putchar('\n');
        free(text);
    } else {
        print_text(&s);
    }
    status = s.rc < 0 ? cli_exit_code(s.rc) : CLI_EXIT_OK;

done:
    ptc_report_free(s.r);
    ptc_doc_free(s.d);
    ptc_ckpt_close(s.c);
    return status;
}
