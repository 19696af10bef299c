/*
 * record.c - the records of a training run: the metrics file's lines and the scalar callback,
 * from one place (see record.h); and the check, before training, that the run's output files
 * can be written.
 */
#include "train/record.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048 /* one record: a dozen members and the GPU's few */
#define TAIL_BYTES     4096 /* appending: how far back a partial last line is looked for */

/* Appending: a last line without its newline (the run before ended while writing it, or its disk
 * was full) is cut off, so that the records appended start a line of their own. Only the last
 * TAIL_BYTES are read (a record is shorter than LINE_MAX_BYTES); a tail without any newline there
 * is not a record of ours: it is ended with a newline instead, so the next record starts clean. */
static int cut_partial_line(ptc__recorder *rec, ptc_error *err)
{
    struct stat st;
    if (fstat(rec->metrics, &st) < 0)
        return ptc__err(err, PTC_EIO, "", -1, "%s: cannot stat: %s", rec->path, strerror(errno));
    rec->size = (int64_t)st.st_size;
    if (!S_ISREG(st.st_mode) || st.st_size == 0)
        return 0;
    char tail[TAIL_BYTES];
    off_t from = st.st_size > TAIL_BYTES ? st.st_size - TAIL_BYTES : 0;
    ssize_t n = pread(rec->metrics, tail, (size_t)(st.st_size - from), from);
    if (n != (ssize_t)(st.st_size - from))
        return ptc__err(err, PTC_EIO, "", (int64_t)from, "%s: cannot read its last line: %s",
                        rec->path, n < 0 ? strerror(errno) : "short read");
    if (tail[n - 1] == '\n')
        return 0;
    ssize_t k = n - 1;
    while (k >= 0 && tail[k] != '\n')
        k--;
    if (k < 0 && from > 0) { /* no newline in the tail: end that line */
        if (write(rec->metrics, "\n", 1) != 1)
            return ptc__err(err, PTC_EIO, "", rec->size, "%s: cannot write at byte %lld: %s",
                            rec->path, (long long)rec->size, strerror(errno));
        rec->size++;
        return 0;
    }
    off_t keep = from + (off_t)(k + 1);
    if (ftruncate(rec->metrics, keep) < 0)
        return ptc__err(err, PTC_EIO, "", (int64_t)keep,
                        "%s: cannot cut its incomplete last line off at byte %lld: %s", rec->path,
                        (long long)keep, strerror(errno));
    rec->size = (int64_t)keep;
    return 0;
}

int ptc__recorder_open(ptc__recorder *rec, const ptc_train_params *p, int rank, int world,
                       bool append, ptc_error *err)
{
    *rec = (ptc__recorder){.on = rank == 0, .world = world, .metrics = -1};
    if (!rec->on)
        return 0;
    rec->scalar = p->scalar;
    rec->log = p->log;
    rec->ctx = p->ctx;
    rec->log_every = p->log_every > 0 ? p->log_every : 0;
    if (!p->metrics)
        return 0;
    rec->path = p->metrics;
    /* appending reads the last line back (cut_partial_line) */
    int flags = O_CREAT | O_CLOEXEC | (append ? O_RDWR | O_APPEND : O_WRONLY | O_TRUNC);
    if ((rec->metrics = open(p->metrics, flags, 0666)) < 0)
        return ptc__err(err, PTC_EIO, "", -1, "cannot write %s: %s", p->metrics, strerror(errno));
    return append ? cut_partial_line(rec, err) : 0;
}

void ptc__recorder_close(ptc__recorder *rec)
{
    if (rec->metrics >= 0 && close(rec->metrics) < 0 && !rec->failed) {
        rec->failed = true;
        snprintf(rec->why, sizeof rec->why, "closing it: %s", strerror(errno));
    }
    rec->metrics = -1;
}

int ptc__recorder_status(const ptc__recorder *rec, ptc_error *err)
{
    if (!rec->failed)
        return 0;
    return ptc__err(err, PTC_EIO, "", -1, /* the byte is in the text: no "offset" prefix */
                    "the metrics file %s is incomplete (its records end at byte %lld): %s",
                    rec->path, (long long)rec->size, rec->why);
}

/* One record, whole, into the metrics file: one write(2) of the line; a short or failed write is
 * cut back off (the file ends on its last whole record), reported through the log callback, and
 * ends the writing of the file (the run goes on). */
static void write_record(ptc__recorder *rec, const char *line, size_t len)
{
    ssize_t k;
    do
        k = write(rec->metrics, line, len);
    while (k < 0 && errno == EINTR);
    if (k == (ssize_t)len) {
        rec->size += (int64_t)len;
        return;
    }
    int e = k < 0 ? errno : ENOSPC; /* a short write: the disk (or the size limit) is full */
    if (k >= 0) {                   /* the reason of the short write, from a second try */
        ssize_t k2 = write(rec->metrics, line + k, len - (size_t)k);
        if (k2 < 0)
            e = errno;
    }
    bool cut = k <= 0 || ftruncate(rec->metrics, (off_t)rec->size) == 0; /* k > 0: partial */
    rec->failed = true;
    snprintf(rec->why, sizeof rec->why, "cannot write at byte %lld: %s%s", (long long)rec->size,
             strerror(e), cut ? "" : " (and the partial record could not be cut off)");
    close(rec->metrics);
    rec->metrics = -1;
    if (rec->log) {
        char msg[640];
        snprintf(msg, sizeof msg,
                 "warning: the metrics file %s: %s (no more records are written there; training "
                 "goes on)",
                 rec->path, rec->why);
        rec->log(rec->ctx, msg);
    }
}

/* Appends to line (always terminated; a record longer than the line is cut, never overrun). */
static void put(char *line, size_t *at, const char *fmt, ...) PTC_PRINTF(3, 4);
static void put(char *line, size_t *at, const char *fmt, ...)
{
    if (*at >= LINE_MAX_BYTES - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + *at, LINE_MAX_BYTES - *at, fmt, ap);
    va_end(ap);
    if (k > 0)
        *at = *at + (size_t)k < LINE_MAX_BYTES ? *at + (size_t)k : LINE_MAX_BYTES - 1;
}

/* The value as the line prints it, and that text: %.9g, which a float32 round-trips (JSON has no
 * NaN or infinity: Python's json module reads these spellings). */
static double printed(double v, bool integer, char *text, size_t n)
{
    if (isnan(v)) {
        snprintf(text, n, "NaN");
        return v;
    }
    if (isinf(v)) {
        snprintf(text, n, "%s", v > 0 ? "Infinity" : "-Infinity");
        return v;
    }
    if (integer && fabs(v) < 9.0e18) {
        snprintf(text, n, "%lld", (long long)v);
        return (double)(long long)v;
    }
    snprintf(text, n, "%.9g", v);
    return strtod(text, NULL);
}

void ptc__record(ptc__recorder *rec, const char *event, int epoch, int64_t step, int64_t tag_step,
                 const ptc__rec_field *f, size_t n, const char *extra)
{
    if (!rec->on || (rec->metrics < 0 && !rec->scalar))
        return;
    char line[LINE_MAX_BYTES], num[64];
    size_t at = 0;
    put(line, &at, "{\"event\": \"%s\"", event);
    if (epoch >= 0)
        put(line, &at, ", \"epoch\": %d", epoch);
    if (step >= 0)
        put(line, &at, ", \"step\": %lld", (long long)step);
    for (size_t i = 0; i < n; i++) {
        double v = printed(f[i].value, f[i].integer, num, sizeof num);
        put(line, &at, ", \"%s\": %s", f[i].key, num);
        if (f[i].tag && rec->scalar)
            rec->scalar(rec->ctx, f[i].tag, tag_step, f[i].tag_scale != 0 ? v * f[i].tag_scale : v);
    }
    put(line, &at, "%s}", extra ? extra : "");
    if (rec->metrics >= 0) {
        line[at++] = '\n'; /* put leaves room for it: at <= LINE_MAX_BYTES - 1 */
        write_record(rec, line, at);
    }
}

void ptc__recorder_start(ptc__recorder *rec, double now_s)
{
    rec->t0 = now_s;
}

void ptc__recorder_aside(ptc__recorder *rec, double secs)
{
    rec->t0 += secs;
}

void ptc__recorder_step(ptc__recorder *rec, int epoch, int64_t step, int n, double loss,
                        int64_t correct, double lr, double now_s)
{
    if (!rec->on || !rec->log_every)
        return;
    rec->loss_sum += loss * n;
    rec->right += correct;
    rec->seen += n;
    if (step % rec->log_every != 0)
        return;
    double secs = now_s - rec->t0;
    double seen = (double)rec->seen;
    ptc__rec_field f[] = {
        {.key = "loss", .tag = "train/loss", .value = seen > 0 ? rec->loss_sum / seen : 0},
        {.key = "accuracy", .tag = "train/accuracy", .value = seen > 0 ? rec->right / seen : 0},
        {.key = "lr", .tag = "lr", .value = lr},
        {.key = "images_per_sec",
         .tag = "images_per_sec",
         .value = secs > 0 ? seen * rec->world / secs : 0},
    };
    ptc__record(rec, "step", epoch + 1, step, step, f, sizeof f / sizeof *f, NULL);
    rec->loss_sum = 0;
    rec->right = rec->seen = 0;
    rec->t0 = now_s;
}

void ptc__record_epoch(ptc__recorder *rec, int epoch, int64_t step, double loss_sum, int64_t right,
                       int64_t seen, double lr, double secs, const char *gpu)
{
    ptc__rec_field f[] = {
        {.key = "loss", .tag = "epoch/train/loss", .value = seen ? loss_sum / (double)seen : 0},
        {.key = "accuracy",
         .tag = "epoch/train/accuracy",
         .value = seen ? (double)right / (double)seen : 0},
        {.key = "lr", .tag = "epoch/lr", .value = lr},
        {.key = "images_per_sec",
         .tag = "epoch/images_per_sec",
         .value = secs > 0 ? (double)seen / secs : 0},
        {.key = "seconds", .value = secs},
    };
    ptc__record(rec, "epoch", epoch, step, step, f, sizeof f / sizeof *f, gpu);
}

void ptc__record_eval(ptc__recorder *rec, int epoch, int64_t step, double accuracy, double loss,
                      int64_t count, double images_per_sec)
{
    ptc__rec_field f[] = {
        {.key = "test_accuracy", .tag = "test/accuracy", .value = accuracy},
        {.key = "test_loss", .tag = "test/loss", .value = loss},
        {.key = "images", .value = (double)count, .integer = true},
        {.key = "images_per_sec", .value = images_per_sec},
    };
    ptc__record(rec, "eval", epoch, step, step, f, sizeof f / sizeof *f, NULL);
}

void ptc__record_gpu(ptc__recorder *rec, int epoch, int64_t step, const ptc__gpu_sample *s)
{
    ptc__rec_field f[5];
    size_t n = 0;
    if (s->valid & PTC__GPU_UTIL)
        f[n++] = (ptc__rec_field){.key = "gpu_util", .tag = "gpu/utilization", .value = s->util};
    if (s->valid & PTC__GPU_MEM) {
        f[n++] = (ptc__rec_field){.key = "gpu_mem_used_bytes",
                                  .tag = "gpu/memory_used_gib",
                                  .value = (double)s->mem_used,
                                  .integer = true,
                                  .tag_scale = 1.0 / 1073741824.0};
        f[n++] = (ptc__rec_field){
            .key = "gpu_mem_total_bytes", .value = (double)s->mem_total, .integer = true};
    }
    if (s->valid & PTC__GPU_POWER)
        f[n++] = (ptc__rec_field){.key = "gpu_power_w", .value = s->power_w};
    if (s->valid & PTC__GPU_TEMP)
        f[n++] = (ptc__rec_field){.key = "gpu_temp_c", .value = s->temp_c};
    ptc__record(rec, "gpu", epoch, step, step, f, n, NULL);
}

void ptc__record_summary(ptc__recorder *rec, const ptc_train_result *res, int64_t steps, int world,
                         double copy_ms)
{
    ptc__rec_field f[] = {
        {.key = "train_images_per_sec", .value = res->train_images_per_sec},
        {.key = "eval_images_per_sec", .value = res->eval_images_per_sec},
        {.key = "epochs", .value = res->epochs_done, .integer = true},
        {.key = "steps", .value = (double)steps, .integer = true},
        {.key = "test_accuracy", .value = res->test_accuracy},
        {.key = "test_loss", .value = res->test_loss},
        {.key = "world", .value = world, .integer = true},
        /* several processes only (the count below leaves these four out for one) */
        {.key = "allreduce_ms_per_step", .value = res->allreduce_ms},
        {.key = "allreduce_exposed_ms_per_step", .value = res->allreduce_exposed_ms},
        {.key = "bucket_copy_ms_per_step", .value = copy_ms},
        {.key = "allreduce_hidden_fraction",
         .value = res->allreduce_ms > 0
                      ? fmax(0.0, 1.0 - res->allreduce_exposed_ms / res->allreduce_ms)
                      : 0.0},
    };
    size_t n = sizeof f / sizeof *f - (world > 1 ? 0 : 4);
    ptc__record(rec, "summary", -1, -1, 0, f, n, NULL);
}

/* The directory of an output file exists and this process may create files in it (save and
 * checkpoint are written beside and renamed; an existing metrics file needs only to be
 * writable): checked before the first step, so that a wrong --save does not throw a finished run
 * away. what names the file ("save"). */
static int check_output(const char *what, const char *path, ptc_error *err)
{
    if (!path)
        return 0;
    struct stat st;
    /* the metrics file is written in place: an existing one needs only to be writable itself */
    if (strcmp(what, "metrics") == 0 && stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        return access(path, W_OK) == 0 ? 0
                                       : ptc__err(err, PTC_EIO, "", -1,
                                                  "cannot write the metrics file %s: %s (checked "
                                                  "before training)",
                                                  path, strerror(errno));
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) >= sizeof dir)
        return ptc__err(err, PTC_EINVAL, "", -1, "the %s file's path is too long: %s", what, path);
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &st) < 0)
        return ptc__err(err, PTC_EIO, "", -1,
                        "cannot write the %s file %s: its directory %s: %s (checked before "
                        "training)",
                        what, path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ptc__err(err, PTC_EIO, "", -1,
                        "cannot write the %s file %s: %s is not a directory (checked before "
                        "training)",
                        what, path, dir);
    if (access(dir, W_OK | X_OK) < 0)
        return ptc__err(err, PTC_EIO, "", -1,
                        "cannot write the %s file %s: no permission to create files in %s: %s "
                        "(checked before training)",
                        what, path, dir, strerror(errno));
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ptc__err(err, PTC_EIO, "", -1,
                        "cannot write the %s file %s: it is a directory (checked before "
                        "training)",
                        what, path);
    return 0;
}

int ptc__train_check_outputs(const ptc_train_params *p, int rank, ptc_error *err)
{
    int rc = 0;
    if (rank == 0) {
        rc = check_output("save", p->save, err);
        if (rc == 0)
            rc = check_output("metrics", p->metrics, err);
    }
    if (rc == 0 && (rank == 0 || p->checkpoint_all_ranks))
        rc = check_output("checkpoint", p->checkpoint, err);
    return rc;
}
