/*
 * loader.c - one producer thread that turns an epoch's index list into normalized float32 batches
 * (with draws_only: the indices and random choices a device backend makes them from), a ring of
 * nbuffers batches ahead of one consumer (the contract is in data.h).
 *
 * The ring: batch b of the epoch always goes to slot b mod K. Each slot is FREE (the producer may
 * fill it), READY (filled, waiting for the consumer) or HELD (handed out, until released). The
 * producer fills batches in order, each only once its slot is FREE; the consumer takes them in
 * order, each once its slot is READY. One mutex guards the states and two condition variables
 * wake the producer (a slot became FREE, or stop) and the consumer (a slot became READY, or the
 * producer failed). A slot is filled outside the lock: while it is not FREE nobody else touches
 * it, and the state change under the lock publishes its contents.
 *
 * Nothing in a batch depends on timing: sample i's pixels come from the dataset, its index and
 * (seed, rank, epoch) only (ptc__augment_draw), so the same inputs give the same bits whichever
 * way the two threads interleave.
 */
#include "data/data.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define MAX_BUFFERS 64

typedef enum slot_state { SLOT_FREE, SLOT_READY, SLOT_HELD } slot_state;

struct ptc__loader {
    ptc__loader_params p;
    ptc__normalizer nz;
    int nbuffers;
    int64_t nbatches;
    ptc__batch slots[MAX_BUFFERS];
    slot_state state[MAX_BUFFERS];

    pthread_mutex_t mu;
    pthread_cond_t can_fill; /* producer waits: a slot became FREE, or stop */
    pthread_cond_t can_take; /* consumer waits: a slot became READY, or failure */
    bool stop;               /* under mu */
    int64_t consumed;        /* batches handed out; consumer only */
    int fail_rc;             /* under mu: the producer's failure, 0 if none */
    int64_t fail_batch;      /* under mu: the batch it failed on */
    ptc_error fail_err;      /* written by the producer before fail_rc is set */
    bool started;
    pthread_t thread;
};

static void *buf_alloc(const ptc__loader_params *p, size_t size)
{
    return p->alloc ? p->alloc(p->alloc_ctx, size) : ptc__malloc(size);
}

static void buf_free(const ptc__loader_params *p, void *ptr)
{
    if (!ptr)
        return;
    if (p->free)
        p->free(p->alloc_ctx, ptr);
    else
        ptc__free(ptr);
}

/* Fills slot for batch b; PTC_EINVAL for an index outside the split. */
static int fill(ptc__loader *l, ptc__batch *bt, int64_t b, ptc_error *err)
{
    const ptc__loader_params *p = &l->p;
    int64_t first = b * p->batch_size;
    int64_t n = p->nindices - first < p->batch_size ? p->nindices - first : p->batch_size;
    bt->n = (int)n;
    bt->number = b;
    bt->first = first;
    bt->indices = p->indices + first;
    for (int64_t i = 0; i < n; i++) {
        int64_t idx = p->indices[first + i];
        if (idx < 0 || idx >= p->split->n)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "index list position %lld: sample index %lld is outside the split "
                            "of %lld samples",
                            (long long)(first + i), (long long)idx, (long long)p->split->n);
        bt->labels[i] = p->split->labels[idx];
        if (p->draws_only) {
            int top = 4, left = 4;
            bool flip = false;
            if (p->augment)
                ptc__augment_draw(p->seed, p->rank, p->epoch, idx, &top, &left, &flip);
            bt->sample[i] = (int32_t)idx; /* < split->n <= PTC__DATA_MAX_SAMPLES (checked) */
            bt->top[i] = (int8_t)top;
            bt->left[i] = (int8_t)left;
            bt->flip[i] = flip;
            continue;
        }
        const uint8_t *src = p->split->images + (size_t)idx * PTC__DATA_PIXELS;
        float *dst = bt->images + (size_t)i * PTC__DATA_PIXELS;
        int top = 4, left = 4;
        bool flip = false;
        if (p->augment)
            ptc__augment_draw(p->seed, p->rank, p->epoch, idx, &top, &left, &flip);
        ptc__augment_image(&l->nz, src, top, left, flip, dst);
    }
    return 0;
}

static void *producer(void *arg)
{
    ptc__loader *l = arg;
    for (int64_t b = 0; b < l->nbatches; b++) {
        int s = (int)(b % l->nbuffers);
        pthread_mutex_lock(&l->mu);
        while (!l->stop && l->state[s] != SLOT_FREE)
            pthread_cond_wait(&l->can_fill, &l->mu);
        bool stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            return NULL;

        int rc = fill(l, &l->slots[s], b, &l->fail_err);

        pthread_mutex_lock(&l->mu);
        if (rc < 0) {
            l->fail_rc = rc;
            l->fail_batch = b;
        } else {
            l->state[s] = SLOT_READY;
        }
        pthread_cond_broadcast(&l->can_take);
        pthread_mutex_unlock(&l->mu);
        if (rc < 0)
            return NULL;
    }
    return NULL;
}

static int check_params(const ptc__loader_params *p, ptc_error *err)
{
    if (!p->split || (p->split->n > 0 && (!p->split->images || !p->split->labels)))
        return ptc__err(err, PTC_EINVAL, "", -1, "loader: no dataset split");
    if (p->nindices < 0 || (p->nindices > 0 && !p->indices))
        return ptc__err(err, PTC_EINVAL, "", -1, "loader: no index list");
    if (p->batch_size < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "loader: batch size %d is not positive",
                        p->batch_size);
    if (p->nbuffers < 0 || p->nbuffers > MAX_BUFFERS)
        return ptc__err(err, PTC_EINVAL, "", -1, "loader: %d buffers (1 to %d)", p->nbuffers,
                        MAX_BUFFERS);
    if (p->draws_only && p->split->n > INT32_MAX)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "loader: %lld samples do not fit the int32 indices of draws_only",
                        (long long)p->split->n);
    if (!p->alloc != !p->free)
        return ptc__err(err, PTC_EINVAL, "", -1, "loader: alloc and free go together");
    for (int c = 0; c < 3; c++)
        if (!isfinite(p->mean[c]) || !isfinite(p->std[c]) || (float)p->std[c] == 0.0f)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "loader: channel %d: mean %g and std %g must be finite, std non-zero",
                            c, p->mean[c], p->std[c]);
    return 0;
}

static void loader_free(ptc__loader *l)
{
    for (int s = 0; s < l->nbuffers; s++) {
        buf_free(&l->p, l->slots[s].images);
        buf_free(&l->p, l->slots[s].labels);
        ptc__free(l->slots[s].sample);
        ptc__free(l->slots[s].top);
        ptc__free(l->slots[s].left);
        ptc__free(l->slots[s].flip);
    }
    pthread_cond_destroy(&l->can_take);
    pthread_cond_destroy(&l->can_fill);
    pthread_mutex_destroy(&l->mu);
    ptc__free(l);
}

int ptc__loader_start(ptc__loader **out, const ptc__loader_params *p, ptc_error *err)
{
    if (!out || !p)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__loader_start: NULL argument");
    *out = NULL;
    int rc = check_params(p, err);
    if (rc < 0)
        return rc;
    size_t B = (size_t)p->batch_size;
    uint64_t image_bytes;
    if (!ptc__mul_u64_ok(B, PTC__DATA_PIXELS * sizeof(float), &image_bytes) ||
        image_bytes > SIZE_MAX)
        return ptc__err(err, PTC_EINVAL, "", -1, "loader: batch size %d is too large",
                        p->batch_size);

    ptc__loader *l = ptc__calloc(1, sizeof *l);
    if (!l)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for a loader");
    l->p = *p;
    l->nbuffers = p->nbuffers ? p->nbuffers : 2;
    l->nbatches = p->nindices / p->batch_size + (p->nindices % p->batch_size != 0);
    ptc__err_clear(&l->fail_err);
    ptc__normalizer_init(&l->nz, p->mean, p->std);
    /* The primitives are initialised before anything can fail, so loader_free may destroy them. */
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->can_fill, NULL);
    pthread_cond_init(&l->can_take, NULL);
    for (int s = 0; s < l->nbuffers; s++) {
        l->slots[s].owner = l;
        l->slots[s].slot = s;
        ptc__batch *bt = &l->slots[s];
        bool ok;
        if (p->draws_only) {
            bt->labels = buf_alloc(p, B * sizeof(int64_t));
            bt->sample = ptc__malloc(B * sizeof *bt->sample);
            bt->top = ptc__malloc(B);
            bt->left = ptc__malloc(B);
            bt->flip = ptc__malloc(B);
            ok = bt->labels && bt->sample && bt->top && bt->left && bt->flip;
        } else {
            bt->images = buf_alloc(p, (size_t)image_bytes);
            bt->labels = buf_alloc(p, B * sizeof(int64_t));
            ok = bt->images && bt->labels;
        }
        if (!ok) {
            rc =
                ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %d batch buffers of %d images",
                         l->nbuffers, p->batch_size);
            loader_free(l);
            return rc;
        }
    }
    int e = pthread_create(&l->thread, NULL, producer, l);
    if (e != 0) {
        loader_free(l);
        return ptc__err(err, PTC_EIO, "", -1, "cannot start the loader thread: %s", strerror(e));
    }
    l->started = true;
    *out = l;
    return 0;
}

int ptc__loader_next(ptc__loader *l, ptc__batch **out, ptc_error *err)
{
    if (!l || !out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__loader_next: NULL argument");
    *out = NULL;
    if (l->consumed >= l->nbatches)
        return 0;
    int s = (int)(l->consumed % l->nbuffers);
    int rc = 1;
    pthread_mutex_lock(&l->mu);
    if (l->state[s] == SLOT_HELD) {
        pthread_mutex_unlock(&l->mu);
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "loader: all %d buffers are held; release a batch before taking another",
                        l->nbuffers);
    }
    while (l->state[s] != SLOT_READY && !(l->fail_rc < 0 && l->fail_batch <= l->consumed))
        pthread_cond_wait(&l->can_take, &l->mu);
    if (l->state[s] == SLOT_READY) {
        l->state[s] = SLOT_HELD;
        l->consumed++;
        *out = &l->slots[s];
    } else {
        rc = l->fail_rc;
        if (err)
            *err = l->fail_err;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void ptc__loader_release(ptc__batch *b)
{
    if (!b || !b->owner)
        return;
    ptc__loader *l = b->owner;
    pthread_mutex_lock(&l->mu);
    if (l->state[b->slot] == SLOT_HELD) {
        l->state[b->slot] = SLOT_FREE;
        pthread_cond_signal(&l->can_fill);
    }
    pthread_mutex_unlock(&l->mu);
}

void ptc__loader_stop(ptc__loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->can_fill);
    pthread_mutex_unlock(&l->mu);
    if (l->started)
        pthread_join(l->thread, NULL);
    loader_free(l);
}
