/*
 * nccl_mock.c - the control flow of the nccl communicator (lib/dist/nccl.c) on any machine:
 * nccl.c compiled next to libptc_core over a host imitation of the CUDA runtime and NCCL
 * (tests/gpu/fake_cuda_nccl.c). It needs no GPU and never skips; tests/gpu/nccl_check runs the
 * same module on a real GPU.
 *
 * What it checks: every collective on device and host buffers gives the right values (world 1
 * over the single communicator, world 2 over two threads); a collective on device buffers waits
 * for what the backend's stream held when it was called, and the backend's stream waits for a
 * request after ptc__comm_wait; host buffers are staged (the imitated NCCL refuses host
 * pointers); a collective that never finishes makes a blocking call and, with no call of nccl.c
 * running, the watchdog abort the communicator within the deadline (1 s here, through
 * ptc__nccl_set_timeout) with a message naming the rank; an asynchronous NCCL error does the
 * same; the refusals (no driver, no device, a backend without device_info, NCCL failing at
 * start, one rank of two failing to open); nothing leaked or misused (the imitation counts calls
 * a real runtime would refuse).
 */
#include "ptc/ptc.h"

#include "base/plugin.h"
#include "dist/dist.h"
#include "dist/nccl.h"

#include "fake_cuda_nccl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- checks --------------------------------------------------------------------------------- */

static int n_checks, n_failed;
static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

static void check(int ok, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *what, const char *fmt, ...)
{
    pthread_mutex_lock(&print_mu);
    n_checks++;
    if (ok) {
        printf("ok    %s\n", what);
    } else {
        n_failed++;
        printf("FAIL  %s: ", what);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
    pthread_mutex_unlock(&print_mu);
}

/* rc must be want; the error message printed otherwise. */
static void check_rc(int rc, int want, const ptc_error *err, const char *what)
{
    check(rc == want, what, "returned %s, expected %s (%s)", ptc_err_name(rc), ptc_err_name(want),
          rc < 0 ? err->message : "");
}

/* rc must be want and the message hold every one of the NULL-ended fragments. */
static void check_msg(int rc, int want, const ptc_error *err, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    const char *missing = NULL;
    for (const char *f; (f = va_arg(ap, const char *)) != NULL;)
        if (!missing && (rc >= 0 || !strstr(err->message, f)))
            missing = f;
    va_end(ap);
    check(rc == want && !missing, what, "returned %s (expected %s), message \"%s\"%s%s%s",
          ptc_err_name(rc), ptc_err_name(want), rc < 0 ? err->message : "",
          missing ? ", lacking \"" : "", missing ? missing : "", missing ? "\"" : "");
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(e_));                                                       \
            exit(99);                                                                              \
        }                                                                                          \
    } while (0)

/* ---- the stand-in backend -------------------------------------------------------------------- */

/* What a ptc__be points to here: the backend's stream and device, or a refusal. */
typedef struct standin_be {
    cudaStream_t stream;
    int device;
    int no_gpu;
} standin_be;

static int standin_device_info(ptc__be *be, void **stream, int *device, ptc_error *err)
{
    standin_be *b = (standin_be *)be;
    if (b->no_gpu)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "stand-in: no GPU for this rank");
    *stream = b->stream;
    *device = b->device;
    return 0;
}

static const ptc__backend_ops standin = {.name = "stand-in", .device_info = standin_device_info};

static void standin_init(standin_be *b, int device)
{
    memset(b, 0, sizeof *b);
    b->device = device;
    CU(cudaSetDevice(device));
    CU(cudaStreamCreateWithPriority(&b->stream, cudaStreamNonBlocking, 0));
}

/* ---- a host communicator of threads (world 1 or 2), for the bootstrap ----------------------- */

typedef struct thost_shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived;
    unsigned long round;
    const void *slot[2];
    int aborted_code[2];
} thost_shared;

typedef struct thost {
    ptc_comm c;
    thost_shared *sh;
} thost;

static void thost_barrier(thost_shared *sh)
{
    pthread_mutex_lock(&sh->mu);
    unsigned long r = sh->round;
    if (++sh->arrived == sh->size) {
        sh->arrived = 0;
        sh->round++;
        pthread_cond_broadcast(&sh->cv);
    } else {
        while (sh->round == r)
            pthread_cond_wait(&sh->cv, &sh->mu);
    }
    pthread_mutex_unlock(&sh->mu);
}

static int thost_bcast(ptc_comm *c, void *buf, size_t bytes, int root, ptc_error *err)
{
    (void)err;
    thost_shared *sh = ((thost *)c)->sh;
    sh->slot[c->rank] = buf;
    thost_barrier(sh);
    if (c->rank != root)
        memcpy(buf, sh->slot[root], bytes);
    thost_barrier(sh);
    return 0;
}

static int thost_allgather(ptc_comm *c, const void *send, void *recv, size_t bytes, ptc_error *err)
{
    (void)err;
    thost_shared *sh = ((thost *)c)->sh;
    sh->slot[c->rank] = send;
    thost_barrier(sh);
    for (int r = 0; r < c->size; r++)
        memcpy((unsigned char *)recv + (size_t)r * bytes, sh->slot[r], bytes);
    thost_barrier(sh);
    return 0;
}

static void thost_abort(ptc_comm *c, int code)
{
    ((thost *)c)->sh->aborted_code[c->rank] = code;
}

static const ptc__comm_ops thost_ops = {
    .name = "threads", .bcast = thost_bcast, .allgather = thost_allgather, .abort = thost_abort};

static void thost_init(thost *h, thost_shared *sh, int rank)
{
    memset(h, 0, sizeof *h);
    h->c.ops = &thost_ops;
    h->c.rank = rank;
    h->c.size = sh->size;
    h->c.local_size = sh->size;
    h->sh = sh;
}

/* ---- helpers ----------------------------------------------------------------------------------
 */

static const ptc__comm_plugin *g_cp;

static void pattern(float *v, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        v[i] = base + 0.5f * (float)(i % 97) - 7.0f;
}

/* The first element where a and b differ, or -1. */
static long differs(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

static void check_floats(const float *got, const float *want, size_t n, const char *what)
{
    long i = differs(got, want, n);
    check(i < 0, what, "element %ld is %g, expected %g", i, i < 0 ? 0.0 : (double)got[i],
          i < 0 ? 0.0 : (double)want[i]);
}

static fake_stats stats(void)
{
    fake_stats s;
    fake_get_stats(&s);
    return s;
}

/* The imitation tells what nccl.c relies on: device from host memory, an event never recorded
 * is complete, a recorded one only once its stream reached it, a collective refuses host
 * memory (so a buffer nccl.c forgot to stage fails the collective). */
static void test_imitation(standin_be *be)
{
    float h[4] = {0};
    float *d = NULL;
    CU(cudaMalloc((void **)&d, sizeof h));
    struct cudaPointerAttributes a;
    CU(cudaPointerGetAttributes(&a, d + 1));
    int dev = a.type == cudaMemoryTypeDevice;
    CU(cudaPointerGetAttributes(&a, h));
    check(dev && a.type != cudaMemoryTypeDevice, "imitation: device memory is told from host",
          "device %d, host type %d", dev, (int)a.type);
    cudaEvent_t ev;
    CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t q0 = cudaEventQuery(ev);
    int gate = fake_gate_new();
    fake_stream_hold(be->stream, gate);
    CU(cudaEventRecord(ev, be->stream));
    cudaError_t q1 = cudaEventQuery(ev);
    fake_gate_open(gate);
    cudaError_t q2 = cudaEventQuery(ev);
    check(q0 == cudaSuccess && q1 == cudaErrorNotReady && q2 == cudaSuccess,
          "imitation: events complete when their stream reaches them", "%d %d %d", (int)q0, (int)q1,
          (int)q2);
    CU(cudaEventDestroy(ev));
    ncclUniqueId id;
    ncclComm_t nc = NULL;
    check(ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&nc, 1, id, 0) == ncclSuccess,
          "imitation: a communicator of one", "%p", (void *)nc);
    if (nc) {
        ncclResult_t rh = ncclAllReduce(h, h, 4, ncclFloat32, ncclSum, nc, be->stream);
        ncclResult_t rd = ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, nc, be->stream);
        check(rh == ncclInvalidArgument && rd == ncclSuccess,
              "imitation: collectives refuse host memory", "host %d, device %d", (int)rh, (int)rd);
        CU(cudaStreamSynchronize(be->stream));
        ncclCommDestroy(nc);
    }
    CU(cudaFree(d));
}

/* ---- world 1 --------------------------------------------------------------------------------- */

static void test_probe_and_refusals(ptc_comm *host, standin_be *be)
{
    ptc_error err;
    const ptc__plugin *pl = ptc__nccl_plugin();
    check(strcmp(pl->name, "nccl") == 0 && pl->kind == PTC__PLUGIN_COMM &&
              pl->abi == PTC__PLUGIN_ABI,
          "descriptor: comm \"nccl\" of this ABI", "name %s kind %d abi %d", pl->name,
          (int)pl->kind, pl->abi);
    check(g_cp->open == NULL && g_cp->open_device != NULL, "only open_device is offered", "open %p",
          (void *)g_cp->open);
    check_rc(pl->probe(&err), 0, &err, "probe with a device");
    fake_set_no_driver(1);
    check_msg(pl->probe(&err), PTC_EUNSUPPORTED, &err, "probe without a driver", "no NVIDIA driver",
              NULL);
    fake_set_no_driver(0);
    fake_set_device_count(0);
    check_msg(pl->probe(&err), PTC_EUNSUPPORTED, &err, "probe without a device",
              "no CUDA device is present", NULL);
    fake_set_device_count(1);
    fake_fail_next("cudaGetDeviceCount", cudaErrorUnknown);
    check_msg(pl->probe(&err), PTC_ECOMM, &err, "probe when the runtime fails otherwise",
              "cudaGetDeviceCount", "unknown error", NULL);
    fake_fail_next("ncclGetVersion", ncclSystemError);
    check_msg(pl->probe(&err), PTC_ECOMM, &err, "probe when NCCL fails", "ncclGetVersion", NULL);

    fake_stats s0 = stats();
    ptc_comm *c = (ptc_comm *)1;
    static const ptc__backend_ops cpu = {.name = "cpu-like"};
    check_msg(g_cp->open_device(&c, host, &cpu, NULL, &err), PTC_EINVAL, &err,
              "open on a backend without device_info", "needs a GPU backend", "cpu-like", NULL);
    check(c == NULL, "a refused open leaves *out NULL", "%p", (void *)c);
    check_msg(g_cp->open_device(&c, NULL, &standin, (ptc__be *)be, &err), PTC_EINVAL, &err,
              "open without a host communicator", "host communicator", NULL);

    fake_set_device_count(0);
    check_msg(g_cp->open_device(&c, host, &standin, (ptc__be *)be, &err), PTC_ECOMM, &err,
              "open where the device is gone", "rank 0", "cudaSetDevice", "no CUDA-capable device",
              NULL);
    fake_set_device_count(1);
    fake_fail_next("cudaStreamCreateWithPriority", cudaErrorMemoryAllocation);
    check_msg(g_cp->open_device(&c, host, &standin, (ptc__be *)be, &err), PTC_ECOMM, &err,
              "open when the stream cannot be made", "cudaStreamCreateWithPriority",
              "out of memory", NULL);
    fake_fail_next("ncclGetUniqueId", ncclSystemError);
    check_msg(g_cp->open_device(&c, host, &standin, (ptc__be *)be, &err), PTC_ECOMM, &err,
              "open when ncclGetUniqueId fails", "rank 0", "ncclGetUniqueId", NULL);
    fake_fail_next("ncclCommInitRank", ncclInvalidUsage);
    check_msg(g_cp->open_device(&c, host, &standin, (ptc__be *)be, &err), PTC_ECOMM, &err,
              "open when ncclCommInitRank fails", "rank 0", "ncclCommInitRank", "invalid usage",
              NULL);
    check(c == NULL, "failed opens leave *out NULL", "%p", (void *)c);
    fake_stats s1 = stats();
    check(s1.live_streams == s0.live_streams && s1.live_events == s0.live_events &&
              s1.live_allocs == s0.live_allocs && s1.live_comms == s0.live_comms,
          "failed opens leave no stream, event, memory or communicator",
          "streams %d -> %d, events %d -> %d, allocs %d -> %d, comms %d -> %d", s0.live_streams,
          s1.live_streams, s0.live_events, s1.live_events, s0.live_allocs, s1.live_allocs,
          s0.live_comms, s1.live_comms);
}

/* Device buffers at world 1: a sum is the identity, so values come back as they went in; the
 * order of streams is seen through gates. */
static void test_device_world1(ptc_comm *c, standin_be *be)
{
    ptc_error err;
    enum { N = 1000 };
    cudaStream_t bs = be->stream;
    float want[N], got[N];
    float *d = NULL, *d2 = NULL;
    CU(cudaMalloc((void **)&d, sizeof want));
    CU(cudaMalloc((void **)&d2, sizeof want));

    pattern(want, N, 1.0f);
    CU(cudaMemcpyAsync(d, want, sizeof want, cudaMemcpyHostToDevice, bs));
    check_rc(c->ops->allreduce(c, d, N, PTC__C_F32, PTC__C_SUM, &err), 0, &err,
             "device all-reduce");
    CU(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, bs));
    check_floats(got, want, N, "device all-reduce values");

    /* the all-reduce comes after what the backend's stream holds: a copy behind a closed gate */
    int gate = fake_gate_new();
    fake_stream_hold(bs, gate);
    pattern(want, N, 3.0f);
    CU(cudaMemcpyAsync(d, want, sizeof want, cudaMemcpyHostToDevice, bs));
    int ran0 = stats().collectives_run;
    ptc__creq *q = NULL;
    check_rc(c->ops->iallreduce(c, d, N, PTC__C_F32, PTC__C_SUM, &q, &err), 0, &err,
             "iallreduce behind a busy backend stream");
    int done = -1;
    if (q)
        check_rc(c->ops->test(c, q, &done, &err), 0, &err, "test while the backend is busy");
    check(done == 0 && stats().collectives_run == ran0,
          "the all-reduce waits for the event recorded on the backend's stream",
          "done %d, collectives run %d -> %d", done, ran0, stats().collectives_run);
    fake_gate_open(gate);
    if (q)
        check_rc(c->ops->test(c, q, &done, &err), 0, &err, "test once the backend went on");
    check(done == 1 && stats().collectives_run == ran0 + 1,
          "the all-reduce ran once the backend's stream reached the event",
          "done %d, collectives run %d -> %d", done, ran0, stats().collectives_run);
    if (q)
        check_rc(c->ops->wait(c, q, &err), 0, &err, "wait after test");
    CU(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, bs));
    check_floats(got, want, N, "iallreduce values (the copy before it was seen)");

    /* wait returns at once and makes the backend's stream wait for the completion event */
    gate = fake_gate_new();
    fake_hold_next_collective(gate);
    q = NULL;
    check_rc(c->ops->iallreduce(c, d, N, PTC__C_F32, PTC__C_MAX, &q, &err), 0, &err,
             "iallreduce held by a slow peer");
    double t0 = now();
    if (q)
        check_rc(c->ops->wait(c, q, &err), 0, &err, "wait on a collective in flight");
    double dt = now() - t0;
    check(dt < 0.5, "wait does not block the host", "%.3f s", dt);
    memset(d2, 0, sizeof want);
    CU(cudaMemcpyAsync(d2, d, sizeof want, cudaMemcpyDeviceToDevice, bs));
    long first = differs(d2, want, N); /* fake device memory is host memory */
    check(first == 0, "the backend's stream waits on the completion event (nothing copied yet)",
          "element 0 of the copy is %g", (double)d2[0]);
    fake_gate_open(gate);
    CU(cudaStreamSynchronize(bs));
    check_floats(d2, want, N, "the backend's copy after the all-reduce finished");

    /* waited for at once on a host buffer: finished before iallreduce returned */
    float h[N];
    pattern(h, N, 5.0f);
    q = NULL;
    check_rc(c->ops->iallreduce(c, h, N, PTC__C_F32, PTC__C_MIN, &q, &err), 0, &err,
             "iallreduce on a host buffer");
    done = 0;
    if (q) {
        check_rc(c->ops->test(c, q, &done, &err), 0, &err, "test of a host iallreduce");
        check_rc(c->ops->wait(c, q, &err), 0, &err, "wait of a host iallreduce");
    }
    pattern(want, N, 5.0f);
    check(done == 1, "a host iallreduce is done when it returns", "done %d", done);
    check_floats(h, want, N, "host iallreduce values");

    /* broadcast and all-gather on device buffers */
    pattern(want, N, 9.0f);
    CU(cudaMemcpyAsync(d, want, sizeof want, cudaMemcpyHostToDevice, bs));
    check_rc(c->ops->bcast(c, d, sizeof want, 0, &err), 0, &err, "device broadcast");
    CU(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, bs));
    check_floats(got, want, N, "device broadcast values");
    check_rc(c->ops->allgather(c, d, d2, sizeof want, &err), 0, &err, "device all-gather");
    CU(cudaMemcpyAsync(got, d2, sizeof got, cudaMemcpyDeviceToHost, bs));
    check_floats(got, want, N, "device all-gather values");
    pattern(want, N, 11.0f);
    check_rc(c->ops->allgather(c, want, d2, sizeof want, &err), 0, &err,
             "all-gather host to device (staged)");
    CU(cudaMemcpyAsync(got, d2, sizeof got, cudaMemcpyDeviceToHost, bs));
    check_floats(got, want, N, "host-to-device all-gather values");
    memset(got, 0, sizeof got);
    check_rc(c->ops->allgather(c, d2, got, sizeof want, &err), 0, &err,
             "all-gather device to host (staged)");
    check_floats(got, want, N, "device-to-host all-gather values");
    CU(cudaFree(d2));
    CU(cudaFree(d));
}

static void test_host_world1(ptc_comm *c)
{
    ptc_error err;
    enum { N = 3000 };
    static float f[N], fw[N];
    /* small first, then larger: the staging buffer grows */
    float one[3] = {1.5f, -2.0f, 4.0f};
    check_rc(c->ops->allreduce(c, one, 3, PTC__C_F32, PTC__C_SUM, &err), 0, &err,
             "host float32 all-reduce of 3");
    check(one[0] == 1.5f && one[1] == -2.0f && one[2] == 4.0f, "its values", "%g %g %g",
          (double)one[0], (double)one[1], (double)one[2]);
    pattern(fw, N, 2.0f);
    memcpy(f, fw, sizeof f);
    check_rc(c->ops->allreduce(c, f, N, PTC__C_F32, PTC__C_SUM, &err), 0, &err,
             "host float32 all-reduce of 3000 (staging grows)");
    check_floats(f, fw, N, "its values");
    double dd[3] = {1.25, -2.5, 1e300};
    check_rc(c->ops->allreduce(c, dd, 3, PTC__C_F64, PTC__C_SUM, &err), 0, &err,
             "host float64 all-reduce");
    check(dd[0] == 1.25 && dd[1] == -2.5 && dd[2] == 1e300, "its values", "%g %g %g", dd[0], dd[1],
          dd[2]);
    int64_t counts[2] = {9876543210LL, -3};
    check_rc(c->ops->allreduce(c, counts, 2, PTC__C_I64, PTC__C_SUM, &err), 0, &err,
             "host int64 all-reduce");
    check(counts[0] == 9876543210LL && counts[1] == -3, "its values", "%lld %lld",
          (long long)counts[0], (long long)counts[1]);
    check_rc(c->ops->allreduce(c, counts, 0, PTC__C_I64, PTC__C_SUM, &err), 0, &err,
             "an all-reduce of nothing");
    uint64_t h = 0x0123456789abcdefULL, all = 0;
    check_rc(c->ops->bcast(c, &h, sizeof h, 0, &err), 0, &err, "host broadcast");
    check(h == 0x0123456789abcdefULL, "its value", "%llx", (unsigned long long)h);
    check_rc(c->ops->allgather(c, &h, &all, sizeof h, &err), 0, &err, "host all-gather");
    check(all == h, "its value", "%llx", (unsigned long long)all);
    check_rc(c->ops->barrier(c, &err), 0, &err, "barrier");
    /* the test's own device buffers are freed by now */
    check(stats().live_allocs == 1, "host buffers are staged through one device buffer",
          "%d device allocations", stats().live_allocs);
    /* refusals */
    check_msg(c->ops->bcast(c, &h, sizeof h, 1, &err), PTC_EINVAL, &err,
              "broadcast from a rank that does not exist", "rank 1 of 1", NULL);
    unsigned char b[4] = {1, 2, 3, 4};
    check_msg(c->ops->allreduce(c, b, 4, PTC__C_BYTE, PTC__C_SUM, &err), PTC_EINVAL, &err,
              "a byte all-reduce", "bytes cannot be reduced", NULL);
    fake_fail_next("ncclAllReduce", ncclInternalError);
    check_msg(c->ops->allreduce(c, f, N, PTC__C_F32, PTC__C_SUM, &err), PTC_ECOMM, &err,
              "an all-reduce NCCL refuses", "rank 0", "ncclAllReduce", "internal error", NULL);
    check_rc(c->ops->allreduce(c, f, N, PTC__C_F32, PTC__C_SUM, &err), 0, &err,
             "the communicator still works after a refused call");
}

static ptc_comm *open1(ptc_comm *host, standin_be *be, double timeout)
{
    ptc_error err;
    ptc_comm *c = NULL;
    int rc = g_cp->open_device(&c, host, &standin, (ptc__be *)be, &err);
    check_rc(rc, 0, &err, "open at world 1");
    if (rc == 0)
        ptc__nccl_set_timeout(c, timeout);
    return rc == 0 ? c : NULL;
}

/* A collective that never finishes, while a blocking call waits for it. */
static void test_timeout_blocking(ptc_comm *host, standin_be *be)
{
    ptc_error err;
    ptc_comm *c = open1(host, be, 1.0);
    if (!c)
        return;
    float *d = NULL;
    CU(cudaMalloc((void **)&d, 16 * sizeof *d));
    int aborts0 = stats().aborts, queries0 = stats().async_queries;
    fake_hold_next_collective(fake_gate_new()); /* never opened: a dead peer */
    double t0 = now();
    int rc = c->ops->allreduce(c, d, 16, PTC__C_F32, PTC__C_SUM, &err);
    double dt = now() - t0;
    check_msg(rc, PTC_ECOMM, &err, "a blocking all-reduce with a dead peer fails", "rank 0",
              "all-reduce of 64 bytes", "did not finish within 1 s", "a peer is gone", "aborted",
              NULL);
    check(dt >= 0.9 && dt < 3.0, "it fails at the deadline (1 s)", "after %.2f s", dt);
    check(stats().aborts == aborts0 + 1, "the communicator was aborted (ncclCommAbort)",
          "aborts %d -> %d", aborts0, stats().aborts);
    check(stats().async_queries > queries0, "the wait polled ncclCommGetAsyncError",
          "%d -> %d queries", queries0, stats().async_queries);
    check_msg(c->ops->bcast(c, d, 8, 0, &err), PTC_ECOMM, &err,
              "every later call returns the reason", "rank 0", "did not finish within 1 s", NULL);
    CU(cudaStreamSynchronize(be->stream));
    c->ops->close(c);
    CU(cudaFree(d));
}

/* A collective that never finishes while nothing of nccl.c runs: the watchdog ends it. First
 * the backend blocks on its stream (waiting for the request); then a request is tested. */
static void test_watchdog(ptc_comm *host, standin_be *be)
{
    ptc_error err;
    float *d = NULL;
    CU(cudaMalloc((void **)&d, 256 * sizeof *d));
    ptc_comm *c = open1(host, be, 1.0);
    if (c) {
        int aborts0 = stats().aborts;
        ptc__creq *q = NULL;
        fake_hold_next_collective(fake_gate_new());
        check_rc(c->ops->iallreduce(c, d, 256, PTC__C_F32, PTC__C_SUM, &q, &err), 0, &err,
                 "iallreduce with a dead peer");
        if (q)
            check_rc(c->ops->wait(c, q, &err), 0, &err, "wait queues the backend's wait");
        double t0 = now();
        CU(cudaStreamSynchronize(be->stream)); /* the backend blocks: only the watchdog helps */
        double dt = now() - t0;
        check(dt >= 0.9 && dt < 3.0 && stats().aborts == aborts0 + 1,
              "the watchdog aborts the communicator the backend waits on, at the deadline",
              "the backend's stream drained after %.2f s, aborts %d -> %d", dt, aborts0,
              stats().aborts);
        check_msg(c->ops->allreduce(c, d, 256, PTC__C_F32, PTC__C_SUM, &err), PTC_ECOMM, &err,
                  "the next call names the rank and the collective", "rank 0",
                  "all-reduce of 1 KiB", "did not finish within 1 s", NULL);
        c->ops->close(c);
    }
    c = open1(host, be, 1.0);
    if (c) {
        ptc__creq *q = NULL;
        fake_hold_next_collective(fake_gate_new());
        check_rc(c->ops->iallreduce(c, d, 256, PTC__C_F32, PTC__C_SUM, &q, &err), 0, &err,
                 "iallreduce with a dead peer (tested)");
        int done = 0, rc = 0;
        double t0 = now();
        while (q && rc == 0 && !done && now() - t0 < 5.0) {
            rc = c->ops->test(c, q, &done, &err);
            sleep_s(0.01);
        }
        double dt = now() - t0;
        check_msg(rc, PTC_ECOMM, &err, "test returns the watchdog's reason", "rank 0", "all-reduce",
                  "a peer is gone", NULL);
        check(dt >= 0.9 && dt < 3.0, "within the deadline", "after %.2f s", dt);
        if (q)
            check_msg(c->ops->wait(c, q, &err), PTC_ECOMM, &err, "wait returns it too", "rank 0",
                      NULL);
        c->ops->close(c);
    }
    /* a blocking all-reduce queued behind a request that never finishes: the watchdog aborts
     * for the request, which ends both on the stream; the blocking call must not take its
     * ended collective for a finished one */
    c = open1(host, be, 1.0);
    if (c) {
        ptc__creq *q = NULL;
        fake_hold_next_collective(fake_gate_new());
        check_rc(c->ops->iallreduce(c, d, 128, PTC__C_F32, PTC__C_SUM, &q, &err), 0, &err,
                 "iallreduce with a dead peer, then a blocking all-reduce");
        sleep_s(0.7); /* the watchdog's deadline comes before the blocking call's own */
        int aborts0 = stats().aborts;
        check_msg(c->ops->allreduce(c, d + 128, 128, PTC__C_F32, PTC__C_SUM, &err), PTC_ECOMM, &err,
                  "the blocking all-reduce ended by the watchdog's abort fails", "rank 0",
                  "a peer is gone", NULL);
        check(stats().aborts == aborts0 + 1, "it was the watchdog's abort", "aborts %d -> %d",
              aborts0, stats().aborts);
        if (q)
            check_msg(c->ops->wait(c, q, &err), PTC_ECOMM, &err, "and the request fails", "rank 0",
                      NULL);
        c->ops->close(c);
    }
    /* a device that fails while a request is tested */
    c = open1(host, be, 30.0);
    if (c) {
        ptc__creq *q = NULL;
        int gate = fake_gate_new();
        fake_hold_next_collective(gate);
        check_rc(c->ops->iallreduce(c, d, 128, PTC__C_F32, PTC__C_SUM, &q, &err), 0, &err,
                 "iallreduce, then the device fails");
        int done = 0;
        fake_fail_next("cudaEventQuery", cudaErrorIllegalAddress);
        if (q)
            check_msg(c->ops->test(c, q, &done, &err), PTC_ECOMM, &err,
                      "test says which call failed and why", "rank 0", "cudaEventQuery(q->ev)",
                      "illegal memory access", NULL);
        fake_gate_open(gate);
        if (q)
            check_rc(c->ops->wait(c, q, &err), 0, &err, "wait once the collective finished");
        c->ops->close(c);
    }
    /* an asynchronous NCCL error (a peer's failure) aborts at once */
    c = open1(host, be, 30.0);
    if (c) {
        int gate = fake_gate_new();
        fake_hold_next_collective(gate);
        fake_set_async_error(0, ncclRemoteError);
        double t0 = now();
        check_msg(c->ops->allreduce(c, d, 4, PTC__C_F32, PTC__C_SUM, &err), PTC_ECOMM, &err,
                  "an asynchronous NCCL error fails the all-reduce", "rank 0",
                  "all-reduce of 16 bytes failed", "remote process exited", "aborted", NULL);
        check(now() - t0 < 1.0, "without waiting for the deadline", "after %.2f s", now() - t0);
        c->ops->close(c);
    }
    CU(cudaFree(d));
}

/* abort through the communicator: the host communicator is told, later calls refuse. */
static void test_abort(void)
{
    ptc_error err;
    thost_shared sh = {.size = 1};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    thost h;
    thost_init(&h, &sh, 0);
    standin_be be;
    standin_init(&be, 0);
    ptc_comm *c = open1(&h.c, &be, 1.0);
    if (c) {
        int aborts0 = stats().aborts;
        c->ops->abort(c, 3);
        check(sh.aborted_code[0] == 3 && stats().aborts == aborts0 + 1,
              "abort aborts NCCL and ends the host communicator", "host code %d, aborts %d -> %d",
              sh.aborted_code[0], aborts0, stats().aborts);
        float x = 1.0f;
        check_msg(c->ops->allreduce(c, &x, 1, PTC__C_F32, PTC__C_SUM, &err), PTC_ECOMM, &err,
                  "a call after abort", "rank 0: the job was aborted", NULL);
        c->ops->close(c);
    }
    CU(cudaStreamDestroy(be.stream));
    pthread_cond_destroy(&sh.cv);
    pthread_mutex_destroy(&sh.mu);
}

/* ---- world 2: two threads ------------------------------------------------------------------ */

typedef struct rank_arg {
    thost_shared *sh;
    int rank, scenario;
} rank_arg;

enum { S_WORK, S_FAIL_OPEN, S_DEAD_PEER };

static void *rank_main(void *p)
{
    rank_arg *a = p;
    int r = a->rank;
    ptc_error err;
    char what[160];
    thost h;
    thost_init(&h, a->sh, r);
    standin_be be;
    standin_init(&be, r);
    if (a->scenario == S_FAIL_OPEN && r == 1)
        be.no_gpu = 1;
    ptc_comm *c = NULL;
    int rc = g_cp->open_device(&c, &h.c, &standin, (ptc__be *)&be, &err);
    if (a->scenario == S_FAIL_OPEN) {
        snprintf(what, sizeof what, "world 2, rank 1 without a GPU: rank %d's open fails", r);
        if (r == 0)
            check_msg(rc, PTC_ECOMM, &err, what, "rank 0: cannot open the nccl communicator",
                      "rank 1 could not", NULL);
        else
            check_msg(rc, PTC_EUNSUPPORTED, &err, what, "no GPU for this rank", NULL);
        if (rc == 0)
            c->ops->close(c);
        CU(cudaStreamDestroy(be.stream));
        return NULL;
    }
    snprintf(what, sizeof what, "world 2: rank %d opens", r);
    check_rc(rc, 0, &err, what);
    if (rc < 0) {
        CU(cudaStreamDestroy(be.stream));
        return NULL;
    }
    ptc__nccl_set_timeout(c, 1.0);
    enum { N = 500 };
    float v[N], want[N], got[N];
    float *d = NULL, *d2 = NULL;
    CU(cudaMalloc((void **)&d, sizeof v));
    CU(cudaMalloc((void **)&d2, 2 * sizeof v));
    if (a->scenario == S_DEAD_PEER) {
        /* rank 1 never joins the all-reduce: rank 0 times out naming itself */
        if (r == 0) {
            double t0 = now();
            rc = c->ops->allreduce(c, d, N, PTC__C_F32, PTC__C_SUM, &err);
            double dt = now() - t0;
            check_msg(rc, PTC_ECOMM, &err, "world 2, rank 1 gone: rank 0's all-reduce fails",
                      "rank 0: NCCL all-reduce of 1.95 KiB did not finish within 1 s",
                      "a peer is gone", NULL);
            check(dt >= 0.9 && dt < 3.0, "world 2: at the deadline", "after %.2f s", dt);
        }
    } else {
        /* sum: rank r holds (r + 1) x pattern, the sum is 3 x pattern */
        pattern(v, N, 1.0f);
        for (int i = 0; i < N; i++) {
            want[i] = 3.0f * v[i];
            v[i] *= (float)(r + 1);
        }
        CU(cudaMemcpyAsync(d, v, sizeof v, cudaMemcpyHostToDevice, be.stream));
        snprintf(what, sizeof what, "world 2: rank %d device all-reduce", r);
        check_rc(c->ops->allreduce(c, d, N, PTC__C_F32, PTC__C_SUM, &err), 0, &err, what);
        CU(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, be.stream));
        snprintf(what, sizeof what, "world 2: rank %d device all-reduce sums", r);
        check_floats(got, want, N, what);
        /* non-blocking, then the backend's copy ordered after it by wait */
        CU(cudaMemcpyAsync(d, v, sizeof v, cudaMemcpyHostToDevice, be.stream));
        ptc__creq *q = NULL;
        rc = c->ops->iallreduce(c, d, N, PTC__C_F32, PTC__C_SUM, &q, &err);
        if (rc == 0)
            rc = c->ops->wait(c, q, &err);
        snprintf(what, sizeof what, "world 2: rank %d iallreduce and wait", r);
        check_rc(rc, 0, &err, what);
        CU(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, be.stream));
        snprintf(what, sizeof what, "world 2: rank %d iallreduce sums", r);
        check_floats(got, want, N, what);
        /* host: max of int64 */
        int64_t m[2] = {10 * r, -10 * r};
        rc = c->ops->allreduce(c, m, 2, PTC__C_I64, PTC__C_MAX, &err);
        snprintf(what, sizeof what, "world 2: rank %d host int64 max", r);
        check(rc == 0 && m[0] == 10 && m[1] == 0, what, "rc %d, %lld %lld (%s)", rc,
              (long long)m[0], (long long)m[1], rc < 0 ? err.message : "");
        /* broadcast from rank 1, device and host */
        pattern(want, N, 40.0f);
        if (r == 1)
            memcpy(v, want, sizeof v);
        else
            memset(v, 0, sizeof v);
        CU(cudaMemcpyAsync(d, v, sizeof v, cudaMemcpyHostToDevice, be.stream));
        rc = c->ops->bcast(c, d, sizeof v, 1, &err);
        CU(cudaMemcpyAsync(got, d, sizeof got, cudaMemcpyDeviceToHost, be.stream));
        snprintf(what, sizeof what, "world 2: rank %d device broadcast from rank 1", r);
        check(rc == 0 && differs(got, want, N) < 0, what, "rc %d, first difference %ld", rc,
              differs(got, want, N));
        rc = c->ops->bcast(c, v, sizeof v, 1, &err);
        snprintf(what, sizeof what, "world 2: rank %d host broadcast from rank 1", r);
        check(rc == 0 && differs(v, want, N) < 0, what, "rc %d, first difference %ld", rc,
              differs(v, want, N));
        /* all-gather: rank r sends its rank everywhere */
        for (int i = 0; i < N; i++)
            v[i] = (float)(100 * r + i);
        CU(cudaMemcpyAsync(d, v, sizeof v, cudaMemcpyHostToDevice, be.stream));
        rc = c->ops->allgather(c, d, d2, sizeof v, &err);
        float all[2 * N];
        CU(cudaMemcpyAsync(all, d2, sizeof all, cudaMemcpyDeviceToHost, be.stream));
        int bad = -1;
        for (int i = 0; i < 2 * N && bad < 0; i++)
            if (all[i] != (float)(100 * (i / N) + i % N))
                bad = i;
        snprintf(what, sizeof what, "world 2: rank %d device all-gather", r);
        check(rc == 0 && bad < 0, what, "rc %d, element %d is %g", rc, bad,
              bad < 0 ? 0.0 : (double)all[bad]);
        memset(all, 0, sizeof all);
        rc = c->ops->allgather(c, v, all, sizeof v, &err);
        bad = -1;
        for (int i = 0; i < 2 * N && bad < 0; i++)
            if (all[i] != (float)(100 * (i / N) + i % N))
                bad = i;
        snprintf(what, sizeof what, "world 2: rank %d host all-gather", r);
        check(rc == 0 && bad < 0, what, "rc %d, element %d is %g", rc, bad,
              bad < 0 ? 0.0 : (double)all[bad]);
        snprintf(what, sizeof what, "world 2: rank %d barrier", r);
        check_rc(c->ops->barrier(c, &err), 0, &err, what);
    }
    /* both ranks are past their collectives before either closes (as a job's ranks are) */
    thost_barrier(a->sh);
    c->ops->close(c);
    CU(cudaFree(d2));
    CU(cudaFree(d));
    CU(cudaStreamDestroy(be.stream));
    return NULL;
}

static void world2(int scenario)
{
    thost_shared sh = {.size = 2};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    rank_arg a[2] = {{&sh, 0, scenario}, {&sh, 1, scenario}};
    pthread_t t[2];
    for (int r = 0; r < 2; r++)
        if (pthread_create(&t[r], NULL, rank_main, &a[r]) != 0) {
            fprintf(stderr, "nccl_mock: cannot start a thread\n");
            exit(99);
        }
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    pthread_cond_destroy(&sh.cv);
    pthread_mutex_destroy(&sh.mu);
}

int main(void)
{
    ptc_error err;
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_cp = ptc__nccl_plugin()->ops;
    ptc_comm *host = NULL;
    if (ptc__comm_single_open(&host, &err) < 0) {
        printf("nccl_mock: %s\n", err.message);
        return 99;
    }
    standin_be be;
    standin_init(&be, 0);
    fake_stats s0 = stats();

    test_imitation(&be);
    test_probe_and_refusals(host, &be);
    ptc_comm *c = open1(host, &be, 30.0);
    if (c) {
        check(strcmp(c->ops->name, "nccl") == 0 && c->rank == 0 && c->size == 1,
              "world 1: name, rank and size", "%s %d %d", c->ops->name, c->rank, c->size);
        test_device_world1(c, &be);
        test_host_world1(c);
        int d0 = stats().destroys;
        c->ops->close(c);
        check(stats().destroys == d0 + 1, "close destroys the NCCL communicator",
              "destroys %d -> %d", d0, stats().destroys);
    }
    test_timeout_blocking(host, &be);
    test_watchdog(host, &be);
    test_abort();
    host->ops->close(host);

    fake_set_device_count(2);
    world2(S_WORK);
    world2(S_FAIL_OPEN);
    world2(S_DEAD_PEER);

    CU(cudaStreamDestroy(be.stream));
    fake_stats s1 = stats();
    check(s1.misuse == 0, "no call a real runtime would refuse", "%d, the first: %s", s1.misuse,
          s1.first_misuse);
    check(s1.live_allocs == 0 && s1.live_streams == 0 && s1.live_events == 0 && s1.live_comms == 0,
          "everything made was released",
          "device allocations %d, streams %d, events %d, communicators %d", s1.live_allocs,
          s1.live_streams, s1.live_events, s1.live_comms);
    (void)s0;
    printf("nccl_mock: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
