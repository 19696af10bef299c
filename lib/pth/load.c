/*
 * load.c - opening a checkpoint: format dispatch, the zip checkpoint (records, version, byteorder,
 * data.pkl, storages bound to data/<key> records) and the handle's accessors.
 *
 * Dispatch mirrors torch.load (threat model P8): "PK\3\4" at offset 0 is a zip checkpoint; the
 * 15-byte magic pickle of the legacy stream is a legacy checkpoint; a tar header (pre-0.1.10
 * format) and the "PYTORCH1" preview format are recognised and refused; anything else is not a
 * checkpoint. A zip that holds constants.pkl or code/ is TorchScript and refused: it carries code.
 *
 * Records a torch checkpoint may hold (name after the prefix): data.pkl, byteorder, version,
 * .data/version, .data/serialization_id, .format_version, .storage_alignment and data/<key> for
 * every storage the pickle declares. Anything else, or a data/<key> no storage claims, is refused:
 * a reader that ignores extra members is how pickles get smuggled past scanners.
 *
 * torch 2.6 reads the version record (parsed here as its std::stoull parses it), refuses TorchScript (which it recognises by constants.pkl
 * alone), reads byteorder and data.pkl, and ignores every other record: code/, unexpected members,
 * orphan records and records of the wrong size are refusals of ptc's own (PTC_ERR_STRICTER). The
 * checks run in torch's order, so that a file both refuse is reported for the reason torch gives.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

static const uint8_t legacy_magic[15] = {0x80, 0x02, 0x8A, 0x0A, 0x6C, 0xFC, 0x9C, 0x46,
                                         0xF9, 0x20, 0x6A, 0xA8, 0x50, 0x19, 0x2E};

void ptc_limits_default(ptc_limits *l)
{
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

void ptc_open_params_default(ptc_open_params *p)
{
    *p = (ptc_open_params){.size = sizeof *p, .policy = NULL, .limits = NULL, .flags = 0};
}

/* ---- storages --------------------------------------------------------------------------------- */

/* Storages by key: an open-addressing table of indices + 1 into c->storages (0 = empty). A
 * checkpoint of 20,000 small tensors has 20,000 storages, so lookups must not be linear. */
static size_t key_hash(const char *k)
{
    size_t h = 1469598103934665603ULL;
    for (; *k; k++)
        h = (h ^ (uint8_t)*k) * 1099511628211ULL;
    return h;
}

ptc_storage *ptc__ckpt_find_storage(ptc_ckpt *c, const char *key)
{
    if (!c->sindex)
        return NULL;
    size_t mask = c->sindex_cap - 1;
    for (size_t h = key_hash(key) & mask; c->sindex[h]; h = (h + 1) & mask)
        if (strcmp(c->storages[c->sindex[h] - 1]->key, key) == 0)
            return c->storages[c->sindex[h] - 1];
    return NULL;
}

static void index_storage(ptc_ckpt *c, size_t i)
{
    size_t mask = c->sindex_cap - 1;
    size_t h = key_hash(c->storages[i]->key) & mask;
    while (c->sindex[h])
        h = (h + 1) & mask;
    c->sindex[h] = (uint32_t)(i + 1);
}

/* Binds a zip storage to its record: the record must hold exactly nbytes. The bytes are used in
 * place when stored, aligned for the element type and in host order; else they are copied. */
static int bind_record(ptc_ckpt *c, ptc_storage *s, ptc_error *err)
{
    /* "data/<key>", cut to 63 bytes as it always was (a longer key names no record). */
    char name[64];
    size_t kn = strnlen(s->key, sizeof name - 6);
    memcpy(name, "data/", 5);
    memcpy(name + 5, s->key, kn);
    name[5 + kn] = '\0';
    const ptc__zip_entry *e = ptc__zip_find(c->zip, name);
    if (!e)
        return ptc__err(err, PTC_EFORMAT, "data.pkl", -1, "storage \"%s\" has no record %s/%s",
                        s->key, c->prefix, name);
    if (e->size != (uint64_t)s->nbytes) /* torch 2.6 takes the record whatever its size */
        return ptc__err_stricter(err, PTC_EFORMAT, name, -1,
                                 "record holds %llu bytes but its storage declares %lld (%s)",
                                 (unsigned long long)e->size, (long long)s->nbytes,
                                 ptc_dtype_name(s->dtype));
    const uint8_t *data;
    void *owned = NULL;
    int rc = ptc__zip_read(c->zip, e, &data, &owned, err);
    if (rc < 0)
        return rc;
    size_t es = ptc_dtype_size(s->dtype);
    bool swap = c->big_endian && !s->untyped && ptc__dtype_info_of(s->dtype)->swap > 1;
    bool aligned = ((uintptr_t)data % es) == 0;
    if (!owned && (swap || !aligned || (c->flags & PTC_OPEN_COPY))) {
        if (ptc__budget_take(&c->budget, e->size, NULL, name, -1) < 0)
            return ptc__err_stricter(err, PTC_ELIMIT, name, -1,
                                     "copying its %llu bytes would exceed the heap limit of %llu "
                                     "bytes",
                                     (unsigned long long)e->size,
                                     (unsigned long long)c->budget.limit);
        owned = ptc__malloc((size_t)e->size);
        if (!owned) {
            ptc__budget_give(&c->budget, e->size);
            return ptc__err(err, PTC_ENOMEM, name, -1, "out of memory copying %llu bytes",
                            (unsigned long long)e->size);
        }
        memcpy(owned, data, (size_t)e->size);
        data = owned;
    }
    if (swap)
        ptc__byteswap(owned, (size_t)e->size, s->dtype);
    s->data = data;
    s->owned = owned;
    s->mapped = owned == NULL;
    c->nbound++;
    return 0;
}

int ptc__ckpt_add_storage(ptc_ckpt *c, ptc_storage *s, ptc_error *err)
{
    /* Each storage is a value the file built (a persistent id, a safetensors entry): no more
     * than max_objects of them. The index below keeps uint32 positions. */
    if (c->nstorages >= c->limits.max_objects || c->nstorages >= UINT32_MAX / 2)
        return ptc__err_stricter(err, PTC_ELIMIT, "data.pkl", -1,
                                 "more storages than the limit of %llu objects",
                                 (unsigned long long)c->limits.max_objects);
    if (c->nstorages == c->capstorages) {
        size_t cap = c->capstorages ? c->capstorages * 2 : 64;
        if (ptc__budget_take(&c->budget, (cap - c->capstorages) * sizeof *c->storages, err,
                             "data.pkl", -1) < 0)
            return PTC_ELIMIT;
        ptc_storage **n = ptc__realloc(c->storages, cap * sizeof *n);
        if (!n)
            return ptc__err(err, PTC_ENOMEM, "data.pkl", -1, "out of memory");
        c->storages = n;
        c->capstorages = cap;
    }
    c->storages[c->nstorages++] = s;
    if (c->nstorages * 2 > c->sindex_cap) {
        size_t cap = c->sindex_cap ? c->sindex_cap * 2 : 128;
        if (cap > UINT32_MAX ||
            ptc__budget_take(&c->budget, cap * sizeof *c->sindex, err, "data.pkl", -1) < 0)
            return PTC_ELIMIT;
        uint32_t *idx = ptc__calloc(cap, sizeof *idx);
        if (!idx)
            return ptc__err(err, PTC_ENOMEM, "data.pkl", -1, "out of memory");
        ptc__free(c->sindex);
        c->sindex = idx;
        c->sindex_cap = cap;
        for (size_t i = 0; i < c->nstorages; i++)
            index_storage(c, i);
    } else {
        index_storage(c, c->nstorages - 1);
    }
    if (c->format == PTC_FORMAT_ZIP && !s->salvaged)
        return bind_record(c, s, err);
    return 0;
}

/* ---- running a pickle ------------------------------------------------------------------------- */

int ptc__pth_run_pickle(ptc_ckpt *c, const uint8_t *data, size_t len, const char *member,
                        uint64_t base_offset, bool allow_trailing, ptc_value **root,
                        size_t *consumed, ptc_error *err)
{
    /* Fail closed: a reference outside the policy anywhere in the bytes refuses the pickle before
     * a single opcode runs, even if the stream breaks later (threat model P9). */
    size_t scanned = len;
    bool salvage = (c->flags & PTC_OPEN_SALVAGE) != 0;
    int rc = ptc__pth_prescan(c->policy, salvage, data, len, member, base_offset, !allow_trailing,
                              &scanned, err);
    if (rc < 0)
        return rc;
    ptc__vm_hooks hooks = ptc__pth_hooks_template;
    hooks.ud = c;
    ptc__pickle_params p = {
        .member = member,
        .base_offset = base_offset,
        .limits = &c->limits,
        .arena = c->arena,
        .budget = &c->budget,
        .hooks = &hooks,
        .allow_trailing = allow_trailing,
        .nops = &c->nops,
        .call_objects = salvage,
        .cut_cycles = salvage,
    };
    return ptc__pickle_run(data, len, &p, root, consumed, err);
}

/* ---- zip checkpoints -------------------------------------------------------------------------- */

static bool record_allowed(const char *r)
{
    static const char *const fixed[] = {"data.pkl",
                                        "byteorder",
                                        "version",
                                        ".data/version",
                                        ".data/serialization_id",
                                        ".format_version",
                                        ".storage_alignment"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (strcmp(r, fixed[i]) == 0)
            return true;
    return strncmp(r, "data/", 5) == 0 || r[0] == '\0' /* the prefix directory entry */;
}

/* Reads a small record whole (version, byteorder) into buf, NUL-terminated. */
static int small_record(ptc_ckpt *c, const ptc__zip_entry *e, char *buf, size_t cap, ptc_error *err)
{
    if (e->size >= cap)
        return ptc__err(err, PTC_EFORMAT, e->record, -1, "record of %llu bytes is too long",
                        (unsigned long long)e->size);
    const uint8_t *data;
    void *owned = NULL;
    int rc = ptc__zip_read(c->zip, e, &data, &owned, err);
    if (rc < 0)
        return rc;
    memcpy(buf, data, (size_t)e->size);
    buf[e->size] = '\0';
    ptc__zip_release(c->zip, e, owned);
    return 0;
}

/* Whether torch 2.6 reads this version: std::stoull (white space, an optional '+', decimal
 * digits, and whatever follows them ignored; a '-' wraps to a huge value), within 1 to 10. */
static bool torch_version_ok(const char *s, size_t n)
{
    size_t i = 0, start;
    while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
        i++;
    if (i < n && s[i] == '+')
        i++;
    uint64_t v = 0;
    for (start = i; i < n && s[i] >= '0' && s[i] <= '9' && v <= 10; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    return i > start && v >= 1 && v <= 10;
}

static int check_version(ptc_ckpt *c, ptc_error *err)
{
    const ptc__zip_entry *e = ptc__zip_find(c->zip, ".data/version");
    if (!e)
        e = ptc__zip_find(c->zip, "version");
    if (!e)
        return ptc__err(err, PTC_EFORMAT, "", -1, "the archive has no version record");
    char buf[32];
    int rc = small_record(c, e, buf, sizeof buf, err);
    if (rc < 0)
        return rc;
    /* Read as torch reads it: " 3", "+3", "0003", "3.0" and "3" followed by a NUL are all 3. */
    if (torch_version_ok(buf, (size_t)e->size))
        return 0;
    size_t n = strlen(buf);
    if (n != e->size)
        return ptc__err(err, PTC_EFORMAT, e->record, 0, "version holds a NUL byte");
    if (n && buf[n - 1] == '\n')
        buf[--n] = '\0';
    uint64_t v = 0;
    bool ok = n > 0 && n < 6;
    for (size_t i = 0; ok && i < n; i++) {
        ok = buf[i] >= '0' && buf[i] <= '9';
        v = v * 10 + (uint64_t)(buf[i] - '0');
    }
    if (!ok) {
        char esc[96];
        return ptc__err(err, PTC_EFORMAT, e->record, 0, "cannot parse version \"%s\"",
                        ptc__escape(esc, sizeof esc, buf, n, false));
    }
    if (v < 1 || v > 10)
        return ptc__err(err, PTC_EFORMAT, e->record, 0,
                        "file format version %llu is outside the supported 1 to 10",
                        (unsigned long long)v);
    return 0;
}

static int check_byteorder(ptc_ckpt *c, ptc_error *err)
{
    const ptc__zip_entry *e = ptc__zip_find(c->zip, "byteorder");
    c->big_endian = false;
    if (!e)
        return 0; /* torch >= 2.1: a missing record means little-endian */
    char buf[16];
    int rc = small_record(c, e, buf, sizeof buf, err);
    if (rc < 0)
        return rc;
    if (e->size == 6 && memcmp(buf, "little", 6) == 0)
        return 0;
    if (e->size == 3 && memcmp(buf, "big", 3) == 0) {
        c->big_endian = true;
        return 0;
    }
    char esc[64];
    return ptc__err(err, PTC_EFORMAT, "byteorder", 0, "unknown byte order \"%s\"",
                    ptc__escape(esc, sizeof esc, buf, (size_t)e->size, false));
}

/* torch 2.6 hands .data/serialization_id to Python as a str after unpickling data.pkl
 * (torch.load.metadata), so bytes that are not UTF-8 make torch.load raise UnicodeDecodeError:
 * refused here the same way, at the first byte that is not. Any other content, even empty or
 * with NUL bytes, torch accepts. */
static int check_serialization_id(ptc_ckpt *c, ptc_error *err)
{
    const ptc__zip_entry *e = ptc__zip_find(c->zip, ".data/serialization_id");
    if (!e || e->size == 0)
        return 0;
    const uint8_t *data;
    void *owned = NULL;
    int rc = ptc__zip_read(c->zip, e, &data, &owned, err);
    if (rc < 0)
        return rc;
    size_t n = (size_t)e->size, i = 0;
    while (i < n) {
        uint8_t b = data[i];
        size_t k = b < 0x80                 ? 1
                   : b >= 0xC2 && b <= 0xDF ? 2
                   : b >= 0xE0 && b <= 0xEF ? 3
                   : b >= 0xF0 && b <= 0xF4 ? 4
                                            : 0;
        if (k == 0 || k > n - i || (k > 1 && !ptc__utf8_valid(data + i, k)))
            break;
        i += k;
    }
    unsigned bad = i < n ? data[i] : 0;
    ptc__zip_release(c->zip, e, owned);
    if (i < n)
        return ptc__err(err, PTC_EFORMAT, e->record, (int64_t)i,
                        "serialization id is not UTF-8 (byte 0x%02x); torch 2.6 refuses it "
                        "(UnicodeDecodeError)",
                        bad);
    return 0;
}

int ptc__load_zip(ptc_ckpt *c, ptc_error *err)
{
    int rc = ptc__zip_open(&c->zip, c->src, &c->limits, &c->budget,
                           c->flags & ~(unsigned)PTC_OPEN_VERIFY_CRC, err);
    if (rc < 0)
        return rc;
    c->prefix = ptc__zip_prefix(c->zip);
    size_t n = ptc__zip_count(c->zip);
    /* PTC_OPEN_VERIFY_CRC: every record's CRC, here, as the archive layer would check it at open,
     * except a deflated data.pkl: it is inflated below anyway, and inflating checks the CRC, so it
     * is not inflated twice. */
    const ptc__zip_entry *pkl0 = ptc__zip_find(c->zip, "data.pkl");
    for (size_t i = 0; (c->flags & PTC_OPEN_VERIFY_CRC) && i < n; i++) {
        const ptc__zip_entry *e = ptc__zip_entry_at(c->zip, i);
        if ((e != pkl0 || e->method == 0) && (rc = ptc__zip_check_crc(c->zip, e, err)) < 0)
            return rc;
    }
    if ((rc = check_version(c, err)) < 0)
        return rc;
    if (ptc__zip_find(c->zip, "constants.pkl"))
        return ptc__err(err, PTC_EUNSUPPORTED, "constants.pkl", -1,
                        "this is a TorchScript archive; ptc refuses TorchScript because it "
                        "carries code (torch.load refuses it with weights_only=True too)");
    if ((rc = check_byteorder(c, err)) < 0)
        return rc;
    if ((rc = check_serialization_id(c, err)) < 0)
        return rc;
    const ptc__zip_entry *pkl = ptc__zip_find(c->zip, "data.pkl");
    if (!pkl)
        return ptc__err(err, PTC_EFORMAT, "", -1, "the archive has no data.pkl record");
    for (size_t i = 0; i < n; i++) {
        const char *r = ptc__zip_entry_at(c->zip, i)->record;
        if (strncmp(r, "code/", 5) == 0)
            return ptc__err_stricter(err, PTC_EUNSUPPORTED, r, -1,
                                     "this is a TorchScript archive; ptc refuses TorchScript "
                                     "because it carries code (torch.load reads data.pkl and "
                                     "ignores code/ without constants.pkl)");
    }
    for (size_t i = 0; i < n; i++) {
        const char *r = ptc__zip_entry_at(c->zip, i)->record;
        if (!record_allowed(r)) {
            char esc[160];
            return ptc__err_stricter(err, PTC_EFORMAT, "",
                                     (int64_t)ptc__zip_entry_at(c->zip, i)->header_offset,
                                     "unexpected member \"%s\" in a checkpoint",
                                     ptc__escape(esc, sizeof esc, r, strlen(r), true));
        }
    }
    const uint8_t *data;
    void *owned = NULL;
    if ((rc = ptc__zip_read(c->zip, pkl, &data, &owned, err)) < 0)
        return rc;
    /* The pickle is read whole anyway, so its CRC is always checked. */
    if (!owned && !(c->flags & PTC_OPEN_VERIFY_CRC))
        rc = ptc__zip_check_crc(c->zip, pkl, err);
    ptc_value *root = NULL;
    if (rc == 0)
        rc =
            ptc__pth_run_pickle(c, data, (size_t)pkl->size, "data.pkl", 0, false, &root, NULL, err);
    ptc__zip_release(c->zip, pkl, owned);
    if (rc < 0)
        return rc;
    c->root = root;
    /* Every data/<key> record must belong to a declared storage (a salvaged numpy array's has
     * none: its bytes were in the pickle). Storage keys are distinct and at most 40 bytes (key_ok
     * in rebuild.c), so each bound storage holds a record of its own: when there are as many
     * data/ records as bound storages, every one is held, and only otherwise is the orphan
     * looked for (by key, for its message). */
    size_t ndata = 0;
    for (size_t i = 0; i < n; i++)
        ndata += strncmp(ptc__zip_entry_at(c->zip, i)->record, "data/", 5) == 0;
    for (size_t i = 0; ndata != c->nbound && i < n; i++) {
        const char *r = ptc__zip_entry_at(c->zip, i)->record;
        const ptc_storage *s =
            strncmp(r, "data/", 5) == 0 ? ptc__ckpt_find_storage(c, r + 5) : NULL;
        if (strncmp(r, "data/", 5) == 0 && (!s || s->salvaged)) {
            char esc[96];
            return ptc__err_stricter(err, PTC_EFORMAT, r, -1, "record %s belongs to no storage",
                                     ptc__escape(esc, sizeof esc, r, strlen(r), true));
        }
    }
    return 0;
}

/* ---- the handle ------------------------------------------------------------------------------ */

static int sniff(ptc_ckpt *c, ptc_error *err)
{
    uint64_t size = ptc__source_size(c->src);
    uint8_t head[512];
    size_t n = size < sizeof head ? (size_t)size : sizeof head;
    int rc = ptc__source_read(c->src, 0, head, n, err);
    if (rc < 0)
        return rc;
    if (n >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) {
        c->format = PTC_FORMAT_ZIP;
        return 0;
    }
    if (n >= sizeof legacy_magic && memcmp(head, legacy_magic, sizeof legacy_magic) == 0) {
        c->format = PTC_FORMAT_LEGACY;
        return 0;
    }
    if (n > 8 && memcmp(head, "PYTORCH1", 8) == 0)
        return ptc__err(err, PTC_EUNSUPPORTED, "", 0,
                        "unsupported archive format from the PyTorch preview release");
    if (n >= 262 && memcmp(head + 257, "ustar", 5) == 0)
        return ptc__err(err, PTC_EUNSUPPORTED, "", 257,
                        "legacy tar checkpoint (PyTorch before 0.1.10); torch.load refuses it "
                        "with weights_only=True and so does ptc");
    /* safetensors: a u64 header size, then the header's JSON object. A size that does not fit
     * the file is still dispatched, so that a truncated file is reported as such (EFORMAT). */
    if (n > 8 && head[8] == '{' && ptc__le64(head) >= 2) {
        c->format = PTC_FORMAT_SAFETENSORS;
        return 0;
    }
    const char *what = "neither a zip checkpoint, a legacy pickle stream nor a safetensors file";
    if (n == 0)
        what = "the file is empty";
    else if (n >= 6 && memcmp(head, "7z\xBC\xAF\x27\x1C", 6) == 0)
        what = "a 7-Zip archive, not a checkpoint";
    else if (n >= 23 && memcmp(head, "version https://git-lfs", 23) == 0)
        what = "a Git LFS pointer file, not the checkpoint it points to";
    else if (head[0] == '<')
        what = "looks like an HTML or XML page, not a checkpoint";
    else if (memmem(head, n, "PK\x03\x04", 4) || memmem(head, n, "PK\x05\x06", 4))
        what = "a zip archive that does not start at offset 0";
    else if (head[0] == PTC__OP_PROTO)
        what = "a pickle that is not a torch.save stream";
    return ptc__err(err, PTC_ENOTZIP, "", 0, "%s", what);
}

static int open_common(ptc_ckpt **out, ptc__source *src, const ptc_open_params *caller,
                       ptc_error *err)
{
    ptc_open_params prm, *params = &prm;
    ptc_open_params_default(&prm);
    if (ptc__params_read(&prm, sizeof prm, caller, "ptc_open_params", err) < 0) {
        ptc__source_close(src);
        return PTC_EINVAL;
    }
    ptc_ckpt *c = ptc__calloc(1, sizeof *c);
    if (!c) {
        ptc__source_close(src);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    }
    c->src = src;
    ptc_limits_default(&c->limits);
    if (params && params->limits)
        c->limits = *params->limits;
    c->flags = params ? params->flags : 0;
    c->budget.limit = c->limits.max_heap_bytes;
    c->prefix = "";
    int rc = 0;
    if (params && params->policy) {
        c->policy = params->policy;
    } else {
        rc = ptc_policy_new(&c->default_policy, PTC_POLICY_DEFAULT, err);
        c->policy = c->default_policy;
    }
    if (rc == 0 && ptc__arena_new(&c->arena, &c->budget) < 0)
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    if (rc == 0)
        rc = sniff(c, err);
    if (rc == 0)
        rc = c->format == PTC_FORMAT_ZIP      ? ptc__load_zip(c, err)
             : c->format == PTC_FORMAT_LEGACY ? ptc__load_legacy(c, err)
                                              : ptc__load_safetensors(c, err);
    if (rc < 0) {
        ptc_ckpt_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int ptc_ckpt_open(ptc_ckpt **out, const char *path, const ptc_open_params *params, ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || !path)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_ckpt_open: missing argument");
    *out = NULL;
    /* A path that cannot be mapped (a pipe, /dev/zero) is read into memory: at most the heap
     * limit, since that copy is heap. */
    ptc_open_params prm;
    ptc_open_params_default(&prm);
    if (ptc__params_read(&prm, sizeof prm, params, "ptc_open_params", err) < 0)
        return PTC_EINVAL;
    ptc_limits lim;
    ptc_limits_default(&lim);
    if (prm.limits)
        lim = *prm.limits;
    ptc__source *src;
    int rc = ptc__source_open_path_capped(&src, path, lim.max_heap_bytes, err);
    if (rc < 0)
        return rc;
    return open_common(out, src, params, err);
}

int ptc_ckpt_open_memory(ptc_ckpt **out, const void *buf, size_t len, const ptc_open_params *params,
                         ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || (!buf && len))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_ckpt_open_memory: missing argument");
    *out = NULL;
    ptc__source *src;
    int rc = ptc__source_open_memory(&src, buf ? buf : "", len, err);
    if (rc < 0)
        return rc;
    return open_common(out, src, params, err);
}

int ptc_ckpt_open_callback(ptc_ckpt **out, ptc_read_fn read, void *ctx, uint64_t size,
                           const ptc_open_params *params, ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || !read)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_ckpt_open_callback: missing argument");
    *out = NULL;
    ptc__source *src;
    int rc = ptc__source_open_callback(&src, read, ctx, size, err);
    if (rc < 0)
        return rc;
    return open_common(out, src, params, err);
}

void ptc_ckpt_close(ptc_ckpt *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nstorages; i++) {
        if (c->storages[i]->owned) {
            ptc__budget_give(&c->budget, (uint64_t)c->storages[i]->nbytes);
            ptc__free(c->storages[i]->owned);
        }
    }
    ptc__free(c->storages);
    ptc__free(c->sindex);
    ptc__zip_close(c->zip);
    ptc__arena_free(c->arena);
    ptc_policy_free(c->default_policy);
    ptc__source_close(c->src);
    ptc__free(c);
}

const ptc_value *ptc_ckpt_root(const ptc_ckpt *c)
{
    return c ? c->root : NULL;
}
ptc_format ptc_ckpt_format(const ptc_ckpt *c)
{
    return c->format;
}
const char *ptc_ckpt_prefix(const ptc_ckpt *c)
{
    return c->prefix;
}
const char *ptc_ckpt_byteorder(const ptc_ckpt *c)
{
    return c->big_endian ? "big" : "little";
}
size_t ptc_ckpt_nstorages(const ptc_ckpt *c)
{
    return c ? c->nstorages : 0;
}

const ptc_storage *ptc_ckpt_storage(const ptc_ckpt *c, size_t i)
{
    return c && i < c->nstorages ? c->storages[i] : NULL;
}

size_t ptc_ckpt_nrecords(const ptc_ckpt *c)
{
    return c && c->zip ? ptc__zip_count(c->zip) : 0;
}

const char *ptc_ckpt_record_name(const ptc_ckpt *c, size_t i)
{
    return i < ptc_ckpt_nrecords(c) ? ptc__zip_entry_at(c->zip, i)->record : NULL;
}

uint64_t ptc_ckpt_record_size(const ptc_ckpt *c, size_t i)
{
    return i < ptc_ckpt_nrecords(c) ? ptc__zip_entry_at(c->zip, i)->size : 0;
}
