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
 * The document is in three files: this one walks the tree and writes the document's sections;
 * ckpt_json_out.c holds the buffered JSON writer and the JSON form of a value; value_text.c the
 * one-line renderer (public as ptc_value_text), the growable string and the budget charges.
 * ckpt_json_int.h is what they share.
 */
#include "pth/ckpt_json_int.h"

#include <inttypes.h>
#include <string.h>

#define MAX_VALUE_VISITS (1u << 22) /* nodes the value listing visits before it stops */

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
    if (!ptc__cj_render_charge_bytes(in, path->len)) /* the path written (charged by the scan) */
        return;
    if (out->mode == JW_SCAN) {
        /* Rendered and dropped: the scan charges the budget as the written entry will. */
        in->counting = 1;
        json_t *j = ptc__cj_json_value(in, v, 0);
        in->counting = 0;
        out->nvalues++;
        out->oom |= !j;
        json_decref(j);
        return;
    }
    if (out->mode != JW_VALUES)
        return;
    json_t *e = json_object();
    if (!e || ptc__cj_json_put(e, "path", ptc__cj_json_text(ptc__sb_str(path), path->len)) < 0 ||
        ptc__cj_json_put(e, "type", json_string(ptc__cj_kind_name(ptc_value_kind_of(v)))) < 0 ||
        ptc__cj_json_put(e, "value", ptc__cj_json_value(in, v, 0)) < 0) {
        json_decref(e);
        out->oom = 1;
    } else if (ptc__cj_json_stream_put(out->array, e) < 0) {
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
    if (!ptc__cj_render_charge_bytes(in, path->len))
        return;
    if (out->mode == JW_SCAN)
        out->nmeta++;
    if (out->mode != JW_METADATA)
        return;
    json_t *e = json_object();
    json_t *jmodules = has_modules ? json_integer((json_int_t)modules) : json_null();
    if (!e || ptc__cj_json_put(e, "path", ptc__cj_json_text(ptc__sb_str(path), path->len)) < 0 ||
        ptc__cj_json_put(e, "modules", jmodules) < 0 ||
        ptc__cj_json_put(e, "attributes", json_integer((json_int_t)nattrs)) < 0) {
        json_decref(e);
        out->oom = 1;
    } else if (ptc__cj_json_stream_put(out->array, e) < 0) {
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
    in->tot_tensors = ptc__cj_add_sat(in->tot_tensors, ntensors);
    in->tot_numel = ptc__cj_add_sat(in->tot_numel, numel);
    in->tot_bytes = ptc__cj_add_sat(in->tot_bytes, nbytes);
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
        if ((sh->has_tensors && !ptc__cj_render_charge_bytes(in, tpath->len + strlen(sh->tpath))) ||
            (value_ref && !ptc__cj_render_charge_bytes(in, tpath->len + strlen(sh->tpath))))
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
        jobj o = {.in = in, .depth = ptc__cj_json_stream_next(out->array)};
        ptc__cj_jobj_key(&o, "path");
        int bad = ptc__cj_out_cstr(in, ptc__sb_str(tpath)) < 0;
        ptc__cj_jobj_key(&o, "$ref");
        bad |= ptc__cj_out_cstr(in, sh->tpath) < 0;
        ptc__cj_jobj_close(&o);
        return bad ? PTC_ENOMEM : 0;
    }
    case JW_VALUES:
        if (!value_ref)
            return 0;
        e = json_object();
        if (!e ||
            ptc__cj_json_put(e, "path", ptc__cj_json_text(ptc__sb_str(tpath), tpath->len)) < 0 ||
            ptc__cj_json_put(e, "$ref", ptc__cj_json_cstr(sh->tpath)) < 0) {
            json_decref(e);
            return PTC_ENOMEM;
        }
        return ptc__cj_json_stream_put(out->array, e) < 0 ? PTC_ENOMEM : 0;
    }
    return 0;
}

/* A tensor met at path tpath: JW_SCAN adds it to the totals (and with --hash to the tensors to
 * hash, once each), JW_TENSORS writes its entry. */
static int emit_tensor(cj *in, value_sink *out, const sbuf *tpath, const ptc_tensor *t)
{
    if (out->mode == JW_TENSORS)
        return out_tensor(in, out->array, ptc__sb_str(tpath), t) < 0 ? PTC_ENOMEM : 0;
    if (out->mode != JW_SCAN)
        return 0;
    if (!ptc__cj_render_charge_bytes(in, tpath->len)) /* the entry's path, written by JW_TENSORS */
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
            const char *p = ptc__sb_str(tpath);
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
    if (v && rc == 0 && !ptc__cj_render_charge(in))
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
                        sh->tpath = copy_str(ptc__sb_str(&tpath));
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
            ptc__sb_truncate(&tpath, f->tlen);
            if (f->tlen)
                ptc__sb_puts(&tpath, ".");
            if (dict) {
                ptc__sb_key(&tpath, ptc_dict_key(f->v, i));
            } else {
                ptc__sb_printf(&tpath, "%zu", i);
            }
            if (!ptc__cj_render_path_ok(in, tpath.len, nst))
                break;
            v = c;
        }
        if (v && !ptc__cj_render_charge(in))
            break;
        if (v && ++visits > MAX_VALUE_VISITS)
            out->truncated = 1;
    }
    if (rc == 0 && in->failed)
        rc = PTC_ELIMIT;
    if (rc == PTC_ELIMIT && in->failed && err)
        *err = in->err;
    ptc__free(st);
    ptc__sb_free(&tpath);
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
    jobj o = {.in = in, .depth = ptc__cj_json_stream_next(a)};
    ptc__cj_jobj_key(&o, "path");
    int bad = ptc__cj_out_cstr(in, path) < 0;
    ptc__cj_jobj_key(&o, "dtype");
    bad |= ptc__cj_out_cstr(in, ptc_dtype_name(ptc_tensor_dtype(t))) < 0;
    ptc__cj_jobj_key(&o, "shape");
    ptc__cj_out_dims(in, o.depth + 1, ndim, ptc_tensor_shape(t));
    ptc__cj_jobj_key(&o, "stride");
    ptc__cj_out_dims(in, o.depth + 1, ndim, ptc_tensor_stride(t));
    ptc__cj_jobj_key(&o, "storage_offset");
    ptc__cj_out_i64(in, ptc_tensor_storage_offset(t));
    ptc__cj_jobj_key(&o, "storage");
    bad |= ptc__cj_out_cstr(in, s ? ptc_storage_key(s) : NULL) < 0;
    ptc__cj_jobj_key(&o, "numel");
    ptc__cj_out_i64(in, ptc_tensor_numel(t));
    ptc__cj_jobj_key(&o, "nbytes");
    ptc__cj_out_i64(in, ptc_tensor_nbytes(t));
    ptc__cj_jobj_key(&o, "requires_grad");
    ptc__cj_out_bool(in, ptc_tensor_requires_grad(t));
    ptc__cj_jobj_key(&o, "parameter");
    ptc__cj_out_bool(in, ptc_tensor_is_parameter(t));
    if (in->p.hash) {
        const digest *d = digest_find(&in->digests, t, 0, NULL);
        char hex[65];
        if (!d)
            return -1;
        sha256_hex(hex, d->sha256);
        ptc__cj_jobj_key(&o, "sha256");
        bad |= ptc__cj_out_cstr(in, hex) < 0;
    }
    ptc__cj_jobj_close(&o);
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

    ptc__cj_json_member(in, &nmembers, "file");
    bad |= ptc__cj_json_write(in, ptc__cj_json_cstr(in->p.file), 1);
    ptc__cj_json_member(in, &nmembers, "format");
    bad |= ptc__cj_json_write(in, json_string(format_name(c)), 1);
    ptc__cj_json_member(in, &nmembers, "prefix");
    bad |= ptc__cj_json_write(in, ptc__cj_json_cstr(ptc_ckpt_prefix(c)), 1);
    ptc__cj_json_member(in, &nmembers, "byteorder");
    bad |= ptc__cj_json_write(in, ptc__cj_json_cstr(ptc_ckpt_byteorder(c)), 1);

    if (!bad && ptc_ckpt_format(c) == PTC_FORMAT_ZIP) {
        ptc__cj_json_stream_open(in, &a, &nmembers, "records");
        for (size_t i = 0; !bad && i < ptc_ckpt_nrecords(c); i++) {
            jobj o = {.in = in, .depth = ptc__cj_json_stream_next(&a)};
            ptc__cj_jobj_key(&o, "name");
            bad |= ptc__cj_out_cstr(in, ptc_ckpt_record_name(c, i));
            ptc__cj_jobj_key(&o, "size");
            ptc__cj_out_u64(in, ptc_ckpt_record_size(c, i));
            ptc__cj_jobj_close(&o);
            bad |= in->wrc < 0 ? -1 : 0;
        }
        ptc__cj_json_stream_close(&a);
    }

    if (!bad) {
        ptc__cj_json_stream_open(in, &a, &nmembers, "storages");
        for (size_t i = 0; !bad && i < ptc_ckpt_nstorages(c); i++) {
            const ptc_storage *s = ptc_ckpt_storage(c, i);
            if (!s)
                continue;
            jobj o = {.in = in, .depth = ptc__cj_json_stream_next(&a)};
            ptc__cj_jobj_key(&o, "key");
            bad |= ptc__cj_out_cstr(in, ptc_storage_key(s));
            ptc__cj_jobj_key(&o, "dtype");
            bad |= ptc__cj_out_cstr(in, ptc_dtype_name(ptc_storage_dtype(s)));
            ptc__cj_jobj_key(&o, "nbytes");
            ptc__cj_out_i64(in, ptc_storage_nbytes(s));
            ptc__cj_jobj_key(&o, "location");
            bad |= ptc__cj_out_cstr(in, ptc_storage_location(s));
            ptc__cj_jobj_key(&o, "mapped");
            ptc__cj_out_bool(in, ptc_storage_is_mapped(s));
            ptc__cj_jobj_close(&o);
            bad |= in->wrc < 0 ? -1 : 0;
        }
        ptc__cj_json_stream_close(&a);
    }

    if (!bad) {
        ptc__cj_json_stream_open(in, &a, &nmembers, "tensors");
        if (in->ntrows > 0)
            bad |= write_entries(in, JW_TENSORS, &a) < 0;
        ptc__cj_json_stream_close(&a);
    }

    if (!bad && in->p.values) {
        ptc__cj_json_stream_open(in, &a, &nmembers, "values");
        if (scan->nvalues > 0)
            bad |= write_entries(in, JW_VALUES, &a) < 0;
        ptc__cj_json_stream_close(&a);
    }
    if (!bad && in->p.values) {
        ptc__cj_json_stream_open(in, &a, &nmembers, "metadata");
        if (scan->nmeta > 0)
            bad |= write_entries(in, JW_METADATA, &a) < 0;
        ptc__cj_json_stream_close(&a);
    }
    if (!bad && in->p.values && scan->truncated) {
        ptc__cj_json_member(in, &nmembers, "values_truncated");
        bad |= ptc__cj_json_write(in, json_true(), 1);
    }

    if (!bad) {
        /* Counted as if every {"$ref"} were written out in full (as ptc_walk reports them). */
        ptc__cj_json_member(in, &nmembers, "totals");
        jobj o = {.in = in, .depth = 1};
        ptc__cj_jobj_key(&o, "tensors");
        ptc__cj_out_u64(in, in->tot_tensors);
        ptc__cj_jobj_key(&o, "elements");
        ptc__cj_out_u64(in, in->tot_numel);
        ptc__cj_jobj_key(&o, "nbytes");
        ptc__cj_out_u64(in, in->tot_bytes);
        ptc__cj_jobj_close(&o);
        bad |= in->wrc < 0 ? -1 : 0;
    }

    if (!bad) {
        ptc__cj_json_newline(in, 0);
        ptc__cj_out_s(in, "}\n");
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
    ptc__cj_out_flush(in); /* what was written stays written, even when the document stops short */
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
