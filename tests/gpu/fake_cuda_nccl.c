/*
 * fake_cuda_nccl.c - a host imitation of the parts of the CUDA runtime and NCCL that
 * lib/dist/nccl.c calls, so that tests/gpu/nccl_mock runs the communicator's control flow on any
 * machine. The prototypes are the toolkit's (cuda_runtime_api.h, nccl.h); neither cudart nor
 * libnccl is linked.
 *
 * What is imitated, and why it matters to nccl.c:
 *   - device memory is malloc'ed host memory kept in a registry: cudaPointerGetAttributes tells it
 *     from host memory, the NCCL collectives refuse pointers outside it (ncclInvalidArgument, as
 *     a real NCCL fails on pageable memory), so a host buffer that was not staged is caught;
 *   - streams are FIFO queues of work (copies, event records, event waits, collectives, test
 *     gates). Work runs as soon as it is at the head of its stream and nothing holds it: a closed
 *     gate, an event it waits for, or a collective whose peers have not all reached theirs;
 *   - events have the runtime's semantics: cudaEventRecord captures what the stream holds now,
 *     cudaStreamWaitEvent the latest record at the time of the call, an event never recorded is
 *     complete; an event destroyed while queued work refers to it lives until that work ran;
 *   - a copy to pageable host memory blocks the host until the stream reaches it (as the
 *     runtime's does); a copy from pageable memory takes its bytes at the call;
 *   - NCCL communicators of 1 or more ranks (threads of this process) sharing a clique by unique
 *     id; ncclCommInitRank waits for every rank (10 s, then ncclSystemError instead of hanging);
 *     a collective runs when every rank's is at the head of its stream; ncclCommAbort ends the
 *     communicator's queued collectives without running them (what lets a stream behind a dead
 *     peer drain); ncclCommGetAsyncError reports what the test set.
 * Handles are checked against live lists: a call on a destroyed stream, event or communicator,
 * a cudaFree of unknown memory, or queued work that touches freed memory counts as misuse, which
 * the test asserts is zero. Blocking waits give up after 20 s with a message and abort(): a
 * test that would hang fails instead.
 * One mutex guards everything; nccl.c's own mutex is always taken before it (never after).
 */
#include "fake_cuda_nccl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_MAX_RANKS 8
#define FAKE_MAX_GATES 64
#define FAKE_HANG_S    20.0

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- bookkeeping --------------------------------------------------------------------------- */

typedef struct alloc_rec {
    struct alloc_rec *next;
    unsigned char *p;
    size_t n;
} alloc_rec;

enum { I_COPY, I_RECORD, I_WAIT, I_HOLD, I_COLL };
enum { C_ALLREDUCE, C_BCAST, C_ALLGATHER };

struct ncclComm;

typedef struct item {
    struct item *next;
    int kind;
    /* copy */
    void *dst;
    const void *src;
    size_t n;
    void *snap; /* the bytes of a pageable source, taken at the call */
    /* record, wait */
    struct CUevent_st *ev;
    unsigned long gen;
    /* hold, coll */
    int gate;
    /* coll */
    int ckind, root, finished;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t t;
    ncclRedOp_t op;
    unsigned long seq;
    struct ncclComm *comm;
} item;

struct CUstream_st {
    struct CUstream_st *next_all;
    item *head, *tail;
    int device;
};

struct CUevent_st {
    struct CUevent_st *next_all;
    unsigned long rec_gen, done_gen;
    int refs, destroyed;
};

typedef struct clique {
    struct clique *next;
    ncclUniqueId id;
    int nranks, joined;
    struct ncclComm *ranks[FAKE_MAX_RANKS];
    item *arrived[FAKE_MAX_RANKS];
} clique;

struct ncclComm {
    struct ncclComm *next_all;
    clique *q;
    int rank, nranks, aborted, refs, gone;
    ncclResult_t async;
    unsigned long seq;
};

static alloc_rec *g_allocs;
static struct CUstream_st *g_streams;
static struct CUevent_st *g_events;
static struct ncclComm *g_comms;
static clique *g_cliques;
static int g_gates[FAKE_MAX_GATES], g_ngates; /* 1: open */
static int g_device_count = 1, g_no_driver;
static unsigned g_id_counter;
static fake_stats g_st;

static __thread int t_device = -1;
static __thread char t_fail_fn[64];
static __thread int t_fail_code;
static __thread int t_hold_gate = -1;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

/* Under g_mu. */
static void misuse(const char *fmt, ...)
{
    if (g_st.misuse++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_st.first_misuse, sizeof g_st.first_misuse, fmt, ap);
        va_end(ap);
    }
}

static void hang(const char *what)
{
    fprintf(stderr, "fake_cuda_nccl: %s did not end within %.0f s: the test would hang\n", what,
            FAKE_HANG_S);
    abort();
}

/* The armed failure of fn, once; 0 when none. */
static int failing(const char *fn)
{
    if (t_fail_code != 0 && strcmp(t_fail_fn, fn) == 0) {
        int c = t_fail_code;
        t_fail_code = 0;
        return c;
    }
    return 0;
}

/* Under g_mu: the allocation holding [p, p + n), or NULL. */
static alloc_rec *dev_range(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (alloc_rec *a = g_allocs; a; a = a->next)
        if (c >= a->p && c < a->p + a->n + (a->n == 0))
            return (size_t)(a->p + a->n - c) >= n ? a : NULL;
    return NULL;
}

static int live_stream(struct CUstream_st *s)
{
    for (struct CUstream_st *x = g_streams; x; x = x->next_all)
        if (x == s)
            return 1;
    return 0;
}

static int live_event(struct CUevent_st *e)
{
    for (struct CUevent_st *x = g_events; x; x = x->next_all)
        if (x == e)
            return 1;
    return 0;
}

static int live_comm(struct ncclComm *c)
{
    for (struct ncclComm *x = g_comms; x; x = x->next_all)
        if (x == c)
            return 1;
    return 0;
}

static void event_unref(struct CUevent_st *e)
{
    if (--e->refs == 0 && e->destroyed)
        free(e);
}

static void comm_unref(struct ncclComm *c)
{
    if (--c->refs == 0 && c->gone)
        free(c);
}

static void push(struct CUstream_st *s, item *it)
{
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
}

/* ---- running queued work ------------------------------------------------------------------- */

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

#define REDUCE(T)                                                                                  \
    do {                                                                                           \
        T *a_ = acc;                                                                               \
        const T *b_ = in;                                                                          \
        for (size_t i_ = 0; i_ < count; i_++)                                                      \
            a_[i_] = op == ncclSum   ? a_[i_] + b_[i_]                                             \
                     : op == ncclMax ? (b_[i_] > a_[i_] ? b_[i_] : a_[i_])                         \
                                     : (b_[i_] < a_[i_] ? b_[i_] : a_[i_]);                        \
    } while (0)

static void reduce_into(void *acc, const void *in, size_t count, ncclDataType_t t, ncclRedOp_t op)
{
    switch (t) {
    case ncclInt8:
        REDUCE(int8_t);
        break;
    case ncclUint8:
        REDUCE(uint8_t);
        break;
    case ncclInt32:
        REDUCE(int32_t);
        break;
    case ncclUint32:
        REDUCE(uint32_t);
        break;
    case ncclInt64:
        REDUCE(int64_t);
        break;
    case ncclUint64:
        REDUCE(uint64_t);
        break;
    case ncclFloat32:
        REDUCE(float);
        break;
    default:
        REDUCE(double);
        break;
    }
}

/* Under g_mu: runs the collective every rank of q has reached (arrived[] all set). */
static void run_collective(clique *q)
{
    item *it0 = q->arrived[0];
    size_t es = type_size(it0->t), bytes = it0->count * es, total = bytes;
    for (int r = 1; r < q->nranks; r++) {
        item *it = q->arrived[r];
        if (it->seq != it0->seq || it->ckind != it0->ckind || it->count != it0->count ||
            it->t != it0->t || it->root != it0->root)
            misuse("rank %d's collective %lu differs from rank 0's", r, it->seq);
    }
    if (it0->ckind == C_ALLGATHER)
        total = bytes * (size_t)q->nranks;
    unsigned char *tmp = malloc(total ? total : 1);
    if (!tmp)
        abort();
    for (int r = 0; r < q->nranks; r++) {
        item *it = q->arrived[r];
        size_t in = it0->ckind == C_BCAST && r != it0->root ? 0 : bytes;
        if (in && !dev_range(it->send, in))
            misuse("rank %d: the send buffer of a collective was freed before it ran", r);
        if (!dev_range(it->recv, it0->ckind == C_ALLGATHER ? total : bytes))
            misuse("rank %d: the receive buffer of a collective was freed before it ran", r);
    }
    for (int r = 0; r < q->nranks; r++) {
        item *it = q->arrived[r];
        if (it0->ckind == C_ALLREDUCE) {
            if (r == 0)
                memcpy(tmp, it->send, bytes);
            else
                reduce_into(tmp, it->send, it0->count, it0->t, it0->op);
        } else if (it0->ckind == C_BCAST) {
            if (r == it0->root)
                memcpy(tmp, it->send, bytes);
        } else {
            memcpy(tmp + (size_t)r * bytes, it->send, bytes);
        }
    }
    for (int r = 0; r < q->nranks; r++) {
        memcpy(q->arrived[r]->recv, tmp, total);
        q->arrived[r]->finished = 1;
        q->arrived[r] = NULL;
        g_st.collectives_run++;
    }
    free(tmp);
}

/* Under g_mu: 1 when the head of s ran (and was removed). */
static int step(struct CUstream_st *s)
{
    item *it = s->head;
    if (!it)
        return 0;
    switch (it->kind) {
    case I_COPY:
        if (!it->snap && dev_range(it->src, 0) && !dev_range(it->src, it->n))
            misuse("a queued copy reads freed or too little device memory");
        if (dev_range(it->dst, 0) && !dev_range(it->dst, it->n))
            misuse("a queued copy writes past device memory");
        memmove(it->dst, it->snap ? it->snap : it->src, it->n);
        free(it->snap);
        break;
    case I_RECORD:
        if (it->gen > it->ev->done_gen)
            it->ev->done_gen = it->gen;
        event_unref(it->ev);
        break;
    case I_WAIT:
        if (it->ev->done_gen < it->gen)
            return 0;
        event_unref(it->ev);
        break;
    case I_HOLD:
        if (!g_gates[it->gate])
            return 0;
        break;
    default: {
        struct ncclComm *c = it->comm;
        if (!c->aborted && !it->finished) {
            if (it->gate >= 0 && !g_gates[it->gate])
                return 0;
            clique *q = c->q;
            q->arrived[c->rank] = it;
            for (int r = 0; r < q->nranks; r++)
                if (!q->arrived[r])
                    return 0;
            run_collective(q);
        }
        if (c->q && c->q->arrived[c->rank] == it)
            c->q->arrived[c->rank] = NULL;
        comm_unref(c);
        break;
    }
    }
    s->head = it->next;
    if (!s->head)
        s->tail = NULL;
    free(it);
    return 1;
}

/* Under g_mu: runs whatever can run, on every stream. */
static void pump(void)
{
    int progress = 1;
    while (progress) {
        progress = 0;
        for (struct CUstream_st *s = g_streams; s; s = s->next_all)
            while (step(s))
                progress = 1;
    }
}

/* Under g_mu: until s is empty, or FAKE_HANG_S. */
static void drain(struct CUstream_st *s, const char *what)
{
    double t0 = now_s();
    for (;;) {
        pump();
        if (!s->head)
            return;
        if (now_s() - t0 > FAKE_HANG_S)
            hang(what);
        pthread_mutex_unlock(&g_mu);
        nap();
        pthread_mutex_lock(&g_mu);
    }
}

/* ---- the test's controls ------------------------------------------------------------------- */

void fake_set_device_count(int n)
{
    pthread_mutex_lock(&g_mu);
    g_device_count = n;
    pthread_mutex_unlock(&g_mu);
}

void fake_set_no_driver(int on)
{
    pthread_mutex_lock(&g_mu);
    g_no_driver = on;
    pthread_mutex_unlock(&g_mu);
}

void fake_fail_next(const char *fn, int code)
{
    snprintf(t_fail_fn, sizeof t_fail_fn, "%s", fn);
    t_fail_code = code;
}

int fake_gate_new(void)
{
    pthread_mutex_lock(&g_mu);
    if (g_ngates == FAKE_MAX_GATES)
        abort();
    int g = g_ngates++;
    g_gates[g] = 0;
    pthread_mutex_unlock(&g_mu);
    return g;
}

void fake_gate_open(int gate)
{
    pthread_mutex_lock(&g_mu);
    g_gates[gate] = 1;
    pump();
    pthread_mutex_unlock(&g_mu);
}

void fake_stream_hold(cudaStream_t s, int gate)
{
    item *it = calloc(1, sizeof *it);
    if (!it)
        abort();
    it->kind = I_HOLD;
    it->gate = gate;
    pthread_mutex_lock(&g_mu);
    push(s, it);
    pthread_mutex_unlock(&g_mu);
}

void fake_hold_next_collective(int gate)
{
    t_hold_gate = gate;
}

void fake_set_async_error(int rank, ncclResult_t r)
{
    pthread_mutex_lock(&g_mu);
    for (struct ncclComm *c = g_comms; c; c = c->next_all)
        if (c->rank == rank)
            c->async = r;
    pthread_mutex_unlock(&g_mu);
}

void fake_get_stats(fake_stats *out)
{
    pthread_mutex_lock(&g_mu);
    pump();
    g_st.live_allocs = g_st.live_streams = g_st.live_events = g_st.live_comms = 0;
    for (alloc_rec *a = g_allocs; a; a = a->next)
        g_st.live_allocs++;
    for (struct CUstream_st *s = g_streams; s; s = s->next_all)
        g_st.live_streams++;
    for (struct CUevent_st *e = g_events; e; e = e->next_all)
        g_st.live_events++;
    for (struct ncclComm *c = g_comms; c; c = c->next_all)
        g_st.live_comms++;
    *out = g_st;
    pthread_mutex_unlock(&g_mu);
}

/* ---- the CUDA runtime ---------------------------------------------------------------------- */

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInitializationError:
        return "initialization error";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    default:
        return "unknown error";
    }
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    int f = failing("cudaGetDeviceCount");
    if (f)
        return (cudaError_t)f;
    pthread_mutex_lock(&g_mu);
    int n = g_device_count, nd = g_no_driver;
    pthread_mutex_unlock(&g_mu);
    if (nd)
        return cudaErrorInsufficientDriver;
    *count = 0;
    if (n < 1)
        return cudaErrorNoDevice;
    *count = n;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    int f = failing("cudaSetDevice");
    if (f)
        return (cudaError_t)f;
    pthread_mutex_lock(&g_mu);
    int n = g_device_count, nd = g_no_driver;
    pthread_mutex_unlock(&g_mu);
    if (nd)
        return cudaErrorInsufficientDriver;
    if (n < 1)
        return cudaErrorNoDevice;
    if (device < 0 || device >= n)
        return cudaErrorInvalidDevice;
    t_device = device;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    *leastPriority = 0;
    *greatestPriority = -5;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    int f = failing("cudaMalloc");
    if (f)
        return (cudaError_t)f;
    alloc_rec *a = malloc(sizeof *a);
    void *p = malloc(size ? size : 1);
    if (!a || !p) {
        free(a);
        free(p);
        return cudaErrorMemoryAllocation;
    }
    a->p = p;
    a->n = size;
    pthread_mutex_lock(&g_mu);
    a->next = g_allocs;
    g_allocs = a;
    pthread_mutex_unlock(&g_mu);
    *devPtr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr)
{
    if (!devPtr)
        return cudaSuccess;
    pthread_mutex_lock(&g_mu);
    /* cudaFree synchronises the device: queued work that still uses the memory runs first */
    double t0 = now_s();
    for (;;) {
        pump();
        int busy = 0;
        for (struct CUstream_st *s = g_streams; s; s = s->next_all)
            busy |= s->device == t_device && s->head != NULL;
        if (!busy)
            break;
        if (now_s() - t0 > FAKE_HANG_S)
            hang("cudaFree's device synchronisation");
        pthread_mutex_unlock(&g_mu);
        nap();
        pthread_mutex_lock(&g_mu);
    }
    for (alloc_rec **pa = &g_allocs; *pa; pa = &(*pa)->next)
        if ((*pa)->p == devPtr) {
            alloc_rec *a = *pa;
            *pa = a->next;
            pthread_mutex_unlock(&g_mu);
            free(a->p);
            free(a);
            return cudaSuccess;
        }
    misuse("cudaFree(%p) of memory cudaMalloc did not return", devPtr);
    pthread_mutex_unlock(&g_mu);
    return cudaErrorInvalidValue;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    memset(attributes, 0, sizeof *attributes);
    pthread_mutex_lock(&g_mu);
    alloc_rec *a = dev_range(ptr, 0);
    pthread_mutex_unlock(&g_mu);
    attributes->type = a ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    attributes->device = a ? 0 : -1;
    attributes->devicePointer = a ? (void *)ptr : NULL;
    attributes->hostPointer = a ? NULL : (void *)ptr;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    (void)flags, (void)priority;
    int f = failing("cudaStreamCreateWithPriority");
    if (f)
        return (cudaError_t)f;
    if (t_device < 0)
        return cudaErrorNoDevice; /* nothing chose a device in this thread */
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return cudaErrorMemoryAllocation;
    s->device = t_device;
    pthread_mutex_lock(&g_mu);
    s->next_all = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_mu);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    pthread_mutex_lock(&g_mu);
    if (!live_stream(stream)) {
        misuse("cudaStreamDestroy of a stream that is not live");
        pthread_mutex_unlock(&g_mu);
        return cudaErrorInvalidResourceHandle;
    }
    /* the runtime lets queued work finish; so does this, on the host */
    drain(stream, "the work of a destroyed stream");
    for (struct CUstream_st **ps = &g_streams; *ps; ps = &(*ps)->next_all)
        if (*ps == stream) {
            *ps = stream->next_all;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    pthread_mutex_lock(&g_mu);
    if (!live_stream(stream)) {
        misuse("cudaStreamSynchronize of a stream that is not live");
        pthread_mutex_unlock(&g_mu);
        return cudaErrorInvalidResourceHandle;
    }
    drain(stream, "cudaStreamSynchronize");
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    int f = failing("cudaEventCreateWithFlags");
    if (f)
        return (cudaError_t)f;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return cudaErrorMemoryAllocation;
    e->refs = 1; /* the handle's */
    pthread_mutex_lock(&g_mu);
    e->next_all = g_events;
    g_events = e;
    pthread_mutex_unlock(&g_mu);
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    pthread_mutex_lock(&g_mu);
    for (struct CUevent_st **pe = &g_events; *pe; pe = &(*pe)->next_all)
        if (*pe == event) {
            *pe = event->next_all;
            event->destroyed = 1;
            event_unref(event);
            pthread_mutex_unlock(&g_mu);
            return cudaSuccess;
        }
    misuse("cudaEventDestroy of an event that is not live");
    pthread_mutex_unlock(&g_mu);
    return cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    int f = failing("cudaEventRecord");
    if (f)
        return (cudaError_t)f;
    item *it = calloc(1, sizeof *it);
    if (!it)
        return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&g_mu);
    if (!live_event(event) || !live_stream(stream)) {
        misuse("cudaEventRecord on an event or stream that is not live");
        pthread_mutex_unlock(&g_mu);
        free(it);
        return cudaErrorInvalidResourceHandle;
    }
    it->kind = I_RECORD;
    it->ev = event;
    it->gen = ++event->rec_gen;
    event->refs++;
    push(stream, it);
    pump();
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    int f = failing("cudaEventQuery");
    if (f)
        return (cudaError_t)f;
    pthread_mutex_lock(&g_mu);
    if (!live_event(event)) {
        misuse("cudaEventQuery on an event that is not live");
        pthread_mutex_unlock(&g_mu);
        return cudaErrorInvalidResourceHandle;
    }
    pump();
    cudaError_t r = event->done_gen >= event->rec_gen ? cudaSuccess : cudaErrorNotReady;
    pthread_mutex_unlock(&g_mu);
    return r;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)flags;
    int f = failing("cudaStreamWaitEvent");
    if (f)
        return (cudaError_t)f;
    item *it = calloc(1, sizeof *it);
    if (!it)
        return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&g_mu);
    if (!live_event(event) || !live_stream(stream)) {
        misuse("cudaStreamWaitEvent on an event or stream that is not live");
        pthread_mutex_unlock(&g_mu);
        free(it);
        return cudaErrorInvalidResourceHandle;
    }
    it->kind = I_WAIT;
    it->ev = event;
    it->gen = event->rec_gen; /* the latest record now; 0 (complete) when never recorded */
    event->refs++;
    push(stream, it);
    pump();
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    int f = failing("cudaMemcpyAsync");
    if (f)
        return (cudaError_t)f;
    if (count == 0)
        return cudaSuccess;
    item *it = calloc(1, sizeof *it);
    if (!it)
        return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&g_mu);
    int dst_dev = dev_range(dst, 0) != NULL, src_dev = dev_range(src, 0) != NULL;
    int bad = !live_stream(stream) || (dst_dev && !dev_range(dst, count)) ||
              (src_dev && !dev_range(src, count)) ||
              (kind == cudaMemcpyHostToDevice && (src_dev || !dst_dev)) ||
              (kind == cudaMemcpyDeviceToHost && (!src_dev || dst_dev)) ||
              (kind == cudaMemcpyDeviceToDevice && (!src_dev || !dst_dev));
    if (bad) {
        misuse("cudaMemcpyAsync(%p, %p, %zu, kind %d): a range or the kind does not fit", dst, src,
               count, (int)kind);
        pthread_mutex_unlock(&g_mu);
        free(it);
        return cudaErrorInvalidValue;
    }
    it->kind = I_COPY;
    it->dst = dst;
    it->src = src;
    it->n = count;
    if (!src_dev) {
        it->snap = malloc(count);
        if (!it->snap)
            abort();
        memcpy(it->snap, src, count);
    }
    push(stream, it);
    pump();
    if (!dst_dev) /* to pageable memory: the host waits for the copy */
        drain(stream, "a copy to pageable host memory");
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

/* ---- NCCL ---------------------------------------------------------------------------------- */

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

ncclResult_t ncclGetVersion(int *version)
{
    int f = failing("ncclGetVersion");
    if (f)
        return (ncclResult_t)f;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    int f = failing("ncclGetUniqueId");
    if (f)
        return (ncclResult_t)f;
    pthread_mutex_lock(&g_mu);
    memset(uniqueId, 0, sizeof *uniqueId);
    snprintf(uniqueId->internal, sizeof uniqueId->internal, "fake-nccl-id-%u", ++g_id_counter);
    g_st.unique_ids++;
    pthread_mutex_unlock(&g_mu);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    int f = failing("ncclCommInitRank");
    if (f)
        return (ncclResult_t)f;
    if (nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    if (t_device < 0)
        return ncclUnhandledCudaError; /* no device chosen in this thread */
    pthread_mutex_lock(&g_mu);
    g_st.inits++;
    clique *q = g_cliques;
    while (q && memcmp(&q->id, &commId, sizeof commId) != 0)
        q = q->next;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q)
            abort();
        q->id = commId;
        q->nranks = nranks;
        q->next = g_cliques;
        g_cliques = q;
    }
    if (q->nranks != nranks || q->ranks[rank]) {
        misuse("ncclCommInitRank: rank %d of %d does not fit its clique", rank, nranks);
        pthread_mutex_unlock(&g_mu);
        return ncclInvalidUsage;
    }
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->q = q;
    c->rank = rank;
    c->nranks = nranks;
    c->refs = 1;
    q->ranks[rank] = c;
    q->joined++;
    double t0 = now_s();
    while (q->joined < nranks) { /* every rank joins, as NCCL's bootstrap waits */
        if (now_s() - t0 > 10.0) {
            q->ranks[rank] = NULL;
            q->joined--;
            pthread_mutex_unlock(&g_mu);
            free(c);
            return ncclSystemError;
        }
        pthread_mutex_unlock(&g_mu);
        nap();
        pthread_mutex_lock(&g_mu);
    }
    c->next_all = g_comms;
    g_comms = c;
    pthread_mutex_unlock(&g_mu);
    *comm = c;
    return ncclSuccess;
}

/* Under g_mu: the communicator leaves the live list and its clique. */
static void comm_end(struct ncclComm *c)
{
    for (struct ncclComm **pc = &g_comms; *pc; pc = &(*pc)->next_all)
        if (*pc == c) {
            *pc = c->next_all;
            break;
        }
    c->aborted = 1;
    clique *q = c->q;
    q->ranks[c->rank] = NULL;
    q->arrived[c->rank] = NULL;
    if (--q->joined == 0) {
        for (clique **pq = &g_cliques; *pq; pq = &(*pq)->next)
            if (*pq == q) {
                *pq = q->next;
                break;
            }
        free(q);
    }
    c->q = NULL;
    c->gone = 1;
    pump(); /* its queued collectives end */
    comm_unref(c);
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    pthread_mutex_lock(&g_mu);
    g_st.aborts++;
    if (!live_comm(comm)) {
        misuse("ncclCommAbort of a communicator that is not live");
        pthread_mutex_unlock(&g_mu);
        return ncclInvalidArgument;
    }
    comm_end(comm);
    pthread_mutex_unlock(&g_mu);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    pthread_mutex_lock(&g_mu);
    g_st.destroys++;
    if (!live_comm(comm)) {
        misuse("ncclCommDestroy of a communicator that is not live");
        pthread_mutex_unlock(&g_mu);
        return ncclInvalidArgument;
    }
    pump();
    if (comm->refs > 1)
        misuse("ncclCommDestroy with collectives still queued");
    comm_end(comm);
    pthread_mutex_unlock(&g_mu);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    pthread_mutex_lock(&g_mu);
    g_st.async_queries++;
    if (!live_comm(comm)) {
        misuse("ncclCommGetAsyncError on a communicator that is not live");
        pthread_mutex_unlock(&g_mu);
        return ncclInvalidArgument;
    }
    *asyncError = comm->async;
    pthread_mutex_unlock(&g_mu);
    return ncclSuccess;
}

/* Queues one rank's part of a collective. */
static ncclResult_t collective(int ckind, const void *send, void *recv, size_t count,
                               ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream)
{
    size_t es = type_size(t);
    if (es == 0)
        return ncclInvalidArgument;
    item *it = calloc(1, sizeof *it);
    if (!it)
        return ncclSystemError;
    pthread_mutex_lock(&g_mu);
    if (!live_comm(comm) || !live_stream(stream)) {
        misuse("a collective on a communicator or stream that is not live");
        pthread_mutex_unlock(&g_mu);
        free(it);
        return ncclInvalidArgument;
    }
    size_t bytes = count * es, rbytes = ckind == C_ALLGATHER ? bytes * (size_t)comm->nranks : bytes;
    int need_send = ckind != C_BCAST || root == comm->rank;
    if (root < 0 || root >= comm->nranks || (need_send && !dev_range(send, bytes)) ||
        !dev_range(recv, rbytes)) {
        /* a real NCCL fails (or faults) on host memory: nccl.c must have staged it */
        pthread_mutex_unlock(&g_mu);
        free(it);
        return ncclInvalidArgument;
    }
    it->kind = I_COLL;
    it->ckind = ckind;
    it->send = send;
    it->recv = recv;
    it->count = count;
    it->t = t;
    it->op = op;
    it->root = root;
    it->seq = comm->seq++;
    it->comm = comm;
    it->gate = t_hold_gate;
    t_hold_gate = -1;
    comm->refs++;
    push(stream, it);
    pump();
    pthread_mutex_unlock(&g_mu);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    int f = failing("ncclAllReduce");
    if (f)
        return (ncclResult_t)f;
    return collective(C_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    int f = failing("ncclBroadcast");
    if (f)
        return (ncclResult_t)f;
    return collective(C_BCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    int f = failing("ncclAllGather");
    if (f)
        return (ncclResult_t)f;
    return collective(C_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
                      stream);
}
