/*
 * ckpt_json_int.h - what the three files of ptc_ckpt_json share: the call's state (cj), the growable
 * string (sbuf) and the value renderer of value_text.c, and the buffered JSON writer of
 * ckpt_json_out.c that ckpt_json.c writes the document with. Internal to libptc.
 */
#ifndef PTC_PTH_CKPT_JSON_INT_H
#define PTC_PTH_CKPT_JSON_INT_H

#include "pth/pth.h"

#include <string.h>

#include <jansson.h>

#define OUT_BUF_BYTES 65536 /* output batched per call of the caller's write function */
#define JSON_STEP     2     /* spaces per nesting level, as JSON_INDENT(2) indents */

/* A container (dict, list or tuple with items) of the tree: how many times the tree reaches it
 * and, once listed, where it was first met and what its subtree added. */
typedef struct shared {
    const ptc_value *v;
    uint32_t refs;               /* times the tree reaches it; 2 or more: shared */
    int listed;                  /* LISTED_*: once listed, later meetings are {"$ref"} entries */
    int has_tensors, has_values; /* its listing added tensor rows, value entries */
    char *tpath;                 /* its first path (ptc_walk's, for tensors and values alike) */
    uint64_t ntensors, numel, nbytes; /* what its subtree adds to the totals */
} shared;

enum { LISTED_NOT, LISTED_OPEN, LISTED_DONE }; /* shared.listed: not yet, being listed, listed */

typedef struct shared_map {
    shared *e;
    size_t cap, n; /* cap: 0 or a power of two */
} shared_map;

/* With hash: a tensor to hash, once however many paths reach it. */
typedef struct digest {
    const ptc_tensor *t;
    char path[65]; /* its first path, as much of it as an error message shows */
    uint8_t sha256[32];
} digest;

typedef struct digest_set {
    digest *d; /* in the order the walk first meets them */
    size_t n, capd;
    size_t *slot; /* open addressing on the tensor pointer: index in d + 1, 0 when empty */
    size_t cap;   /* 0 or a power of two */
} digest_set;

/* One call's state: nothing is global, so that several threads may write several documents. */
typedef struct cj {
    ptc_ckpt_json_params p; /* the caller's, completed with the defaults */
    const ptc_ckpt *c;
    ptc_budget budget;    /* every walk, rendering and hash is charged to it */
    ptc_budget *charging; /* &budget during the scan; NULL in the later walks, which repeat it */
    int failed;           /* the budget or a path limit ran out: err says which */
    ptc_error err;
    int counting; /* json_value for the scan: charge a str's bytes, build nothing */
    ptc_write_fn write;
    void *ctx;
    int wrc;                                    /* the first write error */
    size_t olen;                                /* bytes waiting in obuf */
    char obuf[OUT_BUF_BYTES];                   /* writes batched for the caller's function */
    uint64_t tot_tensors, tot_numel, tot_bytes; /* totals with the $ref rows expanded */
    size_t ntrows;                              /* entries of "tensors" */
    shared_map shared;                          /* the containers of the tree */
    digest_set digests;                         /* with hash: the tensors, each once */
} cj;

/* ---- a growable string ------------------------------------------------------------------------
 * Appends never fail loudly: an allocation failure sets oom, later appends do nothing, and the
 * caller checks oom once at the end. data is NUL-terminated once anything was appended. */
typedef struct sbuf {
    char *data;
    size_t len;
    size_t cap;
    int oom;
} sbuf;

/* ---- value_text.c: the growable string, the budget, the one-line renderer -------------------- */

uint64_t ptc__cj_add_sat(uint64_t a, uint64_t b);
uint64_t ptc__cj_json_text_cost(const char *s, size_t len);
void ptc__cj_render(cj *in, sbuf *b, const ptc_value *v, int depth, unsigned flags);
int ptc__cj_render_charge(cj *in);
int ptc__cj_render_charge_bytes(cj *in, uint64_t n);
int ptc__cj_render_path_ok(cj *in, size_t len, size_t depth);
void ptc__sb_escape(sbuf *b, const void *s, size_t n, unsigned flags);
void ptc__sb_free(sbuf *b);
void ptc__sb_key(sbuf *b, const ptc_value *key);
void ptc__sb_printf(sbuf *b, const char *fmt, ...) PTC_PRINTF(2, 3);
void ptc__sb_puts(sbuf *b, const char *s);
const char *ptc__sb_str(const sbuf *b);
void ptc__sb_truncate(sbuf *b, size_t len);

/* ---- ckpt_json_out.c: values as JSON, the buffered writer of the document -------------------- */

/* An array of the document, written entry by entry. */
typedef struct json_stream {
    cj *in;
    int depth; /* the array's nesting level */
    size_t n;  /* entries written */
} json_stream;

/* An object at nesting level depth, written member by member. */
typedef struct jobj {
    cj *in;
    int depth;
    size_t n; /* members written */
} jobj;

void ptc__cj_jobj_close(jobj *o);
json_t *ptc__cj_json_cstr(const char *s);
void ptc__cj_json_member(cj *in, size_t *nmembers, const char *key);
void ptc__cj_json_newline(cj *in, int depth);
int ptc__cj_json_put(json_t *obj, const char *key, json_t *val);
void ptc__cj_json_stream_close(json_stream *a);
int ptc__cj_json_stream_next(json_stream *a);
void ptc__cj_json_stream_open(cj *in, json_stream *a, size_t *nmembers, const char *key);
int ptc__cj_json_stream_put(json_stream *a, json_t *e);
json_t *ptc__cj_json_text(const char *s, size_t len);
json_t *ptc__cj_json_value(cj *in, const ptc_value *v, int depth);
int ptc__cj_json_write(cj *in, json_t *j, int depth);
const char *ptc__cj_kind_name(ptc_value_kind k);
void ptc__cj_out_bool(cj *in, int b);
int ptc__cj_out_cstr(cj *in, const char *s);
void ptc__cj_out_dims(cj *in, int depth, int ndim, const int64_t *dims);
void ptc__cj_out_flush(cj *in);
void ptc__cj_out_i64(cj *in, int64_t x);
void ptc__cj_out_long(cj *in, const char *p, size_t n);
void ptc__cj_out_u64(cj *in, uint64_t x);

/* Writes p[0..n): batched in obuf, so that a document of 20,000 entries costs a few hundred
 * calls of the caller's function rather than a dozen per entry. The bytes are the same; after a
 * write failed, out_flush drops what gathers. */
static inline void ptc__cj_out(cj *in, const char *p, size_t n)
{
    if (n <= sizeof in->obuf - in->olen) {
        memcpy(in->obuf + in->olen, p, n);
        in->olen += n;
        return;
    }
    ptc__cj_out_long(in, p, n);
}

static inline void ptc__cj_out_s(cj *in, const char *s)
{
    ptc__cj_out(in, s, strlen(s)); /* inlined, strlen of a literal is a constant */
}

/* Room for n more bytes at the end of obuf (n below OUT_BUF_BYTES), flushing first when needed:
 * where to write them; the caller then advances olen. */
static inline char *ptc__cj_out_room(cj *in, size_t n)
{
    if (n > sizeof in->obuf - in->olen)
        ptc__cj_out_flush(in);
    return in->obuf + in->olen;
}

/* The member's separator, line break, indentation and key, in one piece (keys are the callers'
 * own short constants: inlined, their lengths are constants). */
static inline void ptc__cj_jobj_key(jobj *o, const char *key)
{
    size_t klen = strlen(key), ind = (size_t)(o->depth + 1) * JSON_STEP;
    if (ind > 32)
        ind = 32; /* json_newline's most */
    char *p = ptc__cj_out_room(o->in, klen + ind + 6), *p0 = p;
    *p++ = o->n++ ? ',' : '{';
    *p++ = '\n';
    memset(p, ' ', ind);
    p += ind;
    *p++ = '"';
    memcpy(p, key, klen);
    p += klen;
    memcpy(p, "\": ", 3);
    p += 3;
    o->in->olen += (size_t)(p - p0);
}

#endif
