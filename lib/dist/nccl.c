/*
 * nccl.c - the nccl device communicator, module comm-nccl.so (see dist.h and plugin.h).
 *
 * One NCCL communicator over the ranks of a host communicator (mpi; single at world 1), on the
 * device of a device backend instance. Its unique id is made on rank 0 and broadcast over the
 * host communicator; before ncclCommInitRank every rank tells every other whether it got this far
 * (an allgather on the host communicator), so that a rank without a GPU makes every rank fail with
 * its name instead of leaving the others inside ncclCommInitRank.
 *
 * Streams. The collectives run on a stream of the communicator's own (highest priority, so that
 * they are scheduled between the backward kernels they overlap). A collective on device buffers
 * is ordered after everything queued so far on the backend's stream: an event recorded there,
 * which the own stream waits for. A request's completion is another event, recorded after the
 * collective on the own stream; ptc__comm_wait makes the backend's stream wait for it (the
 * reducer's unpack, queued next on the backend's stream, then reads the sums) and returns without
 * blocking the host. Blocking collectives wait on the host for their completion event.
 *
 * Host buffers (found with cudaPointerGetAttributes: anything that is not device memory) are
 * staged through a device buffer of the communicator's own: copied in, reduced there, and copied
 * back only once the collective has finished (a copy to pageable memory blocks the host until the
 * stream reaches it, which would hide a dead peer from the time-out below).
 *
 * A dead peer. NCCL kernels wait forever for a peer that is gone. Every blocking wait polls its
 * event together with ncclCommGetAsyncError, and a watchdog thread polls the completion of every
 * collective in flight (a copy of its completion event) the same way: one not finished within
 * NCCL_TIMEOUT_S, or an asynchronous NCCL error, aborts the communicator (ncclCommAbort, which
 * also ends the kernels that wait) and records why; every later call returns that message, naming
 * this rank and the collective. The watchdog is what ends a wait that the backend blocks in (a
 * copy of the loss to the host, queued after the reducer's unpack), where no call of this file
 * runs. The mutex serialises NCCL calls with the abort, after which the ncclComm_t is gone.
 *
 * Every CUDA and NCCL call goes through TRY, which records the call, the line and the library's
 * own message.
 */
#include "config.h"

#include "base/module.h"
#include "dist/dist.h"
#include "dist/nccl.h"

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions with () instead of (void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NCCL_TIMEOUT_S 30.0
/* The most collectives watched at once, and the most idle events kept for reuse. A training step
 * has a few in flight (one per gradient bucket) and the watcher retires them as they complete;
 * more than this means completions are not being observed, and the next collective fails with
 * PTC_ELIMIT instead of the list growing without end. */
#define NCCL_MAX_WATCHES 65536
#define MSG_MAX          512 /* ptc_error's message */

/* A collective in flight, watched by the watchdog (its own copy of the completion event). */
typedef struct watch {
    cudaEvent_t ev;
    double t0;
    size_t bytes;
    const char *what;
} watch;

typedef struct nccl_impl {
    ncclComm_t nc;          /* NULL once aborted or destroyed */
    ptc_comm *host;         /* borrowed: the bootstrap, and what abort ends */
    cudaStream_t be_stream; /* borrowed: the backend's */
    cudaStream_t stream;    /* own */
    int device;
    cudaEvent_t ready, done; /* for blocking collectives */
    void *stage;             /* device memory for host buffers */
    size_t stage_bytes;
    double timeout;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int aborted, stopping;
    char why[MSG_MAX];
    watch *w;
    size_t nw, capw;
    cudaEvent_t *pool; /* idle events */
    size_t npool, cappool;
    pthread_t thread;
    int thread_on;
} nccl_impl;

typedef struct nccl_req {
    ptc__creq base;
    cudaEvent_t ev; /* completion; NULL when it finished before iallreduce returned */
    size_t bytes;
} nccl_req;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static nccl_impl *impl_of(ptc_comm *c)
{
    return c->impl;
}

/* ---- errors ------------------------------------------------------------------------------------ */

enum { LIB_CUDA, LIB_NCCL };

static int lib_fail(ptc_error *err, int rank, int lib, int code, const char *call, int line)
{
    const char *text = lib == LIB_CUDA ? cudaGetErrorString((cudaError_t)code)
                                       : ncclGetErrorString((ncclResult_t)code);
    return ptc__err(err, PTC_ECOMM, "", -1, "rank %d: %s failed (nccl.c:%d): %s", rank, call, line,
                    text ? text : "unknown error");
}

/* The one checking macro: lib is CUDA or NCCL; `rank` must be in scope. */
#define TRY(lib, call)                                                                             \
    do {                                                                                           \
        int trc_ = (int)(call);                                                                    \
        if (trc_ != 0)                                                                             \
            return lib_fail(err, rank, LIB_##lib, trc_, #call, __LINE__);                          \
    } while (0)

static void size_text(size_t bytes, char *out, size_t n)
{
    if (bytes >= (size_t)1 << 20)
        snprintf(out, n, "%.3g MiB", (double)bytes / 1048576.0);
    else if (bytes >= 1024)
        snprintf(out, n, "%.3g KiB", (double)bytes / 1024.0);
    else
        snprintf(out, n, "%zu bytes", bytes);
}

/* Under mu: aborts the NCCL communicator once, keeping why. */
static void abort_locked(nccl_impl *im, const char *why)
{
    if (im->aborted)
        return;
    im->aborted = 1;
    snprintf(im->why, sizeof im->why, "%s", why);
    if (im->nc)
        (void)ncclCommAbort(im->nc); /* the reason is already recorded; nothing else to do */
    im->nc = NULL;
}

static int aborted_err(nccl_impl *im, ptc_error *err)
{
    return ptc__err(err, PTC_ECOMM, "", -1, "%s", im->why);
}

/* Under mu: the time-out and NCCL's asynchronous errors for a collective started at t0. 0 while
 * it may still finish; else the communicator is aborted and im->why says why. */
static int health_locked(nccl_impl *im, int rank, double t0, size_t bytes, const char *what)
{
    char msg[MSG_MAX], sz[32];
    if (im->aborted)
        return -1;
    ncclResult_t ae = ncclSuccess;
    ncclResult_t qr = ncclCommGetAsyncError(im->nc, &ae);
    size_text(bytes, sz, sizeof sz);
    if (qr != ncclSuccess || ae != ncclSuccess) {
        snprintf(msg, sizeof msg, "rank %d: NCCL %s of %s failed: %s; communicator aborted", rank,
                 what, sz, ncclGetErrorString(qr != ncclSuccess ? qr : ae));
        abort_locked(im, msg);
        return -1;
    }
    if (now() - t0 > im->timeout) {
        snprintf(msg, sizeof msg,
                 "rank %d: NCCL %s of %s did not finish within %.0f s; a peer is gone; "
                 "communicator aborted",
                 rank, what, sz, im->timeout);
        abort_locked(im, msg);
        return -1;
    }
    return 0;
}

/* Blocks until ev has completed: 0, or PTC_ECOMM once the collective fails or times out. */
static int wait_event(ptc_comm *c, cudaEvent_t ev, size_t bytes, const char *what, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    double t0 = now();
    struct timespec nap = {0, 20000}; /* 20 us, doubling to 1 ms */
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess) {
            /* an abort (the watchdog's, for another collective) also ends this one, unrun */
            pthread_mutex_lock(&im->mu);
            int ended = im->aborted;
            pthread_mutex_unlock(&im->mu);
            return ended ? aborted_err(im, err) : 0;
        }
        if (q != cudaErrorNotReady)
            return lib_fail(err, rank, LIB_CUDA, q, "cudaEventQuery(ev)", __LINE__);
        pthread_mutex_lock(&im->mu);
        int bad = health_locked(im, rank, t0, bytes, what);
        pthread_mutex_unlock(&im->mu);
        if (bad)
            return aborted_err(im, err);
        nanosleep(&nap, NULL);
        if (nap.tv_nsec < 1000000)
            nap.tv_nsec *= 2;
    }
}

/* ---- events and the watchdog ------------------------------------------------------------------- */

static int get_event(ptc_comm *c, cudaEvent_t *out, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    pthread_mutex_lock(&im->mu);
    int have = im->npool > 0;
    if (have)
        *out = im->pool[--im->npool];
    pthread_mutex_unlock(&im->mu);
    if (!have)
        TRY(CUDA, cudaEventCreateWithFlags(out, cudaEventDisableTiming));
    return 0;
}

/* Under mu. */
static void put_event_locked(nccl_impl *im, cudaEvent_t ev)
{
    if (im->npool >= NCCL_MAX_WATCHES) {
        (void)cudaEventDestroy(ev); /* enough kept already: make it again when needed */
        return;
    }
    if (im->npool == im->cappool) {
        size_t cap = im->cappool ? 2 * im->cappool : 16;
        cudaEvent_t *p = ptc__realloc(im->pool, cap * sizeof *p);
        if (!p) {
            (void)cudaEventDestroy(ev); /* no room to keep it: make it again next time */
            return;
        }
        im->pool = p;
        im->cappool = cap;
    }
    im->pool[im->npool++] = ev;
}

static void put_event(nccl_impl *im, cudaEvent_t ev)
{
    pthread_mutex_lock(&im->mu);
    put_event_locked(im, ev);
    pthread_mutex_unlock(&im->mu);
}

/* Records a watched copy of a collective's completion on the own stream. */
static int watch_add(ptc_comm *c, size_t bytes, const char *what, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    cudaEvent_t ev;
    int rc = get_event(c, &ev, err);
    if (rc < 0)
        return rc;
    cudaError_t e = cudaEventRecord(ev, im->stream);
    if (e != cudaSuccess) {
        put_event(im, ev);
        return lib_fail(err, rank, LIB_CUDA, e, "cudaEventRecord(ev, im->stream)", __LINE__);
    }
    pthread_mutex_lock(&im->mu);
    if (im->nw >= NCCL_MAX_WATCHES) {
        put_event_locked(im, ev);
        pthread_mutex_unlock(&im->mu);
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "rank %d: more than %d collectives in flight: their completions are not "
                        "being observed",
                        rank, NCCL_MAX_WATCHES);
    }
    if (im->nw == im->capw) {
        size_t cap = im->capw ? 2 * im->capw : 16;
        watch *w = ptc__realloc(im->w, cap * sizeof *w);
        if (!w) {
            put_event_locked(im, ev);
            pthread_mutex_unlock(&im->mu);
            return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        }
        im->w = w;
        im->capw = cap;
    }
    im->w[im->nw++] = (watch){ev, now(), bytes, what};
    pthread_mutex_unlock(&im->mu);
    return 0;
}

static void *watchdog(void *arg)
{
    ptc_comm *c = arg;
    nccl_impl *im = impl_of(c);
    (void)cudaSetDevice(im->device); /* events of this device; failing here fails every query */
    pthread_mutex_lock(&im->mu);
    while (!im->stopping) {
        for (size_t i = 0; i < im->nw;) {
            watch *w = &im->w[i];
            cudaError_t q = cudaEventQuery(w->ev);
            if (q == cudaSuccess) {
                put_event_locked(im, w->ev);
                im->w[i] = im->w[--im->nw];
                continue;
            }
            if (q != cudaErrorNotReady) {
                char msg[MSG_MAX];
                snprintf(msg, sizeof msg,
                         "rank %d: NCCL %s: the device failed: %s; "
                         "communicator aborted",
                         c->rank, w->what, cudaGetErrorString(q));
                abort_locked(im, msg);
            } else if (!im->aborted) {
                (void)health_locked(im, c->rank, w->t0, w->bytes, w->what);
            }
            i++;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&im->cv, &im->mu, &until);
    }
    pthread_mutex_unlock(&im->mu);
    return NULL;
}

/* ---- types ------------------------------------------------------------------------------------- */

static int nccl_type(ptc__cdtype t, ncclDataType_t *out, size_t *size, ptc_error *err)
{
    switch (t) {
    case PTC__C_BYTE:
        *out = ncclUint8;
        *size = 1;
        return 0;
    case PTC__C_F32:
        *out = ncclFloat32;
        *size = 4;
        return 0;
    case PTC__C_F64:
        *out = ncclFloat64;
        *size = 8;
        return 0;
    case PTC__C_I64:
        *out = ncclInt64;
        *size = 8;
        return 0;
    }
    return ptc__err(err, PTC_EINVAL, "", -1, "unknown element type %d", (int)t);
}

static int nccl_op(ptc__cdtype t, ptc__cop op, ncclRedOp_t *out, ptc_error *err)
{
    if (t == PTC__C_BYTE)
        return ptc__err(err, PTC_EINVAL, "", -1, "bytes cannot be reduced");
    switch (op) {
    case PTC__C_SUM:
        *out = ncclSum;
        return 0;
    case PTC__C_MAX:
        *out = ncclMax;
        return 0;
    case PTC__C_MIN:
        *out = ncclMin;
        return 0;
    }
    return ptc__err(err, PTC_EINVAL, "", -1, "unknown reduction %d", (int)op);
}

/* 1 for memory of a device (cudaMalloc); host memory, pinned or not, and managed memory are
 * staged. */
static int is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* older runtimes fail on unregistered memory: host */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}

static int stage_reserve(ptc_comm *c, size_t bytes, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    if (bytes <= im->stage_bytes)
        return 0;
    if (im->stage) {
        /* the old buffer may still be read by a collective in flight */
        TRY(CUDA, cudaStreamSynchronize(im->stream));
        TRY(CUDA, cudaFree(im->stage));
        im->stage = NULL;
        im->stage_bytes = 0;
    }
    TRY(CUDA, cudaMalloc(&im->stage, bytes));
    im->stage_bytes = bytes;
    return 0;
}

/* ---- collectives ------------------------------------------------------------------------------- */

enum { K_ALLREDUCE, K_BCAST, K_ALLGATHER };
static const char *const kind_name[] = {"all-reduce", "broadcast", "all-gather"};

typedef struct coll {
    int kind;
    const void *send;
    void *recv;
    size_t count; /* elements per rank */
    ncclDataType_t t;
    ncclRedOp_t op;
    int root;
} coll;

/* Queues one collective on the own stream, after what the backend's stream holds when
 * after_backend is set. */
static int enqueue(ptc_comm *c, const coll *k, int after_backend, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    if (after_backend) {
        TRY(CUDA, cudaEventRecord(im->ready, im->be_stream));
        TRY(CUDA, cudaStreamWaitEvent(im->stream, im->ready, 0));
    }
    pthread_mutex_lock(&im->mu);
    if (im->aborted) {
        pthread_mutex_unlock(&im->mu);
        return aborted_err(im, err);
    }
    ncclResult_t r = ncclSuccess;
    switch (k->kind) {
    case K_ALLREDUCE:
        r = ncclAllReduce(k->send, k->recv, k->count, k->t, k->op, im->nc, im->stream);
        break;
    case K_BCAST:
        r = ncclBroadcast(k->send, k->recv, k->count, k->t, k->root, im->nc, im->stream);
        break;
    default:
        r = ncclAllGather(k->send, k->recv, k->count, k->t, im->nc, im->stream);
        break;
    }
    pthread_mutex_unlock(&im->mu);
    if (r != ncclSuccess) /* named: TRY(NCCL, r) would say "r failed" */
        return lib_fail(err, rank, LIB_NCCL, r,
                        k->kind == K_ALLREDUCE ? "ncclAllReduce"
                        : k->kind == K_BCAST   ? "ncclBroadcast"
                                               : "ncclAllGather",
                        __LINE__);
    return 0;
}

/* One blocking collective. bytes_in/bytes_out: what the caller's send and recv hold (they are
 * staged when either is host memory); recv_off: where send goes in the staged recv (allgather's
 * in-place layout). */
static int blocking(ptc_comm *c, coll k, size_t bytes_in, size_t bytes_out, size_t recv_off,
                    ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    void *user_recv = k.recv;
    const void *user_send = k.send;
    int staged = !is_device(k.recv) || (k.send != k.recv && !is_device(k.send));
    int rc;
    /* the stage and events are made on the current device: this thread may have made another
     * device current since (a second backend instance) */
    TRY(CUDA, cudaSetDevice(im->device));
    /* device memory of the caller may still be written on the backend's stream: everything below,
     * the staging copies included, comes after it */
    TRY(CUDA, cudaEventRecord(im->ready, im->be_stream));
    TRY(CUDA, cudaStreamWaitEvent(im->stream, im->ready, 0));
    if (staged) {
        if ((rc = stage_reserve(c, bytes_out ? bytes_out : 1, err)) < 0)
            return rc;
        unsigned char *s = im->stage;
        if (bytes_in)
            TRY(CUDA,
                cudaMemcpyAsync(s + recv_off, user_send, bytes_in, cudaMemcpyDefault, im->stream));
        k.send = s + recv_off;
        k.recv = s;
    }
    if ((rc = enqueue(c, &k, 0, err)) < 0)
        return rc;
    TRY(CUDA, cudaEventRecord(im->done, im->stream));
    if ((rc = wait_event(c, im->done, bytes_out, kind_name[k.kind], err)) < 0)
        return rc;
    if (staged && bytes_out) {
        TRY(CUDA, cudaMemcpyAsync(user_recv, im->stage, bytes_out, cudaMemcpyDefault, im->stream));
        TRY(CUDA, cudaStreamSynchronize(im->stream));
    }
    return 0;
}

static int n_allreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                       ptc_error *err)
{
    coll k = {.kind = K_ALLREDUCE, .send = buf, .recv = buf, .count = count};
    size_t es = 0;
    int rc = nccl_type(t, &k.t, &es, err);
    if (rc == 0)
        rc = nccl_op(t, op, &k.op, err);
    if (rc < 0 || count == 0)
        return rc;
    return blocking(c, k, count * es, count * es, 0, err);
}

static int n_iallreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                        ptc__creq **out, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank;
    *out = NULL;
    coll k = {.kind = K_ALLREDUCE, .send = buf, .recv = buf, .count = count};
    size_t es = 0;
    int rc = nccl_type(t, &k.t, &es, err);
    if (rc == 0)
        rc = nccl_op(t, op, &k.op, err);
    if (rc < 0)
        return rc;
    nccl_req *q = ptc__calloc(1, sizeof *q);
    if (!q)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    q->bytes = count * es;
    if (count == 0 || !is_device(buf)) {
        /* host memory: staged and finished now (nothing in ptc starts one; kept correct) */
        rc = count ? blocking(c, k, q->bytes, q->bytes, 0, err) : 0;
        if (rc < 0) {
            ptc__free(q);
            return rc;
        }
        q->base.done = 1;
        *out = &q->base;
        return 0;
    }
    cudaError_t de = cudaSetDevice(im->device); /* as in blocking() */
    if (de != cudaSuccess) {
        ptc__free(q);
        return lib_fail(err, rank, LIB_CUDA, de, "cudaSetDevice(im->device)", __LINE__);
    }
    if ((rc = get_event(c, &q->ev, err)) < 0) {
        ptc__free(q);
        return rc;
    }
    rc = enqueue(c, &k, 1, err);
    if (rc == 0) {
        cudaError_t e = cudaEventRecord(q->ev, im->stream);
        rc = e == cudaSuccess
                 ? watch_add(c, q->bytes, "all-reduce", err)
                 : lib_fail(err, rank, LIB_CUDA, e, "cudaEventRecord(q->ev, im->stream)", __LINE__);
    }
    if (rc < 0) {
        put_event(im, q->ev);
        ptc__free(q);
        return rc;
    }
    *out = &q->base;
    return 0;
}

static int n_test(ptc_comm *c, ptc__creq *r, int *done, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    nccl_req *q = (nccl_req *)r;
    int rank = c->rank;
    *done = r->done;
    if (r->done)
        return 0;
    pthread_mutex_lock(&im->mu);
    int bad = im->aborted;
    pthread_mutex_unlock(&im->mu);
    if (bad)
        return aborted_err(im, err);
    cudaError_t e = cudaEventQuery(q->ev);
    if (e == cudaErrorNotReady)
        return 0;
    if (e != cudaSuccess)
        return lib_fail(err, rank, LIB_CUDA, e, "cudaEventQuery(q->ev)", __LINE__);
    r->done = *done = 1;
    return 0;
}

static int n_wait(ptc_comm *c, ptc__creq *r, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    nccl_req *q = (nccl_req *)r;
    int rank = c->rank, rc = 0;
    if (q->ev) {
        pthread_mutex_lock(&im->mu);
        int bad = im->aborted;
        pthread_mutex_unlock(&im->mu);
        cudaError_t e = bad ? cudaSuccess : cudaStreamWaitEvent(im->be_stream, q->ev, 0);
        if (bad)
            rc = aborted_err(im, err);
        else if (e != cudaSuccess)
            rc = lib_fail(err, rank, LIB_CUDA, e, "cudaStreamWaitEvent(im->be_stream, q->ev, 0)",
                          __LINE__);
        put_event(im, q->ev); /* may be reused: the wait above took its state as it is now */
    }
    ptc__free(q);
    return rc;
}

static int n_bcast(ptc_comm *c, void *buf, size_t bytes, int root, ptc_error *err)
{
    if (root < 0 || root >= c->size)
        return ptc__err(err, PTC_EINVAL, "", -1, "broadcast from rank %d of %d", root, c->size);
    if (bytes == 0)
        return 0;
    coll k = {
        .kind = K_BCAST, .send = buf, .recv = buf, .count = bytes, .t = ncclUint8, .root = root};
    return blocking(c, k, bytes, bytes, 0, err);
}

static int n_barrier(ptc_comm *c, ptc_error *err)
{
    float one = 1.0f; /* staged: a one-element all-reduce that every rank must join */
    return n_allreduce(c, &one, 1, PTC__C_F32, PTC__C_SUM, err);
}

static int n_allgather(ptc_comm *c, const void *send, void *recv, size_t bytes, ptc_error *err)
{
    if (bytes == 0)
        return 0;
    if ((size_t)c->size > SIZE_MAX / bytes)
        return ptc__err(err, PTC_ELIMIT, "", -1, "an all-gather of %d x %zu bytes", c->size, bytes);
    coll k = {.kind = K_ALLGATHER, .send = send, .recv = recv, .count = bytes, .t = ncclUint8};
    return blocking(c, k, bytes, (size_t)c->size * bytes, (size_t)c->rank * bytes, err);
}

static void n_abort(ptc_comm *c, int code)
{
    nccl_impl *im = impl_of(c);
    pthread_mutex_lock(&im->mu);
    char msg[64];
    snprintf(msg, sizeof msg, "rank %d: the job was aborted", c->rank);
    abort_locked(im, msg);
    pthread_mutex_unlock(&im->mu);
    if (im->host)
        im->host->ops->abort(im->host, code); /* ends the other processes */
}

/* Frees what open made; nc is destroyed (or aborted when what it holds does not finish). */
static void n_close(ptc_comm *c)
{
    if (!c)
        return;
    nccl_impl *im = impl_of(c);
    if (im) {
        (void)cudaSetDevice(im->device); /* what is freed below lives there */
        if (im->nc && im->done && im->stream) {
            /* nobody to report to: what does not finish is aborted, so that close returns */
            ptc_error e;
            int rc = cudaEventRecord(im->done, im->stream) == cudaSuccess
                         ? wait_event(c, im->done, 0, "close", &e)
                         : -1;
            pthread_mutex_lock(&im->mu);
            if (rc < 0)
                abort_locked(im, "closing");
            pthread_mutex_unlock(&im->mu);
        }
        if (im->thread_on) {
            pthread_mutex_lock(&im->mu);
            im->stopping = 1;
            pthread_cond_signal(&im->cv);
            pthread_mutex_unlock(&im->mu);
            pthread_join(im->thread, NULL);
        }
        if (im->nc)
            (void)ncclCommDestroy(im->nc); /* everything it ran has finished (above) */
        for (size_t i = 0; i < im->nw; i++)
            (void)cudaEventDestroy(im->w[i].ev);
        for (size_t i = 0; i < im->npool; i++)
            (void)cudaEventDestroy(im->pool[i]);
        if (im->ready)
            (void)cudaEventDestroy(im->ready);
        if (im->done)
            (void)cudaEventDestroy(im->done);
        if (im->stage)
            (void)cudaFree(im->stage);
        if (im->stream)
            (void)cudaStreamDestroy(im->stream);
        pthread_cond_destroy(&im->cv);
        pthread_mutex_destroy(&im->mu);
        ptc__free(im->w);
        ptc__free(im->pool);
        ptc__free(im);
    }
    ptc__free(c);
}

static const ptc__comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = n_allreduce,
    .iallreduce = n_iallreduce,
    .test = n_test,
    .wait = n_wait,
    .bcast = n_bcast,
    .barrier = n_barrier,
    .allgather = n_allgather,
    .abort = n_abort,
    .close = n_close,
};

/* ---- open -------------------------------------------------------------------------------------- */

/* This rank's own part of opening, before any rank waits for another. */
static int open_local(ptc_comm *c, const ptc__backend_ops *ops, ptc__be *be, ptc_error *err)
{
    nccl_impl *im = impl_of(c);
    int rank = c->rank, lo, hi;
    void *stream = NULL;
    if (!ops || !ops->device_info)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "the nccl communicator needs a GPU backend (cuda), not \"%s\"",
                        ops ? ops->name : "none");
    int rc = ops->device_info(be, &stream, &im->device, err);
    if (rc < 0)
        return rc;
    im->be_stream = (cudaStream_t)stream;
    TRY(CUDA, cudaSetDevice(im->device));
    TRY(CUDA, cudaDeviceGetStreamPriorityRange(&lo, &hi));
    TRY(CUDA, cudaStreamCreateWithPriority(&im->stream, cudaStreamNonBlocking, hi));
    TRY(CUDA, cudaEventCreateWithFlags(&im->ready, cudaEventDisableTiming));
    TRY(CUDA, cudaEventCreateWithFlags(&im->done, cudaEventDisableTiming));
    return 0;
}

static int open_device(ptc_comm **out, ptc_comm *host, const ptc__backend_ops *ops, ptc__be *be,
                       ptc_error *err)
{
    *out = NULL;
    if (!host)
        return ptc__err(err, PTC_EINVAL, "", -1, "the nccl communicator needs a host communicator");
    int rank = host->rank;
    ptc_comm *c = ptc__calloc(1, sizeof *c);
    nccl_impl *im = ptc__calloc(1, sizeof *im);
    if (!c || !im) {
        ptc__free(c);
        ptc__free(im);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    }
    c->ops = &nccl_ops;
    c->rank = host->rank;
    c->size = host->size;
    c->local_size = host->local_size;
    c->impl = im;
    im->host = host;
    im->timeout = NCCL_TIMEOUT_S;
    pthread_mutex_init(&im->mu, NULL);
    pthread_cond_init(&im->cv, NULL);

    /* Every rank's local part, then the id from rank 0 and every rank's verdict, so that a rank
     * that fails on its own never leaves the others waiting inside ncclCommInitRank. */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ptc_error local;
    ptc__err_clear(&local);
    int lrc = open_local(c, ops, be, &local);
    if (lrc == 0 && rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            lrc = lib_fail(&local, rank, LIB_NCCL, r, "ncclGetUniqueId(&id)", __LINE__);
    }
    int ok = lrc == 0, rc = 0, *oks = ptc__calloc((size_t)host->size, sizeof *oks);
    if (!oks)
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    if (rc == 0 && host->size > 1)
        rc = host->ops->bcast(host, &id, sizeof id, 0, err);
    if (rc == 0)
        rc = host->ops->allgather(host, &ok, oks, sizeof *oks, err);
    if (rc == 0 && lrc < 0) {
        *err = local;
        rc = lrc;
    }
    for (int k = 0; rc == 0 && k < host->size; k++)
        if (!oks[k])
            rc = ptc__err(err, PTC_ECOMM, "", -1,
                          "rank %d: cannot open the nccl communicator: rank %d could not (see its "
                          "message)",
                          rank, k);
    ptc__free(oks);
    if (rc == 0) {
        ncclResult_t r = ncclCommInitRank(&im->nc, c->size, id, rank);
        if (r != ncclSuccess) {
            im->nc = NULL;
            rc = lib_fail(err, rank, LIB_NCCL, r, "ncclCommInitRank", __LINE__);
        }
    }
    if (rc == 0) {
        if (pthread_create(&im->thread, NULL, watchdog, c) != 0)
            rc = ptc__err(err, PTC_ECOMM, "", -1, "rank %d: cannot start the NCCL watchdog thread",
                          rank);
        else
            im->thread_on = 1;
    }
    if (rc < 0) {
        n_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int probe(ptc_error *err)
{
    int n = 0, rank = 0, rt = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        (void)cudaRuntimeGetVersion(&rt);
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "no NVIDIA driver is installed, or it is older than CUDA %d.%d needs (%s)",
                        rt / 1000, rt % 1000 / 10, cudaGetErrorString(e));
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n < 1))
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "no CUDA device is present");
    if (e == cudaErrorInitializationError)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "the CUDA driver cannot start: %s",
                        cudaGetErrorString(e));
    if (e != cudaSuccess)
        return lib_fail(err, rank, LIB_CUDA, e, "cudaGetDeviceCount(&n)", __LINE__);
    int v = 0;
    TRY(NCCL, ncclGetVersion(&v));
    return 0;
}

void ptc__nccl_set_timeout(ptc_comm *c, double seconds)
{
    nccl_impl *im = impl_of(c);
    pthread_mutex_lock(&im->mu); /* the watchdog reads it */
    im->timeout = seconds;
    pthread_mutex_unlock(&im->mu);
}

static const ptc__comm_plugin plugin_ops = {.open = NULL, .open_device = open_device};

static const ptc__plugin desc = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_COMM,
    .name = "nccl",
    .summary = "NCCL device communicator: bucket all-reduces on a stream of their own",
    .experimental = 1,
    .ops = &plugin_ops,
    .probe = probe,
};

const ptc__plugin *ptc__nccl_plugin(void)
{
    return &desc;
}

/* A test that compiles this file next to libptc_core (tests/gpu/nccl_mock) defines
 * PTC_MODULE_LINKED_IN: it is not a module then, and lib/base/module.c is not linked in. */
#ifndef PTC_MODULE_LINKED_IN
PTC__DEFINE_PLUGIN_ENTRY(desc)
#endif
