/*
 * cmd_train.c - `ptc train` (the tutorial "ResNet-18 on CIFAR-10" without Python) and `ptc eval`
 * (test accuracy of a state dict).
 *
 * The work is lib/train's; this file parses options (defaults are the tutorial's), chooses the
 * dataset (CIFAR-10 when ./data/cifar-10-batches-bin exists, else Fashion-MNIST from
 * /usr/share/datasets/fashion-mnist) and says which on its first line, draws a progress line on a
 * terminal (epoch, images/s, loss, ETA; never wider than the terminal), prints one line per epoch
 * and evaluation, and ends with a summary table (rank 0). Options are documented in ptc-train(1).
 *
 * Several processes: under an MPI launcher (`mpirun -np N ptc train ...`) every process opens the
 * MPI communicator and lib/train runs DistributedDataParallel's recipe; rank 0 alone prints.
 * `ptc train --nproc N ...` is the single-machine shortcut (the tutorial's mp.spawn): it replaces
 * itself with `mpirun -np N --oversubscribe <this ptc> train ...` (the other options unchanged),
 * so both ways run the same code. A rank that fails ends the whole job (MPI_Abort): the launcher
 * names the rank and every process exits instead of waiting for the one that is gone.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"
#include "train_watch.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CIFAR_DEFAULT_DIR "./data/cifar-10-batches-bin"
#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

static int parse_int(const char *s, const char *opt, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return cli_usage_error("%s needs an integer from %lld to %lld, not '%s'", opt,
                               (long long)lo, (long long)hi, s);
    *out = v;
    return 0;
}

static int parse_double(const char *s, const char *opt, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= 0) || v > 1e9)
        return cli_usage_error("%s needs a non-negative number, not '%s'", opt, s);
    *out = v;
    return 0;
}

static int is_file(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* --dataset and --data: CIFAR-10 when asked, or when no dataset is named and the folder (given,
 * or ./data/cifar-10-batches-bin) holds test_batch.bin; Fashion-MNIST otherwise. */
static int choose_data(const char *name, const char *dir, const char **dataset, const char **out)
{
    if (!name)
        name =
            is_file(dir ? dir : CIFAR_DEFAULT_DIR, "test_batch.bin") ? "cifar10" : "fashion-mnist";
    if (strcmp(name, "cifar10") == 0) {
        *dataset = "cifar10";
        *out = dir ? dir : CIFAR_DEFAULT_DIR;
    } else if (strcmp(name, "fashion-mnist") == 0) {
        *dataset = "fashion-mnist";
        *out = dir;
    } else {
        return cli_usage_error("unknown dataset '%s' (cifar10 or fashion-mnist)", name);
    }
    return 0;
}

/* ---- ptc train ----------------------------------------------------------------------------------- */

static void train_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: ptc train [OPTION]...\n"
        "Train torchvision's ResNet-18 (num_classes=10) as the PyTorch tutorial does, and save\n"
        "its state dict. Defaults are the tutorial's.\n"
        "\n"
        "  --dataset cifar10|fashion-mnist  default: cifar10 when " CIFAR_DEFAULT_DIR " exists,\n"
        "                           else fashion-mnist (" FASHION_MNIST_DIR ")\n"
        "  --data DIR               the dataset's folder\n"
        "  --arch resnet18|resnet18-cifar  (default resnet18: torchvision's stem)\n"
        "  --epochs N               (10)          --max-steps N   stop after N steps\n"
        "  --batch-size B           (128)         --lr F          (0.01)\n"
        "  --momentum F             (0.9)         --weight-decay F (5e-4)\n"
        "  --nesterov                             --schedule constant|step:S:G|cosine[:W]\n"
        "  --nproc N                start N processes on this machine (through mpirun);\n"
        "                           or run under `mpirun -np N ptc train ...`\n"
        "  --lr-scaling none|sqrt|linear  lr x world^(0, 1/2, 1) for N processes (none)\n"
        "  --bucket-cap-mb M        gradient bucket size for the all-reduce (25)\n"
        "  --no-broadcast-buffers   keep each rank's BatchNorm statistics (default: rank 0's\n"
        "                           are broadcast before every forward, as DDP does)\n"
        "  --sync-bn                batch statistics over all processes' batches\n"
        "                           (SyncBatchNorm; one process: no effect)\n"
        "  --seed N                 (0)           --no-shuffle    --no-augment\n"
        "  --eval-every N           (2; 0: only after the last epoch)\n"
        "  --init CKPT              start from a state dict (torchvision names)\n"
        "  --save PATH              the final state dict (default: cifar10_resnet18_ddp.pth,\n"
        "                           or fashion_mnist_resnet18.pth)\n"
        "  --checkpoint PATH        a full training checkpoint after every epoch\n"
        "  --checkpoint-all-ranks   every process also writes its own, to PATH.rank<r>\n"
        "  --resume PATH            continue from such a checkpoint\n"
        "  --metrics PATH           JSON lines: every epoch, evaluation, and a summary\n"
        "  --log-every N            also a record of the loss, accuracy, lr and images/s\n"
        "                           every N steps (20; 0: none; see METRICS in ptc-train(1))\n"
        "  --tensorboard DIR        TensorBoard event files in DIR, made when missing (view:\n"
        "                           tensorboard --logdir DIR)\n"
        "  --max-samples N          use only the first N images of each split (only those\n"
        "                           are held; Normalize's statistics stay the whole train\n"
        "                           split's, streamed)\n"
        "  --threads N              CPU threads of the backend (0: all it may use)\n"
        "  --backend auto|ref|dnnl|cuda  (auto: cuda when a GPU can be used, else dnnl,\n"
        "                           else ref)\n"
        "  --device cuda:N          the GPU (default: the local rank's under mpirun, else 0)\n"
        "  --precision f32|bf16     bf16: torch.autocast's rules (cuda; dnnl on a CPU with\n"
        "                           AVX512_BF16 or AMX; not ref)\n"
        "  --tf32                   allow TF32 tensor cores in float32 math (cuda)\n"
        "  --deterministic          only algorithms whose results do not depend on scheduling\n"
        "  --comm auto|nccl|host    what carries the gradients of several processes (auto:\n"
        "                           nccl for the cuda backend, MPI for the others)\n"
        "  --progress | --no-progress  progress line: epoch, images/s, loss, ETA (default: on\n"
        "                           a terminal)\n"
        "At the end a summary: epochs, best and last test accuracy, wall time, images/s,\n"
        "peak memory and the files written.\n");
}

enum {
    O_DATASET = 256,
    O_DATA,
    O_ARCH,
    O_EPOCHS,
    O_MAX_STEPS,
    O_BATCH,
    O_LR,
    O_MOMENTUM,
    O_WD,
    O_NESTEROV,
    O_SCHEDULE,
    O_SEED,
    O_NO_SHUFFLE,
    O_NO_AUGMENT,
    O_EVAL_EVERY,
    O_INIT,
    O_SAVE,
    O_CHECKPOINT,
    O_RESUME,
    O_METRICS,
    O_THREADS,
    O_BACKEND,
    O_PROGRESS,
    O_NO_PROGRESS,
    O_MAX_SAMPLES,
    O_LR_SCALING,
    O_WEIGHTS,
    O_JSON,
    O_NPROC,
    O_BUCKET_MB,
    O_NO_BCAST_BUFFERS,
    O_SYNC_BN,
    O_CKPT_ALL_RANKS,
    O_DEVICE,
    O_PRECISION,
    O_TF32,
    O_DETERMINISTIC,
    O_COMM,
    O_TENSORBOARD,
    O_LOG_EVERY
};

#define DEVICE_LONGOPTS                                                                            \
    {"backend", required_argument, NULL, O_BACKEND},                                               \
        {"device", required_argument, NULL, O_DEVICE},                                             \
        {"precision", required_argument, NULL, O_PRECISION}, {"tf32", no_argument, NULL, O_TF32},  \
    {                                                                                              \
        "deterministic", no_argument, NULL, O_DETERMINISTIC                                        \
    }

/* What the environment tunes in train and eval: the library reads no environment for it
 * (lib/base/env.h), so the command passes it on. PTC_DNNL_WINOGRAD=1 lets the dnnl backend use
 * Winograd convolutions; CUDA_VISIBLE_DEVICES maps the GPU to NVML's numbering for the readings. */
static void env_params(ptc_train_params *p)
{
    const char *wg = getenv("PTC_DNNL_WINOGRAD");
    p->dnnl_winograd = wg && strcmp(wg, "1") == 0;
    p->visible_devices = getenv("CUDA_VISIBLE_DEVICES");
}

/* The options that choose where and how the numbers are computed, shared by train and eval.
 * Returns 1 when c is not one of them, else 0 or a usage error's exit status in *status. */
static int device_option(int c, const char *arg, ptc_train_params *p, int *status)
{
    *status = 0;
    switch (c) {
    case O_BACKEND:
        if (strcmp(arg, "auto") && strcmp(arg, "ref") && strcmp(arg, "dnnl") && strcmp(arg, "cuda"))
            *status = cli_usage_error("unknown backend '%s' (auto, ref, dnnl, cuda)", arg);
        p->backend = arg;
        return 0;
    case O_DEVICE: {
        /* "cuda:N" as torch writes it; "cuda" alone is the default device. */
        int64_t v;
        if (strcmp(arg, "cuda") == 0) {
            p->device = -1;
            return 0;
        }
        if (strncmp(arg, "cuda:", 5) != 0 || !arg[5])
            *status = cli_usage_error("--device takes cuda:N (cuda:0, cuda:1, ...), not '%s'", arg);
        else
            *status = parse_int(arg + 5, "--device cuda:N", 0, 1023, &v);
        if (!*status)
            p->device = (int)v;
        return 0;
    }
    case O_PRECISION:
        if (strcmp(arg, "f32") && strcmp(arg, "bf16"))
            *status = cli_usage_error("--precision takes f32 or bf16, not '%s'", arg);
        p->precision = arg;
        return 0;
    case O_TF32:
        p->tf32 = 1;
        return 0;
    case O_DETERMINISTIC:
        p->deterministic = 1;
        return 0;
    default:
        return 1;
    }
}

/* ---- several processes --------------------------------------------------------------------------- */

/* --nproc N: replaces this process with `mpirun -np N --oversubscribe PTC train ARGS` where ARGS
 * are ours without --nproc. Returns only on failure. */
static int launch_local(int nproc, int argc, char **argv)
{
#ifdef PTC_HAVE_MPI
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return cli_usage_error("--nproc: cannot find this program's path (/proc/self/exe)");
    self[len] = '\0';
    const char *mpirun = getenv("PTC_MPIRUN");
#ifdef PTC_MPIRUN
    if (!mpirun || !*mpirun)
        mpirun = PTC_MPIRUN;
#endif
    if (!mpirun || !*mpirun)
        mpirun = "mpirun";
    char np[16];
    snprintf(np, sizeof np, "%d", nproc);
    char **av = calloc((size_t)argc + 8, sizeof *av);
    if (!av)
        return CLI_EXIT_NOMEM;
    int k = 0;
    av[k++] = (char *)mpirun;
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = "--oversubscribe";
    if (geteuid() == 0)
        av[k++] = "--allow-run-as-root"; /* the user asked for local processes as root */
    av[k++] = self;
    av[k++] = "train";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nproc") == 0) {
            i++; /* and its value */
            continue;
        }
        if (strncmp(argv[i], "--nproc=", 8) == 0)
            continue;
        av[k++] = argv[i];
    }
    av[k] = NULL;
    fflush(stdout);
    execvp(mpirun, av);
    fprintf(stderr, "ptc train: --nproc: cannot run %s: %s\n", mpirun, strerror(errno));
    free(av);
    return CLI_EXIT_IO;
#else
    (void)nproc, (void)argc, (void)argv;
    return cli_usage_error("--nproc: this ptc was built without MPI (install libopenmpi-dev and "
                           "openmpi-bin, then reconfigure)");
#endif
}

int cmd_train(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"dataset", required_argument, NULL, O_DATASET},
        {"data", required_argument, NULL, O_DATA},
        {"arch", required_argument, NULL, O_ARCH},
        {"epochs", required_argument, NULL, O_EPOCHS},
        {"max-steps", required_argument, NULL, O_MAX_STEPS},
        {"batch-size", required_argument, NULL, O_BATCH},
        {"lr", required_argument, NULL, O_LR},
        {"momentum", required_argument, NULL, O_MOMENTUM},
        {"weight-decay", required_argument, NULL, O_WD},
        {"nesterov", no_argument, NULL, O_NESTEROV},
        {"schedule", required_argument, NULL, O_SCHEDULE},
        {"lr-scaling", required_argument, NULL, O_LR_SCALING},
        {"nproc", required_argument, NULL, O_NPROC},
        {"bucket-cap-mb", required_argument, NULL, O_BUCKET_MB},
        {"no-broadcast-buffers", no_argument, NULL, O_NO_BCAST_BUFFERS},
        {"sync-bn", no_argument, NULL, O_SYNC_BN},
        {"seed", required_argument, NULL, O_SEED},
        {"no-shuffle", no_argument, NULL, O_NO_SHUFFLE},
        {"no-augment", no_argument, NULL, O_NO_AUGMENT},
        {"eval-every", required_argument, NULL, O_EVAL_EVERY},
        {"init", required_argument, NULL, O_INIT},
        {"save", required_argument, NULL, O_SAVE},
        {"checkpoint", required_argument, NULL, O_CHECKPOINT},
        {"checkpoint-all-ranks", no_argument, NULL, O_CKPT_ALL_RANKS},
        {"resume", required_argument, NULL, O_RESUME},
        {"metrics", required_argument, NULL, O_METRICS},
        {"log-every", required_argument, NULL, O_LOG_EVERY},
        {"tensorboard", required_argument, NULL, O_TENSORBOARD},
        {"max-samples", required_argument, NULL, O_MAX_SAMPLES},
        {"threads", required_argument, NULL, O_THREADS},
        DEVICE_LONGOPTS,
        {"comm", required_argument, NULL, O_COMM},
        {"progress", no_argument, NULL, O_PROGRESS},
        {"no-progress", no_argument, NULL, O_NO_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    double t_start = train_watch_now(); /* the summary's wall time: the whole command */
    ptc_train_params p;
    ptc_train_params_default(&p);
    env_params(&p);
    p.log_every = 20;
    const char *dataset = NULL, *dir = NULL, *tb_dir = NULL;
    int mode = CLI_PROGRESS_AUTO;
    int c;
    int64_t v, nproc = 0;
    cli_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int bad = 0;
        if (!device_option(c, optarg, &p, &bad)) {
            if (bad)
                return bad;
            continue;
        }
        switch (c) {
        case O_DATASET:
            dataset = optarg;
            break;
        case O_DATA:
            dir = optarg;
            break;
        case O_NPROC:
            bad = parse_int(optarg, "--nproc", 1, 4096, &nproc);
            break;
        case O_BUCKET_MB:
            bad = parse_double(optarg, "--bucket-cap-mb", &p.bucket_cap_mb);
            break;
        case O_NO_BCAST_BUFFERS:
            p.no_broadcast_buffers = 1;
            break;
        case O_COMM:
            if (strcmp(optarg, "auto") && strcmp(optarg, "nccl") && strcmp(optarg, "host"))
                return cli_usage_error("--comm takes auto, nccl or host, not '%s'", optarg);
            p.device_comm = optarg;
            break;
        case O_SYNC_BN:
            p.sync_bn = 1;
            break;
        case O_ARCH:
            if (strcmp(optarg, "resnet18") != 0 && strcmp(optarg, "resnet18-cifar") != 0)
                return cli_usage_error("unknown architecture '%s' (resnet18, resnet18-cifar)",
                                       optarg);
            p.arch = optarg;
            break;
        case O_EPOCHS:
            bad = parse_int(optarg, "--epochs", 1, 100000, &v);
            p.epochs = (int)v;
            break;
        case O_MAX_STEPS:
            bad = parse_int(optarg, "--max-steps", 1, INT64_MAX, &p.max_steps);
            break;
        case O_BATCH:
            bad = parse_int(optarg, "--batch-size", 1, 65536, &v);
            p.batch_size = (int)v;
            break;
        case O_LR:
            bad = parse_double(optarg, "--lr", &p.lr);
            break;
        case O_MOMENTUM:
            bad = parse_double(optarg, "--momentum", &p.momentum);
            break;
        case O_WD:
            bad = parse_double(optarg, "--weight-decay", &p.weight_decay);
            break;
        case O_NESTEROV:
            p.nesterov = 1;
            break;
        case O_SCHEDULE:
            p.schedule = optarg;
            break;
        case O_LR_SCALING:
            if (strcmp(optarg, "none") && strcmp(optarg, "sqrt") && strcmp(optarg, "linear"))
                return cli_usage_error("--lr-scaling takes none, sqrt or linear");
            p.lr_scaling = optarg;
            break;
        case O_SEED:
            bad = parse_int(optarg, "--seed", 0, INT64_MAX, &v);
            p.seed = (uint64_t)v;
            break;
        case O_NO_SHUFFLE:
            p.shuffle = 0;
            break;
        case O_NO_AUGMENT:
            p.augment = 0;
            break;
        case O_EVAL_EVERY:
            bad = parse_int(optarg, "--eval-every", 0, 100000, &v);
            p.eval_every = (int)v;
            break;
        case O_INIT:
            p.init = optarg;
            break;
        case O_SAVE:
            p.save = optarg;
            break;
        case O_CHECKPOINT:
            p.checkpoint = optarg;
            break;
        case O_CKPT_ALL_RANKS:
            p.checkpoint_all_ranks = 1;
            break;
        case O_RESUME:
            p.resume = optarg;
            break;
        case O_METRICS:
            p.metrics = optarg;
            break;
        case O_LOG_EVERY:
            bad = parse_int(optarg, "--log-every", 0, 1000000000, &p.log_every);
            break;
        case O_TENSORBOARD:
            if (!*optarg)
                return cli_usage_error("--tensorboard needs a directory");
            tb_dir = optarg;
            break;
        case O_MAX_SAMPLES:
            bad = parse_int(optarg, "--max-samples", 1, INT64_MAX, &p.max_samples);
            break;
        case O_THREADS:
            bad = parse_int(optarg, "--threads", 0, 4096, &v);
            p.threads = (int)v;
            break;
        case O_PROGRESS:
            mode = CLI_PROGRESS_ALWAYS;
            break;
        case O_NO_PROGRESS:
            mode = CLI_PROGRESS_NEVER;
            break;
        case 'h':
            train_usage(stdout);
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("invalid option");
        }
        if (bad)
            return bad;
    }
    if (optind < argc)
        return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!(p.bucket_cap_mb > 0))
        return cli_usage_error("--bucket-cap-mb needs a positive size");
    int rc = choose_data(dataset, dir, &p.dataset, &p.data_dir);
    if (rc)
        return rc;
    ptc_error err;
    if (nproc > 0) {
        if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE"))
            return cli_usage_error("--nproc starts its own processes; under mpirun or srun leave "
                                   "it out");
        return launch_local((int)nproc, argc, argv);
    }
    ptc_comm *comm;
    if ((rc = ptc_comm_open(&comm, NULL, &err)) < 0)
        return cli_report(rc, &err);
    int rank = ptc_comm_rank(comm), world = ptc_comm_size(comm);
    int cifar = strcmp(p.dataset, "cifar10") == 0;
    if (!p.save)
        p.save = cifar ? "cifar10_resnet18_ddp.pth" : "fashion_mnist_resnet18.pth";
    if (rank == 0) {
        printf("dataset: %s (%s)\n", cifar ? "CIFAR-10" : "Fashion-MNIST",
               p.data_dir ? p.data_dir : FASHION_MNIST_DIR);
        fflush(stdout);
    }
    train_watch *u = train_watch_new(mode);
    if (!u) {
        ptc_comm_close(comm);
        return CLI_EXIT_NOMEM;
    }
    /* Rank 0 writes the event file; its module is loaded before training starts, so that a
     * missing one ends the command at once. */
    if (tb_dir && rank == 0 && (rc = train_watch_tensorboard(u, tb_dir)) != 0) {
        train_watch_free(u);
        if (world > 1)
            ptc_comm_abort(comm, rc);
        ptc_comm_close(comm);
        return rc;
    }
    train_watch_attach(u, &p);
    if (rank == 0 && p.resume && p.metrics) /* the best of the epochs before, for the summary */
        train_watch_history(u, p.metrics);
    p.comm = world > 1 ? comm : NULL;
    ptc_train_result res = {0}; /* read after a failure too */
    rc = ptc_train(&p, &res, &err);
    train_watch_end_progress(u);
    /* Rank 0: the summary, also after a run that failed once it had begun (what was done, which
     * files were written), before the error. */
    if (rank == 0 && (rc == 0 || res.steps > 0))
        train_watch_summary(u, &p, &res, world, train_watch_now() - t_start, rc < 0 ? &err : NULL);
    if (rc < 0) {
        int status = cli_report(rc, &err);
        train_watch_free(u);
        if (world > 1) {
            fprintf(stderr, "ptc train: rank %d of %d failed; ending every process of the job\n",
                    rank, world);
            fflush(stderr);
            ptc_comm_abort(comm, status);
        }
        ptc_comm_close(comm);
        return status;
    }
    int status = train_watch_free(u);
    ptc_comm_close(comm);
    return status ? status : CLI_EXIT_OK;
}

/* ---- ptc eval ------------------------------------------------------------------------------------ */

int cmd_eval(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"weights", required_argument, NULL, O_WEIGHTS},
        {"dataset", required_argument, NULL, O_DATASET},
        {"data", required_argument, NULL, O_DATA},
        {"arch", required_argument, NULL, O_ARCH},
        {"batch-size", required_argument, NULL, O_BATCH},
        {"max-samples", required_argument, NULL, O_MAX_SAMPLES},
        {"threads", required_argument, NULL, O_THREADS},
        DEVICE_LONGOPTS,
        {"json", no_argument, NULL, O_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *weights = NULL, *dataset = NULL, *dir = NULL;
    int json = 0, c;
    int64_t batch = 256, v;
    ptc_train_params p;
    ptc_train_params_default(&p);
    env_params(&p);
    cli_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int bad = 0;
        if (!device_option(c, optarg, &p, &bad)) {
            if (bad)
                return bad;
            continue;
        }
        switch (c) {
        case O_WEIGHTS:
            weights = optarg;
            break;
        case O_DATASET:
            dataset = optarg;
            break;
        case O_DATA:
            dir = optarg;
            break;
        case O_ARCH:
            p.arch = optarg;
            break;
        case O_BATCH:
            bad = parse_int(optarg, "--batch-size", 1, 65536, &batch);
            break;
        case O_MAX_SAMPLES:
            bad = parse_int(optarg, "--max-samples", 1, INT64_MAX, &p.max_samples);
            break;
        case O_THREADS:
            bad = parse_int(optarg, "--threads", 0, 4096, &v);
            p.threads = (int)v;
            break;
        case O_JSON:
            json = 1;
            break;
        case 'h':
            printf("Usage: ptc eval --weights PATH [--dataset D] [--data DIR] [--arch A]\n"
                   "                [--batch-size B] [--max-samples N] [--threads N] [--json]\n"
                   "                [--backend auto|ref|dnnl|cuda] [--device cuda:N]\n"
                   "                [--precision f32|bf16] [--tf32] [--deterministic]\n"
                   "Test accuracy and mean cross-entropy of a ResNet-18 state dict.\n"
                   "Only the test split is held (its first N images with --max-samples); for\n"
                   "Fashion-MNIST the train images are streamed once for Normalize's statistics,\n"
                   "for CIFAR-10 (the tutorial's constants) the train files are not opened.\n");
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("invalid option");
        }
        if (bad)
            return bad;
    }
    if (!weights)
        return cli_usage_error("missing --weights PATH");
    int rc = choose_data(dataset, dir, &p.dataset, &p.data_dir);
    if (rc)
        return rc;
    p.batch_size = (int)batch;
    double acc, loss;
    int64_t count;
    ptc_error err;
    rc = ptc_evaluate(&p, weights, &acc, &loss, &count, &err);
    if (rc < 0)
        return cli_report(rc, &err);
    if (json)
        printf("{\n  \"dataset\": \"%s\",\n  \"images\": %lld,\n  \"accuracy\": %.6f,\n"
               "  \"loss\": %.6f\n}\n",
               p.dataset, (long long)count, acc, loss);
    else
        printf("test accuracy %.2f%% (%lld images), test loss %.4f\n", 100.0 * acc,
               (long long)count, loss);
    return CLI_EXIT_OK;
}
