/*
 * cmd_inspect.c - `ptc inspect [--json] [--hash] [--no-values] FILE`: what a checkpoint holds.
 *
 * The file is opened through the public API under the default policy (nothing from the file ever
 * runs), then shown in two parts: the tensors, in the order ptc_walk_next reports them, with the
 * storage each one views and which of them share one; and the other values (ints, strings, None,
 * dtypes ...) found by ptc_walk_next_value, with the same path rules. Text output is for people;
 * --json prints the object ptc_ckpt_json writes (lib/pth/ckpt_json.c: its schema is in ptc.h and
 * ptc-inspect(1)), so that a C program gets the same document.
 *
 * Every byte that came from the file (keys, strings, storage keys, the prefix) is escaped before it
 * is printed (cli_escape_*).
 *
 * Each value is rendered by libptc's ptc_value_text (one line, depth-bounded), the renderer
 * ptc_ckpt_json uses too. The value walk is iterative and stops after MAX_VALUE_VISITS nodes, so
 * a file whose tree shares nodes many times over cannot make the listing run for ever.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NO_ROW           SIZE_MAX
#define MAX_VALUE_VISITS (1u << 22) /* nodes the value listing visits before it stops */
#define PATH_COL_MAX     60         /* widest path column; longer paths push their line out */

struct options {
    int json;
    int hash;
    int values;
    int salvage;     /* --salvage: the report of tools/cmd_salvage.c */
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

typedef struct inspect {
    const struct options *opt;
    ptc_ckpt *c;
    ptc_budget budget; /* every walk, rendering and hash below is charged to it */
    row *rows;         /* text output: the tensors */
    size_t nrows;
    size_t caprows;
} inspect;

/* The budget charged by ptc_value_text and the value walk, and
 * why it ran out (the CLI is single-threaded; cmd_inspect sets it and clears it). */
static ptc_budget *render_budget;
static ptc_error render_err;
static int render_failed;

/* 1 when rendering may go on: charges one node to the budget. */
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

/* The container's name as the JSON and text outputs spell it. */
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

static const char usage_text[] =
    "usage: ptc inspect [--json] [--hash] [--no-values] [--budget BYTES] FILE\n"
    "       ptc inspect --salvage [--json] [--budget BYTES] FILE\n"
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
    "  --salvage    read FILE even where it names classes outside the allowlist (a whole\n"
    "               model saved with torch.save(model)), symbolically, never running them: show\n"
    "               the state dict `ptc convert --salvage` would write, every class met with\n"
    "               its offset, and every global that would run code, as ptc verify finds them\n"
    "  --budget BYTES\n"
    "               tensor bytes that --hash may read (4G, 512M, ...; default 64 x the file's\n"
    "               size + 1 GiB); the nodes visited are bounded by 16 x the pickle's opcodes\n"
    "               + 1,000,000\n"
    "  -h, --help   show this help\n";

/* ---- cells of the tensor table -------------------------------------------------------------
 * A value of the file is rendered by ptc_value_text (one renderer, in libptc, shared with
 * ptc_ckpt_json); these two write the dtype, shape and storage cells of a tensor line. */

/* s (NULL: "?"), escaped with PTC_TEXT_ESCAPE in flags (text from the file), else as it is. */
static void render_text(cli_buf *b, const char *s, unsigned flags)
{
    if (!s)
        s = "?";
    if (flags & PTC_TEXT_ESCAPE)
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

/* ---- the value walk ------------------------------------------------------------------------- */

/* The text listing of the values (walk_values). */
typedef struct value_sink {
    size_t count;  /* lines emitted, metadata included */
    int truncated; /* stopped after MAX_VALUE_VISITS */
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

/* ptc_value_text's write function: appends to the cli_buf ctx. */
static int line_write(void *ctx, const void *p, size_t n)
{
    cli_buf *b = ctx;
    cli_buf_putn(b, p, n);
    return b->oom ? PTC_ENOMEM : 0;
}

static void emit_leaf(value_sink *out, const cli_buf *path, const ptc_value *v)
{
    out->count++;
    if (!render_charge_bytes(path->len)) /* the path written */
        return;
    cli_buf_truncate(&out->line, 0);
    ptc_error e;
    int rc = ptc_value_text(v, PTC_TEXT_ESCAPE, render_budget, line_write, &out->line, &e);
    if (rc == PTC_ENOMEM) {
        out->oom = 1;
        return;
    }
    if (rc < 0) { /* the budget ran out: nothing was written */
        render_err = e;
        render_failed = 1;
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

/* A tensor listed at several paths is hashed once (the rows are matched by tensor pointer); each
 * read is charged to the budget before a byte is read (ptc_tensor_sha256_charged). */

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
        rc = ptc_tensor_sha256_charged(r->t, &in->budget, r->path, r->sha256, err);
        cli_progress_update(&p, i + 1);
    }
    cli_progress_end(&p);
    free(first);
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
    render_text(&cell[COL_STORAGE], storage_key(s), PTC_TEXT_ESCAPE);
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
        value_sink out = {0};
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

/* ---- the command ---------------------------------------------------------------------------- */

static int parse_options(int argc, char **argv, struct options *opt, int *done)
{
    enum { OPT_JSON = 256, OPT_HASH, OPT_NO_VALUES, OPT_BUDGET, OPT_SALVAGE };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"hash", no_argument, NULL, OPT_HASH},
        {"no-values", no_argument, NULL, OPT_NO_VALUES},
        {"salvage", no_argument, NULL, OPT_SALVAGE},
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
        case OPT_SALVAGE:
            opt->salvage = 1;
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
    if (opt->salvage && (opt->hash || !opt->values))
        return cli_usage_error("--salvage lists no tensors: it takes no --hash or --no-values");
    return CLI_EXIT_OK;
}

/* ptc_ckpt_json's output: stdout (a write error is reported by cli_finish, as for every
 * command's output). */
static int write_stdout(void *ctx, const void *p, size_t n)
{
    fwrite(p, 1, n, ctx);
    return 0;
}

/* ptc_ckpt_json's progress with --hash: the line on stderr that the text listing draws too. */
static void json_progress(void *ctx, uint64_t done, uint64_t total)
{
    if (done == 0)
        cli_progress_start(ctx, "hashing tensors", total);
    else
        cli_progress_update(ctx, done);
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
    if (opt.salvage)
        return cli_salvage_report(opt.path, opt.json, opt.budget);

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
    if (opt.json) {
        /* The library writes the document (its schema is ptc_ckpt_json's). */
        cli_progress progress = {0};
        ptc_ckpt_json_params jp;
        ptc_ckpt_json_params_default(&jp);
        jp.file = opt.path;
        jp.values = opt.values;
        jp.hash = opt.hash;
        jp.budget = opt.budget;
        jp.progress = json_progress;
        jp.progress_ctx = &progress;
        rc = ptc_ckpt_json(in.c, &jp, write_stdout, stdout, &err);
        cli_progress_end(&progress);
    } else {
        rc = collect_tensors(&in, &err);
        if (rc == 0)
            rc = find_sharing(&in);
        if (rc == 0 && opt.hash)
            rc = hash_tensors(&in, &err);
        if (rc == 0)
            rc = print_text(&in);
        if (rc == PTC_ELIMIT && render_failed)
            err = render_err;
    }

    status = rc < 0 ? cli_report_budget(rc, &err) : CLI_EXIT_OK;
    render_budget = NULL;
    free_rows(&in);
    ptc_ckpt_close(in.c);
    return status;
}
