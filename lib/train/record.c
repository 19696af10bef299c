/*
 * record.c - the records of a training run: the metrics file's lines and the scalar callback,
 * from one place (see record.h).
 */
#include "train/record.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES 2048 /* one record: a dozen members and the GPU's few */

int ptc__recorder_open(ptc__recorder *rec, const ptc_train_params *p, int rank, int world,
                       bool append, ptc_error *err)
{
    *rec = (ptc__recorder){.on = rank == 0, .world = world};
    if (!rec->on)
        return 0;
    rec->scalar = p->scalar;
    rec->ctx = p->ctx;
    rec->log_every = p->log_every > 0 ? p->log_every : 0;
    if (p->metrics && !(rec->metrics = fopen(p->metrics, append ? "a" : "w")))
        return ptc__err(err, PTC_EIO, "", -1, "cannot write %s", p->metrics);
    return 0;
}

void ptc__recorder_close(ptc__recorder *rec)
{
    if (rec->metrics)
        fclose(rec->metrics);
    rec->metrics = NULL;
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
    if (!rec->on || (!rec->metrics && !rec->scalar))
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
    if (rec->metrics) {
        fputs(line, rec->metrics);
        fputc('\n', rec->metrics);
        fflush(rec->metrics);
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
