/*
 * verify_zip.c - ptc_verify's reading of containers: the members of a zip as ptc's strict reader
 * sees them (each scanned when it is or looks like a pickle, and each swept), the bytes of its
 * headers that no record holds, every local header found anywhere in the file (when the strict
 * reader refuses the zip, or inside a file of another format), and the members of a tar.
 *
 * The pickle pass itself (scanning, sweeping, the findings) is verify.c's; see there for what the
 * static pass reads and why. Split from verify.c along that seam: this file knows container
 * layouts, verify.c knows pickles and the report.
 */
#include "pth/verify_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* A deflated member larger than this is not inflated for the scan (nor swept). */
#define SCAN_INFLATE_CAP (64u << 20)

static int ignore_item(void *ud, const ptc__scan_item *it)
{
    (void)ud;
    (void)it;
    return 0;
}

/* Bytes that no loader is known to unpickle (a zip member other than data.pkl, a tar member, a
 * file of no known format) are scanned only when they look like a pickle: they start with PROTO,
 * or they decode up to a STOP. Without this, arbitrary bytes (a .npy header starts with the
 * STACK_GLOBAL opcode) would be read as references. */
bool ptc__verify_looks_like_pickle(const uint8_t *data, size_t len)
{
    if (len == 0)
        return false;
    if (data[0] == PTC__OP_PROTO)
        return true;
    size_t used = 0;
    ptc_error e;
    return ptc__pickle_scan(data, len, "", 0, true, ignore_item, NULL, &used, &e) == 0 && used > 0;
}

/* Records that are never pickles: tensor bytes. They are swept all the same
 * (ptc__verify_sweep_region). */
static bool plain_record(const char *rec)
{
    return strncmp(rec, "data/", 5) == 0;
}

/* The small text records torch writes. A local header alone may not say where they end (flag bit
 * 3): read to the end of the file, "little" would decode as LIST and INST over whatever follows.
 * The scan of local headers leaves them to the sweep of the whole file. */
static bool text_record(const char *rec)
{
    static const char *const text[] = {"byteorder",
                                       "version",
                                       ".data/version",
                                       ".data/serialization_id",
                                       ".format_version",
                                       ".storage_alignment",
                                       ""};
    for (size_t i = 0; i < sizeof text / sizeof *text; i++)
        if (strcmp(rec, text[i]) == 0)
            return true;
    return false;
}

static bool torchscript_record(const char *rec)
{
    return strcmp(rec, "constants.pkl") == 0 || strncmp(rec, "code/", 5) == 0;
}

/* A member other than data.pkl was scanned: if it held a pickle, say so. */
static int hidden_pickle(scan_ctx *c, int npickles, unsigned bad, bool torch_reads)
{
    if (npickles <= 0 && c->refs == 0)
        return 0;
    char detail[320];
    snprintf(detail, sizeof detail,
             bad ? "member %s holds a pickle that references globals outside the policy"
                 : "member %s holds a pickle%s",
             c->member, torch_reads ? "" : " that a checkpoint loader never reads");
    return ptc__verify_add_finding(c->r, bad ? PTC_VERDICT_UNSAFE : PTC_VERDICT_MALFORMED,
                                   bad ? PTC_EUNSAFE : PTC_EFORMAT, "hidden-pickle", c->member, -1,
                                   detail, false);
}

static int torchscript_finding(scan_ctx *c, const char *rec, bool *constants)
{
    char detail[320];
    bool k = strcmp(rec, "constants.pkl") == 0;
    *constants |= k;
    snprintf(detail, sizeof detail,
             "TorchScript member %s: a TorchScript archive carries code and is never loaded",
             c->member);
    return ptc__verify_add_finding(c->r, PTC_VERDICT_UNSAFE, PTC_EUNSAFE, "torchscript", c->member,
                                   -1, detail, k);
}

/* Sweeps the zip's bytes that are no record's data: the local and central extra areas and the
 * comment of each entry, and the archive comment. Each is labelled "<record> [local extra field]"
 * and so on, with offsets in that area. */
static int sweep_zip_headers(scan_ctx *c, ptc__zip *z)
{
    static const char *const what[3] = {"local extra field", "central extra field", "comment"};
    char label[360];
    int rc;
    if (!c->map)
        return 0;
    for (size_t i = 0; i < ptc__zip_count(z); i++) {
        const ptc__zip_entry *en = ptc__zip_entry_at(z, i);
        uint64_t at[3] = {en->header_offset + 30u + en->name_len,
                          en->central_offset + 46u + en->name_len,
                          en->central_offset + 46u + en->name_len + en->central_extra_len};
        uint64_t len[3] = {en->local_extra_len, en->central_extra_len, en->comment_len};
        char rec[300];
        rec[0] = '\0'; /* escaped once per entry, where it has an area to sweep */
        for (int k = 0; k < 3; k++) {
            if (len[k] == 0 || at[k] > c->size || len[k] > c->size - at[k])
                continue;
            if (!rec[0])
                ptc__escape(rec, sizeof rec, en->record, strlen(en->record), true);
            snprintf(label, sizeof label, "%s [%s]", rec, what[k]);
            c->member = label;
            c->refs = c->bad = 0;
            c->r->base = (int64_t)at[k];
            if ((rc = ptc__verify_sweep_region(c, c->map + at[k], (size_t)len[k], 0, 0)))
                return rc;
            if (!c->bad)
                continue; /* ptc__verify_swept_finding would add nothing: no text to format */
            char where[400];
            snprintf(where, sizeof where, "the %s of %s (file offset 0x%llx, %llu bytes)", what[k],
                     rec, (unsigned long long)at[k], (unsigned long long)len[k]);
            if ((rc = ptc__verify_swept_finding(c, where)))
                return rc;
        }
    }
    uint64_t off, n;
    ptc__zip_comment(z, &off, &n);
    if (n && off <= c->size && n <= c->size - off) {
        c->member = "archive comment";
        c->refs = c->bad = 0;
        c->r->base = (int64_t)off;
        if ((rc = ptc__verify_sweep_region(c, c->map + off, (size_t)n, 0, 0)))
            return rc;
        char where[120];
        snprintf(where, sizeof where, "the archive comment (file offset 0x%llx, %llu bytes)",
                 (unsigned long long)off, (unsigned long long)n);
        if ((rc = ptc__verify_swept_finding(c, where)))
            return rc;
    }
    return 0;
}

/* The zip as ptc's strict reader sees it: every member is read; members that are not tensor
 * bytes are scanned as pickles when they look like one, and every member is then swept from its
 * first byte (or where that scan stopped) and from every PROTO in it. With check_crc (the load
 * failed, perhaps at the first bad CRC) every record's CRC is checked too (those inflated here
 * are checked by the read itself). Then the headers' extra fields and comments are swept. */
int ptc__verify_scan_zip_entries(scan_ctx *c, ptc__zip *z, bool check_crc, bool *constants)
{
    ptc_error e;
    int rc = 0;
    char label[300];
    for (size_t i = 0; i < ptc__zip_count(z) && rc == 0; i++) {
        const ptc__zip_entry *en = ptc__zip_entry_at(z, i);
        ptc__escape(label, sizeof label, en->record, strlen(en->record), true);
        c->member = label;
        c->refs = c->bad = 0;
        c->r->base = -1;
        bool will_inflate = en->method != 0 && en->size <= SCAN_INFLATE_CAP;
        if (check_crc && !will_inflate && ptc__zip_check_crc(z, en, &e) < 0) {
            if (e.code == PTC_ENOMEM) {
                rc = PTC_ENOMEM;
                break;
            }
            const char *msg = strstr(e.message, ": ");
            rc = ptc__verify_add_finding(c->r, PTC_VERDICT_MALFORMED, e.code,
                                         e.code == PTC_ECRC ? "crc" : "load", label, -1,
                                         msg ? msg + 2 : e.message, !(e.flags & PTC_ERR_STRICTER));
            continue;
        }
        if (torchscript_record(en->record) && (rc = torchscript_finding(c, en->record, constants)))
            break;
        const uint8_t *data;
        void *owned = NULL;
        if (en->size > SCAN_INFLATE_CAP && en->method != 0)
            continue; /* the load reports the limit; nothing this large is a pickle torch reads */
        if (ptc__zip_read(z, en, &data, &owned, &e) < 0) {
            if (e.code == PTC_ENOMEM)
                rc = PTC_ENOMEM;
            else if (e.code == PTC_ECRC && check_crc)
                rc = ptc__verify_add_finding(c->r, PTC_VERDICT_MALFORMED, e.code, "crc", label, -1,
                                             strstr(e.message, ": ") ? strstr(e.message, ": ") + 2
                                                                     : e.message,
                                             !(e.flags & PTC_ERR_STRICTER));
            continue;
        }
        /* A stored record of a mapped file is returned in place: its offsets map to the file's. */
        c->r->base = !owned && c->map && data >= c->map && data < c->map + c->size
                         ? (int64_t)(data - c->map)
                         : -1;
        /* The failed load named this record and an offset in it; the strict reader that
         * accepted the zip here reads the same record (names are unique in such a zip). */
        ptc_finding *lf = c->r->load ? &c->r->f[c->r->load - 1] : NULL;
        if (lf && lf->file_offset < 0 && lf->offset >= 0 && c->r->base >= 0 &&
            (uint64_t)lf->offset < en->size && strcmp(lf->member, label) == 0)
            lf->file_offset = c->r->base + lf->offset;
        bool is_data_pkl = strcmp(en->record, "data.pkl") == 0;
        bool full = is_data_pkl || (!plain_record(en->record) &&
                                    ptc__verify_looks_like_pickle(data, (size_t)en->size));
        int n = 0;
        size_t reach = 0, end = 0;
        bool quiet_only = false;
        if (full) {
            ptc__verify_record_protos(c);
            n = ptc__verify_scan_pickles_at(c, data, (size_t)en->size, 0, is_data_pkl ? 1 : 0,
                                            UINT32_MAX, false, &end, &reach);
            quiet_only =
                n > 0 && ptc__verify_sweep_adds_nothing(c, data, (size_t)en->size, end, reach);
        }
        if (n >= 0 && !is_data_pkl)
            rc = hidden_pickle(c, n, c->bad, torchscript_record(en->record));
        if (n >= 0 && rc == 0) {
            c->refs = c->bad = 0;
            n = quiet_only
                    ? 0
                    : ptc__verify_sweep_region(c, data, (size_t)en->size, 0, full ? reach : 0);
            if (n == 0)
                rc = ptc__verify_swept_finding(c, label);
        }
        ptc__zip_release(z, en, owned);
        if (n < 0) {
            rc = n;
            break;
        }
    }
    if (rc == 0)
        rc = sweep_zip_headers(c, z);
    return rc;
}

/* The zip read by a strict reader of our own (the load failed). Returns 1 when the strict reader
 * refuses the zip too. */
int ptc__verify_scan_zip_strict(scan_ctx *c, ptc__source *src, const ptc_limits *lim,
                                bool *constants)
{
    ptc__budget budget = {0, lim->max_heap_bytes};
    ptc__zip *z;
    ptc_error e;
    if (ptc__zip_open(&z, src, lim, &budget, 0, &e) < 0)
        return e.code == PTC_ENOMEM ? PTC_ENOMEM : 1;
    int rc = ptc__verify_scan_zip_entries(c, z, true, constants);
    ptc__zip_close(z);
    return rc;
}

static voidpf zalloc_fn(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return ptc__calloc(items, size);
}
static void zfree_fn(voidpf opaque, voidpf p)
{
    (void)opaque;
    ptc__free(p);
}

/* Inflates a raw deflate stream from in[0..n) into a new buffer of at most cap bytes. Returns the
 * bytes produced (possibly 0), or -1 when out of memory. */
static int64_t inflate_capped(const uint8_t *in, size_t n, size_t cap, uint8_t **out)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    zs.zalloc = zalloc_fn;
    zs.zfree = zfree_fn;
    *out = NULL;
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
        return -1;
    size_t have = 0, size = 0;
    uint8_t *buf = NULL;
    int zr = Z_OK;
    while (zr == Z_OK && have < cap) {
        if (have == size) {
            size_t want = size ? size * 2 : 64 << 10;
            if (want > cap)
                want = cap;
            uint8_t *nb = ptc__realloc(buf, want);
            if (!nb) {
                ptc__free(buf);
                inflateEnd(&zs);
                return -1;
            }
            buf = nb;
            size = want;
        }
        size_t in_left = n - (size_t)zs.total_in;
        zs.next_in = (Bytef *)(in + zs.total_in);
        zs.avail_in = (uInt)(in_left > (1u << 30) ? (1u << 30) : in_left);
        zs.next_out = buf + have;
        zs.avail_out = (uInt)(size - have);
        zr = inflate(&zs, Z_NO_FLUSH);
        have = (size_t)zs.total_out;
        if (zr == Z_BUF_ERROR && zs.avail_in == 0)
            break;
        if (zr == Z_BUF_ERROR)
            zr = Z_OK;
    }
    inflateEnd(&zs);
    *out = buf;
    return (int64_t)have;
}

/* Every local file header found anywhere in the bytes, as a reader that trusts local headers, or
 * one that follows a central directory into any of them, would see it. Used when the strict
 * reader refused the zip (then readers can disagree) and on files of no known format. */
int ptc__verify_scan_local_headers(scan_ctx *c, const uint8_t *map, uint64_t size, bool *constants,
                                   bool *any)
{
    static const uint8_t sig[4] = {'P', 'K', 3, 4};
    uint64_t pos = 0;
    char label[300];
    while (pos + 30 <= size) {
        const uint8_t *p = memmem(map + pos, (size_t)(size - pos), sig, 4);
        if (!p)
            break;
        uint64_t at = (uint64_t)(p - map);
        pos = at + 4;
        if (at + 30 > size)
            break;
        uint16_t method = ptc__le16(p + 8), nl = ptc__le16(p + 26), xl = ptc__le16(p + 28);
        uint32_t csize = ptc__le32(p + 18);
        uint64_t data = at + 30 + nl + xl;
        if (nl == 0 || nl > 1024 || data > size || (method != 0 && method != 8))
            continue;
        const char *name = (const char *)p + 30;
        bool printable = true;
        for (size_t i = 0; i < nl && printable; i++)
            printable = (uint8_t)name[i] >= 0x20 && name[i] != 0x7f;
        if (!printable || !ptc__utf8_valid((const uint8_t *)name, nl))
            continue;
        char raw[1025];
        memcpy(raw, name, nl);
        raw[nl] = '\0';
        const char *slash = strchr(raw, '/');
        const char *rec = slash ? slash + 1 : raw;
        *any = true;
        ptc__escape(label, sizeof label, raw, nl, true);
        c->member = label;
        c->refs = c->bad = 0;
        c->r->base = method == 0 ? (int64_t)data : -1; /* inflated bytes are no file's */
        int rc;
        if (torchscript_record(rec) && (rc = torchscript_finding(c, rec, constants)))
            return rc;
        if (plain_record(rec) || text_record(rec))
            continue;
        bool sized = csize != 0 && csize != 0xFFFFFFFFu && csize <= size - data;
        uint64_t avail = sized ? csize : size - data;
        bool is_data_pkl = strcmp(rec, "data.pkl") == 0;
        int n;
        size_t reach = 0;
        unsigned full_bad = 0;
        if (method == 0) {
            /* The raw bytes are swept with the whole file (sweep_file). */
            n = 0;
            if (ptc__verify_looks_like_pickle(map + data, (size_t)avail))
                n = ptc__verify_scan_pickles(c, map + data, (size_t)avail, 0, 0,
                                             sized ? UINT32_MAX : 1, is_data_pkl, &reach);
            ptc__verify_cover(c, data, data + reach);
        } else {
            uint8_t *buf;
            int64_t got = inflate_capped(map + data, (size_t)avail, SCAN_INFLATE_CAP, &buf);
            if (got < 0)
                return PTC_ENOMEM;
            n = 0;
            if (ptc__verify_looks_like_pickle(buf, (size_t)got))
                n = ptc__verify_scan_pickles(c, buf, (size_t)got, 0, 0, UINT32_MAX, is_data_pkl,
                                             &reach);
            full_bad = c->bad;
            if (n >= 0) {
                c->bad = 0;
                if ((rc = ptc__verify_sweep_region(c, buf, (size_t)got, 0, reach)) == 0)
                    rc = ptc__verify_swept_finding(c, label);
                c->bad = full_bad;
            }
            ptc__free(buf);
            if (rc)
                return rc;
        }
        if (n < 0)
            return n;
        if (!is_data_pkl && (rc = hidden_pickle(c, n, c->bad, torchscript_record(rec))))
            return rc;
        if (is_data_pkl && c->bad) {
            char detail[400];
            snprintf(detail, sizeof detail,
                     "member %s, one of the readings of an ambiguous zip, references globals "
                     "outside the policy",
                     label);
            if ((rc = ptc__verify_add_finding(c->r, PTC_VERDICT_UNSAFE, PTC_EUNSAFE,
                                              "hidden-pickle", label, -1, detail, false)))
                return rc;
        }
    }
    return 0;
}

/* The members of a POSIX tar file: each is scanned for pickles (the tar checkpoints of PyTorch
 * before 0.1.10 hold pickles in "sys_info", "pickle", "storages" and "tensors"). */
int ptc__verify_scan_tar(scan_ctx *c, const uint8_t *map, uint64_t size)
{
    uint64_t pos = 0;
    char label[160];
    for (unsigned k = 0; k < 1u << 20 && pos + 512 <= size; k++) {
        const uint8_t *h = map + pos;
        if (h[0] == 0)
            break;
        uint64_t n = 0;
        for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; i++)
            n = n * 8 + (uint64_t)(h[i] - '0');
        size_t nl = strnlen((const char *)h, 100);
        ptc__escape(label, sizeof label, h, nl, true);
        uint64_t data = pos + 512;
        if (n > size - data)
            n = size - data;
        c->member = label;
        c->refs = c->bad = 0;
        c->r->base = (int64_t)data;
        int rc = 0;
        size_t reach = 0;
        if (ptc__verify_looks_like_pickle(map + data, (size_t)n))
            rc = ptc__verify_scan_pickles(c, map + data, (size_t)n, 0, 0, 1, false, &reach);
        ptc__verify_cover(c, data, data + reach);
        if (rc < 0)
            return rc;
        if (c->bad && (rc = hidden_pickle(c, rc, c->bad, true)))
            return rc;
        uint64_t next = data + ((n + 511) & ~(uint64_t)511);
        if (next <= pos)
            break;
        pos = next;
    }
    return 0;
}
