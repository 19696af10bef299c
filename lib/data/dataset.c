/*
 * dataset.c - a dataset made of its two splits: finding the files of a CIFAR-10 or IDX directory,
 * reading them (cifar10.c, idx.c), and the per-channel statistics of the train split.
 *
 * The statistics are exact up to the final division: a byte histogram per channel gives the sums
 * of v and v^2 as integers (n * 1024 pixels * 65025 fits in 64 bits for any n below 2^38 images,
 * far beyond what memory holds), then mean = S1 / (255 N) and var = S2 / (255^2 N) - mean^2 in
 * double (the cancellation costs at most a few ulps: var is not small against mean^2 for images).
 */
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

ptc__data_params ptc__data_params_default(void)
{
    ptc__data_params p = {
        .format = PTC__DATA_IDX, .dir = NULL, .max_samples = PTC__DATA_MAX_SAMPLES};
    return p;
}

const char *ptc__data_member(char *dst, size_t dstsz, const char *path)
{
    /* Escape the whole path, then keep its tail when it does not fit: the file name is the part
     * that matters. (The cut may fall inside an escape sequence; the text stays printable.) */
    char full[1024];
    ptc__escape(full, sizeof full, path, strlen(path), true);
    size_t len = strlen(full);
    if (dstsz == 0)
        return dst;
    if (len < dstsz || dstsz < 8)
        snprintf(dst, dstsz, "%s", full);
    else
        snprintf(dst, dstsz, "...%s", full + len - (dstsz - 4));
    return dst;
}

void ptc__split_free(ptc__split *s)
{
    if (!s)
        return;
    ptc__free(s->images);
    ptc__free(s->labels);
    s->images = NULL;
    s->labels = NULL;
    s->n = 0;
}

void ptc__split_stats(const ptc__split *s, double mean[3], double std[3])
{
    for (int c = 0; c < 3; c++)
        mean[c] = std[c] = 0.0;
    if (!s || s->n <= 0)
        return;
    const int HW = PTC__DATA_H * PTC__DATA_W;
    uint64_t hist[3][256];
    memset(hist, 0, sizeof hist);
    for (int64_t i = 0; i < s->n; i++) {
        const uint8_t *img = s->images + (size_t)i * PTC__DATA_PIXELS;
        for (int c = 0; c < 3; c++)
            for (int k = 0; k < HW; k++)
                hist[c][img[c * HW + k]]++;
    }
    for (int c = 0; c < 3; c++) {
        uint64_t n = 0, s1 = 0, s2 = 0;
        for (uint64_t v = 0; v < 256; v++) {
            n += hist[c][v];
            s1 += v * hist[c][v];
            s2 += v * v * hist[c][v];
        }
        double m = (double)s1 / (255.0 * (double)n);
        double var = (double)s2 / (255.0 * 255.0 * (double)n) - m * m;
        mean[c] = m;
        std[c] = var > 0 ? sqrt(var) : 0.0;
    }
}

/* 1 when path names an existing file (of any type), 0 when it does not exist, negative on an
 * error that says nothing about existence (EACCES on a parent, say): err is then set. */
static int exists(const char *path, ptc_error *err)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return 1;
    if (errno == ENOENT || errno == ENOTDIR)
        return 0;
    char shown[256];
    return ptc__err(err, PTC_EIO, ptc__data_member(shown, sizeof shown, path), -1,
                    "cannot stat: %s", strerror(errno));
}

static int join(char *dst, size_t dstsz, const char *dir, const char *name, const char *suffix,
                ptc_error *err)
{
    int n = snprintf(dst, dstsz, "%s/%s%s", dir, name, suffix);
    if (n < 0 || (size_t)n >= dstsz)
        return ptc__err(err, PTC_EINVAL, "", -1, "dataset directory path too long (%zu bytes)",
                        strlen(dir));
    return 0;
}

#define PATH_CAP 4096

static int read_cifar10(ptc__dataset *d, const char *dir, int64_t max_samples, ptc_error *err)
{
    char paths[5][PATH_CAP];
    const char *train[5];
    int ntrain = 0, rc;
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
        if ((rc = join(paths[ntrain], PATH_CAP, dir, name, "", err)) < 0)
            return rc;
        if ((rc = exists(paths[ntrain], err)) < 0)
            return rc;
        if (rc == 1) {
            train[ntrain] = paths[ntrain];
            ntrain++;
        }
    }
    char shown[256];
    if (ntrain == 0)
        return ptc__err(err, PTC_ENOTFOUND, ptc__data_member(shown, sizeof shown, dir), -1,
                        "no CIFAR-10 train file (data_batch_1.bin .. data_batch_5.bin)");
    if ((rc = ptc__cifar10_read(&d->train, train, ntrain, max_samples, err)) < 0)
        return rc;
    char test[PATH_CAP];
    if ((rc = join(test, PATH_CAP, dir, "test_batch.bin", "", err)) < 0)
        return rc;
    const char *tests[1] = {test};
    return ptc__cifar10_read(&d->test, tests, 1, max_samples, err);
}

/* The plain file when it exists, else the .gz one; PTC_ENOTFOUND when neither does. */
static int find_idx(char *dst, const char *dir, const char *name, ptc_error *err)
{
    int rc;
    if ((rc = join(dst, PATH_CAP, dir, name, "", err)) < 0)
        return rc;
    if ((rc = exists(dst, err)) != 0)
        return rc < 0 ? rc : 0;
    if ((rc = join(dst, PATH_CAP, dir, name, ".gz", err)) < 0)
        return rc;
    if ((rc = exists(dst, err)) != 0)
        return rc < 0 ? rc : 0;
    char shown[256];
    return ptc__err(err, PTC_ENOTFOUND, ptc__data_member(shown, sizeof shown, dst), -1,
                    "no such file (nor without .gz)");
}

static int read_idx(ptc__dataset *d, const char *dir, int64_t max_samples, ptc_error *err)
{
    static const char *const names[2][2] = {
        {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"},
        {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
    };
    ptc__split *splits[2] = {&d->train, &d->test};
    for (int s = 0; s < 2; s++) {
        char images[PATH_CAP], labels[PATH_CAP];
        int rc;
        if ((rc = find_idx(images, dir, names[s][0], err)) < 0 ||
            (rc = find_idx(labels, dir, names[s][1], err)) < 0 ||
            (rc = ptc__idx_read(splits[s], images, labels, max_samples, err)) < 0)
            return rc;
    }
    return 0;
}

int ptc__dataset_new(ptc__dataset **out, const ptc__data_params *params, ptc_error *err)
{
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__dataset_new: NULL argument");
    *out = NULL;
    ptc__data_params p = params ? *params : ptc__data_params_default();
    if (p.max_samples <= 0)
        p.max_samples = PTC__DATA_MAX_SAMPLES;
    if (p.format != PTC__DATA_CIFAR10 && p.format != PTC__DATA_IDX)
        return ptc__err(err, PTC_EINVAL, "", -1, "unknown dataset format %d", (int)p.format);
    if (!p.dir && p.format == PTC__DATA_IDX)
        p.dir = PTC__FASHION_MNIST_DIR;
    if (!p.dir)
        return ptc__err(err, PTC_EINVAL, "", -1, "the CIFAR-10 directory is required");

    ptc__dataset *d = ptc__calloc(1, sizeof *d);
    if (!d)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for a dataset");
    d->format = p.format;
    int rc = p.format == PTC__DATA_CIFAR10 ? read_cifar10(d, p.dir, p.max_samples, err)
                                           : read_idx(d, p.dir, p.max_samples, err);
    if (rc < 0) {
        ptc__dataset_free(d);
        return rc;
    }
    ptc__split_stats(&d->train, d->mean, d->std);
    static const double cifar_mean[3] = PTC__CIFAR10_MEAN, cifar_std[3] = PTC__CIFAR10_STD;
    for (int c = 0; c < 3; c++) {
        d->norm_mean[c] = p.format == PTC__DATA_CIFAR10 ? cifar_mean[c] : d->mean[c];
        d->norm_std[c] = p.format == PTC__DATA_CIFAR10 ? cifar_std[c] : d->std[c];
    }
    *out = d;
    return 0;
}

void ptc__dataset_free(ptc__dataset *d)
{
    if (!d)
        return;
    ptc__split_free(&d->train);
    ptc__split_free(&d->test);
    ptc__free(d);
}
