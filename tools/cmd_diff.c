/*
 * cmd_diff.c - `ptc diff A B [--rtol R] [--atol A] [--json]`: compare two checkpoints tensor by
 * tensor and value by value.
 *
 * Both files are opened under the default policy (nothing from them runs; any format ptc reads).
 * Each tree is listed node by node with its path, built by the rules of ptc_walk (dict keys as
 * cli_key_text writes them, list and tuple indices, joined by '.'; sets and attributes are not
 * descended into), so tensor paths are the ones `ptc inspect` shows. A path reached several times
 * (shared nodes, or keys such as "a.b" beside a nested a -> b) is told apart by its occurrence
 * number in walk order. The two lists are matched by (path, occurrence), and each pair compared:
 *
 *   tensors   dtype, shape, requires_grad and the parameter flag, then the elements read with
 *             ptc_tensor_read (row-major, conj/neg applied): floating and complex dtypes (per
 *             component) with torch.allclose's rule |a - b| <= atol + rtol * |b|, b from B, where
 *             equal values (inf == inf) and two NaNs match (torch's equal_nan=True: a file
 *             compared with itself must show no difference); integer, bool and other dtypes
 *             exactly. Tensors of more than 256 MiB are hashed first and read only when their
 *             hashes differ. Tensors of different dtypes are reported as different, with the
 *             error statistics when both are real or both complex.
 *   values    kind (dict and OrderedDict are different kinds) and value, exactly: floats bit for
 *             bit, sets as unordered, a dict's attributes (a state dict's _metadata) by key.
 *             Containers are compared through their items; dict order is not compared.
 *
 * A safetensors file cannot hold dict kinds, attributes or the requires_grad and parameter flags,
 * so those are not compared when either side is safetensors (a note says so).
 *
 * Exit status: 0 when every tensor and value matches (within tolerance), 1 when something differs
 * or a file is refused, 2 usage, 3 I/O, 4 memory. Output text is escaped (cli_escape_*).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define HASH_FIRST_BYTES ((int64_t)256 << 20) /* tensors above this are hashed before reading */
#define MAX_NODES        (1u << 30) /* nodes listed per file (the budget stops far before) */
#define EQUAL_BUDGET     (1u << 22) /* node comparisons inside sets and attributes */
#define SHOW_STR         64         /* bytes of a str shown in a report */

struct options {
    double rtol, atol;
    int json;
    uint64_t budget; /* --budget BYTES, 0 for the default */
    const char *a, *b;
};

static const char usage_text[] =
    "usage: ptc diff [--rtol R] [--atol A] [--json] [--budget BYTES] A B\n"
    "\n"
    "Compare two checkpoints (torch zip, legacy or safetensors, in any combination) tensor by\n"
    "tensor and value by value, matched by path. Floating-point tensors match when\n"
    "|a - b| <= atol + rtol * |b| for every element (torch.allclose; NaN matches NaN);\n"
    "integer and bool tensors and all other values must be equal. Prints each difference and\n"
    "a summary; exits 0 when the files match, 1 when they differ.\n"
    "\n"
    "Options:\n"
    "  --rtol R     relative tolerance (default 1e-05)\n"
    "  --atol A     absolute tolerance (default 1e-08)\n"
    "  --json       print one JSON object instead of text (schema in ptc-diff(1))\n"
    "  --budget BYTES\n"
    "               tensor bytes read from each file (4G, 512M, ...; default 64 x its size\n"
    "               + 1 GiB); the nodes listed are bounded by 16 x its pickle's opcodes\n"
    "               + 1,000,000\n"
    "  -h, --help   show this help\n";

/* ---- listing a tree ------------------------------------------------------------------------- */

/* 32 bytes a node, the paths in one buffer: a list of 5,000,000 None lists in ~200 MB. */
typedef struct node {
    union {
        size_t off;       /* while listing: offset in the side's path buffer */
        const char *path; /* after: the path; may hold NUL bytes (keys are arbitrary str) */
    } p;
    uint32_t len;
    uint32_t seq; /* walk order */
    uint32_t occ; /* occurrence of this path, 0 for the first */
    const ptc_value *v;
} node;

typedef struct side {
    const char *file;
    ptc_ckpt *c;
    int safetensors;
    ptc_budget budget; /* this file's: its nodes listed and its tensor bytes read */
    ptc_error err;     /* why the listing stopped */
    node *nodes;
    size_t n, cap;
    cli_buf paths; /* every node's path, one after the other */
    int rc;        /* first failure while listing */
} side;

static int is_walked(ptc_value_kind k)
{
    return k == PTC_VALUE_DICT || k == PTC_VALUE_LIST || k == PTC_VALUE_TUPLE;
}

/* One node with its path, charged by the walk (a node, and the path's bytes: every path is kept
 * in s->paths and may be printed). */
static void add_node(side *s, const char *path, size_t len, const ptc_value *v)
{
    if (s->n == MAX_NODES || len > UINT32_MAX) {
        s->rc = PTC_ELIMIT;
        snprintf(s->err.message, sizeof s->err.message, "too many nodes or too long a path");
        return;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        node *nn = realloc(s->nodes, cap * sizeof *nn);
        if (!nn) {
            s->rc = PTC_ENOMEM;
            return;
        }
        s->nodes = nn;
        s->cap = cap;
    }
    size_t off = s->paths.len;
    cli_buf_putn(&s->paths, path, len);
    if (s->paths.oom) {
        s->rc = PTC_ENOMEM;
        return;
    }
    s->nodes[s->n] = (node){{.off = off}, (uint32_t)len, (uint32_t)s->n, 0, v};
    s->n++;
}

/* Every node of the tree, depth first in container order (ptc_walk_next_value), charged to the
 * side's budget; a path is refused past PTC_PATH_MAX as ptc_walk refuses it. */
static void list_nodes(side *s)
{
    ptc_walk *w = NULL;
    const ptc_value *v;
    const char *path;
    size_t len;
    if ((s->rc = ptc_walk_new(&w, ptc_ckpt_root(s->c), &s->err)) < 0)
        return;
    ptc_walk_set_budget(w, &s->budget);
    int rc = 0;
    while (!s->rc && (rc = ptc_walk_next_value(w, &v, &path, &len, NULL)) > 0)
        add_node(s, path, len, v);
    if (!s->rc && rc < 0) {
        s->rc = rc;
        s->err = *ptc_walk_error(w);
    }
    ptc_walk_free(w);
}

static int cmp_path(const node *a, const node *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->p.path, b->p.path, n) : 0;
    if (c)
        return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int cmp_path_seq(const void *pa, const void *pb)
{
    const node *a = pa, *b = pb;
    int c = cmp_path(a, b);
    if (c)
        return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int list_side(side *s)
{
    list_nodes(s);
    if (s->rc)
        return s->rc;
    for (size_t i = 0; i < s->n; i++)
        s->nodes[i].p.path = s->paths.data + s->nodes[i].p.off;
    qsort(s->nodes, s->n, sizeof *s->nodes, cmp_path_seq);
    for (size_t i = 1; i < s->n; i++)
        if (cmp_path(&s->nodes[i], &s->nodes[i - 1]) == 0)
            s->nodes[i].occ = s->nodes[i - 1].occ + 1;
    return 0;
}

static void free_side(side *s)
{
    cli_buf_free(&s->paths);
    free(s->nodes);
    ptc_ckpt_close(s->c);
}

/* ---- rendering values ----------------------------------------------------------------------- */

static const char *kind_label(const ptc_value *v)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    if (k == PTC_VALUE_DICT)
        return ptc_dict_is_ordered(v) ? "OrderedDict" : "dict";
    return ptc_value_kind_name(k);
}

static void render_dims(cli_buf *b, int ndim, const int64_t *dims)
{
    cli_buf_puts(b, "[");
    for (int d = 0; d < ndim; d++)
        cli_buf_printf(b, "%s%" PRId64, d ? ", " : "", dims[d]);
    cli_buf_puts(b, "]");
}

/* A short raw rendering of v (escaped when printed). */
static void render_value(cli_buf *b, const ptc_value *v)
{
    ptc_value_kind k = ptc_value_kind_of(v);
    const char *s;
    size_t len;
    const uint8_t *bytes;
    double re, im;
    int64_t index;
    char x[40], y[40];

    switch (k) {
    case PTC_VALUE_NONE:
    case PTC_VALUE_BOOL:
    case PTC_VALUE_INT:
    case PTC_VALUE_DTYPE:
        cli_key_text(b, v); /* None, True, decimal digits, torch.float32 */
        return;
    case PTC_VALUE_FLOAT:
        if (ptc_value_float(v, &re) == 0) {
            ptc_float_text(re, x, sizeof x);
            cli_buf_puts(b, x);
        }
        return;
    case PTC_VALUE_COMPLEX:
        if (ptc_value_complex(v, &re, &im) == 0) {
            ptc_float_text(re, x, sizeof x);
            ptc_float_text(im, y, sizeof y);
            cli_buf_printf(b, "complex(%s, %s)", x, y);
        }
        return;
    case PTC_VALUE_STR:
        if (ptc_value_str(v, &s, &len) == 0) {
            cli_buf_puts(b, "'");
            cli_buf_putn(b, s, len > SHOW_STR ? SHOW_STR : len);
            cli_buf_puts(b, len > SHOW_STR ? "'..." : "'");
        }
        return;
    case PTC_VALUE_BYTES:
        if (ptc_value_bytes(v, &bytes, &len) == 0)
            cli_buf_printf(b, "bytes of length %zu", len);
        return;
    case PTC_VALUE_TENSOR: {
        const ptc_tensor *t = ptc_value_tensor(v);
        cli_buf_printf(b, "tensor %s ", t ? ptc_dtype_name(ptc_tensor_dtype(t)) : "?");
        if (t)
            render_dims(b, ptc_tensor_ndim(t), ptc_tensor_shape(t));
        return;
    }
    case PTC_VALUE_DEVICE:
        if (ptc_value_device(v, &s, &index) == 0) {
            cli_buf_printf(b, "device '%s", s ? s : "?");
            if (index >= 0)
                cli_buf_printf(b, ":%" PRId64, index);
            cli_buf_puts(b, "'");
        }
        return;
    case PTC_VALUE_SIZE:
        cli_buf_puts(b, "torch.Size([");
        for (size_t i = 0; i < ptc_value_len(v); i++) {
            int64_t d = 0;
            ptc_value_int(ptc_value_item(v, i), &d);
            cli_buf_printf(b, "%s%" PRId64, i ? ", " : "", d);
        }
        cli_buf_puts(b, "])");
        return;
    case PTC_VALUE_GLOBAL:
    case PTC_VALUE_OBJECT:
        s = ptc_value_global_name(v);
        cli_buf_printf(b, k == PTC_VALUE_GLOBAL ? "<global %s>" : "<%s object>", s ? s : "?");
        return;
    default:
        cli_buf_printf(b, "%s of %zu item%s", kind_label(v), ptc_value_len(v),
                       ptc_value_len(v) == 1 ? "" : "s");
        return;
    }
}

/* ---- exact value equality ------------------------------------------------------------------- */

typedef struct eqctx {
    unsigned budget;     /* node comparisons left */
    int kinds;           /* compare dict kinds and attributes (neither side is safetensors) */
    ptc_budget *ba, *bb; /* the files' work budgets, charged for the tensor bytes hashed */
    int limited;         /* a work budget ran out (err says which) */
    ptc_error err;
} eqctx;

static int value_equal(eqctx *q, const ptc_value *a, const ptc_value *b);

/* Canonical two's-complement bytes: without redundant sign-extension bytes. */
static size_t int_canonical_len(const uint8_t *p, size_t n)
{
    while (n > 1 &&
           ((p[n - 1] == 0x00 && !(p[n - 2] & 0x80)) || (p[n - 1] == 0xFF && (p[n - 2] & 0x80))))
        n--;
    return n;
}

static int ints_equal(const ptc_value *a, const ptc_value *b)
{
    int64_t x, y;
    const uint8_t *pa, *pb;
    size_t na, nb;
    int fa = ptc_value_int(a, &x) == 0, fb = ptc_value_int(b, &y) == 0;
    if (fa || fb)
        return fa && fb && x == y;
    if (ptc_value_int_bytes(a, &pa, &na) < 0 || ptc_value_int_bytes(b, &pb, &nb) < 0)
        return 0;
    na = int_canonical_len(pa, na);
    nb = int_canonical_len(pb, nb);
    return na == nb && memcmp(pa, pb, na) == 0;
}

static int same_bits(double x, double y)
{
    return memcmp(&x, &y, sizeof x) == 0;
}

/* Charges n bytes compared (a str or bytes value of n bytes on each side) to both files' budgets:
 * one long str shared by many keys is compared once per key. 0 or -1 (budget out, q->limited). */
static int charge_compare(eqctx *q, size_t n)
{
    if (ptc_budget_charge(q->ba, 0, n, &q->err) < 0 ||
        ptc_budget_charge(q->bb, 0, n, &q->err) < 0) {
        q->limited = 1;
        q->budget = 0;
        return -1;
    }
    return 0;
}

/* Charges the bytes of x (numel x element size, whatever its strides) to b before it is read. */
static int charge_tensor(ptc_budget *b, const ptc_tensor *x, ptc_error *err)
{
    int64_t nb = ptc_tensor_nbytes(x);
    return ptc_budget_charge(b, 0, nb >= 0 ? (uint64_t)nb : UINT64_MAX, err);
}

static int tensors_same(eqctx *q, const ptc_tensor *x, const ptc_tensor *y)
{
    uint8_t hx[32], hy[32];
    int nd = ptc_tensor_ndim(x);
    if (ptc_tensor_dtype(x) != ptc_tensor_dtype(y) || nd != ptc_tensor_ndim(y) ||
        (nd && memcmp(ptc_tensor_shape(x), ptc_tensor_shape(y), (size_t)nd * sizeof(int64_t))))
        return 0;
    if (charge_tensor(q->ba, x, &q->err) < 0 || charge_tensor(q->bb, y, &q->err) < 0) {
        q->limited = 1;
        q->budget = 0;
        return 0;
    }
    return ptc_tensor_sha256(x, hx, NULL) == 0 && ptc_tensor_sha256(y, hy, NULL) == 0 &&
           memcmp(hx, hy, 32) == 0;
}

/* Items of two sets as multisets: each item of a pairs with one equal, unused item of b. */
static int sets_equal(eqctx *q, const ptc_value *a, const ptc_value *b)
{
    size_t n = ptc_value_len(a);
    if (n != ptc_value_len(b))
        return 0;
    unsigned char *used = calloc(n ? n : 1, 1);
    if (!used)
        return 0;
    int eq = 1;
    for (size_t i = 0; i < n && eq; i++) {
        int found = 0;
        for (size_t j = 0; j < n && !found; j++) {
            if (!used[j] && value_equal(q, ptc_value_item(a, i), ptc_value_item(b, j))) {
                used[j] = 1;
                found = 1;
            }
        }
        eq = found;
    }
    free(used);
    return eq;
}

/* Dicts by key, order aside. */
static int dicts_equal(eqctx *q, const ptc_value *a, const ptc_value *b)
{
    size_t n = ptc_value_len(a);
    if (n != ptc_value_len(b))
        return 0;
    if (q->kinds) {
        if (ptc_dict_is_ordered(a) != ptc_dict_is_ordered(b))
            return 0;
        const ptc_value *ta = ptc_dict_attrs(a), *tb = ptc_dict_attrs(b);
        if ((ta && ptc_value_len(ta)) || (tb && ptc_value_len(tb))) {
            if (!ta || !tb || !value_equal(q, ta, tb))
                return 0;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const ptc_value *k = ptc_dict_key(a, i), *va = ptc_dict_value(a, i), *vb = NULL;
        const char *s;
        size_t len;
        if (ptc_value_kind_of(k) == PTC_VALUE_STR && ptc_value_str(k, &s, &len) == 0 &&
            strlen(s) == len) {
            vb = ptc_dict_get(b, s);
        } else {
            for (size_t j = 0; j < n && !vb; j++)
                if (value_equal(q, k, ptc_dict_key(b, j)))
                    vb = ptc_dict_value(b, j);
        }
        if (!vb || !value_equal(q, va, vb))
            return 0;
    }
    return 1;
}

/* Exact equality of two values of any kind; 0 also when the budget runs out (reported as a
 * difference rather than an endless comparison of a hostile, heavily shared tree). */
static int value_equal(eqctx *q, const ptc_value *a, const ptc_value *b)
{
    const char *sa, *sb;
    const uint8_t *ba, *bb;
    size_t na, nb;
    int fa, fb;
    double xa, xb, ya, yb;
    ptc_dtype da, db;
    int64_t ia, ib;

    if (!a || !b)
        return a == b;
    if (q->budget == 0)
        return 0;
    q->budget--;
    ptc_value_kind k = ptc_value_kind_of(a);
    if (k != ptc_value_kind_of(b))
        return 0;
    if (a == b)
        return 1;
    switch (k) {
    case PTC_VALUE_NONE:
        return 1;
    case PTC_VALUE_BOOL:
        return ptc_value_bool(a, &fa) == 0 && ptc_value_bool(b, &fb) == 0 && !fa == !fb;
    case PTC_VALUE_INT:
        return ints_equal(a, b);
    case PTC_VALUE_FLOAT:
        return ptc_value_float(a, &xa) == 0 && ptc_value_float(b, &xb) == 0 && same_bits(xa, xb);
    case PTC_VALUE_COMPLEX:
        return ptc_value_complex(a, &xa, &ya) == 0 && ptc_value_complex(b, &xb, &yb) == 0 &&
               same_bits(xa, xb) && same_bits(ya, yb);
    case PTC_VALUE_STR:
        return ptc_value_str(a, &sa, &na) == 0 && ptc_value_str(b, &sb, &nb) == 0 && na == nb &&
               charge_compare(q, na) == 0 && memcmp(sa, sb, na) == 0;
    case PTC_VALUE_BYTES:
        return ptc_value_bytes(a, &ba, &na) == 0 && ptc_value_bytes(b, &bb, &nb) == 0 && na == nb &&
               charge_compare(q, na) == 0 && (na == 0 || memcmp(ba, bb, na) == 0);
    case PTC_VALUE_TUPLE:
    case PTC_VALUE_LIST:
    case PTC_VALUE_SIZE:
        na = ptc_value_len(a);
        if (na != ptc_value_len(b))
            return 0;
        for (size_t i = 0; i < na; i++)
            if (!value_equal(q, ptc_value_item(a, i), ptc_value_item(b, i)))
                return 0;
        return 1;
    case PTC_VALUE_SET:
        return sets_equal(q, a, b);
    case PTC_VALUE_DICT:
        return dicts_equal(q, a, b);
    case PTC_VALUE_TENSOR:
        return ptc_value_tensor(a) && ptc_value_tensor(b) &&
               tensors_same(q, ptc_value_tensor(a), ptc_value_tensor(b));
    case PTC_VALUE_DTYPE:
        return ptc_value_dtype(a, &da) == 0 && ptc_value_dtype(b, &db) == 0 && da == db;
    case PTC_VALUE_DEVICE:
        return ptc_value_device(a, &sa, &ia) == 0 && ptc_value_device(b, &sb, &ib) == 0 &&
               ia == ib && sa && sb && strcmp(sa, sb) == 0;
    case PTC_VALUE_GLOBAL:
    case PTC_VALUE_OBJECT:
        sa = ptc_value_global_name(a);
        sb = ptc_value_global_name(b);
        if (!sa || !sb || strcmp(sa, sb) != 0)
            return 0;
        return k == PTC_VALUE_GLOBAL || (value_equal(q, ptc_object_args(a), ptc_object_args(b)) &&
                                         value_equal(q, ptc_object_state(a), ptc_object_state(b)));
    }
    return 0;
}

/* ---- element decoding ----------------------------------------------------------------------- */

enum { CL_REAL, CL_COMPLEX, CL_INT, CL_OTHER };

static int dtype_class(ptc_dtype dt)
{
    switch (dt) {
    case PTC_FLOAT64:
    case PTC_FLOAT32:
    case PTC_FLOAT16:
    case PTC_BFLOAT16:
    case PTC_FLOAT8_E4M3FN:
    case PTC_FLOAT8_E5M2:
    case PTC_FLOAT8_E4M3FNUZ:
    case PTC_FLOAT8_E5M2FNUZ:
        return CL_REAL;
    case PTC_COMPLEX128:
    case PTC_COMPLEX64:
    case PTC_COMPLEX32:
        return CL_COMPLEX;
    case PTC_INT64:
    case PTC_INT32:
    case PTC_INT16:
    case PTC_INT8:
    case PTC_UINT8:
    case PTC_BOOL:
    case PTC_UINT16:
    case PTC_UINT32:
    case PTC_UINT64:
        return CL_INT;
    default:
        return CL_OTHER; /* quantized and bits dtypes: compared byte for byte */
    }
}

/* Component c (0 real, 1 imaginary) of the element at p, as a double (NaN for a dtype without
 * numeric value, which is compared byte for byte and never decoded). */
static double load(ptc_dtype dt, const uint8_t *p, int c)
{
    double re, im;
    if (ptc_dtype_element_f64(dt, p, &re, &im) < 0)
        return NAN;
    return c ? im : re;
}

/* ---- comparing tensors ---------------------------------------------------------------------- */

typedef struct tresult {
    int dtype_differs, shape_differs, grad_differs, param_differs;
    int compared;  /* element values were compared (stats below are meaningful) */
    int identical; /* same dtype, shape and bytes */
    int exact;     /* compared exactly (integer, bool and other dtypes) */
    uint64_t numel, mismatches;
    double max_abs, max_rel;
} tresult;

typedef struct differ {
    const struct options *opt;
    eqctx eq;
    ptc_error err;
    const ptc_tensor *last_a, *last_b; /* the last tensor pair compared, and its result: a */
    tresult last_r;                    /* tensor shared at many paths is read once */
    /* counts for the summary */
    size_t t_equal, t_differ, t_missing, t_extra, v_differ;
    json_t *jt, *jv; /* --json: the "tensors" and "values" arrays */
    int oom;
} differ;

/* One element pair under torch.allclose's rule. */
static void close_check(const differ *df, double a, double b, tresult *r, int *bad)
{
    if (a == b || (isnan(a) && isnan(b)))
        return;
    double d = fabs(a - b);
    if (isnan(d))
        d = INFINITY;
    double rel = b != 0 && !isnan(b) ? d / fabs(b) : INFINITY;
    if (isnan(rel))
        rel = INFINITY;
    if (d > r->max_abs)
        r->max_abs = d;
    if (rel > r->max_rel)
        r->max_rel = rel;
    if (!(isfinite(d) && d <= df->opt->atol + df->opt->rtol * fabs(b)))
        *bad = 1;
}

static int read_all(const ptc_tensor *t, uint8_t **out, ptc_error *err)
{
    int64_t nb = ptc_tensor_nbytes(t);
    *out = malloc(nb > 0 ? (size_t)nb : 1);
    if (!*out) {
        snprintf(err->message, sizeof err->message,
                 "out of memory reading a tensor of %" PRId64 " bytes", nb);
        return err->code = PTC_ENOMEM;
    }
    int rc = ptc_tensor_read(t, *out, nb > 0 ? (size_t)nb : 0, err);
    if (rc < 0) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

static int compare_elements(differ *df, const ptc_tensor *ta, const ptc_tensor *tb, tresult *r)
{
    ptc_dtype da = ptc_tensor_dtype(ta), db = ptc_tensor_dtype(tb);
    int ca = dtype_class(da), cb = dtype_class(db);
    size_t sa = ptc_dtype_size(da), sb = ptc_dtype_size(db);
    int64_t nb = ptc_tensor_nbytes(ta);
    uint8_t *xa = NULL, *xb = NULL;
    int rc;

    if (r->dtype_differs) {
        /* Values of different dtypes are comparable when both are real numbers (floating,
         * integer or bool) or both complex. */
        int real_a = ca == CL_REAL || ca == CL_INT, real_b = cb == CL_REAL || cb == CL_INT;
        if (!((real_a && real_b) || (ca == CL_COMPLEX && cb == CL_COMPLEX)))
            return 0;
    }
    /* Charged before a byte is read: a stride-0 view of 2^40 elements is refused here. */
    if ((rc = charge_tensor(df->eq.ba, ta, &df->err)) < 0 ||
        (rc = charge_tensor(df->eq.bb, tb, &df->err)) < 0)
        return rc;
    if (!r->dtype_differs && nb > HASH_FIRST_BYTES) {
        uint8_t ha[32], hb[32];
        if ((rc = ptc_tensor_sha256(ta, ha, &df->err)) < 0 ||
            (rc = ptc_tensor_sha256(tb, hb, &df->err)) < 0)
            return rc;
        if (memcmp(ha, hb, 32) == 0) {
            r->compared = r->identical = 1;
            r->exact = ca == CL_INT || ca == CL_OTHER;
            return 0;
        }
        /* read again below */
        if ((rc = charge_tensor(df->eq.ba, ta, &df->err)) < 0 ||
            (rc = charge_tensor(df->eq.bb, tb, &df->err)) < 0)
            return rc;
    }
    if ((rc = read_all(ta, &xa, &df->err)) < 0)
        return rc;
    if ((rc = read_all(tb, &xb, &df->err)) < 0) {
        free(xa);
        return rc;
    }
    r->compared = 1;
    if (!r->dtype_differs && (nb == 0 || memcmp(xa, xb, (size_t)nb) == 0)) {
        r->identical = 1;
        r->exact = ca == CL_INT || ca == CL_OTHER;
    } else if (!r->dtype_differs && (ca == CL_INT || ca == CL_OTHER)) {
        r->exact = 1;
        for (uint64_t i = 0; i < r->numel; i++) {
            const uint8_t *pa = xa + i * sa, *pb = xb + i * sb;
            if (memcmp(pa, pb, sa) == 0)
                continue;
            r->mismatches++;
            if (ca == CL_INT) {
                double d = fabs(load(da, pa, 0) - load(db, pb, 0));
                double rel = load(db, pb, 0) != 0 ? d / fabs(load(db, pb, 0)) : INFINITY;
                r->max_abs = d > r->max_abs ? d : r->max_abs;
                r->max_rel = rel > r->max_rel ? rel : r->max_rel;
            }
        }
    } else {
        int ncomp = ca == CL_COMPLEX ? 2 : 1;
        for (uint64_t i = 0; i < r->numel; i++) {
            int bad = 0;
            for (int c = 0; c < ncomp; c++)
                close_check(df, load(da, xa + i * sa, c), load(db, xb + i * sb, c), r, &bad);
            r->mismatches += (uint64_t)bad;
        }
    }
    free(xa);
    free(xb);
    return 0;
}

static int compare_tensors(differ *df, const ptc_tensor *ta, const ptc_tensor *tb, tresult *r)
{
    int nd = ptc_tensor_ndim(ta);
    memset(r, 0, sizeof *r);
    r->dtype_differs = ptc_tensor_dtype(ta) != ptc_tensor_dtype(tb);
    r->shape_differs =
        nd != ptc_tensor_ndim(tb) || (nd && memcmp(ptc_tensor_shape(ta), ptc_tensor_shape(tb),
                                                   (size_t)nd * sizeof(int64_t)) != 0);
    if (df->eq.kinds) {
        r->grad_differs = !ptc_tensor_requires_grad(ta) != !ptc_tensor_requires_grad(tb);
        r->param_differs = !ptc_tensor_is_parameter(ta) != !ptc_tensor_is_parameter(tb);
    }
    r->numel = (uint64_t)ptc_tensor_numel(ta);
    if (r->shape_differs)
        return 0;
    return compare_elements(df, ta, tb, r);
}

/* ---- reporting ------------------------------------------------------------------------------ */

static void put_path(const node *n)
{
    if (n->len == 0)
        fputs("(root)", stdout);
    else
        cli_escape_put(stdout, n->p.path, n->len, 0);
    if (n->occ > 0)
        printf(" (occurrence %zu)", (size_t)n->occ + 1);
}

/* One report line: "STATUS   PATH: detail" with detail raw text (escaped here). */
static void report_line(const char *status, const node *n, const cli_buf *detail)
{
    printf("%-8s ", status);
    put_path(n);
    if (detail && detail->len) {
        fputs(": ", stdout);
        cli_escape_put(stdout, detail->data, detail->len, 0);
    }
    putchar('\n');
}

/* A JSON string for text from a file: as it is when valid UTF-8, else its escaped form. */
static json_t *json_text(const char *s, size_t len)
{
    if (ptc_utf8_valid(s, len))
        return json_stringn(s, len);
    cli_buf b = {0};
    cli_buf_escape(&b, s, len, 0);
    json_t *j = b.oom ? NULL : json_stringn(cli_buf_str(&b), b.len);
    cli_buf_free(&b);
    return j;
}

static json_t *json_double(double x)
{
    if (isnan(x))
        return json_string("nan");
    if (isinf(x))
        return json_string(x > 0 ? "inf" : "-inf");
    return json_real(x);
}

static json_t *json_dims(const ptc_tensor *t)
{
    json_t *a = json_array();
    for (int d = 0; a && d < ptc_tensor_ndim(t); d++)
        if (json_array_append_new(a, json_integer((json_int_t)ptc_tensor_shape(t)[d])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Sets o[key] = v, taking v's reference in every case. */
static void jput(differ *df, json_t *o, const char *key, json_t *v)
{
    if (!o || !v) {
        json_decref(v);
        df->oom = 1;
    } else if (json_object_set_new(o, key, v) < 0) {
        df->oom = 1;
    }
}

/* A JSON entry with the path (and occurrence) of whichever node is present. */
static json_t *json_entry(differ *df, const node *n, const char *status)
{
    json_t *o = json_object();
    jput(df, o, "path", json_text(n->p.path, n->len));
    if (n->occ > 0)
        jput(df, o, "occurrence", json_integer((json_int_t)n->occ + 1));
    jput(df, o, "status", json_string(status));
    return o;
}

static void jpush(differ *df, json_t *arr, json_t *o)
{
    if (!o || !arr) {
        json_decref(o);
        df->oom = 1;
    } else if (json_array_append_new(arr, o) < 0) {
        df->oom = 1;
    }
}

/* Errors in text output: four significant digits are enough to judge them (JSON has all). */
static void fmt_err(cli_buf *b, const char *label, double x)
{
    cli_buf_printf(b, "%s %.4g", label, x);
}

static void report_tensors(differ *df, const node *na, const node *nb, const tresult *r)
{
    const ptc_tensor *ta = ptc_value_tensor(na->v), *tb = ptc_value_tensor(nb->v);
    int differs = r->dtype_differs || r->shape_differs || r->grad_differs || r->param_differs ||
                  r->mismatches > 0;
    const char *status = differs ? "differ" : r->identical ? "equal" : "close";
    cli_buf d = {0};

    if (differs)
        df->t_differ++;
    else
        df->t_equal++;
    if (r->dtype_differs)
        cli_buf_printf(&d, "dtype %s vs %s", ptc_dtype_name(ptc_tensor_dtype(ta)),
                       ptc_dtype_name(ptc_tensor_dtype(tb)));
    if (r->shape_differs) {
        cli_buf_puts(&d, d.len ? "; shape " : "shape ");
        render_dims(&d, ptc_tensor_ndim(ta), ptc_tensor_shape(ta));
        cli_buf_puts(&d, " vs ");
        render_dims(&d, ptc_tensor_ndim(tb), ptc_tensor_shape(tb));
    }
    if (r->grad_differs)
        cli_buf_printf(&d, "%srequires_grad %s vs %s", d.len ? "; " : "",
                       ptc_tensor_requires_grad(ta) ? "True" : "False",
                       ptc_tensor_requires_grad(tb) ? "True" : "False");
    if (r->param_differs)
        cli_buf_printf(&d, "%s%s vs %s", d.len ? "; " : "",
                       ptc_tensor_is_parameter(ta) ? "Parameter" : "tensor",
                       ptc_tensor_is_parameter(tb) ? "Parameter" : "tensor");
    if (r->compared && !r->identical) {
        if (r->mismatches > 0)
            cli_buf_printf(&d, "%s%" PRIu64 " of %" PRIu64 " elements %s", d.len ? "; " : "",
                           r->mismatches, r->numel, r->exact ? "differ" : "not close");
        if (!r->exact || r->max_abs > 0) {
            cli_buf_puts(&d, d.len ? "; " : "");
            fmt_err(&d, "max abs err", r->max_abs);
            cli_buf_puts(&d, ", ");
            fmt_err(&d, "max rel err", r->max_rel);
        }
    }
    if (d.oom)
        df->oom = 1;

    if (df->jt) {
        json_t *o = json_entry(df, na, status);
        jput(df, o, "dtype_a", json_string(ptc_dtype_name(ptc_tensor_dtype(ta))));
        jput(df, o, "dtype_b", json_string(ptc_dtype_name(ptc_tensor_dtype(tb))));
        jput(df, o, "shape_a", json_dims(ta));
        jput(df, o, "shape_b", json_dims(tb));
        jput(df, o, "identical", json_boolean(r->identical));
        if (r->compared) {
            jput(df, o, "numel", json_integer((json_int_t)r->numel));
            jput(df, o, "mismatches", json_integer((json_int_t)r->mismatches));
            jput(df, o, "max_abs_err", json_double(r->max_abs));
            jput(df, o, "max_rel_err", json_double(r->max_rel));
        }
        if (d.len)
            jput(df, o, "detail", json_text(d.data, d.len));
        jpush(df, df->jt, o);
    } else if (!r->identical || differs) {
        report_line(status, na, &d);
    }
    cli_buf_free(&d);
}

/* A node present on one side only. Non-empty containers are left out: their items are reported. */
static void report_one_side(differ *df, const node *n, int in_a)
{
    const ptc_value *v = n->v;
    ptc_value_kind k = ptc_value_kind_of(v);
    if (is_walked(k) && ptc_value_len(v) > 0)
        return;
    const char *status = in_a ? "missing" : "extra";
    cli_buf d = {0};
    render_value(&d, v); /* "tensor float32 [3]", "5", "5.0", "'five'", "list of 0 items" */
    if (d.oom)
        df->oom = 1;
    if (k == PTC_VALUE_TENSOR) {
        if (in_a)
            df->t_missing++;
        else
            df->t_extra++;
    } else {
        df->v_differ++;
    }
    if (df->jt) {
        json_t *o = json_entry(df, n, status);
        jput(df, o, "type", json_string(kind_label(v)));
        jput(df, o, in_a ? "a" : "b", json_text(cli_buf_str(&d), d.len));
        jpush(df, k == PTC_VALUE_TENSOR ? df->jt : df->jv, o);
    } else {
        report_line(status, n, &d);
    }
    cli_buf_free(&d);
}

/* Two values that differ: detail is raw text. */
static void report_value(differ *df, const node *na, const node *nb, const cli_buf *detail,
                         int tensor_involved)
{
    if (tensor_involved)
        df->t_differ++;
    else
        df->v_differ++;
    if (df->jt) {
        cli_buf ra = {0}, rb = {0};
        render_value(&ra, na->v);
        render_value(&rb, nb->v);
        json_t *o = json_entry(df, na, "differ");
        jput(df, o, "type_a", json_string(kind_label(na->v)));
        jput(df, o, "type_b", json_string(kind_label(nb->v)));
        jput(df, o, "a", json_text(cli_buf_str(&ra), ra.len));
        jput(df, o, "b", json_text(cli_buf_str(&rb), rb.len));
        if (detail && detail->len)
            jput(df, o, "detail", json_text(detail->data, detail->len));
        jpush(df, tensor_involved ? df->jt : df->jv, o);
        df->oom |= ra.oom || rb.oom;
        cli_buf_free(&ra);
        cli_buf_free(&rb);
    } else {
        report_line("differ", na, detail);
    }
}

/* Describes how two _metadata dicts (or other attribute dicts) differ: counts and the first key
 * concerned. */
static void describe_attrs(differ *df, cli_buf *d, const ptc_value *ta, const ptc_value *tb)
{
    if (!ta || !tb) {
        cli_buf_printf(d, "dict attributes (_metadata) only in %s", ta ? "A" : "B");
        return;
    }
    const ptc_value *ma = ptc_dict_get(ta, "_metadata"), *mb = ptc_dict_get(tb, "_metadata");
    if (!ma || !mb || ptc_value_kind_of(ma) != PTC_VALUE_DICT ||
        ptc_value_kind_of(mb) != PTC_VALUE_DICT) {
        cli_buf_puts(d, "dict attributes differ");
        return;
    }
    size_t missing = 0, extra = 0, changed = 0;
    cli_buf first = {0};
    for (int pass = 0; pass < 2; pass++) {
        const ptc_value *x = pass ? mb : ma, *y = pass ? ma : mb;
        for (size_t i = 0; i < ptc_value_len(x); i++) {
            const ptc_value *k = ptc_dict_key(x, i), *vy = NULL;
            for (size_t j = 0; j < ptc_value_len(y) && !vy; j++)
                if (value_equal(&df->eq, k, ptc_dict_key(y, j)))
                    vy = ptc_dict_value(y, j);
            int diff = !vy || (!pass && !value_equal(&df->eq, ptc_dict_value(x, i), vy));
            if (!diff)
                continue;
            if (vy)
                changed++;
            else if (pass)
                extra++;
            else
                missing++;
            if (first.len == 0) {
                cli_buf_puts(&first, "'");
                cli_key_text(&first, k);
                cli_buf_puts(&first, !vy ? (pass ? "' only in B" : "' only in A") : "' differs");
            }
        }
    }
    cli_buf_printf(d, "_metadata differs: %zu entr%s only in A, %zu only in B, %zu differ%s%s",
                   missing, missing == 1 ? "y" : "ies", extra, changed,
                   first.len ? "; first: " : "", cli_buf_str(&first));
    if (first.len == 0 && missing + extra + changed == 0)
        cli_buf_puts(d, " (other attributes or the dict kinds of the entries differ)");
    df->oom |= first.oom;
    cli_buf_free(&first);
}

static int compare_pair(differ *df, const node *na, const node *nb)
{
    const ptc_value *a = na->v, *b = nb->v;
    ptc_value_kind ka = ptc_value_kind_of(a), kb = ptc_value_kind_of(b);
    cli_buf d = {0};

    df->eq.budget = EQUAL_BUDGET;
    if (ka == PTC_VALUE_TENSOR && kb == PTC_VALUE_TENSOR) {
        const ptc_tensor *ta = ptc_value_tensor(a), *tb = ptc_value_tensor(b);
        tresult r;
        if (ta && ta == df->last_a && tb == df->last_b) {
            r = df->last_r;
        } else {
            int rc = compare_tensors(df, ta, tb, &r);
            if (rc < 0) {
                /* The node's own length: paths lie one after the other in the side's buffer,
                 * not NUL-terminated. */
                char msg[sizeof df->err.message];
                int shown = na->len == 0 ? 6 : na->len > 64 ? 64 : (int)na->len;
                snprintf(msg, sizeof msg, "comparing tensor %.*s%s: %.*s", shown,
                         na->len ? na->p.path : "(root)", na->len > 64 ? "..." : "",
                         (int)sizeof msg - 128, df->err.message);
                memcpy(df->err.message, msg, sizeof msg);
                return rc;
            }
            df->last_a = ta;
            df->last_b = tb;
            df->last_r = r;
        }
        report_tensors(df, na, nb, &r);
        return 0;
    }
    int tensor_involved = ka == PTC_VALUE_TENSOR || kb == PTC_VALUE_TENSOR;
    int kinds_differ = ka != kb || (df->eq.kinds && ka == PTC_VALUE_DICT &&
                                    !ptc_dict_is_ordered(a) != !ptc_dict_is_ordered(b));
    if (kinds_differ) {
        cli_buf_printf(&d, "%s vs %s", kind_label(a), kind_label(b));
        if (!is_walked(ka) || !is_walked(kb) || tensor_involved) {
            cli_buf_puts(&d, " (");
            render_value(&d, a);
            cli_buf_puts(&d, " vs ");
            render_value(&d, b);
            cli_buf_puts(&d, ")");
        }
        report_value(df, na, nb, &d, tensor_involved);
    } else if (ka == PTC_VALUE_DICT) {
        /* Items are compared as nodes of their own; here only the attributes. */
        const ptc_value *ta = ptc_dict_attrs(a), *tb = ptc_dict_attrs(b);
        int has_a = ta && ptc_value_len(ta), has_b = tb && ptc_value_len(tb);
        if (df->eq.kinds && (has_a || has_b) &&
            (!has_a || !has_b || !value_equal(&df->eq, ta, tb))) {
            describe_attrs(df, &d, has_a ? ta : NULL, has_b ? tb : NULL);
            report_value(df, na, nb, &d, 0);
        }
    } else if (!is_walked(ka) && !value_equal(&df->eq, a, b)) {
        render_value(&d, a);
        cli_buf_puts(&d, " vs ");
        render_value(&d, b);
        if (df->eq.limited) {
            cli_buf_free(&d);
            df->err = df->eq.err;
            return PTC_ELIMIT;
        }
        if (df->eq.budget == 0)
            cli_buf_puts(&d, " (too large to compare)");
        report_value(df, na, nb, &d, 0);
    }
    if (df->eq.limited) {
        cli_buf_free(&d);
        df->err = df->eq.err;
        return PTC_ELIMIT;
    }
    df->oom |= d.oom;
    cli_buf_free(&d);
    return df->oom ? PTC_ENOMEM : 0;
}

/* ---- matching the two lists ----------------------------------------------------------------- */

typedef struct pair {
    const node *a, *b; /* ordered by A's walk, then what only B has by B's */
} pair;

static int cmp_pair_order(const void *pa, const void *pb)
{
    const pair *x = pa, *y = pb;
    int sx = x->a == NULL, sy = y->a == NULL;
    if (sx != sy)
        return sx - sy;
    uint32_t ox = x->a ? x->a->seq : x->b->seq, oy = y->a ? y->a->seq : y->b->seq;
    return ox < oy ? -1 : ox > oy;
}

static int cmp_node_key(const node *a, const node *b)
{
    int c = cmp_path(a, b);
    if (c)
        return c;
    return a->occ < b->occ ? -1 : a->occ > b->occ;
}

/* Pairs in report order: A's walk order, then what only B has, in B's walk order. */
static pair *match(const side *sa, const side *sb, size_t *npairs)
{
    pair *p = malloc((sa->n + sb->n + 1) * sizeof *p);
    size_t i = 0, j = 0, n = 0;
    if (!p)
        return NULL;
    while (i < sa->n || j < sb->n) {
        int c = i == sa->n ? 1 : j == sb->n ? -1 : cmp_node_key(&sa->nodes[i], &sb->nodes[j]);
        if (c <= 0) {
            p[n] = (pair){&sa->nodes[i], c == 0 ? &sb->nodes[j] : NULL};
            i++;
            j += c == 0;
        } else {
            p[n] = (pair){NULL, &sb->nodes[j]};
            j++;
        }
        n++;
    }
    qsort(p, n, sizeof *p, cmp_pair_order);
    *npairs = n;
    return p;
}

/* ---- the command ---------------------------------------------------------------------------- */

/* "ptc diff: FILE: reason" for a file that cannot be opened or read. */
static int report_file(const char *file, int code, const ptc_error *err)
{
    cli_buf b = {0};
    const char *msg = err && err->message[0] ? err->message : ptc_strerror(code);
    const char *end = memchr(msg, '\0', sizeof err->message);
    cli_buf_escape(&b, file, strlen(file), 0);
    cli_buf_puts(&b, ": ");
    cli_buf_escape(&b, msg, end ? (size_t)(end - msg) : sizeof err->message, CLI_ESC_RAW_BACKSLASH);
    if (b.oom) {
        cli_buf_free(&b);
        cli_error("out of memory");
        return CLI_EXIT_NOMEM;
    }
    cli_error("%s", cli_buf_str(&b));
    cli_buf_free(&b);
    if (code == PTC_ELIMIT && strstr(msg, "work budget exceeded") && strstr(msg, " bytes "))
        cli_error("raise the byte budget with --budget BYTES (for example --budget 64G) if the "
                  "file is trusted"); /* as cli_report_budget: paths count as bytes written */
    return cli_exit_code(code);
}

static int parse_tolerance(const char *name, const char *text, double *out)
{
    char *end;
    double x = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(x) || x < 0)
        return cli_usage_error("%s takes a finite number >= 0", name);
    *out = x;
    return CLI_EXIT_OK;
}

static int parse_options(int argc, char **argv, struct options *opt, int *done)
{
    enum { OPT_RTOL = 256, OPT_ATOL, OPT_JSON, OPT_BUDGET };
    static const struct option longopts[] = {
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"rtol", required_argument, NULL, OPT_RTOL},
        {"atol", required_argument, NULL, OPT_ATOL},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch, status;
    *done = 0;
    memset(opt, 0, sizeof *opt);
    opt->rtol = 1e-5; /* torch.allclose's defaults */
    opt->atol = 1e-8;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case OPT_RTOL:
            if ((status = parse_tolerance("--rtol", optarg, &opt->rtol)) != CLI_EXIT_OK)
                return status;
            break;
        case OPT_ATOL:
            if ((status = parse_tolerance("--atol", optarg, &opt->atol)) != CLI_EXIT_OK)
                return status;
            break;
        case OPT_JSON:
            opt->json = 1;
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
    if (argc - optind != 2)
        return cli_usage_error("two checkpoint files are compared (%d given)", argc - optind);
    opt->a = argv[optind];
    opt->b = argv[optind + 1];
    return CLI_EXIT_OK;
}

static int open_side(side *s, const char *file, uint64_t budget)
{
    ptc_open_params params;
    ptc_error err;
    memset(&err, 0, sizeof err);
    ptc_open_params_default(&params);
    s->file = file;
    int rc = ptc_ckpt_open(&s->c, file, &params, &err);
    if (rc < 0)
        return report_file(file, rc, &err);
    s->safetensors = ptc_ckpt_format(s->c) == PTC_FORMAT_SAFETENSORS;
    ptc_budget_init(&s->budget, s->c, budget);
    if ((rc = list_side(s)) < 0) {
        snprintf(err.message, sizeof err.message, "listing the values: %.*s",
                 (int)sizeof err.message - 32,
                 s->err.message[0] ? s->err.message : ptc_strerror(rc));
        return report_file(file, rc, &err);
    }
    return CLI_EXIT_OK;
}

static int print_json(differ *df, const side *sa, const side *sb, int equal)
{
    json_t *root = json_object(), *sum = json_object(), *notes = json_array();
    jput(df, root, "a", json_text(sa->file, strlen(sa->file)));
    jput(df, root, "b", json_text(sb->file, strlen(sb->file)));
    jput(df, root, "rtol", json_real(df->opt->rtol));
    jput(df, root, "atol", json_real(df->opt->atol));
    jput(df, root, "equal", json_boolean(equal));
    if (!df->eq.kinds)
        jpush(df, notes,
              json_string("a safetensors file holds no dict kinds, _metadata, "
                          "requires_grad or parameter flags: not compared"));
    jput(df, root, "notes", notes);
    /* The arrays stay owned by df as well (freed by the caller). */
    jput(df, root, "tensors", json_incref(df->jt));
    jput(df, root, "values", json_incref(df->jv));
    jput(df, sum, "tensors_equal", json_integer((json_int_t)df->t_equal));
    jput(df, sum, "tensors_differ", json_integer((json_int_t)df->t_differ));
    jput(df, sum, "tensors_missing", json_integer((json_int_t)df->t_missing));
    jput(df, sum, "tensors_extra", json_integer((json_int_t)df->t_extra));
    jput(df, sum, "values_differ", json_integer((json_int_t)df->v_differ));
    jput(df, root, "summary", sum);
    char *text = df->oom ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return PTC_ENOMEM;
    cli_put_json_text(stdout, text, strlen(text));
    putchar('\n');
    free(text);
    return 0;
}

int cmd_diff(int argc, char **argv)
{
    struct options opt;
    side sa = {0}, sb = {0};
    differ df = {.opt = &opt, .eq = {.budget = EQUAL_BUDGET, .kinds = 1}};
    pair *pairs = NULL;
    size_t npairs = 0;
    cli_progress progress = {0};
    int done, rc = 0;

    int status = parse_options(argc, argv, &opt, &done);
    if (status != CLI_EXIT_OK || done)
        return status;
    if ((status = open_side(&sa, opt.a, opt.budget)) != CLI_EXIT_OK ||
        (status = open_side(&sb, opt.b, opt.budget)) != CLI_EXIT_OK)
        goto done;
    df.eq.kinds = !sa.safetensors && !sb.safetensors;
    df.eq.ba = &sa.budget;
    df.eq.bb = &sb.budget;
    if (opt.json && (!(df.jt = json_array()) || !(df.jv = json_array()))) {
        rc = PTC_ENOMEM;
        goto fail;
    }
    if (!(pairs = match(&sa, &sb, &npairs))) {
        rc = PTC_ENOMEM;
        goto fail;
    }
    if (!df.eq.kinds && !opt.json)
        printf("note: %s is safetensors, which holds no dict kinds, _metadata, requires_grad or "
               "parameter flags; they are not compared\n",
               sa.safetensors ? "A" : "B");

    cli_progress_start(&progress, "comparing", npairs);
    for (size_t i = 0; i < npairs && rc == 0; i++) {
        const pair *p = &pairs[i];
        if (p->a && p->b)
            rc = compare_pair(&df, p->a, p->b);
        else
            report_one_side(&df, p->a ? p->a : p->b, p->a != NULL);
        if (df.oom && rc == 0)
            rc = PTC_ENOMEM;
        cli_progress_update(&progress, i + 1);
    }
    cli_progress_end(&progress);
    if (rc < 0)
        goto fail;

    int equal = df.t_differ + df.t_missing + df.t_extra + df.v_differ == 0;
    if (opt.json) {
        if ((rc = print_json(&df, &sa, &sb, equal)) < 0)
            goto fail;
    } else {
        printf("%zu tensor%s equal, %zu differ, %zu missing in B, %zu extra in B; "
               "%zu value%s differ\n",
               df.t_equal, df.t_equal == 1 ? "" : "s", df.t_differ, df.t_missing, df.t_extra,
               df.v_differ, df.v_differ == 1 ? "" : "s");
    }
    status = equal ? CLI_EXIT_OK : CLI_EXIT_REFUSED;
    goto done;

fail:
    if (rc == PTC_ENOMEM && df.err.code != PTC_ENOMEM) {
        cli_error("out of memory");
        status = CLI_EXIT_NOMEM;
    } else {
        status = cli_report_budget(rc, &df.err);
    }
done:
    cli_progress_end(&progress);
    free(pairs);
    json_decref(df.jt);
    json_decref(df.jv);
    free_side(&sa);
    free_side(&sb);
    return status;
}
