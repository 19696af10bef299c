/*
 * dist.h - communicators and the DDP reducer: how processes of one data-parallel run agree.
 *
 * Communicators. A ptc_comm (public handle, lib/ptc/ptc.h) is one process's place in a group of
 * `size` processes, with collectives behind one table of operations:
 *   single  one process: every collective is the identity (a copy at most);
 *   mpi     MPI_COMM_WORLD duplicated (OpenMPI from Debian; MPI_Init_thread when nobody has
 *           initialised MPI yet, MPI_Finalize at close only then). Errors return (MPI_ERRORS_RETURN
 *           on the duplicate) with MPI's own message, file and line in ptc_error;
 *   nccl    a device communicator (module comm-nccl.so): buffers in a device backend's memory,
 *           collectives on a stream of its own ordered after the backend's stream by events;
 *           its unique id is made on rank 0 and broadcast over a host communicator (mpi, or
 *           single at world 1). Host buffers are staged through device memory.
 * Collectives are called by every process of the group in the same order with the same counts;
 * a process that fails must end the job (ptc_comm_abort) rather than leave the others waiting.
 * Nothing is global: two communicators may live in one process.
 *
 * Non-blocking collectives return a request; ptc__comm_test drives it (MPI progresses a
 * non-blocking collective only inside MPI calls, so the reducer tests its requests between the
 * layers of backward) and ptc__comm_wait completes and frees it.
 *
 * The reducer is PyTorch's DistributedDataParallel reducer with its defaults, over a ptc__model:
 *   - parameters, gradients and buffers travel in the backend's own layout (tensor_pack/unpack),
 *     never reordered; every rank checks at start that all ranks lay every tensor out alike;
 *   - buckets: parameters in reverse order, a bucket closed as soon as its size reaches the cap
 *     (the first bucket 1 MiB, the others bucket_bytes, 25 MiB by default), as
 *     torch's compute_bucket_assignment_by_size does on the order gradients become ready;
 *   - gradients are views into the buckets (torch's gradient_as_bucket_view) where the backend
 *     can bind a tensor to outside memory (tensor_bind_raw: ref, dnnl): backward writes each one
 *     into its slot and nothing is copied; otherwise (device backends) a gradient is copied into
 *     its bucket and the averages back;
 *   - a gradient is multiplied by 1 / world when it is final (torch scales before the sum, in
 *     the gradient's precision), a complete bucket's all-reduce (sum) starts at once if every
 *     earlier bucket has started (buckets start in order on every rank), and runs while backward
 *     goes on; finish waits for the rest;
 *   - ranks all on one machine with views (shared_alloc) keep the buckets in shared memory and
 *     sum them themselves (reducer.c, "shared memory"), scaling each gradient as the sum reads
 *     it; otherwise MPI's iallreduce, tested between the layers of backward;
 *   - broadcast: parameters and buffers from rank 0 at the start (DDP's constructor), and the
 *     buffers (running statistics, num_batches_tracked) before every training forward
 *     (broadcast_buffers=True).
 */
#ifndef PTC_DIST_DIST_H
#define PTC_DIST_DIST_H

#include "nn/nn.h"

typedef enum ptc__cdtype { PTC__C_BYTE, PTC__C_F32, PTC__C_F64, PTC__C_I64 } ptc__cdtype;
typedef enum ptc__cop { PTC__C_SUM, PTC__C_MAX, PTC__C_MIN } ptc__cop;

/* A non-blocking collective in flight; implementations allocate a larger struct that starts
 * with this one. */
typedef struct ptc__creq {
    int done; /* completed (it is still to be waited for) */
} ptc__creq;

typedef struct ptc__comm_ops {
    const char *name;
    /* In place: buf holds count elements on every rank, and the reduction afterwards. */
    int (*allreduce)(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                     ptc_error *err);
    int (*iallreduce)(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                      ptc__creq **out, ptc_error *err);
    /* *done = 1 once the request completed (it is still to be waited for). */
    int (*test)(ptc_comm *c, ptc__creq *r, int *done, ptc_error *err);
    /* Completes and frees the request (also on failure). */
    int (*wait)(ptc_comm *c, ptc__creq *r, ptc_error *err);
    int (*bcast)(ptc_comm *c, void *buf, size_t bytes, int root, ptc_error *err);
    int (*barrier)(ptc_comm *c, ptc_error *err);
    /* recv: size x bytes, rank r's block at r x bytes. */
    int (*allgather)(ptc_comm *c, const void *send, void *recv, size_t bytes, ptc_error *err);
    /* Optional (NULL where absent): memory that every rank of the group maps, for the reducer's
     * all-reduce through shared memory when all ranks run on one machine. Collective. Every rank
     * contributes a zeroed block of bytes; base (size entries) receives rank r's block as this
     * process sees it, each 64-byte aligned; *handle goes to shared_free (collective too).
     * PTC_EUNSUPPORTED, on every rank alike, when the ranks are not all on this machine. */
    int (*shared_alloc)(ptc_comm *c, size_t bytes, void **base, void **handle, ptc_error *err);
    void (*shared_free)(ptc_comm *c, void *handle);
    void (*abort)(ptc_comm *c, int code);
    void (*close)(ptc_comm *c);
} ptc__comm_ops;

/* What a communicator module (lib/base/plugin.h, kind PTC__PLUGIN_COMM) provides; one of the two
 * is NULL. */
typedef struct ptc__comm_plugin {
    /* mpi: this process's place in the launcher's world. */
    int (*open)(ptc_comm **out, ptc_error *err);
    /* nccl: a communicator over the ranks of host (which carries the bootstrap), on the device
     * and stream of the device backend instance be (ops->device_info). */
    int (*open_device)(ptc_comm **out, ptc_comm *host, const struct ptc__backend_ops *ops,
                       ptc__be *be, ptc_error *err);
} ptc__comm_plugin;

struct ptc_comm {
    const ptc__comm_ops *ops;
    int rank, size;
    int local_size; /* ranks on this machine (MPI_COMM_TYPE_SHARED), this one included */
    void *impl;
};

/* The implementations: single inside libptc; mpi in the module comm-mpi.so (lib/dist/mpi.c),
 * reached through ptc_comm_open. */
int ptc__comm_single_open(ptc_comm **out, ptc_error *err);
int ptc__comm_mpi_open(ptc_comm **out, ptc_error *err);
/* 1 when this process was started by an MPI launcher (mpirun, srun with PMI/PMIx). */
int ptc__comm_launched_by_mpi(void);

/* Average of count float32 or float64 values in place (sum, then x 1 / size). */
int ptc__comm_allreduce_avg(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc_error *err);

/* ---- the reducer ------------------------------------------------------------------------------ */

typedef struct ptc__reducer ptc__reducer;

typedef struct ptc__reducer_params {
    size_t first_bucket_bytes; /* 1 MiB */
    size_t bucket_bytes;       /* 25 MiB */
    /* A device communicator (nccl) over the same ranks, for the buckets of a device backend (one
     * with raw_alloc): they live in device memory and their all-reduces go through it. NULL: the
     * buckets are host memory and go through c. Borrowed; it outlives the reducer. */
    ptc_comm *device_comm;
} ptc__reducer_params;

typedef struct ptc__reducer_stats {
    int nbuckets;
    size_t bytes;             /* gradient bytes all-reduced per step */
    double allreduce_seconds; /* the buckets all-reduced one after another, nothing else running
                                  (measured at the start, median of 5) */
    double exposed_seconds;   /* summed over steps: waiting after backward ended (with a device
                                  communicator the host does not wait: only the time to queue
                                  the waits, so this says nothing of the device's own wait) */
    double pack_seconds;      /* summed over steps: copies into and out of buckets */
    int64_t steps;
} ptc__reducer_stats;

/* Buckets for m's parameters over c; checks that every rank lays the tensors out alike and that
 * the model has the same entries everywhere, then broadcasts parameters and buffers from rank 0.
 * Installs itself as m's gradient hook and, with views, binds m's gradients to the buckets until
 * ptc__reducer_free (m's parameter tensors must not be replaced meanwhile; m outlives it). */
int ptc__reducer_new(ptc__reducer **out, ptc_comm *c, ptc__model *m, const ptc__reducer_params *p,
                     ptc_error *err);
void ptc__reducer_free(ptc__reducer *r); /* accepts NULL; removes the hook */
/* This rank's run failed and the caller will end the job (ptc_comm_abort): ptc__reducer_free
 * then skips the collective release of the shared buckets, which would wait for ranks that are
 * still waiting for this one's sums (the job's end releases them). Accepts NULL. */
void ptc__reducer_abandon(ptc__reducer *r);
/* Rank 0's buffers to every rank (before a training forward). */
int ptc__reducer_sync_buffers(ptc__reducer *r, ptc_error *err);
/* Before backward: every bucket empty. */
void ptc__reducer_prepare(ptc__reducer *r);
/* After backward: every all-reduce finished and every gradient the average over the ranks. */
int ptc__reducer_finish(ptc__reducer *r, ptc_error *err);
void ptc__reducer_get_stats(const ptc__reducer *r, ptc__reducer_stats *out);

#endif /* PTC_DIST_DIST_H */
