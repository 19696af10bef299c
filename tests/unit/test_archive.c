/*
 * test_archive.c - unit tests of lib/archive: byte sources and the strict zip reader.
 *
 * Two kinds of input are used. The torch-written vectors in testdata/vectors (found through the
 * environment variable top_srcdir, set by make check) show that real checkpoints open, with the
 * offsets, names and bytes the format reference documents. Zips assembled here byte by byte (the
 * zip_build helper writes local headers, data descriptors, the central directory and the end
 * records, in torch 2.6's layout unless a test asks for a defect) exercise each rejection rule
 * of archive.h one at a time: every hostile archive differs from a valid one in one respect.
 *
 * The test also sweeps allocation failures (every allocation of an open and a read fails in
 * turn, and nothing may leak), and times the opening of a 20,000-record archive and of a sparse
 * 1 GiB checkpoint; the times are printed, never asserted.
 */
#include "archive/archive.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers --------------------------------------------------------------------------------- */

/* CHECK_CODE tests its error pointer for NULL; handing it &err directly makes gcc warn that the
 * address is never NULL (-Waddress), so the address goes through a function. */
static ptc_error *errp_of(ptc_error *e)
{
    return e;
}
#define EP(e) errp_of(&(e))

static const char *srcdir(void)
{
    const char *d = getenv("top_srcdir");
    return d && d[0] ? d : ".";
}

static void vector_path(char *buf, size_t n, const char *file)
{
    snprintf(buf, n, "%s/testdata/vectors/%s", srcdir(), file);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static void limits_default(ptc_limits *l)
{
    /* The defaults documented in ptc.h; filled by hand so this test needs only lib/archive and
     * lib/base. */
    l->max_depth = 1000;
    l->max_memo = 1u << 20;
    l->max_objects = 1u << 24;
    l->max_pickle_bytes = 1ull << 30;
    l->max_heap_bytes = 1ull << 30;
    l->max_records = 1u << 20;
    l->max_inflated_bytes = 16ull << 30;
    l->max_inflate_ratio = 1000;
    l->max_ndim = 64;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Opens a zip held in memory with the given limits (NULL: defaults) and flags; returns the code.
 * On success *zp and *sp hold the archive and its source (close both); on failure both are
 * NULL. */
static int open_buf(const uint8_t *buf, size_t len, const ptc_limits *lim, unsigned flags,
                    ptc__budget *budget, ptc__zip **zp, ptc__source **sp, ptc_error *err)
{
    ptc_limits l;
    if (!lim) {
        limits_default(&l);
        lim = &l;
    }
    *zp = NULL;
    *sp = NULL;
    int rc = ptc__source_open_memory(sp, buf, len, err);
    if (rc < 0)
        return rc;
    rc = ptc__zip_open(zp, *sp, lim, budget, flags, err);
    if (rc < 0) {
        ptc__source_close(*sp);
        *sp = NULL;
    }
    return rc;
}

/* Opens, closes, and returns the code: for the tests that only care whether a file is accepted. */
static int try_open(const uint8_t *buf, size_t len, const ptc_limits *lim, unsigned flags,
                    ptc_error *err)
{
    ptc__zip *z;
    ptc__source *s;
    int rc = open_buf(buf, len, lim, flags, NULL, &z, &s, err);
    ptc__zip_close(z);
    ptc__source_close(s);
    return rc;
}

/* ---- a zip writer for hostile archives ------------------------------------------------------- */

typedef struct tbuf {
    uint8_t *p;
    size_t len, cap;
} tbuf;

static void tb_put(tbuf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) {
            fprintf(stderr, "test_archive: out of memory\n");
            exit(99);
        }
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void tb_u16(tbuf *b, uint16_t v)
{
    uint8_t x[2];
    ptc__put_le16(x, v);
    tb_put(b, x, 2);
}

static void tb_u32(tbuf *b, uint32_t v)
{
    uint8_t x[4];
    ptc__put_le32(x, v);
    tb_put(b, x, 4);
}

static void tb_u64(tbuf *b, uint64_t v)
{
    uint8_t x[8];
    ptc__put_le64(x, v);
    tb_put(b, x, 8);
}

static void tb_fill(tbuf *b, uint8_t c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tb_put(b, &c, 1);
}

/* One record. Zero-initialised fields give a valid torch-like stored record. */
typedef struct zspec {
    const char *name;       /* central name */
    size_t name_len;        /* 0: strlen(name) (set it for names holding NUL) */
    const char *local_name; /* local header's name; NULL: the central name */
    const void *content;    /* the record's bytes, before compression */
    size_t content_len;
    uint16_t method; /* 8: the builder deflates; anything else: content stored as is */
    uint16_t flags;  /* extra flag bits, in both headers */
    uint16_t local_flags_xor;
    int desc;                 /* 0: sizes in the local header; 1: descriptor with signature; 2:
                                descriptor without signature */
    uint32_t crc_xor;         /* spoils the CRC everywhere */
    int64_t desc_size_delta;  /* added to the sizes in the descriptor only */
    int64_t size_delta;       /* added to the declared uncompressed size everywhere */
    int zip64;                /* central zip64: 1 sizes, 3 sizes and offset, 4 offset only (as
                                0xFFFFFFFF + a zip64 extra field); 2 size sentinel, no extra */
    int local_zip64;          /* 1: local zip64 extra (size, compressed size) with 0xFFFFFFFF local
                                sizes, or 24-byte descriptors; 2: the same but the extra's
                                compressed size is 0 (torch's quirk) */
    int desc_narrow;          /* 16-byte descriptor even with a local zip64 extra */
    int64_t local_size_delta; /* added to both sizes in the local header only (its 32-bit fields
                                 or its zip64 extra) */
    size_t gap;               /* junk bytes after the record */
    int central_only;         /* no local record; the central entry points at hoff */
    uint64_t hoff;
    int no_fb; /* no 'FB' alignment field */
} zspec;

typedef struct zopts {
    int no_zip64_end;  /* omit the zip64 end record and locator */
    int count_delta;   /* added to the counts of both end records */
    int count64_delta; /* added to the zip64 count only */
    const char *comment;
    size_t trailing; /* junk after the end record */
    size_t leading;  /* junk before the first record, offsets adjusted */
} zopts;

static void raw_deflate(const void *in, size_t n, tbuf *out)
{
    z_stream s;
    memset(&s, 0, sizeof s);
    if (deflateInit2(&s, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        exit(99);
    uint8_t chunk[16384];
    s.next_in = (Bytef *)in;
    s.avail_in = (uInt)n;
    int rc;
    do {
        s.next_out = chunk;
        s.avail_out = sizeof chunk;
        rc = deflate(&s, Z_FINISH);
        tb_put(out, chunk, sizeof chunk - s.avail_out);
    } while (rc == Z_OK);
    deflateEnd(&s);
}

/* Assembles an archive: local records in order, central directory, zip64 end record and locator
 * (unless omitted), end record. Returns a malloc'ed buffer. */
static uint8_t *zip_build(const zspec *specs, size_t n, const zopts *o, size_t *out_len)
{
    static const zopts none;
    if (!o)
        o = &none;
    tbuf b = {0};
    tb_fill(&b, 'J', o->leading);
    uint64_t *hoff = calloc(n ? n : 1, sizeof *hoff);
    tbuf *payload = calloc(n ? n : 1, sizeof *payload);
    for (size_t i = 0; i < n; i++) {
        const zspec *s = &specs[i];
        size_t nlen = s->name_len ? s->name_len : strlen(s->name);
        const char *lname = s->local_name ? s->local_name : s->name;
        size_t lnlen = s->local_name ? strlen(s->local_name) : nlen;
        if (s->method == 8)
            raw_deflate(s->content, s->content_len, &payload[i]);
        else
            tb_put(&payload[i], s->content, s->content_len);
        uint32_t crc = (uint32_t)crc32(0, s->content, (uInt)s->content_len) ^ s->crc_xor;
        uint64_t usize = (uint64_t)((int64_t)s->content_len + s->size_delta);
        uint64_t csize = payload[i].len;
        uint16_t flags = (uint16_t)(0x0800 | s->flags | (s->desc ? 0x0008 : 0));
        if (s->central_only) {
            hoff[i] = s->hoff;
            continue;
        }
        hoff[i] = b.len;
        size_t pad = 0, lx = s->local_zip64 ? 20 : 0;
        if (!s->no_fb) {
            size_t start = b.len + 30 + lnlen + lx + 4;
            pad = (64 - start % 64) % 64;
        }
        uint64_t lusize = usize + (uint64_t)s->local_size_delta;
        uint64_t lcsize = csize + (uint64_t)s->local_size_delta;
        uint32_t lsize32 = s->local_zip64 ? 0xFFFFFFFFu : (uint32_t)lusize;
        uint32_t lcsize32 = s->local_zip64 ? 0xFFFFFFFFu : (uint32_t)lcsize;
        tb_u32(&b, 0x04034b50);
        tb_u16(&b, 20);
        tb_u16(&b, flags ^ s->local_flags_xor);
        tb_u16(&b, s->method);
        tb_u32(&b, 0); /* time, date */
        tb_u32(&b, s->desc ? 0 : crc);
        tb_u32(&b, s->desc ? 0 : lcsize32);
        tb_u32(&b, s->desc ? 0 : lsize32);
        tb_u16(&b, (uint16_t)lnlen);
        tb_u16(&b, (uint16_t)(lx + (s->no_fb ? 0 : 4 + pad)));
        tb_put(&b, lname, lnlen);
        if (s->local_zip64) {
            tb_u16(&b, 0x0001);
            tb_u16(&b, 16);
            tb_u64(&b, lusize);
            tb_u64(&b, s->local_zip64 == 2 ? 0 : lcsize);
        }
        if (!s->no_fb) {
            tb_u16(&b, 0x4246);
            tb_u16(&b, (uint16_t)pad);
            tb_fill(&b, 'Z', pad);
        }
        tb_put(&b, payload[i].p, payload[i].len);
        if (s->desc) {
            if (s->desc == 1)
                tb_u32(&b, 0x08074b50);
            tb_u32(&b, crc);
            if (s->local_zip64 && !s->desc_narrow) {
                tb_u64(&b, csize + (uint64_t)s->desc_size_delta);
                tb_u64(&b, usize + (uint64_t)s->desc_size_delta);
            } else {
                tb_u32(&b, (uint32_t)(csize + (uint64_t)s->desc_size_delta));
                tb_u32(&b, (uint32_t)(usize + (uint64_t)s->desc_size_delta));
            }
        }
        tb_fill(&b, 'G', s->gap);
    }
    uint64_t cd_off = b.len;
    for (size_t i = 0; i < n; i++) {
        const zspec *s = &specs[i];
        size_t nlen = s->name_len ? s->name_len : strlen(s->name);
        uint32_t crc = (uint32_t)crc32(0, s->content, (uInt)s->content_len) ^ s->crc_xor;
        uint64_t usize = (uint64_t)((int64_t)s->content_len + s->size_delta);
        uint64_t csize = payload[i].len;
        uint16_t flags = (uint16_t)(0x0800 | s->flags | (s->desc ? 0x0008 : 0));
        tb_u32(&b, 0x02014b50);
        tb_u16(&b, 0x031E);
        tb_u16(&b, 20);
        tb_u16(&b, flags);
        tb_u16(&b, s->method);
        tb_u32(&b, 0);
        tb_u32(&b, crc);
        int zsizes = s->zip64 == 1 || s->zip64 == 2 || s->zip64 == 3;
        int zoff = s->zip64 == 3 || s->zip64 == 4;
        uint16_t xlen = (uint16_t)(s->zip64 == 2 ? 0 : (zsizes ? 16 : 0) + (zoff ? 8 : 0));
        tb_u32(&b, zsizes ? 0xFFFFFFFFu : (uint32_t)csize);
        tb_u32(&b, zsizes ? 0xFFFFFFFFu : (uint32_t)usize);
        tb_u16(&b, (uint16_t)nlen);
        tb_u16(&b, xlen ? (uint16_t)(4 + xlen) : 0);
        tb_u16(&b, 0); /* comment */
        tb_u16(&b, 0); /* disk */
        tb_u16(&b, 0);
        tb_u32(&b, 0);
        tb_u32(&b, zoff ? 0xFFFFFFFFu : (uint32_t)hoff[i]);
        tb_put(&b, s->name, nlen);
        if (xlen) {
            tb_u16(&b, 0x0001);
            tb_u16(&b, xlen);
            if (zsizes) {
                tb_u64(&b, usize);
                tb_u64(&b, csize);
            }
            if (zoff)
                tb_u64(&b, hoff[i]);
        }
    }
    uint64_t cd_size = b.len - cd_off;
    uint64_t count = (uint64_t)((int64_t)n + o->count_delta);
    if (!o->no_zip64_end) {
        uint64_t e64 = b.len;
        tb_u32(&b, 0x06064b50);
        tb_u64(&b, 44);
        tb_u16(&b, 0x031E);
        tb_u16(&b, 0x002D);
        tb_u32(&b, 0);
        tb_u32(&b, 0);
        tb_u64(&b, count + (uint64_t)o->count64_delta);
        tb_u64(&b, count + (uint64_t)o->count64_delta);
        tb_u64(&b, cd_size);
        tb_u64(&b, cd_off);
        tb_u32(&b, 0x07064b50);
        tb_u32(&b, 0);
        tb_u64(&b, e64);
        tb_u32(&b, 1);
    }
    size_t clen = o->comment ? strlen(o->comment) : 0;
    tb_u32(&b, 0x06054b50);
    tb_u16(&b, 0);
    tb_u16(&b, 0);
    tb_u16(&b, (uint16_t)(count > 0xFFFF ? 0xFFFF : count));
    tb_u16(&b, (uint16_t)(count > 0xFFFF ? 0xFFFF : count));
    tb_u32(&b, (uint32_t)cd_size);
    tb_u32(&b, (uint32_t)cd_off);
    tb_u16(&b, (uint16_t)clen);
    tb_put(&b, o->comment, clen);
    tb_fill(&b, 'T', o->trailing);
    for (size_t i = 0; i < n; i++)
        free(payload[i].p);
    free(payload);
    free(hoff);
    *out_len = b.len;
    return b.p;
}

/* The records of a minimal torch-like checkpoint; tests copy and modify them. */
static const char PKL[] = "\x80\x02}q\x00.";
static const char VERSION[] = "3\n";
static const uint8_t DATA0[8] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};

static void base_specs(zspec s[4])
{
    memset(s, 0, 4 * sizeof *s);
    s[0] = (zspec){
        .name = "archive/data.pkl", .content = PKL, .content_len = sizeof PKL - 1, .desc = 1};
    s[1] = (zspec){.name = "archive/byteorder", .content = "little", .content_len = 6, .desc = 1};
    s[2] = (zspec){.name = "archive/data/0", .content = DATA0, .content_len = 8, .desc = 1};
    s[3] = (zspec){.name = "archive/version", .content = VERSION, .content_len = 2, .desc = 1};
}

/* Builds the base checkpoint with one modification applied by the caller and checks the code. */
#define EXPECT_ZIP(specs, n, opts, lim, flags, code, what)                                         \
    do {                                                                                           \
        size_t len_;                                                                               \
        uint8_t *buf_ = zip_build((specs), (n), (opts), &len_);                                    \
        ptc_error e_;                                                                              \
        ptc__err_clear(&e_);                                                                       \
        int rc_ = try_open(buf_, len_, (lim), (flags), &e_);                                       \
        printf("  %-44s -> %-9s %s\n", (what), ptc_err_name(rc_), e_.message);                     \
        CHECK_CODE(rc_, (code), EP(e_));                                                           \
        free(buf_);                                                                                \
    } while (0)

/* ---- torch-written vectors ------------------------------------------------------------------- */

typedef struct vec_expect {
    const char *file;
    const char *prefix;
    size_t count;
    const char *last; /* the last record in central order */
} vec_expect;

static void test_vectors(void)
{
    printf("torch 2.6 vectors open by path, with CRC verification:\n");
    static const vec_expect vecs[] = {
        {"tensor_bytesio.pt", "archive", 5, ".data/serialization_id"},
        {"vec_tensor.pt", "vec_tensor", 5, ".data/serialization_id"},
        {"views.pt", "views", 5, ".data/serialization_id"},
        {"dtypes.pt", "dtypes", 21, ".data/serialization_id"},
        {"train_ckpt.pt", "train_ckpt", 15, ".data/serialization_id"},
        {"handmade_minimal_writer.pt", "archive", 5, "version"},
    };
    ptc_limits lim;
    limits_default(&lim);
    for (size_t v = 0; v < sizeof vecs / sizeof vecs[0]; v++) {
        char path[4096];
        vector_path(path, sizeof path, vecs[v].file);
        ptc_error err;
        ptc__source *src = NULL;
        ptc__zip *z = NULL;
        ptc__budget budget = {0, 1u << 20};
        int rc = ptc__source_open_path(&src, path, &err);
        CHECK_CODE(rc, 0, EP(err));
        if (rc < 0)
            continue;
        rc = ptc__zip_open(&z, src, &lim, &budget, PTC_OPEN_VERIFY_CRC, &err);
        CHECK_CODE(rc, 0, EP(err));
        if (rc == 0) {
            printf("  %-28s prefix %-11s %2zu records, %5llu table bytes charged\n", vecs[v].file,
                   ptc__zip_prefix(z), ptc__zip_count(z), (unsigned long long)budget.used);
            CHECK_STR(ptc__zip_prefix(z), vecs[v].prefix);
            CHECK_INT(ptc__zip_count(z), vecs[v].count);
            CHECK_STR(ptc__zip_entry_at(z, 0)->record, "data.pkl");
            CHECK_STR(ptc__zip_entry_at(z, 1)->record, "byteorder");
            CHECK_STR(ptc__zip_entry_at(z, ptc__zip_count(z) - 1)->record, vecs[v].last);
            CHECK(ptc__zip_entry_at(z, ptc__zip_count(z)) == NULL);
            CHECK(budget.used > 0);
            for (size_t i = 0; i < ptc__zip_count(z); i++) {
                const ptc__zip_entry *e = ptc__zip_entry_at(z, i);
                /* torch pads every local header so that data starts on 64 bytes. */
                CHECK_INT(e->data_offset % 64, 0);
                CHECK_INT(e->method, 0);
                CHECK_INT(e->flags, 0x0808);
                CHECK(e->comp_size == e->size);
                CHECK(ptc__zip_find(z, e->record) == e);
                CHECK(e->record == e->name + strlen(vecs[v].prefix) + 1);
            }
            const ptc__zip_entry *bo = ptc__zip_find(z, "byteorder");
            const uint8_t *data = NULL;
            void *owned = NULL;
            CHECK(bo != NULL);
            if (bo) {
                CHECK_CODE(ptc__zip_read(z, bo, &data, &owned, &err), 0, EP(err));
                CHECK(owned == NULL); /* mapped and stored: in place */
                CHECK(data && bo->size == 6 && memcmp(data, "little", 6) == 0);
            }
        }
        ptc__zip_close(z);
        CHECK_INT(budget.used, 0);
        ptc__source_close(src);
    }

    /* The layout the reference's hex dump of tensor_bytesio.pt shows. */
    char path[4096];
    vector_path(path, sizeof path, "tensor_bytesio.pt");
    ptc_error err;
    ptc__source *src = NULL;
    ptc__zip *z = NULL;
    if (ptc__source_open_path(&src, path, &err) == 0 &&
        ptc__zip_open(&z, src, &lim, NULL, 0, &err) == 0) {
        static const struct {
            const char *record;
            uint64_t header, data, end, size;
            uint32_t crc;
        } want[] = {
            {"data.pkl", 0x000, 0x040, 0x0E6, 150, 0xB4401400u},
            {"byteorder", 0x0E6, 0x140, 0x156, 6, 0x19E33D85u},
            {"data/0", 0x156, 0x1C0, 0x1D8, 8, 0x2E3FA576u},
            {"version", 0x1D8, 0x240, 0x252, 2, 0x55679ED1u},
            {".data/serialization_id", 0x252, 0x2C0, 0x2F8, 40, 0x246951CBu},
        };
        printf("tensor_bytesio.pt: offsets, sizes and CRCs match the reference's hex dump\n");
        for (size_t i = 0; i < 5; i++) {
            const ptc__zip_entry *e = ptc__zip_find(z, want[i].record);
            CHECK(e == ptc__zip_entry_at(z, i));
            if (!e)
                continue;
            CHECK_INT(e->header_offset, want[i].header);
            CHECK_INT(e->data_offset, want[i].data);
            CHECK_INT(e->end_offset, want[i].end);
            CHECK_INT(e->size, want[i].size);
            CHECK_INT(e->crc32, want[i].crc);
        }
        const ptc__zip_entry *d0 = ptc__zip_find(z, "data/0");
        const uint8_t *data = NULL;
        void *owned = NULL;
        if (d0 && ptc__zip_read(z, d0, &data, &owned, &err) == 0) {
            CHECK(memcmp(data, DATA0, 8) == 0);
            ptc__zip_release(z, d0, owned);
        }
        printf("lookups are exact and case-sensitive\n");
        CHECK(ptc__zip_find(z, "DATA.PKL") == NULL);
        CHECK(ptc__zip_find(z, "archive/data.pkl") == NULL);
        CHECK(ptc__zip_find(z, "data") == NULL);
        CHECK(ptc__zip_find(z, "") == NULL);
        CHECK(ptc__zip_find(z, "zzz") == NULL);
        CHECK(ptc__zip_find(z, "data/1") == NULL);
    } else {
        fprintf(stderr, "cannot open %s: %s\n", path, err.message);
        CHECK(z != NULL);
    }
    ptc__zip_close(z);
    ptc__source_close(src);

    printf("the legacy (pre-1.6) vector is not a zip archive\n");
    vector_path(path, sizeof path, "legacy_format.pt");
    src = NULL;
    z = NULL;
    CHECK_CODE(ptc__source_open_path(&src, path, &err), 0, EP(err));
    if (src) {
        int rc = ptc__zip_open(&z, src, &lim, NULL, 0, &err);
        printf("  legacy_format.pt -> %s %s\n", ptc_err_name(rc), err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        CHECK(z == NULL);
        ptc__source_close(src);
    }

    printf("a missing path and a directory are I/O errors\n");
    vector_path(path, sizeof path, "no-such-file.pt");
    CHECK_CODE(ptc__source_open_path(&src, path, &err), PTC_EIO, EP(err));
    vector_path(path, sizeof path, "");
    CHECK_CODE(ptc__source_open_path(&src, path, &err), PTC_EIO, EP(err));
}

/* ---- sources --------------------------------------------------------------------------------- */

typedef struct cb_ctx {
    const uint8_t *buf;
    size_t len;
    size_t calls;
    int fail;     /* return -1 from this call on (0: never) */
    size_t chunk; /* at most this many bytes per call (0: all) */
} cb_ctx;

static int64_t cb_read(void *ctx, uint64_t off, void *buf, size_t len)
{
    cb_ctx *c = ctx;
    c->calls++;
    if (c->fail && c->calls >= (size_t)c->fail)
        return -1;
    if (off >= c->len)
        return 0;
    size_t n = c->len - off < len ? c->len - (size_t)off : len;
    if (c->chunk && n > c->chunk)
        n = c->chunk;
    memcpy(buf, c->buf + off, n);
    return (int64_t)n;
}

/* A path that cannot be mapped (a FIFO fed by a child process) is read whole. */
static void test_fifo(const uint8_t *file, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/ptc_test_archive_%ld.fifo", tmp && tmp[0] ? tmp : "/tmp",
             (long)getpid());
    unlink(path);
    if (mkfifo(path, 0600) != 0) {
        printf("  FIFO: skipped, cannot create %s (%s)\n", path, strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        int fd = open(path, O_WRONLY);
        size_t done = 0;
        while (fd >= 0 && done < len) {
            ssize_t w = write(fd, file + done, len - done);
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        _exit(done == len ? 0 : 1);
    }
    ptc__source *s = NULL;
    ptc__zip *z = NULL;
    ptc_error err;
    ptc_limits lim;
    limits_default(&lim);
    int rc = child > 0 ? ptc__source_open_path(&s, path, &err) : PTC_EIO;
    if (rc == 0)
        rc = ptc__zip_open(&z, s, &lim, NULL, PTC_OPEN_VERIFY_CRC, &err);
    CHECK_CODE(rc, 0, EP(err));
    if (rc == 0) {
        CHECK_INT(ptc__source_size(s), len);
        CHECK(ptc__source_map(s) != NULL);
        printf("  FIFO: read whole (%llu bytes), %zu records\n",
               (unsigned long long)ptc__source_size(s), ptc__zip_count(z));
    }
    int status = 1;
    if (child > 0)
        waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ptc__zip_close(z);
    ptc__source_close(s);
    unlink(path);
}

static void test_sources(void)
{
    printf("the three sources (path, memory, callback) see the same archive:\n");
    char path[4096];
    vector_path(path, sizeof path, "train_ckpt.pt");
    size_t len = 0;
    uint8_t *file = slurp(path, &len);
    CHECK(file != NULL && len == 4194);
    if (!file)
        return;
    ptc_limits lim;
    limits_default(&lim);
    ptc_error err;
    ptc__source *srcs[3] = {NULL, NULL, NULL};
    cb_ctx cb = {file, len, 0, 0, 7};
    CHECK_CODE(ptc__source_open_path(&srcs[0], path, &err), 0, EP(err));
    CHECK_CODE(ptc__source_open_memory(&srcs[1], file, len, &err), 0, EP(err));
    CHECK_CODE(ptc__source_open_callback(&srcs[2], cb_read, &cb, len, &err), 0, EP(err));
    static const char *kind[3] = {"path", "memory", "callback"};
    for (int k = 0; k < 3; k++) {
        if (!srcs[k])
            continue;
        CHECK_INT(ptc__source_size(srcs[k]), len);
        CHECK((ptc__source_map(srcs[k]) != NULL) == (k != 2));
        uint8_t head[4];
        CHECK_CODE(ptc__source_read(srcs[k], 0, head, 4, &err), 0, EP(err));
        CHECK(memcmp(head, "PK\x03\x04", 4) == 0);
        CHECK_CODE(ptc__source_read(srcs[k], len - 2, head, 4, &err), PTC_EFORMAT, EP(err));
        CHECK_CODE(ptc__source_read(srcs[k], UINT64_MAX, head, 1, &err), PTC_EFORMAT, EP(err));
        CHECK_CODE(ptc__source_read(srcs[k], len, head, 0, &err), 0, EP(err));

        ptc__budget budget = {0, 1u << 20};
        ptc__zip *z = NULL;
        int rc = ptc__zip_open(&z, srcs[k], &lim, &budget, PTC_OPEN_VERIFY_CRC, &err);
        CHECK_CODE(rc, 0, EP(err));
        if (rc == 0) {
            CHECK_INT(ptc__zip_count(z), 15);
            const ptc__zip_entry *e = ptc__zip_find(z, "data/10");
            const uint8_t *data = NULL;
            void *owned = NULL;
            CHECK(e != NULL);
            if (e && ptc__zip_read(z, e, &data, &owned, &err) == 0) {
                /* Stored records of addressable sources are used in place, others copied. */
                CHECK((owned == NULL) == (k != 2));
                CHECK(data && memcmp(data, file + e->data_offset, (size_t)e->size) == 0);
                if (owned)
                    CHECK(budget.used >= e->size);
                ptc__zip_release(z, e, owned);
            }
            for (size_t i = 0; i < ptc__zip_count(z); i++)
                CHECK_CODE(ptc__zip_check_crc(z, ptc__zip_entry_at(z, i), &err), 0, EP(err));
            printf("  %-8s: %zu records, data/10 at 0x%llx%s\n", kind[k], ptc__zip_count(z),
                   e ? (unsigned long long)e->data_offset : 0ull,
                   k == 2 ? " (read through the callback)" : " (in place)");
        }
        ptc__zip_close(z);
        CHECK_INT(budget.used, 0);
    }
    printf("  the callback source served %zu calls of at most 7 bytes\n", cb.calls);
    for (int k = 0; k < 3; k++)
        ptc__source_close(srcs[k]);

    printf("a failing callback is an I/O error; a callback shorter than its size is truncation\n");
    for (int fail = 1; fail <= 40; fail += 13) {
        cb_ctx bad = {file, len, 0, fail, 0};
        ptc__source *s = NULL;
        ptc__zip *z = NULL;
        CHECK_CODE(ptc__source_open_callback(&s, cb_read, &bad, len, &err), 0, EP(err));
        int rc = ptc__zip_open(&z, s, &lim, NULL, PTC_OPEN_VERIFY_CRC, &err);
        printf("  fail from call %2d -> %s %s\n", fail, ptc_err_name(rc), err.message);
        CHECK_CODE(rc, PTC_EIO, EP(err));
        ptc__zip_close(z);
        ptc__source_close(s);
    }
    {
        /* The callback claims 100 bytes more than it can deliver. */
        cb_ctx shortcb = {file, len, 0, 0, 0};
        ptc__source *s = NULL;
        uint8_t x[8];
        CHECK_CODE(ptc__source_open_callback(&s, cb_read, &shortcb, len + 100, &err), 0, EP(err));
        CHECK_CODE(ptc__source_read(s, len + 10, x, 8, &err), PTC_EFORMAT, EP(err));
        printf("  short callback -> %s\n", err.message);
        ptc__source_close(s);
    }
    test_fifo(file, len);

    printf("bad arguments are PTC_EINVAL\n");
    ptc__source *s = NULL;
    CHECK_CODE(ptc__source_open_memory(&s, NULL, 5, &err), PTC_EINVAL, EP(err));
    CHECK_CODE(ptc__source_open_callback(&s, NULL, NULL, 5, &err), PTC_EINVAL, EP(err));
    CHECK_CODE(ptc__source_open_path(&s, NULL, &err), PTC_EINVAL, EP(err));
    ptc__zip *z = NULL;
    CHECK_CODE(ptc__zip_open(&z, NULL, &lim, NULL, 0, &err), PTC_EINVAL, EP(err));
    ptc__source_close(NULL);
    ptc__zip_close(NULL);
    free(file);
}

/* ---- archives built here: valid variants ----------------------------------------------------- */

static void test_valid_built(void)
{
    printf("valid archives built here are accepted:\n");
    zspec s[4];
    zopts o;

    base_specs(s);
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "torch layout");

    base_specs(s);
    for (int i = 0; i < 4; i++)
        s[i].desc = 2;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "descriptors without signature");

    base_specs(s);
    for (int i = 0; i < 4; i++) {
        s[i].desc = 0;
        s[i].no_fb = 1;
    }
    o = (zopts){.no_zip64_end = 1};
    EXPECT_ZIP(s, 4, &o, NULL, PTC_OPEN_VERIFY_CRC, 0, "plain zip (no descriptors, no zip64)");

    base_specs(s);
    s[2].zip64 = 1;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "zip64 extra for the sizes");

    base_specs(s);
    s[2].zip64 = 1;
    s[2].desc = 0;
    s[2].local_zip64 = 1;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "zip64 sizes in both headers");

    base_specs(s);
    s[2].zip64 = 1;
    s[2].local_zip64 = 2;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "torch >= 4 GiB layout (24-byte desc)");

    base_specs(s);
    s[2].zip64 = 3;
    s[2].local_zip64 = 2;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "zip64 sizes and offset");

    base_specs(s);
    s[3].zip64 = 4;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "zip64 offset only");

    base_specs(s);
    o = (zopts){.comment = "made by a test"};
    EXPECT_ZIP(s, 4, &o, NULL, PTC_OPEN_VERIFY_CRC, 0, "archive comment");

    base_specs(s);
    s[1] = (zspec){.name = "archive/", .content = "", .content_len = 0};
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "empty directory entry");

    base_specs(s);
    s[1] = (zspec){.name = "archive/empty", .content = "", .content_len = 0};
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "empty record without descriptor");

    base_specs(s);
    s[1].name = "archive/caf\xc3\xa9/\xe6\x97\xa5";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, 0, "UTF-8 name with flag 11");

    base_specs(s);
    s[0].name = "p/data.pkl";
    s[1].name = "p/byteorder";
    s[2].name = "p/data/0";
    s[3].name = "p/version";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, 0, "one-letter prefix");
}

/* ---- archives built here: each rejection rule ------------------------------------------------ */

static void test_names(void)
{
    printf("name rules:\n");
    zspec s[5];
    base_specs(s);
    s[3].name = "archive/data.pkl";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "duplicate name");

    base_specs(s);
    s[3].name = "archive/Data.PKL";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "names equal but for case");

    base_specs(s);
    s[4] = s[0];
    s[4].name = "archive/data.pkl\0x";
    s[4].name_len = 18;
    EXPECT_ZIP(s, 5, NULL, NULL, 0, PTC_EFORMAT, "NUL in a name");

    static const char *bad[] = {
        "archive/../x",
        "archive/a/../../x",
        "/archive/x",
        "archive/a\\b",
        "archive/C:x",
        "archive/./x",
        "archive//x",
        "archive/x\x1b[2J",
        "archive/\x7f",
        "archive/a/..",
        "archive/\xc2\x9b\x33\x31m",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        base_specs(s);
        s[2].name = bad[i];
        char what[64];
        char shown[40];
        ptc__escape(shown, sizeof shown, bad[i], strlen(bad[i]), false);
        snprintf(what, sizeof what, "name \"%s\"", shown);
        EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, what);
    }

    base_specs(s);
    s[2].name = "archive/\xff\xfe";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "invalid UTF-8 name");

    base_specs(s);
    s[2].name = "archive/caf\xc3\xa9";
    s[2].local_flags_xor = 0;
    {
        /* Bit 11 cleared in both headers: a non-ASCII name would be cp437 to Python. */
        size_t len;
        uint8_t *buf = zip_build(s, 4, NULL, &len);
        for (size_t k = 0; k + 4 <= len; k++) {
            uint32_t sig = ptc__le32(buf + k);
            uint64_t at = sig == 0x04034b50 ? 6 : sig == 0x02014b50 ? 8 : 0;
            if (at && memcmp(buf + k + (sig == 0x04034b50 ? 30 : 46), "archive/caf", 11) == 0)
                ptc__put_le16(buf + k + at, (uint16_t)(ptc__le16(buf + k + at) & ~0x0800));
        }
        ptc_error err;
        int rc = try_open(buf, len, NULL, 0, &err);
        printf("  %-44s -> %-9s %s\n", "non-ASCII name without flag 11", ptc_err_name(rc),
               err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
    }

    base_specs(s);
    s[2].name = "";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "empty name");

    base_specs(s);
    s[3].name = "other/version";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "two prefixes");

    base_specs(s);
    s[0].name = "evil/data.pkl";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "first entry sets another prefix");

    base_specs(s);
    s[0].name = "data.pkl";
    s[1].name = "byteorder";
    s[2].name = "data/0";
    s[3].name = "version";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "flat layout (no prefix)");

    base_specs(s);
    s[1].name = "archive/dir/";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "directory entry holding data");

    /* The member of a name error is the escaped name, never raw bytes. */
    base_specs(s);
    s[2].name = "archive/x\x1b[2J";
    size_t len;
    uint8_t *buf = zip_build(s, 4, NULL, &len);
    ptc_error err;
    CHECK_CODE(try_open(buf, len, NULL, 0, &err), PTC_EFORMAT, EP(err));
    CHECK_STR(err.member, "archive/x\\x1b[2J");
    CHECK(strchr(err.message, 0x1b) == NULL);
    free(buf);
}

static void test_structure(void)
{
    printf("flags, methods, headers and descriptors:\n");
    zspec s[5];
    zopts o;
    base_specs(s);
    s[0].flags = 0x0001;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "encrypted flag");
    base_specs(s);
    s[0].flags = 0x0020;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "patch data flag");
    base_specs(s);
    s[0].flags = 0x0040;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "strong encryption flag");
    base_specs(s);
    s[0].method = 12;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "method 12 (bzip2)");
    base_specs(s);
    s[0].method = 99;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "method 99 (AES)");
    base_specs(s);
    s[2].local_flags_xor = 0x0002;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "local flags differ from central");
    base_specs(s);
    s[2].local_name = "archive/data/1";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "local name differs (same length)");
    base_specs(s);
    s[2].local_name = "archive/data/00";
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "local name differs (longer)");
    base_specs(s);
    s[2].desc_size_delta = 1;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "descriptor sizes differ from central");
    base_specs(s);
    s[2].desc = 0;
    s[2].size_delta = 2;
    s[2].method = 0;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "stored with size != compressed size");
    base_specs(s);
    s[2].zip64 = 2;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "0xFFFFFFFF size without zip64 extra");
    base_specs(s);
    s[2].zip64 = 1;
    s[2].local_zip64 = 1;
    s[2].desc_narrow = 1;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "local zip64 extra, 16-byte descriptor");
    /* zip64 sizes in one header only: see test_zip64_readings. */
    {
        /* A zip64 extra field longer than the sentinels call for. */
        base_specs(s);
        s[2].zip64 = 1;
        size_t len;
        uint8_t *buf = zip_build(s, 4, NULL, &len);
        int patched = 0;
        for (size_t k = 0; k + 46 <= len; k++)
            if (ptc__le32(buf + k) == 0x02014b50 && ptc__le32(buf + k + 20) == 0xFFFFFFFFu) {
                ptc__put_le32(buf + k + 20, 8); /* compressed size no longer a sentinel */
                patched++;
            }
        ptc_error err;
        int rc = try_open(buf, len, NULL, 0, &err);
        printf("  %-44s -> %-9s %s\n", "zip64 extra longer than needed", ptc_err_name(rc),
               err.message);
        CHECK_INT(patched, 1);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
    }

    printf("CRC-32:\n");
    base_specs(s);
    s[2].crc_xor = 0x1;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, 0, "wrong CRC, not verified");
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, PTC_ECRC, "wrong CRC, verified");
    {
        size_t len;
        uint8_t *buf = zip_build(s, 4, NULL, &len);
        ptc__zip *z;
        ptc__source *src;
        ptc_error err;
        CHECK_CODE(open_buf(buf, len, NULL, 0, NULL, &z, &src, &err), 0, EP(err));
        if (z) {
            const ptc__zip_entry *e = ptc__zip_find(z, "data/0");
            CHECK_CODE(ptc__zip_check_crc(z, e, &err), PTC_ECRC, EP(err));
            CHECK_STR(err.member, "data/0");
            CHECK_CODE(ptc__zip_check_crc(z, ptc__zip_find(z, "version"), &err), 0, EP(err));
        }
        ptc__zip_close(z);
        ptc__source_close(src);
        free(buf);
    }

    printf("tiling of the local records:\n");
    base_specs(s);
    s[1].gap = 16;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "gap between records");
    base_specs(s);
    s[3].gap = 1;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_EFORMAT, "gap before the central directory");
    base_specs(s);
    o = (zopts){.leading = 64};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "leading junk, offsets adjusted");
    {
        size_t len;
        uint8_t *zipb = zip_build(s, 4, NULL, &len);
        uint8_t *buf = malloc(len + 64);
        memset(buf, 'J', 64);
        memcpy(buf + 64, zipb, len);
        ptc_error err;
        int rc = try_open(buf, len + 64, NULL, 0, &err);
        printf("  %-44s -> %-9s %s\n", "leading junk, offsets not adjusted", ptc_err_name(rc),
               err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
        free(zipb);
    }
    {
        /* A quoted overlap: record A's data is a complete local record B, which a second
         * central entry points at. */
        tbuf inner = {0};
        const char *bname = "archive/data/1";
        uint32_t crc = (uint32_t)crc32(0, DATA0, 8);
        tb_u32(&inner, 0x04034b50);
        tb_u16(&inner, 20);
        tb_u16(&inner, 0x0800);
        tb_u16(&inner, 0);
        tb_u32(&inner, 0);
        tb_u32(&inner, crc);
        tb_u32(&inner, 8);
        tb_u32(&inner, 8);
        tb_u16(&inner, (uint16_t)strlen(bname));
        tb_u16(&inner, 0);
        tb_put(&inner, bname, strlen(bname));
        tb_put(&inner, DATA0, 8);
        base_specs(s);
        s[0].no_fb = 1;
        s[0].content = inner.p;
        s[0].content_len = inner.len;
        s[4] = (zspec){.name = bname,
                       .content = DATA0,
                       .content_len = 8,
                       .central_only = 1,
                       .hoff = 30 + strlen(s[0].name)};
        EXPECT_ZIP(s, 5, NULL, NULL, 0, PTC_EFORMAT, "quoted overlap");
        s[4].hoff = 0;
        s[4].name = "archive/data.pkl2";
        EXPECT_ZIP(s, 5, NULL, NULL, 0, PTC_EFORMAT, "two entries, one local header");
        free(inner.p);
    }

    printf("end records:\n");
    base_specs(s);
    o = (zopts){.trailing = 1};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "one byte after the end record");
    o = (zopts){.trailing = 100};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "100 bytes after the end record");
    o = (zopts){.count_delta = 1};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "end records count one entry more");
    o = (zopts){.count_delta = -1};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "end records count one entry less");
    o = (zopts){.count64_delta = 1};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "zip64 count differs from classic");
    o = (zopts){.no_zip64_end = 1, .count_delta = 1};
    EXPECT_ZIP(s, 4, &o, NULL, 0, PTC_EFORMAT, "classic count mismatch without zip64");
    {
        /* A second end record inside the comment that also reaches the end of the file. */
        size_t len;
        uint8_t *zipb = zip_build(s, 4, NULL, &len);
        uint8_t fake[22];
        memcpy(fake, zipb + len - 22, 22);
        ptc__put_le16(fake + 20, 0);
        ptc__put_le16(zipb + len - 2, 22);
        uint8_t *buf = malloc(len + 22);
        memcpy(buf, zipb, len);
        memcpy(buf + len, fake, 22);
        ptc_error err;
        int rc = try_open(buf, len + 22, NULL, 0, &err);
        printf("  %-44s -> %-9s %s\n", "end record inside the comment", ptc_err_name(rc),
               err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
        free(zipb);
    }
    {
        /* Sentinels in the classic record but no zip64 records. */
        zopts o2 = {.no_zip64_end = 1};
        size_t len;
        uint8_t *buf = zip_build(s, 4, &o2, &len);
        ptc__put_le32(buf + len - 6, 0xFFFFFFFFu);
        ptc_error err;
        int rc = try_open(buf, len, NULL, 0, &err);
        printf("  %-44s -> %-9s %s\n", "zip64 sentinel without zip64 end record", ptc_err_name(rc),
               err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
    }
    {
        /* The zip64 locator pointing past the end of the file. */
        size_t len;
        uint8_t *buf = zip_build(s, 4, NULL, &len);
        ptc__put_le64(buf + len - 22 - 20 + 8, (uint64_t)len + 1000);
        ptc_error err;
        int rc = try_open(buf, len, NULL, 0, &err);
        printf("  %-44s -> %-9s %s\n", "zip64 locator beyond the end", ptc_err_name(rc),
               err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
    }

    printf("empty and truncated files:\n");
    {
        ptc_error err;
        CHECK_CODE(try_open((const uint8_t *)"", 0, NULL, 0, &err), PTC_EFORMAT, EP(err));
        printf("  %-44s -> %s\n", "zero bytes", err.message);
        uint8_t eocd[22] = {0x50, 0x4b, 0x05, 0x06};
        CHECK_CODE(try_open(eocd, 22, NULL, 0, &err), PTC_EFORMAT, EP(err));
        printf("  %-44s -> %s\n", "end record only", err.message);
        zopts o2 = {.no_zip64_end = 0};
        size_t len;
        uint8_t *buf = zip_build(NULL, 0, &o2, &len);
        CHECK_CODE(try_open(buf, len, NULL, 0, &err), PTC_EFORMAT, EP(err));
        printf("  %-44s -> %s\n", "zip64 end records, no entries", err.message);
        free(buf);

        base_specs(s);
        buf = zip_build(s, 4, NULL, &len);
        /* Every proper prefix of a valid archive is rejected, and so is every proper suffix. */
        int prefix_ok = 0, suffix_ok = 0;
        for (size_t cut = 0; cut < len; cut++) {
            if (try_open(buf, cut, NULL, 0, &err) != PTC_EFORMAT)
                prefix_ok++;
            if (try_open(buf + cut + 1, len - cut - 1, NULL, 0, &err) != PTC_EFORMAT)
                suffix_ok++;
        }
        printf("  %-44s -> %zu prefixes and suffixes, %d accepted\n", "truncated archives", 2 * len,
               prefix_ok + suffix_ok);
        CHECK_INT(prefix_ok, 0);
        CHECK_INT(suffix_ok, 0);
        free(buf);
    }
}

/* Opens buf, which must be accepted, and reads data/0 back (DATA0, stored). */
static void expect_data0(const uint8_t *buf, size_t len, const char *what)
{
    ptc__zip *z;
    ptc__source *src;
    ptc_error err;
    ptc__err_clear(&err);
    int rc = open_buf(buf, len, NULL, PTC_OPEN_VERIFY_CRC, NULL, &z, &src, &err);
    printf("  %-44s -> %-9s %s\n", what, ptc_err_name(rc), err.message);
    CHECK_CODE(rc, 0, EP(err));
    if (rc < 0)
        return;
    const ptc__zip_entry *e = ptc__zip_find(z, "data/0");
    const uint8_t *data = NULL;
    void *owned = NULL;
    CHECK(e != NULL);
    if (e) {
        CHECK_INT(e->size, sizeof DATA0);
        CHECK_INT(e->comp_size, sizeof DATA0);
        CHECK_CODE(ptc__zip_read(z, e, &data, &owned, &err), 0, EP(err));
        CHECK(data && memcmp(data, DATA0, sizeof DATA0) == 0);
        ptc__zip_release(z, e, owned);
    }
    ptc__zip_close(z);
    ptc__source_close(src);
}

/* Opens buf, which must be refused as ambiguous about data/0, and checks that the message names
 * each value in want (NULL-terminated). */
static void expect_refused_data0(const uint8_t *buf, size_t len, const char *what,
                                 const char *const *want)
{
    ptc_error err;
    ptc__err_clear(&err);
    int rc = try_open(buf, len, NULL, 0, &err);
    printf("  %-44s -> %-9s %s\n", what, ptc_err_name(rc), err.message);
    CHECK_CODE(rc, PTC_EFORMAT, EP(err));
    CHECK_STR(err.member, "data/0");
    for (; *want; want++)
        if (!strstr(err.message, *want)) {
            fprintf(stderr, "  message \"%s\" does not name \"%s\"\n", err.message, *want);
            CHECK(strstr(err.message, *want) != NULL);
        }
}

/* The local header of data/0 in a zip_build archive. */
static uint8_t *local_of_data0(uint8_t *buf, size_t len)
{
    static const char name[] = "archive/data/0";
    for (size_t k = 0; k + 30 + sizeof name - 1 <= len; k++)
        if (ptc__le32(buf + k) == 0x04034b50 && ptc__le16(buf + k + 26) == sizeof name - 1 &&
            memcmp(buf + k + 30, name, sizeof name - 1) == 0)
            return buf + k;
    return NULL;
}

/* Local and central sizes are compared by the values they resolve to, not by whether either
 * header used zip64 (DESIGN decision 3): Python's zipfile.ZipFile.open(name, "w",
 * force_zip64=True) writes zip64 sizes in the local header and plain ones in the central
 * directory, and torch loads that. Unequal values stay refused, as does a local header whose
 * readers could resolve it to different values. */
static void test_zip64_readings(void)
{
    printf("zip64 sizes in one header, judged by their values:\n");
    zspec s[4];
    size_t len;
    uint8_t *buf;

    /* Python's zipfile: no 'FB' alignment field, so the records are not aligned either. */
    base_specs(s);
    for (int i = 0; i < 4; i++) {
        s[i].desc = 0;
        s[i].no_fb = 1;
        s[i].local_zip64 = 1;
    }
    buf = zip_build(s, 4, NULL, &len);
    expect_data0(buf, len, "zip64 sizes in the local header only");
    free(buf);

    base_specs(s);
    s[2].desc = 0;
    s[2].zip64 = 1;
    buf = zip_build(s, 4, NULL, &len);
    expect_data0(buf, len, "zip64 sizes in the central header only");
    free(buf);

    /* Python's zipfile on a stream it cannot seek: local sentinels, a zip64 field holding zeros
     * (torch's quirk, 2, is the nearest) and a 24-byte descriptor; central sizes plain. */
    base_specs(s);
    s[2].local_zip64 = 2;
    buf = zip_build(s, 4, NULL, &len);
    expect_data0(buf, len, "local zip64, 24-byte descriptor");
    free(buf);

    /* Only the size is the sentinel; the compressed size is plain and equal, so a reader that
     * takes both sizes from the zip64 field and one that takes only the size agree. */
    base_specs(s);
    s[2].desc = 0;
    s[2].local_zip64 = 1;
    buf = zip_build(s, 4, NULL, &len);
    uint8_t *h = local_of_data0(buf, len);
    CHECK(h != NULL);
    if (h)
        ptc__put_le32(h + 18, sizeof DATA0);
    expect_data0(buf, len, "local size zip64, compressed size plain");
    free(buf);

    static const char *const nine_eight[] = {"9/9 bytes", "8/8 bytes", NULL};
    base_specs(s);
    s[2].desc = 0;
    s[2].local_zip64 = 1;
    s[2].local_size_delta = 1;
    buf = zip_build(s, 4, NULL, &len);
    expect_refused_data0(buf, len, "local zip64 sizes 9, central plain 8", nine_eight);
    free(buf);

    base_specs(s);
    s[2].desc = 0;
    s[2].zip64 = 1;
    s[2].local_size_delta = 1;
    buf = zip_build(s, 4, NULL, &len);
    expect_refused_data0(buf, len, "local plain sizes 9, central zip64 8", nine_eight);
    free(buf);

    /* The plain compressed size (9) differs from the zip64 field's (8): readers that take both
     * sizes from the field read 8/8, readers that take only the sentinel's read 9/8. */
    static const char *const mixed[] = {"8/8", "9/8", NULL};
    base_specs(s);
    s[2].desc = 0;
    s[2].local_zip64 = 1;
    buf = zip_build(s, 4, NULL, &len);
    h = local_of_data0(buf, len);
    CHECK(h != NULL);
    if (h)
        ptc__put_le32(h + 18, sizeof DATA0 + 1);
    expect_refused_data0(buf, len, "local size zip64, compressed size plain 9", mixed);
    free(buf);
}

static void test_deflate(void)
{
    printf("deflated records:\n");
    size_t text_len = 100000;
    uint8_t *text = malloc(text_len);
    for (size_t i = 0; i < text_len; i++)
        text[i] = (uint8_t)("the quick brown fox jumps over the lazy dog "[i % 44] ^ (i / 997));
    zspec s[4];
    base_specs(s);
    s[2].method = 8;
    s[2].content = text;
    s[2].content_len = text_len;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, 0, "deflated record");

    /* Read it back through each source kind. */
    size_t len;
    uint8_t *buf = zip_build(s, 4, NULL, &len);
    for (int k = 0; k < 2; k++) {
        ptc_error err;
        ptc__source *src = NULL;
        ptc__zip *z = NULL;
        ptc_limits lim;
        limits_default(&lim);
        cb_ctx cb = {buf, len, 0, 0, 0};
        ptc__budget budget = {0, 1u << 20};
        if (k == 0)
            CHECK_CODE(ptc__source_open_memory(&src, buf, len, &err), 0, EP(err));
        else
            CHECK_CODE(ptc__source_open_callback(&src, cb_read, &cb, len, &err), 0, EP(err));
        int rc = ptc__zip_open(&z, src, &lim, &budget, 0, &err);
        CHECK_CODE(rc, 0, EP(err));
        if (rc == 0) {
            const ptc__zip_entry *e = ptc__zip_find(z, "data/0");
            const uint8_t *data = NULL;
            void *owned = NULL;
            CHECK_INT(e->method, 8);
            CHECK(e->comp_size < e->size);
            CHECK_CODE(ptc__zip_read(z, e, &data, &owned, &err), 0, EP(err));
            CHECK(owned != NULL && data == owned);
            CHECK(data && memcmp(data, text, text_len) == 0);
            CHECK(budget.used >= text_len);
            ptc__zip_release(z, e, owned);
            CHECK_CODE(ptc__zip_check_crc(z, e, &err), 0, EP(err));
            printf("  %-44s -> %llu bytes from %llu, content equal\n",
                   k == 0 ? "inflate from memory" : "inflate through the callback",
                   (unsigned long long)e->size, (unsigned long long)e->comp_size);
            /* A budget too small for the inflated bytes. */
            ptc__budget tiny = {0, 0};
            ptc__zip *z2 = NULL;
            CHECK_CODE(ptc__zip_open(&z2, src, &lim, &tiny, 0, &err), PTC_ELIMIT, EP(err));
        }
        ptc__zip_close(z);
        CHECK_INT(budget.used, 0);
        ptc__source_close(src);
    }
    free(buf);

    /* Declared sizes that lie: fewer or more bytes than the stream inflates to. */
    base_specs(s);
    s[2].method = 8;
    s[2].content = text;
    s[2].content_len = text_len;
    s[2].size_delta = -1;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, PTC_EFORMAT, "inflates to more than size");
    s[2].size_delta = 1;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, PTC_EFORMAT, "inflates to less than size");
    s[2].size_delta = 0;
    s[2].crc_xor = 0x80000000u;
    EXPECT_ZIP(s, 4, NULL, NULL, PTC_OPEN_VERIFY_CRC, PTC_ECRC, "deflated, wrong CRC");
    {
        /* Without verification the open succeeds; the read still checks the CRC. */
        buf = zip_build(s, 4, NULL, &len);
        ptc__zip *z;
        ptc__source *src;
        ptc_error err;
        CHECK_CODE(open_buf(buf, len, NULL, 0, NULL, &z, &src, &err), 0, EP(err));
        if (z) {
            const uint8_t *data;
            void *owned = NULL;
            CHECK_CODE(ptc__zip_read(z, ptc__zip_find(z, "data/0"), &data, &owned, &err), PTC_ECRC,
                       EP(err));
            CHECK(owned == NULL);
        }
        ptc__zip_close(z);
        ptc__source_close(src);
        free(buf);
    }
    s[2].crc_xor = 0;
    s[2].content = "not compressed at all, just text";
    s[2].content_len = 32;
    s[2].method = 0;
    {
        /* Method 8 over bytes that are not a deflate stream. */
        buf = zip_build(s, 4, NULL, &len);
        for (size_t k = 0; k + 4 <= len; k++)
            if (ptc__le32(buf + k) == 0x04034b50 || ptc__le32(buf + k) == 0x02014b50)
                if (memcmp(buf + k + (ptc__le32(buf + k) == 0x04034b50 ? 30 : 46), "archive/data/0",
                           14) == 0)
                    ptc__put_le16(buf + k + (ptc__le32(buf + k) == 0x04034b50 ? 8 : 10), 8);
        ptc_error err;
        int rc = try_open(buf, len, NULL, PTC_OPEN_VERIFY_CRC, &err);
        printf("  %-44s -> %-9s %s\n", "method 8 over garbage", ptc_err_name(rc), err.message);
        CHECK_CODE(rc, PTC_EFORMAT, EP(err));
        free(buf);
    }

    printf("deflate bombs:\n");
    size_t zeros_len = 4u << 20;
    uint8_t *zeros = calloc(1, zeros_len);
    base_specs(s);
    s[2].method = 8;
    s[2].content = zeros;
    s[2].content_len = zeros_len;
    ptc_limits lim;
    limits_default(&lim);
    lim.max_inflate_ratio = 100;
    EXPECT_ZIP(s, 4, NULL, &lim, 0, PTC_ELIMIT, "4 MiB of zeros, ratio cap 100");
    limits_default(&lim);
    lim.max_inflated_bytes = 1u << 20;
    EXPECT_ZIP(s, 4, NULL, &lim, 0, PTC_ELIMIT, "4 MiB of zeros, cap 1 MiB");
    limits_default(&lim);
    lim.max_inflate_ratio = 100000;
    EXPECT_ZIP(s, 4, NULL, &lim, PTC_OPEN_VERIFY_CRC, 0, "4 MiB of zeros, ratio cap 100000");
    base_specs(s);
    s[2].method = 8;
    s[2].content = DATA0;
    s[2].content_len = 8;
    s[2].size_delta = 0xFFFFFFF0ll;
    EXPECT_ZIP(s, 4, NULL, NULL, 0, PTC_ELIMIT, "a few bytes claiming 4 GiB");
    free(zeros);
    free(text);
}

static void test_limits(void)
{
    printf("limits:\n");
    zspec s[4];
    ptc_limits lim;
    base_specs(s);
    limits_default(&lim);
    lim.max_records = 3;
    EXPECT_ZIP(s, 4, NULL, &lim, 0, PTC_ELIMIT, "4 records, limit 3");
    lim.max_records = 4;
    EXPECT_ZIP(s, 4, NULL, &lim, 0, 0, "4 records, limit 4");

    size_t len;
    uint8_t *buf = zip_build(s, 4, NULL, &len);
    ptc__budget budget = {0, 64};
    ptc__zip *z;
    ptc__source *src;
    ptc_error err;
    CHECK_CODE(open_buf(buf, len, NULL, 0, &budget, &z, &src, &err), PTC_ELIMIT, EP(err));
    printf("  %-44s -> %s\n", "heap budget of 64 bytes", err.message);
    CHECK_INT(budget.used, 0);
    free(buf);
}

/* ---- allocation failures --------------------------------------------------------------------- */

typedef struct fail_alloc {
    long countdown; /* fail when it reaches 0; negative: never */
    long live;
} fail_alloc;

static void *failing_realloc(void *ctx, void *ptr, size_t size)
{
    fail_alloc *f = ctx;
    if (size == 0) {
        if (ptr)
            f->live--;
        free(ptr);
        return NULL;
    }
    if (f->countdown >= 0 && f->countdown-- == 0)
        return NULL;
    void *p = realloc(ptr, size);
    if (p && !ptr)
        f->live++;
    return p;
}

static void test_alloc_failures(void)
{
    printf("allocation failures (each allocation of open + inflate fails in turn):\n");
    char text[4000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + i % 7);
    zspec s[4];
    base_specs(s);
    s[2].method = 8;
    s[2].content = text;
    s[2].content_len = sizeof text;
    size_t len;
    uint8_t *buf = zip_build(s, 4, NULL, &len);
    for (int kind = 0; kind < 2; kind++) {
        long n;
        for (n = 0; n < 1000; n++) {
            fail_alloc f = {n, 0};
            ptc_set_allocator(failing_realloc, &f);
            ptc_error err;
            ptc__source *src = NULL;
            ptc__zip *z = NULL;
            cb_ctx cb = {buf, len, 0, 0, 0};
            int rc = kind == 0 ? ptc__source_open_memory(&src, buf, len, &err)
                               : ptc__source_open_callback(&src, cb_read, &cb, len, &err);
            ptc_limits lim;
            limits_default(&lim);
            if (rc == 0)
                rc = ptc__zip_open(&z, src, &lim, NULL, PTC_OPEN_VERIFY_CRC, &err);
            if (rc == 0) {
                const uint8_t *data;
                void *owned = NULL;
                rc = ptc__zip_read(z, ptc__zip_find(z, "data/0"), &data, &owned, &err);
                if (rc == 0)
                    ptc__zip_release(z, ptc__zip_find(z, "data/0"), owned);
            }
            ptc__zip_close(z);
            ptc__source_close(src);
            ptc_set_allocator(NULL, NULL);
            CHECK_INT(f.live, 0);
            if (rc == 0)
                break;
            CHECK_CODE(rc, PTC_ENOMEM, EP(err));
        }
        printf("  %-8s source: succeeded once %ld allocations were allowed; no leaks\n",
               kind == 0 ? "memory" : "callback", n);
        CHECK(n > 3 && n < 1000);
    }
    free(buf);
}

/* ---- scale ----------------------------------------------------------------------------------- */

static void test_many_records(void)
{
    enum { N = 20000 };
    printf("an archive of %d records:\n", N);
    zspec *s = calloc(N, sizeof *s);
    char(*names)[32] = calloc(N, sizeof *names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "archive/data/%d", i);
        s[i] = (zspec){.name = names[i], .content = DATA0, .content_len = 8, .desc = 1};
    }
    size_t len;
    uint8_t *buf = zip_build(s, N, NULL, &len);
    ptc__zip *z;
    ptc__source *src;
    ptc_error err;
    ptc__budget budget = {0, 1u << 30};
    double t0 = now_s();
    int rc = open_buf(buf, len, NULL, 0, &budget, &z, &src, &err);
    double t1 = now_s();
    CHECK_CODE(rc, 0, EP(err));
    if (rc == 0) {
        int found = 0;
        for (int i = 0; i < N; i++) {
            const ptc__zip_entry *e = ptc__zip_find(z, names[i] + 8);
            found += e && e == ptc__zip_entry_at(z, (size_t)i);
        }
        double t2 = now_s();
        CHECK_INT(found, N);
        CHECK(ptc__zip_find(z, "data/20000") == NULL);
        printf("  %zu bytes: open %.1f ms, %d lookups %.1f ms, %llu table bytes\n", len,
               (t1 - t0) * 1e3, N, (t2 - t1) * 1e3, (unsigned long long)budget.used);
    }
    ptc__zip_close(z);
    ptc__source_close(src);
    CHECK_INT(budget.used, 0);

    /* The same names but for case, at the two ends of the directory. */
    s[N - 1].name = "archive/DATA/0";
    free(buf);
    buf = zip_build(s, N, NULL, &len);
    CHECK_CODE(try_open(buf, len, NULL, 0, &err), PTC_EFORMAT, EP(err));
    printf("  %-44s -> %s\n", "case collision among 20000", err.message);
    free(buf);
    free(names);
    free(s);
}

/* Writes a sparse checkpoint of nrec stored records of rec_size zero bytes each (holes on disk)
 * in torch's layout, without zip64 extras (each record stays below 4 GiB). */
static int write_sparse(const char *path, int nrec, uint64_t rec_size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    /* The CRC of rec_size zero bytes, by doubling with crc32_combine. */
    uLong crc = crc32(0, Z_NULL, 0);
    uint8_t zero = 0;
    uLong c1 = crc32(0, &zero, 1);
    uint64_t have = 1;
    uLong piece = c1;
    for (uint64_t left = rec_size; left;) {
        if (left & 1) {
            crc = crc32_combine(crc, piece, (z_off_t)have);
        }
        left >>= 1;
        if (left)
            piece = crc32_combine(piece, piece, (z_off_t)have);
        have *= 2;
    }
    tbuf cd = {0};
    uint64_t off = 0;
    int ok = 1;
    for (int i = 0; i < nrec && ok; i++) {
        char name[32];
        int nlen = snprintf(name, sizeof name, "big/data/%d", i);
        size_t start = (size_t)off + 30 + (size_t)nlen + 4;
        size_t pad = (64 - start % 64) % 64;
        tbuf h = {0};
        tb_u32(&h, 0x04034b50);
        tb_u16(&h, 0);
        tb_u16(&h, 0x0808);
        tb_u16(&h, 0);
        tb_u32(&h, 0);
        tb_u32(&h, 0);
        tb_u32(&h, 0);
        tb_u32(&h, 0);
        tb_u16(&h, (uint16_t)nlen);
        tb_u16(&h, (uint16_t)(4 + pad));
        tb_put(&h, name, (size_t)nlen);
        tb_u16(&h, 0x4246);
        tb_u16(&h, (uint16_t)pad);
        tb_fill(&h, 'Z', pad);
        ok = pwrite(fd, h.p, h.len, (off_t)off) == (ssize_t)h.len;
        uint64_t hoff = off;
        off += h.len + rec_size;
        free(h.p);
        tbuf d = {0};
        tb_u32(&d, 0x08074b50);
        tb_u32(&d, (uint32_t)crc);
        tb_u32(&d, (uint32_t)rec_size);
        tb_u32(&d, (uint32_t)rec_size);
        ok = ok && pwrite(fd, d.p, d.len, (off_t)off) == (ssize_t)d.len;
        off += d.len;
        free(d.p);
        tb_u32(&cd, 0x02014b50);
        tb_u16(&cd, 0);
        tb_u16(&cd, 0);
        tb_u16(&cd, 0x0808);
        tb_u16(&cd, 0);
        tb_u32(&cd, 0);
        tb_u32(&cd, (uint32_t)crc);
        tb_u32(&cd, (uint32_t)rec_size);
        tb_u32(&cd, (uint32_t)rec_size);
        tb_u16(&cd, (uint16_t)nlen);
        tb_u16(&cd, 0);
        tb_u16(&cd, 0);
        tb_u16(&cd, 0);
        tb_u16(&cd, 0);
        tb_u32(&cd, 0);
        tb_u32(&cd, (uint32_t)hoff);
        tb_put(&cd, name, (size_t)nlen);
    }
    uint64_t cd_off = off;
    tbuf end = {0};
    tb_put(&end, cd.p, cd.len);
    tb_u32(&end, 0x06064b50);
    tb_u64(&end, 44);
    tb_u16(&end, 0x031E);
    tb_u16(&end, 0x002D);
    tb_u32(&end, 0);
    tb_u32(&end, 0);
    tb_u64(&end, (uint64_t)nrec);
    tb_u64(&end, (uint64_t)nrec);
    tb_u64(&end, cd.len);
    tb_u64(&end, cd_off);
    tb_u32(&end, 0x07064b50);
    tb_u32(&end, 0);
    tb_u64(&end, cd_off + cd.len);
    tb_u32(&end, 1);
    tb_u32(&end, 0x06054b50);
    tb_u32(&end, 0);
    tb_u16(&end, (uint16_t)nrec);
    tb_u16(&end, (uint16_t)nrec);
    tb_u32(&end, (uint32_t)cd.len);
    tb_u32(&end, (uint32_t)cd_off);
    tb_u16(&end, 0);
    ok = ok && pwrite(fd, end.p, end.len, (off_t)off) == (ssize_t)end.len;
    free(end.p);
    free(cd.p);
    ok = close(fd) == 0 && ok;
    return ok ? 0 : -1;
}

static void test_big_sparse(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/ptc_test_archive_%ld.pt", tmp && tmp[0] ? tmp : "/tmp",
             (long)getpid());
    enum { NREC = 16 };
    const uint64_t rec = 64ull << 20;
    printf("a sparse 1 GiB checkpoint of %d records of 64 MiB:\n", NREC);
    if (write_sparse(path, NREC, rec) != 0) {
        printf("  skipped: cannot write %s (%s)\n", path, strerror(errno));
        unlink(path);
        return;
    }
    ptc_limits lim;
    limits_default(&lim);
    ptc_error err;
    ptc__source *src = NULL;
    ptc__zip *z = NULL;
    double t0 = now_s();
    int rc = ptc__source_open_path(&src, path, &err);
    if (rc == 0)
        rc = ptc__zip_open(&z, src, &lim, NULL, 0, &err);
    double t1 = now_s();
    CHECK_CODE(rc, 0, EP(err));
    if (rc == 0) {
        CHECK_INT(ptc__zip_count(z), NREC);
        CHECK_STR(ptc__zip_prefix(z), "big");
        const ptc__zip_entry *e = ptc__zip_find(z, "data/15");
        const uint8_t *data = NULL;
        void *owned = NULL;
        CHECK(e && e->size == rec && e->data_offset % 64 == 0);
        if (e)
            CHECK_CODE(ptc__zip_read(z, e, &data, &owned, &err), 0, EP(err));
        CHECK(owned == NULL && data != NULL && data[0] == 0 && data[rec - 1] == 0);
        printf("  %llu bytes: open (mapped, headers only) %.2f ms\n",
               (unsigned long long)ptc__source_size(src), (t1 - t0) * 1e3);
    }
    ptc__zip_close(z);
    ptc__source_close(src);
    unlink(path);
}

int main(void)
{
    printf("test_archive: top_srcdir=%s\n", srcdir());
    test_vectors();
    test_sources();
    test_valid_built();
    test_names();
    test_structure();
    test_zip64_readings();
    test_deflate();
    test_limits();
    test_alloc_failures();
    test_many_records();
    test_big_sparse();
    return check_exit("test_archive");
}
