/*
 * fake_cuda_nccl.h - how tests/gpu/nccl_mock steers the host imitation of the CUDA runtime and
 * NCCL in fake_cuda_nccl.c (which defines the cuda* and nccl* functions lib/dist/nccl.c calls,
 * with the toolkit's own prototypes). See that file for what is imitated and what is not.
 */
#ifndef PTC_TESTS_FAKE_CUDA_NCCL_H
#define PTC_TESTS_FAKE_CUDA_NCCL_H

#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

/* Devices present (1 at start); 0 makes cudaGetDeviceCount say cudaErrorNoDevice. */
void fake_set_device_count(int n);
/* cudaGetDeviceCount says cudaErrorInsufficientDriver while on. */
void fake_set_no_driver(int on);
/* The next call of the function named fn from this thread returns code (one armed at a time). */
void fake_fail_next(const char *fn, int code);

/* Gates: queued work behind a closed gate waits until the test opens it (a slow or dead peer). */
int fake_gate_new(void);
void fake_gate_open(int gate);
/* Queues a closed gate on s: what s gets after it waits (a busy backend stream). */
void fake_stream_hold(cudaStream_t s, int gate);
/* The next collective this thread queues runs only once gate is open (or its comm is aborted). */
void fake_hold_next_collective(int gate);
/* What ncclCommGetAsyncError reports from now on for the live communicators of that rank. */
void fake_set_async_error(int rank, ncclResult_t r);

typedef struct fake_stats {
    int collectives_run; /* executed on every rank (counted once per rank) */
    int unique_ids, inits, aborts, destroys, async_queries;
    int live_allocs, live_streams, live_events, live_comms;
    int misuse; /* calls a real runtime would refuse or crash on; the first one below */
    char first_misuse[256];
} fake_stats;
void fake_get_stats(fake_stats *out);

#endif /* PTC_TESTS_FAKE_CUDA_NCCL_H */
