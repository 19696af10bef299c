/*
 * test_save.c - ptc_save and the document builders through the public API.
 *
 * Byte identity: every zip checkpoint torch 2.6 wrote into testdata/ (saved by torch.save
 * directly) is loaded and saved again; the new file must equal the original byte for byte except
 * the 40 digits of .data/serialization_id, which torch derives from a process-specific hash. The
 * originals were written by real PyTorch, so the expected bytes are not ptc's own output.
 * Round trip: every readable fixture (legacy, deflated, big-endian, safetensors-free) saved and
 * loaded again gives the same tensors and values. Documents: a state dict built from scratch
 * loads back with the same values, and saving is atomic.
 */
#include "ptc/ptc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* top: the source tree; build: the build tree, where make check lays out testdata/torch with the
 * packed fixtures unpacked (testdata/torch/unpack.sh). */
static char top[4096], build[4096], tmpdir[4200];

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* Everything a reader can see of a tree, as text: tensor paths, dtypes, geometry, digests, and
 * the storage each tensor uses (as the index of its first user, so keys may be renumbered). */
static char *describe(const ptc_value *root)
{
    size_t cap = 1 << 20, o = 0;
    char *out = malloc(cap);
    ptc_walk *w;
    ptc_error err;
    const char *path;
    const ptc_tensor *t;
    const ptc_storage *seen[8192];
    size_t nseen = 0;
    out[0] = '\0';
    if (ptc_walk_new(&w, root, &err) < 0)
        return out;
    while (ptc_walk_next(w, &path, &t) > 0 && o + 512 < cap) {
        uint8_t d[32];
        ptc_tensor_sha256(t, d, &err);
        size_t sid = 0;
        while (sid < nseen && seen[sid] != ptc_tensor_storage(t))
            sid++;
        if (sid == nseen && nseen < 8192)
            seen[nseen++] = ptc_tensor_storage(t);
        o += (size_t)snprintf(
            out + o, cap - o, "%s %s nd=%d off=%lld st=%zu p=%d rg=%d %02x%02x%02x%02x%02x%02x\n",
            path, ptc_dtype_name(ptc_tensor_dtype(t)), ptc_tensor_ndim(t),
            (long long)ptc_tensor_storage_offset(t), sid, ptc_tensor_is_parameter(t),
            ptc_tensor_requires_grad(t), d[0], d[1], d[2], d[3], d[4], d[5]);
        for (int k = 0; k < ptc_tensor_ndim(t) && o + 64 < cap; k++)
            o += (size_t)snprintf(out + o, cap - o, " %lld/%lld", (long long)ptc_tensor_shape(t)[k],
                                  (long long)ptc_tensor_stride(t)[k]);
    }
    ptc_walk_free(w);
    return out;
}

/* Marks the bytes that depend on the serialization id: its 40 digits, the CRC in its data
 * descriptor and the CRC in its central directory entry. Walks the zip headers of a torch-layout
 * file (local records then central directory); returns 0 when the layout is not as expected. */
static int mask_id(const unsigned char *b, size_t n, unsigned char *mask)
{
    static const char id[] = ".data/serialization_id";
    size_t idl = sizeof id - 1, pos = 0;
    int found = 0;
    while (pos + 30 <= n && memcmp(b + pos, "PK\3\4", 4) == 0) {
        size_t nl = b[pos + 26] | (b[pos + 27] << 8), el = b[pos + 28] | (b[pos + 29] << 8);
        size_t data = pos + 30 + nl + el;
        const unsigned char *name = b + pos + 30;
        /* the record's size comes from the descriptor: find it after the data */
        size_t end = data;
        if (nl >= idl && memcmp(name + nl - idl, id, idl) == 0) {
            if (data + 40 + 16 > n)
                return 0;
            memset(mask + data, 1, 40);
            memset(mask + data + 44, 1, 4); /* descriptor CRC after "PK\7\8" */
            found++;
            end = data + 40 + 16;
        } else {
            /* skip to the next local header or the central directory */
            const unsigned char *p = b + data;
            while (p + 4 <= b + n && memcmp(p, "PK\7\x08", 4) != 0 && memcmp(p, "PK\3\4", 4) != 0 &&
                   memcmp(p, "PK\1\2", 4) != 0)
                p++;
            end = (size_t)(p - b);
            if (p + 4 <= b + n && memcmp(p, "PK\7\x08", 4) == 0)
                end += 16;
        }
        pos = end;
    }
    while (pos + 46 <= n && memcmp(b + pos, "PK\1\2", 4) == 0) {
        size_t nl = b[pos + 28] | (b[pos + 29] << 8), el = b[pos + 30] | (b[pos + 31] << 8),
               cl = b[pos + 32] | (b[pos + 33] << 8);
        if (nl >= idl && memcmp(b + pos + 46 + nl - idl, id, idl) == 0) {
            memset(mask + pos + 16, 1, 4);
            found++;
        }
        pos += 46 + nl + el + cl;
    }
    return found == 2;
}

static int byte_identical_except_id(const unsigned char *a, size_t na, const unsigned char *b,
                                    size_t nb)
{
    if (na != nb)
        return 0;
    unsigned char *mask = calloc(na ? na : 1, 1);
    int ok = mask_id(a, na, mask);
    for (size_t i = 0; ok && i < na; i++)
        if (!mask[i] && a[i] != b[i])
            ok = 0;
    free(mask);
    return ok;
}

static void roundtrip_file(const char *path, int expect_identical)
{
    ptc_ckpt *c = NULL, *c2 = NULL;
    ptc_error err;
    if (ptc_ckpt_open(&c, path, NULL, &err) < 0) {
        fprintf(stderr, "cannot open %s: %s\n", path, err.message);
        CHECK(0);
        return;
    }
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char out[4400];
    snprintf(out, sizeof out, "%s/%s", tmpdir, base);
    ptc_save_params p;
    ptc_save_params_default(&p);
    p.format = PTC_SAVE_PTH;
    /* Files torch wrote to a BytesIO carry the prefix "archive", not their name's stem. */
    if (ptc_ckpt_format(c) == PTC_FORMAT_ZIP)
        p.archive_name = ptc_ckpt_prefix(c);
    int rc = ptc_save(ptc_ckpt_root(c), out, &p, &err);
    if (rc < 0)
        fprintf(stderr, "save %s: %s\n", base, err.message);
    CHECK_INT(rc, 0);
    if (rc == 0) {
        CHECK_CODE(ptc_ckpt_open(&c2, out, NULL, &err), 0, &err);
        if (c2) {
            char *d1 = describe(ptc_ckpt_root(c)), *d2 = describe(ptc_ckpt_root(c2));
            if (strcmp(d1, d2) != 0)
                fprintf(stderr,
                        "round trip of %s differs\n--- original\n%.2000s\n--- saved\n%.2000s\n",
                        base, d1, d2);
            CHECK(strcmp(d1, d2) == 0);
            CHECK_INT(ptc_ckpt_format(c2), PTC_FORMAT_ZIP);
            free(d1);
            free(d2);
            ptc_ckpt_close(c2);
        }
        if (expect_identical) {
            size_t na, nb;
            unsigned char *a = slurp(path, &na), *b = slurp(out, &nb);
            int same = a && b && byte_identical_except_id(a, na, b, nb);
            if (!same) {
                size_t i = 0;
                while (a && b && i < na && i < nb && a[i] == b[i])
                    i++;
                FILE *f = fopen("/tmp/ptc-save-diff.bin", "wb");
                if (f && b) {
                    fwrite(b, 1, nb, f);
                    fclose(f);
                }
                fprintf(stderr,
                        "%s: not byte-identical (sizes %zu / %zu, first difference at 0x%zx)\n",
                        base, na, nb, i);
            }
            CHECK(same);
            free(a);
            free(b);
        }
        unlink(out);
    }
    ptc_ckpt_close(c);
}

/* An allocator under which every reallocation moves and the old block is poisoned before it is
 * freed: whatever the library keys by the address of an element of a growing array breaks under
 * it. The saver once memoized each storage's key string under the address of its entry in such
 * an array; after a move, a new entry could take an address the memo held for another storage,
 * and two storages were written with one key ("storage \"128\" is declared twice" on reading
 * many_small.pt back). */
typedef struct moving_hdr {
    size_t size;
    size_t pad; /* keeps the payload 16-byte aligned */
} moving_hdr;

static void *moving_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    moving_hdr *old = ptr ? (moving_hdr *)ptr - 1 : NULL;
    if (size == 0) {
        if (old) {
            memset(old + 1, 0xA5, old->size);
            free(old);
        }
        return NULL;
    }
    moving_hdr *h = malloc(sizeof *h + size);
    if (!h)
        return NULL;
    h->size = size;
    if (old) {
        memcpy(h + 1, old + 1, old->size < size ? old->size : size);
        memset(old + 1, 0xA5, old->size);
        free(old);
    }
    return h + 1;
}

static void test_moving_allocator(void)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/testdata/torch/v2.6/many_small.pt", build);
    ptc_set_allocator(moving_realloc, NULL);
    roundtrip_file(path, 1);
    ptc_set_allocator(NULL, NULL);
}

static void test_fixtures(void)
{
    static const char *const identical[] = {
        "testdata/vectors/tensor_bytesio.pt", "testdata/vectors/vec_tensor.pt",
        "testdata/vectors/views.pt",          "testdata/vectors/dtypes.pt",
        "testdata/vectors/train_ckpt.pt",
    };
    for (size_t i = 0; i < sizeof identical / sizeof *identical; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", top, identical[i]);
        roundtrip_file(path, 1);
    }
    /* Every torch-written fixture: byte identity for the ones torch.save wrote directly (not
     * re-zipped, not re-assembled big-endian, not legacy), value identity for all. */
    static const char *const dirs[] = {"testdata/torch/v2.6", "testdata/torch/v1.13"};
    for (size_t k = 0; k < 2; k++) {
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", build, dirs[k]);
        DIR *d = opendir(dir);
        CHECK(d != NULL);
        if (!d)
            continue;
        struct dirent *e;
        int n = 0;
        while ((e = readdir(d))) {
            const char *nm = e->d_name;
            size_t l = strlen(nm);
            if (!(l > 3 && (strcmp(nm + l - 3, ".pt") == 0 || strcmp(nm + l - 4, ".pth") == 0)))
                continue;
            char path[4700];
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            int identical_expected = k == 0 && strncmp(nm, "legacy", 6) != 0 &&
                                     strcmp(nm, "deflated.pt") != 0 &&
                                     strcmp(nm, "big_endian.pt") != 0;
            roundtrip_file(path, identical_expected);
            n++;
        }
        closedir(d);
        printf("%s: %d fixtures saved and reloaded\n", dirs[k], n);
    }
}

static void test_document(void)
{
    ptc_doc *d;
    ptc_error err;
    CHECK_INT(ptc_doc_new(&d, &err), 0);
    /* OrderedDict {'w': 2x3 float32, 'n': 0-d int64} with _metadata {'': {'version': 1}}. */
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t n = 7, shape[2] = {2, 3};
    ptc_value *sd = ptc_doc_dict(d, 1);
    ptc_storage *sw = ptc_doc_storage(d, PTC_FLOAT32, sizeof w, w, 1, NULL);
    ptc_storage *sn = ptc_doc_storage(d, PTC_INT64, sizeof n, &n, 0, NULL);
    CHECK(sd && sw && sn);
    CHECK_INT(ptc_doc_set(d, sd, ptc_doc_str(d, "w", (size_t)-1),
                          ptc_doc_tensor(d, sw, PTC_FLOAT32, 2, shape, NULL, 0, 0)),
              0);
    CHECK_INT(ptc_doc_set(d, sd, ptc_doc_str(d, "n", (size_t)-1),
                          ptc_doc_tensor(d, sn, PTC_INT64, 0, NULL, NULL, 0, 0)),
              0);
    ptc_value *md = ptc_doc_dict(d, 1), *ver = ptc_doc_dict(d, 0), *attrs = ptc_doc_dict(d, 0);
    CHECK_INT(ptc_doc_set(d, ver, ptc_doc_str(d, "version", (size_t)-1), ptc_doc_int(d, 1)), 0);
    CHECK_INT(ptc_doc_set(d, md, ptc_doc_str(d, "", 0), ver), 0);
    CHECK_INT(ptc_doc_set(d, attrs, ptc_doc_str(d, "_metadata", (size_t)-1), md), 0);
    CHECK_INT(ptc_doc_set_attrs(d, sd, attrs), 0);
    /* Invalid builds are refused with a reason. */
    int64_t big[1] = {7};
    CHECK(ptc_doc_tensor(d, sw, PTC_FLOAT32, 1, big, NULL, 0, 0) == NULL);
    CHECK_INT(ptc_doc_error(d)->code, PTC_EINVAL);
    CHECK(ptc_doc_str(d, "\xff", 1) == NULL);
    CHECK(ptc_doc_tensor(d, sw, PTC_INT32, 1, big, NULL, 0, 0) == NULL);

    char path[4400];
    snprintf(path, sizeof path, "%s/doc.pth", tmpdir);
    CHECK_CODE(ptc_save(sd, path, NULL, &err), 0, &err);
    ptc_ckpt *c = NULL;
    CHECK_CODE(ptc_ckpt_open(&c, path, NULL, &err), 0, &err);
    if (c) {
        const ptc_tensor *t = ptc_state_dict_get(ptc_ckpt_root(c), "w");
        float r[6];
        CHECK(t && ptc_tensor_read(t, r, sizeof r, &err) == 0 && r[5] == 6.0f);
        CHECK_STR(ptc_ckpt_prefix(c), "doc");
        const ptc_value *m = ptc_dict_get(ptc_dict_attrs(ptc_ckpt_root(c)), "_metadata");
        int64_t v;
        CHECK(ptc_value_int(ptc_dict_get(ptc_dict_get(m, ""), "version"), &v) == 0 && v == 1);
        ptc_ckpt_close(c);
    }
    /* A failing save (a value kind ptc cannot write: none here, so use a path in a missing
     * folder) leaves nothing behind and reports EIO. */
    char bad[4500];
    snprintf(bad, sizeof bad, "%s/missing/dir/x.pth", tmpdir);
    CHECK_CODE(ptc_save(sd, bad, NULL, &err), PTC_EIO, &err);
    /* Saving over an existing file replaces it atomically; no temporary file remains. */
    CHECK_CODE(ptc_save(sd, path, NULL, &err), 0, &err);
    DIR *dir = opendir(tmpdir);
    struct dirent *e;
    int stray = 0;
    while (dir && (e = readdir(dir)))
        stray += strstr(e->d_name, ".ptc-") != NULL;
    if (dir)
        closedir(dir);
    CHECK_INT(stray, 0);
    unlink(path);
    ptc_doc_free(d);
}

/* map_location: every storage is written with the given location, the bytes unchanged; a name
 * that is no device torch knows is refused before anything is written. */
static void test_map_location(void)
{
    ptc_ckpt *c = NULL, *c2 = NULL;
    ptc_error err;
    char in[4400], out[4400];
    snprintf(in, sizeof in, "%s/testdata/vectors/train_ckpt.pt", top);
    snprintf(out, sizeof out, "%s/moved.pt", tmpdir);
    CHECK_CODE(ptc_ckpt_open(&c, in, NULL, &err), 0, &err);
    if (!c)
        return;
    ptc_save_params p;
    ptc_save_params_default(&p);
    static const char *const bad[] = {"gpu",   "cuda:",        "cuda:x", "",    "CPU",
                                      "cpu:0", "cuda:1234567", "mps:3",  "hip", "xla:0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p.map_location = bad[i];
        CHECK_CODE(ptc_save(ptc_ckpt_root(c), out, &p, &err), PTC_EINVAL, &err);
        CHECK(access(out, F_OK) != 0);
    }
    p.map_location = "cuda:1";
    CHECK_CODE(ptc_save(ptc_ckpt_root(c), out, &p, &err), 0, &err);
    CHECK_CODE(ptc_ckpt_open(&c2, out, NULL, &err), 0, &err);
    if (c2) {
        size_t n = ptc_ckpt_nstorages(c2);
        CHECK(n > 0 && n == ptc_ckpt_nstorages(c));
        for (size_t i = 0; i < n; i++)
            CHECK_STR(ptc_storage_location(ptc_ckpt_storage(c2, i)), "cuda:1");
        char *d1 = describe(ptc_ckpt_root(c)), *d2 = describe(ptc_ckpt_root(c2));
        CHECK(strcmp(d1, d2) == 0);
        free(d1);
        free(d2);
        ptc_ckpt_close(c2);
    }
    unlink(out);
    ptc_ckpt_close(c);
}

/* The work budget: a stride-0 view of one float expanded to 2^40 elements is 4 TiB in safetensors
 * (contiguous) and 4 bytes in torch's zip (its storage as it is). A save past the budget is
 * PTC_ELIMIT before any file exists, with the bytes it would write in the message; shared storages
 * are charged once. */
static void test_budget(void)
{
    printf("work budget:\n");
    ptc_doc *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    if (!d)
        return;
    float one = 1.5f;
    ptc_storage *s = ptc_doc_storage(d, PTC_FLOAT32, 4, &one, 1, NULL);
    int64_t shape[1] = {(int64_t)1 << 40}, stride[1] = {0};
    ptc_value *x = ptc_doc_tensor(d, s, PTC_FLOAT32, 1, shape, stride, 0, 0);
    ptc_value *y = ptc_doc_tensor(d, s, PTC_FLOAT32, 1, shape, stride, 0, 0);
    ptc_value *root = ptc_doc_dict(d, 0);
    CHECK(x && y && root);
    CHECK_INT(ptc_doc_set(d, root, ptc_doc_str(d, "x", 1), x), 0);
    CHECK_INT(ptc_doc_set(d, root, ptc_doc_str(d, "y", 1), y), 0);

    char st[4400], pth[4400];
    snprintf(st, sizeof st, "%s/view.safetensors", tmpdir);
    snprintf(pth, sizeof pth, "%s/view.pth", tmpdir);
    ptc_budget b = {.max_nodes = 1000, .max_bytes = (uint64_t)1 << 30};
    ptc_save_params p;
    ptc_save_params_default(&p);
    p.budget = &b;
    CHECK_CODE(ptc_save(root, st, &p, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "would write 8796093022208 bytes") != NULL);
    CHECK(strstr(err.message, "is a view of 4398046511104 bytes over a storage of 4") != NULL);
    CHECK(strstr(err.message, "work budget exceeded") != NULL);
    CHECK(access(st, F_OK) != 0);
    CHECK_INT(b.bytes, 0); /* a refused charge is not made */
    printf("  safetensors of two 2^40 stride-0 views -> %s\n", err.message);

    /* torch's zip: the one storage, once, for both views. */
    CHECK_CODE(ptc_save(root, pth, &p, &err), 0, &err);
    CHECK_INT(b.bytes, 4);
    CHECK(b.nodes >= 3 && b.nodes < 20);
    ptc_ckpt *c = NULL;
    CHECK_CODE(ptc_ckpt_open(&c, pth, NULL, &err), 0, &err);
    if (c) {
        const ptc_tensor *t = ptc_state_dict_get(ptc_ckpt_root(c), "y");
        CHECK(t && ptc_tensor_numel(t) == shape[0] && ptc_tensor_stride(t)[0] == 0);
        CHECK_INT(ptc_ckpt_nstorages(c), 1);
        ptc_ckpt_close(c);
    }
    printf("  pth of the same: %llu bytes of tensor data charged, %llu nodes\n",
           (unsigned long long)b.bytes, (unsigned long long)b.nodes);

    /* A budget that the storages exceed refuses the pth too, naming the bytes. */
    ptc_budget tiny = {.max_nodes = 1000, .max_bytes = 3};
    p.budget = &tiny;
    unlink(pth);
    CHECK_CODE(ptc_save(root, pth, &p, &err), PTC_ELIMIT, &err);
    CHECK(strstr(err.message, "would hold 4 bytes of tensor data in 1 storages") != NULL);
    CHECK(access(pth, F_OK) != 0);
    /* The node budget: three values (dict, two tensors, two keys) do not fit in two. */
    ptc_budget few = {.max_nodes = 2, .max_bytes = 1000};
    p.budget = &few;
    CHECK_CODE(ptc_save(root, pth, &p, &err), PTC_ELIMIT, &err);
    CHECK(access(pth, F_OK) != 0);
    /* Within the budget, a safetensors of a small view writes it out whole. */
    int64_t four[1] = {4};
    ptc_value *small = ptc_doc_dict(d, 0);
    CHECK_INT(ptc_doc_set(d, small, ptc_doc_str(d, "v", 1),
                          ptc_doc_tensor(d, s, PTC_FLOAT32, 1, four, stride, 0, 0)),
              0);
    ptc_budget ok = {.max_nodes = 1000, .max_bytes = 16};
    p.budget = &ok;
    CHECK_CODE(ptc_save(small, st, &p, &err), 0, &err);
    CHECK_INT(ok.bytes, 16);
    ptc_budget short_by_one = {.max_nodes = 1000, .max_bytes = 15};
    p.budget = &short_by_one;
    CHECK_CODE(ptc_save(small, st, &p, &err), PTC_ELIMIT, &err);
    unlink(st);
    unlink(pth);
    ptc_doc_free(d);
}

int main(void)
{
    const char *t = getenv("top_srcdir");
    snprintf(top, sizeof top, "%s", t ? t : ".");
    const char *b = getenv("top_builddir");
    snprintf(build, sizeof build, "%s", b ? b : top);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ptc-test-save-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 99;
    test_fixtures();
    test_moving_allocator();
    test_document();
    test_map_location();
    test_budget();
    rmdir(tmpdir);
    return check_exit("test_save");
}
