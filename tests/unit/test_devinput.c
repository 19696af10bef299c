/*
 * test_devinput.c - the device-input path (backend.h: images_upload / images_batch) held to the
 * host path, bit for bit, on the ref backend, so that CI checks without a GPU everything but the
 * cuda backend's own copy of it (tests/gpu/cuda_layers.c holds cuda's images_batch to ref's):
 *   1. ref's images_batch against ptc__augment_image for every crop window and both flips, in
 *      float32 and float64, and its refusals (an index or a window out of range);
 *   2. the loader's draws_only batches against its float batches: the same samples, labels and
 *      draws, and images_batch of the draws gives the float batch's bits;
 *   3. the model: three training steps and an evaluation fed through ptc__model_input +
 *      images_batch + ptc__model_forward_filled against ptc__model_forward of the float images
 *      (logits, loss and every parameter the same bits);
 *   4. the trainer: ptc__train_ex on a small CIFAR-10 written here, device input against host
 *      input (the losses, the test accuracy and loss, and the saved state dict and checkpoint
 *      files byte for byte).
 */
#include "train/train.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIX PTC__DATA_PIXELS

static const ptc__backend_ops *ops = &ptc__backend_ref;

/* A deterministic byte stream (no libc rand: the same bytes everywhere). */
static uint8_t next_byte(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint8_t)(*s >> 56);
}

static void fill_split(ptc__split *sp, int64_t n, uint64_t seed)
{
    sp->n = n;
    sp->images = malloc((size_t)n * PIX);
    sp->labels = malloc((size_t)n);
    for (int64_t i = 0; i < n * PIX; i++)
        sp->images[i] = next_byte(&seed);
    for (int64_t i = 0; i < n; i++)
        sp->labels[i] = (uint8_t)(next_byte(&seed) % PTC__DATA_CLASSES);
}

static void free_split(ptc__split *sp)
{
    free(sp->images);
    free(sp->labels);
}

/* Elements of a and b (n floats) whose bits differ; the first one printed with both values. */
static int64_t diff_bits(const char *what, const float *a, const float *b, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && bad++ == 0)
            fprintf(stderr, "%s: element %lld: %.9g != %.9g\n", what, (long long)i, a[i], b[i]);
    }
    if (bad)
        fprintf(stderr, "%s: %lld of %lld elements differ\n", what, (long long)bad, (long long)n);
    return bad;
}

/* ---- 1. ref's images_batch against ptc__augment_image ---------------------------------------- */

static void test_ref_images_batch(ptc__dtype_be dtype)
{
    enum { COUNT = 5, N = 9 * 9 * 2 };
    ptc__split sp;
    fill_split(&sp, COUNT, 11);
    const double mean[3] = PTC__CIFAR10_MEAN, stdv[3] = PTC__CIFAR10_STD;
    ptc__normalizer nz;
    ptc__normalizer_init(&nz, mean, stdv);
    ptc__be_params bp = {.dtype = dtype, .threads = 2};
    ptc__be *be = NULL;
    ptc_error err;
    CHECK_INT(ops->open(&be, &bp, &err), 0);
    ptc__bimg *im = NULL;
    CHECK_INT(ops->images_upload(be, &im, sp.images, sp.n, &err), 0);
    /* one sample per window and flip, the images taken in turn */
    int32_t idx[N];
    int8_t top[N], left[N];
    uint8_t flip[N];
    for (int i = 0; i < N; i++) {
        idx[i] = i % COUNT;
        top[i] = (int8_t)(i / 18);
        left[i] = (int8_t)(i / 2 % 9);
        flip[i] = (uint8_t)(i % 2);
    }
    ptc__bt *x = NULL;
    const int dims[4] = {N, 3, 32, 32};
    CHECK_INT(ops->tensor_new(be, &x, PTC__ROLE_ACT, dims, &err), 0);
    /* the host copy may go once uploaded */
    uint8_t *kept = malloc((size_t)COUNT * PIX);
    memcpy(kept, sp.images, (size_t)COUNT * PIX);
    memset(sp.images, 0xAB, (size_t)COUNT * PIX);
    CHECK_INT(ops->images_batch(be, im, idx, top, left, flip, N, &nz.lut[0][0], x, &err), 0);
    size_t esz = (size_t)dtype;
    void *got = malloc((size_t)N * PIX * esz);
    float *want = malloc((size_t)N * PIX * sizeof *want), *gotf = malloc((size_t)N * PIX * 4);
    CHECK_INT(ops->tensor_read(be, x, got, &err), 0);
    for (int i = 0; i < N; i++)
        ptc__augment_image(&nz, kept + (size_t)idx[i] * PIX, top[i], left[i], flip[i] != 0,
                           want + (size_t)i * PIX);
    int64_t widened_bad = 0;
    for (int64_t j = 0; j < (int64_t)N * PIX; j++) {
        if (dtype == PTC__BE_F32) {
            gotf[j] = ((float *)got)[j];
        } else {
            double v = ((double *)got)[j];
            gotf[j] = (float)v;
            widened_bad += v != (double)want[j]; /* exactly the float widened */
        }
    }
    char what[64];
    snprintf(what, sizeof what, "ref images_batch (%s) vs ptc__augment_image",
             dtype == PTC__BE_F32 ? "float32" : "float64");
    CHECK_INT(diff_bits(what, gotf, want, (int64_t)N * PIX), 0);
    CHECK_INT(widened_bad, 0);
    printf("%s: %d windows x flips, every element bit for bit\n", what, N);

    /* refusals: nothing read outside the dataset, no window outside the padded image */
    int32_t bad_idx[1] = {COUNT};
    int8_t zero[1] = {0}, nine[1] = {9};
    uint8_t f0[1] = {0};
    ptc__bt *x1 = NULL;
    const int d1[4] = {1, 3, 32, 32};
    CHECK_INT(ops->tensor_new(be, &x1, PTC__ROLE_ACT, d1, &err), 0);
    CHECK_CODE(ops->images_batch(be, im, bad_idx, zero, zero, f0, 1, &nz.lut[0][0], x1, &err),
               PTC_EINVAL, &err);
    int32_t ok_idx[1] = {0};
    CHECK_CODE(ops->images_batch(be, im, ok_idx, nine, zero, f0, 1, &nz.lut[0][0], x1, &err),
               PTC_EINVAL, &err);
    CHECK_CODE(ops->images_batch(be, im, ok_idx, zero, zero, f0, 1, &nz.lut[0][0], x, &err),
               PTC_EINVAL, &err); /* x is [N][3][32][32], not [1] */
    CHECK_INT(ops->images_batch(be, im, ok_idx, zero, zero, f0, 1, &nz.lut[0][0], x1, &err), 0);

    ops->tensor_free(be, x1);
    ops->tensor_free(be, x);
    ops->images_free(be, im);
    ops->images_free(be, NULL);
    ops->close(be);
    free(got);
    free(gotf);
    free(want);
    free(kept);
    free_split(&sp);
}

/* ---- 2. the loader's draws against its float batches ---------------------------------------- */

static void test_loader_draws(void)
{
    enum { COUNT = 37, B = 8 };
    ptc__split sp;
    fill_split(&sp, COUNT, 23);
    ptc__sampler_params spp = {COUNT, 2, 1, true, false, 5};
    int64_t *idx = NULL, n = 0;
    ptc_error err;
    CHECK_INT(ptc__sampler_indices(&spp, 3, &idx, &n, &err), 0);
    ptc__be *be = NULL;
    CHECK_INT(ops->open(&be, NULL, &err), 0);
    ptc__bimg *im = NULL;
    CHECK_INT(ops->images_upload(be, &im, sp.images, sp.n, &err), 0);
    ptc__bt *x = NULL;
    float *got = malloc((size_t)B * PIX * sizeof *got);
    int64_t batches = 0, samples = 0;
    for (int augment = 0; augment < 2; augment++) {
        ptc__loader_params lp = {.split = &sp,
                                 .indices = idx,
                                 .nindices = n,
                                 .batch_size = B,
                                 .nbuffers = 2,
                                 .augment = augment != 0,
                                 .mean = PTC__CIFAR10_MEAN,
                                 .std = PTC__CIFAR10_STD,
                                 .seed = 5,
                                 .rank = 1,
                                 .epoch = 3};
        ptc__normalizer nz;
        ptc__normalizer_init(&nz, lp.mean, lp.std);
        ptc__loader *lf = NULL, *ld = NULL;
        CHECK_INT(ptc__loader_start(&lf, &lp, &err), 0);
        lp.draws_only = true;
        CHECK_INT(ptc__loader_start(&ld, &lp, &err), 0);
        ptc__batch *bf, *bd;
        int rf, rd;
        while ((rf = ptc__loader_next(lf, &bf, &err)) > 0) {
            rd = ptc__loader_next(ld, &bd, &err);
            CHECK_INT(rd, 1);
            if (rd != 1)
                break;
            CHECK(bd->images == NULL);
            CHECK_INT(bd->n, bf->n);
            CHECK_INT(bd->first, bf->first);
            for (int i = 0; i < bf->n; i++) {
                CHECK_INT(bd->labels[i], bf->labels[i]);
                CHECK_INT(bd->sample[i], bf->indices[i]);
                int t = 4, l = 4;
                bool f = false;
                if (augment)
                    ptc__augment_draw(5, 1, 3, bf->indices[i], &t, &l, &f);
                CHECK_INT(bd->top[i], t);
                CHECK_INT(bd->left[i], l);
                CHECK_INT(bd->flip[i], f);
            }
            const int dims[4] = {bd->n, 3, 32, 32};
            ops->tensor_free(be, x);
            x = NULL;
            CHECK_INT(ops->tensor_new(be, &x, PTC__ROLE_ACT, dims, &err), 0);
            CHECK_INT(ops->images_batch(be, im, bd->sample, bd->top, bd->left, bd->flip, bd->n,
                                        &nz.lut[0][0], x, &err),
                      0);
            CHECK_INT(ops->tensor_read(be, x, got, &err), 0);
            CHECK_INT(diff_bits("images_batch of the loader's draws vs its float batch", got,
                                bf->images, (int64_t)bf->n * PIX),
                      0);
            batches++;
            samples += bf->n;
            ptc__loader_release(bf);
            ptc__loader_release(bd);
        }
        CHECK_INT(rf, 0);
        CHECK_INT(ptc__loader_next(ld, &bd, &err), 0); /* both end together */
        ptc__loader_stop(lf);
        ptc__loader_stop(ld);
    }
    printf("loader: %lld batches (%lld samples, with and without augmentation): draws_only gives "
           "the float batches' samples, labels, draws and, through images_batch, their bits\n",
           (long long)batches, (long long)samples);
    ops->tensor_free(be, x);
    ops->images_free(be, im);
    ops->close(be);
    free(got);
    ptc__free(idx);
    free_split(&sp);
}

/* ---- 3. the model: forward of filled input against forward of float images ------------------ */

static void read_params(ptc__model *m, float *out)
{
    ptc_error err;
    for (size_t i = 0; i < ptc__model_nentries(m); i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        if (e->kind == PTC__ENTRY_COUNTER)
            continue;
        CHECK_INT(ptc__model_read_entry(m, e, out, &err), 0);
        out += e->numel;
    }
}

static void test_model(void)
{
    enum { COUNT = 12, B = 5, STEPS = 3, C = PTC__DATA_CLASSES };
    ptc__split sp;
    fill_split(&sp, COUNT, 31);
    ptc_error err;
    ptc__be *be[2] = {NULL, NULL};
    ptc__model *m[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 2};
        CHECK_INT(ops->open(&be[k], &bp, &err), 0);
        ptc__model_params mp = {PTC__ARCH_RESNET18, C, ops, be[k], 9};
        CHECK_INT(ptc__model_new(&m[k], &mp, &err), 0);
    }
    if (!m[0] || !m[1])
        return;
    ptc__bimg *im = NULL;
    CHECK_INT(ops->images_upload(be[1], &im, sp.images, sp.n, &err), 0);
    const double mean[3] = PTC__CIFAR10_MEAN, stdv[3] = PTC__CIFAR10_STD;
    ptc__normalizer nz;
    ptc__normalizer_init(&nz, mean, stdv);
    ptc__sgd_params sgd = {0.05, 0.9, 0, 5e-4, 0};
    float *images = malloc((size_t)B * PIX * sizeof *images);
    float logits[2][B * C], dlogits[2][B * C];
    int64_t labels[B];
    int32_t idx[B];
    int8_t top[B], left[B];
    uint8_t flip[B];
    uint64_t s = 77;
    int64_t bad = 0;
    for (int step = 0; step <= STEPS; step++) {
        int train = step < STEPS; /* the last round evaluates */
        for (int i = 0; i < B; i++) {
            idx[i] = (int32_t)(next_byte(&s) % COUNT);
            top[i] = train ? (int8_t)(next_byte(&s) % 9) : 4;
            left[i] = train ? (int8_t)(next_byte(&s) % 9) : 4;
            flip[i] = train ? next_byte(&s) & 1 : 0;
            labels[i] = sp.labels[idx[i]];
            ptc__augment_image(&nz, sp.images + (size_t)idx[i] * PIX, top[i], left[i], flip[i] != 0,
                               images + (size_t)i * PIX);
        }
        double loss[2];
        CHECK_INT(ptc__model_forward(m[0], images, B, train, logits[0], &err), 0);
        ptc__bt *x = NULL;
        CHECK_INT(ptc__model_input(m[1], B, &x, &err), 0);
        CHECK_INT(ops->images_batch(be[1], im, idx, top, left, flip, B, &nz.lut[0][0], x, &err), 0);
        CHECK_INT(ptc__model_forward_filled(m[1], B, train, logits[1], &err), 0);
        for (int k = 0; k < 2; k++) {
            CHECK_INT(ptc__cross_entropy(logits[k], labels, B, C, &loss[k], dlogits[k], NULL, &err),
                      0);
            if (!train)
                continue;
            CHECK_INT(ptc__model_backward(m[k], dlogits[k], &err), 0);
            CHECK_INT(ptc__model_sgd_step(m[k], &sgd, sgd.lr, step, &err), 0);
        }
        bad += diff_bits("logits: filled input vs float images", logits[1], logits[0], B * C);
        if (memcmp(&loss[0], &loss[1], sizeof loss[0]) != 0) {
            bad++;
            fprintf(stderr, "step %d: loss %.17g (filled) != %.17g (float images)\n", step, loss[1],
                    loss[0]);
        }
    }
    CHECK_INT(bad, 0);
    int64_t total = 0;
    for (size_t i = 0; i < ptc__model_nentries(m[0]); i++) {
        ptc__entry *e0 = ptc__model_entry(m[0], i), *e1 = ptc__model_entry(m[1], i);
        if (e0->kind == PTC__ENTRY_COUNTER)
            CHECK_INT(*e0->counter, *e1->counter);
        else
            total += e0->numel;
    }
    float *p0 = malloc((size_t)total * sizeof *p0), *p1 = malloc((size_t)total * sizeof *p1);
    read_params(m[0], p0);
    read_params(m[1], p1);
    CHECK_INT(diff_bits("parameters and buffers after the steps", p1, p0, total), 0);
    printf("model: %d training steps and an evaluation through images_batch: logits, loss and "
           "%lld parameter and buffer values bit for bit as through float images\n",
           STEPS, (long long)total);
    free(p0);
    free(p1);
    free(images);
    ops->images_free(be[1], im);
    for (int k = 0; k < 2; k++) {
        ptc__model_free(m[k]);
        ops->close(be[k]);
    }
    free_split(&sp);
}

/* ---- 4. the trainer ------------------------------------------------------------------------- */

static int write_cifar(const char *path, int64_t n, uint64_t seed)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        fputc(next_byte(&seed) % PTC__DATA_CLASSES, f);
        for (int j = 0; j < PIX; j++)
            fputc(next_byte(&seed), f);
    }
    return fclose(f);
}

static unsigned char *slurp(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size + 1);
    if (b && fread(b, 1, (size_t)*size, f) != (size_t)*size) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void check_same_file(const char *a, const char *b)
{
    long na = -1, nb = -1;
    unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb);
    CHECK(ba && bb);
    if (ba && bb) {
        long first = -1;
        for (long i = 0; i < na && i < nb && first < 0; i++)
            if (ba[i] != bb[i])
                first = i;
        if (na != nb || first >= 0)
            fprintf(stderr, "%s (%ld bytes) and %s (%ld bytes) differ (first at byte %ld)\n", a, na,
                    b, nb, first);
        CHECK(na == nb && first < 0);
    }
    free(ba);
    free(bb);
}

static void test_trainer(void)
{
    char dir[] = "/tmp/ptc-devinput-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    /* the same file names in two directories: a .pth archive's folder is named after its file */
    char path[6][600], sub[2][512];
    snprintf(sub[0], sizeof sub[0], "%s/dev", dir);
    snprintf(sub[1], sizeof sub[1], "%s/host", dir);
    CHECK_INT(mkdir(sub[0], 0700), 0);
    CHECK_INT(mkdir(sub[1], 0700), 0);
    snprintf(path[0], sizeof path[0], "%s/data_batch_1.bin", dir);
    snprintf(path[1], sizeof path[1], "%s/test_batch.bin", dir);
    for (int k = 0; k < 2; k++) {
        snprintf(path[2 + k], sizeof path[2 + k], "%s/model.pth", sub[k]);
        snprintf(path[4 + k], sizeof path[4 + k], "%s/train.ckpt", sub[k]);
    }
    CHECK_INT(write_cifar(path[0], 20, 41), 0);
    CHECK_INT(write_cifar(path[1], 12, 43), 0);
    ptc_train_result res[2];
    for (int host = 0; host < 2; host++) {
        ptc_train_params p;
        ptc_train_params_default(&p);
        p.dataset = "cifar10";
        p.data_dir = dir;
        p.backend = "ref";
        p.threads = 2;
        p.epochs = 2;
        p.batch_size = 8; /* 8, 8, 4: two batch sizes */
        p.eval_every = 1;
        p.lr = 0.01;
        p.seed = 3;
        p.save = path[2 + host];
        p.checkpoint = path[4 + host];
        ptc_error err;
        int rc = ptc__train_ex(&p, host, &res[host], &err);
        if (rc != 0)
            fprintf(stderr, "ptc__train_ex (host_input %d): %s\n", host, err.message);
        CHECK_INT(rc, 0);
    }
    CHECK_INT(res[0].steps, 6);
    CHECK_INT(res[0].steps, res[1].steps);
    CHECK_INT(res[0].epochs_done, res[1].epochs_done);
    const double *a[3] = {&res[0].last_loss, &res[0].test_accuracy, &res[0].test_loss};
    const double *b[3] = {&res[1].last_loss, &res[1].test_accuracy, &res[1].test_loss};
    const char *what[3] = {"last loss", "test accuracy", "test loss"};
    for (int i = 0; i < 3; i++) {
        if (memcmp(a[i], b[i], sizeof(double)) != 0)
            fprintf(stderr, "trainer: %s %.17g (device input) != %.17g (host input)\n", what[i],
                    *a[i], *b[i]);
        CHECK(memcmp(a[i], b[i], sizeof(double)) == 0);
    }
    check_same_file(path[2], path[3]);
    check_same_file(path[4], path[5]);
    printf("trainer: %lld steps over 2 epochs with evaluations, device input vs host input on "
           "ref: loss %.9g, test accuracy %.4f, test loss %.9g, state dict and checkpoint files "
           "byte for byte\n",
           (long long)res[0].steps, res[0].last_loss, res[0].test_accuracy, res[0].test_loss);
    for (int i = 0; i < 6; i++)
        unlink(path[i]);
    rmdir(sub[0]);
    rmdir(sub[1]);
    rmdir(dir);
}

int main(void)
{
    test_ref_images_batch(PTC__BE_F32);
    test_ref_images_batch(PTC__BE_F64);
    test_loader_draws();
    test_model();
    test_trainer();
    return check_exit("test_devinput");
}
