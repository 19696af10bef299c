/*
 * evaluate.c - the test split's accuracy and loss, and what training shares with it: the forward
 * of a loader batch and the totals over every rank (see evaluate.h).
 */
#include "train/evaluate.h"

#include "dist/dist.h"

#include <string.h>
#include <time.h>

double ptc__train_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Forward of a loader batch: its float images written to the model's input, or, with im, the
 * images made by the backend from the uint8 dataset im and the batch's draws. */
int ptc__train_forward_batch(ptc__model *m, const ptc__bimg *im, const ptc__normalizer *nz,
                             const ptc__batch *b, int train, float *logits, ptc_error *err)
{
    if (!im)
        return ptc__model_forward(m, b->images, b->n, train, logits, err);
    ptc__bt *x;
    int rc = ptc__model_input(m, b->n, &x, err);
    if (rc == 0)
        rc = ptc__model_ops(m)->images_batch(ptc__model_be(m), im, b->sample, b->top, b->left,
                                             b->flip, b->n, &nz->lut[0][0], x, err);
    return rc < 0 ? rc : ptc__model_forward_filled(m, b->n, train, logits, err);
}

/* A loss sum, correct count and image count over every rank (each rank's own when alone): an
 * epoch's training totals, an evaluation's. */
int ptc__train_totals(ptc_comm *comm, double *loss_sum, int64_t *right, int64_t *seen,
                      ptc_error *err)
{
    if (!comm || comm->size == 1)
        return 0;
    int64_t counts[2] = {*right, *seen};
    int rc = comm->ops->allreduce(comm, counts, 2, PTC__C_I64, PTC__C_SUM, err);
    if (rc == 0)
        rc = comm->ops->allreduce(comm, loss_sum, 1, PTC__C_F64, PTC__C_SUM, err);
    *right = counts[0];
    *seen = counts[1];
    return rc;
}

/* The test split, sharded over the ranks without padding (rank r takes r, r + world, ...); the
 * counts and the loss sum are all-reduced, so every rank gets the totals over every image once. */
int ptc__train_evaluate(ptc__model *m, const ptc__dataset *d, const ptc__bimg *im,
                        const ptc__normalizer *nz, int batch, ptc_comm *comm, double *acc,
                        double *loss, int64_t *count, double *ips, ptc_error *err)
{
    int64_t *idx = NULL, n = 0;
    ptc__loader *l = NULL;
    float *logits = NULL;
    double t0 = 0, total = 0;
    int64_t right = 0, seen = 0;
    int rc = ptc__eval_shard(d->test.n, ptc_comm_size(comm), ptc_comm_rank(comm), &idx, &n, err);
    if (rc < 0)
        goto out;
    ptc__loader_params lp = {.split = &d->test,
                             .indices = idx,
                             .nindices = n,
                             .batch_size = batch,
                             .nbuffers = 2,
                             .augment = false,
                             .draws_only = im != NULL};
    memcpy(lp.mean, d->norm_mean, sizeof lp.mean);
    memcpy(lp.std, d->norm_std, sizeof lp.std);
    if (!(logits = ptc__malloc((size_t)batch * (size_t)d->classes * sizeof *logits))) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        goto out;
    }
    if ((rc = ptc__loader_start(&l, &lp, err)) < 0)
        goto out;
    t0 = ptc__train_now();
    ptc__batch *b;
    while ((rc = ptc__loader_next(l, &b, err)) > 0) {
        double bl = 0;
        int64_t bc = 0;
        rc = ptc__train_forward_batch(m, im, nz, b, 0, logits, err);
        if (rc == 0)
            rc = ptc__cross_entropy(logits, b->labels, b->n, d->classes, &bl, NULL, &bc, err);
        int bn = b->n;
        ptc__loader_release(b);
        if (rc < 0)
            break;
        total += bl * bn; /* the batch mean times its size: the sum over samples */
        right += bc;
        seen += bn;
    }
    if (rc < 0 || (rc = ptc__train_totals(comm, &total, &right, &seen, err)) < 0)
        goto out;
    double dt = ptc__train_now() - t0;
    *count = seen;
    *acc = seen ? (double)right / (double)seen : 0;
    *loss = seen ? total / (double)seen : 0;
    *ips = dt > 0 ? (double)seen / dt : 0;
out:
    ptc__loader_stop(l);
    ptc__free(logits);
    ptc__free(idx);
    return rc;
}
