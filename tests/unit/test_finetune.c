/*
 * test_finetune.c - the fine-tuning calls of ptc.h's "Models" (lib/nn/finetune.c) and ptc_train's
 * callback source (lib/data/callback.c), on the ref backend:
 *
 *   1. reset_head: refusals, torch's numbers for torch.manual_seed(7); nn.Linear(512, 5)
 *      (bit patterns taken from torch 2.6; tests/interop/check_finetune.py compares every value),
 *      only the low 32 bits of the seed count, as in torch.manual_seed.
 *   2. freeze and SGD: refusals; a step with fc alone trainable leaves every other parameter's
 *      bits (weight decay on) but updates BatchNorm's running statistics; a bad label or an
 *      optimizer of another model is refused before anything changes; momentum belongs to the
 *      optimizer (a new one starts without it, as torch's).
 *   3. the callback source: ptc_train over a source holding the images of a CIFAR-10 file (HWC)
 *      with the tutorial's constants writes the same state dict, byte for byte, as ptc_train over
 *      the file; refusals (size field, image size, label, get's own error with its index);
 *      12 classes.
 */
#include "nn/model.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static ptc_model *new_model(int classes, uint64_t seed)
{
    ptc_model_params p;
    ptc_model_params_default(&p);
    p.backend = "ref";
    p.threads = 2;
    p.num_classes = classes;
    p.seed = seed;
    ptc_model *m = NULL;
    ptc_error err;
    int rc = ptc_model_new(&m, &p, &err);
    if (rc < 0)
        fprintf(stderr, "ptc_model_new: %s\n", err.message);
    CHECK_INT(rc, 0);
    return m;
}

/* Every entry's values (counters as float) concatenated, in entry order. */
static float *snapshot(ptc_model *m, size_t *total)
{
    size_t n = 0;
    for (size_t i = 0; i < ptc__model_nentries(m->net); i++) {
        const ptc__entry *e = ptc__model_entry(m->net, i);
        n += e->counter ? 1 : (size_t)e->numel;
    }
    float *v = malloc(n * sizeof *v), *p = v;
    for (size_t i = 0; i < ptc__model_nentries(m->net); i++) {
        ptc__entry *e = ptc__model_entry(m->net, i);
        if (e->counter)
            *p++ = (float)*e->counter;
        else if (ptc__model_read_entry(m->net, e, p, NULL) == 0)
            p += e->numel;
    }
    *total = n;
    return v;
}

/* How many values of entries whose name starts (or, want 0, does not start) with prefix and
 * contains leaf (NULL: any) differ between two snapshots; with want 0 each such entry is named. */
static long ndiff(ptc_model *m, const float *a, const float *b, const char *prefix, int want,
                  const char *leaf)
{
    long d = 0;
    size_t off = 0;
    for (size_t i = 0; i < ptc__model_nentries(m->net); i++) {
        const ptc__entry *e = ptc__model_entry(m->net, i);
        size_t n = e->counter ? 1 : (size_t)e->numel;
        int match = strncmp(e->name, prefix, strlen(prefix)) == 0;
        long before = d;
        if (match == want && (!leaf || strstr(e->name, leaf)))
            for (size_t j = 0; j < n; j++)
                d += memcmp(&a[off + j], &b[off + j], sizeof(float)) != 0;
        if (d > before && want == 0)
            fprintf(stderr, "  %s: %ld values differ\n", e->name, d - before);
        off += n;
    }
    return d;
}

static void batch(float *x, int64_t *labels, int n, int h, int w, int classes, unsigned seed)
{
    srand(seed);
    for (long i = 0; i < (long)n * 3 * h * w; i++)
        x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    for (int i = 0; i < n; i++)
        labels[i] = i % classes;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- 1. reset_head ------------------------------------------------------------------------- */

static void test_reset_head(void)
{
    ptc_error err;
    CHECK_CODE(ptc_model_reset_head(NULL, 5, 7, &err), PTC_EINVAL, &err);
    ptc_model *m = new_model(10, 1);
    if (!m)
        return;
    CHECK_CODE(ptc_model_reset_head(m, 0, 7, &err), PTC_EINVAL, &err);
    CHECK_INT(ptc_model_num_classes(m), 10);
    CHECK_INT(ptc_model_reset_head(m, 5, 7, &err), 0);
    CHECK_INT(ptc_model_num_classes(m), 5);
    ptc__entry *w = ptc__model_find(m->net, "fc.weight"), *b = ptc__model_find(m->net, "fc.bias");
    CHECK_INT(w->shape[0], 5);
    CHECK_INT(w->shape[1], 512);
    CHECK_INT(b->shape[0], 5);
    float wv[5 * 512], bv[5];
    CHECK_INT(ptc__model_read_entry(m->net, w, wv, NULL), 0);
    CHECK_INT(ptc__model_read_entry(m->net, b, bv, NULL), 0);
    /* torch.manual_seed(7); l = torch.nn.Linear(512, 5): l.weight.flatten()[:3], [-1], l.bias */
    static const uint32_t want_w[4] = {0x3b4a4aff, 0xbcda16fc, 0x3c66902b, 0xbcea4077};
    static const uint32_t want_b[5] = {0xbd2c334a, 0x3cb2ec71, 0x3cc3328d, 0x3d301d7b, 0xbd20d125};
    const float got_w[4] = {wv[0], wv[1], wv[2], wv[5 * 512 - 1]};
    for (int i = 0; i < 4; i++) {
        if (bits(got_w[i]) != want_w[i])
            fprintf(stderr, "fc.weight value %d: 0x%08x, torch 0x%08x\n", i, bits(got_w[i]),
                    want_w[i]);
        CHECK_INT(bits(got_w[i]), want_w[i]);
    }
    for (int i = 0; i < 5; i++) {
        if (bits(bv[i]) != want_b[i])
            fprintf(stderr, "fc.bias[%d]: 0x%08x, torch 0x%08x\n", i, bits(bv[i]), want_b[i]);
        CHECK_INT(bits(bv[i]), want_b[i]);
    }
    /* torch.manual_seed keeps the low 32 bits: 2^40 + 7 is 7. */
    float wv2[5 * 512];
    CHECK_INT(ptc_model_reset_head(m, 5, ((uint64_t)1 << 40) + 7, &err), 0);
    CHECK_INT(ptc__model_read_entry(m->net, ptc__model_find(m->net, "fc.weight"), wv2, NULL), 0);
    CHECK(memcmp(wv, wv2, sizeof wv) == 0);
    /* the new head is trainable even when fc was frozen */
    CHECK_INT(ptc_model_freeze(m, "fc", 1, &err), 0);
    CHECK_INT(ptc_model_reset_head(m, 3, 7, &err), 0);
    CHECK_INT(ptc__model_find(m->net, "fc.weight")->frozen, 0);
    CHECK_INT(ptc__model_find(m->net, "fc.bias")->frozen, 0);
    /* the forward gives the new width */
    float x[2 * 3 * 32 * 32], logits[2 * 3];
    int64_t labels[2];
    batch(x, labels, 2, 32, 32, 3, 1);
    CHECK_INT(ptc_model_forward(m, x, 2, 32, 32, logits, &err), 0);
    printf("reset_head: refusals, torch's bits for manual_seed(7) Linear(512, 5), seed low 32 "
           "bits, new head trainable\n");
    ptc_model_free(m);
}

/* ---- 2. freeze and SGD --------------------------------------------------------------------- */

enum { N = 4, H = 32, W = 40, C = 4 };

static void test_freeze_sgd(void)
{
    ptc_error err;
    ptc_model *m = new_model(C, 2), *other = new_model(C, 3);
    if (!m || !other)
        return;
    ptc_sgd *opt = NULL, *oo = NULL;
    /* torch.optim.SGD's refusals */
    CHECK_CODE(ptc_sgd_new(NULL, m, 0.1, 0, 0, 0, 0, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sgd_new(&opt, NULL, 0.1, 0, 0, 0, 0, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sgd_new(&opt, m, -0.1, 0, 0, 0, 0, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "Invalid learning rate") != NULL);
    CHECK_CODE(ptc_sgd_new(&opt, m, NAN, 0, 0, 0, 0, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sgd_new(&opt, m, 0.1, -0.9, 0, 0, 0, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sgd_new(&opt, m, 0.1, 0.9, 0, -1e-4, 0, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_sgd_new(&opt, m, 0.1, 0, 0, 0, 1, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "Nesterov momentum requires a momentum and zero dampening") != NULL);
    CHECK_CODE(ptc_sgd_new(&opt, m, 0.1, 0.9, 0.5, 0, 1, &err), PTC_EINVAL, &err);
    CHECK(opt == NULL);
    CHECK_INT(ptc_sgd_new(&opt, m, 0.05, 0.9, 0, 5e-4, 0, &err), 0);
    CHECK_INT(ptc_sgd_new(&oo, other, 0.05, 0.9, 0, 5e-4, 0, &err), 0);
    CHECK_CODE(ptc_sgd_set_lr(opt, -1, &err), PTC_EINVAL, &err);
    ptc_sgd_free(NULL);

    /* freeze's refusals */
    CHECK_CODE(ptc_model_freeze(NULL, "", 1, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_freeze(m, NULL, 1, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_freeze(m, "layer5", 1, &err), PTC_ENOTFOUND, &err);
    CHECK_CODE(ptc_model_freeze(m, "bn1.running_mean", 1, &err), PTC_ENOTFOUND, &err);

    static float x[N * 3 * H * W];
    int64_t labels[N];
    batch(x, labels, N, H, W, C, 5);
    size_t total;
    float *s0 = snapshot(m, &total);
    double loss = -1;
    /* everything frozen: torch's backward would raise */
    CHECK_INT(ptc_model_freeze(m, "", 1, &err), 0);
    CHECK_CODE(ptc_model_train_step(m, opt, x, labels, N, H, W, &loss, &err), PTC_EINVAL, &err);
    CHECK_INT(ptc_model_freeze(m, "fc", 0, &err), 0);
    /* refusals before anything changes */
    CHECK_CODE(ptc_model_train_step(m, oo, x, labels, N, H, W, &loss, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_train_step(m, opt, x, labels, N, 31, W, &loss, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_train_step(m, opt, NULL, labels, N, H, W, &loss, &err), PTC_EINVAL, &err);
    int64_t bad[N] = {0, 1, C, 2};
    CHECK_CODE(ptc_model_train_step(m, opt, x, bad, N, H, W, &loss, &err), PTC_EINVAL, &err);
    size_t t1;
    float *s1 = snapshot(m, &t1);
    CHECK_INT(ndiff(m, s0, s1, "", 1, NULL), 0);
    free(s1);

    /* fc alone trainable: only fc changes among the parameters; the running statistics move */
    CHECK_INT(ptc_model_train_step(m, opt, x, labels, N, H, W, &loss, &err), 0);
    CHECK(loss > 0 && isfinite(loss));
    CHECK_INT(ptc_model_train_step(m, opt, x, labels, N, H, W, &loss, &err), 0);
    s1 = snapshot(m, &t1);
    long fc_changed = ndiff(m, s0, s1, "fc", 1, NULL);
    long frozen_w = ndiff(m, s0, s1, "fc", 0, ".weight") + ndiff(m, s0, s1, "fc", 0, ".bias");
    long running = ndiff(m, s0, s1, "layer3", 1, "running_mean");
    long tracked = ndiff(m, s0, s1, "", 1, "num_batches_tracked");
    printf("fc only, 2 steps: %ld fc values changed, %ld frozen weight/bias values changed, %ld "
           "layer3 running_mean values changed, %ld num_batches_tracked changed\n",
           fc_changed, frozen_w, running, tracked);
    CHECK(fc_changed == C * 512 + C);
    CHECK_INT(frozen_w, 0);
    CHECK(running > 0);
    CHECK_INT(tracked, 20);
    CHECK_INT(*ptc__model_find(m->net, "bn1.num_batches_tracked")->counter, 2);
    ptc_sgd_free(oo);
    free(s0);
    free(s1);

    /* Momentum belongs to the optimizer. From one state, with fc and layer4 trainable:
     * a: one optimizer, two steps; b: a step, the optimizer freed, a new one's first step;
     * c: a step with one optimizer, then a step with a second one made after it. b and c both
     * restart momentum, so they agree with each other and differ from a. */
    CHECK_INT(ptc_model_freeze(m, "layer4", 0, &err), 0);
    ptc_model *mm[3] = {new_model(C, 9), new_model(C, 9), new_model(C, 9)};
    float *after[3];
    for (int k = 0; k < 3; k++) {
        ptc_model_freeze(mm[k], "", 1, NULL);
        ptc_model_freeze(mm[k], "layer4", 0, NULL);
        ptc_model_freeze(mm[k], "fc", 0, NULL);
        ptc_sgd *o1 = NULL, *o2 = NULL;
        CHECK_INT(ptc_sgd_new(&o1, mm[k], 0.05, 0.9, 0, 5e-4, 0, &err), 0);
        CHECK_INT(ptc_model_train_step(mm[k], o1, x, labels, N, H, W, NULL, &err), 0);
        if (k == 1) {
            ptc_sgd_free(o1);
            o1 = NULL;
        }
        if (k > 0)
            CHECK_INT(ptc_sgd_new(&o2, mm[k], 0.05, 0.9, 0, 5e-4, 0, &err), 0);
        CHECK_INT(ptc_model_train_step(mm[k], k ? o2 : o1, x, labels, N, H, W, NULL, &err), 0);
        after[k] = snapshot(mm[k], &t1);
        ptc_sgd_free(o2);
        ptc_sgd_free(o1);
    }
    long ab = ndiff(mm[0], after[0], after[1], "", 1, NULL);
    long bc = ndiff(mm[0], after[1], after[2], "", 1, NULL);
    long l3 = ndiff(mm[0], after[0], after[1], "layer3", 1, "conv");
    printf("momentum: one optimizer vs a new one for step 2: %ld values differ; freed-and-new vs "
           "second optimizer: %ld differ; frozen layer3 convolutions: %ld differ\n",
           ab, bc, l3);
    CHECK(ab > 0);
    CHECK_INT(bc, 0);
    CHECK_INT(l3, 0);
    for (int k = 0; k < 3; k++) {
        free(after[k]);
        ptc_model_free(mm[k]);
    }
    ptc_sgd_free(opt);
    ptc_model_free(m);
    ptc_model_free(other);
}

/* ---- 3. the callback source ---------------------------------------------------------------- */

enum { PIX = 3 * 32 * 32 };

typedef struct images {
    int64_t n;
    const uint8_t *chw; /* [n][3][32][32] */
    const uint8_t *labels;
    int64_t fail_at; /* get fails at this index (-1: never) */
    int64_t bad_label_at;
    int64_t calls;
} images;

static int get(void *ctx, int64_t i, uint8_t *hwc, int64_t *label, ptc_error *err)
{
    images *im = ctx;
    im->calls++;
    if (i == im->fail_at) {
        snprintf(err->message, sizeof err->message, "the camera is unplugged");
        err->code = PTC_EIO;
        return PTC_EIO;
    }
    const uint8_t *src = im->chw + i * PIX;
    for (int p = 0; p < 32 * 32; p++)
        for (int c = 0; c < 3; c++)
            hwc[p * 3 + c] = src[c * 32 * 32 + p];
    *label = i == im->bad_label_at ? 99 : im->labels[i];
    return 0;
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void train_params(ptc_train_params *p, const char *save)
{
    ptc_train_params_default(p);
    p->backend = "ref";
    p->threads = 2;
    p->epochs = 1;
    p->batch_size = 8;
    p->eval_every = 1;
    p->seed = 3;
    p->save = save;
}

static void test_source(void)
{
    char dir[] = "/tmp/ptc-finetune-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    enum { NTRAIN = 20, NTEST = 12 };
    static uint8_t chw[NTRAIN + NTEST][PIX], lab[NTRAIN + NTEST];
    uint64_t s = 11;
    for (int i = 0; i < NTRAIN + NTEST; i++) {
        lab[i] = (uint8_t)(lcg(&s) % 10);
        for (int j = 0; j < PIX; j++)
            chw[i][j] = (uint8_t)lcg(&s);
    }
    char path[5][600];
    snprintf(path[0], sizeof path[0], "%s/data_batch_1.bin", dir);
    snprintf(path[1], sizeof path[1], "%s/test_batch.bin", dir);
    snprintf(path[2], sizeof path[2], "%s/file", dir);
    snprintf(path[3], sizeof path[3], "%s/source", dir);
    CHECK_INT(mkdir(path[2], 0700), 0);
    CHECK_INT(mkdir(path[3], 0700), 0);
    char save[2][700];
    snprintf(save[0], sizeof save[0], "%s/model.pth", path[2]);
    snprintf(save[1], sizeof save[1], "%s/model.pth", path[3]);
    for (int f = 0; f < 2; f++) {
        FILE *fp = fopen(path[f], "wb");
        for (int i = f ? NTRAIN : 0; i < (f ? NTRAIN + NTEST : NTRAIN); i++) {
            fputc(lab[i], fp);
            fwrite(chw[i], 1, PIX, fp);
        }
        fclose(fp);
    }
    ptc_train_params p;
    ptc_train_result res[2];
    ptc_error err;
    train_params(&p, save[0]);
    p.dataset = "cifar10";
    p.data_dir = dir;
    int rc = ptc_train(&p, &res[0], &err);
    if (rc < 0)
        fprintf(stderr, "ptc_train (file): %s\n", err.message);
    CHECK_INT(rc, 0);

    images tr = {NTRAIN, chw[0], lab, -1, -1, 0};
    images te = {NTEST, chw[NTRAIN], lab + NTRAIN, -1, -1, 0};
    ptc_source src_train, src_test;
    ptc_source_default(&src_train);
    src_train.count = NTRAIN;
    src_train.get = get;
    src_train.ctx = &tr;
    src_test = src_train;
    src_test.count = NTEST;
    src_test.ctx = &te;
    train_params(&p, save[1]);
    p.train_source = &src_train;
    p.test_source = &src_test;
    static const double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2023, 0.1994, 0.2010};
    memcpy(p.source_mean, mean, sizeof mean);
    memcpy(p.source_std, std, sizeof std);
    rc = ptc_train(&p, &res[1], &err);
    if (rc < 0)
        fprintf(stderr, "ptc_train (source): %s\n", err.message);
    CHECK_INT(rc, 0);
    CHECK_INT(tr.calls, NTRAIN);
    CHECK_INT(te.calls, NTEST);
    CHECK(memcmp(&res[0].last_loss, &res[1].last_loss, sizeof(double)) == 0);
    CHECK(memcmp(&res[0].test_loss, &res[1].test_loss, sizeof(double)) == 0);
    /* The same tensors bit for bit; the recorded preprocessing names the data ("cifar10" for
     * the file, "source" for the caller's images), the one difference the files may have. */
    int same = 0, ntensors = 0;
    char ds[2][16] = {"(none)", "(none)"}; /* copies: the names live in the checkpoints */
    ptc_ckpt *ck[2] = {NULL, NULL};
    if (ptc_ckpt_open(&ck[0], save[0], NULL, &err) == 0 &&
        ptc_ckpt_open(&ck[1], save[1], NULL, &err) == 0) {
        for (int k = 0; k < 2; k++) {
            const ptc_value *md = ptc_dict_attrs(ptc_ckpt_root(ck[k]));
            const ptc_value *rec =
                md ? ptc_dict_get(ptc_dict_get(md, "_metadata"), "ptc.preprocess") : NULL;
            const char *name;
            size_t len;
            if (rec && ptc_value_str(ptc_dict_get(rec, "dataset"), &name, &len) == 0)
                snprintf(ds[k], sizeof ds[k], "%s", name);
        }
        ptc_walk *wa = NULL, *wb = NULL;
        const char *pa, *pb;
        const ptc_tensor *ta, *tb;
        same = ptc_walk_new(&wa, ptc_ckpt_root(ck[0]), &err) == 0 &&
               ptc_walk_new(&wb, ptc_ckpt_root(ck[1]), &err) == 0;
        for (;;) {
            int ra = same ? ptc_walk_next(wa, &pa, &ta) : 0;
            int rb = same ? ptc_walk_next(wb, &pb, &tb) : 0;
            if (ra <= 0 || rb <= 0) {
                same = same && ra == 0 && rb == 0;
                break;
            }
            uint8_t ha[32], hb[32];
            ntensors++;
            if (strcmp(pa, pb) != 0 || ptc_tensor_sha256(ta, ha, &err) < 0 ||
                ptc_tensor_sha256(tb, hb, &err) < 0 || memcmp(ha, hb, 32) != 0 ||
                ptc_tensor_dtype(ta) != ptc_tensor_dtype(tb) ||
                ptc_tensor_ndim(ta) != ptc_tensor_ndim(tb)) {
                same = 0;
                break;
            }
        }
        ptc_walk_free(wa);
        ptc_walk_free(wb);
    }
    ptc_ckpt_close(ck[0]);
    ptc_ckpt_close(ck[1]);
    CHECK(same && ntensors == 122);
    CHECK(strcmp(ds[0], "cifar10") == 0);
    CHECK(strcmp(ds[1], "source") == 0);
    printf("source: ptc_train over a callback source and over the same CIFAR-10 file: loss %.9g "
           "and %.9g, test loss %.9g and %.9g, %d tensors %s, recorded datasets %s and %s\n",
           res[0].last_loss, res[1].last_loss, res[0].test_loss, res[1].test_loss, ntensors,
           same ? "identical" : "DIFFERENT", ds[0], ds[1]);

    /* refusals */
    p.save = NULL;
    ptc_source bad = src_train;
    p.train_source = &bad;
    bad.size = 0;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "size 0") != NULL);
    bad.size = sizeof bad + 8;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EINVAL, &err);
    bad = src_train;
    bad.h = 28;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EUNSUPPORTED, &err);
    bad = src_train;
    bad.get = NULL;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EINVAL, &err);
    bad = src_train;
    tr.fail_at = 13;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EIO, &err);
    CHECK(strstr(err.message, "the train source, image 13: the camera is unplugged") != NULL);
    printf("source: get's error: %s\n", err.message);
    tr.fail_at = -1;
    tr.bad_label_at = 4;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "image 4: label 99") != NULL);
    p.num_classes = 100; /* 99 is a class now */
    p.test_source = NULL;
    p.eval_every = 0;
    CHECK_INT(rc = ptc_train(&p, &res[1], &err), 0);
    if (rc < 0)
        fprintf(stderr, "ptc_train (100 classes): %s\n", err.message);
    p.num_classes = 12;
    p.train_source = NULL;
    p.dataset = "cifar10";
    p.data_dir = dir;
    CHECK_CODE(ptc_train(&p, &res[1], &err), PTC_EINVAL, &err);
    for (int i = 0; i < 2; i++)
        unlink(save[i]);
    for (int i = 0; i < 2; i++)
        unlink(path[i]);
    rmdir(path[2]);
    rmdir(path[3]);
    rmdir(dir);
}

int main(void)
{
    test_reset_head();
    test_freeze_sgd();
    test_source();
    return check_exit("test_finetune");
}
