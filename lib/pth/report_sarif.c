/*
 * report_sarif.c - ptc_sarif_begin/_file/_end: verify reports as one SARIF 2.1.0 log (OASIS
 * "Static Analysis Results Interchange Format"), what code-scanning services and CI systems read.
 * `ptc verify --sarif` and an embedder get the same bytes; the mapping is in ptc.h and
 * ptc-verify(1).
 *
 * The log is written as the files are verified: one run, its results streamed file by file (a
 * report holds at most 4096 findings, each written and freed at once), so memory does not grow
 * with the findings. What SARIF puts after the results, the run's artifacts and the invocation's
 * notifications, is kept as JSON text until ptc_sarif_end: a few hundred bytes per file.
 * Every string is built by jansson from the report's escaped text and written through
 * ptc__json_emit, as ptc_report_json writes, so file bytes reach the log escaped the same way.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#define SARIF_SCHEMA                                                                               \
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
/* The first artifact-table size; it doubles when half full. */
#define SARIF_HASH_MIN 64

/* One rule per finding kind (ptc_finding.kind, set in lib/pth/verify.c). The level is the
 * rule's default; each result states its own: "error" for an unsafe finding, "warning" for a
 * malformed one (see ptc-verify(1) for why). */
static const struct rule {
    const char *kind, *id, *name, *level, *brief, *full;
} rules[] = {
    {"global", "PTC-GLOBAL", "DisallowedGlobal", "error",
     "A pickle references a global outside the policy",
     "A pickle imports a callable or class the policy does not allow (GLOBAL, STACK_GLOBAL, INST), "
     "or one whose name is computed at run time: unpickling it would call what the file names."},
    {"opcode", "PTC-OPCODE", "OpcodeOutsideSubset", "error",
     "A pickle opcode outside the weights-only subset",
     "OBJ and NEWOBJ_EX call a class (unsafe); any other opcode outside the subset torch's "
     "weights-only unpickler accepts makes the file malformed."},
    {"torchscript", "PTC-TORCHSCRIPT", "TorchScript", "error",
     "A TorchScript archive, which carries code",
     "The file holds TorchScript members (code/, constants.pkl): a TorchScript archive carries "
     "code and is never loaded as weights."},
    {"hidden-pickle", "PTC-HIDDEN-PICKLE", "HiddenPickle", "error",
     "A pickle where a checkpoint loader does not look",
     "A pickle in a member other than data.pkl, after STOP, in a zip extra field or comment, in "
     "tensor bytes or found by decoding from a PROTO opcode: unsafe when it references globals "
     "outside the policy (some reader may run it), else malformed."},
    {"load", "PTC-LOAD", "LoadRefused", "warning", "The strict load of the file failed",
     "ptc's load under the policy and limits refused the file: its structure, an ambiguity "
     "readers could resolve differently, a limit, or (unsafe) a reference the load met first. "
     "The message says which."},
    {"crc", "PTC-CRC", "CrcMismatch", "warning", "A zip record's CRC-32 does not match",
     "A record's bytes do not match the CRC-32 its zip directory gives: the file was altered or "
     "damaged after it was written."},
    {NULL, "PTC-OTHER", "OtherFinding", "warning", "A finding of another kind",
     "A finding of a kind this version's SARIF writer does not name; its kind is in the result's "
     "properties."},
};
#define NRULES (sizeof rules / sizeof *rules)

struct ptc_sarif {
    ptc_write_fn write;
    void *ctx;
    int rc;             /* the first failure (sticky): nothing more is written after it */
    uint64_t nresults;  /* results written */
    ptc__buf artifacts; /* the "artifacts" elements as JSON text, each after ",\n" and indent */
    ptc__buf notes;     /* the "toolExecutionNotifications" elements, likewise */
    size_t nartifacts, nnotes;
    bool failed; /* a file could not be verified: executionSuccessful false */
    uint64_t files, ok, unsafe, malformed, errors;
    char policy[32];
    /* uri -> artifact index, open addressing over hashes; the uris are in the arena */
    struct slot {
        uint64_t hash;
        const char *uri;
        size_t index;
    } * table;
    size_t cap;
    ptc__budget budget;
    ptc__arena *arena;
};

/* ---- URIs -------------------------------------------------------------------------------------- */

/* path as a URI reference (RFC 3986): every byte but the unreserved ones and '/' percent-encoded,
 * so that spaces, '%', ':', '#', '?' and bytes that are not UTF-8 give a valid URI; an absolute
 * path becomes a file URI ("file:///abs/path"), a relative one a relative reference (no ':' can
 * remain to be taken for a scheme). 0 or PTC_ENOMEM. */
static int path_uri(ptc__buf *b, const char *path)
{
    static const char hex[] = "0123456789ABCDEF";
    if (path[0] == '/' && ptc__buf_append(b, "file://", 7) < 0)
        return PTC_ENOMEM;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        unsigned char ch = *p;
        bool keep = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' || ch == '~' ||
                    ch == '/';
        char esc[3] = {'%', hex[ch >> 4], hex[ch & 15]};
        if (ptc__buf_append(b, keep ? (const char *)p : esc, keep ? 1 : 3) < 0)
            return PTC_ENOMEM;
    }
    return ptc__buf_append(b, "", 1) < 0 ? PTC_ENOMEM : 0; /* the NUL */
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

/* The artifact index of uri: an existing one (a path given twice, or a folder and a file in it,
 * is one artifact: run.artifacts must hold no duplicates), or the next, *added set. */
static int artifact_index(ptc_sarif *s, const char *uri, size_t *index, bool *added)
{
    if ((s->nartifacts + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : SARIF_HASH_MIN;
        struct slot *t = ptc__calloc(cap, sizeof *t);
        if (!t)
            return PTC_ENOMEM;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->table[i].uri)
                continue;
            size_t j = (size_t)(s->table[i].hash & (cap - 1));
            while (t[j].uri)
                j = (j + 1) & (cap - 1);
            t[j] = s->table[i];
        }
        ptc__free(s->table);
        s->table = t;
        s->cap = cap;
    }
    uint64_t h = fnv1a(uri);
    size_t j = (size_t)(h & (s->cap - 1));
    for (; s->table[j].uri; j = (j + 1) & (s->cap - 1)) {
        if (s->table[j].hash == h && strcmp(s->table[j].uri, uri) == 0) {
            *index = s->table[j].index;
            *added = false;
            return 0;
        }
    }
    const char *copy = ptc__arena_strndup(s->arena, uri, strlen(uri));
    if (!copy)
        return PTC_ENOMEM;
    s->table[j] = (struct slot){h, copy, s->nartifacts};
    *index = s->nartifacts++;
    *added = true;
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------------ */

static int put(ptc_sarif *s, const char *text)
{
    if (s->rc == 0)
        s->rc = s->write(s->ctx, text, strlen(text));
    return s->rc;
}

static int emit(ptc_sarif *s, json_t *o, unsigned indent)
{
    if (s->rc == 0)
        s->rc = ptc__json_emit(o, indent, s->write, s->ctx);
    json_decref(o);
    return s->rc;
}

static int to_buf(void *ctx, const void *p, size_t n)
{
    return ptc__buf_append(ctx, p, n) < 0 ? PTC_ENOMEM : 0;
}

/* o appended to b as the next element of an array whose elements are indented by indent. */
static int emit_buf(ptc__buf *b, json_t *o, unsigned indent)
{
    char head[48];
    snprintf(head, sizeof head, ",\n%*s", (int)indent, "");
    int rc = ptc__buf_append(b, head, strlen(head)) < 0 ? PTC_ENOMEM : 0;
    if (rc == 0)
        rc = ptc__json_emit(o, indent, to_buf, b);
    json_decref(o);
    return rc;
}

/* The text a buffer of elements adds to its array: without the first element's comma. */
static int put_elements(ptc_sarif *s, const ptc__buf *b, const char *close)
{
    if (b->len) {
        if (s->rc == 0)
            s->rc = s->write(s->ctx, b->data + 1, b->len - 1);
        return put(s, close);
    }
    return s->rc;
}

static const struct rule *rule_of(const char *kind, size_t *index)
{
    for (size_t i = 0; i < NRULES - 1; i++) {
        if (strcmp(rules[i].kind, kind) == 0) {
            *index = i;
            return &rules[i];
        }
    }
    *index = NRULES - 1;
    return &rules[NRULES - 1];
}

static json_t *text_message(const char *text)
{
    json_t *m = json_object();
    if (m && json_object_set_new(m, "text", ptc__json_text(text)) < 0) {
        json_decref(m);
        return NULL;
    }
    return m;
}

static json_t *driver_object(void)
{
    json_t *d = json_object(), *rs = json_array();
    int bad = !d || !rs;
    for (size_t i = 0; i < NRULES && !bad; i++) {
        json_t *r = json_object(), *cfg = json_object(), *props = json_object();
        bad |= !r || !cfg || !props;
        bad |= json_object_set_new(r, "id", json_string(rules[i].id));
        bad |= json_object_set_new(r, "name", json_string(rules[i].name));
        bad |= json_object_set_new(r, "shortDescription", text_message(rules[i].brief));
        bad |= json_object_set_new(r, "fullDescription", text_message(rules[i].full));
        bad |= json_object_set_new(r, "help", text_message(rules[i].full));
        bad |= json_object_set_new(cfg, "level", json_string(rules[i].level));
        bad |= json_object_set_new(r, "defaultConfiguration", cfg);
        bad |= json_object_set_new(props, "kind",
                                   rules[i].kind ? json_string(rules[i].kind) : json_null());
        bad |= json_object_set_new(r, "properties", props);
        bad |= json_array_append_new(rs, r);
    }
    if (!bad) {
        bad |= json_object_set_new(d, "name", json_string("ptc"));
        bad |= json_object_set_new(d, "version", json_string(ptc_version()));
        bad |= json_object_set_new(d, "semanticVersion", json_string(ptc_version()));
        bad |= json_object_set_new(d, "rules", rs);
        rs = NULL;
    }
    if (bad) {
        json_decref(rs);
        json_decref(d);
        return NULL;
    }
    return d;
}

/* {"physicalLocation": {"artifactLocation": {"uri", "index"}, "region"?}} */
static json_t *location(const char *uri, size_t index, int64_t file_offset, uint64_t size)
{
    json_t *loc = json_object(), *phys = json_object(), *art = json_object();
    int bad = !loc || !phys || !art;
    bad |= json_object_set_new(art, "uri", json_string(uri));
    bad |= json_object_set_new(art, "index", json_integer((json_int_t)index));
    bad |= json_object_set_new(phys, "artifactLocation", art);
    if (file_offset >= 0) {
        json_t *reg = json_object();
        bad |= !reg;
        bad |= json_object_set_new(reg, "byteOffset", json_integer(file_offset));
        /* the byte the finding is at; none (an insertion point) where the file ended early */
        bad |= json_object_set_new(reg, "byteLength",
                                   json_integer((uint64_t)file_offset < size ? 1 : 0));
        bad |= json_object_set_new(phys, "region", reg);
    }
    bad |= json_object_set_new(loc, "physicalLocation", phys);
    if (bad) {
        json_decref(loc);
        return NULL;
    }
    return loc;
}

/* The globals the report lists at the finding's member and offset (a "global" finding's own
 * reference), as [{"global", "opcode", "allowed", "torch_allows"}]. */
static json_t *finding_globals(const ptc_report *r, const ptc_finding *f)
{
    json_t *gs = json_array();
    int bad = !gs;
    for (size_t i = 0; i < ptc_report_nglobals(r) && !bad && f->offset >= 0; i++) {
        const ptc_global_ref *g = ptc_report_global(r, i);
        if (g->offset != f->offset || strcmp(g->member, f->member) != 0)
            continue;
        json_t *o = json_object();
        bad |= !o;
        bad |=
            json_object_set_new(o, "global", g->global ? ptc__json_text(g->global) : json_null());
        bad |= json_object_set_new(o, "opcode", json_string(g->opcode));
        bad |= json_object_set_new(o, "allowed", json_boolean(g->allowed));
        bad |= json_object_set_new(o, "torch_allows", json_boolean(g->torch_allows));
        bad |= json_array_append_new(gs, o);
    }
    if (bad) {
        json_decref(gs);
        return NULL;
    }
    return gs;
}

static json_t *result_object(const ptc_report *r, const ptc_finding *f, const char *uri,
                             size_t index)
{
    size_t ri;
    const struct rule *rule = rule_of(f->kind, &ri);
    json_t *o = json_object(), *props = json_object(), *locs = json_array();
    int bad = !o || !props || !locs;
    /* The member and its offset lead the text, as `ptc verify` prints them: the region holds
     * the file offset only where the member's bytes are the file's. */
    ptc__buf text = {0};
    if (f->member[0] && f->offset >= 0)
        bad |= ptc__buf_printf(&text, "%s+0x%llx: ", f->member, (unsigned long long)f->offset) < 0;
    else if (f->member[0])
        bad |= ptc__buf_printf(&text, "%s: ", f->member) < 0;
    bad |= ptc__buf_append(&text, f->detail, strlen(f->detail) + 1) < 0;
    bad |= json_object_set_new(o, "ruleId", json_string(rule->id));
    bad |= json_object_set_new(o, "ruleIndex", json_integer((json_int_t)ri));
    bad |= json_object_set_new(o, "level",
                               json_string(f->verdict == PTC_VERDICT_UNSAFE ? "error" : "warning"));
    bad |= json_object_set_new(o, "message", bad ? NULL : text_message((const char *)text.data));
    ptc__buf_free(&text);
    json_t *loc = location(uri, index, f->file_offset, ptc__report_size(r));
    if (loc && f->member[0]) {
        json_t *logs = json_array(), *lg = json_object();
        bad |= !logs || !lg;
        bad |= json_object_set_new(lg, "name", ptc__json_text(f->member));
        bad |= json_array_append_new(logs, lg);
        bad |= json_object_set_new(loc, "logicalLocations", logs);
    }
    bad |= json_array_append_new(locs, loc);
    bad |= json_object_set_new(o, "locations", locs);
    bad |= json_object_set_new(props, "verdict", json_string(ptc_verdict_name(f->verdict)));
    bad |= json_object_set_new(props, "code", json_string(ptc_err_name(f->code)));
    bad |= json_object_set_new(props, "kind", json_string(f->kind));
    bad |= json_object_set_new(props, "member", ptc__json_text(f->member));
    bad |= json_object_set_new(props, "offset",
                               f->offset >= 0 ? json_integer(f->offset) : json_null());
    bad |= json_object_set_new(props, "file_offset",
                               f->file_offset >= 0 ? json_integer(f->file_offset) : json_null());
    bad |= json_object_set_new(props, "torch_refuses", json_boolean(f->torch_refuses));
    json_t *gs = finding_globals(r, f);
    if (gs && json_array_size(gs) == 0)
        json_decref(gs);
    else
        bad |= json_object_set_new(props, "globals", gs);
    bad |= json_object_set_new(o, "properties", props);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *notification(const char *level, const char *text, const char *uri, size_t index,
                            const char *code)
{
    json_t *n = json_object(), *locs = json_array(), *props = json_object();
    int bad = !n || !locs || !props;
    bad |= json_object_set_new(n, "level", json_string(level));
    bad |= json_object_set_new(n, "message", text_message(text));
    bad |= json_array_append_new(locs, location(uri, index, -1, 0));
    bad |= json_object_set_new(n, "locations", locs);
    bad |= json_object_set_new(props, "code", json_string(code));
    bad |= json_object_set_new(n, "properties", props);
    if (bad) {
        json_decref(n);
        return NULL;
    }
    return n;
}

static json_t *artifact(const char *uri, const ptc_report *r, const ptc_error *failure)
{
    json_t *a = json_object(), *loc = json_object(), *roles = json_array(), *props = json_object();
    int bad = !a || !loc || !roles || !props;
    bad |= json_object_set_new(loc, "uri", json_string(uri));
    bad |= json_object_set_new(a, "location", loc);
    bad |= json_array_append_new(roles, json_string("analysisTarget"));
    bad |= json_object_set_new(a, "roles", roles);
    if (r) {
        ptc_torch_answer t = ptc_report_torch(r);
        bad |= json_object_set_new(props, "verdict",
                                   json_string(ptc_verdict_name(ptc_report_verdict(r))));
        bad |= json_object_set_new(props, "format", json_string(ptc_report_format(r)));
        bad |= json_object_set_new(props, "torch_loads",
                                   t == PTC_TORCH_UNKNOWN ? json_null()
                                                          : json_boolean(t == PTC_TORCH_LOADS));
        bad |=
            json_object_set_new(props, "dropped", json_integer((json_int_t)ptc_report_dropped(r)));
    } else {
        bad |= json_object_set_new(props, "verdict", json_string("error"));
        bad |= json_object_set_new(props, "error", json_string(ptc_err_name(failure->code)));
    }
    bad |= json_object_set_new(a, "properties", props);
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* ---- the public calls ---------------------------------------------------------------------------- */

void ptc_sarif_params_default(ptc_sarif_params *p)
{
    *p = (ptc_sarif_params){.size = sizeof *p, .policy = NULL};
}

void ptc_sarif_free(ptc_sarif *s)
{
    if (!s)
        return;
    ptc__buf_free(&s->artifacts);
    ptc__buf_free(&s->notes);
    ptc__free(s->table);
    ptc__arena_free(s->arena);
    ptc__free(s);
}

static int fail(ptc_sarif *s, ptc_error *err, const char *what)
{
    if (s->rc == PTC_ENOMEM)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory writing %s as SARIF", what);
    return ptc__err(err, s->rc, "", -1, "writing %s as SARIF failed: %s", what,
                    ptc_strerror(s->rc));
}

int ptc_sarif_begin(ptc_sarif **out, const ptc_sarif_params *params, ptc_write_fn write, void *ctx,
                    ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || !write)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sarif_begin: missing argument");
    *out = NULL;
    ptc_sarif_params p;
    ptc_sarif_params_default(&p);
    int rc = ptc__params_read(&p, sizeof p, params, "ptc_sarif_params", err);
    if (rc < 0)
        return rc;
    ptc_sarif *s = ptc__calloc(1, sizeof *s);
    if (!s)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory starting a SARIF log");
    s->write = write;
    s->ctx = ctx;
    s->budget.limit = UINT64_MAX;
    if (ptc__arena_new(&s->arena, &s->budget) < 0) {
        ptc__free(s);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory starting a SARIF log");
    }
    if (p.policy)
        ptc__escape(s->policy, sizeof s->policy, p.policy, strlen(p.policy), false);
    put(s, "{\n  \"$schema\": \"" SARIF_SCHEMA "\",\n  \"version\": \"2.1.0\",\n  \"runs\": [\n"
           "    {\n      \"tool\": {\n        \"driver\": ");
    emit(s, driver_object(), 8);
    put(s, "\n      },\n      \"results\": [");
    if (s->rc) {
        rc = fail(s, err, "the head of the log");
        ptc_sarif_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int ptc_sarif_file(ptc_sarif *s, const char *path, const ptc_report *r, const ptc_error *failure,
                   ptc_error *err)
{
    ptc__err_clear(err);
    if (!s || (!r && !failure))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sarif_file: missing argument");
    if (s->rc)
        return fail(s, err, "a file");
    ptc__buf ub = {0};
    size_t index = 0;
    bool added = false;
    if ((s->rc = path_uri(&ub, path ? path : "")) == 0)
        s->rc = artifact_index(s, (const char *)ub.data, &index, &added);
    const char *uri = (const char *)ub.data;
    if (s->rc == 0 && added)
        s->rc = emit_buf(&s->artifacts, artifact(uri, r, failure), 8);
    s->files++;
    if (!r) {
        s->errors++;
        s->failed = true;
        ptc__buf msg = {0};
        const char *why = failure->message[0] ? failure->message : ptc_strerror(failure->code);
        if (s->rc == 0 && ptc__buf_printf(&msg, "could not be verified: %s", why) < 0)
            s->rc = PTC_ENOMEM;
        /* the message may hold the path's bytes: text_message escapes what is not UTF-8 */
        if (s->rc == 0)
            s->rc = emit_buf(&s->notes,
                             notification("error", (const char *)msg.data, uri, index,
                                          ptc_err_name(failure->code)),
                             12);
        ptc__buf_free(&msg);
        s->nnotes++;
    } else {
        ptc_verdict v = ptc_report_verdict(r);
        s->ok += v == PTC_VERDICT_OK;
        s->unsafe += v == PTC_VERDICT_UNSAFE;
        s->malformed += v == PTC_VERDICT_MALFORMED;
        for (size_t i = 0; i < ptc_report_nfindings(r) && s->rc == 0; i++) {
            put(s, s->nresults++ ? ",\n        " : "\n        ");
            emit(s, result_object(r, ptc_report_finding(r, i), uri, index), 8);
        }
        if (ptc_report_dropped(r) && s->rc == 0) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "%llu more findings and global references were counted but not listed "
                     "(a report keeps 4096 of each)",
                     (unsigned long long)ptc_report_dropped(r));
            s->rc = emit_buf(&s->notes, notification("warning", msg, uri, index, "ELIMIT"), 12);
            s->nnotes++;
        }
    }
    ptc__buf_free(&ub);
    return s->rc ? fail(s, err, "a file") : 0;
}

int ptc_sarif_end(ptc_sarif *s, ptc_error *err)
{
    ptc__err_clear(err);
    if (!s)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_sarif_end: missing argument");
    char tail[200];
    put(s, s->nresults ? "\n      ],\n      \"artifacts\": [" : "],\n      \"artifacts\": [");
    put_elements(s, &s->artifacts, "\n      ");
    snprintf(tail, sizeof tail,
             "],\n      \"invocations\": [\n        {\n          \"executionSuccessful\": %s,\n"
             "          \"toolExecutionNotifications\": [",
             s->failed ? "false" : "true");
    put(s, tail);
    put_elements(s, &s->notes, "\n          ");
    put(s, "]\n        }\n      ],\n      \"properties\": ");
    json_t *props = json_object(), *sum = json_object();
    int bad = !props || !sum;
    bad |=
        json_object_set_new(props, "policy", s->policy[0] ? json_string(s->policy) : json_null());
    bad |= json_object_set_new(sum, "files", json_integer((json_int_t)s->files));
    bad |= json_object_set_new(sum, "ok", json_integer((json_int_t)s->ok));
    bad |= json_object_set_new(sum, "unsafe", json_integer((json_int_t)s->unsafe));
    bad |= json_object_set_new(sum, "malformed", json_integer((json_int_t)s->malformed));
    bad |= json_object_set_new(sum, "error", json_integer((json_int_t)s->errors));
    bad |= json_object_set_new(props, "summary", sum);
    if (bad) {
        json_decref(props);
        props = NULL; /* emit: PTC_ENOMEM */
    }
    emit(s, props, 6);
    put(s, "\n    }\n  ]\n}\n");
    int rc = s->rc ? fail(s, err, "the end of the log") : 0;
    ptc_sarif_free(s);
    return rc;
}
