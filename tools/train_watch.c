/*
 * train_watch.c - what a person watches of `ptc train` (cmd_train.c) on rank 0: the progress line
 * (epoch, images/s, the loss and the ETA, never wider than the terminal), the --tensorboard event
 * file (the module tool-tensorboard.so, loaded only by this command), and the end-of-run summary
 * table. lib/train hands everything through ptc_train_params' callbacks (log, progress,
 * device_status, scalar); this file presents it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "train_watch.h"

#include "tensorboard/tb.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

/* ---- --tensorboard ------------------------------------------------------------------------------ */

/* The event file of --tensorboard, on rank 0: the module tool-tensorboard.so is loaded before
 * training starts, so that a missing one stops the command at once, and only then, so that no
 * other command maps libprotobuf-c. */
typedef struct tb_sink {
    const ptc__tb_ops *ops;
    ptc__tb_writer *w;
    int failed;    /* the first failure stops the writing; the run goes on and reports it */
    ptc_error err; /* that failure */
} tb_sink;

/* Loads the module and opens the event file in dir: 0, or the exit status of the failure, reported
 * (a module that is not installed: as a missing backend). */
static int tb_start(tb_sink *t, const char *dir)
{
    const void *ops;
    ptc_error err;
    int rc = ptc_tool_module("tensorboard", &ops, &err);
    if (rc < 0)
        return cli_report(rc, &err);
    t->ops = ops;
    if (t->ops->version != PTC__TB_OPS_VERSION || t->ops->size < sizeof(ptc__tb_ops)) {
        cli_error("the tensorboard module (table version %d, %zu bytes) is not this ptc's "
                  "(version %d, %zu bytes): install the ptc it came with",
                  t->ops->version, t->ops->size, PTC__TB_OPS_VERSION, sizeof(ptc__tb_ops));
        return CLI_EXIT_REFUSED;
    }
    if ((rc = t->ops->open(dir, &t->w, &err)) < 0)
        return cli_report(rc, &err);
    return 0;
}

/* ptc_train_params.scalar: each number of the run into the event file. The epoch's and the
 * evaluation's records are flushed to the disk at once, so that what TensorBoard shows of a
 * finished epoch survives a crash. */
static void tb_scalar(tb_sink *t, const char *tag, int64_t step, double value)
{
    if (!t->w || t->failed)
        return;
    int rc = t->ops->scalar(t->w, tag, step, value, &t->err);
    if (rc == 0 && (strncmp(tag, "epoch/", 6) == 0 || strncmp(tag, "test/", 5) == 0))
        rc = t->ops->flush(t->w, &t->err);
    if (rc < 0) {
        t->failed = rc;
        cli_error("--tensorboard: %s (no more records are written there)", t->err.message);
    }
}

/* Closes the event file (also after a failed run: what was written stays readable). 0, or the
 * failure of the writing or of the close, reported. */
static int tb_finish(tb_sink *t)
{
    if (!t->w)
        return 0;
    ptc_error err;
    int rc = t->ops->close(t->w, &err);
    t->w = NULL;
    if (t->failed)
        return cli_report(t->failed, &t->err);
    return rc < 0 ? cli_report(rc, &err) : 0;
}

/* ---- progress, records and log --------------------------------------------------------------- */

#define RATE_WINDOW_S 5.0 /* the progress line's images/s: over about this many last seconds */
#define RATE_SAMPLES  32  /* (time, images) pairs kept for it, one every RATE_SAMPLE_S at most */
#define RATE_SAMPLE_S 0.25

struct train_watch {
    cli_progress bar;
    tb_sink tb;
    int mode, started, epoch;
    int epochs, batch;   /* of the run, for the ETA */
    int64_t max_steps;   /* 0: none */
    int64_t first_epoch; /* the first epoch the progress saw (1, or the one resumed at) */
    int64_t steps;       /* progress calls: one per step of rank 0 */
    int64_t before;      /* images of the epochs finished before the current one */
    int64_t last_done;   /* the current epoch's images so far */
    double t[RATE_SAMPLES];
    int64_t img[RATE_SAMPLES];
    int nsamples, next; /* the ring of (time, images) */
    char what[32];      /* "epoch 3/10" */
    char rate[32];      /* "1190 img/s" */
    char loss[32];      /* "loss 0.4123" */
    char eta[32];       /* "ETA 6m12s" */
    char gpu[96];       /* the GPU's state (device_status), "" until it comes */
    /* what the summary needs, from the records (on_scalar) */
    int evals;
    double best_acc, last_acc, last_test_loss;
    int64_t best_epoch, last_epoch, first_eval_epoch;
    int metrics_failed; /* lib/train warned that a metrics write failed */
    /* A resumed run's earlier evaluations, from the metrics file it appends to (epoch order; a
     * run resumed from an earlier epoch replaces the later ones): the best covers the whole run. */
    struct past_eval {
        int64_t epoch;
        double acc;
    } * past;
    int npast, past_cap;
    int past_read; /* the file was read (its evaluations are the earlier epochs') */
};

/* v with prec decimals, or "nan" / "inf" / "-inf" (printf prints a NaN's sign bit as "-nan",
 * which reads as a minus). Returns buf. */
static const char *fixed(char *buf, size_t n, int prec, double v)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.*f", prec, v);
    return buf;
}

double train_watch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "45s", "6m12s", "2h05m". */
static void format_eta(char *buf, size_t n, double secs)
{
    long s = secs > 0 && secs < 1e8 ? (long)(secs + 0.5) : 0;
    if (s < 60)
        snprintf(buf, n, "%lds", s);
    else if (s < 3600)
        snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, n, "%ldh%02ldm", s / 3600, s / 60 % 60);
}

/* lib/train's GPU readings, shown on the progress line until the next ones. */
static void on_device_status(void *ctx, const char *text)
{
    train_watch *u = ctx;
    snprintf(u->gpu, sizeof u->gpu, "%s", text);
}

static void on_log(void *ctx, const char *line)
{
    train_watch *u = ctx;
    if (strncmp(line, "warning: the metrics file ", 26) == 0) /* lib/train/record.c's */
        u->metrics_failed = 1;
    if (u->started) {
        cli_progress_end(&u->bar);
        u->started = 0;
    }
    cli_escape_put(stdout, line, strlen(line), CLI_ESC_RAW_BACKSLASH);
    putchar('\n');
    fflush(stdout);
}

/* The images/s of the last RATE_WINDOW_S seconds (rank 0's; of the whole window kept when it is
 * younger), and from it the ETA of the remaining steps of every epoch (or up to --max-steps):
 * evaluations and checkpoints are not predicted. */
static void update_rate(train_watch *u, int epoch, int64_t done, int64_t total)
{
    double t = train_watch_now();
    int64_t images = u->before + done;
    int last = (u->next + RATE_SAMPLES - 1) % RATE_SAMPLES;
    if (u->nsamples == 0 || t - u->t[last] >= RATE_SAMPLE_S) {
        u->t[u->next] = t;
        u->img[u->next] = images;
        u->next = (u->next + 1) % RATE_SAMPLES;
        if (u->nsamples < RATE_SAMPLES)
            u->nsamples++;
    }
    /* the oldest sample within the window (the newest one when all are older) */
    int first = (u->next + RATE_SAMPLES - u->nsamples) % RATE_SAMPLES, oldest = first;
    for (int k = 0; k < u->nsamples - 1; k++) {
        int i = (first + k) % RATE_SAMPLES;
        if (t - u->t[i] <= RATE_WINDOW_S)
            break;
        oldest = (i + 1) % RATE_SAMPLES;
    }
    double dt = t - u->t[oldest];
    u->rate[0] = u->eta[0] = '\0';
    if (dt <= 0 || images <= u->img[oldest])
        return;
    double rate = (double)(images - u->img[oldest]) / dt;
    snprintf(u->rate, sizeof u->rate, "%.0f img/s", rate);
    double left = (double)(total - done) + (double)(u->epochs - epoch) * (double)total;
    if (u->max_steps > 0 && u->batch > 0) {
        /* the steps taken: those of the epochs before this run's first (a resumed run) and ours */
        int64_t per_epoch = (total + u->batch - 1) / u->batch;
        int64_t taken = (u->first_epoch - 1) * per_epoch + u->steps;
        double by_steps = (double)(u->max_steps - taken) * u->batch;
        if (by_steps < left)
            left = by_steps > 0 ? by_steps : 0;
    }
    char e[24];
    format_eta(e, sizeof e, left / rate);
    snprintf(u->eta, sizeof u->eta, "ETA %s", e);
}

static void on_progress(void *ctx, int epoch, int64_t done, int64_t total, double loss)
{
    train_watch *u = ctx;
    if (!u->first_epoch)
        u->first_epoch = epoch;
    if (u->epoch != epoch && u->epoch) { /* a new epoch: the last one's images are done */
        u->before += u->last_done;
        u->nsamples = 0; /* the evaluation and checkpoint between are no part of the rate */
    }
    u->last_done = done;
    u->steps++;
    if (!u->started || u->epoch != epoch) {
        if (u->started)
            cli_progress_end(&u->bar);
        u->epoch = epoch;
        snprintf(u->what, sizeof u->what, "epoch %d/%d", epoch, u->epochs);
        cli_progress_start_mode(&u->bar, u->what, (uint64_t)total, u->mode);
        /* drawn in this order; when the terminal is narrow the GPU goes first, then the count,
         * images/s, the loss and the ETA */
        static const int ranks[] = {3, 4, 5, 1};
        const char *fields[] = {u->rate, u->loss, u->eta, u->gpu};
        cli_progress_set_fields(&u->bar, fields, ranks, 4, 2);
        u->started = 1;
    }
    if (u->bar.enabled) {
        update_rate(u, epoch, done, total);
        char l[24];
        snprintf(u->loss, sizeof u->loss, "loss %s", fixed(l, sizeof l, 4, loss));
    }
    cli_progress_update(&u->bar, (uint64_t)done);
}

/* lib/train's records (ptc_train_params.scalar: every tag at its step, rank 0), each as the
 * metrics file has it. This keeps what the end-of-run summary needs; the --tensorboard writer
 * takes the same four arguments, forwarded from here. Kept small on purpose. */
static void on_scalar(void *ctx, const char *tag, int64_t step, double value)
{
    train_watch *u = ctx;
    tb_scalar(&u->tb, tag, step, value); /* nothing without --tensorboard */
    if (strcmp(tag, "test/accuracy") == 0) {
        /* step is the global step; the evaluation follows the epoch the progress last showed */
        int64_t epoch = u->epoch;
        if (!u->evals || value > u->best_acc) {
            u->best_acc = value;
            u->best_epoch = epoch;
        }
        u->last_acc = value;
        u->last_epoch = epoch;
        if (!u->evals)
            u->first_eval_epoch = epoch;
        u->evals++;
    } else if (strcmp(tag, "test/loss") == 0) {
        u->last_test_loss = value;
    }
}

/* ---- a resumed run's earlier evaluations ---------------------------------------------------- */

#define PAST_LINE_MAX 4096  /* a record of ours is shorter (lib/train/record.c); longer: skipped */
#define PAST_MAX      65536 /* evaluations kept (one an epoch at most); beyond: the oldest dropped */

/* One "eval" record as lib/train/record.c writes it ({"event": "eval", "epoch": E, ...,
 * "test_accuracy": A, ...}): 1 and its epoch and accuracy, else 0 (any other line, junk). */
static int parse_eval(const char *line, int64_t *epoch, double *acc)
{
    static const char head[] = "{\"event\": \"eval\", \"epoch\": ";
    if (strncmp(line, head, sizeof head - 1) != 0)
        return 0;
    char *end;
    long long e = strtoll(line + sizeof head - 1, &end, 10);
    const char *a = strstr(end, "\"test_accuracy\": ");
    if (end == line + sizeof head - 1 || e < 1 || !a)
        return 0;
    a += strlen("\"test_accuracy\": ");
    double v = strtod(a, &end);
    if (end == a || !isfinite(v))
        return 0;
    *epoch = e;
    *acc = v;
    return 1;
}

static void past_add(train_watch *u, int64_t epoch, double acc)
{
    while (u->npast > 0 && u->past[u->npast - 1].epoch >= epoch) /* a run resumed from before */
        u->npast--;
    if (u->npast == PAST_MAX) {
        memmove(u->past, u->past + 1, (size_t)(PAST_MAX - 1) * sizeof *u->past);
        u->npast--;
    }
    if (u->npast == u->past_cap) {
        int cap = u->past_cap ? 2 * u->past_cap : 64;
        void *q = realloc(u->past, (size_t)cap * sizeof *u->past);
        if (!q)
            return; /* the summary then labels its best as this process's (see summary) */
        u->past = q;
        u->past_cap = cap;
    }
    u->past[u->npast++] = (struct past_eval){.epoch = epoch, .acc = acc};
}

void train_watch_history(train_watch *u, const char *metrics)
{
    FILE *f = fopen(metrics, "r");
    if (!f)
        return;
    char line[PAST_LINE_MAX];
    int whole = 1; /* line starts a line of the file */
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        int ends = n > 0 && line[n - 1] == '\n';
        int64_t e;
        double a;
        if (whole && ends && parse_eval(line, &e, &a))
            past_add(u, e, a);
        whole = ends;
    }
    u->past_read = !ferror(f);
    fclose(f);
}

/* ---- the end-of-run summary ------------------------------------------------------------------- */

#define SUMMARY_LABEL_W 15 /* the label column: the longest label ("test accuracy") and a gap */

/* One row: the label padded to the column, then the value (a path from the command line is
 * escaped like any text that reaches the terminal). */
static void row(const char *label, const char *fmt, ...) CLI_PRINTF(2, 3);
static void row(const char *label, const char *fmt, ...)
{
    char value[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    printf("  %-*s", SUMMARY_LABEL_W, label);
    cli_escape_put(stdout, value, strlen(value), 0);
    putchar('\n');
}

/* "16.1 s", "6m12s", "2h05m07s". */
static void format_wall(char *buf, size_t n, double secs)
{
    long s = (long)secs;
    if (secs < 60)
        snprintf(buf, n, "%.1f s", secs);
    else if (s < 3600)
        snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, n, "%ldh%02ldm%02lds", s / 3600, s / 60 % 60, s % 60);
}

/* The test accuracy row: the best and the last evaluation. A resumed run's best covers the
 * earlier epochs too when their records were read from the metrics file (train_watch_history),
 * else the row says which epochs it covers. */
static void accuracy_row(const train_watch *u, const ptc_train_params *p)
{
    double best = u->best_acc;
    int64_t best_epoch = u->best_epoch;
    int n = u->evals;
    int64_t before = u->evals ? u->first_eval_epoch : u->first_epoch > 0 ? u->first_epoch : 1;
    for (int i = 0; u->past_read && i < u->npast && u->past[i].epoch < before; i++) {
        if (!n || u->past[i].acc > best ||
            (u->past[i].acc == best && u->past[i].epoch < best_epoch)) {
            best = u->past[i].acc;
            best_epoch = u->past[i].epoch;
        }
        n++;
    }
    if (!n) {
        row("test accuracy", "none (no evaluation ran)");
        return;
    }
    char b[32], l[32], range[96] = "";
    if (p->resume && n == u->evals && u->first_eval_epoch > 1) /* this process's epochs only */
        snprintf(range, sizeof range, "; best of epochs %lld-%lld only",
                 (long long)u->first_eval_epoch, (long long)u->last_epoch);
    if (u->evals)
        row("test accuracy", "best %s%% (epoch %lld%s), last %s%% (epoch %lld)",
            fixed(b, sizeof b, 2, 100.0 * best), (long long)best_epoch, range,
            fixed(l, sizeof l, 2, 100.0 * u->last_acc), (long long)u->last_epoch);
    else
        row("test accuracy", "best %s%% (epoch %lld, before this process; none in it)",
            fixed(b, sizeof b, 2, 100.0 * best), (long long)best_epoch);
}

/* The metrics file a write to failed: lib/train's warning, or its error at the end. */
static int metrics_incomplete(const train_watch *u, const ptc_error *failure)
{
    return u->metrics_failed || (failure && failure->code == PTC_EIO &&
                                 strncmp(failure->message, "the metrics file ", 17) == 0);
}

/* Rank 0, after a run: a table a person reads at a glance. failure: the run's error (NULL: none);
 * a run whose only failure is an incomplete metrics file completed, any other failure marks the
 * run as failed and the files it did not write. */
void train_watch_summary(const train_watch *u, const ptc_train_params *p,
                         const ptc_train_result *res, int world, double wall,
                         const ptc_error *failure)
{
    char text[64];
    int failed = failure && !(failure->code == PTC_EIO &&
                              strncmp(failure->message, "the metrics file ", 17) == 0);
    printf("summary\n");
    if (failed)
        row("result", "failed (the error follows)");
    if (res->epochs_done < p->epochs && !failed) /* --max-steps ended the run */
        row("epochs", "%d of %d (--max-steps reached)", res->epochs_done, p->epochs);
    else if (res->epochs_done < p->epochs)
        row("epochs", "%d of %d", res->epochs_done, p->epochs);
    else
        row("epochs", "%d", res->epochs_done);
    accuracy_row(u, p);
    if (u->evals)
        row("test loss", "%s (last)", fixed(text, sizeof text, 4, u->last_test_loss));
    format_wall(text, sizeof text, wall);
    row("wall time", "%s", text);
    char steps[96]; /* this run's, and with a resumed run the checkpoint's too */
    if (u->steps < res->steps)
        snprintf(steps, sizeof steps, "%lld steps (%lld with the resumed ones)",
                 (long long)u->steps, (long long)res->steps);
    else
        snprintf(steps, sizeof steps, "%lld steps", (long long)res->steps);
    if (res->train_images_per_sec > 0)
        row("training", "%s, %.1f images/s after warm-up%s", steps, res->train_images_per_sec,
            world > 1 ? " (all processes)" : "");
    else
        row("training", "%s (too few for a rate: the first 10 are warm-up)", steps);
    if (world > 1 && res->allreduce_ms > 0) /* two measures, each against its own base */
        row("all-reduce",
            "%.1f ms per step run alone; %.1f ms per step waited for after backward (%.0f%% "
            "hidden)",
            res->allreduce_ms, res->allreduce_exposed_ms,
            100.0 * (1.0 - (res->allreduce_exposed_ms < res->allreduce_ms
                                ? res->allreduce_exposed_ms / res->allreduce_ms
                                : 1.0)));
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        cli_format_bytes(text, sizeof text, (uint64_t)ru.ru_maxrss * 1024); /* KiB on Linux */
        row("peak memory", "%s%s", text,
            world > 1 ? " (rank 0's resident set; each process has its own)" : " (resident set)");
    }
    /* The files written, one a row (a failed run: which were not). */
    struct stat st;
    row("state dict", "%s%s", p->save, failed ? " (not written: the run failed)" : "");
    if (p->checkpoint)
        row("checkpoint", "%s%s", p->checkpoint,
            failed && stat(p->checkpoint, &st) != 0 ? " (not written)"
            : p->checkpoint_all_ranks && world > 1  ? " (and .rank<r> of every rank)"
                                                    : "");
    if (p->metrics)
        row("metrics", "%s%s", p->metrics,
            metrics_incomplete(u, failure) ? " (incomplete: a write failed, see above)" : "");
    if (u->tb.w)
        row("events", "%s%s", u->tb.ops->path(u->tb.w),
            u->tb.failed ? " (incomplete: a write failed, see above)" : "");
    fflush(stdout);
}

/* ---- the commands' side ---------------------------------------------------------------------- */

train_watch *train_watch_new(int mode)
{
    train_watch *u = calloc(1, sizeof *u);
    if (u)
        u->mode = mode;
    return u;
}

void train_watch_attach(train_watch *u, ptc_train_params *p)
{
    p->log = on_log;
    p->progress = on_progress;
    p->device_status = on_device_status;
    p->scalar = on_scalar;
    p->ctx = u;
    u->epochs = p->epochs;
    u->batch = p->batch_size;
    u->max_steps = p->max_steps;
}

int train_watch_tensorboard(train_watch *u, const char *dir)
{
    int rc = tb_start(&u->tb, dir);
    if (rc == 0) {
        const char *path = u->tb.ops->path(u->tb.w);
        fputs("tensorboard: ", stdout); /* the user's path, escaped as the summary's row has it */
        cli_escape_put(stdout, path, strlen(path), 0);
        fputs(" (view: tensorboard --logdir ", stdout);
        cli_escape_put(stdout, dir, strlen(dir), 0);
        fputs(")\n", stdout);
        fflush(stdout);
    }
    return rc;
}

void train_watch_end_progress(train_watch *u)
{
    if (u->started)
        cli_progress_end(&u->bar);
    u->started = 0;
}

int train_watch_free(train_watch *u)
{
    if (!u)
        return 0;
    train_watch_end_progress(u);
    int status = tb_finish(&u->tb);
    free(u->past);
    free(u);
    return status;
}
