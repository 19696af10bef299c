/*
 * evaluate.h - the evaluation of a training run (evaluate.c) and the pieces train.c shares with
 * it.
 */
#ifndef PTC_TRAIN_EVALUATE_H
#define PTC_TRAIN_EVALUATE_H

#include "backend/backend.h"
#include "data/data.h"
#include "nn/nn.h"

/* Seconds on the monotonic clock. */
double ptc__train_now(void);

/* Forward of a loader batch: its float images written to the model's input, or, with im, the
 * images made by the backend from the uint8 dataset im and the batch's draws (train: training
 * mode; logits may be NULL on a backend that keeps them). */
int ptc__train_forward_batch(ptc__model *m, const ptc__bimg *im, const ptc__normalizer *nz,
                             const ptc__batch *b, int train, float *logits, ptc_error *err);

/* A loss sum, correct count and image count summed over every rank of comm (unchanged when comm
 * is NULL or of one rank): an epoch's training totals, an evaluation's. */
int ptc__train_totals(ptc_comm *comm, double *loss_sum, int64_t *right, int64_t *seen,
                      ptc_error *err);

/* The test split of d, sharded over the ranks without padding (rank r takes r, r + world, ...),
 * in batches of batch; the counts and the loss sum are all-reduced, so every rank gets *acc, *loss
 * and *count over every image once; *ips: this rank's images per second. */
int ptc__train_evaluate(ptc__model *m, const ptc__dataset *d, const ptc__bimg *im,
                        const ptc__normalizer *nz, int batch, ptc_comm *comm, double *acc,
                        double *loss, int64_t *count, double *ips, ptc_error *err);

#endif /* PTC_TRAIN_EVALUATE_H */
