/*
 * test_dist.c - lib/dist under several processes: the MPI communicator's collectives, and the DDP
 * reducer on ResNet-18 (parameters broadcast from rank 0, gradients averaged bit for bit, rank
 * 0's buffers broadcast, a model laid out differently refused on every rank, gradients kept as
 * views into the buckets giving the bits of copies), and synchronised
 * batchnorm (N ranks of B images compute what one process computes on N x B).
 *
 * Run by tests/dist/run.sh as `mpirun -np N test_dist [BACKENDS]` (N >= 2). Every rank checks and prints its
 * count; the exit status is 1 on any rank's failure. Averaged gradients are compared with the
 * mean computed here from every rank's own gradients (gathered): for two ranks the sum of two
 * halves is exact, so the reducer must reproduce it bit for bit; for more ranks the reduction
 * order is MPI's, so the bound is a few ulps.
 */
#include "config.h"

#include "dist/dist.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>

static ptc_comm *comm;
static int rank, world;

/* ---- collectives ------------------------------------------------------------------------------ */

static void test_collectives(void)
{
    ptc_error err;
    float f[3] = {1.5f, (float)rank, -2.0f};
    CHECK(comm->ops->allreduce(comm, f, 3, PTC__C_F32, PTC__C_SUM, &err) == 0);
    CHECK(f[0] == 1.5f * (float)world);
    CHECK(f[1] == (float)(world * (world - 1) / 2));
    double dv[2] = {(double)rank, 1.0};
    CHECK(ptc__comm_allreduce_avg(comm, dv, 2, PTC__C_F64, &err) == 0);
    CHECK(dv[0] == (double)(world - 1) / 2.0 && dv[1] == 1.0);
    int64_t iv[2] = {rank, -rank};
    CHECK(comm->ops->allreduce(comm, iv, 2, PTC__C_I64, PTC__C_MAX, &err) == 0);
    CHECK_INT(iv[0], world - 1);
    CHECK_INT(iv[1], 0);
    CHECK(comm->ops->allreduce(comm, iv, 1, PTC__C_BYTE, PTC__C_SUM, &err) == PTC_EINVAL);

    char msg[16] = "";
    if (rank == 0)
        snprintf(msg, sizeof msg, "from rank 0");
    CHECK(comm->ops->bcast(comm, msg, sizeof msg, 0, &err) == 0);
    CHECK_STR(msg, "from rank 0");

    int32_t mine = 100 + rank, *all = calloc((size_t)world, sizeof *all);
    CHECK(comm->ops->allgather(comm, &mine, all, sizeof mine, &err) == 0);
    for (int r = 0; r < world; r++)
        CHECK_INT(all[r], 100 + r);
    free(all);

    /* non-blocking: started, tested until done, waited */
    enum { N = 1 << 16 };
    float *big = malloc(N * sizeof *big);
    for (int i = 0; i < N; i++)
        big[i] = (float)(i % 7) + (float)rank;
    ptc__creq *req = NULL;
    CHECK(comm->ops->iallreduce(comm, big, N, PTC__C_F32, PTC__C_SUM, &req, &err) == 0);
    int done = 0, trc = 0;
    while (!done && trc == 0)
        trc = comm->ops->test(comm, req, &done, &err);
    CHECK(trc == 0 && done);
    CHECK(comm->ops->wait(comm, req, &err) == 0);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += big[i] != (float)world * (float)(i % 7) + (float)(world * (world - 1) / 2);
    CHECK_INT(bad, 0);
    free(big);
    CHECK(comm->ops->barrier(comm, &err) == 0);
}

/* ---- the reducer -------------------------------------------------------------------------------- */

typedef struct fixture {
    const ptc__backend_ops *ops;
    ptc__be *be;
    ptc__model *m;
} fixture;

static int fixture_open(fixture *f, const char *backend, uint64_t seed, ptc_error *err)
{
    memset(f, 0, sizeof *f);
    f->ops = ptc__backend_find(backend);
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 1};
    if (!f->ops || f->ops->open(&f->be, &bp, err) < 0)
        return -1;
    ptc__model_params mp = {PTC__ARCH_RESNET18_CIFAR, 10, f->ops, f->be, seed};
    return ptc__model_new(&f->m, &mp, err);
}

static void fixture_close(fixture *f)
{
    ptc__model_free(f->m);
    if (f->be)
        f->ops->close(f->be);
}

/* A batch that differs from rank to rank. */
static void batch(float *x, int64_t *y, int n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    for (int i = 0; i < n * 3 * 32 * 32; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < n; i++)
        y[i] = (rank * 3 + i) % 10;
}

static int fwd_bwd(fixture *f, const float *x, const int64_t *y, int n, ptc__reducer *r,
                   ptc_error *err)
{
    float logits[4 * 10], dl[4 * 10];
    double loss;
    int rc = ptc__model_forward(f->m, x, n, 1, logits, err);
    if (rc == 0)
        rc = ptc__cross_entropy(logits, y, n, 10, &loss, dl, NULL, err);
    if (rc == 0 && r)
        ptc__reducer_prepare(r);
    if (rc == 0)
        rc = ptc__model_backward(f->m, dl, err);
    if (rc == 0 && r)
        rc = ptc__reducer_finish(r, err);
    return rc;
}

static void test_reducer(const char *backend)
{
    ptc_error err;
    fixture f;
    /* Each rank initialises differently: the reducer must make rank 0's weights everyone's. */
    if (fixture_open(&f, backend, 1000 + (uint64_t)rank, &err) < 0) {
        CHECK(!"model");
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        fixture_close(&f);
        return;
    }
    ptc__entry *w = ptc__model_find(f.m, "layer1.0.conv1.weight");
    ptc__entry *rm = ptc__model_find(f.m, "bn1.running_mean");
    ptc__entry *nbt = ptc__model_find(f.m, "bn1.num_batches_tracked");
    float *wv = malloc((size_t)w->numel * sizeof *wv);
    float *w0 = malloc((size_t)w->numel * sizeof *w0);
    CHECK(ptc__model_read_entry(f.m, w, wv, &err) == 0);
    memcpy(w0, wv, (size_t)w->numel * sizeof *w0);
    CHECK(comm->ops->bcast(comm, w0, (size_t)w->numel * sizeof *w0, 0, &err) == 0);
    CHECK(rank == 0 || memcmp(wv, w0, (size_t)w->numel * sizeof *wv) != 0); /* differ before */

    ptc__reducer *r = NULL;
    ptc__reducer_params rp = {1 << 20, 25u << 20, NULL};
    CHECK(ptc__reducer_new(&r, comm, f.m, &rp, &err) == 0);
    if (!r) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        goto out;
    }
    CHECK(ptc__model_read_entry(f.m, w, wv, &err) == 0);
    CHECK(memcmp(wv, w0, (size_t)w->numel * sizeof *wv) == 0); /* rank 0's after */

    /* Buckets: every parameter's bytes once; the first bucket closes at 1 MiB. */
    ptc__reducer_stats st;
    ptc__reducer_get_stats(r, &st);
    size_t want = 0, nb;
    uint64_t layout;
    for (size_t i = 0; i < ptc__model_nentries(f.m); i++) {
        ptc__entry *e = ptc__model_entry(f.m, i);
        if (e->kind == PTC__ENTRY_PARAM &&
            f.ops->tensor_raw_size(f.be, e->grad, &nb, &layout, &err) == 0)
            want += nb;
    }
    CHECK(st.bytes == want);
    CHECK(st.nbuckets >= 2 && st.nbuckets <= 4);
    CHECK(st.allreduce_seconds > 0);

    /* Gradients: each rank's own (the reducer idle), gathered, averaged here; then the reducer's. */
    enum { B = 4 };
    float *x = malloc((size_t)B * 3 * 32 * 32 * sizeof *x);
    int64_t y[B];
    batch(x, y, B);
    CHECK(fwd_bwd(&f, x, y, B, NULL, &err) == 0);
    size_t nent = ptc__model_nentries(f.m);
    size_t total = 0;
    for (size_t i = 0; i < nent; i++)
        if (ptc__model_entry(f.m, i)->kind == PTC__ENTRY_PARAM)
            total += (size_t)ptc__model_entry(f.m, i)->numel;
    float *own = malloc(total * sizeof *own),
          *gathered = malloc(total * (size_t)world * sizeof *own);
    float *mean = malloc(total * sizeof *mean), *got = malloc(total * sizeof *got);
    size_t off = 0;
    for (size_t i = 0; i < nent; i++) {
        ptc__entry *e = ptc__model_entry(f.m, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        CHECK(ptc__model_read_grad(f.m, e, own + off, &err) == 0);
        off += (size_t)e->numel;
    }
    CHECK(comm->ops->allgather(comm, own, gathered, total * sizeof *own, &err) == 0);
    const float inv = 1.0f / (float)world;
    size_t differ = 0;
    for (size_t k = 0; k < total; k++) {
        float s = 0;
        for (int q = 0; q < world; q++)
            s += gathered[(size_t)q * total + k] * inv;
        mean[k] = s;
        differ += gathered[k] != gathered[total + k];
    }
    CHECK(differ > total / 2); /* the ranks' gradients really differ: averaging is visible */

    CHECK(fwd_bwd(&f, x, y, B, r, &err) == 0); /* the same batch again, now reduced */
    off = 0;
    for (size_t i = 0; i < nent; i++) {
        ptc__entry *e = ptc__model_entry(f.m, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        CHECK(ptc__model_read_grad(f.m, e, got + off, &err) == 0);
        off += (size_t)e->numel;
    }
    double worst = 0;
    size_t unequal = 0;
    for (size_t k = 0; k < total; k++) {
        double d = fabs((double)got[k] - (double)mean[k]);
        double scale = fabs((double)mean[k]) > 1e-30 ? fabs((double)mean[k]) : 1e-30;
        if (d / scale > worst)
            worst = d / scale;
        unequal += got[k] != mean[k];
    }
    if (world == 2)
        CHECK_INT(unequal, 0);
    else
        CHECK(worst < 1e-5);
    /* and every rank holds the same averages */
    float *first = malloc(total * sizeof *first);
    memcpy(first, got, total * sizeof *first);
    CHECK(comm->ops->bcast(comm, first, total * sizeof *first, 0, &err) == 0);
    CHECK(memcmp(first, got, total * sizeof *got) == 0);
    if (rank == 0)
        printf("reducer (%s, %d ranks): %zu gradients, %d buckets, %zu bytes; averaged == mean of "
               "the ranks' gradients: %zu unequal, largest relative difference %.3g\n",
               backend, world, total, st.nbuckets, st.bytes, unequal, worst);
    free(first);

    /* Buffers: each rank's running statistics moved by its own batch; rank 0's win. */
    float *mine = malloc((size_t)rm->numel * sizeof *mine),
          *r0 = malloc((size_t)rm->numel * sizeof *r0);
    CHECK(ptc__model_read_entry(f.m, rm, mine, &err) == 0);
    memcpy(r0, mine, (size_t)rm->numel * sizeof *r0);
    CHECK(comm->ops->bcast(comm, r0, (size_t)rm->numel * sizeof *r0, 0, &err) == 0);
    CHECK(rank == 0 || memcmp(mine, r0, (size_t)rm->numel * sizeof *r0) != 0);
    *nbt->counter = 1000 + rank;
    CHECK(ptc__reducer_sync_buffers(r, &err) == 0);
    CHECK(ptc__model_read_entry(f.m, rm, mine, &err) == 0);
    CHECK(memcmp(mine, r0, (size_t)rm->numel * sizeof *r0) == 0);
    CHECK_INT(*nbt->counter, 1000);
    free(mine);
    free(r0);

    /* A step whose backward never ran is an error, and starts no collective. */
    ptc__reducer_prepare(r);
    CHECK_CODE(ptc__reducer_finish(r, &err), PTC_EINVAL, &err);
    free(own);
    free(gathered);
    free(mean);
    free(got);
    free(x);
out:
    ptc__reducer_free(r);
    free(wv);
    free(w0);
    fixture_close(&f);
}

/* ---- gradients as views into the buckets ------------------------------------------------------ */

/* Every parameter's gradient (or value, params 1) of m, concatenated, into a new array. */
static float *all_of(fixture *f, int params, size_t *count, ptc_error *err)
{
    size_t total = 0, off = 0;
    for (size_t i = 0; i < ptc__model_nentries(f->m); i++)
        if (ptc__model_entry(f->m, i)->kind == PTC__ENTRY_PARAM)
            total += (size_t)ptc__model_entry(f->m, i)->numel;
    float *v = malloc(total * sizeof *v);
    for (size_t i = 0; v && i < ptc__model_nentries(f->m); i++) {
        ptc__entry *e = ptc__model_entry(f->m, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        if ((params ? ptc__model_read_entry(f->m, e, v + off, err)
                    : ptc__model_read_grad(f->m, e, v + off, err)) < 0) {
            free(v);
            return NULL;
        }
        off += (size_t)e->numel;
    }
    *count = total;
    return v;
}

/* Counts the elements of two arrays of n floats whose bits differ. */
static size_t bits_differ(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t k = 0; k < n; k++)
        d += memcmp(&a[k], &b[k], sizeof *a) != 0;
    return d;
}

/* A reducer whose gradients are views into its buckets (the default where the backend has
 * tensor_bind_raw) and one that copies them in and out give the same bits: after each of three
 * steps (backward, reduce, SGD) both models hold the same averaged gradients and the same
 * weights; after the reducer is freed the gradients keep their values in their own storage. */
static void test_views(const char *backend)
{
    ptc_error err;
    fixture fc, fv;
    ptc__reducer *rc = NULL, *rv = NULL;
    /* the copying reducer's model lives on the same backend without tensor_bind_raw */
    static ptc__backend_ops nobind;
    nobind = *ptc__backend_find(backend);
    nobind.tensor_bind_raw = NULL;
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 1};
    ptc__model_params mp = {
        .arch = PTC__ARCH_RESNET18_CIFAR, .num_classes = 10, .ops = &nobind, .seed = 31};
    memset(&fc, 0, sizeof fc);
    fc.ops = &nobind;
    int ok = fixture_open(&fv, backend, 31, &err) == 0 && nobind.open(&fc.be, &bp, &err) == 0;
    mp.be = fc.be;
    ok = ok && ptc__model_new(&fc.m, &mp, &err) == 0;
    CHECK(ok);
    if (!ok || !fv.ops->tensor_bind_raw) {
        if (!ok)
            fprintf(stderr, "rank %d: %s\n", rank, err.message);
        goto out;
    }
    ptc__reducer_params rp = {.first_bucket_bytes = 1 << 20, .bucket_bytes = 25u << 20};
    CHECK(ptc__reducer_new(&rc, comm, fc.m, &rp, &err) == 0);
    CHECK(ptc__reducer_new(&rv, comm, fv.m, &rp, &err) == 0);
    if (!rc || !rv) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        goto out;
    }
    enum { B = 4 };
    float x[B * 3 * 32 * 32];
    int64_t y[B];
    batch(x, y, B);
    ptc__sgd_params sp = {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4};
    size_t n = 0, m = 0, gdiff = 0, wdiff = 0;
    for (int step = 0; step < 3; step++) {
        CHECK(fwd_bwd(&fc, x, y, B, rc, &err) == 0);
        CHECK(fwd_bwd(&fv, x, y, B, rv, &err) == 0);
        float *gc = all_of(&fc, 0, &n, &err), *gv = all_of(&fv, 0, &m, &err);
        CHECK(gc && gv && n == m);
        if (gc && gv && n == m)
            gdiff += bits_differ(gc, gv, n);
        free(gc);
        free(gv);
        CHECK(ptc__model_sgd_step(fc.m, &sp, sp.lr, step, &err) == 0);
        CHECK(ptc__model_sgd_step(fv.m, &sp, sp.lr, step, &err) == 0);
        float *wc = all_of(&fc, 1, &n, &err), *wv = all_of(&fv, 1, &m, &err);
        CHECK(wc && wv && n == m);
        if (wc && wv && n == m)
            wdiff += bits_differ(wc, wv, n);
        free(wc);
        free(wv);
    }
    CHECK_INT(gdiff, 0);
    CHECK_INT(wdiff, 0);
    float *before = all_of(&fv, 0, &n, &err);
    ptc__reducer_free(rv);
    rv = NULL;
    float *after = all_of(&fv, 0, &m, &err);
    CHECK(before && after && n == m && bits_differ(before, after, n) == 0);
    free(before);
    free(after);
    if (rank == 0)
        printf("views (%s, %d ranks): 3 steps, %zu gradients: %zu gradient and %zu weight bits "
               "differ from the copying reducer\n",
               backend, world, n, gdiff, wdiff);
out:
    ptc__reducer_free(rv);
    ptc__reducer_free(rc);
    fixture_close(&fv);
    fixture_close(&fc);
}

/* ---- a device backend's buckets ---------------------------------------------------------------- */

/* The ref backend dressed as a device backend: its raw_alloc hands out memory filled with 0xff
 * (NaN as float32), so that a bucket byte that no pack wrote would spoil the sums; and a device
 * communicator that forwards to the MPI one, counting what it is given. The reducer must put its
 * buckets in raw_alloc's memory, all-reduce them over the device communicator only, and get the
 * same averages as over the host path. */
static struct {
    int allocs, frees, iallreduces, allreduces, foreign;
    void *bufs[16];
} dev;

static int dev_raw_alloc(ptc__be *be, void **out, size_t bytes, ptc_error *err)
{
    (void)be;
    if (dev.allocs >= 16 || !(*out = malloc(bytes)))
        return ptc__err(err, PTC_ENOMEM, "", -1, "test raw_alloc");
    memset(*out, 0xff, bytes);
    dev.bufs[dev.allocs++] = *out;
    return 0;
}

static void dev_raw_free(ptc__be *be, void *p)
{
    (void)be;
    if (p)
        dev.frees++;
    free(p);
}

static int dev_owned(const void *p)
{
    for (int i = 0; i < dev.allocs; i++)
        if (dev.bufs[i] == p)
            return 1;
    return 0;
}

static int dc_allreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                        ptc_error *err)
{
    (void)c;
    dev.allreduces++;
    dev.foreign += !dev_owned(buf);
    return comm->ops->allreduce(comm, buf, count, t, op, err);
}

static int dc_iallreduce(ptc_comm *c, void *buf, size_t count, ptc__cdtype t, ptc__cop op,
                         ptc__creq **out, ptc_error *err)
{
    (void)c;
    dev.iallreduces++;
    dev.foreign += !dev_owned(buf);
    return comm->ops->iallreduce(comm, buf, count, t, op, out, err);
}

static int dc_test(ptc_comm *c, ptc__creq *r, int *done, ptc_error *err)
{
    (void)c;
    return comm->ops->test(comm, r, done, err);
}

static int dc_wait(ptc_comm *c, ptc__creq *r, ptc_error *err)
{
    (void)c;
    return comm->ops->wait(comm, r, err);
}

static void test_device_buckets(void)
{
    ptc_error err;
    static ptc__backend_ops dops;
    static ptc__comm_ops dcops;
    dops = *ptc__backend_find("ref");
    dops.raw_alloc = dev_raw_alloc;
    dops.raw_free = dev_raw_free;
    dcops = *comm->ops;
    dcops.name = "device-standin";
    dcops.allreduce = dc_allreduce;
    dcops.iallreduce = dc_iallreduce;
    dcops.test = dc_test;
    dcops.wait = dc_wait;
    ptc_comm dc = {
        .ops = &dcops, .rank = comm->rank, .size = comm->size, .local_size = comm->local_size};

    fixture h, d;
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 1};
    memset(&d, 0, sizeof d);
    d.ops = &dops;
    int ok = fixture_open(&h, "ref", 77, &err) == 0 && dops.open(&d.be, &bp, &err) == 0;
    ptc__model_params mp = {PTC__ARCH_RESNET18_CIFAR, 10, &dops, d.be, 77};
    ok = ok && ptc__model_new(&d.m, &mp, &err) == 0;
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        goto out;
    }
    ptc__reducer *rh = NULL, *rd = NULL;
    ptc__reducer_params rp = {1 << 20, 25u << 20, NULL};
    /* a device backend without a device communicator, a host backend with one: refused */
    CHECK_CODE(ptc__reducer_new(&rd, comm, d.m, &rp, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "device communicator") != NULL);
    rp.device_comm = &dc;
    CHECK_CODE(ptc__reducer_new(&rh, comm, h.m, &rp, &err), PTC_EINVAL, &err);
    CHECK_INT(dev.allocs, 0);
    rp.device_comm = NULL;
    CHECK(ptc__reducer_new(&rh, comm, h.m, &rp, &err) == 0);
    rp.device_comm = &dc;
    CHECK(ptc__reducer_new(&rd, comm, d.m, &rp, &err) == 0);
    if (!rh || !rd) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        goto free_reducers;
    }
    ptc__reducer_stats st;
    ptc__reducer_get_stats(rd, &st);
    CHECK_INT(dev.allocs, st.nbuckets);
    CHECK_INT(dev.allreduces, 6 * st.nbuckets); /* the calibration: a warm-up and 5 rounds */
    enum { B = 4 };
    float x[B * 3 * 32 * 32];
    int64_t y[B];
    batch(x, y, B);
    CHECK(fwd_bwd(&h, x, y, B, rh, &err) == 0);
    CHECK(fwd_bwd(&d, x, y, B, rd, &err) == 0);
    CHECK_INT(dev.iallreduces, st.nbuckets);
    CHECK_INT(dev.foreign, 0);
    size_t unequal = 0, nan = 0, n = 0;
    for (size_t i = 0; i < ptc__model_nentries(h.m); i++) {
        ptc__entry *eh = ptc__model_entry(h.m, i), *ed = ptc__model_entry(d.m, i);
        if (eh->kind != PTC__ENTRY_PARAM)
            continue;
        float *gh = malloc((size_t)eh->numel * sizeof *gh),
              *gd = malloc((size_t)eh->numel * sizeof *gd);
        CHECK(ptc__model_read_grad(h.m, eh, gh, &err) == 0);
        CHECK(ptc__model_read_grad(d.m, ed, gd, &err) == 0);
        for (int64_t k = 0; k < eh->numel; k++) {
            unequal += memcmp(&gh[k], &gd[k], sizeof *gh) != 0;
            nan += gd[k] != gd[k];
        }
        n += (size_t)eh->numel;
        free(gh);
        free(gd);
    }
    CHECK_INT(unequal, 0);
    CHECK_INT(nan, 0);
    if (rank == 0)
        printf("device buckets (%d ranks): %d buckets from raw_alloc, %d all-reduces on the device "
               "communicator; %zu averaged gradients, %zu differ from the host path, %zu NaN\n",
               world, dev.allocs, dev.iallreduces, n, unequal, nan);
free_reducers:
    ptc__reducer_free(rd);
    ptc__reducer_free(rh);
    CHECK_INT(dev.frees, dev.allocs);
out:
    fixture_close(&h);
    fixture_close(&d);
}

/* ---- synchronised batchnorm ------------------------------------------------------------------- */

static int sum_doubles(void *ctx, double *buf, size_t n, ptc_error *err)
{
    ptc_comm *c = ctx;
    return c->ops->allreduce(c, buf, n, PTC__C_F64, PTC__C_SUM, err);
}

/* Every rank alone: the synchronised path with nothing to synchronise. */
static int sum_alone(void *ctx, double *buf, size_t n, ptc_error *err)
{
    (void)ctx, (void)buf, (void)n, (void)err;
    return 0;
}

/* Tensor-wise (Frobenius) relative difference ||a - b|| / ||b||. */
static double nrel(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d) / (s > 0 ? sqrt(s) : 1);
}

/* Max-norm relative difference of two float arrays. */
static double reldiff(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / (s > 0 ? s : 1);
}

/* The worst difference between x's and y's entries of one kind: gradients of parameters
 * tensor-wise (nrel; each over 1e-3 is named), buffers in the max-norm (reldiff). */
static double worst_difference(ptc__model *x, ptc__model *y, ptc__entry_kind kind,
                               const char *backend)
{
    ptc_error err;
    double worst = 0;
    for (size_t i = 0; i < ptc__model_nentries(x); i++) {
        ptc__entry *a = ptc__model_entry(x, i), *b = ptc__model_entry(y, i);
        if (a->kind != kind)
            continue;
        float *va = malloc((size_t)a->numel * sizeof *va),
              *vb = malloc((size_t)a->numel * sizeof *vb);
        double d;
        if (kind == PTC__ENTRY_PARAM) {
            CHECK(ptc__model_read_grad(x, a, va, &err) == 0);
            CHECK(ptc__model_read_grad(y, b, vb, &err) == 0);
            d = nrel(va, vb, (size_t)a->numel);
            if (d >= 1e-3 && rank == 0)
                printf("syncbn (%s): gradient of %s differs by %.3g\n", backend, a->name, d);
        } else {
            CHECK(ptc__model_read_entry(x, a, va, &err) == 0);
            CHECK(ptc__model_read_entry(y, b, vb, &err) == 0);
            d = reldiff(va, vb, (size_t)a->numel);
        }
        worst = fmax(worst, d);
        free(va);
        free(vb);
    }
    return worst;
}

/* N ranks of batch B with synchronised batchnorm compute what one process computes on all N x B
 * images: logits (each rank's rows), running statistics, and the averaged gradients. The one
 * process runs the same batchnorm arithmetic (the synchronised path with nothing to synchronise),
 * so that only the split over ranks differs; that path itself is compared with the backend's own
 * batchnorm on ref (both accumulate in double; dnnl's float sums would add their own rounding,
 * which small random batches amplify to ~1e-2 in some gradients). Without synchronisation the
 * logits differ (the control that shows the comparison can fail). */
static void test_syncbn(const char *backend)
{
    enum { B = 4 };
    ptc_error err;
    fixture dist, one, ctl; /* synchronised, one process, per-rank statistics */
    memset(&ctl, 0, sizeof ctl);
    memset(&one, 0, sizeof one);
    if (fixture_open(&dist, backend, 5, &err) < 0 || fixture_open(&one, backend, 5, &err) < 0 ||
        fixture_open(&ctl, backend, 5, &err) < 0) {
        CHECK(!"models");
        fixture_close(&dist);
        fixture_close(&one);
        fixture_close(&ctl);
        return;
    }
    const size_t img = 3 * 32 * 32;
    float *x = malloc(B * img * sizeof *x), *all = malloc((size_t)world * B * img * sizeof *all);
    int64_t y[B], *ally = malloc((size_t)world * B * sizeof *ally);
    batch(x, y, B);
    CHECK(comm->ops->allgather(comm, x, all, B * img * sizeof *x, &err) == 0);
    CHECK(comm->ops->allgather(comm, y, ally, sizeof y, &err) == 0);
    const int NB = world * B;
    float *lg_one = malloc((size_t)NB * 10 * sizeof *lg_one), *dl_one = malloc((size_t)NB * 10 * 4);
    float lg[B * 10], dl[B * 10], lg_plain[B * 10];
    double loss;

    /* control: plain DDP statistics (per rank) */
    CHECK(ptc__model_forward(ctl.m, x, B, 1, lg_plain, &err) == 0);

    ptc__reducer *r = NULL;
    ptc__reducer_params rp = {1 << 20, 25u << 20, NULL};
    CHECK(ptc__reducer_new(&r, comm, dist.m, &rp, &err) == 0);
    if (!r)
        goto out;
    ptc__model_set_bn_sync(dist.m, sum_doubles, comm);
    CHECK(ptc__model_forward(dist.m, x, B, 1, lg, &err) == 0);
    CHECK(ptc__cross_entropy(lg, y, B, 10, &loss, dl, NULL, &err) == 0);
    ptc__reducer_prepare(r);
    CHECK(ptc__model_backward(dist.m, dl, &err) == 0);
    CHECK(ptc__reducer_finish(r, &err) == 0);

    ptc__model_set_bn_sync(one.m, sum_alone, NULL);
    CHECK(ptc__model_forward(one.m, all, NB, 1, lg_one, &err) == 0);
    CHECK(ptc__cross_entropy(lg_one, ally, NB, 10, &loss, dl_one, NULL, &err) == 0);
    CHECK(ptc__model_backward(one.m, dl_one, &err) == 0);

    double d_logits = reldiff(lg, lg_one + (size_t)rank * B * 10, B * 10);
    double d_plain = reldiff(lg_plain, lg_one + (size_t)rank * B * 10, B * 10);
    CHECK(d_logits < 1e-4);
    CHECK(d_plain > 1e-2);
    double d_grad = worst_difference(dist.m, one.m, PTC__ENTRY_PARAM, backend);
    double d_stat = worst_difference(dist.m, one.m, PTC__ENTRY_BUFFER, backend);
    for (size_t i = 0; i < ptc__model_nentries(one.m); i++) {
        ptc__entry *a = ptc__model_entry(dist.m, i), *b = ptc__model_entry(one.m, i);
        if (a->kind == PTC__ENTRY_COUNTER)
            CHECK_INT(*a->counter, *b->counter);
    }
    CHECK(d_grad < 1e-4);
    CHECK(d_stat < 1e-4);
    /* the synchronised path alone against the backend's batchnorm (ctl, plain statistics, on the
     * N x B images) */
    double d_native = 0;
    if (strcmp(backend, "ref") == 0) {
        ptc__model_backward(ctl.m, lg_plain, &err); /* clear the control's training forward */
        for (size_t i = 0; i < ptc__model_nentries(ctl.m); i++) { /* ctl's counters back to 0 */
            ptc__entry *c = ptc__model_entry(ctl.m, i);
            if (c->kind == PTC__ENTRY_COUNTER)
                *c->counter = 0;
        }
        float *lg_nat = malloc((size_t)NB * 10 * sizeof *lg_nat);
        CHECK(ptc__model_forward(ctl.m, all, NB, 1, lg_nat, &err) == 0);
        CHECK(ptc__cross_entropy(lg_nat, ally, NB, 10, &loss, dl_one, NULL, &err) == 0);
        CHECK(ptc__model_backward(ctl.m, dl_one, &err) == 0);
        d_native = fmax(reldiff(lg_nat, lg_one, (size_t)NB * 10),
                        worst_difference(ctl.m, one.m, PTC__ENTRY_PARAM, backend));
        CHECK(d_native < 1e-4);
        free(lg_nat);
    }
    char native[96] = "";
    if (strcmp(backend, "ref") == 0)
        snprintf(native, sizeof native,
                 "; the synchronised arithmetic against ref's own batchnorm: %.3g", d_native);
    if (rank == 0)
        printf("syncbn (%s, %d ranks x %d images) vs one process on %d images: logits %.3g, "
               "gradients %.3g (tensor-wise), running statistics %.3g (relative, max over "
               "tensors); per-rank "
               "statistics instead: logits %.3g%s\n",
               backend, world, B, NB, d_logits, d_grad, d_stat, d_plain, native);
out:
    ptc__reducer_free(r);
    free(x);
    free(all);
    free(ally);
    free(lg_one);
    free(dl_one);
    fixture_close(&dist);
    fixture_close(&one);
    fixture_close(&ctl);
}

/* Ranks whose models are laid out differently (another backend) are refused on every rank,
 * before any gradient is summed, and none of them hangs. */
static void test_mismatch(void)
{
    ptc_error err;
    fixture f;
    const char *backend = rank == 0 || !ptc__backend_find("dnnl") ? "ref" : "dnnl";
    uint64_t seed = 7;
    ptc__arch arch =
        rank == 0 || ptc__backend_find("dnnl") ? PTC__ARCH_RESNET18_CIFAR : PTC__ARCH_RESNET18;
    f.ops = ptc__backend_find(backend);
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 1};
    f.be = NULL;
    f.m = NULL;
    CHECK(f.ops->open(&f.be, &bp, &err) == 0);
    ptc__model_params mp = {arch, 10, f.ops, f.be, seed};
    CHECK(ptc__model_new(&f.m, &mp, &err) == 0);
    ptc__reducer *r = NULL;
    ptc__reducer_params rp = {1 << 20, 25u << 20, NULL};
    int rc = ptc__reducer_new(&r, comm, f.m, &rp, &err);
    CHECK_CODE(rc, PTC_EINVAL, &err);
    CHECK(r == NULL);
    if (rank == 0 && rc == PTC_EINVAL)
        printf("mismatch refused: %s\n", err.message);
    ptc__reducer_free(r);
    fixture_close(&f);
}

/* argv[1]: the backends to test the reducer on, comma-separated (default: ref, and dnnl when
 * built). */
int main(int argc, char **argv)
{
    ptc_error err;
    if (ptc_comm_open(&comm, "mpi", &err) < 0) {
        fprintf(stderr, "test_dist: %s\n", err.message);
        return 99;
    }
    rank = ptc_comm_rank(comm);
    world = ptc_comm_size(comm);
    if (world < 2) {
        fprintf(stderr, "test_dist: run under mpirun -np 2 or more (world is %d)\n", world);
        ptc_comm_close(comm);
        return 99;
    }
    CHECK_STR(ptc_comm_kind(comm), "mpi");
    test_collectives();
    char list[64];
    snprintf(list, sizeof list, "%s",
             argc > 1                    ? argv[1]
             : ptc__backend_find("dnnl") ? "ref,dnnl"
                                         : "ref");
    int tested = 0;
    for (char *save = NULL, *b = strtok_r(list, ",", &save); b; b = strtok_r(NULL, ",", &save))
        if (ptc__backend_find(b) && ++tested) {
            test_reducer(b);
            test_views(b);
            test_syncbn(b);
        }
    if (!tested) { /* a build without the fast backend: the oracle then */
        test_reducer("ref");
        test_syncbn("ref");
    }
    test_mismatch();
    test_device_buckets();
    /* the status of every rank: one failure anywhere fails the run on rank 0 too */
    int64_t failures = check_failures;
    comm->ops->allreduce(comm, &failures, 1, PTC__C_I64, PTC__C_SUM, &err);
    char name[32];
    snprintf(name, sizeof name, "test_dist rank %d/%d", rank, world);
    int status = check_exit(name);
    ptc_comm_close(comm);
    return status || failures ? 1 : 0;
}
