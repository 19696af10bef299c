/*
 * record.h - what a training run records, formed in one place (record.c): each record is one line
 * of the metrics file (JSON, numbers with 9 significant digits, which float32 round-trips) and the
 * same numbers, as the line prints them, to the caller's scalar callback
 * (ptc_train_params.scalar) under the tags ptc.h fixes, so that the file and the callback (and
 * the TensorBoard files ptc train writes from it) can never disagree. Rank 0 only: a recorder of
 * another rank writes and calls nothing.
 *
 * The per-step records (log_every) cover windows of steps: loss and accuracy over the images of
 * the steps since the previous step record (rank 0's own batches), the learning rate of the last
 * step, images per second since the previous record (time set aside for evaluations and
 * checkpoints left out) times the world size. Steps are fed in step order (the device-loss path
 * feeds a step when its loss arrives, one step late); a window is emitted when its last step is a
 * multiple of log_every, so the steps of an epoch's last partial window carry into the next
 * epoch's first record.
 */
#ifndef PTC_TRAIN_RECORD_H
#define PTC_TRAIN_RECORD_H

#include "base/base.h"
#include "train/gpumon.h"

#include <stdbool.h>
#include <stdint.h>

/* One member of a record. */
typedef struct ptc__rec_field {
    const char *key; /* the JSON member */
    const char *tag; /* the scalar's tag; NULL: in the file only */
    double value;
    bool integer;     /* printed as an integer (counts, bytes), else with %.9g */
    double tag_scale; /* the scalar is the printed value times this (0: 1), for a unit the tag
                         names (gpu/memory_used_gib of gpu_mem_used_bytes) */
} ptc__rec_field;

typedef struct ptc__recorder {
    bool on;          /* rank 0 */
    int metrics;      /* the metrics file's descriptor, -1: none (or closed) */
    const char *path; /* its name (the caller's string) */
    int64_t size;     /* its length: every record in it is whole */
    /* The first write that failed: the file was cut back to its last whole record and no more are
     * written; the run goes on and ptc_train reports it at the end (PTC_EIO). */
    bool failed;
    char why[320];
    void (*log)(void *ctx, const char *line);
    void (*scalar)(void *ctx, const char *tag, int64_t step, double value);
    void *ctx;
    int64_t log_every;
    int world;
    /* the window of the next step record */
    double loss_sum;
    int64_t right, seen;
    double t0; /* when the window started (moved on by the time set aside) */
} ptc__recorder;

/* Opens rank 0's recorder from p (metrics file appended to with append, else truncated; scalar,
 * log, ctx, log_every). Appending, a last line without its newline (a run that ended while
 * writing it) is cut off first. Other ranks get a recorder that does nothing. PTC_EIO when the
 * metrics file cannot be opened. */
int ptc__recorder_open(ptc__recorder *rec, const ptc_train_params *p, int rank, int world,
                       bool append, ptc_error *err);
void ptc__recorder_close(ptc__recorder *rec);
/* PTC_EIO when a write of the metrics file failed (the file is incomplete; err says where and
 * why), else 0. */
int ptc__recorder_status(const ptc__recorder *rec, ptc_error *err);

/* {"event": EVENT[, "epoch": epoch][, "step": step], fields..., extra}: epoch < 0 or step < 0
 * leave the member out; extra is raw JSON members, each with a leading ", " (NULL: none). Each
 * tagged field goes to the scalar callback at tag_step, with the value the line prints. */
void ptc__record(ptc__recorder *rec, const char *event, int epoch, int64_t step, int64_t tag_step,
                 const ptc__rec_field *f, size_t n, const char *extra);

/* The training clock starts (the window's start). */
void ptc__recorder_start(ptc__recorder *rec, double now_s);
/* secs of work that is not training (an evaluation, a checkpoint) are left out of the window. */
void ptc__recorder_aside(ptc__recorder *rec, double secs);
/* Step `step` (global, 1-based) of epoch (0-based) is done: n images, their mean loss and correct
 * count, its learning rate, the time it was counted. Emits the "step" record when step is a
 * multiple of log_every. Steps must come in step order. */
void ptc__recorder_step(ptc__recorder *rec, int epoch, int64_t step, int n, double loss,
                        int64_t correct, double lr, double now_s);

/* The records of ptc-train(1) METRICS, each with its members and tags: */
/* after an epoch (1-based) at global step: its training totals over every rank (loss sum,
 * correct, images), its last learning rate and seconds; gpu: the epoch's GPU members ("" or
 * ptc__gpumon_json's), in the file only. */
void ptc__record_epoch(ptc__recorder *rec, int epoch, int64_t step, double loss_sum, int64_t right,
                       int64_t seen, double lr, double secs, const char *gpu);
/* after an evaluation of count images at the end of epoch (1-based) */
void ptc__record_eval(ptc__recorder *rec, int epoch, int64_t step, double accuracy, double loss,
                      int64_t count, double images_per_sec);
/* a GPU reading at a global step */
void ptc__record_gpu(ptc__recorder *rec, int epoch, int64_t step, const ptc__gpu_sample *s);
/* the file's last line: the run's figures (copy_ms: the per-step bucket copy, several ranks) */
void ptc__record_summary(ptc__recorder *rec, const ptc_train_result *res, int64_t steps, int world,
                         double copy_ms);

/* Before training: every file the run writes (save, metrics on rank 0; checkpoint on rank 0, and
 * on every rank with checkpoint_all_ranks) has a directory that exists and in which this process
 * may create files (an existing metrics file, written in place, needs only to be writable itself).
 * PTC_EIO naming the file and the reason, else 0. */
int ptc__train_check_outputs(const ptc_train_params *p, int rank, ptc_error *err);

#endif /* PTC_TRAIN_RECORD_H */
