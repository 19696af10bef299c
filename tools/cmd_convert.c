/*
 * cmd_convert.c - `ptc convert IN OUT [options]`: rewrite a checkpoint, optionally as safetensors,
 * optionally narrowed to one state dict, with renamed keys, fewer tensors or another float dtype.
 *
 * The input is opened under the default policy (nothing from the file runs) and its tree is
 * rebuilt in a ptc_doc only where something changes: every unchanged subtree, tensor and storage is
 * borrowed from the open checkpoint and written as it was read, so dict kinds (OrderedDict stays
 * OrderedDict), attributes (a state dict's _metadata), non-tensor values and storage sharing all
 * survive. With no option that changes anything the checkpoint's root is saved as it is (a legacy
 * file becomes torch's zip format).
 *
 * Order of the steps, each documented in ptc-convert(1):
 *   1. --state-dict KEY replaces the root by root[KEY] (dotted keys follow nested dicts); with
 *      --salvage, IN is read symbolically (PTC_OPEN_SALVAGE) and the root becomes what
 *      ptc_salvage_state_dict gives for the module --state-dict PATH names: its state_dict();
 *   2. --strip-prefix, then --add-prefix, rename the keys of the root dict and its _metadata,
 *      --strip-prefix exactly as torch 2.6's consume_prefix_in_state_dict_if_present does;
 *   3. --select / --exclude keep or drop tensors by the path ptc_walk reports in the renamed tree;
 *   4. --dtype casts floating tensors. A storage is cast once and every tensor viewing it becomes
 *      the same view of the cast storage, so views stay views; tensors with the neg bit, or whose
 *      dtype differs from their storage's, are cast one by one (ptc_doc_cast).
 * The tree is a DAG (a list may be referenced twice); rebuilt nodes are memoized by identity so a
 * shared node stays shared, except under --select/--exclude, whose result depends on the path.
 *
 * The output is written by ptc_save, which is atomic: on any failure an existing OUT is untouched.
 *
 * Work budget (ptc_budget, --budget BYTES): every node the rebuild visits is charged, every cast
 * its bytes read and written, and ptc_save the bytes of tensor data the output will hold before
 * it creates anything: safetensors stores each tensor contiguously (numel x element size, so a
 * stride-0 view of one element expanded to 2^40 would be 4 TiB and is refused), torch's zip
 * format each storage once as it is. While OUT is written a SIGINT, SIGTERM or SIGHUP first
 * removes the temporary file (ptc_save_remove_temporaries), then ends the process as the signal
 * would; where the file system has O_TMPFILE the file has no name until it is complete, so even
 * SIGKILL leaves nothing.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <getopt.h>
#include <regex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VISITS   (1u << 24) /* nodes one rebuild visits: the library's max_objects default */
#define MAX_PATTERNS 64         /* --select and --exclude options, each */
#define LIST_KEYS    8          /* keys named in a message about a dict */

struct options {
    const char *in, *out;
    ptc_save_format format;
    int cast;
    ptc_dtype dtype;
    const char *strip, *add;
    const char *state_dict;
    int salvage; /* --salvage */
    const char *map_location;
    regex_t select[MAX_PATTERNS], exclude[MAX_PATTERNS];
    size_t nselect, nexclude;
    int progress;    /* CLI_PROGRESS_* */
    uint64_t budget; /* --budget BYTES; 0: the default */
};

static const char usage_text[] =
    "usage: ptc convert [options] IN OUT\n"
    "\n"
    "Write checkpoint IN (torch zip, legacy or safetensors) to OUT in torch.save's zip format or\n"
    "as safetensors, keeping everything it holds (dict kinds, _metadata, non-tensor values,\n"
    "tensors that share a storage) except what the options change. Nothing from IN is ever run.\n"
    "\n"
    "Options:\n"
    "  --to FORMAT         pth or safetensors (default: from OUT's extension, .safetensors\n"
    "                      or .pth, .pt, .bin for torch's zip format)\n"
    "  --state-dict KEY    write root[KEY] instead of the whole checkpoint; a dotted KEY\n"
    "                      follows nested dicts when the root has no such key\n"
    "  --salvage           read IN symbolically, never running its classes (torch.save(model),\n"
    "                      YOLO's {'model': ...}), and write module.state_dict() of the module\n"
    "                      --state-dict PATH names (model, ema, model.module; default: the\n"
    "                      root, root['model'], the first module or state dict; see\n"
    "                      ptc-convert(1))\n"
    "  --strip-prefix P    remove P from the keys of the root dict that start with it (DDP's\n"
    "                      'module.') and from its _metadata, as torch's\n"
    "                      consume_prefix_in_state_dict_if_present does\n"
    "  --add-prefix P      put P before every key of the root dict (after --strip-prefix)\n"
    "  --select REGEX      keep only tensors whose path matches REGEX (POSIX extended)\n"
    "  --exclude REGEX     drop tensors whose path matches REGEX (both repeatable)\n"
    "  --dtype DTYPE       cast floating-point tensors to float32, float16 or bfloat16\n"
    "  --map-location DEV  save every storage as on device DEV (cpu, cuda:0, mps, ...), as\n"
    "                      torch.load's map_location would place it; default: where it was\n"
    "  --budget BYTES      bytes of tensor data the conversion may read and write (casts\n"
    "                      and the output; K, M, G, T suffixes); default 64 x IN's size +\n"
    "                      1 GiB. safetensors writes every tensor contiguously, so a view\n"
    "                      larger than its storage costs its full size\n"
    "  --progress          show progress even when stderr is not a terminal\n"
    "  --no-progress       never show progress\n"
    "  -h, --help          show this help\n";

/* ---- small helpers -------------------------------------------------------------------------- */

/* Reports a refusal whose text is in b (file text already escaped); CLI_EXIT_NOMEM if b ran out
 * of memory while it was built. */
static int refuse_buf(cli_buf *b, int status)
{
    if (b->oom) {
        cli_buf_free(b);
        cli_error("out of memory");
        return CLI_EXIT_NOMEM;
    }
    cli_error("%s", cli_buf_str(b));
    cli_buf_free(b);
    return status;
}

/* The text of a str key, or NULL when key is not a str. */
static const char *key_str(const ptc_value *key, size_t *len)
{
    const char *s;
    if (!key || ptc_value_kind_of(key) != PTC_VALUE_STR || ptc_value_str(key, &s, len) < 0)
        return NULL;
    return s;
}

/* Appends "'k1', 'k2', ... (N keys)" for the first keys of dict v, escaped. */
static void list_keys(cli_buf *b, const ptc_value *v)
{
    size_t n = ptc_value_len(v);
    for (size_t i = 0; i < n && i < LIST_KEYS; i++) {
        cli_buf key = {0};
        cli_key_text(&key, ptc_dict_key(v, i));
        cli_buf_puts(b, i ? ", '" : "'");
        cli_buf_msg_name(b, cli_buf_str(&key), key.len);
        cli_buf_puts(b, "'");
        if (key.oom)
            b->oom = 1;
        cli_buf_free(&key);
    }
    if (n > LIST_KEYS)
        cli_buf_printf(b, ", ... (%zu keys)", n);
    if (n == 0)
        cli_buf_puts(b, "none");
}

/* "a dict", "an int": kind names with their article, for messages. */
static void put_kind(cli_buf *b, const ptc_value *v)
{
    const char *k = ptc_value_kind_name(ptc_value_kind_of(v));
    cli_buf_printf(b, "%s %s", strchr("aeiou", k[0]) ? "an" : "a", k);
}

static int is_floating(ptc_dtype dt)
{
    return dt == PTC_FLOAT64 || dt == PTC_FLOAT32 || dt == PTC_FLOAT16 || dt == PTC_BFLOAT16;
}

/* Identity map from a node of the input (value or storage) to its counterpart in the output;
 * open addressing, grown at half load. */
typedef struct ptrmap {
    const void **keys;
    const void **vals;
    size_t n, cap;
} ptrmap;

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static int ptrmap_get(const ptrmap *m, const void *k, const void **v)
{
    if (!m->cap)
        return 0;
    for (size_t i = ptr_hash(k, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k) {
            *v = m->vals[i];
            return 1;
        }
    }
    return 0;
}

static int ptrmap_put(ptrmap *m, const void *k, const void *v)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        const void **nk = calloc(cap, sizeof *nk), **nv = calloc(cap, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return PTC_ENOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = ptr_hash(m->keys[i], cap);
            while (nk[j])
                j = (j + 1) & (cap - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = cap;
    }
    size_t i = ptr_hash(k, m->cap);
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = k;
    m->vals[i] = v;
    return 0;
}

static void ptrmap_free(ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- --state-dict --------------------------------------------------------------------------- */

/* root[key] when root is a dict with that str key; otherwise, for a dotted key, the first split
 * "head.rest" (left to right) whose head names a nested dict holding rest. */
static const ptc_value *lookup_key(const ptc_value *root, const char *key)
{
    if (ptc_value_kind_of(root) != PTC_VALUE_DICT)
        return NULL;
    const ptc_value *v = ptc_dict_get(root, key);
    if (v)
        return v;
    for (const char *dot = strchr(key, '.'); dot; dot = strchr(dot + 1, '.')) {
        size_t n = (size_t)(dot - key);
        char *head = malloc(n + 1);
        if (!head)
            return NULL;
        memcpy(head, key, n);
        head[n] = '\0';
        const ptc_value *sub = ptc_dict_get(root, head);
        free(head);
        if (sub && ptc_value_kind_of(sub) == PTC_VALUE_DICT && (v = lookup_key(sub, dot + 1)))
            return v;
    }
    return NULL;
}

static int select_state_dict(const struct options *opt, const ptc_value **root)
{
    const ptc_value *v = lookup_key(*root, opt->state_dict);
    if (v) {
        *root = v;
        return CLI_EXIT_OK;
    }
    cli_buf b = {0};
    cli_buf_puts(&b, "--state-dict: ");
    if (ptc_value_kind_of(*root) != PTC_VALUE_DICT) {
        cli_buf_puts(&b, "the checkpoint's root is ");
        put_kind(&b, *root);
        cli_buf_puts(&b, ", not a dict");
    } else {
        cli_buf_puts(&b, "no key '");
        cli_buf_escape(&b, opt->state_dict, strlen(opt->state_dict), 0);
        cli_buf_puts(&b, "' in the checkpoint (its keys: ");
        list_keys(&b, *root);
        cli_buf_puts(&b, ")");
    }
    return refuse_buf(&b, CLI_EXIT_REFUSED);
}

/* ---- --strip-prefix / --add-prefix ----------------------------------------------------------
 * ptc_state_dict_rename (torch 2.6's consume_prefix_in_state_dict_if_present, on the root dict and
 * its _metadata); a --strip-prefix that matches no key is worth a warning. */
static int rename_root(const struct options *opt, ptc_doc *d, const ptc_value **root,
                       ptc_error *err)
{
    int matched = 0;
    int rc = ptc_state_dict_rename(d, *root, opt->strip, opt->add, root, &matched, err);
    if (rc < 0)
        return rc;
    if (opt->strip && !matched) {
        cli_buf b = {0};
        cli_buf_puts(&b, "warning: no key starts with '");
        cli_buf_escape(&b, opt->strip, strlen(opt->strip), 0);
        cli_buf_puts(&b, "'; nothing to strip");
        if (!b.oom)
            cli_error("%s", cli_buf_str(&b));
        cli_buf_free(&b);
    }
    return 0;
}

/* ---- --select / --exclude / --dtype --------------------------------------------------------- */

typedef struct conv {
    const struct options *opt;
    ptc_doc *d;
    ptc_error *err;
    cli_buf path;
    int filtering;   /* --select or --exclude: results depend on the path */
    ptrmap memo;     /* input node -> its output node (containers, cast tensors) */
    ptrmap storages; /* input storage -> its cast copy */
    ptc_budget *budget;
    uint64_t visits;
    size_t ntensors, nkept, ncast;
    cli_progress progress;
} conv;

static int conv_fail(conv *cv, int code, const char *what)
{
    const ptc_error *de = ptc_doc_error(cv->d);
    if (de && de->code == code && de->message[0]) {
        *cv->err = *de;
    } else {
        cv->err->code = code;
        cv->err->offset = -1;
        cv->err->member[0] = '\0';
        snprintf(cv->err->message, sizeof cv->err->message, "%s: %s", what, ptc_strerror(code));
    }
    return code;
}

static int doc_code(conv *cv)
{
    const ptc_error *de = ptc_doc_error(cv->d);
    return de && de->code < 0 ? de->code : PTC_ENOMEM;
}

/* Whether the tensor at the current path is kept. */
static int keep_path(const conv *cv)
{
    const struct options *opt = cv->opt;
    const char *p = cli_buf_str(&cv->path);
    int keep = opt->nselect == 0;
    for (size_t i = 0; !keep && i < opt->nselect; i++)
        keep = regexec(&opt->select[i], p, 0, NULL, 0) == 0;
    for (size_t i = 0; keep && i < opt->nexclude; i++)
        keep = regexec(&opt->exclude[i], p, 0, NULL, 0) != 0;
    return keep;
}

/* A storage can be cast as a whole when the tensor is an ordinary view of it. */
static int storage_castable(const ptc_tensor *t, const ptc_storage *s)
{
    ptc_dtype dt = ptc_tensor_dtype(t);
    size_t es = ptc_dtype_size(dt);
    return s && !ptc_tensor_is_neg(t) && !ptc_tensor_is_conj(t) && ptc_storage_dtype(s) == dt &&
           es > 0 && ptc_storage_nbytes(s) >= 0 && ptc_storage_nbytes(s) % (int64_t)es == 0;
}

/* Charges a cast of n elements from one dtype to another: n x the source's size read, n x the
 * target's written. The refusal names the tensor's path and the bytes. */
static int charge_cast(conv *cv, uint64_t n, ptc_dtype from, ptc_dtype to, const char *what)
{
    uint64_t rd, wr, both;
    ptc_error e = {0};
    int rc;
    if (__builtin_mul_overflow(n, (uint64_t)ptc_dtype_size(from), &rd) ||
        __builtin_mul_overflow(n, (uint64_t)ptc_dtype_size(to), &wr) ||
        __builtin_add_overflow(rd, wr, &both))
        both = UINT64_MAX;
    if ((rc = ptc_budget_charge(cv->budget, 0, both, &e)) == 0)
        return 0;
    cv->err->code = rc;
    cv->err->offset = -1;
    cv->err->member[0] = '\0';
    /* Truncated, if ever, at the end of the budget's own message. */
    if (snprintf(cv->err->message, sizeof cv->err->message,
                 "--dtype: casting '%.120s' (%s: %llu elements of %s to %s) reads and writes %llu "
                 "bytes: %s",
                 cli_buf_str(&cv->path), what, (unsigned long long)n, ptc_dtype_name(from),
                 ptc_dtype_name(to), (unsigned long long)both, e.message) < 0)
        cv->err->message[0] = '\0';
    return rc;
}

static int cast_tensor(conv *cv, const ptc_value *v, const ptc_value **out)
{
    const ptc_tensor *t = ptc_value_tensor(v);
    ptc_dtype to = cv->opt->dtype;
    *out = v;
    if (!t || !cv->opt->cast || !is_floating(ptc_tensor_dtype(t)) || ptc_tensor_dtype(t) == to)
        return 0;
    const void *done;
    if (ptrmap_get(&cv->memo, v, &done)) {
        *out = done;
        return 0;
    }
    const ptc_storage *s = ptc_tensor_storage(t);
    const ptc_value *nv;
    if (storage_castable(t, s)) {
        const void *cs;
        if (!ptrmap_get(&cv->storages, s, &cs)) {
            /* The whole storage as one 1-d tensor, cast once; its views follow below. */
            ptc_dtype dt = ptc_tensor_dtype(t);
            int64_t n = ptc_storage_nbytes(s) / (int64_t)ptc_dtype_size(dt);
            if (charge_cast(cv, (uint64_t)n, dt, to, "its storage") < 0)
                return cv->err->code;
            const ptc_value *whole = ptc_doc_tensor(cv->d, s, dt, 1, &n, NULL, 0, 0);
            const ptc_value *cw = whole ? ptc_doc_cast(cv->d, ptc_value_tensor(whole), to) : NULL;
            if (!cw)
                return conv_fail(cv, doc_code(cv), "casting a storage");
            cs = ptc_tensor_storage(ptc_value_tensor(cw));
            if (ptrmap_put(&cv->storages, s, cs) < 0)
                return conv_fail(cv, PTC_ENOMEM, "casting");
        }
        nv = ptc_doc_tensor(cv->d, cs, to, ptc_tensor_ndim(t), ptc_tensor_shape(t),
                            ptc_tensor_stride(t), ptc_tensor_storage_offset(t),
                            ptc_tensor_requires_grad(t));
        if (nv && ptc_tensor_is_parameter(t))
            nv = ptc_doc_parameter(cv->d, nv, ptc_tensor_requires_grad(t));
    } else {
        /* One by one: the view's every element is read and written, however small its storage
         * (a stride-0 expand with the neg bit is numel elements, not one). */
        if (charge_cast(cv, (uint64_t)ptc_tensor_numel(t), ptc_tensor_dtype(t), to,
                        "the view, element by element") < 0)
            return cv->err->code;
        nv = ptc_doc_cast(cv->d, t, to);
    }
    if (!nv)
        return conv_fail(cv, doc_code(cv), "casting a tensor");
    if (ptrmap_put(&cv->memo, v, nv) < 0)
        return conv_fail(cv, PTC_ENOMEM, "casting");
    cv->ncast++;
    *out = nv;
    return 0;
}

static int transform(conv *cv, const ptc_value *v, int has_path, const ptc_value **out);

/* Rebuilds a container when one of its items changed; *out is v itself otherwise. Dict, list and
 * tuple items carry paths (as in ptc_walk); set items do not, so their tensors are never
 * filtered, only cast. */
static int transform_container(conv *cv, const ptc_value *v, int has_path, const ptc_value **out)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    int dict = k == PTC_VALUE_DICT, item_path = has_path && k != PTC_VALUE_SET;
    size_t n = ptc_value_len(v), base = cv->path.len;
    ptc_value *nc = NULL;
    int rc = 0;

    for (size_t i = 0; i < n && rc == 0; i++) {
        const ptc_value *item = dict ? ptc_dict_value(v, i) : ptc_value_item(v, i), *ni;
        if (!item)
            continue;
        if (item_path) {
            /* As ptc_walk: no separator after an empty path (the root's, or an empty key's). */
            cli_buf_truncate(&cv->path, base);
            if (base > 0)
                cli_buf_puts(&cv->path, ".");
            if (dict)
                cli_key_text(&cv->path, ptc_dict_key(v, i));
            else
                cli_buf_printf(&cv->path, "%zu", i);
            if (cv->path.oom)
                return conv_fail(cv, PTC_ENOMEM, "building a path");
            if (cli_path_check(cv->path.len, 0, cv->err) < 0)
                return PTC_ELIMIT;
        }
        rc = transform(cv, item, item_path, &ni);
        if (rc < 0)
            break;
        if (ni != item && !nc) {
            /* The first change: copy the items before it into a new container. */
            nc = dict ? ptc_doc_dict(cv->d, ptc_dict_is_ordered(v)) : ptc_doc_seq(cv->d, k);
            for (size_t j = 0; nc && rc == 0 && j < i; j++)
                rc = dict ? ptc_doc_set(cv->d, nc, ptc_dict_key(v, j), ptc_dict_value(v, j))
                          : ptc_doc_push(cv->d, nc, ptc_value_item(v, j));
            if (!nc || rc < 0)
                return conv_fail(cv, doc_code(cv), "rebuilding a container");
            if (dict && ptc_dict_attrs(v) && ptc_doc_set_attrs(cv->d, nc, ptc_dict_attrs(v)) < 0)
                return conv_fail(cv, doc_code(cv), "rebuilding a container");
        }
        if (nc && ni) {
            rc =
                dict ? ptc_doc_set(cv->d, nc, ptc_dict_key(v, i), ni) : ptc_doc_push(cv->d, nc, ni);
            if (rc < 0)
                return conv_fail(cv, doc_code(cv), "rebuilding a container");
        }
    }
    cli_buf_truncate(&cv->path, base);
    *out = nc ? nc : v;
    return rc;
}

/* The output counterpart of v: v itself when unchanged, a new node when something beneath it
 * changed, NULL for a tensor the filters drop. */
static int transform(conv *cv, const ptc_value *v, int has_path, const ptc_value **out)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    const void *memo;
    int rc;

    *out = v;
    if (++cv->visits > MAX_VISITS)
        return conv_fail(cv, PTC_ELIMIT,
                         "the tree has more than 16777216 nodes once shared "
                         "nodes are counted each time");
    if ((rc = ptc_budget_charge(cv->budget, 1, 0, cv->err)) < 0)
        return rc;
    if (k == PTC_VALUE_TENSOR) {
        cv->ntensors++;
        cli_progress_update(&cv->progress, cv->ntensors);
        if (has_path && cv->filtering && !keep_path(cv)) {
            *out = NULL;
            return 0;
        }
        cv->nkept++;
        return cast_tensor(cv, v, out);
    }
    if (k != PTC_VALUE_DICT && k != PTC_VALUE_LIST && k != PTC_VALUE_TUPLE && k != PTC_VALUE_SET)
        return 0;
    /* Under --select/--exclude a shared container may be filtered differently on each path to
     * it, so it is rebuilt for each; otherwise once. */
    if (!cv->filtering && ptrmap_get(&cv->memo, v, &memo)) {
        *out = memo;
        return 0;
    }
    rc = transform_container(cv, v, has_path, out);
    if (rc == 0 && !cv->filtering && ptrmap_put(&cv->memo, v, *out) < 0)
        return conv_fail(cv, PTC_ENOMEM, "rebuilding");
    return rc;
}

/* Number of tensors ptc_walk reports, for the progress line; 0 (unknown) past the node budget,
 * which the rebuild itself then reports. */
static uint64_t count_tensors(const ptc_value *root, const ptc_budget *budget)
{
    ptc_walk *w = NULL;
    const char *path;
    const ptc_tensor *t;
    uint64_t n = 0;
    ptc_budget b = *budget;
    if (ptc_walk_new(&w, root, NULL) < 0)
        return 0;
    ptc_walk_set_budget(w, &b);
    int rc;
    while ((rc = ptc_walk_next(w, &path, &t)) > 0)
        n++;
    ptc_walk_free(w);
    return rc < 0 ? 0 : n;
}

static int filter_and_cast(const struct options *opt, ptc_doc *d, ptc_budget *budget,
                           const ptc_value **root, ptc_error *err)
{
    conv cv = {.opt = opt,
               .d = d,
               .err = err,
               .budget = budget,
               .filtering = opt->nselect || opt->nexclude};
    const ptc_value *out = NULL;
    cli_progress_start_mode(&cv.progress, opt->cast ? "casting tensors" : "selecting tensors",
                            opt->progress == CLI_PROGRESS_NEVER ? 0 : count_tensors(*root, budget),
                            opt->progress);
    int rc = transform(&cv, *root, 1, &out);
    cli_progress_end(&cv.progress);
    ptrmap_free(&cv.memo);
    ptrmap_free(&cv.storages);
    cli_buf_free(&cv.path);
    if (rc < 0)
        return rc;
    if (!out) {
        snprintf(err->message, sizeof err->message,
                 "the checkpoint is a single tensor and the filters drop it: nothing to write");
        return err->code = PTC_ENOTFOUND;
    }
    if (cv.filtering && cv.nkept == 0 && cv.ntensors > 0)
        cli_error("warning: --select/--exclude dropped every tensor (%zu)", cv.ntensors);
    *root = out;
    return 0;
}

/* ---- safetensors ---------------------------------------------------------------------------- */

/* safetensors holds one flat dict of str to tensor. Anything else is refused with a hint: the
 * keys of the root whose values are dicts (the state dicts a training checkpoint holds). */
static int check_flat(const struct options *opt, const ptc_value *root)
{
    const char *problem = NULL;
    size_t bad = 0, n = ptc_value_len(root);
    if (ptc_value_kind_of(root) != PTC_VALUE_DICT) {
        problem = "root";
    } else {
        for (bad = 0; bad < n; bad++) {
            const ptc_value *k = ptc_dict_key(root, bad), *x = ptc_dict_value(root, bad);
            size_t len;
            if (!key_str(k, &len) || ptc_value_kind_of(x) != PTC_VALUE_TENSOR) {
                problem = "entry";
                break;
            }
        }
    }
    if (!problem)
        return CLI_EXIT_OK;

    cli_buf b = {0};
    cli_buf_puts(&b, "safetensors holds a flat dict of str to tensor, but ");
    if (strcmp(problem, "root") == 0) {
        cli_buf_printf(&b, "the %s is ", opt->state_dict ? "state dict" : "checkpoint");
        put_kind(&b, root);
    } else {
        const ptc_value *k = ptc_dict_key(root, bad), *x = ptc_dict_value(root, bad);
        cli_buf kt = {0};
        cli_key_text(&kt, k);
        cli_buf_puts(&b, "entry '");
        cli_buf_msg_name(&b, cli_buf_str(&kt), kt.len);
        b.oom |= kt.oom;
        cli_buf_free(&kt);
        if (ptc_value_kind_of(k) != PTC_VALUE_STR) {
            cli_buf_puts(&b, "' has a key that is ");
            put_kind(&b, k);
        } else {
            cli_buf_puts(&b, "' is ");
            put_kind(&b, x);
        }
    }
    /* Candidates for --state-dict: dict values of the root. */
    int first = 1;
    for (size_t i = 0; ptc_value_kind_of(root) == PTC_VALUE_DICT && i < n; i++) {
        const ptc_value *x = ptc_dict_value(root, i);
        if (ptc_value_kind_of(x) != PTC_VALUE_DICT || ptc_value_len(x) == 0)
            continue;
        /* Named as --state-dict would take them: below the state dict already chosen. */
        cli_buf kt = {0};
        if (opt->state_dict)
            cli_buf_printf(&kt, "%s.", opt->state_dict);
        cli_key_text(&kt, ptc_dict_key(root, i));
        cli_buf_puts(&b, first ? "; choose a state dict with --state-dict KEY (" : ", ");
        cli_buf_msg_name(&b, cli_buf_str(&kt), kt.len);
        b.oom |= kt.oom;
        cli_buf_free(&kt);
        first = 0;
    }
    cli_buf_puts(&b, first ? "; choose one with --state-dict KEY, or narrow the tensors with "
                             "--select/--exclude"
                           : ")");
    return refuse_buf(&b, CLI_EXIT_REFUSED);
}

/* ---- the command ---------------------------------------------------------------------------- */

static void save_progress(void *ctx, uint64_t done, uint64_t total)
{
    cli_progress *p = ctx;
    p->total = total;
    cli_progress_update(p, done);
}

/* Output format from --to or the extension of OUT. */
static int out_format(const char *to, const char *out, ptc_save_format *f)
{
    if (to) {
        if (strcmp(to, "pth") == 0)
            *f = PTC_SAVE_PTH;
        else if (strcmp(to, "safetensors") == 0)
            *f = PTC_SAVE_SAFETENSORS;
        else
            return cli_usage_error("--to takes pth or safetensors");
        return CLI_EXIT_OK;
    }
    const char *base = strrchr(out, '/');
    const char *dot = strrchr(base ? base + 1 : out, '.');
    if (dot && strcmp(dot, ".safetensors") == 0)
        *f = PTC_SAVE_SAFETENSORS;
    else if (dot &&
             (strcmp(dot, ".pth") == 0 || strcmp(dot, ".pt") == 0 || strcmp(dot, ".bin") == 0))
        *f = PTC_SAVE_PTH;
    else
        return cli_usage_error("cannot tell the output format from the name of OUT; give "
                               "--to pth or --to safetensors");
    return CLI_EXIT_OK;
}

static int add_pattern(regex_t *set, size_t *n, const char *opt, const char *re)
{
    if (*n == MAX_PATTERNS)
        return cli_usage_error("at most %d %s options", MAX_PATTERNS, opt);
    int rc = regcomp(&set[*n], re, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[256];
        regerror(rc, &set[*n], msg, sizeof msg);
        return cli_usage_error("%s: bad regular expression: %s", opt, msg);
    }
    (*n)++;
    return CLI_EXIT_OK;
}

static void free_options(struct options *opt)
{
    for (size_t i = 0; i < opt->nselect; i++)
        regfree(&opt->select[i]);
    for (size_t i = 0; i < opt->nexclude; i++)
        regfree(&opt->exclude[i]);
    opt->nselect = opt->nexclude = 0;
}

static int parse_options(int argc, char **argv, struct options *opt, int *done)
{
    enum {
        OPT_TO = 256,
        OPT_DTYPE,
        OPT_STRIP,
        OPT_ADD,
        OPT_SELECT,
        OPT_EXCLUDE,
        OPT_STATE_DICT,
        OPT_PROGRESS,
        OPT_NO_PROGRESS,
        OPT_MAP_LOCATION,
        OPT_BUDGET,
        OPT_SALVAGE
    };
    static const struct option longopts[] = {
        {"to", required_argument, NULL, OPT_TO},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"strip-prefix", required_argument, NULL, OPT_STRIP},
        {"add-prefix", required_argument, NULL, OPT_ADD},
        {"select", required_argument, NULL, OPT_SELECT},
        {"exclude", required_argument, NULL, OPT_EXCLUDE},
        {"state-dict", required_argument, NULL, OPT_STATE_DICT},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"map-location", required_argument, NULL, OPT_MAP_LOCATION},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"salvage", no_argument, NULL, OPT_SALVAGE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *to = NULL;
    int ch, status;
    *done = 0;
    opt->progress = CLI_PROGRESS_AUTO;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case OPT_TO:
            to = optarg;
            break;
        case OPT_DTYPE:
            if (ptc_dtype_from_name(optarg, &opt->dtype) < 0 ||
                (opt->dtype != PTC_FLOAT32 && opt->dtype != PTC_FLOAT16 &&
                 opt->dtype != PTC_BFLOAT16))
                return cli_usage_error("--dtype takes float32, float16 or bfloat16");
            opt->cast = 1;
            break;
        case OPT_STRIP:
        case OPT_ADD:
            /* Keys are str (UTF-8); a prefix that is not could never match or be written. */
            if (!ptc_utf8_valid(optarg, strlen(optarg)))
                return cli_usage_error("%s: the prefix is not valid UTF-8",
                                       ch == OPT_STRIP ? "--strip-prefix" : "--add-prefix");
            if (ch == OPT_STRIP)
                opt->strip = optarg;
            else
                opt->add = optarg;
            break;
        case OPT_SELECT:
            if ((status = add_pattern(opt->select, &opt->nselect, "--select", optarg)) != 0)
                return status;
            break;
        case OPT_EXCLUDE:
            if ((status = add_pattern(opt->exclude, &opt->nexclude, "--exclude", optarg)) != 0)
                return status;
            break;
        case OPT_STATE_DICT:
            opt->state_dict = optarg;
            break;
        case OPT_SALVAGE:
            opt->salvage = 1;
            break;
        case OPT_PROGRESS:
            opt->progress = CLI_PROGRESS_ALWAYS;
            break;
        case OPT_NO_PROGRESS:
            opt->progress = CLI_PROGRESS_NEVER;
            break;
        case OPT_MAP_LOCATION:
            opt->map_location = optarg;
            break;
        case OPT_BUDGET:
            if ((status = cli_parse_budget(optarg, &opt->budget)) != CLI_EXIT_OK)
                return status;
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
    if (argc - optind < 2)
        return cli_usage_error(argc - optind ? "no output file given" : "no input file given");
    if (argc - optind > 2)
        return cli_usage_error("one input and one output file (%d files given)", argc - optind);
    opt->in = argv[optind];
    opt->out = argv[optind + 1];
    if (!*opt->in || !*opt->out)
        return cli_usage_error("empty file name");
    return out_format(to, opt->out, &opt->format);
}

/* ---- signals while OUT is written ------------------------------------------------------------
 * The handler removes the named temporary file (async-signal-safe: unlink only), restores the
 * default action and re-raises, so that the process ends as the signal would have ended it. A
 * signal the caller ignored (nohup) stays ignored. */
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NCLEANUP (sizeof cleanup_signals / sizeof cleanup_signals[0])

static void on_signal(int sig)
{
    ptc_save_remove_temporaries();
    signal(sig, SIG_DFL);
    raise(sig); /* blocked in the handler; delivered, by the default action, on return */
}

static void cleanup_on_signals(struct sigaction *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NCLEANUP; i++)
        sigaddset(&sa.sa_mask, cleanup_signals[i]);
    for (size_t i = 0; i < NCLEANUP; i++) {
        if (sigaction(cleanup_signals[i], NULL, &old[i]) == 0 && old[i].sa_handler != SIG_IGN)
            sigaction(cleanup_signals[i], &sa, NULL);
    }
}

static void restore_signals(const struct sigaction *old)
{
    for (size_t i = 0; i < NCLEANUP; i++)
        sigaction(cleanup_signals[i], &old[i], NULL);
}

int cmd_convert(int argc, char **argv)
{
    struct options opt;
    ptc_ckpt *c = NULL;
    ptc_doc *d = NULL;
    ptc_open_params params;
    ptc_error err;
    int done, rc;

    memset(&opt, 0, sizeof opt);
    int status = parse_options(argc, argv, &opt, &done);
    if (status != CLI_EXIT_OK || done) {
        free_options(&opt);
        return status;
    }

    memset(&err, 0, sizeof err);
    ptc_open_params_default(&params);
    if (opt.salvage)
        params.flags |= PTC_OPEN_SALVAGE;
    rc = ptc_ckpt_open(&c, opt.in, &params, &err);
    if (rc < 0) {
        status = cli_report(rc, &err);
        goto done;
    }
    const ptc_value *root = ptc_ckpt_root(c);
    if (!opt.salvage && opt.state_dict && (status = select_state_dict(&opt, &root)) != CLI_EXIT_OK)
        goto done;
    ptc_budget budget;
    ptc_budget_init(&budget, c, opt.budget);

    memset(&err, 0, sizeof err);
    if ((rc = ptc_doc_new(&d, &err)) < 0) {
        status = cli_report(rc, &err);
        goto done;
    }
    if (opt.salvage) {
        const ptc_value *pick, *name;
        if ((rc = ptc_salvage_state_dict(d, root, opt.state_dict, &budget, &root, NULL, &err)) <
                0 ||
            (rc = ptc_salvage_pick(d, ptc_ckpt_root(c), opt.state_dict, NULL, &pick, &name, &err)) <
                0) {
            status = cli_report_budget(rc, &err);
            goto done;
        }
        /* Which subtree was taken, as ptc inspect --salvage says it (both escaped). */
        const char *p, *cls = ptc_value_global_name(pick);
        size_t n;
        char path_text[256], cls_text[256];
        ptc_value_str(name, &p, &n);
        ptc_escape(path_text, sizeof path_text, p, n, 0);
        ptc_escape(cls_text, sizeof cls_text, cls ? cls : "", cls ? strlen(cls) : 0, 0);
        if (ptc_salvage_is_module(pick))
            cli_error("salvaging the module at '%s' (a %s)", path_text, cls_text);
        else
            cli_error("salvaging the state dict at '%s'", path_text);
    }
    if (opt.strip || opt.add) {
        if (ptc_value_kind_of(root) != PTC_VALUE_DICT) {
            cli_buf b = {0};
            cli_buf_printf(&b,
                           "--strip-prefix and --add-prefix rename the keys of a dict, but "
                           "the %s is ",
                           opt.state_dict ? "state dict" : "checkpoint");
            put_kind(&b, root);
            if (!opt.state_dict)
                cli_buf_puts(&b, "; choose a dict inside it with --state-dict KEY");
            status = refuse_buf(&b, CLI_EXIT_REFUSED);
            goto done;
        }
        if ((rc = rename_root(&opt, d, &root, &err)) < 0) {
            status = cli_report(rc, &err);
            goto done;
        }
    }
    if ((opt.nselect || opt.nexclude || opt.cast) &&
        (rc = filter_and_cast(&opt, d, &budget, &root, &err)) < 0) {
        status = cli_report_budget(rc, &err);
        goto done;
    }
    if (opt.format == PTC_SAVE_SAFETENSORS && (status = check_flat(&opt, root)) != CLI_EXIT_OK)
        goto done;

    ptc_save_params sp;
    cli_progress progress;
    ptc_save_params_default(&sp);
    sp.format = opt.format;
    sp.map_location = opt.map_location;
    sp.progress = save_progress;
    sp.progress_ctx = &progress;
    sp.budget = &budget;
    memset(&err, 0, sizeof err);
    struct sigaction old[NCLEANUP];
    cleanup_on_signals(old);
    cli_progress_start_mode(&progress, "writing", 0, opt.progress);
    rc = ptc_save(root, opt.out, &sp, &err);
    cli_progress_end(&progress);
    restore_signals(old);
    if (rc == PTC_EINVAL) {
        /* The options were checked: what ptc_save refuses is the tree itself (a symbolic value
         * the salvage read kept), a fact about the input file, not a usage error. */
        char out_text[256], msg[512];
        ptc_escape(out_text, sizeof out_text, opt.out, strlen(opt.out), 0);
        ptc_escape(msg, sizeof msg, err.message, strnlen(err.message, sizeof err.message), 0);
        cli_error("%s: not written: %s", out_text, msg);
        status = CLI_EXIT_REFUSED;
    } else {
        status = rc < 0 ? cli_report_budget(rc, &err) : CLI_EXIT_OK;
    }

done:
    ptc_doc_free(d);
    ptc_ckpt_close(c);
    free_options(&opt);
    return status;
}
