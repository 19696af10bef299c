/*
 * test_data.c - the data layer (lib/data/): datasets, sampler, augmentation and loader.
 *
 *   1. CIFAR-10 binary files written here (known pixel patterns and labels) read back exactly;
 *      corrupt ones (wrong size, empty, label 10, missing files, too many samples) refused with
 *      the right code and a message naming the file and the byte offset.
 *   2. IDX files, plain and gzip-compressed (written with zlib's gz*), read back with the padding
 *      and channel replication checked pixel by pixel; bad magic, dimensions, counts, truncated,
 *      trailing, corrupt and lying headers refused, the last without a large allocation.
 *   2b. Bounded by what is on disk: a .gz header declaring more than 100 times the file refused
 *      before any allocation, one lying within the ratio refused when the stream ends; bytes after
 *      the last gzip member refused (two members read as one stream); sparse files refused at open;
 *      keep (--max-samples) holds only its prefix, reads no further where no statistics are
 *      needed, and leaves the statistics bit-identical to those of the whole split; test_only
 *      (ptc eval) holds no train sample and never opens the CIFAR-10 train files.
 *   3. The real Fashion-MNIST in /usr/share/datasets/fashion-mnist when it is there (60000 and
 *      10000 images, 6000 / 1000 per class), with its statistics printed and pinned to the bits of
 *      the statistics computed from the whole held split (and with keep and test_only too);
 *      skipped with a note otherwise.
 *   4. The sampler against DistributedSampler's outputs computed by hand (tests/interop/
 *      check_sampler.py compares with torch itself), shuffle invariants and a pinned permutation;
 *      the evaluation sharding covers every sample once.
 *   5. Augmentation against a reference written here another way (an explicit 40x40 padded image
 *      and double arithmetic rounded to float32 at each step, which equals float32 arithmetic for
 *      these operations): without augmentation exactly (x/255 - mean)/std; with it, every output is
 *      one of the 9x9x2 crops and flips, the drawn one.
 *   6. The loader with 1, 2 and 3 buffers: every index of the epoch exactly once, in order, with
 *      its label and its image; holding every buffer, stopping mid-epoch, an error in the middle,
 *      an empty epoch, a caller allocator.
 *   7. Allocation failure: every allocation of a dataset read and of a loader's life is made to
 *      fail in turn; each failure must be a clean PTC_ENOMEM with nothing left allocated.
 * A counting allocator watches the whole run: nothing may leak.
 */
#include "data/data.h"

#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"

/* ---- a counting allocator ------------------------------------------------------------------ */

typedef struct tally {
    pthread_mutex_t mu;
    long live;    /* blocks */
    size_t bytes; /* live bytes */
    size_t peak;  /* most live bytes since the last reset */
    long calls;   /* allocation requests (not frees) */
    long fail_at; /* this request fails (1-based); 0: none */
    bool failed;
} tally;

static tally g_tally = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *count_realloc(void *ctx, void *ptr, size_t size)
{
    tally *t = ctx;
    pthread_mutex_lock(&t->mu);
    void *res = NULL;
    size_t *h = ptr ? (size_t *)ptr - 2 : NULL;
    if (size == 0) {
        if (h) {
            t->live--;
            t->bytes -= h[0];
            free(h);
        }
    } else if (t->fail_at && ++t->calls == t->fail_at) {
        t->failed = true;
    } else {
        if (!t->fail_at)
            t->calls++;
        size_t old = h ? h[0] : 0;
        size_t *nh = realloc(h, size + 2 * sizeof(size_t));
        if (nh) {
            if (!h)
                t->live++;
            t->bytes = t->bytes - old + size;
            if (t->bytes > t->peak)
                t->peak = t->bytes;
            nh[0] = size;
            res = nh + 2;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return res;
}

static void tally_reset_peak(void)
{
    pthread_mutex_lock(&g_tally.mu);
    g_tally.peak = g_tally.bytes;
    pthread_mutex_unlock(&g_tally.mu);
}

/* ---- files ----------------------------------------------------------------------------------- */

static char g_tmp[4096];

static void path_of(char *dst, size_t n, const char *sub, const char *name)
{
    snprintf(dst, n, "%s/%s/%s", g_tmp, sub, name);
}

static void make_dir(const char *sub)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_tmp, sub);
    if (mkdir(p, 0700) != 0)
        perror(p);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0)
        perror(path);
}

static void write_gz(const char *path, const void *data, size_t n)
{
    gzFile f = gzopen(path, "wb");
    if (!f || (n && gzwrite(f, data, (unsigned)n) != (int)n) || gzclose(f) != Z_OK)
        fprintf(stderr, "cannot write %s\n", path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static bool has(const ptc_error *e, const char *text)
{
    bool ok = strstr(e->message, text) != NULL;
    if (!ok)
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", e->message, text);
    return ok;
}

/* ---- 1. CIFAR-10 ----------------------------------------------------------------------------- */

static uint8_t cifar_pix(int file, int rec, int c, int y, int x)
{
    return (uint8_t)(file * 31 + rec * 7 + c * 50 + y * 3 + x * 5 + (y * x) % 13);
}

static uint8_t cifar_label(int file, int rec)
{
    return (uint8_t)((file * 3 + rec) % 10);
}

/* A CIFAR-10 file of nrec records (file number file, for the patterns); returns malloc'd bytes. */
static uint8_t *cifar_bytes(int file, int nrec, size_t *len)
{
    *len = (size_t)nrec * PTC__CIFAR_RECORD;
    uint8_t *b = malloc(*len ? *len : 1);
    for (int r = 0; r < nrec; r++) {
        uint8_t *rec = b + (size_t)r * PTC__CIFAR_RECORD;
        rec[0] = cifar_label(file, r);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    rec[1 + c * 1024 + y * 32 + x] = cifar_pix(file, r, c, y, x);
    }
    return b;
}

static void write_cifar(const char *sub, const char *name, int file, int nrec)
{
    char p[4300];
    size_t len;
    uint8_t *b = cifar_bytes(file, nrec, &len);
    path_of(p, sizeof p, sub, name);
    write_file(p, b, len);
    free(b);
}

/* Statistics the slow way: two passes in double. */
static void slow_stats(const ptc__split *s, double mean[3], double std[3])
{
    for (int c = 0; c < 3; c++) {
        double sum = 0, n = 0;
        for (int64_t i = 0; i < s->n; i++)
            for (int k = 0; k < 1024; k++) {
                sum += s->images[i * 3072 + c * 1024 + k] / 255.0;
                n++;
            }
        mean[c] = sum / n;
        double ss = 0;
        for (int64_t i = 0; i < s->n; i++)
            for (int k = 0; k < 1024; k++) {
                double d = s->images[i * 3072 + c * 1024 + k] / 255.0 - mean[c];
                ss += d * d;
            }
        std[c] = sqrt(ss / n);
    }
}

static void test_cifar_ok(void)
{
    make_dir("cifar");
    write_cifar("cifar", "data_batch_1.bin", 1, 3);
    write_cifar("cifar", "data_batch_3.bin", 3, 2); /* 2, 4 and 5 absent: those present are used */
    write_cifar("cifar", "test_batch.bin", 9, 4);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cifar", g_tmp);
    ptc__data_params p = ptc__data_params_default();
    p.format = PTC__DATA_CIFAR10;
    p.dir = dir;
    ptc__dataset *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc__dataset_new(&d, &p, &err), 0, &err);
    if (!d)
        return;
    CHECK_INT(d->train.n, 5);
    CHECK_INT(d->test.n, 4);
    static const int file_of[5] = {1, 1, 1, 3, 3}, rec_of[5] = {0, 1, 2, 0, 1};
    int bad = 0;
    for (int i = 0; i < 5; i++) {
        bad += d->train.labels[i] != cifar_label(file_of[i], rec_of[i]);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    bad += d->train.images[i * 3072 + c * 1024 + y * 32 + x] !=
                           cifar_pix(file_of[i], rec_of[i], c, y, x);
    }
    for (int i = 0; i < 4; i++) {
        bad += d->test.labels[i] != cifar_label(9, i);
        for (int k = 0; k < 3072; k++)
            bad += d->test.images[i * 3072 + k] != cifar_pix(9, i, k / 1024, k / 32 % 32, k % 32);
    }
    CHECK_INT(bad, 0);
    double m[3], s[3];
    slow_stats(&d->train, m, s);
    static const double tm[3] = PTC__CIFAR10_MEAN, ts[3] = PTC__CIFAR10_STD;
    for (int c = 0; c < 3; c++) {
        CHECK(fabs(d->mean[c] - m[c]) < 1e-12);
        CHECK(fabs(d->std[c] - s[c]) < 1e-12);
        CHECK(d->norm_mean[c] == tm[c] && d->norm_std[c] == ts[c]);
    }
    ptc__dataset_free(d);
}

static int cifar_open(const char *sub, ptc_error *err)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, sub);
    ptc__data_params p = ptc__data_params_default();
    p.format = PTC__DATA_CIFAR10;
    p.dir = dir;
    ptc__dataset *d = (ptc__dataset *)&p; /* must be reset to NULL on failure */
    int rc = ptc__dataset_new(&d, &p, err);
    if (rc < 0)
        CHECK(d == NULL);
    ptc__dataset_free(d);
    return rc;
}

static void test_cifar_bad(void)
{
    ptc_error err;
    char p[4300];

    /* Wrong size: 2 records and 5 bytes; the incomplete record starts at 6146 = 0x1802. */
    make_dir("c_size");
    size_t len;
    uint8_t *b = cifar_bytes(1, 3, &len);
    path_of(p, sizeof p, "c_size", "data_batch_1.bin");
    write_file(p, b, 2 * PTC__CIFAR_RECORD + 5);
    write_cifar("c_size", "test_batch.bin", 9, 1);
    CHECK_CODE(cifar_open("c_size", &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "data_batch_1.bin+0x1802: "));
    CHECK(has(&err, "not a multiple"));
    CHECK_INT(err.offset, 0x1802);

    /* Empty file. */
    make_dir("c_empty");
    path_of(p, sizeof p, "c_empty", "data_batch_2.bin");
    write_file(p, b, 0);
    write_cifar("c_empty", "test_batch.bin", 9, 1);
    CHECK_CODE(cifar_open("c_empty", &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "data_batch_2.bin+0x0: empty"));

    /* Label 10 in record 1 of test_batch.bin: offset 3073 = 0xc01. */
    make_dir("c_label");
    write_cifar("c_label", "data_batch_1.bin", 1, 1);
    b[PTC__CIFAR_RECORD] = 10;
    path_of(p, sizeof p, "c_label", "test_batch.bin");
    write_file(p, b, len);
    CHECK_CODE(cifar_open("c_label", &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "test_batch.bin+0xc01: record 1: label 10"));
    b[PTC__CIFAR_RECORD] = 255;
    write_file(p, b, len);
    CHECK_CODE(cifar_open("c_label", &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "label 255"));
    free(b);

    /* Missing test_batch.bin; no train file at all. */
    make_dir("c_notest");
    write_cifar("c_notest", "data_batch_5.bin", 5, 2);
    CHECK_CODE(cifar_open("c_notest", &err), PTC_ENOTFOUND, &err);
    CHECK(has(&err, "test_batch.bin: cannot open"));
    make_dir("c_notrain");
    write_cifar("c_notrain", "test_batch.bin", 9, 2);
    CHECK_CODE(cifar_open("c_notrain", &err), PTC_ENOTFOUND, &err);
    CHECK(has(&err, "data_batch_1.bin .. data_batch_5.bin"));
    CHECK_CODE(cifar_open("no_such_dir", &err), PTC_ENOTFOUND, &err);

    /* A directory where a file should be. */
    make_dir("c_dir");
    make_dir("c_dir/data_batch_1.bin");
    write_cifar("c_dir", "test_batch.bin", 9, 2);
    CHECK_CODE(cifar_open("c_dir", &err), PTC_EIO, &err);
    CHECK(has(&err, "data_batch_1.bin: not a regular file"));

    /* The sample limit, over several files. */
    const char *paths[2];
    char p1[4300], p2[4300];
    path_of(p1, sizeof p1, "cifar", "data_batch_1.bin");
    path_of(p2, sizeof p2, "cifar", "data_batch_3.bin");
    paths[0] = p1;
    paths[1] = p2;
    ptc__split s;
    CHECK_CODE(ptc__cifar10_read(&s, paths, 2, 4, &err), PTC_ELIMIT, &err);
    CHECK(has(&err, "data_batch_3.bin"));
    CHECK(s.images == NULL && s.n == 0);
    CHECK_CODE(ptc__cifar10_read(&s, paths, 2, 5, &err), 0, &err);
    CHECK_INT(s.n, 5);
    ptc__split_free(&s);
    CHECK_CODE(ptc__cifar10_read(&s, paths, 0, 5, &err), PTC_EINVAL, &err);

    /* Long paths keep their file name in the message. */
    char deep[4300];
    int n = snprintf(deep, sizeof deep, "%s/", g_tmp);
    for (int i = 0; i < 30; i++)
        n += snprintf(deep + n, sizeof deep - (size_t)n, "long_directory_name_%02d/", i);
    snprintf(deep + n, sizeof deep - (size_t)n, "data_batch_1.bin");
    paths[0] = deep;
    CHECK_CODE(ptc__cifar10_read(&s, paths, 1, 5, &err), PTC_ENOTFOUND, &err);
    CHECK(has(&err, "long_directory_name_29/data_batch_1.bin: cannot open"));
    CHECK(strncmp(err.message, "...", 3) == 0);
}

/* ---- 2. IDX ---------------------------------------------------------------------------------- */

static uint8_t idx_pix(int i, int y, int x)
{
    return (uint8_t)(i * 37 + y * 11 + x * 3 + 1);
}
static uint8_t idx_label(int i)
{
    return (uint8_t)((i * 3 + 1) % 10);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An images file declaring n images of rows x cols, holding `present` of them; malloc'd. */
static uint8_t *idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, int present,
                           size_t *len)
{
    size_t per = (size_t)rows * cols;
    *len = 16 + per * (size_t)present;
    uint8_t *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    for (int i = 0; i < present; i++)
        for (uint32_t y = 0; y < rows; y++)
            for (uint32_t x = 0; x < cols; x++)
                b[16 + (size_t)i * per + y * cols + x] = idx_pix(i, (int)y, (int)x);
    return b;
}

static uint8_t *idx_labels(uint32_t magic, uint32_t n, int present, size_t *len)
{
    *len = 8 + (size_t)present;
    uint8_t *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    for (int i = 0; i < present; i++)
        b[8 + i] = idx_label(i);
    return b;
}

/* Writes the four files of a split pair (train n1, test n2) into sub, plain or .gz. */
static void write_idx_dir(const char *sub, int n1, int n2, bool gz)
{
    make_dir(sub);
    static const char *const names[2][2] = {
        {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"},
        {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
    };
    int ns[2] = {n1, n2};
    for (int s = 0; s < 2; s++) {
        size_t li, ll;
        uint8_t *im = idx_images(0x803, (uint32_t)ns[s], 28, 28, ns[s], &li);
        uint8_t *lb = idx_labels(0x801, (uint32_t)ns[s], ns[s], &ll);
        char p[4300], name[64];
        snprintf(name, sizeof name, "%s%s", names[s][0], gz ? ".gz" : "");
        path_of(p, sizeof p, sub, name);
        (gz ? write_gz : write_file)(p, im, li);
        snprintf(name, sizeof name, "%s%s", names[s][1], gz ? ".gz" : "");
        path_of(p, sizeof p, sub, name);
        (gz ? write_gz : write_file)(p, lb, ll);
        free(im);
        free(lb);
    }
}

/* Every presented pixel of split s against the 28x28 pattern: padding zero, channels equal. */
static int idx_mismatches(const ptc__split *s)
{
    int bad = 0;
    for (int64_t i = 0; i < s->n; i++) {
        bad += s->labels[i] != idx_label((int)i);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) {
                    uint8_t want =
                        (y >= 2 && y < 30 && x >= 2 && x < 30) ? idx_pix((int)i, y - 2, x - 2) : 0;
                    bad += s->images[i * 3072 + c * 1024 + y * 32 + x] != want;
                }
    }
    return bad;
}

static void test_idx_ok(void)
{
    static const char *const subs[3] = {"idx_plain", "idx_gz", "idx_both"};
    write_idx_dir("idx_plain", 5, 3, false);
    write_idx_dir("idx_gz", 5, 3, true);
    /* Both names present: the plain files are used (the .gz ones here are garbage). */
    write_idx_dir("idx_both", 5, 3, false);
    char p[4300];
    path_of(p, sizeof p, "idx_both", "train-images-idx3-ubyte.gz");
    write_file(p, "garbage", 7);
    for (int k = 0; k < 3; k++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, subs[k]);
        ptc__data_params prm = ptc__data_params_default();
        prm.dir = dir;
        ptc__dataset *d = NULL;
        ptc_error err;
        CHECK_CODE(ptc__dataset_new(&d, &prm, &err), 0, &err);
        if (!d)
            continue;
        CHECK_INT(d->train.n, 5);
        CHECK_INT(d->test.n, 3);
        CHECK_INT(idx_mismatches(&d->train), 0);
        CHECK_INT(idx_mismatches(&d->test), 0);
        double m[3], s[3];
        slow_stats(&d->train, m, s);
        for (int c = 0; c < 3; c++) {
            CHECK(fabs(d->mean[c] - m[c]) < 1e-12 && fabs(d->std[c] - s[c]) < 1e-12);
            CHECK(d->norm_mean[c] == d->mean[c] && d->norm_std[c] == d->std[c]);
            CHECK(d->mean[c] == d->mean[0] && d->std[c] == d->std[0]);
        }
        ptc__dataset_free(d);
    }
}

/* Writes images/labels files (gz or not) into sub and reads them with ptc__idx_read. */
static int idx_try(const char *sub, const uint8_t *im, size_t li, const uint8_t *lb, size_t ll,
                   bool gz, int64_t max_samples, ptc_error *err)
{
    char pi[4300], pl[4300];
    make_dir(sub);
    path_of(pi, sizeof pi, sub, gz ? "images.gz" : "images");
    path_of(pl, sizeof pl, sub, gz ? "labels.gz" : "labels");
    (gz ? write_gz : write_file)(pi, im, li);
    (gz ? write_gz : write_file)(pl, lb, ll);
    ptc__split s;
    int rc = ptc__idx_read(&s, pi, pl, max_samples, err);
    if (rc == 0) {
        CHECK_INT(idx_mismatches(&s), 0);
        ptc__split_free(&s);
    } else {
        CHECK(s.n == 0 && s.images == NULL && s.labels == NULL);
    }
    return rc;
}

static void test_idx_bad(void)
{
    ptc_error err;
    size_t li, ll;
    uint8_t *lb = idx_labels(0x801, 4, 4, &ll);
    uint8_t *im;
    char sub[32];
    for (int gz = 0; gz < 2; gz++) {
        const char *ext = gz ? ".gz" : "";
        /* The good pair, then one flaw at a time. */
        im = idx_images(0x803, 4, 28, 28, 4, &li);
        snprintf(sub, sizeof sub, "ib_ok%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll, gz, 100, &err), 0, &err);
        snprintf(sub, sizeof sub, "ib_limit%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll, gz, 3, &err), PTC_ELIMIT, &err);
        CHECK(has(&err, "+0x4: 4 images exceed the limit of 3"));
        /* Swapped files: each magic is wrong. */
        snprintf(sub, sizeof sub, "ib_swap%d", gz);
        CHECK_CODE(idx_try(sub, lb, ll, im, li, gz, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "+0x0: magic 0x00000801 is not 0x00000803"));
        /* Trailing bytes after the images. */
        uint8_t *im2 = malloc(li + 3);
        memcpy(im2, im, li);
        memset(im2 + li, 0, 3);
        snprintf(sub, sizeof sub, "ib_trail%d", gz);
        CHECK_CODE(idx_try(sub, im2, li + 3, lb, ll, gz, 100, &err), PTC_EFORMAT, &err);
        char want[64];
        snprintf(want, sizeof want, "images%s+0x%zx: bytes after", ext, li);
        CHECK(has(&err, want));
        free(im2);
        /* Truncated inside image 2; truncated header. */
        snprintf(sub, sizeof sub, "ib_trunc%d", gz);
        CHECK_CODE(idx_try(sub, im, li - 1000, lb, ll, gz, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "ends inside image 2"));
        snprintf(sub, sizeof sub, "ib_hdr%d", gz);
        CHECK_CODE(idx_try(sub, im, 10, lb, ll, gz, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "truncated header"));
        /* Labels: truncated, too many, label 10 at index 2 (offset 10). */
        snprintf(sub, sizeof sub, "ib_ltrunc%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll - 1, gz, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "declares 4 labels, the file holds 3"));
        lb[10] = 10;
        snprintf(sub, sizeof sub, "ib_l10%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll, gz, 100, &err), PTC_EFORMAT, &err);
        snprintf(want, sizeof want, "labels%s+0xa: label 2 is 10", ext);
        CHECK(has(&err, want));
        lb[10] = idx_label(2);
        free(im);
        /* Counts differ; zero images; 27x28. */
        im = idx_images(0x803, 5, 28, 28, 5, &li);
        snprintf(sub, sizeof sub, "ib_count%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll, gz, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "4 labels, but"));
        free(im);
        im = idx_images(0x803, 0, 28, 28, 0, &li);
        snprintf(sub, sizeof sub, "ib_zero%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll, gz, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "declares no images"));
        free(im);
        im = idx_images(0x803, 4, 27, 28, 4, &li);
        snprintf(sub, sizeof sub, "ib_27_%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb, ll, gz, 100, &err), PTC_EUNSUPPORTED, &err);
        CHECK(has(&err, "images are 27x28"));
        free(im);
        /* A header that lies: 4,000,000 images (and labels) declared, 2 present. */
        im = idx_images(0x803, 4000000, 28, 28, 2, &li);
        uint8_t *lb2 = idx_labels(0x801, 4000000, 2, &ll);
        tally_reset_peak();
        size_t base = g_tally.bytes;
        snprintf(sub, sizeof sub, "ib_lie%d", gz);
        if (gz) { /* refused from the header: 3 GB cannot come out of a file of a few hundred */
            CHECK_CODE(idx_try(sub, im, li, lb2, ll, gz, PTC__DATA_MAX_SAMPLES, &err), PTC_ELIMIT,
                       &err);
            CHECK(has(&err, "images.gz+0x4: the header declares 4000000 images (3136000016 "
                            "bytes), more than 100 times the "));
        } else { /* refused from the file's size, before reading */
            CHECK_CODE(idx_try(sub, im, li, lb2, ll, gz, PTC__DATA_MAX_SAMPLES, &err), PTC_EFORMAT,
                       &err);
            CHECK(has(&err, "declares 4000000 images, the file ends inside image 2"));
            snprintf(want, sizeof want, "images+0x%zx: truncated", li);
            CHECK(has(&err, want));
        }
        CHECK(g_tally.peak - base < ((size_t)8 << 20));
        if (g_tally.peak - base >= ((size_t)8 << 20))
            fprintf(stderr, "  peak allocation %zu bytes\n", g_tally.peak - base);
        /* The largest count a header can declare. */
        put_be32(im + 4, 0xffffffffu);
        put_be32(lb2 + 4, 0xffffffffu);
        snprintf(sub, sizeof sub, "ib_huge%d", gz);
        CHECK_CODE(idx_try(sub, im, li, lb2, ll, gz, PTC__DATA_MAX_SAMPLES, &err), PTC_ELIMIT,
                   &err);
        free(im);
        free(lb2);
        ll = 8 + 4;
    }
    free(lb);

    /* gzip damage: a flipped byte in the deflate data, a cut stream, a bomb of trailing zeros. */
    im = idx_images(0x803, 4, 28, 28, 4, &li);
    lb = idx_labels(0x801, 4, 4, &ll);
    char pi[4300], pl[4300];
    make_dir("gzbad");
    path_of(pi, sizeof pi, "gzbad", "images.gz");
    path_of(pl, sizeof pl, "gzbad", "labels.gz");
    write_gz(pl, lb, ll);
    uLongf zcap = compressBound(li) + 64;
    uint8_t *z = malloc(zcap);
    /* A gzip file by hand: header, raw deflate, CRC-32 and length. */
    static const uint8_t gzhdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
    memcpy(z, gzhdr, 10);
    zs.next_in = im;
    zs.avail_in = (uInt)li;
    zs.next_out = z + 10;
    zs.avail_out = (uInt)(zcap - 18);
    deflate(&zs, Z_FINISH);
    size_t zlen = 10 + zs.total_out;
    deflateEnd(&zs);
    uLong crc = crc32(0, im, (uInt)li);
    uint8_t tr[8] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24),
                     (uint8_t)li,  (uint8_t)(li >> 8),  (uint8_t)(li >> 16),  (uint8_t)(li >> 24)};
    memcpy(z + zlen, tr, 8);
    zlen += 8;
    ptc__split s;
    write_file(pi, z, zlen);
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), 0, &err);
    ptc__split_free(&s);
    z[zlen - 6] ^= 0x40; /* the CRC */
    write_file(pi, z, zlen);
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "corrupt gzip data"));
    z[zlen - 6] ^= 0x40;
    write_file(pi, z, zlen - 8); /* no trailer */
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "gzip stream truncated"));
    write_file(pi, z, zlen / 2);
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
    for (size_t k = 12; k < zlen - 8; k += 97) { /* damage anywhere: never success, never a crash */
        z[k] ^= 0x5a;
        write_file(pi, z, zlen);
        int rc = ptc__idx_read(&s, pi, pl, 100, &err);
        CHECK(rc == PTC_EFORMAT || rc == PTC_EUNSUPPORTED || rc == PTC_ELIMIT);
        if (rc == 0)
            ptc__split_free(&s);
        z[k] ^= 0x5a;
    }
    free(z);
    /* 64 MiB of zeros after the declared images inflate lazily: one byte is read, then refused. */
    {
        gzFile f = gzopen(pi, "wb9");
        gzwrite(f, im, (unsigned)li);
        uint8_t *zeros = calloc(1, 1 << 20);
        for (int k = 0; k < 64; k++)
            gzwrite(f, zeros, 1 << 20);
        free(zeros);
        gzclose(f);
        CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "bytes after the images"));
    }
    /* Missing files. */
    path_of(pi, sizeof pi, "gzbad", "nothing.gz");
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_ENOTFOUND, &err);
    CHECK(has(&err, "nothing.gz: cannot open"));
    ptc__data_params prm = ptc__data_params_default();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/gzbad", g_tmp);
    prm.dir = dir;
    ptc__dataset *d = NULL;
    CHECK_CODE(ptc__dataset_new(&d, &prm, &err), PTC_ENOTFOUND, &err);
    CHECK(has(&err, "train-images-idx3-ubyte.gz: no such file"));
    free(im);
    free(lb);
}

/* ---- 2b. bounded by what is on disk --------------------------------------------------------- */

/* gzip of data (one member, level 9), malloc'd. */
static uint8_t *gz_bytes(const void *data, size_t n, size_t *len)
{
    uLongf cap = compressBound((uLong)n) + 64;
    uint8_t *z = malloc(cap);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = z;
    zs.avail_out = (uInt)cap;
    deflate(&zs, Z_FINISH);
    *len = zs.total_out;
    deflateEnd(&zs);
    return z;
}

/* 1 when the file system of g_tmp reports holes (SEEK_HOLE), else 0 with a note. */
static int holes_visible(void)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/hole_probe", g_tmp);
    FILE *f = fopen(p, "wb");
    if (!f)
        return 0;
    int ok = ftruncate(fileno(f), 1 << 24) == 0;
#ifdef SEEK_HOLE
    ok = ok && lseek(fileno(f), 0, SEEK_HOLE) == 0;
#else
    ok = 0;
#endif
    fclose(f);
    remove(p);
    if (!ok)
        printf("note: %s reports no holes (SEEK_HOLE); the sparse-file checks are skipped\n",
               g_tmp);
    return ok;
}

static void test_bounded(void)
{
    ptc_error err;
    ptc__split s;
    char pi[4300], pl[4300], want[160];
    size_t li, ll, zl, zl2;
    make_dir("bd");
    path_of(pi, sizeof pi, "bd", "images.gz");
    path_of(pl, sizeof pl, "bd", "labels.gz");

    /* A header that lies within the ratio: 30 declared, 2 present; refused when the stream ends. */
    uint8_t *im = idx_images(0x803, 30, 28, 28, 2, &li);
    uint8_t *lb = idx_labels(0x801, 30, 30, &ll);
    uint8_t *z = gz_bytes(im, li, &zl);
    CHECK(30 * 784 + 16 < 100 * zl);
    write_file(pi, z, zl);
    free(z);
    z = gz_bytes(lb, ll, &zl);
    write_file(pl, z, zl);
    free(z);
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "images.gz+0x630: truncated: the header declares 30 images, the file ends "
                    "inside image 2"));
    free(im);
    free(lb);

    /* Bytes after the gzip stream: not gzip, a lone 0x1f, zeros; each refused with its offset in
     * the compressed file. Two members are one stream. */
    im = idx_images(0x803, 4, 28, 28, 4, &li);
    lb = idx_labels(0x801, 4, 4, &ll);
    uint8_t *zi = gz_bytes(im, li, &zl);
    uint8_t *zb = gz_bytes(lb, ll, &zl2);
    write_file(pl, zb, zl2);
    static const struct {
        const char *tail;
        size_t len;
    } tails[3] = {{"not gzip\n", 9}, {"\x1f", 1}, {"\0\0\0\0", 4}};
    for (int t = 0; t < 3; t++) {
        uint8_t *b = malloc(zl + tails[t].len);
        memcpy(b, zi, zl);
        memcpy(b + zl, tails[t].tail, tails[t].len);
        write_file(pi, b, zl + tails[t].len);
        free(b);
        CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
        snprintf(want, sizeof want, "images.gz+0x%zx: %zu bytes after the gzip stream", zl,
                 tails[t].len);
        CHECK(has(&err, want));
        CHECK(has(&err, "are not a gzip member"));
        CHECK(s.images == NULL && s.n == 0);
    }
    write_file(pi, zi, zl);
    uint8_t *b = malloc(zl2 + 3);
    memcpy(b, zb, zl2);
    memcpy(b + zl2, "xyz", 3);
    write_file(pl, b, zl2 + 3);
    free(b);
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
    snprintf(want, sizeof want, "labels.gz+0x%zx: 3 bytes after the gzip stream", zl2);
    CHECK(has(&err, want));
    write_file(pl, zb, zl2);
    {
        size_t h1, h2;
        uint8_t *m1 = gz_bytes(im, 1000, &h1), *m2 = gz_bytes(im + 1000, li - 1000, &h2);
        b = malloc(h1 + h2);
        memcpy(b, m1, h1);
        memcpy(b + h1, m2, h2);
        write_file(pi, b, h1 + h2);
        CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), 0, &err);
        CHECK_INT(s.n, 4);
        CHECK_INT(idx_mismatches(&s), 0);
        ptc__split_free(&s);
        /* the second member damaged: its CRC */
        b[h1 + h2 - 6] ^= 1;
        write_file(pi, b, h1 + h2);
        CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "corrupt gzip data"));
        free(b);
        free(m1);
        free(m2);
    }
    free(zi);
    free(zb);

    /* keep: the first 2 of 4 images; without statistics the rest is never read (a damaged tail
     * goes unseen), with them the whole file is read and checked. */
    {
        ptc__read_params rp = {100, 2, NULL};
        write_file(pi, im, li - 10); /* plain, and cut short: refused from its size anyway */
        path_of(pi, sizeof pi, "bd", "images");
        path_of(pl, sizeof pl, "bd", "labels");
        write_file(pl, lb, ll);
        zi = gz_bytes(im, li, &zl);
        zi[zl - 6] ^= 1; /* the CRC, checked only at the end of the stream */
        path_of(pi, sizeof pi, "bd", "images_crc.gz");
        write_file(pi, zi, zl);
        free(zi);
        CHECK_CODE(ptc__idx_read_ex(&s, pi, pl, &rp, &err), 0, &err);
        CHECK_INT(s.n, 2);
        CHECK_INT(idx_mismatches(&s), 0);
        ptc__split_free(&s);
        uint64_t hist[3][256];
        memset(hist, 0, sizeof hist);
        rp.hist = hist;
        CHECK_CODE(ptc__idx_read_ex(&s, pi, pl, &rp, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "incorrect data check"));
        CHECK(s.images == NULL && s.n == 0);
        /* labels NULL: images only, nothing held, the histogram filled */
        memset(hist, 0, sizeof hist);
        rp.keep = 0;
        path_of(pi, sizeof pi, "bd", "images4");
        write_file(pi, im, li);
        CHECK_CODE(ptc__idx_read_ex(&s, pi, NULL, &rp, &err), 0, &err);
        CHECK(s.n == 0 && s.images == NULL && s.labels == NULL);
        uint64_t total = 0;
        for (int v = 0; v < 256; v++)
            total += hist[1][v];
        CHECK_INT((int64_t)total, 4 * 1024);
        /* images only, some kept (ptc_image_record reads one record so): no labels */
        rp.keep = 1;
        CHECK_CODE(ptc__idx_read_ex(&s, pi, NULL, &rp, &err), 0, &err);
        CHECK(s.n == 1 && s.images != NULL && s.labels == NULL);
        ptc__split_free(&s);
    }
    free(im);
    free(lb);

    /* A plain file longer than its header declares: refused from its size, at the first byte
     * after the declared images. */
    im = idx_images(0x803, 4, 28, 28, 5, &li);
    lb = idx_labels(0x801, 4, 4, &ll);
    path_of(pi, sizeof pi, "bd", "images5");
    write_file(pi, im, li);
    write_file(pl, lb, ll);
    CHECK_CODE(ptc__idx_read(&s, pi, pl, 100, &err), PTC_EFORMAT, &err);
    CHECK(has(&err, "images5+0xc50: bytes after the images the header declares (3152 bytes, "
                    "the file holds 3936)"));
    free(im);
    free(lb);

    /* Sparse files: refused at open, before anything large is allocated. */
    if (holes_visible()) {
        make_dir("c_sparse");
        write_cifar("c_sparse", "test_batch.bin", 9, 2);
        char p[4300];
        path_of(p, sizeof p, "c_sparse", "data_batch_1.bin");
        FILE *f = fopen(p, "wb");
        CHECK(f && ftruncate(fileno(f), (off_t)PTC__CIFAR_RECORD << 20) == 0);
        if (f)
            fclose(f);
        tally_reset_peak();
        size_t base = g_tally.bytes;
        CHECK_CODE(cifar_open("c_sparse", &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "data_batch_1.bin+0x0: a hole at this offset: the file of 3222274048 "
                        "bytes is sparse"));
        CHECK(g_tally.peak - base < ((size_t)1 << 20));
        /* test_only (ptc eval) never opens the train files of CIFAR-10 */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/c_sparse", g_tmp);
        ptc__data_params prm = {.format = PTC__DATA_CIFAR10, .dir = dir, .test_only = true};
        ptc__dataset *d = NULL;
        CHECK_CODE(ptc__dataset_new(&d, &prm, &err), 0, &err);
        if (d) {
            CHECK(d->train.n == 0 && d->train.images == NULL && d->test.n == 2);
            static const double tm[3] = PTC__CIFAR10_MEAN;
            CHECK(d->norm_mean[0] == tm[0] && d->mean[0] == 0);
        }
        ptc__dataset_free(d);
        /* ... but the test file it does read: a hole at its end */
        write_cifar("c_sparse", "test_batch.bin", 9, 2);
        path_of(p, sizeof p, "c_sparse", "test_batch.bin");
        f = fopen(p, "r+b");
        CHECK(f && ftruncate(fileno(f), (off_t)PTC__CIFAR_RECORD * 4096) == 0);
        if (f)
            fclose(f);
        CHECK_CODE(ptc__dataset_new(&d, &prm, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "test_batch.bin+0x"));
        CHECK(has(&err, "sparse data files are refused"));
        /* an IDX images file with a hole after its header */
        im = idx_images(0x803, 100000, 28, 28, 0, &li);
        path_of(pi, sizeof pi, "bd", "images_sparse");
        write_file(pi, im, li);
        f = fopen(pi, "r+b");
        CHECK(f && ftruncate(fileno(f), 16 + 100000 * 784) == 0);
        if (f)
            fclose(f);
        lb = idx_labels(0x801, 100000, 100000, &ll);
        for (size_t k = 8; k < ll; k++)
            lb[k] = 0;
        write_file(pl, lb, ll);
        CHECK_CODE(ptc__idx_read(&s, pi, pl, PTC__DATA_MAX_SAMPLES, &err), PTC_EFORMAT, &err);
        CHECK(has(&err, "images_sparse+0x"));
        CHECK(has(&err, "a hole at this offset"));
        free(im);
        free(lb);
    }

    /* keep on a dataset: the prefix is held, the statistics stay bit-identical to those of the
     * whole train split (computed the way they were before keep existed: ptc__split_stats over
     * the held split), for CIFAR-10 and IDX (plain and gz), also with test_only for IDX. */
    static const char *const subs[3] = {"cifar", "idx_plain", "idx_gz"};
    for (int k = 0; k < 3; k++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, subs[k]);
        ptc__data_params prm = ptc__data_params_default();
        prm.format = k == 0 ? PTC__DATA_CIFAR10 : PTC__DATA_IDX;
        prm.dir = dir;
        ptc__dataset *full = NULL, *part = NULL, *ev = NULL;
        CHECK_CODE(ptc__dataset_new(&full, &prm, &err), 0, &err);
        prm.keep = 2;
        CHECK_CODE(ptc__dataset_new(&part, &prm, &err), 0, &err);
        prm.test_only = true;
        CHECK_CODE(ptc__dataset_new(&ev, &prm, &err), 0, &err);
        if (full && part && ev) {
            double m[3], sd[3];
            ptc__split_stats(&full->train, m, sd);
            CHECK_INT(part->train.n, 2);
            CHECK_INT(part->test.n, 2);
            CHECK_INT(ev->train.n, 0);
            CHECK_INT(ev->test.n, 2);
            CHECK(memcmp(part->train.images, full->train.images, 2 * 3072) == 0);
            CHECK(memcmp(part->train.labels, full->train.labels, 2) == 0);
            CHECK(memcmp(part->test.images, full->test.images, 2 * 3072) == 0);
            CHECK(memcmp(ev->test.images, full->test.images, 2 * 3072) == 0);
            for (int c = 0; c < 3; c++) {
                CHECK(full->mean[c] == m[c] && full->std[c] == sd[c]);
                CHECK(part->mean[c] == m[c] && part->std[c] == sd[c]);
                CHECK(part->norm_mean[c] == full->norm_mean[c] &&
                      part->norm_std[c] == full->norm_std[c]);
                CHECK(ev->norm_mean[c] == full->norm_mean[c] &&
                      ev->norm_std[c] == full->norm_std[c]);
                if (k > 0)
                    CHECK(ev->mean[c] == m[c] && ev->std[c] == sd[c]);
            }
        }
        ptc__dataset_free(full);
        ptc__dataset_free(part);
        ptc__dataset_free(ev);
    }

    /* A generated .gz of 20,000 images: keep 64 holds 64 (a few MiB at most, where the whole
     * split is 61 MB presented) with the statistics of the 20,000. Its periodic labels compress
     * 220:1, within the 1 MiB every .gz may inflate to whatever its ratio. */
    {
        make_dir("idx_big");
        const int N = 20000;
        size_t len = 16 + (size_t)N * 784;
        uint8_t *big = malloc(len);
        put_be32(big, 0x803);
        put_be32(big + 4, (uint32_t)N);
        put_be32(big + 8, 28);
        put_be32(big + 12, 28);
        uint64_t r = 88172645463325252ull;
        for (size_t q = 16; q < len; q++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            big[q] = (uint8_t)(r >> 56 & (r & 0x300 ? 0xff : 0x0f));
        }
        uint8_t *lab = idx_labels(0x801, (uint32_t)N, N, &ll);
        char p[4300];
        static const char *const names[4] = {
            "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
            "t10k-labels-idx1-ubyte.gz"};
        for (int q = 0; q < 4; q++) {
            path_of(p, sizeof p, "idx_big", names[q]);
            z = q % 2 ? gz_bytes(lab, ll, &zl) : gz_bytes(big, len, &zl);
            write_file(p, z, zl);
            free(z);
        }
        free(big);
        free(lab);
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/idx_big", g_tmp);
        ptc__data_params prm = ptc__data_params_default();
        prm.dir = dir;
        prm.keep = 64;
        ptc__dataset *part = NULL, *full = NULL;
        tally_reset_peak();
        size_t base = g_tally.bytes;
        CHECK_CODE(ptc__dataset_new(&part, &prm, &err), 0, &err);
        size_t peak = g_tally.peak - base;
        CHECK(peak < ((size_t)4 << 20));
        if (peak >= ((size_t)4 << 20))
            fprintf(stderr, "  keep 64: peak allocation %zu bytes\n", peak);
        prm.keep = 0;
        CHECK_CODE(ptc__dataset_new(&full, &prm, &err), 0, &err);
        if (part && full) {
            double m[3], sd[3];
            ptc__split_stats(&full->train, m, sd);
            CHECK_INT(part->train.n, 64);
            CHECK_INT(full->train.n, N);
            for (int c = 0; c < 3; c++)
                CHECK(part->mean[c] == m[c] && part->std[c] == sd[c] && full->mean[c] == m[c] &&
                      full->std[c] == sd[c]);
            CHECK(memcmp(part->train.images, full->train.images, 64 * 3072) == 0);
        }
        ptc__dataset_free(part);
        ptc__dataset_free(full);
    }
}

/* ---- 3. the real Fashion-MNIST ------------------------------------------------------------- */

static void test_fashion_mnist(void)
{
    struct stat st;
    if (stat(PTC__FASHION_MNIST_DIR, &st) != 0) {
        printf("note: %s is absent; the real Fashion-MNIST is not checked\n",
               PTC__FASHION_MNIST_DIR);
        return;
    }
    ptc__dataset *d = NULL;
    ptc_error err;
    CHECK_CODE(ptc__dataset_new(&d, NULL, &err), 0, &err);
    if (!d)
        return;
    CHECK_INT(d->train.n, 60000);
    CHECK_INT(d->test.n, 10000);
    int64_t hist[2][10] = {{0}};
    const ptc__split *sp[2] = {&d->train, &d->test};
    int bad = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < sp[s]->n; i++) {
            bad += sp[s]->labels[i] >= 10;
            hist[s][sp[s]->labels[i] % 10]++;
            const uint8_t *img = sp[s]->images + i * 3072;
            for (int k = 0; k < 1024; k++) /* the three channels are equal */
                bad += img[k] != img[1024 + k] || img[k] != img[2048 + k];
            for (int k = 0; k < 32; k++) /* the border rows and columns are padding */
                bad += img[k] | img[32 + k] | img[30 * 32 + k] | img[31 * 32 + k] | img[k * 32] |
                       img[k * 32 + 1] | img[k * 32 + 30] | img[k * 32 + 31];
        }
    CHECK_INT(bad, 0);
    for (int c = 0; c < 10; c++) {
        CHECK_INT(hist[0][c], 6000);
        CHECK_INT(hist[1][c], 1000);
    }
    printf("Fashion-MNIST (3x32x32, padded): train 60000, test 10000; mean %.6f %.6f %.6f, "
           "std %.6f %.6f %.6f\n",
           d->mean[0], d->mean[1], d->mean[2], d->std[0], d->std[1], d->std[2]);
    /* The 28x28 statistics are well known (0.2860, 0.3530); padding to 32x32 scales the mean by
     * 784/1024 and changes the std accordingly. */
    double m28 = d->mean[0] * 1024.0 / 784.0;
    double ex2 = (d->std[0] * d->std[0] + d->mean[0] * d->mean[0]) * 1024.0 / 784.0;
    double s28 = sqrt(ex2 - m28 * m28);
    printf("  the same over the 28x28 pixels: mean %.4f, std %.4f\n", m28, s28);
    CHECK(fabs(m28 - 0.2860) < 5e-4 && fabs(s28 - 0.3530) < 5e-4);
    /* The bits: those of the statistics computed over the whole held split (ptc__split_stats, the
     * computation before the statistics were streamed; the constants were computed the same way
     * in Python from the file), and the same with keep (--max-samples 64) and test_only (ptc
     * eval), which hold 64 and no train images. */
    static const double fm_mean = 0x1.c082fbe48ba99p-3, fm_std = 0x1.53c65c4de718fp-2;
    double m[3], s[3];
    ptc__split_stats(&d->train, m, s);
    ptc__data_params prm = ptc__data_params_default();
    prm.keep = 64;
    ptc__dataset *part = NULL, *ev = NULL;
    tally_reset_peak();
    size_t base = g_tally.bytes;
    CHECK_CODE(ptc__dataset_new(&part, &prm, &err), 0, &err);
    size_t peak = g_tally.peak - base;
    printf("  keep 64: peak allocation %zu bytes\n", peak);
    CHECK(peak < ((size_t)4 << 20));
    prm.test_only = true;
    CHECK_CODE(ptc__dataset_new(&ev, &prm, &err), 0, &err);
    for (int c = 0; c < 3; c++) {
        CHECK(m[c] == fm_mean && s[c] == fm_std);
        CHECK(d->mean[c] == fm_mean && d->std[c] == fm_std);
        CHECK(d->norm_mean[c] == fm_mean && d->norm_std[c] == fm_std);
        CHECK(part && part->norm_mean[c] == fm_mean && part->norm_std[c] == fm_std);
        CHECK(ev && ev->norm_mean[c] == fm_mean && ev->norm_std[c] == fm_std);
    }
    if (part && ev) {
        CHECK_INT(part->train.n, 64);
        CHECK_INT(part->test.n, 64);
        CHECK_INT(ev->train.n, 0);
        CHECK_INT(ev->test.n, 64);
        CHECK(memcmp(part->train.images, d->train.images, 64 * 3072) == 0);
        CHECK(memcmp(ev->test.labels, d->test.labels, 64) == 0);
    }
    ptc__dataset_free(part);
    ptc__dataset_free(ev);
    ptc__dataset_free(d);
}

/* ---- 4. the sampler -------------------------------------------------------------------------- */

static void check_list(const int64_t *got, int64_t ngot, const int64_t *want, int64_t nwant,
                       const char *what)
{
    bool ok = ngot == nwant;
    for (int64_t i = 0; ok && i < ngot; i++)
        ok = got[i] == want[i];
    check_count++;
    if (!ok) {
        check_failures++;
        fprintf(stderr, "%s: got [", what);
        for (int64_t i = 0; i < ngot; i++)
            fprintf(stderr, "%s%lld", i ? " " : "", (long long)got[i]);
        fprintf(stderr, "], want [");
        for (int64_t i = 0; i < nwant; i++)
            fprintf(stderr, "%s%lld", i ? " " : "", (long long)want[i]);
        fprintf(stderr, "]\n");
    }
}

static void test_sampler_fixed(void)
{
    /* Hand-computed DistributedSampler(shuffle=False) outputs: n, world, drop_last, then each
     * rank's list (-1 ends a list). */
    static const struct {
        int n, world, drop;
        int64_t lists[8][5];
    } cases[] = {
        {10, 3, 0, {{0, 3, 6, 9, -1}, {1, 4, 7, 0, -1}, {2, 5, 8, 1, -1}}},
        {10, 3, 1, {{0, 3, 6, -1}, {1, 4, 7, -1}, {2, 5, 8, -1}}},
        {7, 2, 0, {{0, 2, 4, 6, -1}, {1, 3, 5, 0, -1}}},
        {7, 2, 1, {{0, 2, 4, -1}, {1, 3, 5, -1}}},
        {12, 4, 0, {{0, 4, 8, -1}, {1, 5, 9, -1}, {2, 6, 10, -1}, {3, 7, 11, -1}}},
        {12, 4, 1, {{0, 4, 8, -1}, {1, 5, 9, -1}, {2, 6, 10, -1}, {3, 7, 11, -1}}},
        /* n < world: padding longer than the list repeats it whole ([0,1,2,0,1,2,0,1]). */
        {3, 8, 0, {{0, -1}, {1, -1}, {2, -1}, {0, -1}, {1, -1}, {2, -1}, {0, -1}, {1, -1}}},
        {3, 8, 1, {{-1}, {-1}, {-1}, {-1}, {-1}, {-1}, {-1}, {-1}}},
        {2, 5, 0, {{0, -1}, {1, -1}, {0, -1}, {1, -1}, {0, -1}}},
        {1, 4, 0, {{0, -1}, {0, -1}, {0, -1}, {0, -1}}},
        {0, 3, 0, {{-1}, {-1}, {-1}}},
        {5, 1, 0, {{0, 1, 2, 3, 4}}},
        {9, 4, 0, {{0, 4, 8, -1}, {1, 5, 0, -1}, {2, 6, 1, -1}, {3, 7, 2, -1}}},
        {9, 4, 1, {{0, 4, -1}, {1, 5, -1}, {2, 6, -1}, {3, 7, -1}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int r = 0; r < cases[c].world; r++) {
            int64_t nwant = 0;
            while (nwant < 5 && cases[c].lists[r][nwant] >= 0)
                nwant++;
            ptc__sampler_params p = {
                .n = cases[c].n, .world = cases[c].world, .rank = r, .drop_last = cases[c].drop};
            int64_t *got = NULL, ngot = -1;
            ptc_error err;
            CHECK_CODE(ptc__sampler_indices(&p, 7, &got, &ngot, &err), 0, &err);
            char what[96];
            snprintf(what, sizeof what, "n=%d world=%d rank=%d drop_last=%d", cases[c].n,
                     cases[c].world, r, cases[c].drop);
            check_list(got, ngot, cases[c].lists[r], nwant, what);
            CHECK_INT(ptc__sampler_count(cases[c].n, cases[c].world, cases[c].drop), nwant);
            ptc__free(got);
        }
    ptc_error err;
    int64_t *got = NULL, ngot;
    ptc__sampler_params bad[] = {{.n = 5, .world = 2, .rank = 2},
                                 {.n = 5, .world = 0},
                                 {.n = -1, .world = 1},
                                 {.n = 5, .world = 2, .rank = -1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_CODE(ptc__sampler_indices(&bad[i], 0, &got, &ngot, &err), PTC_EINVAL, &err);
        CHECK(got == NULL);
    }
    CHECK_INT(ptc__sampler_count(5, 0, false), -1);
}

static void test_sampler_shuffle(void)
{
    ptc_error err;
    static const int64_t ns[] = {1, 2, 10, 97, 1000};
    static const int worlds[] = {1, 2, 3, 8};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof worlds / sizeof *worlds; b++)
            for (int drop = 0; drop < 2; drop++) {
                int64_t n = ns[a];
                int world = worlds[b];
                int64_t num = ptc__sampler_count(n, world, drop);
                /* Interleaving the ranks' lists gives the padded (or truncated) permutation. */
                int64_t *merged = calloc((size_t)(num * world + 1), sizeof(int64_t));
                int64_t *perm = calloc((size_t)n, sizeof(int64_t));
                bool ok = true;
                for (int r = 0; r < world; r++) {
                    ptc__sampler_params p = {.n = n,
                                             .world = world,
                                             .rank = r,
                                             .shuffle = true,
                                             .drop_last = drop,
                                             .seed = 42};
                    int64_t *got = NULL, ngot = 0, *again = NULL, nagain = 0;
                    ok &= ptc__sampler_indices(&p, 3, &got, &ngot, &err) == 0 && ngot == num;
                    ok &= ptc__sampler_indices(&p, 3, &again, &nagain, &err) == 0 &&
                          nagain == ngot && memcmp(got, again, (size_t)ngot * 8) == 0;
                    for (int64_t k = 0; ok && k < num; k++)
                        merged[r + k * world] = got[k];
                    ptc__free(got);
                    ptc__free(again);
                }
                /* The first min(n, total) entries are a permutation's prefix: distinct, < n;
                 * entry i >= n repeats entry i - n. */
                int64_t total = num * world;
                for (int64_t i = 0; ok && i < total; i++) {
                    ok &= merged[i] >= 0 && merged[i] < n;
                    if (ok && i < n)
                        ok &= perm[merged[i]]++ == 0;
                    else if (ok)
                        ok &= merged[i] == merged[i - n];
                }
                if (!ok)
                    fprintf(stderr, "shuffle n=%lld world=%d drop=%d wrong\n", (long long)n, world,
                            drop);
                CHECK(ok);
                free(merged);
                free(perm);
            }
    /* The permutation of (seed 0, epoch 0, n 10), pinned (tests/interop/check_sampler.py derives
     * the same from data.h's description); other epochs and seeds give other orders. */
    static const int64_t pinned[10] = {6, 8, 9, 4, 7, 5, 0, 2, 3, 1};
    ptc__sampler_params p = {.n = 10, .world = 1, .shuffle = true};
    int64_t *got = NULL, ngot;
    CHECK_CODE(ptc__sampler_indices(&p, 0, &got, &ngot, &err), 0, &err);
    check_list(got, ngot, pinned, 10, "pinned permutation");
    int64_t *other = NULL, nother;
    CHECK_CODE(ptc__sampler_indices(&p, 1, &other, &nother, &err), 0, &err);
    CHECK(memcmp(got, other, 80) != 0);
    ptc__free(other);
    p.seed = 1;
    CHECK_CODE(ptc__sampler_indices(&p, 0, &other, &nother, &err), 0, &err);
    CHECK(memcmp(got, other, 80) != 0);
    ptc__free(other);
    ptc__free(got);
    /* below() is uniform enough to reach every value, including for bounds that are not powers
     * of two. */
    ptc__rng r;
    uint64_t w[1] = {5};
    ptc__rng_init(&r, 1, w, 1);
    int seen[9] = {0};
    for (int i = 0; i < 9000; i++)
        seen[ptc__rng_below(&r, 9)]++;
    for (int v = 0; v < 9; v++)
        CHECK(seen[v] > 850 && seen[v] < 1150);
}

static void test_eval_shard(void)
{
    static const int64_t ns[] = {0, 1, 5, 10, 10007};
    static const int worlds[] = {1, 2, 3, 8, 16};
    ptc_error err;
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof worlds / sizeof *worlds; b++) {
            int64_t n = ns[a], sum = 0;
            char *seen = calloc((size_t)n + 1, 1);
            bool ok = true;
            for (int r = 0; r < worlds[b]; r++) {
                int64_t *got = NULL, ngot = -1;
                ok &= ptc__eval_shard(n, worlds[b], r, &got, &ngot, &err) == 0;
                for (int64_t k = 0; ok && k < ngot; k++) {
                    ok &= got[k] >= 0 && got[k] < n && !seen[got[k]] && got[k] % worlds[b] == r;
                    if (ok)
                        seen[got[k]] = 1;
                }
                sum += ngot;
                ptc__free(got);
            }
            CHECK(ok);
            CHECK_INT(sum, n);
            free(seen);
        }
    int64_t *got = NULL, ngot;
    CHECK_CODE(ptc__eval_shard(5, 2, 2, &got, &ngot, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc__eval_shard(5, 2, 1, &got, &ngot, &err), 0, &err);
    int64_t want[2] = {1, 3};
    check_list(got, ngot, want, 2, "eval shard n=5 world=2 rank=1");
    ptc__free(got);
}

/* ---- 5. augmentation ------------------------------------------------------------------------- */

static const double k_mean[3] = PTC__CIFAR10_MEAN, k_std[3] = PTC__CIFAR10_STD;

/* (v/255 - mean)/std, each step in double rounded to float32: equal to float32 arithmetic here
 * (the difference of two floats is exact in double; a quotient of floats rounded to double and
 * then to float is the correctly rounded float quotient, since 53 >= 2 * 24 + 2). */
static float ref_norm(uint8_t v, int c)
{
    float x = (float)((double)v / 255.0);
    float m = (float)k_mean[c], s = (float)k_std[c];
    float d = (float)((double)x - (double)m);
    return (float)((double)d / (double)s);
}

/* The reference crop and flip: an explicit 40x40 zero-padded image. */
static void ref_augment(const uint8_t *src, int top, int left, bool flip, float *dst)
{
    static uint8_t pad[3][40][40];
    memset(pad, 0, sizeof pad);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                pad[c][y + 4][x + 4] = src[c * 1024 + y * 32 + x];
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                int sx = flip ? 31 - x : x;
                dst[c * 1024 + y * 32 + x] = ref_norm(pad[c][y + top][sx + left], c);
            }
}

static void random_image(uint8_t *img, uint32_t seed)
{
    for (int k = 0; k < 3072; k++) {
        seed = seed * 1664525u + 1013904223u;
        img[k] = (uint8_t)(seed >> 24);
    }
}

static void test_augment(void)
{
    ptc__normalizer nz;
    ptc__normalizer_init(&nz, k_mean, k_std);
    /* No augmentation: exactly (x/255 - mean)/std for every byte and channel. */
    uint8_t img[3072];
    for (int k = 0; k < 3072; k++)
        img[k] = (uint8_t)(k * 7 + k / 1024);
    float out[3072], ref[3072];
    ptc__augment_image(&nz, img, 4, 4, false, out);
    int bad = 0;
    for (int k = 0; k < 3072; k++) {
        float want = ref_norm(img[k], k / 1024);
        bad += memcmp(&out[k], &want, 4) != 0;
    }
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float want = ref_norm((uint8_t)v, c);
            bad += memcmp(&nz.lut[c][v], &want, 4) != 0;
        }
    CHECK_INT(bad, 0);

    /* Augmented: each output is exactly one of the 162 crops and flips: the drawn one. */
    int hits[9][9] = {{0}}, flips = 0, ndraws = 0;
    for (int im = 0; im < 6; im++) {
        random_image(img, (uint32_t)im + 1);
        for (int64_t idx = 0; idx < 5; idx++) {
            int top, left;
            bool flip;
            ptc__augment_draw(123, (uint64_t)im % 2, 4, idx + im * 100, &top, &left, &flip);
            ptc__augment_image(&nz, img, top, left, flip, out);
            int matches = 0, mt = -1, ml = -1, mf = -1;
            for (int t = 0; t <= 8; t++)
                for (int l = 0; l <= 8; l++)
                    for (int f = 0; f < 2; f++) {
                        ref_augment(img, t, l, f, ref);
                        if (memcmp(out, ref, sizeof out) == 0) {
                            matches++;
                            mt = t, ml = l, mf = f;
                        }
                    }
            CHECK_INT(matches, 1);
            CHECK(mt == top && ml == left && mf == (int)flip);
        }
    }
    /* The draws: deterministic, every crop reached, flips about half, rank and epoch matter. */
    for (int64_t idx = 0; idx < 20000; idx++) {
        int top, left, t2, l2;
        bool flip, f2;
        ptc__augment_draw(7, 0, 0, idx, &top, &left, &flip);
        ptc__augment_draw(7, 0, 0, idx, &t2, &l2, &f2);
        bad += t2 != top || l2 != left || f2 != flip || top < 0 || top > 8 || left < 0 || left > 8;
        hits[top][left]++;
        flips += flip;
        ndraws++;
    }
    CHECK_INT(bad, 0);
    int minhits = ndraws;
    for (int t = 0; t < 9; t++)
        for (int l = 0; l < 9; l++)
            minhits = hits[t][l] < minhits ? hits[t][l] : minhits;
    CHECK(minhits > 150); /* 20000 / 81 = 247 on average */
    CHECK(flips > 9500 && flips < 10500);
    int same_rank = 0, same_epoch = 0;
    for (int64_t idx = 0; idx < 200; idx++) {
        int t0, l0, t1, l1, t2, l2;
        bool f0, f1, f2;
        ptc__augment_draw(7, 0, 0, idx, &t0, &l0, &f0);
        ptc__augment_draw(7, 1, 0, idx, &t1, &l1, &f1);
        ptc__augment_draw(7, 0, 1, idx, &t2, &l2, &f2);
        same_rank += t0 == t1 && l0 == l1 && f0 == f1;
        same_epoch += t0 == t2 && l0 == l2 && f0 == f2;
    }
    CHECK(same_rank < 20 && same_epoch < 20);
}

/* ---- 6. the loader --------------------------------------------------------------------------- */

static ptc__split make_split(int64_t n)
{
    ptc__split s = {.n = n};
    s.images = ptc__malloc((size_t)n * 3072);
    s.labels = ptc__malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        random_image(s.images + i * 3072, (uint32_t)(i * 2654435761u));
        s.labels[i] = (uint8_t)(i % 10);
    }
    return s;
}

static ptc__loader_params loader_params(const ptc__split *s, const int64_t *idx, int64_t n, int B,
                                        int K, bool augment)
{
    ptc__loader_params p = {.split = s,
                            .indices = idx,
                            .nindices = n,
                            .batch_size = B,
                            .nbuffers = K,
                            .augment = augment,
                            .seed = 99,
                            .rank = 1,
                            .epoch = 2};
    for (int c = 0; c < 3; c++) {
        p.mean[c] = k_mean[c];
        p.std[c] = k_std[c];
    }
    return p;
}

/* Runs an epoch; checks every batch against the expected content. Returns batches seen. */
static int64_t run_epoch(const ptc__split *s, const int64_t *idx, int64_t n, int B, int K,
                         bool augment, bool hold_two)
{
    ptc__loader_params p = loader_params(s, idx, n, B, K, augment);
    ptc__loader *l = NULL;
    ptc_error err;
    CHECK_CODE(ptc__loader_start(&l, &p, &err), 0, &err);
    if (!l)
        return -1;
    ptc__normalizer nz;
    ptc__normalizer_init(&nz, k_mean, k_std);
    float *want = malloc(3072 * sizeof(float));
    int64_t pos = 0, nb = 0;
    int bad = 0;
    ptc__batch *b, *prev = NULL;
    int rc;
    while ((rc = ptc__loader_next(l, &b, &err)) == 1) {
        int expect = (int)(n - pos < B ? n - pos : B);
        bad += b->n != expect || b->number != nb || b->first != pos;
        for (int i = 0; i < b->n; i++, pos++) {
            bad += b->indices[i] != idx[pos] || b->labels[i] != s->labels[idx[pos]];
            int top = 4, left = 4;
            bool flip = false;
            if (augment)
                ptc__augment_draw(99, 1, 2, idx[pos], &top, &left, &flip);
            ptc__augment_image(&nz, s->images + idx[pos] * 3072, top, left, flip, want);
            bad += memcmp(b->images + (size_t)i * 3072, want, 3072 * sizeof(float)) != 0;
        }
        nb++;
        if (hold_two) { /* keep one batch while taking the next */
            ptc__loader_release(prev);
            prev = b;
        } else {
            ptc__loader_release(b);
        }
    }
    ptc__loader_release(prev);
    CHECK_INT(rc, 0);
    CHECK_INT(bad, 0);
    CHECK_INT(pos, n);
    CHECK_CODE(ptc__loader_next(l, &b, &err), 0, &err); /* the end stays the end */
    CHECK(b == NULL);
    free(want);
    ptc__loader_stop(l);
    return nb;
}

typedef struct counting_alloc {
    int allocs, frees;
} counting_alloc;

static void *cb_alloc(void *ctx, size_t size)
{
    ((counting_alloc *)ctx)->allocs++;
    return malloc(size);
}

static void cb_free(void *ctx, void *ptr)
{
    ((counting_alloc *)ctx)->frees++;
    free(ptr);
}

static void test_loader(void)
{
    ptc__split s = make_split(37);
    ptc_error err;
    ptc__sampler_params sp = {.n = 37, .world = 2, .rank = 1, .shuffle = true, .seed = 5};
    int64_t *idx = NULL, n = 0;
    CHECK_CODE(ptc__sampler_indices(&sp, 2, &idx, &n, &err), 0, &err);
    CHECK_INT(n, 19);
    for (int K = 1; K <= 3; K++) {
        CHECK_INT(run_epoch(&s, idx, n, 8, K, true, false), 3);  /* 8 + 8 + 3 */
        CHECK_INT(run_epoch(&s, idx, n, 5, K, false, false), 4); /* 5 + 5 + 5 + 4 */
        CHECK_INT(run_epoch(&s, idx, n, 19, K, true, false), 1);
        CHECK_INT(run_epoch(&s, idx, n, 100, K, true, false), 1); /* one short batch */
        CHECK_INT(run_epoch(&s, idx, n, 1, K, true, false), 19);
        if (K >= 2)
            CHECK_INT(run_epoch(&s, idx, n, 4, K, true, true), 5);
        CHECK_INT(run_epoch(&s, idx, 0, 4, K, true, false), 0); /* an empty epoch */
    }
    /* A longer epoch over every sample, several times. */
    int64_t all[200];
    for (int i = 0; i < 200; i++)
        all[i] = (i * 7) % 37;
    for (int rep = 0; rep < 3; rep++)
        CHECK_INT(run_epoch(&s, all, 200, 3, 2, true, false), 67);

    /* Holding every buffer: the next batch is refused instead of waiting forever. */
    ptc__loader_params p = loader_params(&s, idx, n, 4, 2, true);
    ptc__loader *l = NULL;
    ptc__batch *b1, *b2, *b3;
    CHECK_CODE(ptc__loader_start(&l, &p, &err), 0, &err);
    CHECK_INT(ptc__loader_next(l, &b1, &err), 1);
    CHECK_INT(ptc__loader_next(l, &b2, &err), 1);
    CHECK_CODE(ptc__loader_next(l, &b3, &err), PTC_EINVAL, &err);
    CHECK(has(&err, "all 2 buffers are held"));
    ptc__loader_release(b1);
    CHECK_INT(ptc__loader_next(l, &b3, &err), 1);
    CHECK(b3 && b3->number == 2 && b3->first == 8);
    /* Stopping mid-epoch, holding batches, with the thread waiting for a buffer. */
    usleep(20000);
    ptc__loader_stop(l);
    /* Stopping right after the start, before anything is consumed. */
    CHECK_CODE(ptc__loader_start(&l, &p, &err), 0, &err);
    ptc__loader_stop(l);
    ptc__loader_stop(NULL);
    ptc__loader_release(NULL);

    /* An index outside the split at position 9: batches 0 and 1 (positions 0..7) arrive, then the
     * error, again and again. */
    int64_t badidx[20];
    for (int i = 0; i < 20; i++)
        badidx[i] = i;
    badidx[9] = 37;
    p = loader_params(&s, badidx, 20, 4, 3, false);
    CHECK_CODE(ptc__loader_start(&l, &p, &err), 0, &err);
    ptc__batch *b;
    CHECK_INT(ptc__loader_next(l, &b, &err), 1);
    ptc__loader_release(b);
    CHECK_INT(ptc__loader_next(l, &b, &err), 1);
    ptc__loader_release(b);
    CHECK_CODE(ptc__loader_next(l, &b, &err), PTC_EINVAL, &err);
    CHECK(has(&err, "index list position 9: sample index 37 is outside the split of 37"));
    CHECK_CODE(ptc__loader_next(l, &b, &err), PTC_EINVAL, &err);
    ptc__loader_stop(l);

    /* A caller allocator serves the ring. */
    counting_alloc ca = {0};
    p = loader_params(&s, idx, n, 8, 3, true);
    p.alloc = cb_alloc;
    p.free = cb_free;
    p.alloc_ctx = &ca;
    CHECK_CODE(ptc__loader_start(&l, &p, &err), 0, &err);
    CHECK_INT(ca.allocs, 6);
    while (ptc__loader_next(l, &b, &err) == 1)
        ptc__loader_release(b);
    ptc__loader_stop(l);
    CHECK_INT(ca.frees, 6);

    /* Bad parameters. */
    static const int bad_batch[] = {0, -1};
    for (int i = 0; i < 2; i++) {
        p = loader_params(&s, idx, n, bad_batch[i], 2, true);
        CHECK_CODE(ptc__loader_start(&l, &p, &err), PTC_EINVAL, &err);
        CHECK(l == NULL);
    }
    p = loader_params(&s, idx, n, 4, 65, true);
    CHECK_CODE(ptc__loader_start(&l, &p, &err), PTC_EINVAL, &err);
    p = loader_params(&s, idx, n, 4, 2, true);
    p.std[1] = 0;
    CHECK_CODE(ptc__loader_start(&l, &p, &err), PTC_EINVAL, &err);
    p = loader_params(&s, NULL, n, 4, 2, true);
    CHECK_CODE(ptc__loader_start(&l, &p, &err), PTC_EINVAL, &err);
    p = loader_params(&s, idx, n, 4, 2, true);
    p.alloc = cb_alloc;
    CHECK_CODE(ptc__loader_start(&l, &p, &err), PTC_EINVAL, &err);

    ptc__free(idx);
    ptc__split_free(&s);
}

/* ---- 7. allocation failure ------------------------------------------------------------------ */

/* Runs fn with the N-th allocation failing, N = 1, 2, ... until a run fails none. */
static void sweep(const char *what, int (*fn)(ptc_error *))
{
    int runs = 0, bad = 0;
    for (long nth = 1;; nth++) {
        long live = g_tally.live;
        g_tally.fail_at = nth;
        g_tally.calls = 0;
        g_tally.failed = false;
        ptc_error err;
        ptc__err_clear(&err);
        int rc = fn(&err);
        bool failed = g_tally.failed;
        g_tally.fail_at = 0;
        runs++;
        if (g_tally.live != live) {
            fprintf(stderr, "%s: allocation %ld failed: %ld blocks leaked\n", what, nth,
                    g_tally.live - live);
            bad++;
        }
        if (!failed) {
            if (rc != 0) {
                fprintf(stderr, "%s: no allocation failed, yet %s (%s)\n", what, ptc_err_name(rc),
                        err.message);
                bad++;
            }
            break;
        }
        if (rc != PTC_ENOMEM || err.code != rc || !err.message[0]) {
            fprintf(stderr, "%s: allocation %ld failed: got %s (%s)\n", what, nth, ptc_err_name(rc),
                    err.message);
            bad++;
        }
    }
    check_count++;
    check_failures += bad != 0;
    printf("allocation failure sweep %s: %d runs\n", what, runs);
}

static int af_cifar(ptc_error *err)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cifar", g_tmp);
    ptc__data_params p = {.format = PTC__DATA_CIFAR10, .dir = dir};
    ptc__dataset *d = NULL;
    int rc = ptc__dataset_new(&d, &p, err);
    ptc__dataset_free(d);
    return rc;
}

static int af_idx(ptc_error *err)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/idx_gz", g_tmp);
    ptc__data_params p = {.format = PTC__DATA_IDX, .dir = dir};
    ptc__dataset *d = NULL;
    int rc = ptc__dataset_new(&d, &p, err);
    ptc__dataset_free(d);
    return rc;
}

static int af_idx_keep(ptc_error *err)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/idx_gz", g_tmp);
    ptc__data_params p = {.format = PTC__DATA_IDX, .dir = dir, .keep = 2};
    ptc__dataset *d = NULL;
    int rc = ptc__dataset_new(&d, &p, err);
    ptc__dataset_free(d);
    if (rc == 0) {
        p.test_only = true;
        rc = ptc__dataset_new(&d, &p, err);
        ptc__dataset_free(d);
    }
    return rc;
}

static ptc__split *g_af_split;

static int af_loader(ptc_error *err)
{
    ptc__sampler_params sp = {.n = g_af_split->n, .world = 3, .rank = 2, .shuffle = true};
    int64_t *idx = NULL, n = 0;
    int rc = ptc__sampler_indices(&sp, 0, &idx, &n, err);
    if (rc < 0)
        return rc;
    ptc__loader_params p = loader_params(g_af_split, idx, n, 2, 3, true);
    ptc__loader *l = NULL;
    if ((rc = ptc__loader_start(&l, &p, err)) == 0) {
        ptc__batch *b;
        while ((rc = ptc__loader_next(l, &b, err)) == 1)
            ptc__loader_release(b);
        ptc__loader_stop(l);
    }
    ptc__free(idx);
    return rc;
}

static void test_alloc_failure(void)
{
    sweep("CIFAR-10 dataset", af_cifar);
    sweep("IDX.gz dataset", af_idx);
    sweep("IDX.gz dataset, keep and test_only", af_idx_keep);
    ptc__split s = make_split(11);
    g_af_split = &s;
    sweep("loader epoch", af_loader);
    ptc__split_free(&s);
}

int main(void)
{
    ptc_set_allocator(count_realloc, &g_tally);
    const char *t = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/ptc_test_data_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 99;
    }
    test_cifar_ok();
    test_cifar_bad();
    test_idx_ok();
    test_idx_bad();
    test_bounded();
    test_fashion_mnist();
    test_sampler_fixed();
    test_sampler_shuffle();
    test_eval_shard();
    test_augment();
    test_loader();
    test_alloc_failure();
    nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    CHECK_INT(g_tally.live, 0);
    ptc_set_allocator(NULL, NULL);
    return check_exit("test_data");
}
