/*
 * dataset.c - a dataset made of its two splits: finding the files of a CIFAR-10 or IDX directory,
 * reading them (cifar10.c, idx.c), and the per-channel statistics of the train split.
 *
 * The readers count the train split's presented pixels into byte histograms as they stream it,
 * whether they hold every sample or only the first keep (or none, for an evaluation); the
 * statistics come from those histograms, so they are the whole split's whatever is held, and
 * ptc__split_stats (over a held split) goes through the same ptc__hist_stats, so both give the
 * same bits.
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
#include <unistd.h>

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

void ptc__hist_stats(const uint64_t hist[3][256], double mean[3], double std[3])
{
    for (int c = 0; c < 3; c++) {
        uint64_t n = 0, s1 = 0, s2 = 0;
        for (uint64_t v = 0; v < 256; v++) {
            n += hist[c][v];
            s1 += v * hist[c][v];
            s2 += v * v * hist[c][v];
        }
        if (n == 0) {
            mean[c] = std[c] = 0.0;
            continue;
        }
        double m = (double)s1 / (255.0 * (double)n);
        double var = (double)s2 / (255.0 * 255.0 * (double)n) - m * m;
        mean[c] = m;
        std[c] = var > 0 ? sqrt(var) : 0.0;
    }
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
    ptc__hist_stats((const uint64_t(*)[256])hist, mean, std);
}

int ptc__data_check_dense(int fd, uint64_t size, const char *shown, ptc_error *err)
{
    /* A hole is a region no block holds: its bytes read as zeros but cost nothing on disk, so a
     * sparse file's size says nothing about what it took to make. SEEK_HOLE names holes exactly
     * (unlike st_blocks, which a compressing file system also makes smaller than st_size), and
     * where the file system cannot tell it reports the end of the file: no hole. */
    int rc = 0;
#ifdef SEEK_HOLE
    off_t hole = lseek(fd, 0, SEEK_HOLE);
    if (hole >= 0 && (uint64_t)hole < size)
        rc = ptc__err(err, PTC_EFORMAT, shown, (int64_t)hole,
                      "a hole at this offset: the file of %llu bytes is sparse (not all of it "
                      "is stored on disk); sparse data files are refused",
                      (unsigned long long)size);
#endif
    if (lseek(fd, 0, SEEK_SET) != 0 && rc == 0)
        rc = ptc__err(err, PTC_EIO, shown, -1, "cannot seek: %s", strerror(errno));
    return rc;
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

static int read_cifar10(ptc__dataset *d, const char *dir, const ptc__data_params *p,
                        uint64_t hist[3][256], ptc_error *err)
{
    ptc__read_params rp = {
        .max_samples = p->max_samples, .keep = p->keep > 0 ? p->keep : -1, .hist = hist};
    int rc;
    if (!p->test_only) {
        char paths[5][PATH_CAP];
        const char *train[5];
        int ntrain = 0;
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
        if ((rc = ptc__cifar10_read_ex(&d->train, train, ntrain, &rp, err)) < 0)
            return rc;
    }
    char test[PATH_CAP];
    if ((rc = join(test, PATH_CAP, dir, "test_batch.bin", "", err)) < 0)
        return rc;
    const char *tests[1] = {test};
    rp.hist = NULL;
    return ptc__cifar10_read_ex(&d->test, tests, 1, &rp, err);
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

static int read_idx(ptc__dataset *d, const char *dir, const ptc__data_params *p,
                    uint64_t hist[3][256], ptc_error *err)
{
    static const char *const names[2][2] = {
        {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"},
        {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
    };
    ptc__split *splits[2] = {&d->train, &d->test};
    for (int s = 0; s < 2; s++) {
        char images[PATH_CAP], labels[PATH_CAP];
        /* The train split always goes through the statistics; with test_only its images alone
         * are streamed and none is held. */
        bool stats_only = s == 0 && p->test_only;
        ptc__read_params rp = {.max_samples = p->max_samples,
                               .keep = p->keep > 0 ? p->keep : -1,
                               .hist = s == 0 ? hist : NULL};
        if (stats_only)
            rp.keep = 0;
        int rc;
        if ((rc = find_idx(images, dir, names[s][0], err)) < 0 ||
            (!stats_only && (rc = find_idx(labels, dir, names[s][1], err)) < 0) ||
            (rc = ptc__idx_read_ex(splits[s], images, stats_only ? NULL : labels, &rp, err)) < 0)
            return rc;
    }
    return 0;
}

/* Normalize divides by the training images' standard deviation: images that are all one value
 * are a fault of the data (a refusal, not a usage error). */
static int check_variation(const uint64_t hist[3][256], double mean0, const char *member,
                           ptc_error *err)
{
    int distinct = 0;
    for (int v = 0; v < 256; v++)
        distinct += hist[0][v] != 0;
    if (distinct != 1)
        return 0;
    return ptc__err(err, PTC_EFORMAT, member, -1,
                    "every training image pixel is %.0f: the images have no variation (standard "
                    "deviation 0), so Normalize cannot scale them",
                    mean0 * 255.0);
}

/* A caller's sources (callback.c): the train split with its statistics, the test split when there
 * is one; Normalize's constants given or the statistics. */
static int open_source(ptc__dataset **out, const ptc__data_params *p, ptc_error *err)
{
    int classes = p->classes > 0 ? p->classes : PTC__DATA_CLASSES;
    bool given = false;
    for (int c = 0; c < 3; c++)
        given = given || p->mean[c] != 0 || p->std[c] != 0;
    for (int c = 0; given && c < 3; c++)
        if (!(p->std[c] > 0))
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "the source's standard deviation of channel %d is %g (must be > 0)", c,
                            p->std[c]);
    ptc__dataset *d = ptc__calloc(1, sizeof *d);
    if (!d)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for a dataset");
    d->format = PTC__DATA_SOURCE;
    d->classes = classes;
    uint64_t hist[3][256];
    memset(hist, 0, sizeof hist);
    ptc__read_params rp = {p->max_samples, p->keep > 0 ? p->keep : -1, hist};
    if (p->test_only)
        rp.keep = 0; /* the statistics only */
    int rc = 0;
    /* The train source is read for its statistics even for an evaluation, unless constants are
     * given (then an evaluation does not need it at all). */
    if (!(p->test_only && given))
        rc = ptc__callback_read(&d->train, p->train_source, "train", classes, &rp, err);
    rp.keep = p->keep > 0 ? p->keep : -1;
    rp.hist = NULL;
    if (rc == 0 && p->test_source)
        rc = ptc__callback_read(&d->test, p->test_source, "test", classes, &rp, err);
    ptc__hist_stats((const uint64_t(*)[256])hist, d->mean, d->std);
    if (rc == 0 && !given)
        rc = check_variation((const uint64_t(*)[256])hist, d->mean[0], "train source", err);
    if (rc < 0) {
        ptc__dataset_free(d);
        return rc;
    }
    for (int c = 0; c < 3; c++) {
        d->norm_mean[c] = given ? p->mean[c] : d->mean[c];
        d->norm_std[c] = given ? p->std[c] : d->std[c];
    }
    *out = d;
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
    if (p.format != PTC__DATA_CIFAR10 && p.format != PTC__DATA_IDX && p.format != PTC__DATA_SOURCE)
        return ptc__err(err, PTC_EINVAL, "", -1, "unknown dataset format %d", (int)p.format);
    if (p.format == PTC__DATA_SOURCE)
        return open_source(out, &p, err);
    if (p.classes != 0 && p.classes != PTC__DATA_CLASSES)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%d classes asked for; the built-in datasets have %d", p.classes,
                        PTC__DATA_CLASSES);
    if (!p.dir && p.format == PTC__DATA_IDX)
        p.dir = PTC__FASHION_MNIST_DIR;
    if (!p.dir)
        return ptc__err(err, PTC_EINVAL, "", -1, "the CIFAR-10 directory is required");

    ptc__dataset *d = ptc__calloc(1, sizeof *d);
    if (!d)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for a dataset");
    d->format = p.format;
    d->classes = PTC__DATA_CLASSES;
    uint64_t hist[3][256];
    memset(hist, 0, sizeof hist);
    int rc = p.format == PTC__DATA_CIFAR10 ? read_cifar10(d, p.dir, &p, hist, err)
                                           : read_idx(d, p.dir, &p, hist, err);
    if (rc < 0) {
        ptc__dataset_free(d);
        return rc;
    }
    ptc__hist_stats((const uint64_t(*)[256])hist, d->mean, d->std);
    static const double cifar_mean[3] = PTC__CIFAR10_MEAN, cifar_std[3] = PTC__CIFAR10_STD;
    for (int c = 0; c < 3; c++) {
        d->norm_mean[c] = p.format == PTC__DATA_CIFAR10 ? cifar_mean[c] : d->mean[c];
        d->norm_std[c] = p.format == PTC__DATA_CIFAR10 ? cifar_std[c] : d->std[c];
    }
    if (p.format == PTC__DATA_IDX && (rc = check_variation((const uint64_t(*)[256])hist, d->mean[0],
                                                           "train-images-idx3-ubyte", err)) < 0) {
        ptc__dataset_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

const char *ptc__dataset_name(const ptc__dataset *d)
{
    return d->format == PTC__DATA_SOURCE    ? "the caller's images"
           : d->format == PTC__DATA_CIFAR10 ? "CIFAR-10"
                                            : "Fashion-MNIST";
}

void ptc__dataset_free(ptc__dataset *d)
{
    if (!d)
        return;
    ptc__split_free(&d->train);
    ptc__split_free(&d->test);
    ptc__free(d);
}
