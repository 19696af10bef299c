/*
 * test_train_records.c - how ptc_train's output files fail and recover (lib/train/record.c and
 * the output checks of lib/train/train.c), on a deterministic run of the ref backend over a few
 * dozen generated 32 x 32 images (a ptc_source, as test_train_scalars.c):
 *   1. A metrics file that cannot be written in full (RLIMIT_FSIZE with SIGXFSZ ignored: the
 *      kernel's EFBIG, deterministic): the run goes on; the log callback gets one warning naming
 *      the file, the byte and the reason; ptc_train returns PTC_EIO after the run ("the metrics
 *      file ... is incomplete"); the file holds whole records only, each line JSON, and ends
 *      exactly at the byte the warning names.
 *   2. A run resumed onto a metrics file whose last line is incomplete (no newline): that line is
 *      cut off, and every line of the file parses, the resumed records after the earlier ones.
 *   3. A save, checkpoint or metrics path whose directory is missing, or is a file: PTC_EIO naming
 *      the file, within a second and before any step (no callback called).
 *   4. A run that diverges (a huge learning rate): its log lines print a NaN as "nan", never
 *      "-nan".
 */
#include <ptc/ptc.h>

#include "check.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { NTRAIN = 26, NTEST = 10, BATCH = 4, MAX_LOG = 64 };

static uint8_t pixels[NTRAIN + NTEST][32 * 32 * 3], labels[NTRAIN + NTEST];
static ptc_source src_train, src_test;
static int64_t first_test = NTRAIN, first_train = 0;

static int get(void *ctx, int64_t i, uint8_t *hwc, int64_t *label, ptc_error *err)
{
    const int64_t *first = ctx;
    (void)err;
    memcpy(hwc, pixels[*first + i], sizeof pixels[0]);
    *label = labels[*first + i];
    return 0;
}

/* What the callbacks saw. */
typedef struct seen {
    char log[MAX_LOG][640];
    int nlog, scalars, progress;
} seen;

static void on_log(void *ctx, const char *line)
{
    seen *s = ctx;
    if (s->nlog < MAX_LOG)
        snprintf(s->log[s->nlog++], sizeof s->log[0], "%s", line);
}

static void on_scalar(void *ctx, const char *tag, int64_t step, double value)
{
    (void)tag, (void)step, (void)value;
    ((seen *)ctx)->scalars++;
}

static void on_progress(void *ctx, int epoch, int64_t done, int64_t total, double loss)
{
    (void)epoch, (void)done, (void)total, (void)loss;
    ((seen *)ctx)->progress++;
}

static void params(ptc_train_params *p, seen *s, const char *metrics)
{
    memset(s, 0, sizeof *s);
    ptc_train_params_default(p);
    p->backend = "ref";
    p->threads = 1;
    p->epochs = 2;
    p->batch_size = BATCH;
    p->seed = 5;
    p->train_source = &src_train;
    p->test_source = &src_test;
    p->metrics = metrics;
    p->log = on_log;
    p->scalar = on_scalar;
    p->progress = on_progress;
    p->ctx = s;
    p->log_every = 1;
}

/* Every line of path is JSON and the file ends with a newline: the number of lines, or -1. */
static int whole_lines(const char *path, int *evals)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int n = 0, bad = 0;
    *evals = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        json_error_t je;
        json_t *j = len && line[len - 1] == '\n' ? json_loads(line, 0, &je) : NULL;
        if (!j) {
            fprintf(stderr, "%s:%d: not a whole JSON line: %s\n", path, n + 1, line);
            bad = 1;
        } else {
            const char *ev = json_string_value(json_object_get(j, "event"));
            *evals += ev && strcmp(ev, "eval") == 0;
            json_decref(j);
        }
        n++;
    }
    fclose(f);
    return bad ? -1 : n;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 1. The metrics file stops at limit bytes. */
static void write_fails(const char *m)
{
    ptc_train_params p;
    static seen s;
    params(&p, &s, m);
    const rlim_t limit = 1500; /* a dozen step records: the file fails in the first epoch */
    struct rlimit old, lim = {.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    ptc_train_result res;
    ptc_error err;
    int rc = ptc_train(&p, &res, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK_INT(rc, PTC_EIO);
    printf("1. ptc_train: %d %s\n", rc, err.message);
    CHECK(strstr(err.message, "the metrics file ") == err.message);
    CHECK(strstr(err.message, m) != NULL);
    CHECK(strstr(err.message, "incomplete") != NULL);
    CHECK(strstr(err.message, strerror(EFBIG)) != NULL);
    CHECK_INT(res.epochs_done, 2); /* the run went on */
    int warnings = 0;
    long at = -1;
    for (int i = 0; i < s.nlog; i++) {
        const char *w = strstr(s.log[i], "warning: the metrics file ");
        if (!w)
            continue;
        warnings++;
        printf("1. log: %s\n", s.log[i]);
        CHECK(strstr(w, m) != NULL);
        CHECK(strstr(w, strerror(EFBIG)) != NULL);
        const char *b = strstr(w, "at byte ");
        CHECK(b != NULL);
        if (b)
            at = strtol(b + 8, NULL, 10);
    }
    CHECK_INT(warnings, 1);
    long size = file_size(m);
    CHECK(size > 0 && size <= (long)limit);
    CHECK_INT(size, at); /* the file ends where the warning says */
    int evals, n = whole_lines(m, &evals);
    CHECK(n > 0);
    printf("1. %s: %ld bytes, %d whole lines, the limit %lu\n", m, size, n, (unsigned long)limit);
}

/* 2. A resumed run appends after an incomplete last line. */
static void resume_after_partial(const char *m, const char *ck)
{
    ptc_train_params p;
    static seen s;
    params(&p, &s, m);
    p.epochs = 1;
    p.checkpoint = ck;
    ptc_train_result res;
    ptc_error err;
    int rc = ptc_train(&p, &res, &err);
    if (rc < 0)
        fprintf(stderr, "ptc_train: %s\n", err.message);
    CHECK_INT(rc, 0);
    FILE *f = fopen(m, "a");
    if (f) {
        fputs("{\"event\": \"step\", \"epoch\": 2, \"step\": 8, \"loss\": 1.2", f);
        fclose(f);
    }
    long before = file_size(m);
    params(&p, &s, m);
    p.epochs = 2;
    p.resume = ck;
    rc = ptc_train(&p, &res, &err);
    if (rc < 0)
        fprintf(stderr, "ptc_train: %s\n", err.message);
    CHECK_INT(rc, 0);
    int evals, n = whole_lines(m, &evals);
    CHECK(n > 0);
    CHECK_INT(evals, 2); /* epoch 1's, then the resumed run's epoch 2 */
    printf("2. %s: %ld bytes with the partial line, %ld after the resumed run, %d whole lines\n", m,
           before, file_size(m), n);
}

/* 3. An output whose directory is missing or a file: refused before any step. */
static void refused_early(const char *what, const char *path, const char *m, const char *because)
{
    ptc_train_params p;
    static seen s;
    params(&p, &s, m);
    if (strcmp(what, "save") == 0)
        p.save = path;
    else if (strcmp(what, "checkpoint") == 0)
        p.checkpoint = path;
    else
        p.metrics = path;
    ptc_train_result res;
    ptc_error err;
    double t0 = now();
    int rc = ptc_train(&p, &res, &err);
    double secs = now() - t0;
    printf("3. %s %s: %d in %.3f s: %s\n", what, path, rc, secs, err.message);
    CHECK_INT(rc, PTC_EIO);
    CHECK(strstr(err.message, path) != NULL);
    CHECK(strstr(err.message, what) != NULL);
    CHECK(strstr(err.message, because) != NULL);
    CHECK(secs < 1.0);
    CHECK_INT(s.progress, 0);
    CHECK_INT(s.scalars, 0);
}

/* 4. NaN in the log lines. */
static void nan_lines(const char *m)
{
    ptc_train_params p;
    static seen s;
    params(&p, &s, m);
    p.epochs = 1;
    p.lr = 1e30;
    ptc_train_result res;
    ptc_error err;
    int rc = ptc_train(&p, &res, &err);
    CHECK_INT(rc, 0);
    int nan_lines = 0;
    for (int i = 0; i < s.nlog; i++) {
        CHECK(strstr(s.log[i], "-nan") == NULL);
        nan_lines += strstr(s.log[i], "loss nan") != NULL;
        if (strstr(s.log[i], "nan") || strstr(s.log[i], "inf"))
            printf("4. log: %s\n", s.log[i]);
    }
    CHECK(res.test_loss != res.test_loss); /* the run diverged: its test loss is a NaN */
    CHECK(nan_lines >= 1);
}

int main(void)
{
    uint64_t st = 42;
    for (int i = 0; i < NTRAIN + NTEST; i++) {
        labels[i] = (uint8_t)(i % 10);
        for (size_t j = 0; j < sizeof pixels[0]; j++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            pixels[i][j] = (uint8_t)(labels[i] * 20 + (st >> 58));
        }
    }
    ptc_source_default(&src_train);
    src_train.count = NTRAIN;
    src_train.get = get;
    src_train.ctx = &first_train;
    src_test = src_train;
    src_test.count = NTEST;
    src_test.ctx = &first_test;

    char dir[] = "/tmp/ptc-records-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return 1;
    }
    char m1[128], m2[128], ck[128], m4[128], missing[160], under_file[160];
    snprintf(m1, sizeof m1, "%s/fails.jsonl", dir);
    snprintf(m2, sizeof m2, "%s/resumed.jsonl", dir);
    snprintf(ck, sizeof ck, "%s/ck.pt", dir);
    snprintf(m4, sizeof m4, "%s/nan.jsonl", dir);
    snprintf(missing, sizeof missing, "%s/no-such-dir/x.pth", dir);
    snprintf(under_file, sizeof under_file, "%s/x.pt", m2);

    write_fails(m1);
    resume_after_partial(m2, ck);
    refused_early("save", missing, NULL, "No such file or directory");
    refused_early("checkpoint", under_file, NULL, "is not a directory");
    refused_early("metrics", missing, NULL, "No such file or directory");
    nan_lines(m4);

    unlink(m1);
    unlink(m2);
    unlink(ck);
    unlink(m4);
    rmdir(dir);
    return check_exit("test_train_records");
}
