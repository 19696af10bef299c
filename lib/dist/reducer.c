/*
 * reducer.c - the DDP reducer: gradients averaged over the ranks in buckets whose all-reduces
 * overlap backward, and the broadcasts that keep the replicas equal (see dist.h).
 *
 * Gradients as views (torch's gradient_as_bucket_view): on a host backend with tensor_bind_raw
 * every parameter's gradient is bound, once, to its slot of a bucket, so backward writes it
 * there. Per step: prepare marks every bucket empty; backward calls on_grad for each parameter as
 * its gradient becomes final; on_grad multiplies the gradient by 1 / world in place (a view) or
 * as it copies it into its slot (backends without views, device backends), and when the bucket is
 * complete it starts the all-reduce of that bucket and of every later complete one, strictly in
 * bucket order (every rank must start the same collectives in the same order). Between gradients
 * it tests the requests in flight, which is what lets MPI move them forward while backward
 * computes. finish starts whatever is left and waits for everything; a view then already holds
 * the average (the backend is only told its bytes changed), a copy is copied back. Host slots
 * start on 64-byte boundaries (zero padding between them, summed as zeros).
 *
 * Invariants: a bucket's all-reduce starts only when all of its gradients are in it; a parameter
 * is counted once per step (a second gradient for it is an error, as in torch's reducer); the
 * hook does nothing between finish and the next prepare.
 *
 * A device backend (one with raw_alloc) keeps its buckets in device memory, allocated with
 * raw_alloc, and all-reduces them over the device communicator of the params (nccl); the host
 * never touches them: the packs of a step tile a bucket exactly (offsets are the running sum of
 * the raw sizes), so no bucket needs zeroing, and the calibration sums whatever they hold. The
 * broadcasts of parameters and buffers and the layout check stay on the host communicator c: the
 * device backend packs to and unpacks from host memory too. Waiting for a device request only
 * orders the backend's stream after it, so finish's unpacks are queued, not waited for.
 */
#include "dist/dist.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOT_ALIGN 64 /* bytes: where host slots start (tensor_bind_raw's alignment) */

typedef struct slot {
    ptc__entry *e;
    int bucket;
    size_t offset, bytes; /* within the bucket */
    int ready;            /* its gradient is in the bucket this step */
} slot;

typedef struct bucket {
    size_t first, count; /* slots[first .. first + count) */
    size_t bytes;        /* the slots laid out, with the alignment padding of host buckets */
    size_t fill;         /* the gradients' own bytes, which the cap is compared with */
    void *buf;           /* host memory (64-byte aligned), or the device backend's (raw_alloc) */
    void *mem;           /* the host allocation buf lies in */
    size_t pending;      /* gradients still to come this step */
    ptc__creq *req;      /* the all-reduce in flight, or NULL */
    int started;
    size_t shm_off; /* shared memory: where the bucket lies in every rank's block */
    size_t lo, hi;  /* shared memory: the floats this rank sums for everyone */
} bucket;

struct ptc__reducer {
    ptc_comm *c;  /* layout check and broadcasts */
    ptc_comm *bc; /* the buckets' all-reduces: c, or the device communicator */
    int device;   /* buckets in device memory */
    int views;    /* gradients are views into the buckets (tensor_bind_raw) */
    ptc__model *m;
    const ptc__backend_ops *ops;
    ptc__be *be;
    slot *slots;
    size_t nslots;
    int *slot_of; /* model entry index -> slot, or -1 */
    bucket *buckets;
    int nbuckets, next;
    int active;
    double scale;        /* 1 / world */
    unsigned char *bufs; /* buffers and counters, for the broadcast before each forward */
    size_t bufs_bytes;
    ptc__reducer_stats st;
    /* All ranks on one machine, views: buckets in shared memory (see "shared memory" below) */
    int shm;
    void *shm_handle;
    bool abandoned;       /* ptc__reducer_abandon: no collective call at free */
    unsigned char **peer; /* [world]: each rank's block as seen here */
    uint64_t gen;         /* the step's number in the flags (1, 2, ...) */
    int cursor;           /* the first bucket whose share this rank has not summed this step */
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int entry_index(const ptc__reducer *r, const ptc__entry *e)
{
    return (int)(e - ptc__model_entry(r->m, 0));
}

/* ---- broadcasting entries ---------------------------------------------------------------------- */

static int entry_raw_bytes(ptc__reducer *r, const ptc__entry *e, size_t *bytes, uint64_t *layout,
                           ptc_error *err)
{
    if (e->kind == PTC__ENTRY_COUNTER) {
        *bytes = sizeof(int64_t);
        *layout = 0;
        return 0;
    }
    return r->ops->tensor_raw_size(r->be, e->value, bytes, layout, err);
}

/* Rank 0's values of the entries whose kind is in mask (bit per ptc__entry_kind) to every rank,
 * in one broadcast through scratch (NULL: a temporary buffer of the right size). */
static int bcast_entries(ptc__reducer *r, unsigned mask, unsigned char *scratch, ptc_error *err)
{
    size_t total = 0, n = ptc__model_nentries(r->m), b;
    uint64_t layout;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        ptc__entry *e = ptc__model_entry(r->m, i);
        if (!(mask & (1u << e->kind)))
            continue;
        if ((rc = entry_raw_bytes(r, e, &b, &layout, err)) < 0)
            return rc;
        total += b;
    }
    unsigned char *buf = scratch ? scratch : ptc__malloc(total ? total : 1);
    if (!buf)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for a %zu-byte broadcast", total);
    int root = r->c->rank == 0;
    for (int pass = root ? 0 : 1; pass < 2 && rc == 0; pass++) {
        if (pass == 1 && (rc = r->c->ops->bcast(r->c, buf, total, 0, err)) < 0)
            break;
        if (pass == 1 && root)
            break; /* rank 0 keeps its own values */
        size_t off = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            ptc__entry *e = ptc__model_entry(r->m, i);
            if (!(mask & (1u << e->kind)))
                continue;
            if ((rc = entry_raw_bytes(r, e, &b, &layout, err)) < 0)
                break;
            if (e->kind == PTC__ENTRY_COUNTER) {
                if (pass == 0)
                    memcpy(buf + off, e->counter, sizeof(int64_t));
                else
                    memcpy(e->counter, buf + off, sizeof(int64_t));
            } else if (pass == 0) {
                rc = r->ops->tensor_pack(r->be, e->value, buf + off, 1.0, err);
            } else {
                rc = r->ops->tensor_unpack(r->be, e->value, buf + off, err);
            }
            off += b;
        }
    }
    if (!scratch)
        ptc__free(buf);
    return rc;
}

int ptc__reducer_sync_buffers(ptc__reducer *r, ptc_error *err)
{
    if (r->c->size == 1)
        return 0;
    return bcast_entries(r, 1u << PTC__ENTRY_BUFFER | 1u << PTC__ENTRY_COUNTER, r->bufs, err);
}

/* ---- the same model everywhere ------------------------------------------------------------------ */

/* Every rank must hold the same entries laid out alike: otherwise the sums would mix unrelated
 * numbers. Each rank hashes names, kinds and raw layouts; rank 0's hash is the reference. */
static int check_alike(ptc__reducer *r, ptc_error *err)
{
    uint64_t h = ptc__fnv1a(PTC__FNV_START, r->ops->name, strlen(r->ops->name));
    size_t n = ptc__model_nentries(r->m), b;
    uint64_t layout;
    int rc;
    for (size_t i = 0; i < n; i++) {
        const ptc__entry *e = ptc__model_entry(r->m, i);
        if ((rc = entry_raw_bytes(r, e, &b, &layout, err)) < 0)
            return rc;
        const uint64_t words[3] = {(uint64_t)e->kind, (uint64_t)b, layout};
        h = ptc__fnv1a(h, e->name, strlen(e->name) + 1);
        h = ptc__fnv1a(h, words, sizeof words);
    }
    uint64_t *all = ptc__calloc((size_t)r->c->size, sizeof *all);
    if (!all)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    rc = r->c->ops->allgather(r->c, &h, all, sizeof h, err);
    for (int k = 1; rc == 0 && k < r->c->size; k++)
        if (all[k] != all[0])
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "rank %d holds the model differently from rank 0 (another architecture, "
                          "backend or CPU layout): every rank must run the same ptc with the same "
                          "--arch and --backend",
                          k);
    ptc__free(all);
    return rc;
}

/* ---- buckets ------------------------------------------------------------------------------------ */

/* torch's compute_bucket_assignment_by_size over the parameters in reverse order: a bucket takes
 * parameters until its size reaches its cap; the first cap is first_bucket_bytes, then
 * bucket_bytes. */
static int shm_alloc(ptc__reducer *r, ptc_error *err);

static int make_buckets(ptc__reducer *r, const ptc__reducer_params *p, ptc_error *err)
{
    size_t n = ptc__model_nentries(r->m), np = ptc__model_nparams(r->m);
    r->slots = ptc__calloc(np ? np : 1, sizeof *r->slots);
    r->buckets = ptc__calloc(np ? np : 1, sizeof *r->buckets);
    r->slot_of = ptc__malloc((n ? n : 1) * sizeof *r->slot_of);
    if (!r->slots || !r->buckets || !r->slot_of)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    size_t cap = p->first_bucket_bytes;
    bucket *bk = &r->buckets[0];
    for (size_t i = 0; i < n; i++)
        r->slot_of[i] = -1;
    for (size_t i = n; i-- > 0;) {
        ptc__entry *e = ptc__model_entry(r->m, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        size_t b;
        uint64_t layout;
        int rc = r->ops->tensor_raw_size(r->be, e->grad, &b, &layout, err);
        if (rc < 0)
            return rc;
        /* Host slots start on 64-byte boundaries, so that a gradient bound to its slot is
         * aligned as the backend's own tensors are; the padding between them stays zero. */
        if (!r->device)
            bk->bytes = (bk->bytes + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1);
        slot *s = &r->slots[r->nslots];
        *s = (slot){.e = e, .bucket = r->nbuckets, .offset = bk->bytes, .bytes = b};
        r->slot_of[i] = (int)r->nslots;
        if (bk->count == 0)
            bk->first = r->nslots;
        bk->count++;
        bk->bytes += b;
        bk->fill += b;
        r->nslots++;
        if (bk->fill >= cap) {
            r->nbuckets++;
            bk = &r->buckets[r->nbuckets];
            cap = p->bucket_bytes;
        }
    }
    if (bk->count)
        r->nbuckets++;
    int rc = r->shm ? shm_alloc(r, err) : PTC_EUNSUPPORTED;
    if (rc == PTC_EUNSUPPORTED)
        r->shm = 0; /* ranks on several machines: private buckets and MPI */
    else if (rc < 0)
        return rc;
    for (int k = 0; k < r->nbuckets; k++) {
        bucket *q = &r->buckets[k];
        if (r->shm) {
            /* in shared memory already */
        } else if (r->device) {
            rc = r->ops->raw_alloc(r->be, &q->buf, q->bytes, err);
            if (rc < 0)
                return rc;
        } else {
            if (!(q->mem = ptc__calloc(1, q->bytes + SLOT_ALIGN)))
                return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for a %zu-byte bucket",
                                q->bytes);
            q->buf = (void *)(((uintptr_t)q->mem + SLOT_ALIGN - 1) & ~(uintptr_t)(SLOT_ALIGN - 1));
        }
        r->st.bytes += q->fill;
    }
    r->st.nbuckets = r->nbuckets;
    return 0;
}

/* ---- shared memory ------------------------------------------------------------------------------
 *
 * When every rank runs on this machine and gradients are views, the buckets lie in memory that
 * every rank maps (the communicator's shared_alloc), and the all-reduce is done by the ranks
 * themselves, without MPI: rank r sums its share [lo, hi) of each bucket over every rank's copy,
 * in rank order, each gradient multiplied by 1 / world as it is read (so no pass of its own
 * scales them), and writes the sum into every copy. Each rank's block starts with two flags per
 * bucket, each on its own cache line: ready (this rank's gradients of the bucket are final, for
 * step gen) and done (this rank's share of the bucket is summed into every copy).
 * A rank sums a bucket's share once every rank's ready says gen, in bucket order, between the
 * layers of backward (progress) and after it (finish), and finish returns once every rank's done
 * says gen for every bucket: then no rank reads or writes another's bucket before the next step's
 * ready, so the next backward may write its gradients. For two ranks the sum is a/2 + b/2
 * (each product rounded), which is what scaling before MPI's sum gives; for more, the fixed rank order makes it the same on every rank and every run.
 * Flags are stored with release and loaded with acquire ordering. A wait yields the processor
 * (sched_yield): the rank waited for may need it. */

#define FLAG_STRIDE 64 /* bytes: one flag per cache line */

static uint64_t *flag_of(const ptc__reducer *r, int rank, int k, int which)
{
    return (uint64_t *)(r->peer[rank] + ((size_t)k * 2 + (size_t)which) * FLAG_STRIDE);
}

enum { FLAG_READY, FLAG_DONE };

static int shm_alloc(ptc__reducer *r, ptc_error *err)
{
    if (!(r->peer = ptc__calloc((size_t)r->c->size, sizeof *r->peer)))
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    size_t off = (size_t)r->nbuckets * 2 * FLAG_STRIDE;
    int world = r->c->size;
    for (int k = 0; k < r->nbuckets; k++) {
        bucket *q = &r->buckets[k];
        q->shm_off = off;
        off += (q->bytes + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1);
        /* this rank's share, on 16-float (cache line) boundaries */
        size_t n = q->bytes / 4, lines = (n + 15) / 16;
        q->lo = lines * (size_t)r->c->rank / (size_t)world * 16;
        q->hi = lines * ((size_t)r->c->rank + 1) / (size_t)world * 16;
        if (q->hi > n)
            q->hi = n;
        if (q->lo > q->hi)
            q->lo = q->hi;
    }
    int rc = r->c->ops->shared_alloc(r->c, off, (void **)r->peer, &r->shm_handle, err);
    if (rc < 0)
        return rc;
    for (int k = 0; k < r->nbuckets; k++)
        r->buckets[k].buf = r->peer[r->c->rank] + r->buckets[k].shm_off;
    return 0;
}

static int all_flags(const ptc__reducer *r, int k, int which)
{
    for (int q = 0; q < r->c->size; q++)
        if (__atomic_load_n(flag_of(r, q, k, which), __ATOMIC_ACQUIRE) != r->gen)
            return 0;
    return 1;
}

/* a = b = a x h + b x h, each product rounded before the sum (no fused multiply-add): the bits
 * of scaling each rank's gradient first and summing after. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
static void
sum2(float *restrict a, float *restrict b, float h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = a[i] * h;
        float y = b[i] * h;
        float s = x + y;
        a[i] = s;
        b[i] = s;
    }
}

/* This rank's share of bucket k: the sum over the ranks of each gradient x (float)(1 / world),
 * into every rank's copy. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
static void
shm_sum(ptc__reducer *r, int k)
{
    const bucket *q = &r->buckets[k];
    const float h = (float)r->scale; /* tensor_pack's rounding of the scale */
    int world = r->c->size;
    if (world == 2) {
        sum2((float *)(r->peer[0] + q->shm_off) + q->lo, (float *)(r->peer[1] + q->shm_off) + q->lo,
             h, q->hi - q->lo);
    } else {
        for (size_t i = q->lo; i < q->hi; i++) {
            float s = ((const float *)(r->peer[0] + q->shm_off))[i] * h;
            for (int p = 1; p < world; p++) {
                float x = ((const float *)(r->peer[p] + q->shm_off))[i] * h;
                s += x;
            }
            for (int p = 0; p < world; p++)
                ((float *)(r->peer[p] + q->shm_off))[i] = s;
        }
    }
    __atomic_store_n(flag_of(r, r->c->rank, k, FLAG_DONE), r->gen, __ATOMIC_RELEASE);
}

/* Sums the shares of every bucket from the cursor on that every rank has made ready; with wait,
 * of every launched bucket, waiting for the other ranks' ready. */
static void shm_progress(ptc__reducer *r, int wait)
{
    while (r->cursor < r->next) {
        if (!all_flags(r, r->cursor, FLAG_READY)) {
            if (!wait)
                return;
            sched_yield();
            continue;
        }
        shm_sum(r, r->cursor++);
    }
}

/* After this rank's last share: every rank's share of every bucket summed. */
static void shm_wait_done(ptc__reducer *r)
{
    for (int k = 0; k < r->nbuckets; k++)
        while (!all_flags(r, k, FLAG_DONE))
            sched_yield();
}

/* A step's all-reduce with nothing else running (the calibration). */
static void shm_allreduce_alone(ptc__reducer *r)
{
    r->gen++;
    r->cursor = 0;
    r->next = r->nbuckets;
    for (int k = 0; k < r->nbuckets; k++)
        __atomic_store_n(flag_of(r, r->c->rank, k, FLAG_READY), r->gen, __ATOMIC_RELEASE);
    shm_progress(r, 1);
    shm_wait_done(r);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The buckets all-reduced one after another with nothing else running: the communication time a
 * step would spend if none of it were hidden. One warm-up round, then the median of five. */
static int calibrate(ptc__reducer *r, ptc_error *err)
{
    double t[5];
    for (int round = -1; round < 5; round++) {
        double t0 = now();
        if (r->shm)
            shm_allreduce_alone(r);
        for (int k = 0; !r->shm && k < r->nbuckets; k++) {
            int rc = r->bc->ops->allreduce(r->bc, r->buckets[k].buf, r->buckets[k].bytes / 4,
                                           PTC__C_F32, PTC__C_SUM, err);
            if (rc < 0)
                return rc;
        }
        if (round >= 0)
            t[round] = now() - t0;
    }
    qsort(t, 5, sizeof *t, cmp_double);
    r->st.allreduce_seconds = t[2];
    for (int k = 0; !r->device && k < r->nbuckets; k++)
        memset(r->buckets[k].buf, 0, r->buckets[k].bytes);
    return 0;
}

/* Every gradient becomes a view into its slot (torch's gradient_as_bucket_view): the backward
 * writes it there, on_grad scales it in place and the all-reduce sums it where it lies, so that
 * no gradient is copied into a bucket or back. raw NULL gives every gradient its own storage
 * back (with its current values), as the reducer leaves the model. */
static int bind_views(ptc__reducer *r, int on, ptc_error *err)
{
    int rc = 0;
    for (size_t i = 0; i < r->nslots; i++) {
        slot *s = &r->slots[i];
        void *raw = on ? (unsigned char *)r->buckets[s->bucket].buf + s->offset : NULL;
        int brc = r->ops->tensor_bind_raw(r->be, s->e->grad, raw, err);
        if (rc == 0)
            rc = brc; /* unbinding goes on past a failure: no gradient may keep a freed bucket */
    }
    return rc;
}

/* ---- a step ------------------------------------------------------------------------------------- */

/* Starts the all-reduce of every complete bucket from r->next on, in order. */
static int launch_ready(ptc__reducer *r, ptc_error *err)
{
    while (r->next < r->nbuckets && r->buckets[r->next].pending == 0) {
        bucket *q = &r->buckets[r->next];
        if (r->shm) {
            __atomic_store_n(flag_of(r, r->c->rank, r->next, FLAG_READY), r->gen, __ATOMIC_RELEASE);
            q->started = 1;
            r->next++;
            continue;
        }
        int rc = r->bc->ops->iallreduce(r->bc, q->buf, q->bytes / 4, PTC__C_F32, PTC__C_SUM,
                                        &q->req, err);
        if (rc < 0)
            return rc;
        q->started = 1;
        r->next++;
    }
    return 0;
}

/* Lets MPI move the collectives in flight forward. */
static int progress(ptc__reducer *r, ptc_error *err)
{
    if (r->shm) {
        shm_progress(r, 0);
        return 0;
    }
    for (int k = 0; k < r->next; k++) {
        bucket *q = &r->buckets[k];
        int done;
        if (q->req && !q->req->done) {
            int rc = r->bc->ops->test(r->bc, q->req, &done, err);
            if (rc < 0)
                return rc;
            if (!done)
                break; /* later ones were started after it; MPI completes them in order anyway */
        }
    }
    return 0;
}

static int on_grad(void *ctx, ptc__entry *e, ptc_error *err)
{
    ptc__reducer *r = ctx;
    if (!r->active)
        return 0;
    int si = r->slot_of[entry_index(r, e)];
    if (si < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "reducer: %s is not a parameter", e->name);
    slot *s = &r->slots[si];
    if (s->ready)
        return ptc__err(err, PTC_EINVAL, "", -1, "reducer: %s got a second gradient in one step",
                        e->name);
    bucket *q = &r->buckets[s->bucket];
    double t0 = now();
    /* A view is scaled where it lies (the same x * (float)(1 / world) as the copy's); in shared
     * memory the sum scales each rank's gradient as it reads it (shm_sum). */
    int rc = r->views && (r->scale == 1.0 || r->shm)
                 ? 0
                 : r->ops->tensor_pack(r->be, e->grad, (unsigned char *)q->buf + s->offset,
                                       r->scale, err);
    r->st.pack_seconds += now() - t0;
    if (rc < 0)
        return rc;
    s->ready = 1;
    q->pending--;
    if (q->pending == 0 && (rc = launch_ready(r, err)) < 0)
        return rc;
    return progress(r, err);
}

void ptc__reducer_prepare(ptc__reducer *r)
{
    for (size_t i = 0; i < r->nslots; i++)
        r->slots[i].ready = 0;
    for (int k = 0; k < r->nbuckets; k++) {
        r->buckets[k].pending = r->buckets[k].count;
        r->buckets[k].started = 0;
    }
    r->next = 0;
    r->cursor = 0;
    r->gen++;
    r->active = 1;
}

int ptc__reducer_finish(ptc__reducer *r, ptc_error *err)
{
    int rc = 0;
    r->active = 0;
    for (size_t i = 0; i < r->nslots && rc == 0; i++)
        if (!r->slots[i].ready)
            rc = ptc__err(err, PTC_EINVAL, "", -1,
                          "reducer: %s got no gradient in this step's backward",
                          r->slots[i].e->name);
    /* Every request is waited for, also after an error, so that none is left in flight. */
    double t0 = now();
    if (r->shm && rc == 0 && r->next == r->nbuckets) {
        shm_progress(r, 1);
        shm_wait_done(r);
    }
    for (int k = 0; k < r->nbuckets; k++) {
        bucket *q = &r->buckets[k];
        if (!q->req)
            continue;
        int wrc = r->bc->ops->wait(r->bc, q->req, err);
        q->req = NULL;
        if (rc == 0)
            rc = wrc;
    }
    double t1 = now();
    if (rc < 0)
        return rc;
    if (r->next != r->nbuckets)
        return ptc__err(err, PTC_EINVAL, "", -1, "reducer: %d of %d buckets never started",
                        r->nbuckets - r->next, r->nbuckets);
    for (size_t i = 0; i < r->nslots && rc == 0; i++) {
        slot *s = &r->slots[i];
        void *raw = (unsigned char *)r->buckets[s->bucket].buf + s->offset;
        /* a view: the sums are already the gradient; the backend only learns that its bytes
         * changed behind its back */
        rc = r->views ? r->ops->tensor_bind_raw(r->be, s->e->grad, raw, err)
                      : r->ops->tensor_unpack(r->be, s->e->grad, raw, err);
    }
    r->st.exposed_seconds += t1 - t0;
    r->st.pack_seconds += now() - t1;
    r->st.steps++;
    return rc;
}

void ptc__reducer_get_stats(const ptc__reducer *r, ptc__reducer_stats *out)
{
    *out = r->st;
}

/* ---- life --------------------------------------------------------------------------------------- */

int ptc__reducer_new(ptc__reducer **out, ptc_comm *c, ptc__model *m, const ptc__reducer_params *p,
                     ptc_error *err)
{
    *out = NULL;
    if (!c || !m || !p || p->first_bucket_bytes == 0 || p->bucket_bytes == 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__reducer_new: invalid arguments");
    ptc__reducer *r = ptc__calloc(1, sizeof *r);
    if (!r)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    r->c = c;
    r->m = m;
    r->ops = ptc__model_ops(m);
    r->be = ptc__model_be(m);
    r->scale = 1.0 / (double)c->size;
    r->device = r->ops->raw_alloc != NULL;
    r->views = !r->device && r->ops->tensor_bind_raw != NULL && c->size > 1;
    r->shm = r->views && c->ops->shared_alloc != NULL;
    r->bc = r->device && p->device_comm ? p->device_comm : c;
    int rc = 0;
    if (r->device && !p->device_comm && c->size > 1)
        rc = ptc__err(err, PTC_EINVAL, "", -1,
                      "backend %s keeps gradients in device memory: its buckets need a device "
                      "communicator (nccl), not %s",
                      r->ops->name, c->ops->name);
    else if (!r->device && p->device_comm)
        rc = ptc__err(err, PTC_EINVAL, "", -1,
                      "a device communicator needs a device backend, not %s", r->ops->name);
    else if (r->bc->size != c->size || r->bc->rank != c->rank)
        rc = ptc__err(err, PTC_EINVAL, "", -1,
                      "the device communicator (rank %d of %d) is not over the ranks of the host "
                      "one (rank %d of %d)",
                      r->bc->rank, r->bc->size, c->rank, c->size);
    if (rc < 0)
        goto fail;
    rc = check_alike(r, err);
    if (rc == 0)
        rc = make_buckets(r, p, err);
    /* scratch for the broadcast of buffers before each forward */
    size_t n = ptc__model_nentries(m), b;
    uint64_t layout;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ptc__entry *e = ptc__model_entry(m, i);
        if (e->kind != PTC__ENTRY_PARAM && (rc = entry_raw_bytes(r, e, &b, &layout, err)) == 0)
            r->bufs_bytes += b;
    }
    if (rc == 0 && !(r->bufs = ptc__malloc(r->bufs_bytes ? r->bufs_bytes : 1)))
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    if (rc == 0 && c->size > 1)
        rc = bcast_entries(
            r, 1u << PTC__ENTRY_PARAM | 1u << PTC__ENTRY_BUFFER | 1u << PTC__ENTRY_COUNTER, NULL,
            err);
    if (rc == 0 && c->size > 1)
        rc = calibrate(r, err);
    if (rc == 0 && r->views && (rc = bind_views(r, 1, err)) < 0)
        bind_views(r, 0, NULL);
    if (rc < 0)
        goto fail;
    ptc__model_set_grad_hook(m, on_grad, r);
    *out = r;
    return 0;
fail:
    ptc__reducer_free(r);
    return rc;
}

void ptc__reducer_abandon(ptc__reducer *r)
{
    if (r)
        r->abandoned = true;
}

void ptc__reducer_free(ptc__reducer *r)
{
    if (!r)
        return;
    ptc__model_set_grad_hook(r->m, NULL, NULL);
    /* the waits first: an all-reduce in flight may still write the views' bytes */
    for (int k = 0; k < r->nbuckets; k++)
        if (r->buckets[k].req) {
            r->bc->ops->wait(r->bc, r->buckets[k].req, NULL);
            r->buckets[k].req = NULL;
        }
    if (r->views)
        bind_views(r, 0, NULL);
    for (int k = 0; k < r->nbuckets; k++) {
        if (r->device)
            r->ops->raw_free(r->be, r->buckets[k].buf);
        else
            ptc__free(r->buckets[k].mem);
    }
    if (r->shm_handle && !r->abandoned)
        r->c->ops->shared_free(r->c, r->shm_handle);
    ptc__free(r->peer);
    ptc__free(r->buckets);
    ptc__free(r->slots);
    ptc__free(r->slot_of);
    ptc__free(r->bufs);
    ptc__free(r);
}
