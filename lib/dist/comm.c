/*
 * comm.c - the public communicator handle (ptc_comm_open and friends), the single-process
 * communicator, and what every communicator shares (see dist.h).
 *
 * Choosing: "mpi" asks for MPI, which lives in the module comm-mpi.so (lib/base/plugin.h), and
 * fails clearly when that module is not installed or cannot load libmpi; "single" is one
 * process; NULL or "auto" takes MPI exactly when an MPI launcher started the process (mpirun sets
 * OMPI_COMM_WORLD_SIZE, srun --mpi=pmix and pmix-based launchers PMIX_RANK, PMI launchers
 * PMI_SIZE), so a plain `ptc train` never initialises MPI and `mpirun -np 4 ptc train` always
 * does.
 */
#include "base/env.h"
#include "base/plugin.h"
#include "dist/dist.h"

#include <string.h>

/* ---- single ------------------------------------------------------------------------------------ */

static int s_allreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                       ptc_error *err)
{
    (void)c, (void)buf, (void)count, (void)t, (void)op, (void)err;
    return 0;
}

static int s_iallreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                        ptc__creq **out, ptc_error *err)
{
    (void)c, (void)buf, (void)count, (void)t, (void)op;
    *out = ptc__calloc(1, sizeof **out);
    return *out ? 0 : ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
}

static int s_test(ptc_comm *c, ptc__creq *r, int *done, ptc_error *err)
{
    (void)c, (void)r, (void)err;
    *done = 1;
    return 0;
}

static int s_wait(ptc_comm *c, ptc__creq *r, ptc_error *err)
{
    (void)c, (void)err;
    ptc__free(r);
    return 0;
}

static int s_bcast(ptc_comm *c, void *buf, size_t bytes, int root, ptc_error *err)
{
    (void)c, (void)buf, (void)bytes;
    return root == 0 ? 0 : ptc__err(err, PTC_EINVAL, "", -1, "broadcast from rank %d of 1", root);
}

static int s_barrier(ptc_comm *c, ptc_error *err)
{
    (void)c, (void)err;
    return 0;
}

static int s_allgather(ptc_comm *c, const void *send, void *recv, size_t bytes, ptc_error *err)
{
    (void)c, (void)err;
    if (bytes)
        memmove(recv, send, bytes);
    return 0;
}

static void s_abort(ptc_comm *c, int code)
{
    (void)c, (void)code; /* one process: returning to the caller ends the job */
}

static void s_close(ptc_comm *c)
{
    ptc__free(c);
}

static const ptc__comm_ops single_ops = {
    .name = "single",
    .allreduce = s_allreduce,
    .iallreduce = s_iallreduce,
    .test = s_test,
    .wait = s_wait,
    .bcast = s_bcast,
    .barrier = s_barrier,
    .allgather = s_allgather,
    .abort = s_abort,
    .close = s_close,
};

int ptc__comm_single_open(ptc_comm **out, ptc_error *err)
{
    ptc_comm *c = ptc__calloc(1, sizeof *c);
    if (!c)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    c->ops = &single_ops;
    c->rank = 0;
    c->size = 1;
    c->local_size = 1;
    *out = c;
    return 0;
}

/* ---- shared ------------------------------------------------------------------------------------ */

int ptc__comm_launched_by_mpi(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (ptc__getenv(vars[i]))
            return 1;
    return 0;
}

int ptc__comm_allreduce_avg(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc_error *err)
{
    if (t != PTC__C_F32 && t != PTC__C_F64)
        return ptc__err(err, PTC_EINVAL, "", -1, "an average needs float32 or float64 values");
    int rc = c->ops->allreduce(c, buf, count, t, PTC__C_SUM, err);
    if (rc < 0 || c->size == 1)
        return rc;
    if (t == PTC__C_F32) {
        float *v = buf, s = 1.0f / (float)c->size;
        for (size_t i = 0; i < count; i++)
            v[i] *= s;
    } else {
        double *v = buf, s = 1.0 / (double)c->size;
        for (size_t i = 0; i < count; i++)
            v[i] *= s;
    }
    return 0;
}

/* ---- public ------------------------------------------------------------------------------------ */

int ptc_comm_open(ptc_comm **out, const char *kind, ptc_error *err)
{
    ptc__err_clear(err);
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_comm_open: out is NULL");
    *out = NULL;
    int want_mpi;
    if (!kind || strcmp(kind, "auto") == 0)
        want_mpi = ptc__comm_launched_by_mpi();
    else if (strcmp(kind, "mpi") == 0)
        want_mpi = 1;
    else if (strcmp(kind, "single") == 0)
        want_mpi = 0;
    else
        return ptc__err(err, PTC_EINVAL, "", -1, "unknown communicator \"%s\" (auto, single, mpi)",
                        kind);
    if (!want_mpi)
        return ptc__comm_single_open(out, err);
    const ptc__plugin *d;
    int rc = ptc__plugin_load(PTC__PLUGIN_COMM, "mpi", &d, err);
    if (rc < 0) {
        if (rc == PTC_ENOTFOUND)
            ptc__err_prefix(err, "cannot run as one of several processes: ");
        return rc;
    }
    const ptc__comm_plugin *cp = d->ops;
    if (!cp->open)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "the mpi module has no open function");
    return cp->open(out, err);
}

int ptc_comm_rank(const ptc_comm *c)
{
    return c ? c->rank : 0;
}
int ptc_comm_size(const ptc_comm *c)
{
    return c ? c->size : 1;
}
const char *ptc_comm_kind(const ptc_comm *c)
{
    return c ? c->ops->name : "single";
}

int ptc_comm_barrier(ptc_comm *c, ptc_error *err)
{
    ptc__err_clear(err);
    return c ? c->ops->barrier(c, err) : 0;
}

void ptc_comm_abort(ptc_comm *c, int code)
{
    if (c)
        c->ops->abort(c, code);
}

void ptc_comm_close(ptc_comm *c)
{
    if (c)
        c->ops->close(c);
}
