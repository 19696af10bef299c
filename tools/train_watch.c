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

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
    int64_t best_epoch, last_epoch;
};

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
        snprintf(u->loss, sizeof u->loss, "loss %.4f", loss);
    }
    cli_progress_update(&u->bar, (uint64_t)done);
}

/* lib/train's records (ptc_train_params.scalar: every tag at its step, rank 0), each as the
 * metrics file has it. This keeps what the end-of-run summary needs; the --tensorboard writer
 * takes the same four arguments, forwarded from here. Kept small on purpose. */
static void on_scalar(void *ctx, const char *tag, int64_t step, double value)
{
    train_watch *u = ctx;
    tb_scalar(&u->tb, tag, step, value);     /* nothing without --tensorboard */
    if (strcmp(tag, "test/accuracy") == 0) { /* step: the epoch */
        if (!u->evals || value > u->best_acc) {
            u->best_acc = value;
            u->best_epoch = step;
        }
        u->last_acc = value;
        u->last_epoch = step;
        u->evals++;
    } else if (strcmp(tag, "test/loss") == 0) {
        u->last_test_loss = value;
    }
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

/* Rank 0, after a run that completed: a table a person reads at a glance. */
void train_watch_summary(const train_watch *u, const ptc_train_params *p,
                         const ptc_train_result *res, int world, double wall)
{
    char text[64];
    printf("summary\n");
    if (res->epochs_done < p->epochs) /* --max-steps ended the run */
        row("epochs", "%d of %d (--max-steps reached)", res->epochs_done, p->epochs);
    else
        row("epochs", "%d", res->epochs_done);
    if (u->evals)
        row("test accuracy", "best %.2f%% (epoch %lld), last %.2f%% (epoch %lld)",
            100.0 * u->best_acc, (long long)u->best_epoch, 100.0 * u->last_acc,
            (long long)u->last_epoch);
    else
        row("test accuracy", "none (no evaluation ran)");
    if (u->evals)
        row("test loss", "%.4f (last)", u->last_test_loss);
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
    if (world > 1 && res->allreduce_ms > 0)
        row("all-reduce",
            "%.1f ms per step alone, %.1f ms of it not hidden behind backward (%.0f%% hidden)",
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
    /* The files written, one a row. */
    row("state dict", "%s", p->save);
    if (p->checkpoint)
        row("checkpoint", "%s%s", p->checkpoint,
            p->checkpoint_all_ranks && world > 1 ? " (and .rank<r> of every rank)" : "");
    if (p->metrics)
        row("metrics", "%s", p->metrics);
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
        printf("tensorboard: %s (view: tensorboard --logdir %s)\n", u->tb.ops->path(u->tb.w), dir);
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
    free(u);
    return status;
}
