/*
 * test_base.c - the base layer: error names and messages, checked arithmetic, escaping and UTF-8
 * validation, SHA-256 against the FIPS 180-4 examples, arenas, buffers, budgets and the
 * replaceable allocator, and the size check of parameter structs.
 */
#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"

static void hex(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_errors(void)
{
    CHECK_STR(ptc_err_name(PTC_EFORMAT), "EFORMAT");
    CHECK_STR(ptc_err_name(PTC_EUNSAFE), "EUNSAFE");
    CHECK_STR(ptc_err_name(0), "OK");
    CHECK_STR(ptc_err_name(-999), "EUNKNOWN");
    CHECK_STR(ptc_strerror(PTC_ENOMEM), "out of memory");
    ptc_error err;
    CHECK_INT(ptc__err(&err, PTC_EFORMAT, "data.pkl", 0x1c4, "BINGET %u before BINPUT", 5u),
              PTC_EFORMAT);
    CHECK_STR(err.message, "data.pkl+0x1c4: BINGET 5 before BINPUT");
    CHECK_STR(err.member, "data.pkl");
    CHECK_INT(err.offset, 0x1c4);
    ptc__err(&err, PTC_EIO, "", -1, "cannot open");
    CHECK_STR(err.message, "cannot open");
    ptc__err_prefix(&err, "%s: ", "model.pth");
    CHECK_STR(err.message, "model.pth: cannot open");
    CHECK_INT(ptc__err(NULL, PTC_ELIMIT, "x", 1, "ignored"), PTC_ELIMIT);
}

static void test_arith(void)
{
    uint64_t u;
    int64_t i;
    CHECK(ptc__add_u64_ok(1, 2, &u) && u == 3);
    CHECK(!ptc__add_u64_ok(UINT64_MAX, 1, &u));
    CHECK(!ptc__mul_u64_ok(1ull << 32, 1ull << 32, &u));
    CHECK(!ptc__mul_i64_ok(0x4000000000000001LL, 4, &i));
    CHECK(ptc__mul_i64_ok(-3, 4, &i) && i == -12);
    CHECK(ptc__range_ok(10, 5, 15));
    CHECK(!ptc__range_ok(10, 6, 15));
    CHECK(!ptc__range_ok(UINT64_MAX, 2, 15));
    uint8_t b[8];
    ptc__put_le64(b, 0x0102030405060708ull);
    CHECK(ptc__le64(b) == 0x0102030405060708ull && b[0] == 8);
}

static void test_text(void)
{
    char out[64];
    CHECK_STR(ptc__escape(out, sizeof out, "a\x1b[31m\"b\\", 9, false), "a\\x1b[31m\\\"b\\\\");
    CHECK_STR(ptc__escape(out, sizeof out, "\xc3\xa9\xff", 3, true), "\xc3\xa9\\xff");
    CHECK_STR(ptc__escape(out, sizeof out, "\xc3\xa9", 2, false), "\\xc3\\xa9");
    /* C1 controls and bidi overrides are escaped even when UTF-8 is kept. */
    CHECK_STR(ptc__escape(out, sizeof out,
                          "\xc2\x9b"
                          "1m",
                          4, true),
              "\\xc2\\x9b1m");
    CHECK_STR(ptc__escape(out, sizeof out,
                          "a\xe2\x80\xae"
                          "b",
                          5, true),
              "a\\xe2\\x80\\xaeb");
    /* Invisible characters that make two texts look alike: zero-width space, a tag. */
    CHECK_STR(ptc__escape(out, sizeof out, "cpu\xe2\x80\x8b", 6, true), "cpu\\xe2\\x80\\x8b");
    CHECK_STR(ptc__escape(out, sizeof out, "a\xf3\xa0\x80\x81", 5, true), "a\\xf3\\xa0\\x80\\x81");
    CHECK_STR(ptc__escape(out, sizeof out, "\xf0\x9f\x98\x80", 4, true), "\xf0\x9f\x98\x80");
    char small[8];
    CHECK_STR(ptc__escape(small, sizeof small, "abcdefghijkl", 12, false), "abcd...");
    CHECK(ptc__utf8_valid((const uint8_t *)"h\xc3\xa9llo", 6));
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xc0\x80", 2));         /* overlong NUL */
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xf4\x90\x80\x80", 4)); /* beyond U+10FFFF */
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xe2\x82", 2));         /* truncated */
}

static void test_sha256(void)
{
    static const struct {
        const char *msg, *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        ptc__sha256 s;
        uint8_t d[32];
        char h[65];
        ptc_error err;
        CHECK_INT(ptc__sha256_init(&s, &err), 0);
        /* Feed byte by byte: pieces shorter than a block. */
        for (size_t i = 0; i < strlen(v[k].msg); i++)
            ptc__sha256_update(&s, v[k].msg + i, 1);
        CHECK_INT(ptc__sha256_final(&s, d, &err), 0);
        CHECK(s.ctx == NULL); /* final released the digest */
        hex(d, h);
        CHECK_STR(h, v[k].digest);
    }
    /* One million 'a' in uneven pieces. */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    ptc__sha256 s;
    uint8_t d[32];
    char h[65];
    ptc_error err;
    CHECK_INT(ptc__sha256_init(&s, &err), 0);
    ptc__sha256_update(&s, a, 333);
    ptc__sha256_update(&s, a + 333, 1000000 - 333);
    CHECK_INT(ptc__sha256_final(&s, d, &err), 0);
    hex(d, h);
    CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* An abandoned digest is released by discard; a second discard, and final after it, are
     * safe (final says the digest was never started). */
    CHECK_INT(ptc__sha256_init(&s, &err), 0);
    ptc__sha256_update(&s, a, 1000);
    ptc__sha256_discard(&s);
    ptc__sha256_discard(&s);
    CHECK_INT(ptc__sha256_final(&s, d, &err), PTC_EINVAL);
    free(a);
}

/* ptc__crc32 must equal zlib's crc32 for every length, alignment, starting value and split. */
static void test_crc32(void)
{
    size_t n = 1 << 20;
    uint8_t *b = malloc(n + 64);
    uint32_t seed = 12345;
    for (size_t i = 0; i < n + 64; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)(seed >> 16);
    }
    int bad = 0;
    for (int t = 0; t < 4000; t++) {
        seed = seed * 1103515245u + 12345u;
        size_t off = seed % 64, len = (seed >> 8) % (t < 2000 ? 300 : 100000);
        uint32_t c0 = seed * 2654435761u;
        if ((uint32_t)crc32(c0, b + off, (uInt)len) != ptc__crc32(c0, b + off, len))
            bad++;
    }
    CHECK_INT(bad, 0);
    uint32_t inc = 0;
    for (size_t o = 0; o < n; o += 100003)
        inc = ptc__crc32(inc, b + o, n - o < 100003 ? n - o : 100003);
    CHECK(inc == (uint32_t)crc32(0, b, (uInt)n));
    CHECK(ptc__crc32(0, "123456789", 9) == 0xcbf43926u); /* the standard check value */
    free(b);
}

static size_t live_allocs;
static void *counting_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (n == 0) {
        if (p)
            live_allocs--;
        free(p);
        return NULL;
    }
    if (!p)
        live_allocs++;
    return realloc(p, n);
}

static void test_memory(void)
{
    ptc_set_allocator(counting_realloc, NULL);
    ptc__budget budget = {0, 300000};
    ptc__arena *a;
    CHECK_INT(ptc__arena_new(&a, &budget), 0);
    void *p1 = ptc__arena_alloc(a, 10), *p2 = ptc__arena_alloc(a, 10);
    CHECK(p1 && p2 && ((uintptr_t)p1 % 16) == 0 && ((uintptr_t)p2 % 16) == 0 && p1 != p2);
    CHECK(ptc__arena_alloc(a, 150000) != NULL); /* a large block of its own */
    CHECK(ptc__arena_alloc(a, 100000) == NULL); /* beyond the budget */
    CHECK(budget.used <= budget.limit);
    ptc__arena_free(a);
    CHECK_INT(budget.used, 0);
    ptc__buf b = {0};
    CHECK_INT(ptc__buf_printf(&b, "%d-%s", 42, "x"), 0);
    CHECK(b.len == 4 && memcmp(b.data, "42-x", 4) == 0);
    ptc__buf_free(&b);
    /* The cap: a buffer grows to max bytes and no further (PTC_ELIMIT, contents kept). */
    ptc__buf capped = {.max = 100};
    char hundred[100];
    memset(hundred, 'a', sizeof hundred);
    CHECK_INT(ptc__buf_append(&capped, hundred, sizeof hundred), 0);
    CHECK_INT(ptc__buf_append(&capped, "x", 1), PTC_ELIMIT);
    CHECK_INT(ptc__buf_printf(&capped, "%d", 7), PTC_ELIMIT);
    CHECK(capped.len == 100 && capped.cap <= 100);
    ptc__buf_free(&capped);
    CHECK_INT(ptc__buf_reserve(&b, PTC__BUF_MAX_DEFAULT + 1), PTC_ELIMIT);
    CHECK_INT(ptc__buf_reserve(&b, SIZE_MAX), PTC_ELIMIT);
    ptc_error err;
    ptc__budget small = {0, 100};
    CHECK_CODE(ptc__budget_take(&small, 101, &err, "data/0", -1), PTC_ELIMIT, &err);
    CHECK_INT(live_allocs, 0);
    ptc_set_allocator(NULL, NULL);
}

/* ---- atomic files: the unnamed file, the link at commit, signal cleanup -----------------------
 */

static char g_dir[512];

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static int has_content(const char *path, const char *want)
{
    char buf[64] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    return n == strlen(want) && memcmp(buf, want, n) == 0;
}

static int tmpfile_supported(const char *dir)
{
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_WRONLY, 0600);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
#endif
    (void)dir;
    return 0;
}

static void on_term(int sig)
{
    ptc_save_remove_temporaries();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A child opens an atomic file, writes, reports through a pipe and waits for the signal sig;
 * returns the child's wait status. With handler set it installs on_term for sig first. */
static int child_killed(const char *path, bool named, int sig, bool handler)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ptc__afile_force_named(named);
        if (handler)
            signal(sig, on_term);
        ptc__afile *f;
        ptc_error err;
        if (ptc__afile_open(&f, path, &err) == 0 && ptc__afile_write(f, "partial", 7, &err) == 0) {
            char c = ptc__afile_unnamed(f) ? 'u' : 'n';
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
    if (!named && tmpfile_supported(g_dir))
        CHECK_INT(c, 'u');
    if (named)
        CHECK_INT(c, 'n');
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void test_afile(void)
{
    printf("atomic files:\n");
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/ptc-base-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(g_dir)) {
        CHECK(0);
        return;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/out.safetensors", g_dir);
    int tmpfile = tmpfile_supported(g_dir);
    mode_t um = umask(022);
    umask(um);
    ptc_error err;
    ptc__afile *f;

    /* Unnamed: nothing in the folder until commit, which links the file as the new name. */
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, &err);
    CHECK_INT(ptc__afile_unnamed(f), tmpfile);
    CHECK_CODE(ptc__afile_write(f, "first", 5, &err), 0, &err);
    CHECK_INT(entries(g_dir), tmpfile ? 0 : 1);
    CHECK_CODE(ptc__afile_commit(f, &err), 0, &err);
    CHECK(has_content(path, "first"));
    CHECK_INT(entries(g_dir), 1);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~um));
    printf("  new destination: %s, mode %03o, nothing else in the folder\n",
           tmpfile ? "unnamed file linked in place" : "named temporary file renamed",
           (unsigned)(st.st_mode & 0777));

    /* Over an existing file: linked under a temporary name, renamed over it; mode kept. */
    chmod(path, 0640);
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, &err);
    CHECK_CODE(ptc__afile_write(f, "second", 6, &err), 0, &err);
    CHECK_INT(entries(g_dir), tmpfile ? 1 : 2);
    CHECK_CODE(ptc__afile_commit(f, &err), 0, &err);
    CHECK(has_content(path, "second"));
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK_INT(entries(g_dir), 1);

    /* A destination that appears between open and commit is replaced, not an error. */
    unlink(path);
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, &err);
    CHECK_CODE(ptc__afile_write(f, "third", 5, &err), 0, &err);
    FILE *other = fopen(path, "wb");
    if (other)
        fclose(other);
    CHECK_CODE(ptc__afile_commit(f, &err), 0, &err);
    CHECK(has_content(path, "third"));
    CHECK_INT(entries(g_dir), 1);

    /* Abort: the unnamed file vanishes, the named one is unlinked; the old file stays. */
    for (int named = 0; named < 2; named++) {
        ptc__afile_force_named(named);
        CHECK_CODE(ptc__afile_open(&f, path, &err), 0, &err);
        CHECK_CODE(ptc__afile_write(f, "lost", 4, &err), 0, &err);
        ptc__afile_abort(f);
        CHECK(has_content(path, "third"));
        CHECK_INT(entries(g_dir), 1);
    }

    /* ptc_save_remove_temporaries unlinks the live temporary names (a signal handler's job):
     * the save then fails at commit and the old file stays. */
    ptc__afile_force_named(true);
    CHECK_CODE(ptc__afile_open(&f, path, &err), 0, &err);
    CHECK_CODE(ptc__afile_write(f, "doomed", 6, &err), 0, &err);
    CHECK_INT(entries(g_dir), 2);
    ptc_save_remove_temporaries();
    CHECK_INT(entries(g_dir), 1);
    CHECK_CODE(ptc__afile_commit(f, &err), PTC_EIO, &err);
    CHECK(has_content(path, "third"));
    CHECK_INT(entries(g_dir), 1);
    printf("  ptc_save_remove_temporaries, then commit -> %s\n", err.message);
    ptc__afile_force_named(false);
    ptc_save_remove_temporaries(); /* nothing listed any more: harmless */
    CHECK(has_content(path, "third"));

    /* Killed half way. SIGTERM and SIGINT with a handler that calls
     * ptc_save_remove_temporaries and re-raises: nothing left, the named file included; SIGKILL:
     * nothing left where the file is unnamed. */
    static const struct {
        bool named, handler;
        int sig;
    } kills[] = {{true, true, SIGTERM},
                 {true, true, SIGINT},
                 {false, true, SIGTERM},
                 {false, false, SIGKILL}};
    for (size_t i = 0; i < sizeof kills / sizeof kills[0]; i++) {
        if (!kills[i].named && !tmpfile)
            continue;
        int status = child_killed(path, kills[i].named, kills[i].sig, kills[i].handler);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == kills[i].sig);
        CHECK(has_content(path, "third"));
        CHECK_INT(entries(g_dir), 1);
        printf("  %s temporary file, %s%s: old file intact, nothing left\n",
               kills[i].named ? "named" : "unnamed", strsignal(kills[i].sig),
               kills[i].handler ? " (handler)" : "");
    }
    unlink(path);
    rmdir(g_dir);
}

/* Parameter structs carry their size (base/params.c): 0 or larger than the library's is refused
 * with PTC_EINVAL naming the struct; a smaller one (a caller built against an older ptc.h) is read
 * up to its size and the rest keeps the library's defaults. */
static void test_params(void)
{
    ptc_error err;
    /* The helper: an "older" struct that ends after flags's predecessor; garbage beyond its size
     * must not be read. */
    ptc_open_params dst, src;
    ptc_open_params_default(&dst);
    CHECK_INT(dst.size, sizeof dst);
    memset(&src, 0xa5, sizeof src);
    src.size = offsetof(ptc_open_params, limits);
    src.policy = NULL;
    CHECK_CODE(ptc__params_read(&dst, sizeof dst, &src, "ptc_open_params", &err), 0, &err);
    CHECK_INT(dst.size, sizeof dst);
    CHECK(dst.limits == NULL);
    CHECK_INT(dst.flags, 0);
    CHECK_CODE(ptc__params_read(&dst, sizeof dst, NULL, "ptc_open_params", &err), 0, &err);

    /* Each public entry point, with size 0, larger than the library's, and smaller. */
    ptc_open_params op;
    ptc_open_params_default(&op);
    ptc_ckpt *c = NULL;
    op.size = 0;
    CHECK_CODE(ptc_ckpt_open_memory(&c, "", 0, &op, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_open_params: size 0 is not this library's") != NULL);
    op.size = sizeof op + 8;
    CHECK_CODE(ptc_ckpt_open_memory(&c, "", 0, &op, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_open_params: size") != NULL);
    /* An older caller's struct: limits and flags are not there (a pointer the library would crash
     * on if it read it); the empty input is then refused for what it is. */
    memset(&op, 0xa5, sizeof op);
    op.size = offsetof(ptc_open_params, limits);
    op.policy = NULL;
    CHECK_CODE(ptc_ckpt_open_memory(&c, "", 0, &op, &err), PTC_ENOTZIP, &err);
    CHECK(c == NULL);
    printf("  ptc_open_params: size 0 and size+8 refused, an older size read up to its end\n");

    ptc_verify_params vp;
    ptc_verify_params_default(&vp);
    CHECK_INT(vp.size, sizeof vp);
    ptc_report *r = NULL;
    vp.size = 0;
    CHECK_CODE(ptc_verify_memory(&r, "", 0, &vp, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_verify_params: size 0") != NULL);
    memset(&vp, 0xa5, sizeof vp);
    vp.size = offsetof(ptc_verify_params, limits);
    vp.policy = NULL;
    CHECK_CODE(ptc_verify_memory(&r, "", 0, &vp, &err), 0, &err);
    CHECK(r && ptc_report_verdict(r) == PTC_VERDICT_MALFORMED);
    ptc_report_free(r);

    ptc_save_params sp;
    ptc_save_params_default(&sp);
    CHECK_INT(sp.size, sizeof sp);
    sp.size = sizeof sp * 2;
    ptc_doc *d = NULL;
    CHECK_CODE(ptc_doc_new(&d, &err), 0, &err);
    ptc_value *root = d ? ptc_doc_dict(d, 1) : NULL;
    CHECK_CODE(ptc_save(root, "/nonexistent-dir/x.pth", &sp, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_save_params: size") != NULL);
    ptc_doc_free(d);

    ptc_train_params tp;
    ptc_train_params_default(&tp);
    CHECK_INT(tp.size, sizeof tp);
    tp.size = 0;
    ptc_train_result res;
    CHECK_CODE(ptc_train(&tp, &res, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_train_params: size 0") != NULL);
    double acc, loss;
    int64_t count;
    CHECK_CODE(ptc_evaluate(&tp, "w.pth", &acc, &loss, &count, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_train_params: size 0") != NULL);
    printf("  ptc_verify_params, ptc_save_params, ptc_train_params: checked the same way\n");
}

int main(void)
{
    test_errors();
    test_arith();
    test_text();
    test_sha256();
    test_crc32();
    test_memory();
    test_afile();
    test_params();
    return check_exit("test_base");
}
