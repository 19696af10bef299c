/*
 * train.c - one training run (see train.h).
 *
 * Each epoch: the sampler's order for (seed, epoch), a loader thread preparing augmented,
 * normalised batches (or, for a backend with images_batch, only their indices and random choices:
 * the backend makes the images from the uint8 dataset uploaded once into its memory, the same
 * bits), and for every batch: the learning rate of the schedule, forward in training
 * mode, mean cross-entropy, backward, one SGD step. After every eval_every-th epoch and after the
 * last one the test split is evaluated (running statistics, no augmentation). Everything random
 * derives from (seed, epoch, sample), so a run resumed from the checkpoint of epoch k reaches the
 * same weights as a run that never stopped.
 *
 * The training checkpoints, their layout and how a hostile one is refused are checkpoint.c's; the
 * records (metrics file, scalar callback) record.c's.
 *
 * Several processes (p->comm of size > 1) run DistributedDataParallel's recipe: rank r trains on
 * DistributedSampler's shard r of every epoch with its own augmentation stream, lib/dist's
 * reducer averages the gradients during backward and broadcasts rank 0's BatchNorm buffers before
 * each forward, the epoch's loss and accuracy and the evaluation counts are all-reduced (the test
 * split is sharded without padding, so every test image counts once), and rank 0 alone logs,
 * writes metrics and saves, checkpoints after a barrier. A rank that fails returns its error; the
 * caller ends the job (ptc_comm_abort).
 */
#include "train/train.h"

#include "base/env.h"
#include "base/plugin.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/gpumon.h"
#include "train/record.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define WARMUP_STEPS 10
#define GPU_SAMPLE_S 2.0 /* between two readings of the GPU's state (NVML) */

void ptc_train_params_default(ptc_train_params *p)
{
    *p = (ptc_train_params){
        .size = sizeof *p,
        .dataset = "fashion-mnist",
        .arch = "resnet18",
        .epochs = 10,
        .batch_size = 128,
        .lr = 0.01,
        .momentum = 0.9,
        .weight_decay = 5e-4,
        .schedule = "constant",
        .shuffle = 1,
        .augment = 1,
        .eval_every = 2,
        .bucket_cap_mb = 25,
        .device = -1,
        .precision = "f32",
        .device_comm = "auto",
    };
}

int ptc__dataset_from_name(const char *name, ptc__data_format *out)
{
    if (!name || strcmp(name, "fashion-mnist") == 0 || strcmp(name, "mnist") == 0)
        *out = PTC__DATA_IDX;
    else if (strcmp(name, "cifar10") == 0)
        *out = PTC__DATA_CIFAR10;
    else
        return -1;
    return 0;
}

/* The resolved form of ptc_train_params. */
typedef struct recipe {
    const ptc_train_params *p;
    ptc__data_format format;
    ptc__arch arch;
    ptc__sgd_params sgd;
    ptc_comm *comm; /* p->comm, or a single-process one owned by the run */
    int world, rank;
    double lr; /* p->lr scaled for the world size */
} recipe;

static int resolve(const ptc_train_params *p, recipe *re, ptc_error *err)
{
    re->p = p;
    if (ptc__dataset_from_name(p->dataset, &re->format) < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "unknown dataset \"%s\" (cifar10, fashion-mnist)",
                        p->dataset);
    int a = ptc__arch_from_name(p->arch ? p->arch : "resnet18");
    if (a < 0)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "unknown architecture \"%s\" (resnet18, resnet18-cifar)", p->arch);
    re->arch = (ptc__arch)a;
    re->sgd = (ptc__sgd_params){.lr = p->lr,
                                .momentum = p->momentum,
                                .dampening = p->dampening,
                                .weight_decay = p->weight_decay,
                                .nesterov = p->nesterov};
    re->comm = p->comm;
    re->world = ptc_comm_size(p->comm);
    re->rank = ptc_comm_rank(p->comm);
    ptc__lr_scaling ls;
    if (!p->lr_scaling || strcmp(p->lr_scaling, "none") == 0)
        ls = PTC__LR_NONE;
    else if (strcmp(p->lr_scaling, "sqrt") == 0)
        ls = PTC__LR_SQRT;
    else if (strcmp(p->lr_scaling, "linear") == 0)
        ls = PTC__LR_LINEAR;
    else
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "unknown learning-rate scaling \"%s\" (none, "
                        "sqrt, linear)",
                        p->lr_scaling);
    re->lr = ptc__lr_scale(p->lr, ls, re->world);
    return 0;
}

static void say(const ptc_train_params *p, const char *fmt, ...) PTC_PRINTF(2, 3);
static void say(const ptc_train_params *p, const char *fmt, ...)
{
    if (!p->log || ptc_comm_rank(p->comm) != 0)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->log(p->ctx, line);
}

/* v with prec decimals, or "nan" / "inf" / "-inf" (printf would print a NaN's sign bit: "-nan",
 * which reads as a minus). Returns buf. */
static const char *fixed(char *buf, size_t n, int prec, double v)
{
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.*f", prec, v);
    return buf;
}

typedef struct run {
    const ptc_train_params *p;
    recipe rc;
    const ptc__backend_ops *ops;
    ptc__be *be;
    ptc__model *model;
    ptc__reducer *reducer; /* world > 1 */
    ptc_comm *dcomm;       /* nccl over rc.comm: a GPU backend, world > 1 */
    ptc__gpumon *mon;      /* rank 0 of a GPU backend, when NVML loads */
    ptc__dataset *data;
    /* The backend has images_batch (and the run did not ask for host input): the splits' uint8
     * images held in its memory, the batches made there (NULL: float batches from the loader). */
    ptc__bimg *img_train, *img_test;
    ptc__normalizer nz; /* Normalize's table, for images_batch */
    ptc__recorder rec;  /* the metrics file and the scalar callback (rank 0) */
    float *logits, *dlogits;
    /* ptc__train_ex's progress, carried from one epoch to the next */
    ptc_train_result *res;
    ptc__schedule sched;
    int start_epoch;     /* from the checkpoint resumed, else 0 */
    int64_t step;        /* optimizer steps taken, the resumed ones included */
    int64_t start_step;  /* the resumed ones (0 for a fresh run) */
    double lr;           /* the last step's learning rate (rc.lr before the first step) */
    bool stop;           /* max_steps reached */
    double t_warm;       /* when this run's WARMUP_STEPS-th step ended (0: not yet) */
    double t_other;      /* seconds spent on evaluations and checkpoints after t_warm */
    int64_t images;      /* images trained on by this rank in this run */
    int64_t warm_images; /* images at t_warm */
} run;

/* --threads 0 with several ranks on one machine: the CPUs this process may use shared among
 * them, so that N ranks do not each start a thread per core (a rank bound to one core gets 1). */
static int threads_per_rank(int threads, const ptc_comm *comm)
{
    if (threads > 0 || !comm || comm->local_size <= 1)
        return threads;
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    int t = ncpu / comm->local_size;
    return t > 0 ? t : 1;
}

static int open_backend(const ptc_train_params *p, int threads, const ptc__backend_ops **ops,
                        ptc__be **be, ptc_error *err)
{
    ptc__be_params bp = {.dtype = PTC__BE_F32,
                         .threads = threads,
                         .tf32 = p->tf32,
                         .deterministic = p->deterministic,
                         .winograd = p->dnnl_winograd};
    if (!p->precision || strcmp(p->precision, "f32") == 0 || strcmp(p->precision, "float32") == 0)
        bp.precision = PTC__PREC_F32;
    else if (strcmp(p->precision, "bf16") == 0 || strcmp(p->precision, "bfloat16") == 0)
        bp.precision = PTC__PREC_BF16;
    else
        return ptc__err(err, PTC_EINVAL, "", -1, "unknown precision \"%s\" (f32, bf16)",
                        p->precision);
    bp.device = p->device;
    if (bp.device < 0) {
        int lr = ptc__env_local_rank();
        bp.device = lr >= 0 ? lr : 0;
        bp.device_by_rank = lr >= 0;
    }
    int rc = ptc__backend_get(p->backend, ops, err);
    if (rc < 0)
        return rc;
    /* bf16: dnnl (where the CPU has bf16 instructions) and cuda compute in it; ref refuses it
     * in its open, with the reason, rather than silently train in float32. */
    return (*ops)->open(be, &bp, err);
}

/* ---- input ------------------------------------------------------------------------------------ */

/* The splits a run needs (the train split unless test_only), uploaded once into the memory of a
 * backend that makes its batches there; a backend without images_batch gets nothing. */
static int upload_splits(run *r, bool test_only, ptc_error *err)
{
    if (!r->ops->images_batch)
        return 0;
    const ptc__dataset *d = r->data;
    ptc__normalizer_init(&r->nz, d->norm_mean, d->norm_std);
    int rc = 0;
    if (!test_only &&
        (rc = r->ops->images_upload(r->be, &r->img_train, d->train.images, d->train.n, err)) < 0)
        ptc__err_prefix(err, "the training images: ");
    if (rc == 0 &&
        (rc = r->ops->images_upload(r->be, &r->img_test, d->test.images, d->test.n, err)) < 0)
        ptc__err_prefix(err, "the test images: ");
    return rc;
}

/* ---- the run ---------------------------------------------------------------------------------- */

static void run_free(run *r)
{
    ptc__reducer_free(r->reducer);
    ptc_comm_close(r->dcomm); /* before the backend: it runs on the backend's stream */
    ptc__gpumon_close(r->mon);
    ptc__model_free(r->model);
    if (r->be) {
        if (r->ops->images_free) {
            r->ops->images_free(r->be, r->img_train);
            r->ops->images_free(r->be, r->img_test);
        }
        r->ops->close(r->be);
    }
    ptc__dataset_free(r->data);
    ptc__recorder_close(&r->rec);
    ptc__free(r->logits);
    ptc__free(r->dlogits);
}

/* The dataset; with max_samples only the first N samples of each split are held (the rest of the
 * train split is streamed through the statistics, which stay those of the whole split). For an
 * evaluation (test_only) the train split is not held: IDX streams its images for the statistics
 * Normalize uses, CIFAR-10 (constant normalisation) does not read it at all. */
static int load_data(const recipe *re, bool test_only, ptc__dataset **out, ptc_error *err)
{
    const ptc_train_params *p = re->p;
    ptc__data_params dp = ptc__data_params_default();
    dp.format = p->train_source || p->test_source ? PTC__DATA_SOURCE : re->format;
    dp.train_source = p->train_source;
    dp.test_source = p->test_source;
    dp.classes = p->num_classes;
    memcpy(dp.mean, p->source_mean, sizeof dp.mean);
    memcpy(dp.std, p->source_std, sizeof dp.std);
    dp.dir = p->data_dir;
    dp.keep = p->max_samples > 0 ? p->max_samples : 0;
    dp.test_only = test_only;
    return ptc__dataset_new(out, &dp, err);
}

/* Rank 0 writes path once every rank has finished the work it holds (a barrier first). */
static int save_rank0(run *r, const char *path, int epoch, int64_t step, double lr, int full,
                      ptc_error *err)
{
    const ptc__train_ckpt_info info = {
        .sgd = &r->rc.sgd, .seed = r->p->seed, .arch = r->rc.arch, .world = r->rc.world};
    int rc = r->rc.comm ? r->rc.comm->ops->barrier(r->rc.comm, err) : 0;
    if (rc == 0 && r->rc.rank == 0)
        rc = ptc__train_save(r->model, &info, path, epoch, step, lr, full, err);
    if (rc == 0 && full && r->p->checkpoint_all_ranks && r->rc.world > 1) {
        char own[4096];
        if (snprintf(own, sizeof own, "%s.rank%d", path, r->rc.rank) >= (int)sizeof own)
            return ptc__err(err, PTC_EINVAL, "", -1, "checkpoint path too long: %s", path);
        rc = ptc__train_save(r->model, &info, own, epoch, step, lr, full, err);
    }
    return rc;
}

/* The communicator of the gradient buckets (p->device_comm): a GPU backend keeps them in device
 * memory, which only a device communicator (nccl, bootstrapped over the host one) can reduce;
 * "auto" takes nccl exactly then. Nothing to open in one process. Called before the dataset is
 * read, so that a wrong choice costs nothing. */
static int open_device_comm(run *r, ptc_error *err)
{
    const char *want = r->p->device_comm ? r->p->device_comm : "auto";
    int gpu = r->ops->device_info != NULL;
    if (strcmp(want, "auto") != 0 && strcmp(want, "nccl") != 0 && strcmp(want, "host") != 0)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "unknown gradient communicator \"%s\" (auto, nccl, host)", want);
    if (strcmp(want, "nccl") == 0 && !gpu)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "--comm nccl needs a GPU backend (cuda); the %s backend's gradients are in "
                        "host memory and go over the host communicator (%s)",
                        r->ops->name, ptc_comm_kind(r->rc.comm));
    if (r->rc.world == 1 || !gpu)
        return 0;
    if (strcmp(want, "host") == 0)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "--comm host cannot carry the %s backend's gradients: they are in device "
                        "memory, which a host communicator (%s) does not reach; use --comm nccl "
                        "(or auto)",
                        r->ops->name, ptc_comm_kind(r->rc.comm));
    const ptc__plugin *pl;
    int rc = ptc__plugin_load(PTC__PLUGIN_COMM, "nccl", &pl, err);
    if (rc == 0)
        rc = ptc__plugin_probe(pl, err);
    const ptc__comm_plugin *cp = rc == 0 ? pl->ops : NULL;
    if (rc == 0 && (!cp || !cp->open_device))
        rc =
            ptc__err(err, PTC_EUNSUPPORTED, "", -1, "the nccl module opens no device communicator");
    if (rc == 0)
        rc = cp->open_device(&r->dcomm, r->rc.comm, r->ops, r->be, err);
    if (rc < 0)
        ptc__err_prefix(err,
                        "the %s backend's gradients need the nccl communicator: ", r->ops->name);
    return rc;
}

/* The synchronised batchnorm's all-reduce (ptc__bn_sync). */
static int sum_over_ranks(void *ctx, double *buf, size_t n, ptc_error *err)
{
    ptc_comm *c = ctx;
    return c->ops->allreduce(c, buf, n, PTC__C_F64, PTC__C_SUM, err);
}

/* Rank 0 of a GPU backend, after a step: every GPU_SAMPLE_S the GPU's state to the progress
 * display and to the metrics file. */
static void gpu_tick(run *r, int epoch, int64_t step)
{
    ptc__gpu_sample s;
    if (!ptc__gpumon_poll(r->mon, ptc__train_now(), &s) || !s.valid)
        return;
    char text[96];
    if (r->p->device_status) {
        ptc__gpumon_text(&s, text, sizeof text);
        r->p->device_status(r->p->ctx, text);
    }
    ptc__record_gpu(&r->rec, epoch, step, &s);
}

/* One optimizer step on a batch: forward, loss, backward with the reducer's all-reduces, SGD.
 * On a backend that computes the loss itself (ptc__model_has_device_loss: its xent op), the
 * logits and their gradient stay there and *loss, *correct are not set: the caller fetches them
 * with ptc__model_loss_result when it needs them (before the next step's loss replaces them),
 * so that a device backend runs a step without the host waiting for it. The host path (logits
 * read, ptc__cross_entropy, dlogits written) gives the same bits on ref. */
static int train_step(run *r, const ptc__batch *b, double lr, int64_t step, double *loss,
                      int64_t *correct, ptc_error *err)
{
    const bool dev = ptc__model_has_device_loss(r->model);
    int rc = 0;
    if (r->reducer && !r->p->no_broadcast_buffers)
        rc = ptc__reducer_sync_buffers(r->reducer, err);
    if (rc == 0)
        rc = ptc__train_forward_batch(r->model, r->img_train, &r->nz, b, 1, dev ? NULL : r->logits,
                                      err);
    if (rc == 0)
        rc = dev ? ptc__model_loss(r->model, b->labels, err)
                 : ptc__cross_entropy(r->logits, b->labels, b->n, r->data->classes, loss,
                                      r->dlogits, correct, err);
    if (rc == 0 && r->reducer)
        ptc__reducer_prepare(r->reducer);
    if (rc == 0)
        rc = ptc__model_backward(r->model, dev ? NULL : r->dlogits, err);
    if (rc == 0 && r->reducer)
        rc = ptc__reducer_finish(r->reducer, err);
    if (rc == 0)
        rc = ptc__model_sgd_step(r->model, &r->rc.sgd, lr, step, err);
    return rc;
}

/* The epoch's running totals of the training loss, fed one step at a time in step order. */
typedef struct epoch_sums {
    double loss_sum;
    int64_t right;
    int64_t seen;         /* images whose step has been taken */
    int pending;          /* a step whose loss is still on the backend (device loss) */
    int pending_n;        /* its batch size */
    int64_t pending_seen; /* seen after it */
    int64_t pending_step; /* its global step number */
    double pending_lr;    /* its learning rate */
    double pending_t;     /* when it was counted */
} epoch_sums;

/* A step's loss into the totals, the progress display and the step records (rank 0), in step
 * order: step is that step's number and lr its rate (on the device-loss path the loss arrives
 * while the next step is being prepared, so neither is the run's current one). */
static void account(run *r, epoch_sums *es, int epoch, int64_t total, int bn, int64_t seen,
                    double loss, int64_t correct, int64_t step, double lr, double t)
{
    es->loss_sum += loss * bn;
    es->right += correct;
    r->res->last_loss = loss;
    if (r->p->progress && r->rc.rank == 0)
        r->p->progress(r->p->ctx, epoch + 1, seen, total, es->loss_sum / (double)seen);
    ptc__recorder_step(&r->rec, epoch, step, bn, loss, correct, lr, t);
}

/* The pending step's loss from the backend (waits for that step's loss kernel only). */
static int collect(run *r, epoch_sums *es, int epoch, int64_t total, ptc_error *err)
{
    if (!es->pending)
        return 0;
    double loss;
    int64_t correct;
    es->pending = 0;
    int rc = ptc__model_loss_result(r->model, &loss, &correct, err);
    if (rc < 0)
        return rc;
    account(r, es, epoch, total, es->pending_n, es->pending_seen, loss, correct, es->pending_step,
            es->pending_lr, es->pending_t);
    return 0;
}

int ptc_train(const ptc_train_params *p, ptc_train_result *res, ptc_error *err)
{
    ptc_train_params prm; /* the caller's struct, whatever ptc.h it was built with (params.c) */
    ptc_train_params_default(&prm);
    int rc = ptc__params_read(&prm, sizeof prm, p, "ptc_train_params", err);
    return rc < 0 ? rc : ptc__train_ex(p ? &prm : NULL, 0, res, err);
}

/* ---- the steps of a run ------------------------------------------------------------------------
 *
 * ptc__train_ex is: plan (check and resolve the parameters), setup (backend, device communicator,
 * dataset, model, weights, reducer, outputs), the epochs (each: its steps, its report, an
 * evaluation when due, a checkpoint), finish (throughput, the final save, the summary line) and
 * teardown (run_free). Each step below does one of these; the run's state between them lives in
 * struct run. */

/* The parameters resolved and checked, the result initialised, the schedule parsed. */
static int plan(run *r, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    int rc = resolve(p, &r->rc, err);
    if (rc < 0)
        return rc;
    r->res->test_accuracy = r->res->test_loss = -1;
    r->res->world = r->rc.world;
    if (p->batch_size < 1 || p->epochs < 1 || p->eval_every < 0 || !(p->bucket_cap_mb > 0) ||
        p->bucket_cap_mb > 4096)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "batch size and epochs must be at least 1, eval-every at least 0, the "
                        "bucket size between 0 and 4096 MiB");
    if (ptc__schedule_parse(&r->sched, p->schedule ? p->schedule : "constant", r->rc.lr) < 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "unknown schedule \"%s\"", p->schedule);
    r->lr = r->rc.lr;
    return 0;
}

/* The backend first, then the gradient communicator: a missing module or GPU is reported before
 * the dataset is read. */
static int setup_compute(run *r, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    int rc = open_backend(p, threads_per_rank(p->threads, p->comm), &r->ops, &r->be, err);
    if (rc == 0)
        rc = open_device_comm(r, err);
    return rc;
}

/* The model on the backend, its starting weights (p->init, then p->resume, which also gives the
 * epoch and step to start from), and with several ranks the reducer of its gradients. */
static int setup_model(run *r, int host_input, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    ptc__model_params mp = {.arch = r->rc.arch,
                            .num_classes = r->data->classes,
                            .ops = r->ops,
                            .be = r->be,
                            .seed = p->seed};
    int rc = ptc__model_new(&r->model, &mp, err);
    if (rc == 0) /* recorded in the state dicts it saves (nn.h), for ptc predict */
        ptc__model_set_preprocess(r->model,
                                  r->data->format == PTC__DATA_SOURCE ? "source"
                                  : r->data->format == PTC__DATA_IDX  ? "fashion-mnist"
                                                                      : "cifar10",
                                  r->data->norm_mean, r->data->norm_std);
    if (rc == 0 && !host_input)
        rc = upload_splits(r, false, err);
    if (rc == 0 && p->init)
        rc = ptc__train_load_weights(r->model, p->init, err);
    if (rc == 0 && p->resume)
        rc = ptc__train_resume(r->model, p->resume, r->rc.world, p->epochs, &r->start_epoch,
                               &r->step, err);
    if (rc == 0 && r->rc.world > 1) {
        ptc__reducer_params rp = {.first_bucket_bytes = (size_t)1 << 20,
                                  .bucket_bytes = (size_t)(p->bucket_cap_mb * 1048576.0),
                                  .device_comm = r->dcomm};
        rc = ptc__reducer_new(&r->reducer, r->rc.comm, r->model, &rp, err);
        if (rc == 0 && p->sync_bn)
            ptc__model_set_bn_sync(r->model, sum_over_ranks, r->rc.comm);
    }
    return rc;
}

/* Rank 0's metrics file (appended to when resuming) and GPU monitor, and the logits buffers. */
static int setup_outputs(run *r, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    int rc = ptc__recorder_open(&r->rec, p, r->rc.rank, r->rc.world, r->start_epoch > 0, err);
    if (rc < 0)
        return rc;
    if (r->rc.rank == 0 && r->ops->device_info) {
        void *stream;
        int dev;
        if (r->ops->device_info(r->be, &stream, &dev, NULL) == 0)
            r->mon =
                ptc__gpumon_open(dev, p->visible_devices, GPU_SAMPLE_S); /* NULL without NVML */
    }
    size_t logit_bytes = (size_t)p->batch_size * (size_t)r->data->classes * sizeof(float);
    if (!(r->logits = ptc__malloc(logit_bytes)) || !(r->dlogits = ptc__malloc(logit_bytes)))
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory");
    return 0;
}

/* Everything a run holds, in this order; what is opened is released by run_free, also on
 * failure. */
static int setup(run *r, int host_input, ptc_error *err)
{
    int rc = ptc__train_check_outputs(r->p, r->rc.rank, err);
    if (rc == 0)
        rc = setup_compute(r, err);
    if (rc == 0)
        rc = load_data(&r->rc, false, &r->data, err);
    if (rc == 0)
        rc = setup_model(r, host_input, err);
    if (rc == 0)
        rc = setup_outputs(r, err);
    if (rc == 0) {
        int64_t shard = ptc__sampler_count(r->data->train.n, r->rc.world, false);
        int64_t per_epoch = (shard + r->p->batch_size - 1) / r->p->batch_size;
        r->sched.total = per_epoch * r->p->epochs;
    }
    return rc;
}

/* The run's first log line: model, data, backend, batch, and the processes with their buckets. */
static void announce(const run *r)
{
    const ptc_train_params *p = r->p;
    const ptc__dataset *d = r->data;
    const int world = r->rc.world;
    char procs[160] = "", kind[64];
    if (world > 1) {
        ptc__reducer_stats st;
        ptc__reducer_get_stats(r->reducer, &st);
        snprintf(kind, sizeof kind, "%s%s%s", r->dcomm ? ptc_comm_kind(r->dcomm) : "",
                 r->dcomm ? " over " : "", ptc_comm_kind(r->rc.comm));
        snprintf(procs, sizeof procs, ", %d processes (%s, %d buckets of gradients, %.1f MiB%s)",
                 world, kind, st.nbuckets, (double)st.bytes / 1048576.0,
                 p->sync_bn ? ", synchronised batchnorm" : "");
    }
    say(p,
        "ptc train: %s on %s, %lld training and %lld test images, backend %s, batch %d%s, "
        "%d epoch(s)%s%s",
        ptc__arch_name(r->rc.arch), ptc__dataset_name(d), (long long)d->train.n,
        (long long)d->test.n, r->ops->name, p->batch_size, world > 1 ? " per process" : "",
        p->epochs, procs, r->start_epoch ? " (resumed)" : "");
}

/* After a step of bn images: the counters, the loss into the totals (or left pending on the
 * backend), the warm-up mark of the throughput clock, the GPU's state, and max_steps. */
static void count_step(run *r, epoch_sums *ep, int epoch, int64_t total, int bn, double loss,
                       int64_t correct)
{
    r->step++;
    ep->seen += bn;
    r->images += bn;
    if (ptc__model_has_device_loss(r->model)) {
        ep->pending = 1;
        ep->pending_n = bn;
        ep->pending_seen = ep->seen;
        ep->pending_step = r->step;
        ep->pending_lr = r->lr;
        ep->pending_t = ptc__train_now();
    } else {
        account(r, ep, epoch, total, bn, ep->seen, loss, correct, r->step, r->lr, ptc__train_now());
    }
    if (r->step - r->start_step == WARMUP_STEPS) { /* a resumed run warms up too */
        r->t_warm = ptc__train_now();
        r->warm_images = r->images;
    }
    if (r->mon)
        gpu_tick(r, epoch + 1, r->step);
    if (r->p->max_steps > 0 && r->step >= r->p->max_steps)
        r->stop = true;
}

/* Every batch the loader gives (total images in the epoch's shard), one step each, until the
 * loader ends or max_steps stops the run. */
static int train_batches(run *r, ptc__loader *l, int epoch, int64_t total, epoch_sums *ep,
                         ptc_error *err)
{
    ptc__batch *b;
    int rc = 0;
    while (!r->stop && (rc = ptc__loader_next(l, &b, err)) > 0) {
        double loss = 0;
        int64_t correct = 0;
        r->lr = ptc__schedule_lr(&r->sched, r->step, epoch);
        /* the previous step's loss, before this step's replaces it on the backend */
        rc = collect(r, ep, epoch, total, err);
        if (rc == 0)
            rc = train_step(r, b, r->lr, r->step, &loss, &correct, err);
        int bn = b->n;
        ptc__loader_release(b);
        if (rc < 0)
            return rc;
        count_step(r, ep, epoch, total, bn, loss, correct);
    }
    return rc;
}

/* The epoch's training: this rank's shard in the sampler's order, through the loader, and the
 * totals over every rank into *ep; *secs is its duration. */
static int train_epoch(run *r, int epoch, epoch_sums *ep, double *secs, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    const ptc__dataset *d = r->data;
    const int rank = r->rc.rank;
    ptc__sampler_params sp = {.n = d->train.n,
                              .world = r->rc.world,
                              .rank = rank,
                              .shuffle = p->shuffle != 0,
                              .drop_last = false,
                              .seed = p->seed};
    int64_t *idx = NULL, n = 0;
    ptc__loader *l = NULL;
    int rc = ptc__sampler_indices(&sp, (uint64_t)epoch, &idx, &n, err);
    if (rc < 0)
        goto out;
    ptc__loader_params lp = {.split = &d->train,
                             .indices = idx,
                             .nindices = n,
                             .batch_size = p->batch_size,
                             .nbuffers = 3,
                             .augment = p->augment != 0,
                             .draws_only = r->img_train != NULL,
                             .seed = p->seed,
                             .rank = (uint64_t)rank,
                             .epoch = (uint64_t)epoch};
    memcpy(lp.mean, d->norm_mean, sizeof lp.mean);
    memcpy(lp.std, d->norm_std, sizeof lp.std);
    if ((rc = ptc__loader_start(&l, &lp, err)) < 0)
        goto out;
    double t0 = ptc__train_now();
    rc = train_batches(r, l, epoch, n, ep, err);
    ptc__loader_stop(l);
    if (rc == 0)
        rc = collect(r, ep, epoch, n, err);
    if (rc == 0)
        rc = ptc__train_totals(r->rc.comm, &ep->loss_sum, &ep->right, &ep->seen, err);
    *secs = ptc__train_now() - t0;
out:
    ptc__free(idx);
    return rc;
}

/* The epoch's log line and metrics record, with the GPU's readings over the epoch. */
static void report_epoch(run *r, int epoch, const epoch_sums *ep, double secs)
{
    const ptc_train_params *p = r->p;
    const double loss_sum = ep->loss_sum;
    const int64_t right = ep->right, seen = ep->seen;
    char l[32], a[32];
    say(p, "epoch %d/%d: loss %s, train accuracy %s%%, %.0f images/s, %.1f s", epoch + 1, p->epochs,
        fixed(l, sizeof l, 4, seen ? loss_sum / (double)seen : 0),
        fixed(a, sizeof a, 2, seen ? 100.0 * (double)right / (double)seen : 0),
        secs > 0 ? (double)seen / secs : 0, secs);
    char gpu[320] = ""; /* the epoch's GPU readings: utilisation and power averaged */
    if (r->mon) {
        ptc__gpu_sample es;
        char warn[256];
        if (ptc__gpumon_epoch(r->mon, &es) > 0)
            ptc__gpumon_json(&es, gpu, sizeof gpu);
        if (ptc__gpumon_epoch_warning(r->mon, epoch + 1, warn, sizeof warn))
            say(p, "warning: %s", warn);
        ptc__gpumon_epoch_reset(r->mon);
    }
    ptc__record_epoch(&r->rec, epoch + 1, r->step, loss_sum, right, seen, r->lr, secs, gpu);
}

/* The test split after every eval_every-th epoch and after the last one. */
static int evaluate_epoch(run *r, int epoch, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    ptc_train_result *res = r->res;
    bool last = epoch + 1 == p->epochs || r->stop;
    if (!(p->eval_every > 0 && (epoch + 1) % p->eval_every == 0) && !last)
        return 0;
    int64_t count;
    int rc = ptc__train_evaluate(r->model, r->data, r->img_test, &r->nz, p->batch_size, r->rc.comm,
                                 &res->test_accuracy, &res->test_loss, &count,
                                 &res->eval_images_per_sec, err);
    if (rc < 0)
        return rc;
    char a[32], l[32];
    say(p, "epoch %d: test accuracy %s%% (%lld images), test loss %s", epoch + 1,
        fixed(a, sizeof a, 2, 100.0 * res->test_accuracy), (long long)count,
        fixed(l, sizeof l, 4, res->test_loss));
    ptc__record_eval(&r->rec, epoch + 1, r->step, res->test_accuracy, res->test_loss, count,
                     res->eval_images_per_sec);
    return 0;
}

/* One epoch: training, its report, an evaluation when due and the checkpoint. The evaluation and
 * the checkpoint are left out of the throughput clock. */
static int run_epoch(run *r, int epoch, ptc_error *err)
{
    epoch_sums ep = {0};
    double secs = 0;
    int rc = train_epoch(r, epoch, &ep, &secs, err);
    if (rc < 0)
        return rc;
    r->res->epochs_done = epoch + 1;
    report_epoch(r, epoch, &ep, secs);
    double t_aside = ptc__train_now();
    if ((rc = evaluate_epoch(r, epoch, err)) < 0)
        return rc;
    if (r->p->checkpoint &&
        (rc = save_rank0(r, r->p->checkpoint, epoch + 1, r->step, r->lr, 1, err)) < 0)
        return rc;
    double aside = ptc__train_now() - t_aside;
    ptc__recorder_aside(&r->rec, aside);
    if (r->t_warm > 0)
        r->t_other += aside;
    return 0;
}

/* The run's throughput (training time after the warm-up steps, evaluations and saves left out)
 * and the reducer's timings into the result; *copy_ms is the per-step time spent copying
 * gradients into the buckets and the averages back. */
static void measure(run *r, double *copy_ms)
{
    ptc_train_result *res = r->res;
    res->steps = r->step;
    double t_train = ptc__train_now() - r->t_warm - r->t_other;
    if (r->t_warm > 0 && r->images > r->warm_images && t_train > 0)
        res->train_images_per_sec = (double)(r->images - r->warm_images) * r->rc.world / t_train;
    *copy_ms = 0;
    if (r->reducer) {
        ptc__reducer_stats st;
        ptc__reducer_get_stats(r->reducer, &st);
        res->allreduce_ms = 1e3 * st.allreduce_seconds;
        res->allreduce_exposed_ms = st.steps ? 1e3 * st.exposed_seconds / (double)st.steps : 0;
        *copy_ms = st.steps ? 1e3 * st.pack_seconds / (double)st.steps : 0;
    }
}

/* The model's state dict to p->save (rank 0), when asked. */
static int save_model(run *r, ptc_error *err)
{
    const ptc_train_params *p = r->p;
    if (!p->save)
        return 0;
    int rc = save_rank0(r, p->save, r->res->epochs_done, r->step, r->lr, 0, err);
    if (rc == 0)
        say(p, "saved the model's state dict to %s", p->save);
    return rc;
}

int ptc__train_ex(const ptc_train_params *p, int host_input, ptc_train_result *res, ptc_error *err)
{
    ptc__err_clear(err);
    if (!p || !res)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_train: missing argument");
    memset(res, 0, sizeof *res);
    run r = {.p = p, .res = res};
    int rc = plan(&r, err);
    if (rc < 0)
        return rc;
    if ((rc = setup(&r, host_input, err)) < 0)
        goto out;
    announce(&r);
    r.start_step = r.step;
    ptc__recorder_start(&r.rec, ptc__train_now());
    for (int epoch = r.start_epoch; epoch < p->epochs && !r.stop && rc == 0; epoch++)
        rc = run_epoch(&r, epoch, err);
    /* the figures also after a failed epoch; the model is saved only after a complete run */
    double copy_ms;
    measure(&r, &copy_ms);
    if (rc == 0)
        rc = save_model(&r, err);
    if (rc == 0)
        ptc__record_summary(&r.rec, res, r.step, r.rc.world, copy_ms); /* the file's last */
    /* a metrics file that could not be written in full: reported after the run and the save */
    ptc__recorder_close(&r.rec);
    if (rc == 0)
        rc = ptc__recorder_status(&r.rec, err);
out:
    if (rc < 0) /* the other ranks may be waiting for this one's sums: no collective goodbye */
        ptc__reducer_abandon(r.reducer);
    run_free(&r);
    return rc;
}

int ptc_evaluate(const ptc_train_params *p, const char *weights, double *accuracy, double *loss,
                 int64_t *count, ptc_error *err)
{
    ptc__err_clear(err);
    ptc_train_params prm; /* the caller's struct, whatever ptc.h it was built with (params.c) */
    ptc_train_params_default(&prm);
    if (p && ptc__params_read(&prm, sizeof prm, p, "ptc_train_params", err) < 0)
        return PTC_EINVAL;
    p = p ? &prm : NULL;
    if (!p || !weights || !accuracy || !loss || !count || p->batch_size < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_evaluate: invalid arguments");
    run r = {.p = p};
    int rc = resolve(p, &r.rc, err);
    if (rc == 0)
        rc = open_backend(p, p->threads, &r.ops, &r.be, err);
    if (rc == 0)
        rc = load_data(&r.rc, true, &r.data, err);
    ptc__model_params mp = {.arch = r.rc.arch,
                            .num_classes = r.data ? r.data->classes : 0,
                            .ops = r.ops,
                            .be = r.be,
                            .seed = 0};
    if (rc == 0)
        rc = ptc__model_new(&r.model, &mp, err);
    if (rc == 0)
        rc = upload_splits(&r, true, err);
    if (rc == 0)
        rc = ptc__train_load_weights(r.model, weights, err);
    double ips;
    if (rc == 0)
        rc = ptc__train_evaluate(r.model, r.data, r.img_test, &r.nz, p->batch_size, NULL, accuracy,
                                 loss, count, &ips, err);
    run_free(&r);
    return rc;
}

/* The backend choice of ptc_train, for ptc_model_new (lib/nn/model.c): one rule for both. */
int ptc__train_open_backend(const ptc_train_params *p, const ptc__backend_ops **ops, ptc__be **be,
                            ptc_error *err)
{
    return open_backend(p, p->threads, ops, be, err);
}
