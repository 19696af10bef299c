/*
 * test_zip_write.c - unit tests of the zip writer (lib/archive/zip_write.c) and of the atomic files
 * under it (lib/base/afile.c).
 *
 * The main check is byte identity with torch: every zip that torch 2.6's torch.save wrote among
 * the fixtures (testdata/vectors under top_srcdir, and testdata/torch/v2.6 under top_builddir,
 * where make check lays it out with the resnet18 files unpacked; both environment variables are
 * set by make check) is read record by record with the ptc reader and written again
 * through ptc__zipw with the same prefix and record order, once with whole records (ptc__zipw_add)
 * and once streamed in uneven pieces (begin/write/end); both outputs must equal the original byte
 * for byte. The serialization id record is copied like any other, so nothing differs. Skipped:
 * deflated.pt and big_endian.pt (re-assembled by a script, not by torch) and legacy*.pt (no zip).
 *
 * Not run by make check: records or offsets of 4 GiB and more, which is where the zip64 extra
 * fields, the 24-byte descriptors and the 0xFFFFFFFF sentinels appear. A stream writer cannot
 * produce a sparse file, so that case costs 8 GiB of disk and about a minute; it runs by hand:
 *     test_zip_write --zip64 DIR [TORCH_FILE]
 * writes DIR/ptc_zip64.pt (a 4 GiB + 100 B record streamed from a zero buffer, then records whose
 * headers lie beyond 4 GiB, one of them empty), checks it with the ptc reader, and leaves it for
 * other readers (python3 zipfile); with TORCH_FILE (a torch.save output with such records) it also
 * rewrites that file as DIR/ptc_rewrite.pt and compares it with the original byte for byte.
 *
 * Atomicity: committing replaces an existing file (keeping its permission bits, as writing over it
 * would), aborting leaves it as it was, a folder that does not exist gives PTC_EIO with a message,
 * a write failure (a file size limit, in a child process) poisons the writer and leaves nothing
 * behind, and a child killed with SIGKILL half way through a file leaves the old file intact and
 * one stray temporary ".<name>.ptc-XXXXXX" beside it: nothing runs at a SIGKILL, so nothing can
 * remove it, which is the documented worst case. Finally every allocation of a whole write fails
 * in turn: each failure must be PTC_ENOMEM, leak nothing and leave no file.
 *
 * The time to rewrite resnet18.pth is printed next to plain writes of the same bytes; it is never
 * asserted.
 */
#include "archive/archive.h"
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
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

static char g_tmp[512]; /* a private folder for everything this test writes */

static const char *srcdir(void)
{
    const char *d = getenv("top_srcdir");
    return d && d[0] ? d : ".";
}

static const char *builddir(void)
{
    const char *d = getenv("top_builddir");
    return d && d[0] ? d : srcdir();
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, r;
    uint8_t *buf = malloc(cap);
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

static int spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* Compares two files in 1 MiB pieces; returns -1 when equal, else the first differing offset
 * (the shorter length when one is a prefix of the other). */
static int64_t first_diff(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int64_t at = fa && fb ? -1 : 0;
    static uint8_t ba[1 << 20], bb[1 << 20];
    int64_t off = 0;
    while (at < 0) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        size_t n = na < nb ? na : nb;
        for (size_t i = 0; i < n; i++)
            if (ba[i] != bb[i]) {
                at = off + (int64_t)i;
                break;
            }
        if (at >= 0)
            break;
        if (na != nb)
            at = off + (int64_t)n;
        if (na == 0 || na != nb)
            break;
        off += (int64_t)n;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return at;
}

/* Number of entries of folder dir whose name starts with prefix ("" counts all but . and ..). */
static int g_named;   /* the named temporary file is forced (ptc__afile_force_named) */
static int g_tmpfile; /* g_tmp's file system has O_TMPFILE */

static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Removes every entry of a folder that has no subfolders. */
static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

static int file_mode(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* ---- rewriting torch's files ----------------------------------------------------------------- */

typedef enum { WHOLE, STREAMED } write_mode;

/* Reads every record of src with the ptc reader and writes them again to dst, same prefix, same
 * order. STREAMED cuts each record into pieces of changing sizes (1 byte to over 1 MiB, so that
 * pieces both fill and bypass the atomic file's buffer). Returns 0 or a PTC_E* code. */
static int rewrite(const char *src, const char *dst, write_mode mode, ptc_error *err)
{
    static const size_t pieces[] = {1, 7, 64, 4093, 65536, (1u << 20) + 3, 100};
    ptc__source *s = NULL;
    ptc__zip *z = NULL;
    ptc__zipw *w = NULL;
    ptc_limits lim;
    ptc_limits_default(&lim);
    int rc = ptc__source_open_path(&s, src, err);
    if (rc == 0)
        rc = ptc__zip_open(&z, s, &lim, NULL, 0, err);
    if (rc == 0)
        rc = ptc__zipw_open(&w, dst, ptc__zip_prefix(z), err);
    for (size_t i = 0; rc == 0 && i < ptc__zip_count(z); i++) {
        const ptc__zip_entry *e = ptc__zip_entry_at(z, i);
        const uint8_t *data;
        void *owned = NULL;
        if ((rc = ptc__zip_read(z, e, &data, &owned, err)) < 0)
            break;
        if (mode == WHOLE) {
            rc = ptc__zipw_add(w, e->record, data, e->size, err);
        } else {
            rc = ptc__zipw_begin(w, e->record, e->size, err);
            for (uint64_t off = 0, k = i; rc == 0 && off < e->size; k++) {
                size_t n = pieces[k % (sizeof pieces / sizeof pieces[0])];
                if (n > e->size - off)
                    n = (size_t)(e->size - off);
                rc = ptc__zipw_write(w, data + off, n, err);
                off += n;
            }
            if (rc == 0)
                rc = ptc__zipw_end(w, err);
        }
        ptc__zip_release(z, e, owned);
        if (rc == 0 && ptc__zipw_crc(w, i) != e->crc32)
            rc = ptc__err(err, PTC_ECRC, e->record, -1, "writer CRC %08x, reader CRC %08x",
                          ptc__zipw_crc(w, i), e->crc32);
    }
    if (rc == 0 && ptc__zipw_count(w) != ptc__zip_count(z))
        rc = ptc__err(err, PTC_EFORMAT, "", -1, "record counts differ");
    if (rc == 0) {
        rc = ptc__zipw_finish(w, err);
        w = NULL;
    }
    ptc__zipw_abort(w);
    ptc__zip_close(z);
    ptc__source_close(s);
    return rc;
}

static int g_identical, g_compared;

static void check_identical(const char *src, const char *label)
{
    char dst[1024];
    snprintf(dst, sizeof dst, "%s/rewrite.pt", g_tmp);
    for (int m = 0; m < 2; m++) {
        ptc_error err;
        ptc__err_clear(&err);
        int rc = rewrite(src, dst, m == 0 ? WHOLE : STREAMED, &err);
        CHECK_CODE(rc, 0, EP(err));
        int64_t at = rc == 0 ? first_diff(src, dst) : 0;
        g_compared++;
        if (at < 0)
            g_identical++;
        else
            fprintf(stderr, "  %s (%s): differs from the original at offset %lld\n", label,
                    m == 0 ? "whole" : "streamed", (long long)at);
        CHECK(at < 0);
        unlink(dst);
    }
    struct stat st = {0};
    stat(src, &st);
    printf("  %-28s %10lld bytes: whole and streamed rewrites byte-identical\n", label,
           (long long)st.st_size);
}

static bool is_torch_zip_fixture(const char *name)
{
    size_t n = strlen(name);
    bool ext =
        (n > 3 && strcmp(name + n - 3, ".pt") == 0) || (n > 4 && strcmp(name + n - 4, ".pth") == 0);
    /* deflated.pt and big_endian.pt were re-assembled by gen_fixtures.py; legacy*.pt is not zip. */
    return ext && strcmp(name, "deflated.pt") != 0 && strcmp(name, "big_endian.pt") != 0 &&
           strncmp(name, "legacy", 6) != 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_rewrite_fixtures(void)
{
    printf("rewriting torch 2.6 files record by record:\n");
    static const char *vectors[] = {"tensor_bytesio.pt", "vec_tensor.pt", "views.pt", "dtypes.pt",
                                    "train_ckpt.pt"};
    char path[1400];
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        snprintf(path, sizeof path, "%s/testdata/vectors/%s", srcdir(), vectors[i]);
        char label[128];
        snprintf(label, sizeof label, "vectors/%s", vectors[i]);
        check_identical(path, label);
    }

    char dir[1024];
    snprintf(dir, sizeof dir, "%s/testdata/torch/v2.6", builddir());
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d)
        return;
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256)
        if (is_torch_zip_fixture(e->d_name))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_str);
    /* The 13 torch.save zips listed in testdata/torch/README.md; more is fine, fewer means the
     * fixtures are missing. */
    CHECK(n >= 13);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char label[128];
        snprintf(label, sizeof label, "v2.6/%s", names[i]);
        check_identical(path, label);
        free(names[i]);
    }
    printf("  %d of %d rewrites byte-identical\n", g_identical, g_compared);
}

/* ---- the writer's own rules ------------------------------------------------------------------ */

static void test_writer_rules(void)
{
    printf("writer rules:\n");
    char path[1024];
    snprintf(path, sizeof path, "%s/rules.pt", g_tmp);
    ptc_error err;
    ptc__zipw *w;

    CHECK_CODE(ptc__zipw_open(&w, path, "a/b", &err), PTC_EINVAL, EP(err));
    CHECK_CODE(ptc__zipw_open(&w, path, "", &err), PTC_EINVAL, EP(err));
    printf("  %-44s -> %s\n", "prefix with a slash", "PTC_EINVAL");

    /* Each misuse poisons the writer; finish then fails and leaves no file. */
    struct {
        const char *what;
        int step;
    } cases[] = {{"empty record name", 0},
                 {"more bytes than begun", 1},
                 {"end with bytes missing", 2},
                 {"finish with a record open", 3},
                 {"write with no record open", 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_CODE(ptc__zipw_open(&w, path, "archive", &err), 0, EP(err));
        int rc = 0;
        switch (cases[i].step) {
        case 0:
            rc = ptc__zipw_add(w, "", "x", 1, &err);
            break;
        case 1:
            ptc__zipw_begin(w, "data/0", 4, &err);
            rc = ptc__zipw_write(w, "12345", 5, &err);
            break;
        case 2:
            ptc__zipw_begin(w, "data/0", 4, &err);
            ptc__zipw_write(w, "123", 3, &err);
            rc = ptc__zipw_end(w, &err);
            break;
        case 3:
            ptc__zipw_begin(w, "data/0", 4, &err);
            rc = ptc__zipw_finish(w, &err);
            w = NULL;
            break;
        case 4:
            rc = ptc__zipw_write(w, "1", 1, &err);
            break;
        }
        CHECK_CODE(rc, PTC_EINVAL, EP(err));
        printf("  %-44s -> %s\n", cases[i].what, err.message);
        if (w) {
            /* A poisoned writer refuses everything, finish included. */
            CHECK_CODE(ptc__zipw_add(w, "version", "3\n", 2, &err), PTC_EINVAL, EP(err));
            CHECK_CODE(ptc__zipw_finish(w, &err), PTC_EINVAL, EP(err));
        }
        CHECK_INT(count_entries(g_tmp, ""), 0);
    }

    /* An archive without records is only the three end records, as miniz writes it. */
    CHECK_CODE(ptc__zipw_open(&w, path, "archive", &err), 0, EP(err));
    CHECK_INT(ptc__zipw_count(w), 0);
    CHECK_CODE(ptc__zipw_finish(w, &err), 0, EP(err));
    size_t len;
    uint8_t *b = slurp(path, &len);
    CHECK_INT(len, 56 + 20 + 22);
    if (b && len == 98) {
        CHECK_INT(ptc__le32(b), 0x06064b50);
        CHECK_INT(ptc__le64(b + 4), 44);
        CHECK_INT(ptc__le64(b + 24), 0);
        CHECK_INT(ptc__le32(b + 56), 0x07064b50);
        CHECK_INT(ptc__le64(b + 64), 0);
        CHECK_INT(ptc__le32(b + 76), 0x06054b50);
    }
    free(b);
    unlink(path);

    /* Empty records: flags 0x0800, no descriptor, CRC 0; data still aligned; CRCs are reported. */
    CHECK_CODE(ptc__zipw_open(&w, path, "p", &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "data/0", NULL, 0, &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "data/1", "abc", 3, &err), 0, EP(err));
    CHECK_INT(ptc__zipw_count(w), 2);
    CHECK_INT(ptc__zipw_crc(w, 0), 0);
    CHECK_INT(ptc__zipw_crc(w, 1), crc32(0, (const Bytef *)"abc", 3));
    CHECK_CODE(ptc__zipw_finish(w, &err), 0, EP(err));
    b = slurp(path, &len);
    CHECK(b != NULL && len > 192);
    if (b && len > 192) {
        CHECK_INT(ptc__le16(b + 6), 0x0800);
        CHECK_INT(ptc__le32(b + 64), 0x04034b50); /* empty record: next header at 64 */
        CHECK_INT(ptc__le16(b + 64 + 6), 0x0808);
        CHECK(memcmp(b + 128, "abc", 3) == 0);
        CHECK_INT(ptc__le32(b + 131), 0x08074b50);
    }
    free(b);
    unlink(path);
}

/* ---- atomic files ---------------------------------------------------------------------------- */

static void test_atomic(void)
{
    printf("atomic files:\n");
    char path[1024];
    snprintf(path, sizeof path, "%s/model.pth", g_tmp);
    ptc_error err;
    size_t len;
    uint8_t *b;

    /* A new file gets 0666 & ~umask, like open(O_CREAT, 0666). The test is single-threaded, so
     * reading the umask by setting it back is safe here. */
    mode_t um = umask(022);
    umask(um);
    ptc__afile *f;
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, EP(err));
    CHECK_CODE(ptc__afile_write(f, "old\n", 4, &err), 0, EP(err));
    CHECK_INT(ptc__afile_offset(f), 4);
    /* Unnamed (O_TMPFILE) where the file system allows: no name at all until commit. */
    CHECK_INT(ptc__afile_unnamed(f), !g_named && g_tmpfile);
    CHECK_INT(count_entries(g_tmp, ".model.pth.ptc-"), ptc__afile_unnamed(f) ? 0 : 1);
    CHECK_CODE(ptc__afile_commit(f, &err), 0, EP(err));
    CHECK_INT(file_mode(path), 0666 & ~um);
    CHECK_INT(count_entries(g_tmp, ""), 1);
    printf("  new file: mode %03o (umask %03o)\n", file_mode(path), (unsigned)um);

    /* Committing over it replaces the content and keeps the old file's mode. */
    chmod(path, 0640);
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, EP(err));
    uint8_t *big = malloc(3u << 20);
    for (size_t i = 0; i < (3u << 20); i++)
        big[i] = (uint8_t)(i * 7 + (i >> 13));
    /* pieces that fill the buffer, cross it and bypass it */
    CHECK_CODE(ptc__afile_write(f, big, 100, &err), 0, EP(err));
    CHECK_CODE(ptc__afile_write(f, big + 100, (1u << 20) + 5, &err), 0, EP(err));
    CHECK_CODE(ptc__afile_write(f, big + 100 + (1u << 20) + 5, 0, &err), 0, EP(err));
    CHECK_CODE(ptc__afile_write(f, big + 105 + (1u << 20), (2u << 20) - 105, &err), 0, EP(err));
    CHECK_INT(ptc__afile_offset(f), 3u << 20);
    CHECK_CODE(ptc__afile_commit(f, &err), 0, EP(err));
    b = slurp(path, &len);
    CHECK(b && len == (3u << 20) && memcmp(b, big, len) == 0);
    free(b);
    CHECK_INT(file_mode(path), 0640);
    CHECK_INT(count_entries(g_tmp, ""), 1);
    printf("  commit over an existing file: replaced, mode 0640 kept, no temporary left\n");

    /* Abort after some bytes reached the disk: the old file stays, the temporary goes. */
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, EP(err));
    CHECK_CODE(ptc__afile_write(f, "new!", 4, &err), 0, EP(err));
    CHECK_CODE(ptc__afile_write(f, big, 3u << 20, &err), 0, EP(err));
    ptc__afile_abort(f);
    ptc__afile_abort(NULL);
    b = slurp(path, &len);
    CHECK(b && len == (3u << 20) && memcmp(b, big, len) == 0);
    free(b);
    CHECK_INT(count_entries(g_tmp, ""), 1);
    printf("  abort: old file intact, no temporary left\n");

    /* The same through the zip writer: abort and a failed finish leave the old file. */
    ptc__zipw *w;
    CHECK_CODE(ptc__zipw_open(&w, path, "model", &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "data.pkl", big, 1000, &err), 0, EP(err));
    ptc__zipw_abort(w);
    b = slurp(path, &len);
    CHECK(b && len == (3u << 20) && memcmp(b, big, len) == 0);
    free(b);
    CHECK_INT(count_entries(g_tmp, ""), 1);

    /* A folder that does not exist. */
    char bad[1100];
    snprintf(bad, sizeof bad, "%s/no/such/folder/x.pth", g_tmp);
    ptc__err_clear(&err);
    f = NULL;
    CHECK_CODE(ptc__afile_open(&f, bad, &err), PTC_EIO, EP(err));
    CHECK(f == NULL);
    CHECK(strstr(err.message, "no/such/folder/x.pth") != NULL);
    CHECK(strstr(err.message, strerror(ENOENT)) != NULL);
    printf("  %-44s -> %s\n", "missing folder", err.message);
    w = NULL;
    CHECK_CODE(ptc__zipw_open(&w, bad, "x", &err), PTC_EIO, EP(err));
    CHECK(w == NULL);
    f = NULL;
    CHECK_CODE(ptc__afile_open(&f, g_tmp, &err), PTC_EIO, EP(err)); /* a folder */
    CHECK(f == NULL && strstr(err.message, "is a directory") != NULL);
    printf("  %-44s -> %s\n", "destination is a folder", err.message);
    char slash[1100];
    snprintf(slash, sizeof slash, "%s/", g_tmp);
    CHECK_CODE(ptc__afile_open(&f, slash, &err), PTC_EINVAL, EP(err));

    /* A destination without a folder part is created in the current folder. */
    char cwd[1024];
    if (getcwd(cwd, sizeof cwd) && chdir(g_tmp) == 0) {
        CHECK_CODE(ptc__afile_open(&f, "plain.pt", &err), 0, EP(err));
        CHECK_CODE(ptc__afile_write(f, "x", 1, &err), 0, EP(err));
        CHECK_CODE(ptc__afile_commit(f, &err), 0, EP(err));
        CHECK_INT(file_mode("plain.pt"), 0666 & ~um);
        unlink("plain.pt");
        CHECK(chdir(cwd) == 0);
    }
    free(big);
}

/* A child that hits a file size limit: the write fails with PTC_EIO, the writer refuses to go on,
 * and neither the old file nor a temporary is disturbed or left. Returns the failures counted in
 * the child (its own CHECKs are lost with it). */
static int child_write_limit(const char *path, int fail_in_finish)
{
    struct rlimit rl = {2u << 20, 2u << 20};
    signal(SIGXFSZ, SIG_IGN); /* EFBIG from write instead of a signal */
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 100;
    int before = check_failures;
    ptc_error err;
    ptc__zipw *w;
    uint8_t *big = calloc(1, 3u << 20);
    CHECK_CODE(ptc__zipw_open(&w, path, "model", &err), 0, EP(err));
    if (!fail_in_finish) {
        /* 3 MiB: the buffer's 1 MiB goes out, the direct write of the rest passes the limit. */
        CHECK_CODE(ptc__zipw_add(w, "data/0", big, 3u << 20, &err), PTC_EIO, EP(err));
        printf("  %-44s -> %s\n", "write past RLIMIT_FSIZE", err.message);
        CHECK_CODE(ptc__zipw_add(w, "data/1", big, 10, &err), PTC_EINVAL, EP(err));
    } else {
        /* Just under 2 MiB of data: the records fit, the central directory does not; the last
         * flush fails inside finish. */
        CHECK_CODE(ptc__zipw_add(w, "data/0", big, (2u << 20) - 100, &err), 0, EP(err));
    }
    CHECK_CODE(ptc__zipw_finish(w, &err), fail_in_finish ? PTC_EIO : PTC_EINVAL, EP(err));
    if (fail_in_finish)
        printf("  %-44s -> %s\n", "finish past RLIMIT_FSIZE", err.message);
    free(big);
    return check_failures - before;
}

static void test_failures_in_children(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.pth", g_tmp);
    static const char old[] = "the old checkpoint\n";
    empty_dir(g_tmp);
    CHECK(spit(path, old, sizeof old - 1) == 0);

    for (int kind = 0; kind < 2; kind++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int failed = child_write_limit(path, kind);
            fflush(stdout);
            fflush(stderr);
            _exit(failed);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status));
        CHECK_INT(WEXITSTATUS(status), 0);
        size_t len;
        uint8_t *b = slurp(path, &len);
        CHECK(b && len == sizeof old - 1 && memcmp(b, old, len) == 0);
        free(b);
        CHECK_INT(count_entries(g_tmp, ""), 1);
    }

    /* A child writes half a checkpoint (some of it already on disk), tells us, and is killed. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ptc_error err;
        ptc__zipw *w;
        uint8_t *big = calloc(1, 5u << 20);
        if (ptc__zipw_open(&w, path, "model", &err) == 0 &&
            ptc__zipw_add(w, "data.pkl", big, 100, &err) == 0 &&
            ptc__zipw_begin(w, "data/0", 10u << 20, &err) == 0 &&
            ptc__zipw_write(w, big, 5u << 20, &err) == 0) {
            char c = 'x';
            if (write(fds[1], &c, 1) != 1)
                _exit(1);
        }
        for (;;)
            pause();
    }
    close(fds[1]);
    char c = 0;
    CHECK_INT(read(fds[0], &c, 1), 1);
    close(fds[0]);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    size_t len;
    uint8_t *b = slurp(path, &len);
    CHECK(b && len == sizeof old - 1 && memcmp(b, old, len) == 0);
    free(b);
    /* The one thing a SIGKILL leaves: the temporary file, which nothing reads. */
    int stray = count_entries(g_tmp, ".model.pth.ptc-");
    CHECK(stray <= 1);
    if (!g_named && g_tmpfile)
        CHECK_INT(stray, 0); /* an unnamed file vanishes with the process */
    CHECK_INT(count_entries(g_tmp, ""), 1 + stray);
    printf("  SIGKILL half way: old file intact, %d stray temporary file(s) (at most 1 expected)\n",
           stray);
    empty_dir(g_tmp);
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

/* A whole checkpoint-like write: enough records to grow the record table and the name buffer a
 * few times, and one streamed record. */
static int write_sample(const char *path, ptc_error *err, bool finish_on_error)
{
    static uint8_t data[5000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 31);
    ptc__zipw *w = NULL;
    int rc = ptc__zipw_open(&w, path, "sweep", err);
    if (rc == 0)
        rc = ptc__zipw_add(w, "data.pkl", data, 200, err);
    for (int i = 0; rc == 0 && i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "data/%d", i);
        rc = ptc__zipw_add(w, name, data + i, (size_t)i * 50, err);
    }
    if (rc == 0)
        rc = ptc__zipw_begin(w, "data/streamed", sizeof data, err);
    for (size_t off = 0; rc == 0 && off < sizeof data; off += 1000)
        rc = ptc__zipw_write(w, data + off, 1000, err);
    if (rc == 0)
        rc = ptc__zipw_end(w, err);
    if (rc == 0)
        rc = ptc__zipw_add(w, "version", "3\n", 2, err);
    if (rc == 0 || finish_on_error) {
        int frc = w ? ptc__zipw_finish(w, err) : rc;
        return rc ? rc : frc;
    }
    ptc__zipw_abort(w);
    return rc;
}

static void test_alloc_failures(void)
{
    printf("allocation failures (each allocation of a whole write fails in turn):\n");
    char dir[1024], path[1100], ref[1100];
    snprintf(dir, sizeof dir, "%s/sweep", g_tmp);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/out.pt", dir);
    snprintf(ref, sizeof ref, "%s/ref.pt", g_tmp);
    ptc_error err;
    CHECK_CODE(write_sample(ref, &err, false), 0, EP(err));

    long n;
    for (n = 0; n < 1000; n++) {
        fail_alloc f = {n, 0};
        ptc_set_allocator(failing_realloc, &f);
        ptc__err_clear(&err);
        int rc = write_sample(path, &err, n % 2 == 1);
        ptc_set_allocator(NULL, NULL);
        CHECK_INT(f.live, 0);
        if (rc == 0)
            break;
        CHECK_CODE(rc, PTC_ENOMEM, EP(err));
        CHECK_INT(count_entries(dir, ""), 0);
    }
    printf("  succeeded once %ld allocations were allowed; every earlier failure was PTC_ENOMEM,"
           " leaked nothing and left no file\n",
           n);
    CHECK(n > 3 && n < 1000);
    CHECK_INT(first_diff(ref, path), -1);
    unlink(path);
    unlink(ref);
    rmdir(dir);
}

/* ---- timing (printed, never asserted) -------------------------------------------------------- */

static void test_timing(void)
{
    char src[1024], dst[1100];
    snprintf(src, sizeof src, "%s/testdata/torch/v2.6/resnet18.pth", builddir());
    snprintf(dst, sizeof dst, "%s/timing.pt", g_tmp);
    size_t len;
    uint8_t *b = slurp(src, &len);
    if (!b)
        return;
    ptc_error err;
    double t0 = now();
    int rc = rewrite(src, dst, WHOLE, &err);
    double t_zipw = now() - t0;
    CHECK_CODE(rc, 0, EP(err));
    unlink(dst);

    double t_plain[2];
    for (int sync = 0; sync < 2; sync++) {
        t0 = now();
        int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0 && write(fd, b, len) == (ssize_t)len);
        if (sync)
            fsync(fd);
        close(fd);
        t_plain[sync] = now() - t0;
        unlink(dst);
    }
    printf("timing, resnet18.pth (%zu bytes): zip writer %.1f ms (read + write + fsync); plain "
           "write %.1f ms, with fsync %.1f ms; ratio to plain write with fsync %.2f\n",
           len, t_zipw * 1e3, t_plain[0] * 1e3, t_plain[1] * 1e3, t_zipw / t_plain[1]);
    free(b);
}

/* ---- zip64, by hand -------------------------------------------------------------------------- */

static int zip64_by_hand(const char *dir, const char *torch_file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/ptc_zip64.pt", dir);
    const uint64_t big = (4ull << 30) + 100;
    static uint8_t zeros[1 << 20];
    ptc_error err;
    ptc__zipw *w;
    double t0 = now();
    CHECK_CODE(ptc__zipw_open(&w, path, "ptc_zip64", &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "data.pkl", "pickle", 6, &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_begin(w, "data/0", big, &err), 0, EP(err));
    for (uint64_t off = 0; off < big; off += sizeof zeros) {
        size_t n = big - off < sizeof zeros ? (size_t)(big - off) : sizeof zeros;
        CHECK_CODE(ptc__zipw_write(w, zeros, n, &err), 0, EP(err));
    }
    CHECK_CODE(ptc__zipw_end(w, &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "data/1", NULL, 0, &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "data/2", "\0\0\x80?\0\0\0@", 8, &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_add(w, "version", "3\n", 2, &err), 0, EP(err));
    CHECK_CODE(ptc__zipw_finish(w, &err), 0, EP(err));
    printf("zip64: wrote %s in %.1f s\n", path, now() - t0);

    ptc__source *s = NULL;
    ptc__zip *z = NULL;
    ptc_limits lim;
    ptc_limits_default(&lim);
    t0 = now();
    CHECK_CODE(ptc__source_open_path(&s, path, &err), 0, EP(err));
    int rc = s ? ptc__zip_open(&z, s, &lim, NULL, PTC_OPEN_VERIFY_CRC, &err) : -1;
    CHECK_CODE(rc, 0, EP(err));
    if (rc == 0) {
        printf("zip64: ptc reader (with CRC check, %.1f s):\n", now() - t0);
        for (size_t i = 0; i < ptc__zip_count(z); i++) {
            const ptc__zip_entry *e = ptc__zip_entry_at(z, i);
            printf("  %-20s header %12llu data %12llu size %12llu crc %08x flags %04x\n", e->name,
                   (unsigned long long)e->header_offset, (unsigned long long)e->data_offset,
                   (unsigned long long)e->size, e->crc32, e->flags);
            CHECK_INT(e->data_offset % 64, 0);
        }
        const ptc__zip_entry *e = ptc__zip_find(z, "data/0");
        CHECK(e && e->size == big);
        e = ptc__zip_find(z, "data/2");
        CHECK(e && e->header_offset > big);
    }
    ptc__zip_close(z);
    ptc__source_close(s);

    if (torch_file) {
        snprintf(path, sizeof path, "%s/ptc_rewrite.pt", dir);
        t0 = now();
        CHECK_CODE(rewrite(torch_file, path, WHOLE, &err), 0, EP(err));
        int64_t at = first_diff(torch_file, path);
        CHECK_INT(at, -1);
        printf("zip64: rewrite of %s %s (%.1f s)\n", torch_file,
               at < 0 ? "is byte-identical" : "DIFFERS", now() - t0);
        unlink(path);
    }
    return check_exit("test_zip_write --zip64");
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--zip64") == 0)
        return zip64_by_hand(argv[2], argc >= 4 ? argv[3] : NULL);

    const char *t = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/ptc-zipw-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
#ifdef O_TMPFILE
    int probe = open(g_tmp, O_TMPFILE | O_WRONLY, 0600);
    g_tmpfile = probe >= 0;
    if (probe >= 0)
        close(probe);
#endif
    test_writer_rules();
    test_atomic();
    test_failures_in_children();
    /* Again as on a file system without O_TMPFILE: the named temporary file. */
    g_named = 1;
    ptc__afile_force_named(true);
    printf("named temporary files (no O_TMPFILE):\n");
    test_atomic();
    test_failures_in_children();
    ptc__afile_force_named(false);
    g_named = 0;
    test_alloc_failures();
    test_rewrite_fixtures();
    test_timing();
    empty_dir(g_tmp);
    rmdir(g_tmp);
    return check_exit("test_zip_write");
}
