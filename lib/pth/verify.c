/*
 * verify.c - ptc_verify: a verdict on an untrusted file, every finding with its location, every
 * global any pickle in it references, and what torch 2.6 would do with it. Nothing is executed.
 *
 * Two independent passes over the same bytes:
 *   1. the load: ptc_ckpt_open with the caller's policy and limits and every CRC checked. Its first
 *      error is a finding; where ptc is stricter than torch the error says so (PTC_ERR_STRICTER).
 *   2. the static pass: every pickle the bytes hold, under every reading of the container, is
 *      decoded opcode by opcode (ptc__pickle_scan, which never builds anything) and every global
 *      and every opcode outside the weights-only subset is checked against the policy. Scanners
 *      were bypassed by reading different bytes than the loader does, so this pass reads more than
 *      any loader: every member of a zip (not only data.pkl), pickles after STOP, all legacy
 *      pickles, tar members, and, when the zip is broken or ambiguous so that readers could
 *      disagree, every local header found in the file, whatever the central directory says.
 *      Then every byte a reader could take for a pickle is swept (ptc__verify_sweep_region):
 *      every zip member
 *      (the dot-records and the tensor records data/N included), the extra fields of both headers
 *      and the comment of every entry, the archive comment, and for any other format or a zip the
 *      strict reader refuses, the whole file; each is decoded from its first byte and from every
 *      PROTO opcode (0x80 then 2 to 5) in it that no other decode reads as an opcode, PROTOs in
 *      other decodes' arguments included (ptc__pickle_sweep). Those bytes are mostly not pickles (tensor data
 *      holds PROTO bytes and opcodes by chance), so there only a reference by name to a global
 *      whose module and name are Python names counts; one outside the policy makes the file
 *      unsafe, and is listed with its member (or "<record> [local extra field]", "[central extra
 *      field]", "[comment]", "archive comment"; "" for the file) and offset in it.
 * A file is unsafe when either pass finds a reference outside the policy, malformed when only
 * structure is wrong, ok when the load succeeds and the scan finds nothing.
 *
 * Work is bounded: the scan is linear in the bytes (a sweep decodes each byte as an opcode at most
 * once, its decodes merged where they meet; more than PTC__SWEEP_MAX_WALKS of them under way in a
 * region is an unsafe finding);
 * inflated members are capped (limits, and 64 MiB per member for the scan: a larger deflated
 * member is not swept); the report keeps at most REPORT_CAP findings and references, and once
 * it is full what the sweep finds is only counted.
 *
 * The containers (zip members and headers, local headers found anywhere, tar members) are read
 * in verify_zip.c; this file holds the report, the pickle pass and the verdict.
 */
#include "pth/verify_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most regions full scans may cover (ptc__verify_cover()): PTC_ELIMIT beyond. */
#define COVER_CAP ((size_t)1 << 21)
/* Findings looked through one by one for a duplicate; past that, a hash of (verdict, offset,
 * member) finds it (a pickle of thousands of opcodes outside the subset has one finding each,
 * and a linear search made the report quadratic: 4096 findings cost 8 million comparisons). */
#define FINDING_LINEAR 32
#define FINDING_SLOTS  (2 * REPORT_CAP) /* a power of two, at most half full */

const char *ptc_verdict_name(ptc_verdict v)
{
    return v == PTC_VERDICT_OK ? "ok" : v == PTC_VERDICT_UNSAFE ? "unsafe" : "malformed";
}

const char *ptc_torch_answer_name(ptc_torch_answer a)
{
    return a == PTC_TORCH_LOADS ? "loads" : a == PTC_TORCH_REFUSES ? "refuses" : "unknown";
}

/* ---- the report ------------------------------------------------------------------------------ */

static char *rstr(ptc_report *r, const char *s)
{
    return ptc__arena_strndup(r->arena, s, strlen(s));
}

static size_t finding_hash(ptc_verdict v, int64_t offset, const char *member)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)v;
    h = (h ^ (uint64_t)offset) * 1099511628211ull;
    for (const unsigned char *p = (const unsigned char *)member; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (FINDING_SLOTS - 1);
}

/* The slot of the finding (v, offset, member), or of the empty slot where it would go. */
static uint32_t *finding_slot(ptc_report *r, ptc_verdict v, int64_t offset, const char *member)
{
    size_t i = finding_hash(v, offset, member);
    for (;;) {
        uint32_t k = r->fslot[i];
        if (!k)
            return &r->fslot[i];
        const ptc_finding *f = &r->f[k - 1];
        if (f->verdict == v && f->offset == offset && strcmp(f->member, member) == 0)
            return &r->fslot[i];
        i = (i + 1) & (FINDING_SLOTS - 1);
    }
}

/* The index of the finding with this member, offset and verdict, or -1. */
static ptrdiff_t find_finding(ptc_report *r, ptc_verdict v, int64_t offset, const char *member)
{
    if (!r->fslot && r->nf >= FINDING_LINEAR &&
        (r->fslot = ptc__calloc(FINDING_SLOTS, sizeof *r->fslot)) != NULL) {
        for (size_t i = 0; i < r->nf; i++)
            *finding_slot(r, r->f[i].verdict, r->f[i].offset, r->f[i].member) = (uint32_t)i + 1;
    }
    if (r->fslot) {
        uint32_t k = *finding_slot(r, v, offset, member);
        return k ? (ptrdiff_t)k - 1 : -1;
    }
    for (size_t i = 0; i < r->nf; i++) {
        const ptc_finding *f = &r->f[i];
        if (f->verdict == v && f->offset == offset && strcmp(f->member, member) == 0)
            return (ptrdiff_t)i;
    }
    return -1;
}

/* Adds a finding unless one with the same member, offset and verdict is there already (the load
 * and the scan often see the same thing). Its file offset is the offset itself for the file ("")
 * and r->base + offset in a member. */
int ptc__verify_add_finding(ptc_report *r, ptc_verdict v, int code, const char *kind,
                            const char *member, int64_t offset, const char *detail,
                            bool torch_refuses)
{
    if (r->nf == REPORT_CAP) { /* full: no search for a duplicate, which would cost as much */
        r->dropped++;
        return 0;
    }
    int64_t file_offset = offset < 0     ? -1
                          : !member[0]   ? offset
                          : r->base >= 0 ? r->base + offset
                                         : -1;
    ptrdiff_t same = find_finding(r, v, offset, member);
    if (same >= 0) {
        r->f[same].torch_refuses |= torch_refuses;
        if (r->f[same].file_offset < 0)
            r->f[same].file_offset = file_offset;
        return 0;
    }
    if (r->nf == REPORT_CAP) {
        r->dropped++;
        return 0;
    }
    if (r->nf == r->capf) {
        size_t cap = r->capf ? r->capf * 2 : 16;
        ptc_finding *n = ptc__realloc(r->f, cap * sizeof *n);
        if (!n)
            return PTC_ENOMEM;
        r->f = n;
        r->capf = cap;
    }
    ptc_finding f = {
        v, code, kind, rstr(r, member), offset, rstr(r, detail), torch_refuses, file_offset};
    if (!f.member || !f.detail)
        return PTC_ENOMEM;
    if (r->fslot)
        *finding_slot(r, v, offset, f.member) = (uint32_t)r->nf + 1;
    r->f[r->nf++] = f;
    return 0;
}

static int add_global(ptc_report *r, const char *member, int64_t offset, const char *opcode,
                      const char *global, bool allowed, bool torch_allows)
{
    if (r->ng == REPORT_CAP) {
        r->dropped++;
        return 0;
    }
    if (r->ng == r->capg) {
        size_t cap = r->capg ? r->capg * 2 : 16;
        ptc_global_ref *n = ptc__realloc(r->g, cap * sizeof *n);
        if (!n)
            return PTC_ENOMEM;
        r->g = n;
        r->capg = cap;
    }
    ptc_global_ref g = {rstr(r, member), offset,      opcode, global ? rstr(r, global) : NULL,
                        allowed,         torch_allows};
    if (!g.member || (global && !g.global))
        return PTC_ENOMEM;
    r->g[r->ng++] = g;
    return 0;
}

void ptc_report_free(ptc_report *r)
{
    if (!r)
        return;
    ptc__arena_free(r->arena);
    ptc__free(r->fslot);
    ptc__free(r->f);
    ptc__free(r->g);
    ptc__free(r);
}

ptc_verdict ptc_report_verdict(const ptc_report *r)
{
    return r->verdict;
}
const char *ptc_report_format(const ptc_report *r)
{
    return r->format;
}
ptc_torch_answer ptc_report_torch(const ptc_report *r)
{
    return r->torch;
}
size_t ptc_report_nfindings(const ptc_report *r)
{
    return r ? r->nf : 0;
}
const ptc_finding *ptc_report_finding(const ptc_report *r, size_t i)
{
    return r && i < r->nf ? &r->f[i] : NULL;
}
size_t ptc_report_nglobals(const ptc_report *r)
{
    return r ? r->ng : 0;
}
const ptc_global_ref *ptc_report_global(const ptc_report *r, size_t i)
{
    return r && i < r->ng ? &r->g[i] : NULL;
}
uint64_t ptc_report_dropped(const ptc_report *r)
{
    return r ? r->dropped : 0;
}
uint64_t ptc__report_size(const ptc_report *r)
{
    return r ? r->size : 0;
}

/* ---- the static pass ------------------------------------------------------------------------ */

static bool name_ok(const char *s, size_t n)
{
    return strlen(s) == n && ptc__utf8_valid((const uint8_t *)s, n);
}

/* 1 allowed, 0 not, for mapped names under a policy. */
static bool allows(const ptc_policy *p, const char *m, const char *n)
{
    ptc__gid id;
    ptc_dtype dt;
    return ptc__policy_lookup(p, m, n, &id, &dt, NULL, -1, NULL) == 0;
}

static int scan_item(void *ud, const ptc__scan_item *it)
{
    scan_ctx *c = ud;
    ptc_report *r = c->r;
    const char *opname = ptc__pickle_opname(it->opcode);
    char detail[640], full[520], em[240], en[240];
    int rc = 0;
    if (it->kind == PTC__SCAN_PROTO) {
        if (c->record_protos && !c->sweep) {
            if (c->nprotos < PROTO_KEEP)
                c->protos[c->nprotos++] = it->offset;
            else
                c->protos_over = true;
        }
        return 0;
    }
    /* A sweep decodes bytes that are mostly not pickles (tensor data, headers, text): random
     * bytes hold PROTO, REDUCE or a STACK_GLOBAL over nothing often enough, a GLOBAL of two
     * Python names almost never. Only references by name count there: the sweep reports only
     * those (names, escaped literals whose value is a name, and "?" for a STACK_GLOBAL whose
     * names it lost track of). */
    if (c->sweep && (it->kind != PTC__SCAN_GLOBAL || it->truncated))
        return 0;
    /* The report is full: what a torch-run pickle references still decides the prediction,
     * anything else would only be counted as not listed. */
    if (r->ng == REPORT_CAP && r->nf == REPORT_CAP && !c->torch_runs && !c->suspect) {
        r->dropped++;
        if (it->kind != PTC__SCAN_OPCODE) {
            c->refs++;
            c->bad++;
        }
        return 0;
    }
    if (it->kind == PTC__SCAN_OPCODE) {
        /* Out of the subset but neither importing nor calling by itself, except OBJ and
         * NEWOBJ_EX, which call a class. */
        bool calls = it->opcode == 'o' || it->opcode == 0x92;
        if (c->torch_runs)
            c->torch_hit = true;
        if (calls)
            c->bad++;
        if (r->nf ==
            REPORT_CAP) { /* what ptc__verify_add_finding does when full, without the message */
            r->dropped++;
            return 0;
        }
        snprintf(detail, sizeof detail,
                 calls ? "opcode %s calls a class and is outside the weights-only subset"
                       : "opcode %s is outside the weights-only subset",
                 opname);
        rc = ptc__verify_add_finding(r, calls ? PTC_VERDICT_UNSAFE : PTC_VERDICT_MALFORMED,
                                     calls ? PTC_EUNSAFE : PTC_EFORMAT, "opcode", c->member,
                                     (int64_t)it->offset, detail, c->torch_runs);
        return rc ? (c->fatal = rc) : 0;
    }
    c->refs++;
    if (it->kind == PTC__SCAN_DYNAMIC) {
        snprintf(detail, sizeof detail,
                 "%s takes a global whose name is computed at run time; not allowed", opname);
        c->bad++;
        c->torch_hit |= c->torch_runs;
        c->suspect_hit |= c->suspect;
        if ((rc = add_global(r, c->member, (int64_t)it->offset, opname, NULL, false, false)) ||
            (rc = ptc__verify_add_finding(r, PTC_VERDICT_UNSAFE, PTC_EUNSAFE, "global", c->member,
                                          (int64_t)it->offset, detail, c->torch_runs)))
            return c->fatal = rc;
        return 0;
    }
    /* A named global: GLOBAL, INST, or STACK_GLOBAL over two string constants. */
    bool valid =
        !it->truncated && name_ok(it->module, it->module_len) && name_ok(it->name, it->name_len);
    bool allowed = false, torch_allows = false;
    if (valid) {
        const char *m = it->module, *n = it->name;
        ptc__pickle_map_name(&m, &n);
        ptc__escape(em, sizeof em, m, strlen(m), true);
        ptc__escape(en, sizeof en, n, strlen(n), true);
        if (it->opcode == 'c') {
            allowed = allows(c->policy, m, n);
            torch_allows = allows(c->torch_policy, m, n);
        }
    } else {
        ptc__escape(em, sizeof em, it->module, it->module_len, false);
        ptc__escape(en, sizeof en, it->name, it->name_len, false);
    }
    snprintf(full, sizeof full, "%s.%s", em, en);
    if ((rc = add_global(r, c->member, (int64_t)it->offset, opname, full, allowed, torch_allows)))
        return c->fatal = rc;
    if (allowed)
        return 0;
    c->bad++;
    if (!torch_allows) {
        c->torch_hit |= c->torch_runs;
        c->suspect_hit |= c->suspect;
    }
    if (it->opcode != 'c')
        snprintf(detail, sizeof detail, "%s %s imports %s outside the weights-only subset", opname,
                 full, it->opcode == 'i' ? "and calls" : "a global");
    else if (!valid)
        snprintf(detail, sizeof detail, "GLOBAL %s is not a valid name", full);
    else
        snprintf(detail, sizeof detail, "GLOBAL %s is not allowed%s", full,
                 torch_allows ? " by this policy (torch 2.6 allows it)" : "");
    rc = ptc__verify_add_finding(r, PTC_VERDICT_UNSAFE, PTC_EUNSAFE, "global", c->member,
                                 (int64_t)it->offset, detail, c->torch_runs && !torch_allows);
    return rc ? (c->fatal = rc) : 0;
}

/* Scans the pickles one after another in data[0..len) until one does not parse, at most max of
 * them (where raw bytes follow the pickles, as in a legacy stream, scanning on would read tensor
 * bytes as opcodes). The first torch_first of them are pickles torch runs. Returns the number of
 * pickles that ended in STOP, or PTC_ENOMEM; *end (may be NULL) receives the end of the last of
 * them, *reach (may be NULL) one past the last byte any decode read (a sweep starts there). */
int ptc__verify_scan_pickles_at(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base,
                                unsigned torch_first, unsigned max, bool suspect, size_t *end,
                                size_t *reach)
{
    size_t pos = 0, far = 0;
    int n = 0;
    while (pos < len && (unsigned)n < max) {
        size_t used = 0, got = 0;
        ptc_error e;
        c->torch_runs = (unsigned)n < torch_first;
        c->suspect = suspect && n == 0;
        int rc = ptc__pickle_scan_ex(data + pos, len - pos, len - pos, c->member, base + pos, true,
                                     scan_item, c, &used, &got, &e);
        if (c->fatal)
            return c->fatal;
        if (pos + got > far)
            far = pos + got;
        if (rc < 0 || used == 0)
            break; /* structure is the load's business; the scan only looks for references */
        pos += used;
        n++;
    }
    c->torch_runs = c->suspect = false;
    if (end)
        *end = pos;
    if (reach)
        *reach = far > pos ? far : pos;
    return n;
}

int ptc__verify_scan_pickles(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base,
                             unsigned torch_first, unsigned max, bool suspect, size_t *reach)
{
    return ptc__verify_scan_pickles_at(c, data, len, base, torch_first, max, suspect, NULL, reach);
}

/* Notes that a full scan read the file bytes [a, b): the sweep of the whole file skips them. */
void ptc__verify_cover(scan_ctx *c, uint64_t a, uint64_t b)
{
    if (b <= a || c->fatal)
        return;
    /* One span per full scan: one per record, five for a legacy file, so the default
     * max_records keeps far below the cap. */
    if (c->ncov >= COVER_CAP) {
        c->fatal = PTC_ELIMIT;
        return;
    }
    if (c->ncov == c->capcov) {
        size_t cap = c->capcov ? c->capcov * 2 : 16;
        ptc__span *n = ptc__realloc(c->cov, cap * sizeof *n);
        if (!n) {
            c->fatal = PTC_ENOMEM;
            return;
        }
        c->cov = n;
        c->capcov = cap;
    }
    c->cov[c->ncov++] = (ptc__span){a, b};
}

static int cmp_span(const void *x, const void *y)
{
    const ptc__span *a = x, *b = y;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* Decodes data[0..len) wherever a reader could start a pickle (ptc__pickle_sweep): at every
 * PROTO opcode (0x80 then a protocol 2 to 5) that is no opcode of another decode, PROTOs inside
 * the arguments of other decodes included (a pickle wrapped in BINBYTES or in a STRING line), and
 * at data[0] when at_start. quiet[0..nquiet) are the spans full scans read
 * (pass a span [0, reach) for a region scanned from its first byte): replayed without reporting,
 * so that what is wrapped in their arguments is found and nothing is reported twice. Each decode
 * stops at its STOP or at the first byte that does not parse, and the sweep is linear in the
 * region. Only references by name to a global count (scan_item, c->sweep): tensor bytes decode as
 * short runs of random opcodes. base is added to the offsets reported. A region where more than
 * PTC__SWEEP_MAX_WALKS decodes overlap (nested wrappers, only built on purpose) is a finding.
 * Returns 0 or PTC_ENOMEM. */
static int sweep_spans(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base, bool at_start,
                       const ptc__span *quiet, size_t nquiet)
{
    bool saved_sweep = c->sweep;
    c->sweep = true;
    c->torch_runs = c->suspect = false;
    ptc_error e;
    int rc =
        ptc__pickle_sweep(data, len, base, at_start, quiet, nquiet, c->member, scan_item, c, &e);
    c->sweep = saved_sweep;
    if (c->fatal)
        return c->fatal;
    if (rc == PTC_ELIMIT) {
        c->bad++;
        const char *msg = strstr(e.message, ": ");
        char detail[640];
        snprintf(detail, sizeof detail, "the sweep for hidden pickles stopped: %s",
                 msg ? msg + 2 : e.message);
        rc = ptc__verify_add_finding(c->r, PTC_VERDICT_UNSAFE, PTC_ELIMIT, "hidden-pickle",
                                     c->member, (int64_t)e.offset, detail, false);
    }
    return rc;
}

/* A region a full scan read from its first byte to reach (0: no full scan). */
int ptc__verify_sweep_region(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base,
                             size_t reach)
{
    ptc__span q = {0, reach};
    return sweep_spans(c, data, len, base, reach == 0, &q, reach ? 1 : 0);
}

/* Starts recording the PROTO opcodes of the full scan that follows
 * (ptc__verify_sweep_adds_nothing). */
void ptc__verify_record_protos(scan_ctx *c)
{
    c->record_protos = true;
    c->protos_over = false;
    c->nprotos = 0;
}

/* Whether the sweep of data[0..len) after a full scan from its first byte could find anything:
 * not when that scan read the region to its end in pickles that all ended in STOP (end == reach
 * == len) and every PROTO in the region (0x80 then 2 to 5, where the sweep starts decodes) is one
 * of that scan's own PROTO opcodes. The sweep would then only replay the scan quietly (its
 * quiet span is the whole region), start no other decode, and report nothing; skipping it is
 * the one scan per pickle of a well-formed member. Stops recording. */
bool ptc__verify_sweep_adds_nothing(scan_ctx *c, const uint8_t *data, size_t len, size_t end,
                                    size_t reach)
{
    bool recorded = c->record_protos && !c->protos_over;
    c->record_protos = false;
    if (!recorded || len < 2 || end != len || reach != len)
        return false;
    for (size_t from = 0; from < len - 1;) {
        const uint8_t *p = memchr(data + from, PTC__OP_PROTO, len - 1 - from);
        if (!p)
            break;
        size_t at = (size_t)(p - data);
        if (data[at + 1] >= 2 && data[at + 1] <= 5) {
            bool own = false;
            for (unsigned i = 0; i < c->nprotos && !own; i++)
                own = c->protos[i] == at;
            if (!own)
                return false;
        }
        from = at + 1;
    }
    return true;
}

/* The whole file, raw, as one region (labelled "", offsets in the file), less the bytes full
 * scans read: where no container reading can be trusted (a zip the strict reader refuses, a
 * legacy stream past its pickles, tar, safetensors, a file of no known format). */
static int sweep_file(scan_ctx *c)
{
    if (c->fatal)
        return c->fatal;
    if (c->ncov)
        qsort(c->cov, c->ncov, sizeof *c->cov, cmp_span);
    c->member = "";
    c->refs = c->bad = 0;
    int rc = sweep_spans(c, c->map, (size_t)c->size, 0, true, c->cov, c->ncov);
    return rc ? rc : ptc__verify_swept_finding(c, "the file");
}

/* A sweep found references outside the policy in a region: one finding for the region. */
int ptc__verify_swept_finding(scan_ctx *c, const char *what)
{
    if (!c->bad)
        return 0;
    char detail[640];
    snprintf(detail, sizeof detail,
             "%s holds a pickle that references globals outside the policy (found by decoding "
             "from a PROTO opcode or the first byte; no loader is known to run it)",
             what);
    return ptc__verify_add_finding(c->r, PTC_VERDICT_UNSAFE, PTC_EUNSAFE, "hidden-pickle",
                                   c->member, -1, detail, false);
}

/* ---- the verdict ------------------------------------------------------------------------------ */

static const uint8_t legacy_magic[15] = {0x80, 0x02, 0x8A, 0x0A, 0x6C, 0xFC, 0x9C, 0x46,
                                         0xF9, 0x20, 0x6A, 0xA8, 0x50, 0x19, 0x2E};

void ptc_verify_params_default(ptc_verify_params *p)
{
    *p = (ptc_verify_params){.size = sizeof *p, .policy = NULL, .limits = NULL};
}

static int verify_common(ptc_report **out, ptc__source *src, const ptc_verify_params *caller,
                         ptc_error *err)
{
    ptc_verify_params prm, *params = &prm;
    ptc_verify_params_default(&prm);
    int prc = ptc__params_read(&prm, sizeof prm, caller, "ptc_verify_params", err);
    if (prc < 0)
        return prc;
    ptc_limits lim;
    ptc_limits_default(&lim);
    if (params && params->limits)
        lim = *params->limits;
    ptc_policy *torch_policy = NULL, *own_policy = NULL;
    ptc_ckpt *ck = NULL;
    const ptc_policy *policy = params ? params->policy : NULL;
    ptc_report *r = ptc__calloc(1, sizeof *r);
    scan_ctx c = {0};
    int rc = 0;
    if (!r || ptc_policy_new(&torch_policy, PTC_POLICY_DEFAULT, err) < 0 ||
        (!policy && ptc_policy_new(&own_policy, PTC_POLICY_DEFAULT, err) < 0)) {
        rc = PTC_ENOMEM;
        goto fail;
    }
    if (!policy)
        policy = own_policy;
    r->budget.limit = UINT64_MAX;
    r->base = -1;
    if (ptc__arena_new(&r->arena, &r->budget) < 0) {
        rc = PTC_ENOMEM;
        goto fail;
    }

    /* 1. The load. */
    ptc_open_params op;
    ptc_open_params_default(&op);
    op.policy = policy;
    op.limits = &lim;
    /* data.pkl inflated (and its CRC checked) once, by the load, for the load and the static
     * pass: the archive keeps its bytes while ck is open. */
    op.flags = PTC_OPEN_VERIFY_CRC | PTC__ZIP_KEEP_PICKLE;
    ptc_error le;
    const uint8_t *map = ptc__source_map(src);
    uint64_t size = ptc__source_size(src);
    r->size = size;
    static const uint8_t empty[1];
    int lrc = ptc_ckpt_open_memory(&ck, map ? map : empty, (size_t)size, &op, &le);
    bool loaded = lrc == 0, safetensors = loaded && ptc_ckpt_format(ck) == PTC_FORMAT_SAFETENSORS;
    if (loaded) {
        /* kept open: the static pass reads its zip directory instead of parsing it again */
    } else if (lrc == PTC_EIO || lrc == PTC_ENOMEM) {
        rc = lrc;
        if (err)
            *err = le;
        goto fail;
    } else {
        /* The message without its "member+0x..: " head: member and offset are fields. */
        const char *msg = le.message;
        size_t ml = strlen(le.member);
        if (ml && strncmp(msg, le.member, ml) == 0) {
            const char *colon = strstr(msg + ml, ": ");
            if (colon)
                msg = colon + 2;
        } else if (!ml && strncmp(msg, "offset 0x", 9) == 0) {
            const char *colon = strstr(msg, ": ");
            if (colon)
                msg = colon + 2;
        }
        char member[sizeof le.member + 8];
        ptc__escape(member, sizeof member, le.member, strlen(le.member), true);
        /* The legacy loader places its parts by file offsets; a zip record's offsets are in the
         * record, whose place the failed load does not give. */
        r->base = strncmp(le.member, "legacy ", 7) == 0 ? 0 : -1;
        if ((rc = ptc__verify_add_finding(
                 r, lrc == PTC_EUNSAFE ? PTC_VERDICT_UNSAFE : PTC_VERDICT_MALFORMED, lrc,
                 lrc == PTC_ECRC ? "crc" : "load", member, le.offset, msg,
                 !(le.flags & PTC_ERR_STRICTER))))
            goto fail;
        r->load = r->nf; /* the first finding, if any */
    }

    /* 2. The static pass. */
    c = (scan_ctx){
        .r = r, .policy = policy, .torch_policy = torch_policy, .map = map, .size = size};
    bool constants = false, any_local = false, whole_pickle = false;
    r->format = "unknown";
    if (size >= 4 && memcmp(map, "PK\x03\x04", 4) == 0) {
        r->format = "zip";
        int zr = loaded && ck->zip ? ptc__verify_scan_zip_entries(&c, ck->zip, false, &constants)
                                   : ptc__verify_scan_zip_strict(&c, src, &lim, &constants);
        if (zr == 1 &&
            (zr = ptc__verify_scan_local_headers(&c, map, size, &constants, &any_local)) == 0)
            zr = sweep_file(&c);
        if ((rc = zr) < 0)
            goto fail;
    } else if (size >= sizeof legacy_magic && memcmp(map, legacy_magic, sizeof legacy_magic) == 0) {
        r->format = "legacy";
        /* Magic, protocol, sys_info, the object, the storage keys: torch runs all five; raw
         * storage bytes follow. Named and placed (file offsets) as the load names them. */
        static const char *const parts[5] = {"legacy magic", "legacy protocol", "legacy sys_info",
                                             "legacy object", "legacy keys"};
        size_t pos = 0;
        for (int i = 0; i < 5 && pos < size; i++) {
            size_t used = 0;
            c.member = parts[i];
            r->base = 0; /* the legacy parts are placed by their file offsets */
            size_t reach = 0;
            if ((rc = ptc__verify_scan_pickles_at(&c, map + pos, (size_t)(size - pos), pos, 1, 1,
                                                  false, &used, &reach)) < 0)
                goto fail;
            ptc__verify_cover(&c, pos, pos + reach);
            if (rc == 0)
                break;
            pos += used;
        }
        rc = 0;
    } else if (safetensors || (size > 8 && map[8] == '{' && ptc__le64(map) >= 2)) {
        r->format = "safetensors"; /* a JSON header and tensor bytes: no pickle anywhere */
    } else if (size >= 262 && memcmp(map + 257, "ustar", 5) == 0) {
        r->format = "tar";
        if ((rc = ptc__verify_scan_tar(&c, map, size)) < 0)
            goto fail;
    } else {
        if (size >= 6 && memcmp(map, "7z\xBC\xAF\x27\x1C", 6) == 0)
            r->format = "7z";
        else if (size && map[0] == PTC__OP_PROTO)
            r->format = "pickle";
        c.member = "";
        size_t first_reach = 0, first_end = 0;
        /* A pickle stream that is not a torch.save one: torch's legacy loader runs its first
         * pickle (to read the magic number) before refusing it; a legacy-like layout has five. */
        ptc__verify_record_protos(&c);
        if (ptc__verify_looks_like_pickle(map, (size_t)size) &&
            (rc = ptc__verify_scan_pickles_at(&c, map, (size_t)size, 0, 1, 5, false, &first_end,
                                              &first_reach)) < 0)
            goto fail;
        whole_pickle =
            rc > 0 && ptc__verify_sweep_adds_nothing(&c, map, (size_t)size, first_end, first_reach);
        c.record_protos = false;
        ptc__verify_cover(&c, 0, first_reach);
        /* A zip inside anything else (a 7z with the Copy coder, a polyglot). */
        if ((rc = ptc__verify_scan_local_headers(&c, map, size, &constants, &any_local)) < 0)
            goto fail;
        rc = 0;
    }
    /* Every format but an accepted zip (swept member by member above): the raw file. A file
     * that is one run of pickles, read to its end by the scan above and by nothing else (no
     * local header found in it), would only be replayed quietly
     * (ptc__verify_sweep_adds_nothing). */
    if (whole_pickle && c.ncov == 1 && c.cov[0].a == 0 && c.cov[0].b == size) {
        c.member = ""; /* as sweep_file leaves it */
    } else if (strcmp(r->format, "zip") != 0 && (rc = sweep_file(&c)) < 0) {
        goto fail;
    }
    rc = 0;
    if (constants)
        r->format = "torchscript";

    /* The verdict: unsafe wins over malformed. */
    r->verdict = PTC_VERDICT_OK;
    bool torch_refuses = false;
    for (size_t i = 0; i < r->nf; i++) {
        if (r->f[i].verdict == PTC_VERDICT_UNSAFE)
            r->verdict = PTC_VERDICT_UNSAFE;
        else if (r->verdict == PTC_VERDICT_OK)
            r->verdict = PTC_VERDICT_MALFORMED;
        torch_refuses |= r->f[i].torch_refuses;
    }
    if (r->dropped && r->verdict == PTC_VERDICT_OK)
        r->verdict = PTC_VERDICT_MALFORMED; /* cannot happen: dropping needs findings */

    /* What torch 2.6 does: it reads zip checkpoints (not TorchScript) and legacy streams only. */
    bool torch_format = strcmp(r->format, "zip") == 0 || strcmp(r->format, "legacy") == 0;
    if (!torch_format || torch_refuses || c.torch_hit)
        r->torch = PTC_TORCH_REFUSES;
    else if (!loaded && c.suspect_hit)
        r->torch = PTC_TORCH_UNKNOWN;
    else
        r->torch = PTC_TORCH_LOADS;

    ptc__free(c.cov);
    ptc_ckpt_close(ck);
    ptc_policy_free(torch_policy);
    ptc_policy_free(own_policy);
    *out = r;
    return 0;

fail:
    ptc__free(c.cov);
    ptc_ckpt_close(ck);
    ptc_policy_free(torch_policy);
    ptc_policy_free(own_policy);
    ptc_report_free(r);
    if (rc == PTC_ENOMEM)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    if (rc == PTC_ELIMIT && c.ncov >= COVER_CAP)
        return ptc__err(err, PTC_ELIMIT, "", -1, "more than %zu pickles to scan in one file",
                        COVER_CAP);
    return rc;
}

int ptc_verify(ptc_report **out, const char *path, const ptc_verify_params *params, ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || !path)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_verify: missing argument");
    *out = NULL;
    /* What ptc_ckpt_open reads of a path that cannot be mapped: at most the heap limit. */
    ptc_verify_params prm;
    ptc_verify_params_default(&prm);
    if (ptc__params_read(&prm, sizeof prm, params, "ptc_verify_params", err) < 0)
        return PTC_EINVAL;
    ptc_limits lim;
    ptc_limits_default(&lim);
    if (prm.limits)
        lim = *prm.limits;
    ptc__source *src;
    int rc = ptc__source_open_path_capped(&src, path, lim.max_heap_bytes, err);
    if (rc < 0)
        return rc;
    rc = verify_common(out, src, params, err);
    ptc__source_close(src);
    return rc;
}

int ptc_verify_memory(ptc_report **out, const void *buf, size_t len,
                      const ptc_verify_params *params, ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || (!buf && len))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_verify_memory: missing argument");
    *out = NULL;
    ptc__source *src;
    static const uint8_t empty[1];
    int rc = ptc__source_open_memory(&src, buf ? buf : empty, len, err);
    if (rc < 0)
        return rc;
    rc = verify_common(out, src, params, err);
    ptc__source_close(src);
    return rc;
}
