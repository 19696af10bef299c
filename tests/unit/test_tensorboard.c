/*
 * test_tensorboard.c - the module tool-tensorboard.so (tools/tensorboard/writer.c), loaded as ptc
 * train loads it (ptc_tool_module; make check points PTC_PLUGIN_PATH at the build tree's
 * lib/.libs), checked from the outside on the file it writes:
 *   - the file name is EventFileWriter's: events.out.tfevents.<%010d time>.<host>.<pid>.<n>, n
 *     counting this process's files from 0; missing directories are made;
 *   - the TFRecord framing byte by byte: the length, and both masked CRC-32Cs recomputed here by
 *     a bitwise routine of this file's own (checked on the standard vector first), the file
 *     ending exactly after the last record;
 *   - each record decoded with the unpack function protoc-c generated: the first carries
 *     file_version "brain.Event:2" and the time, then one Summary per scalar with its tag, step
 *     and value (float32 of the double, bit for bit; NaN and the infinities as they are), steps 0,
 *     negative and 2^40, a UTF-8 tag, a tag of exactly the cap;
 *   - refusals: an empty tag, one a byte over the cap, one that is not UTF-8 (PTC_EINVAL, the file
 *     unchanged); a directory under a regular file (PTC_EIO naming the path); a write that fails
 *     half-way (RLIMIT_FSIZE: the kernel's EFBIG after a short write) is cut back off the file and
 *     reported with the path and errno's text.
 * Writes under $TMPDIR (or /tmp) and removes what it made.
 */
#include "ptc/ptc.h"
#include "tensorboard/tb.h"
#include "tools/tensorboard/event.pb-c.h"

#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), one bit at a time: independent of the
 * module's ISA-L routine. */
static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static uint32_t ref_masked(const uint8_t *p, size_t n)
{
    uint32_t c = ref_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *b = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(b, cap);
            if (!nb)
                break;
            b = nb;
        }
        size_t k = fread(b + len, 1, cap - len, f);
        if (k == 0)
            break;
        len += k;
    }
    fclose(f);
    *n = len;
    return b;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

typedef struct {
    const char *tag;
    int64_t step;
    double value;
} scalar;

static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* The name's pattern: <dir>/events.out.tfevents.<10 digits>.<host>.<pid>.<uid>, the time within
 * [t0, t1]. */
static void check_name(const char *path, const char *dir, time_t t0, time_t t1, unsigned uid)
{
    char host[256];
    CHECK(gethostname(host, sizeof host) == 0);
    host[sizeof host - 1] = '\0';
    size_t dn = strlen(dir);
    CHECK(strncmp(path, dir, dn) == 0 && path[dn] == '/');
    const char *name = path + dn + 1;
    const char *pre = "events.out.tfevents.";
    CHECK(strncmp(name, pre, strlen(pre)) == 0);
    const char *t = name + strlen(pre);
    int digits = 0;
    while (t[digits] >= '0' && t[digits] <= '9')
        digits++;
    CHECK_INT(digits, 10);
    long long secs = strtoll(t, NULL, 10);
    if (secs < (long long)t0 || secs > (long long)t1)
        fprintf(stderr, "file time %lld not within [%lld, %lld]\n", secs, (long long)t0,
                (long long)t1);
    CHECK(secs >= (long long)t0 && secs <= (long long)t1);
    char want[512];
    snprintf(want, sizeof want, ".%s.%ld.%u", host, (long)getpid(), uid);
    CHECK_STR(t + digits, want);
}

/* Reads every record of the file, checking the framing; the events come back unpacked. */
static int read_records(const char *path, Ptctb__Event **ev, int max)
{
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    CHECK(b != NULL);
    if (!b)
        return 0;
    size_t off = 0;
    int count = 0;
    while (off < n && count < max) {
        if (n - off < 12) {
            fprintf(stderr, "%s: %zu stray bytes at %zu\n", path, n - off, off);
            CHECK(0);
            break;
        }
        uint64_t len = le64(b + off);
        uint32_t hcrc = le32(b + off + 8), want_h = ref_masked(b + off, 8);
        if (hcrc != want_h)
            fprintf(stderr, "record %d: length crc %08x, recomputed %08x\n", count, hcrc, want_h);
        CHECK(hcrc == want_h);
        if (len > n - off - 12 || n - off - 12 - len < 4) {
            fprintf(stderr, "record %d at %zu: length %llu runs past the end (%zu)\n", count, off,
                    (unsigned long long)len, n);
            CHECK(0);
            break;
        }
        const uint8_t *data = b + off + 12;
        uint32_t dcrc = le32(data + len), want_d = ref_masked(data, (size_t)len);
        if (dcrc != want_d)
            fprintf(stderr, "record %d: data crc %08x, recomputed %08x\n", count, dcrc, want_d);
        CHECK(dcrc == want_d);
        ev[count] = ptctb__event__unpack(NULL, (size_t)len, data);
        CHECK(ev[count] != NULL);
        if (!ev[count])
            break;
        count++;
        off += 12 + (size_t)len + 4;
    }
    CHECK_INT(off, n);
    free(b);
    return count;
}

int main(void)
{
    /* The reference CRC on the standard check vector (Castagnoli: 0xe3069283). */
    CHECK_INT(ref_crc32c((const uint8_t *)"123456789", 9), 0xe3069283u);

    ptc_error err;
    const void *p = NULL;
    int rc = ptc_tool_module("tensorboard", &p, &err);
    if (rc != 0) {
        printf("FAIL: the tensorboard module: %s\n", err.message);
        return 1;
    }
    const ptc__tb_ops *tb = p;
    CHECK_INT(tb->version, PTC__TB_OPS_VERSION);
    CHECK_INT(tb->size, sizeof(ptc__tb_ops));

    const char *tmpdir = getenv("TMPDIR");
    char root[512];
    snprintf(root, sizeof root, "%s/ptc-tb-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(root)) {
        printf("FAIL: mkdtemp %s: %s\n", root, strerror(errno));
        return 1;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/runs/exp 1", root); /* two levels missing, a space */

    static char long_tag[PTC__TB_TAG_MAX + 2];
    memset(long_tag, 'x', PTC__TB_TAG_MAX);
    long_tag[PTC__TB_TAG_MAX] = '\0';
    const scalar want[] = {
        {"train/loss", 1, 2.302585092994046},
        {"train/accuracy", 0, 0.1},
        {"lr", 1099511627776LL, 0.01}, /* 2^40 */
        {"test/loss", -3, -1.5},
        {"nan", 4, NAN},
        {"inf", 5, INFINITY},
        {"-inf", 6, -INFINITY},
        {"zero", 7, 0.0},
        {"ünïcode/λ 学习率", 8, 1e-30},
        {"big", INT64_MAX, 3.4e38},
        {long_tag, 9, 1.0},
    };
    const int nwant = (int)(sizeof want / sizeof *want);

    time_t t0 = time(NULL);
    double wt0 = (double)t0;
    ptc__tb_writer *w = NULL;
    rc = tb->open(dir, &w, &err);
    CHECK_CODE(rc, 0, &err);
    if (rc != 0)
        goto out;
    const char *path = tb->path(w);
    printf("event file: %s\n", path);
    for (int i = 0; i < nwant; i++) {
        rc = tb->scalar(w, want[i].tag, want[i].step, want[i].value, &err);
        CHECK_CODE(rc, 0, &err);
    }
    /* Refused tags leave the file as it was. */
    int64_t before = file_size(path);
    long_tag[PTC__TB_TAG_MAX] = 'y';
    CHECK_CODE(tb->scalar(w, long_tag, 1, 1.0, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "1024") != NULL);
    long_tag[PTC__TB_TAG_MAX] = '\0';
    CHECK_CODE(tb->scalar(w, "", 1, 1.0, &err), PTC_EINVAL, &err);
    CHECK_CODE(tb->scalar(w, "bad\xff\xfe", 1, 1.0, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "UTF-8") != NULL);
    CHECK_CODE(tb->scalar(w, "\xc0\xaf", 1, 1.0, &err), PTC_EINVAL, &err); /* overlong '/' */
    CHECK_INT(file_size(path), before);
    CHECK_CODE(tb->flush(w, &err), 0, &err);

    /* A write the kernel cuts short: the file's size limit a few bytes past its end. Whatever
     * part of the record went out is taken back, and the message names the file and the errno. */
    {
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, SIG_IGN);
        lim.rlim_cur = (rlim_t)before + 20;
        lim.rlim_max = old.rlim_max;
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        rc = tb->scalar(w, "cut/short", 10, 1.0, &err);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK_CODE(rc, PTC_EIO, &err);
        printf("short write refused: %s\n", err.message);
        CHECK(strstr(err.message, "events.out.tfevents.") != NULL);
        CHECK(strstr(err.message, strerror(EFBIG)) != NULL);
        CHECK_INT(file_size(path), before);
    }
    time_t t1 = time(NULL);
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", path);
    CHECK_CODE(tb->close(w, &err), 0, &err);
    CHECK_CODE(tb->close(NULL, &err), 0, &err);

    check_name(keep, dir, t0, t1, 0);

    Ptctb__Event *ev[64] = {0};
    int n = read_records(keep, ev, 64);
    CHECK_INT(n, nwant + 1);
    if (n >= 1) {
        CHECK_INT(ev[0]->what_case, PTCTB__EVENT__WHAT_FILE_VERSION);
        CHECK_STR(ev[0]->file_version, "brain.Event:2");
        CHECK_INT(ev[0]->step, 0);
        CHECK(ev[0]->wall_time >= wt0 && ev[0]->wall_time < (double)t1 + 1);
        CHECK(ev[0]->source_metadata && strcmp(ev[0]->source_metadata->writer, "ptc") == 0);
    }
    for (int i = 1; i < n && i <= nwant; i++) {
        const scalar *s = &want[i - 1];
        const Ptctb__Event *e = ev[i];
        CHECK_INT(e->what_case, PTCTB__EVENT__WHAT_SUMMARY);
        if (e->what_case != PTCTB__EVENT__WHAT_SUMMARY || !e->summary || e->summary->n_value != 1) {
            CHECK(0);
            continue;
        }
        const Ptctb__Summary__Value *v = e->summary->value[0];
        CHECK_STR(v->tag, s->tag);
        CHECK_INT(e->step, s->step);
        CHECK_INT(v->value_case, PTCTB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        float f = (float)s->value;
        if (isnan(f)) {
            CHECK(isnan(v->simple_value));
        } else if (float_bits(v->simple_value) != float_bits(f)) {
            fprintf(stderr, "%s: value %.9g (bits %08x), want %.9g (bits %08x)\n", s->tag,
                    (double)v->simple_value, float_bits(v->simple_value), (double)f, float_bits(f));
            CHECK(0);
        }
        CHECK(e->wall_time >= ev[i - 1]->wall_time && e->wall_time < (double)t1 + 1);
        CHECK(e->source_metadata == NULL);
    }
    for (int i = 0; i < n; i++)
        ptctb__event__free_unpacked(ev[i], NULL);

    /* A second writer in the same process: the next file of the count, in the same directory. */
    rc = tb->open(dir, &w, &err);
    CHECK_CODE(rc, 0, &err);
    if (rc == 0) {
        CHECK(strcmp(tb->path(w), keep) != 0);
        check_name(tb->path(w), dir, t0, time(NULL), 1);
        CHECK_CODE(tb->close(w, &err), 0, &err);
    }

    /* A directory that cannot be made: its parent is a regular file (refused for root too). */
    {
        char file[700], bad[800];
        snprintf(file, sizeof file, "%s/plain", root);
        FILE *f = fopen(file, "w");
        CHECK(f != NULL);
        if (f)
            fclose(f);
        snprintf(bad, sizeof bad, "%s/sub/dir", file);
        w = (ptc__tb_writer *)(uintptr_t)1; /* must come back NULL */
        CHECK_CODE(tb->open(bad, &w, &err), PTC_EIO, &err);
        printf("unusable directory refused: %s\n", err.message);
        CHECK(w == NULL);
        CHECK(strstr(err.message, file) != NULL);
        CHECK(strstr(err.message, strerror(ENOTDIR)) != NULL);
        CHECK_CODE(tb->open(file, &w, &err), PTC_EIO, &err);
        CHECK(strstr(err.message, "not a directory") != NULL);
        CHECK_CODE(tb->open(NULL, &w, &err), PTC_EINVAL, &err);
    }
out:
    rm_tree(root);
    return check_exit("test_tensorboard");
}
