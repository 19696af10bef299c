/*
 * nccl_check.c - the nccl communicator (module comm-nccl.so) at world 1, on a GPU: every
 * collective on device buffers (cudaMalloc) and on host buffers (staged by the module), the
 * non-blocking all-reduce with test and wait, broadcast, all-gather, barrier, and the refusals.
 *
 * No cuda backend is needed: a stand-in backend table whose device_info hands out a stream made
 * here plays the backend's part, and the data is put on and taken off the device on that stream,
 * so the checks also see that the module orders its collectives after the backend's stream and
 * the backend's stream after a waited-for request. At world 1 a sum is the identity: the values
 * must come back exactly as they went in, through NCCL and the staging copies.
 *
 * The module is found through the plugin loader (PTC_PLUGIN_PATH is the build tree's lib/.libs
 * under make check). Exit 77 with the reason when no GPU (or no driver) is present.
 */
#include "ptc/ptc.h"

#include "base/plugin.h"
#include "dist/dist.h"

#include "../unit/check.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <time.h>

static cudaStream_t g_stream;

static int standin_device_info(ptc__be *be, void **stream, int *device, ptc_error *err)
{
    (void)be, (void)err;
    *stream = g_stream;
    *device = 0;
    return 0;
}

static const ptc__backend_ops standin = {.name = "stand-in", .device_info = standin_device_info};

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(e_));                                                       \
            exit(99);                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_OK(rc, err)                                                                          \
    do {                                                                                           \
        int ck_ = (rc);                                                                            \
        CHECK_CODE(ck_, 0, err);                                                                   \
    } while (0)

/* n floats i * 0.5 - 7, the same on host and device. */
static void pattern(float *v, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        v[i] = base + 0.5f * (float)(i % 4096) - 7.0f;
}

static int same_floats(const float *a, const float *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "%s: element %zu is %g, expected %g\n", what, i, a[i], b[i]);
            return 0;
        }
    return 1;
}

static void test_device_allreduce(ptc_comm *c, size_t n)
{
    ptc_error err;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got), *d = NULL;
    CU(cudaMalloc((void **)&d, n * sizeof *d));
    pattern(want, n, 1.0f);
    /* queued on the backend's stream: the all-reduce must come after it */
    CU(cudaMemcpyAsync(d, want, n * sizeof *d, cudaMemcpyHostToDevice, g_stream));
    CHECK_OK(c->ops->allreduce(c, d, n, PTC__C_F32, PTC__C_SUM, &err), &err);
    CU(cudaMemcpyAsync(got, d, n * sizeof *d, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    CHECK(same_floats(got, want, n, "device all-reduce"));

    /* non-blocking: test until done (at most 30 s), then wait orders the backend's stream */
    pattern(want, n, 3.0f);
    CU(cudaMemcpyAsync(d, want, n * sizeof *d, cudaMemcpyHostToDevice, g_stream));
    ptc__creq *q = NULL;
    CHECK_OK(c->ops->iallreduce(c, d, n, PTC__C_F32, PTC__C_SUM, &q, &err), &err);
    CHECK(q != NULL);
    if (q) {
        int done = 0, rc = 0;
        time_t t0 = time(NULL);
        while (!done && rc == 0 && time(NULL) - t0 < 30)
            rc = c->ops->test(c, q, &done, &err);
        CHECK_OK(rc, &err);
        CHECK_INT(done, 1);
        CHECK_OK(c->ops->wait(c, q, &err), &err);
    }
    CU(cudaMemcpyAsync(got, d, n * sizeof *d, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    CHECK(same_floats(got, want, n, "device iallreduce"));

    /* waited for at once, without a test: the backend's stream still comes after it */
    pattern(want, n, 5.0f);
    CU(cudaMemcpyAsync(d, want, n * sizeof *d, cudaMemcpyHostToDevice, g_stream));
    q = NULL;
    CHECK_OK(c->ops->iallreduce(c, d, n, PTC__C_F32, PTC__C_MAX, &q, &err), &err);
    if (q)
        CHECK_OK(c->ops->wait(c, q, &err), &err);
    CU(cudaMemcpyAsync(got, d, n * sizeof *d, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    CHECK(same_floats(got, want, n, "device iallreduce then wait"));

    /* device broadcast */
    pattern(want, n, 9.0f);
    CU(cudaMemcpyAsync(d, want, n * sizeof *d, cudaMemcpyHostToDevice, g_stream));
    CHECK_OK(c->ops->bcast(c, d, n * sizeof *d, 0, &err), &err);
    CU(cudaMemcpyAsync(got, d, n * sizeof *d, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    CHECK(same_floats(got, want, n, "device broadcast"));

    /* device all-gather (world 1: recv = send) */
    float *d2 = NULL;
    CU(cudaMalloc((void **)&d2, n * sizeof *d2));
    CU(cudaMemsetAsync(d2, 0, n * sizeof *d2, g_stream));
    CHECK_OK(c->ops->allgather(c, d, d2, n * sizeof *d, &err), &err);
    CU(cudaMemcpyAsync(got, d2, n * sizeof *d2, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    CHECK(same_floats(got, want, n, "device all-gather"));
    /* host send, device recv (staged) */
    pattern(want, n, 11.0f);
    CHECK_OK(c->ops->allgather(c, want, d2, n * sizeof *d2, &err), &err);
    CU(cudaMemcpyAsync(got, d2, n * sizeof *d2, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    CHECK(same_floats(got, want, n, "host-to-device all-gather"));
    CU(cudaFree(d2));
    CU(cudaFree(d));
    free(want);
    free(got);
}

static void test_host(ptc_comm *c)
{
    ptc_error err;
    enum { N = 3000 };
    static float f[N], fw[N];
    pattern(fw, N, 2.0f);
    memcpy(f, fw, sizeof f);
    CHECK_OK(c->ops->allreduce(c, f, N, PTC__C_F32, PTC__C_SUM, &err), &err);
    CHECK(same_floats(f, fw, N, "host float32 all-reduce"));
    double dd[3] = {1.25, -2.5, 1e300};
    CHECK_OK(c->ops->allreduce(c, dd, 3, PTC__C_F64, PTC__C_SUM, &err), &err);
    CHECK(dd[0] == 1.25 && dd[1] == -2.5 && dd[2] == 1e300);
    int64_t counts[2] = {9876543210LL, -3};
    CHECK_OK(c->ops->allreduce(c, counts, 2, PTC__C_I64, PTC__C_SUM, &err), &err);
    CHECK_INT(counts[0], 9876543210LL);
    CHECK_INT(counts[1], -3);
    CHECK_OK(c->ops->allreduce(c, counts, 0, PTC__C_I64, PTC__C_SUM, &err), &err);
    /* the host non-blocking form finishes before it returns */
    memcpy(f, fw, sizeof f);
    ptc__creq *q = NULL;
    CHECK_OK(c->ops->iallreduce(c, f, N, PTC__C_F32, PTC__C_MIN, &q, &err), &err);
    if (q) {
        int done = 0;
        CHECK_OK(c->ops->test(c, q, &done, &err), &err);
        CHECK_INT(done, 1);
        CHECK_OK(c->ops->wait(c, q, &err), &err);
    }
    CHECK(same_floats(f, fw, N, "host iallreduce"));
    /* broadcast of a layout fingerprint, all-gather of one, barrier */
    uint64_t h = 0x0123456789abcdefULL, all = 0;
    CHECK_OK(c->ops->bcast(c, &h, sizeof h, 0, &err), &err);
    CHECK(h == 0x0123456789abcdefULL);
    CHECK_OK(c->ops->allgather(c, &h, &all, sizeof h, &err), &err);
    CHECK(all == h);
    CHECK_OK(c->ops->barrier(c, &err), &err);
    /* refusals */
    CHECK_CODE(c->ops->bcast(c, &h, sizeof h, 1, &err), PTC_EINVAL, &err);
    unsigned char b[4] = {1, 2, 3, 4};
    CHECK_CODE(c->ops->allreduce(c, b, 4, PTC__C_BYTE, PTC__C_SUM, &err), PTC_EINVAL, &err);
}

int main(void)
{
    ptc_error err;
    const ptc__plugin *pl = NULL;
    int rc = ptc__plugin_load(PTC__PLUGIN_COMM, "nccl", &pl, &err);
    if (rc < 0) {
        printf("nccl_check: cannot load the nccl module: %s\n", err.message);
        return 99;
    }
    CHECK_STR(pl->name, "nccl");
    CHECK_INT(pl->kind, PTC__PLUGIN_COMM);
    if (pl->probe && pl->probe(&err) < 0) {
        printf("nccl_check: skipped: %s\n", err.message);
        return 77;
    }
    const ptc__comm_plugin *cp = pl->ops;
    CHECK(cp->open == NULL && cp->open_device != NULL);
    CU(cudaSetDevice(0));
    CU(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    ptc_comm *host = NULL, *c = NULL;
    if (ptc__comm_single_open(&host, &err) < 0) {
        printf("nccl_check: %s\n", err.message);
        return 99;
    }
    /* a backend without device_info is refused */
    static const ptc__backend_ops cpu = {.name = "cpu-like"};
    CHECK_CODE(cp->open_device(&c, host, &cpu, NULL, &err), PTC_EINVAL, &err);
    CHECK(c == NULL);
    rc = cp->open_device(&c, host, &standin, NULL, &err);
    CHECK_OK(rc, &err);
    if (rc == 0) {
        CHECK_STR(c->ops->name, "nccl");
        CHECK_INT(c->rank, 0);
        CHECK_INT(c->size, 1);
        test_device_allreduce(c, 1u << 20); /* 4 MiB */
        test_device_allreduce(c, 6553601u); /* 25 MiB and a float: an odd size */
        test_host(c);
        c->ops->close(c);
    }
    host->ops->close(host);
    CU(cudaStreamDestroy(g_stream));
    return check_exit("nccl_check");
}
