/*
 * mpi.c - the MPI communicator (see dist.h).
 *
 * MPI_COMM_WORLD is duplicated so that ptc's collectives never match a caller's messages, and the
 * duplicate gets MPI_ERRORS_RETURN so that a failure comes back as a ptc_error with MPI's own
 * message (the MPI_TRY macro records the call, file and line) instead of ending the process
 * inside MPI. Only the thread that opened the communicator calls MPI (MPI_THREAD_FUNNELED): the
 * loader thread and the backend's threads never do.
 *
 * MPI is initialised here only when nobody did it before (an embedding program may own MPI), and
 * finalised at close only in that case, so a program can open and close ptc communicators inside
 * its own MPI lifetime.
 */
#include "config.h" /* PTC_HAVE_MPI */

#include "base/module.h"
#include "dist/dist.h"

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>

typedef struct mpi_impl {
    MPI_Comm comm;
    int owns_init; /* this communicator called MPI_Init_thread */
} mpi_impl;

typedef struct mpi_req {
    ptc__creq base;
    MPI_Request req;
} mpi_req;

static int mpi_fail(ptc_error *err, int code, const char *call, int line, int rank)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        len = 0;
    text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return ptc__err(err, PTC_ECOMM, "", -1, "rank %d: %s failed (mpi.c:%d): %s", rank, call, line,
                    len ? text : "unknown MPI error");
}

#define MPI_TRY(c, call)                                                                           \
    do {                                                                                           \
        int mrc_ = (call);                                                                         \
        if (mrc_ != MPI_SUCCESS)                                                                   \
            return mpi_fail(err, mrc_, #call, __LINE__, (c) ? (c)->rank : -1);                     \
    } while (0)

static MPI_Comm comm_of(const ptc_comm *c)
{
    return ((const mpi_impl *)c->impl)->comm;
}

static int mpi_type(ptc__cdtype t, MPI_Datatype *out, ptc_error *err)
{
    switch (t) {
    case PTC__C_BYTE:
        *out = MPI_BYTE;
        return 0;
    case PTC__C_F32:
        *out = MPI_FLOAT;
        return 0;
    case PTC__C_F64:
        *out = MPI_DOUBLE;
        return 0;
    case PTC__C_I64:
        *out = MPI_INT64_T;
        return 0;
    }
    return ptc__err(err, PTC_EINVAL, "", -1, "unknown element type %d", (int)t);
}

static int mpi_op(ptc__cdtype t, ptc__cop op, MPI_Op *out, ptc_error *err)
{
    if (t == PTC__C_BYTE)
        return ptc__err(err, PTC_EINVAL, "", -1, "bytes cannot be reduced");
    switch (op) {
    case PTC__C_SUM:
        *out = MPI_SUM;
        return 0;
    case PTC__C_MAX:
        *out = MPI_MAX;
        return 0;
    case PTC__C_MIN:
        *out = MPI_MIN;
        return 0;
    }
    return ptc__err(err, PTC_EINVAL, "", -1, "unknown reduction %d", (int)op);
}

static int fits(size_t count, ptc_error *err)
{
    return count <= (size_t)INT_MAX
               ? 0
               : ptc__err(err, PTC_ELIMIT, "", -1, "%zu elements in one collective (at most %d)",
                          count, INT_MAX);
}

/* MPI's names for a reduction of count elements of t. */
static int reduction(size_t count, ptc__cdtype t, ptc__cop op, MPI_Datatype *dt, MPI_Op *mop,
                     ptc_error *err)
{
    int rc = mpi_type(t, dt, err);
    if (rc == 0)
        rc = mpi_op(t, op, mop, err);
    return rc < 0 ? rc : fits(count, err);
}

static int m_allreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                       ptc_error *err)
{
    MPI_Datatype dt = MPI_BYTE;
    MPI_Op mop = MPI_SUM;
    int rc = reduction(count, t, op, &dt, &mop, err);
    if (rc < 0)
        return rc;
    MPI_TRY(c, MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, mop, comm_of(c)));
    return 0;
}

static int m_iallreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                        ptc__creq **out, ptc_error *err)
{
    MPI_Datatype dt = MPI_BYTE;
    MPI_Op mop = MPI_SUM;
    *out = NULL;
    int rc = reduction(count, t, op, &dt, &mop, err);
    if (rc < 0)
        return rc;
    mpi_req *r = ptc__calloc(1, sizeof *r);
    if (!r)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, dt, mop, comm_of(c), &r->req);
    if (mrc != MPI_SUCCESS) {
        ptc__free(r);
        return mpi_fail(err, mrc, "MPI_Iallreduce", __LINE__, c->rank);
    }
    *out = &r->base;
    return 0;
}

static int m_test(ptc_comm *c, ptc__creq *base, int *done, ptc_error *err)
{
    mpi_req *r = (mpi_req *)base;
    if (!r->base.done) {
        int flag = 0;
        MPI_TRY(c, MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE));
        r->base.done = flag != 0;
    }
    *done = r->base.done;
    return 0;
}

static int m_wait(ptc_comm *c, ptc__creq *base, ptc_error *err)
{
    mpi_req *r = (mpi_req *)base;
    int mrc = r->base.done ? MPI_SUCCESS : MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    ptc__free(r);
    return mrc == MPI_SUCCESS ? 0 : mpi_fail(err, mrc, "MPI_Wait", __LINE__, c->rank);
}

static int m_bcast(ptc_comm *c, void *buf, size_t bytes, int root, ptc_error *err)
{
    int rc = fits(bytes, err);
    if (rc < 0)
        return rc;
    MPI_TRY(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, comm_of(c)));
    return 0;
}

static int m_barrier(ptc_comm *c, ptc_error *err)
{
    MPI_TRY(c, MPI_Barrier(comm_of(c)));
    return 0;
}

static int m_allgather(ptc_comm *c, const void *send, void *recv, size_t bytes, ptc_error *err)
{
    int rc = fits(bytes, err);
    if (rc < 0)
        return rc;
    MPI_TRY(c, MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c)));
    return 0;
}

/* One MPI shared-memory window over the group (MPI_Win_allocate_shared, each rank's block in
 * its own pages: alloc_shared_noncontig); every block is 64 bytes longer than asked so that its
 * 64-byte aligned start still leaves `bytes`. Pages are mapped at page boundaries in every
 * process, so a block's alignment is the same wherever it is seen. */
static int m_shared_alloc(ptc_comm *c, size_t bytes, void **base, void **handle, ptc_error *err)
{
    *handle = NULL;
    if (c->local_size != c->size)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "rank %d: %d of the %d ranks run on this machine: no shared memory",
                        c->rank, c->local_size, c->size);
    if (bytes > (size_t)INT_MAX * 64)
        return ptc__err(err, PTC_ELIMIT, "", -1, "%zu bytes of shared memory", bytes);
    MPI_Win *win = ptc__malloc(sizeof *win);
    if (!win)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    MPI_Info info;
    void *mine = NULL;
    int mrc = MPI_Info_create(&info);
    if (mrc == MPI_SUCCESS) {
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
        mrc = MPI_Win_allocate_shared((MPI_Aint)(bytes + 64), 1, info, comm_of(c), &mine, win);
        MPI_Info_free(&info);
    }
    if (mrc != MPI_SUCCESS) {
        ptc__free(win);
        return mpi_fail(err, mrc, "MPI_Win_allocate_shared", __LINE__, c->rank);
    }
    memset(mine, 0, bytes + 64);
    for (int r = 0; r < c->size && mrc == MPI_SUCCESS; r++) {
        MPI_Aint sz = 0;
        int unit = 0;
        void *p = NULL;
        mrc = MPI_Win_shared_query(*win, r, &sz, &unit, &p);
        base[r] = (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    }
    /* every block zeroed before anyone reads it */
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Barrier(comm_of(c));
    if (mrc != MPI_SUCCESS) {
        MPI_Win_free(win);
        ptc__free(win);
        return mpi_fail(err, mrc, "MPI_Win_shared_query", __LINE__, c->rank);
    }
    *handle = win;
    return 0;
}

static void m_shared_free(ptc_comm *c, void *handle)
{
    (void)c;
    if (!handle)
        return;
    MPI_Win_free(handle);
    ptc__free(handle);
}

static void m_abort(ptc_comm *c, int code)
{
    /* Every process of the job ends: the launcher reports which rank called this. */
    MPI_Abort(comm_of(c), code ? code : 1);
}

static void m_close(ptc_comm *c)
{
    mpi_impl *im = c->impl;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        MPI_Comm_free(&im->comm);
        if (im->owns_init)
            MPI_Finalize();
    }
    ptc__free(im);
    ptc__free(c);
}

static const ptc__comm_ops mpi_ops = {
    .name = "mpi",
    .allreduce = m_allreduce,
    .iallreduce = m_iallreduce,
    .test = m_test,
    .wait = m_wait,
    .bcast = m_bcast,
    .barrier = m_barrier,
    .allgather = m_allgather,
    .shared_alloc = m_shared_alloc,
    .shared_free = m_shared_free,
    .abort = m_abort,
    .close = m_close,
};

int ptc__comm_mpi_open(ptc_comm **out, ptc_error *err)
{
    ptc_comm *c = NULL;
    mpi_impl *im = NULL;
    int inited = 0, finalized = 0, provided = 0, rc;
    MPI_TRY(c, MPI_Finalized(&finalized));
    if (finalized)
        return ptc__err(err, PTC_ECOMM, "", -1, "MPI was already finalised in this process");
    MPI_TRY(c, MPI_Initialized(&inited));
    if (!inited) {
        MPI_TRY(c, MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
    } else {
        MPI_TRY(c, MPI_Query_thread(&provided));
    }
    /* From here MPI is initialised: if this call did it, a failure finalises it (at fail). */
    if (provided < MPI_THREAD_FUNNELED) {
        rc = ptc__err(err, PTC_ECOMM, "", -1,
                      "MPI provides thread level %d; ptc needs MPI_THREAD_FUNNELED", provided);
        goto fail;
    }
    c = ptc__calloc(1, sizeof *c);
    im = ptc__calloc(1, sizeof *im);
    if (!c || !im) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
        goto fail;
    }
    im->owns_init = !inited;
    c->impl = im;
    c->ops = &mpi_ops;
    int mrc = MPI_Comm_dup(MPI_COMM_WORLD, &im->comm);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_set_errhandler(im->comm, MPI_ERRORS_RETURN);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_rank(im->comm, &c->rank);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_size(im->comm, &c->size);
    MPI_Comm local = MPI_COMM_NULL;
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_split_type(im->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_size(local, &c->local_size);
    if (local != MPI_COMM_NULL)
        MPI_Comm_free(&local);
    if (mrc != MPI_SUCCESS) {
        rc = mpi_fail(err, mrc, "MPI_Comm_dup", __LINE__, -1);
        goto fail;
    }
    *out = c;
    return 0;
fail:
    if (!inited)
        MPI_Finalize();
    ptc__free(im);
    ptc__free(c);
    return rc;
}

/* The module's descriptor (lib/base/plugin.h): comm-mpi.so. A test program that compiles this
 * file next to libptc_core defines PTC_MODULE_LINKED_IN and links no lib/base/module.c. */
#ifndef PTC_MODULE_LINKED_IN
static const ptc__comm_plugin mpi_plugin_ops = {.open = ptc__comm_mpi_open, .open_device = NULL};
static const ptc__plugin mpi_plugin = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_COMM,
    .name = "mpi",
    .summary = "MPI (MPI_COMM_WORLD) between processes started by mpirun or srun",
    .experimental = 0,
    .ops = &mpi_plugin_ops,
    .probe = NULL, /* MPI_Init itself says whether a launcher is there */
};
PTC__DEFINE_PLUGIN_ENTRY(mpi_plugin)
#endif
