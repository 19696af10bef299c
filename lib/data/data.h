/*
 * data.h - the data layer: image classification datasets held in memory as uint8, the sample
 * order of torch.utils.data.distributed.DistributedSampler, the tutorial's augmentation, and a
 * thread that prepares normalized float32 batches ahead of the trainer.
 *
 * Formats read (every size in them is treated as hostile and checked before it is used):
 *
 *   CIFAR-10 binary   a directory with data_batch_1.bin .. data_batch_5.bin (the train split: those
 *                     present, in that order, at least one) and test_batch.bin (the test split).
 *                     Each file is a sequence of 3073-byte records: 1 label byte (< 10), then
 *                     3072 pixel bytes: the 32x32 red plane, the green plane, the blue plane, each
 *                     row-major. A file's size must be a positive multiple of 3073.
 *   IDX (MNIST)       train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
 *                     t10k-labels-idx1-ubyte, each either plain or gzip-compressed (name + ".gz";
 *                     the plain file is used when both exist). Images: u32 BE magic 0x00000803,
 *                     u32 BE n, rows, cols (28, 28), then n*rows*cols bytes. Labels: u32 BE magic
 *                     0x00000801, u32 BE n, then n bytes (< 10). Both files must declare the same
 *                     n and hold exactly the declared bytes (nothing after them). For a .gz file
 *                     the offsets in errors are offsets in the inflated content, and never more
 *                     than the header's dimensions promise is inflated. A .gz file may hold
 *                     several gzip members (gzip -c a b > c), read as one stream; anything else
 *                     after the last member is refused.
 *
 * Bounded by what is on disk: nothing is allocated for data before the sizes are proven against
 * the file, and what is held grows with what has really been read.
 *   - A file with a hole (a sparse file: lseek SEEK_HOLE finds one before its end) is refused at
 *     open, so st_size is always bytes really stored.
 *   - A plain IDX file must be exactly as long as its header declares (16 + n*784 or 8 + n bytes).
 *   - A gzip IDX file inflates to at most PTC__DATA_GZ_RATIO times its compressed size (or
 *     PTC__DATA_GZ_FLOOR bytes, if more): a header declaring more is refused before anything is
 *     read, and the stream is held to the bound while it inflates. Real IDX files compress less
 *     than 3:1.
 *   - ptc__data_params.keep: only the first keep samples of each split are held (and, of a split
 *     that no statistics are needed of, read), the rest of a train split streamed only through
 *     the statistics, so they are those of the whole split whatever keep is.
 *
 * Presentation: every sample is an image of 3x32x32 uint8, planes in the order R, G, B, each
 * row-major (CHW), so that the model is exactly torchvision's resnet18(num_classes=10). An IDX
 * image (28x28 gray) is zero-padded by 2 pixels on each side and its gray plane is replicated to
 * the three channels.
 *
 * Thread safety: a dataset is read-only once made and may be read by any number of threads. A
 * loader is driven by one consumer thread. Nothing here keeps global state.
 */
#ifndef PTC_DATA_DATA_H
#define PTC_DATA_DATA_H

#include "base/base.h"

#define PTC__DATA_C       3
#define PTC__DATA_H       32
#define PTC__DATA_W       32
#define PTC__DATA_PIXELS  (PTC__DATA_C * PTC__DATA_H * PTC__DATA_W) /* 3072 per image */
#define PTC__DATA_CLASSES 10
#define PTC__CIFAR_RECORD (1 + PTC__DATA_PIXELS) /* 3073 bytes on disk */
#define PTC__IDX_SIDE     28
#define PTC__IDX_PAD      ((PTC__DATA_H - PTC__IDX_SIDE) / 2) /* 2 */
/* The default cap on the samples of one split (ptc__data_params.max_samples): 4,194,304 samples,
 * 12 GiB of presented images. CIFAR-10 has 50,000 + 10,000, Fashion-MNIST 60,000 + 10,000. */
#define PTC__DATA_MAX_SAMPLES  ((int64_t)1 << 22)
#define PTC__FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* The most a gzip IDX file may inflate to, as a multiple of its compressed size (the zip reader's
 * rule): real IDX files compress less than 3:1, so nothing real comes near it. */
#define PTC__DATA_GZ_RATIO 100
/* ... or to this many bytes whatever its size: a small file of sorted or periodic labels (60,000
 * labels in 10 runs) compresses far beyond 100:1, and 1 MiB costs nothing. */
#define PTC__DATA_GZ_FLOOR ((uint64_t)1 << 20)

/* The normalization constants of the PyTorch CIFAR-10 tutorial, which the trainer uses for
 * CIFAR-10 (the computed statistics are reported beside them). */
/* clang-format off */
#define PTC__CIFAR10_MEAN {0.4914, 0.4822, 0.4465}
#define PTC__CIFAR10_STD  {0.2023, 0.1994, 0.2010}
/* clang-format on */

/* ---- datasets -------------------------------------------------------------------------------- */

typedef struct ptc__split {
    int64_t n;
    uint8_t *images; /* [n][3][32][32], owned */
    uint8_t *labels; /* [n], each < the dataset's classes, owned */
} ptc__split;

/* PTC__DATA_SOURCE: the caller's ptc_source callbacks (callback.c), read into memory at open. */
typedef enum ptc__data_format {
    PTC__DATA_CIFAR10 = 1,
    PTC__DATA_IDX = 2,
    PTC__DATA_SOURCE = 3
} ptc__data_format;

typedef struct ptc__data_params {
    ptc__data_format format;
    const char *dir;     /* the directory holding the files; NULL: PTC__FASHION_MNIST_DIR for IDX
                            (required for CIFAR-10) */
    int64_t max_samples; /* per split, larger ones refused with PTC_ELIMIT; <= 0: the default */
    int64_t keep;        /* per split, only the first keep samples are held; <= 0: all. The
                            statistics still cover the whole train split (streamed, not held). */
    bool test_only;      /* the train split is not held (train.n = 0): for IDX only its images
                            file is streamed, for the statistics Normalize needs; for CIFAR-10,
                            normalised with constants, it is not read at all (mean and std 0) */
    /* PTC__DATA_SOURCE: the caller's sources (borrowed; see ptc_source in ptc.h); test NULL: an
     * empty test split. classes: labels must be below it (0: PTC__DATA_CLASSES), at most 256.
     * mean, std: Normalize's constants; all 0: the train source's statistics. The built-in
     * formats refuse classes other than 0 and PTC__DATA_CLASSES (PTC_EINVAL). */
    const ptc_source *train_source, *test_source;
    int classes;
    double mean[3], std[3];
} ptc__data_params;

/* format = PTC__DATA_IDX, dir = NULL, max_samples = PTC__DATA_MAX_SAMPLES, keep = 0 (all),
 * test_only = false. */
ptc__data_params ptc__data_params_default(void);

typedef struct ptc__dataset {
    ptc__data_format format;
    int classes; /* every label is below it: PTC__DATA_CLASSES, or a source's classes */
    ptc__split train, test;
    /* Per-channel mean and standard deviation of the train split, over every presented pixel
     * (3x32x32 per image, the padding of IDX images included) scaled to [0, 1]; computed exactly
     * from byte histograms, then in double. The standard deviation is the population one (divided
     * by the pixel count, not count - 1: with tens of millions of pixels the two agree to 1e-8). */
    double mean[3], std[3];
    /* What Normalize should use: the tutorial's constants for CIFAR-10, mean and std above for
     * IDX, the given constants or mean and std above for a source. */
    double norm_mean[3], norm_std[3];
} ptc__dataset;

/* Reads both splits of the dataset params describes (NULL: the defaults) and computes the
 * statistics. On failure *out is NULL and err names the file, the byte offset and the reason:
 *   PTC_ENOTFOUND  a required file does not exist (no data_batch_*.bin at all, no test_batch.bin,
 *                  an IDX file under neither its plain nor its .gz name)
 *   PTC_EIO        a file cannot be opened or read, or is not a regular file
 *   PTC_EFORMAT    a size, magic number, dimension count, label or sample count is wrong, a file
 *                  is truncated or has bytes after its data, a .gz stream is corrupt
 *   PTC_EUNSUPPORTED  IDX images that are not 28x28
 *                  or has a hole (a sparse file)
 *   PTC_ELIMIT     a split has more than max_samples samples, a .gz file declares or inflates to
 *                  more than PTC__DATA_GZ_RATIO times its size
 *   PTC_EINVAL, PTC_ENOMEM */
int ptc__dataset_new(ptc__dataset **out, const ptc__data_params *params, ptc_error *err);
void ptc__dataset_free(ptc__dataset *d);
/* "CIFAR-10", "Fashion-MNIST" or "the caller's images" (static), for messages. */
const char *ptc__dataset_name(const ptc__dataset *d);

/* How a reader reads one split. */
typedef struct ptc__read_params {
    int64_t max_samples; /* a split declaring more is refused with PTC_ELIMIT */
    int64_t keep;        /* the first keep samples are held (out->n = min(n, keep)); < 0: all */
    /* NULL, or [3][256]: the count of every byte value of every presented pixel of every sample
     * of the split, by channel, is added here; the whole split is then read (and checked), however
     * few samples are kept. Without it, reading stops after the kept samples. */
    uint64_t (*hist)[256];
} ptc__read_params;

/* The readers ptc__dataset_new uses, one split at a time. On success *out owns its arrays (free
 * them with ptc__split_free); on failure *out is empty. The short forms read and hold the whole
 * split. ptc__idx_read_ex takes labels_path NULL to read images only (out->labels is then NULL). */
int ptc__cifar10_read(ptc__split *out, const char *const *paths, int npaths, int64_t max_samples,
                      ptc_error *err);
int ptc__cifar10_read_ex(ptc__split *out, const char *const *paths, int npaths,
                         const ptc__read_params *rp, ptc_error *err);
int ptc__idx_read(ptc__split *out, const char *images_path, const char *labels_path,
                  int64_t max_samples, ptc_error *err);
int ptc__idx_read_ex(ptc__split *out, const char *images_path, const char *labels_path,
                     const ptc__read_params *rp, ptc_error *err);
/* A caller's source (callback.c): every image read through src->get in index order on this
 * thread, converted to the presented 3x32x32 CHW form; which ("train", "test") names it in
 * errors. Labels must be below classes. PTC_EINVAL (a size field, count, missing get or label out
 * of range), PTC_EUNSUPPORTED (not 32 x 32), PTC_ELIMIT (more than rp->max_samples), PTC_ENOMEM,
 * or the code get returned (its message prefixed with the source and index). */
int ptc__callback_read(ptc__split *out, const ptc_source *src, const char *which, int classes,
                       const ptc__read_params *rp, ptc_error *err);
void ptc__split_free(ptc__split *s); /* frees the arrays and empties s; accepts NULL */
/* The statistics described in ptc__dataset, of any split (zeros for an empty one). */
void ptc__split_stats(const ptc__split *s, double mean[3], double std[3]);
/* The same statistics from the per-channel histograms a reader filled (ptc__read_params.hist):
 * ptc__split_stats counts its split into such histograms and calls this, so both give the same
 * bits for the same pixels. */
void ptc__hist_stats(const uint64_t hist[3][256], double mean[3], double std[3]);
/* PTC_EFORMAT when the open file fd of size bytes has a hole before its end (a sparse file);
 * 0 otherwise, also where the file system cannot tell. Leaves the file position at 0. */
int ptc__data_check_dense(int fd, uint64_t size, const char *shown, ptc_error *err);

/* Shared by the readers: the path as it appears in error messages (escaped; the tail kept when
 * it is long, so the file name is always visible), in dst of dstsz bytes. */
const char *ptc__data_member(char *dst, size_t dstsz, const char *path);

/* ---- random numbers --------------------------------------------------------------------------
 * Every random choice of this layer comes from a SplitMix64 stream (Steele, Lea and Flood, 2014)
 * whose state is derived from a domain tag and a few 64-bit words:
 *
 *     mix(z):  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
 *              return z ^ (z >> 31)                                 (all arithmetic mod 2^64)
 *     init:    s = mix(tag); for each word w in order: s = mix(s ^ w)
 *     next():  s += 0x9e3779b97f4a7c15; return mix(s)
 *     below(b) (0 < b): t = (2^64 - b) mod b; draw r = next() until r >= t; return r mod b
 *
 * so the streams depend on nothing but their inputs (not on threads, timing or the platform), and
 * tests/interop/check_sampler.py reimplements them in Python to hold this text to the code. */
#define PTC__RNG_TAG_SHUFFLE 0x7074632d73687566ull /* "ptc-shuf" */
#define PTC__RNG_TAG_AUGMENT 0x7074632d61756700ull /* "ptc-aug" */

typedef struct ptc__rng {
    uint64_t s;
} ptc__rng;

void ptc__rng_init(ptc__rng *r, uint64_t tag, const uint64_t *words, int nwords);
uint64_t ptc__rng_next(ptc__rng *r);
uint64_t ptc__rng_below(ptc__rng *r, uint64_t bound); /* uniform in [0, bound); bound > 0 */

/* ---- sampling ----------------------------------------------------------------------------------
 * The indices one rank visits in one epoch, with the semantics of
 * torch.utils.data.distributed.DistributedSampler(dataset of n, num_replicas=world, rank,
 * shuffle, seed, drop_last):
 *
 *   order    shuffle = false: 0, 1, ..., n-1.
 *            shuffle = true: a permutation of 0..n-1 by Fisher-Yates over the stream
 *            init(PTC__RNG_TAG_SHUFFLE, {seed, epoch}): perm = [0..n); for i = n-1 down to 1:
 *            j = below(i + 1), swap perm[i] and perm[j]. It is the same on every rank (it does not
 *            depend on rank), as torch's is. It cannot equal torch's torch.randperm with a
 *            generator seeded seed + epoch, and does not try to; everything else is torch's.
 *   count    drop_last = false: ceil(n / world); drop_last = true: floor(n / world).
 *   padding  the order is extended to count * world entries by repeating it from its start, as
 *            many times as needed (entry i is order[i mod n]); with drop_last it is truncated.
 *   rank r   takes entries r, r + world, r + 2 world, ... (count of them).
 */
typedef struct ptc__sampler_params {
    int64_t n; /* samples in the dataset, >= 0 */
    int world; /* num_replicas, >= 1 */
    int rank;  /* 0 <= rank < world */
    bool shuffle;
    bool drop_last;
    uint64_t seed;
} ptc__sampler_params;

/* The number of indices each rank gets (torch's num_samples); -1 for invalid arguments. */
int64_t ptc__sampler_count(int64_t n, int world, bool drop_last);
/* A new array (free with ptc__free) of the *count indices rank p->rank visits in epoch epoch.
 * PTC_EINVAL for invalid parameters, PTC_ENOMEM. */
int ptc__sampler_indices(const ptc__sampler_params *p, uint64_t epoch, int64_t **out,
                         int64_t *count, ptc_error *err);
/* Evaluation sharding, without padding: rank r gets r, r + world, ... below n, so the counts over
 * all ranks add up to n exactly and every sample is evaluated once. Same ownership as above. */
int ptc__eval_shard(int64_t n, int world, int rank, int64_t **out, int64_t *count, ptc_error *err);

/* ---- augmentation ------------------------------------------------------------------------------
 * The tutorial's transforms.Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(),
 * ToTensor(), Normalize(mean, std)]) on one 3x32x32 uint8 image:
 *   crop     the image is zero-padded to 40x40 and the 32x32 window whose top-left corner is at
 *            (top, left), both in [0, 8], is kept;
 *   flip     when flip is set, each row of the window is mirrored;
 *   to float each byte v becomes ((float)v / 255.0f - mean[c]) / std[c], in float32 with mean and
 *            std rounded to float32 first, exactly torch's ToTensor + Normalize (the padding, being
 *            0 before Normalize, becomes -mean[c] / std[c]).
 * Without augmentation top = left = 4 and flip = false (ToTensor + Normalize only). */
typedef struct ptc__normalizer {
    float lut[3][256]; /* lut[c][v]: the float of byte v in channel c */
} ptc__normalizer;

void ptc__normalizer_init(ptc__normalizer *nz, const double mean[3], const double std[3]);
/* dst: [3][32][32] float32; src: [3][32][32] uint8. */
void ptc__augment_image(const ptc__normalizer *nz, const uint8_t *src, int top, int left, bool flip,
                        float *dst);
/* The random choices for one sample: stream init(PTC__RNG_TAG_AUGMENT, {seed, rank, epoch,
 * index}) where index is the sample's index in the dataset; top = below(9), left = below(9),
 * flip = the top bit of next() (the order of torch's draws: crop first, then the flip). */
void ptc__augment_draw(uint64_t seed, uint64_t rank, uint64_t epoch, int64_t index, int *top,
                       int *left, bool *flip);

/* ---- the loader ------------------------------------------------------------------------------
 * A thread that turns one epoch's index list into batches: images [B][3][32][32] float32
 * (augmented or not, normalized; or, with draws_only, only what they are made from) and labels
 * [B] int64, where B = batch_size except for a shorter
 * last batch (torch's DataLoader with drop_last=False). It fills a ring of nbuffers batches ahead
 * of the consumer and waits while all of them are full. The content of every batch depends only on
 * the dataset, the indices, the mean and std and (seed, rank, epoch), never on thread timing. */
typedef struct ptc__loader ptc__loader;

typedef struct ptc__batch {
    int n;           /* samples in this batch, 1..batch_size */
    int64_t number;  /* 0, 1, ... within the epoch */
    int64_t first;   /* position of the first sample in the index list */
    float *images;   /* [n][3][32][32]; NULL with ptc__loader_params.draws_only */
    int64_t *labels; /* [n] */
    /* draws_only: what a backend's images_batch makes the images from (the dataset index as
     * int32 and the random choices of ptc__augment_draw, or 4, 4, 0 without augmentation); NULL
     * otherwise */
    int32_t *sample;        /* [n] */
    int8_t *top, *left;     /* [n] */
    uint8_t *flip;          /* [n] */
    const int64_t *indices; /* [n] the dataset indices of the samples (borrowed from the list) */
    ptc__loader *owner;     /* internal */
    int slot;               /* internal */
} ptc__batch;

typedef struct ptc__loader_params {
    const ptc__split *split; /* borrowed; must outlive the loader */
    const int64_t *indices;  /* [nindices] borrowed; must outlive the loader */
    int64_t nindices;
    int batch_size; /* >= 1 */
    int nbuffers;   /* ring size, >= 1 (0: 2) */
    bool augment;
    /* No float images: each batch carries only the sample indices, crops, flips and labels,
     * for a backend that makes the images itself from the dataset held in its memory
     * (backend.h: images_batch). The same draws as the float path, from the same streams. */
    bool draws_only;
    double mean[3], std[3]; /* Normalize's constants */
    uint64_t seed, rank, epoch;
    /* Optional allocator for the image and label arrays of the ring (pinned host memory for a
     * device, say); both NULL: ptc__malloc / ptc__free. alloc returns NULL on failure. */
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *p);
    void *alloc_ctx;
} ptc__loader_params;

/* Allocates the ring and starts the thread. PTC_EINVAL (bad parameters), PTC_ENOMEM, PTC_EIO
 * (the thread cannot be created). */
int ptc__loader_start(ptc__loader **out, const ptc__loader_params *p, ptc_error *err);
/* Blocks until the next batch is ready: 1 and *out, 0 at the end of the epoch (then *out is NULL),
 * or a negative code: the thread's failure (PTC_EINVAL for an index outside the split, with its
 * position), delivered after every batch before the failing one. A batch stays valid until it is
 * released or the loader stops; the thread waits for released buffers, so a consumer holds at
 * most nbuffers batches at a time. */
int ptc__loader_next(ptc__loader *l, ptc__batch **out, ptc_error *err);
void ptc__loader_release(ptc__batch *b); /* accepts NULL */
/* Stops the thread (also in the middle of an epoch), waits for it and frees everything,
 * including batches not released. Accepts NULL. */
void ptc__loader_stop(ptc__loader *l);

#endif /* PTC_DATA_DATA_H */
