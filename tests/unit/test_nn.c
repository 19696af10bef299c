/*
 * test_nn.c - lib/nn on the ref backend: the model's structure, the state dict both ways,
 * cross-entropy against its definition and finite differences, the learning-rate schedules, a
 * forward/backward/SGD step that changes what it should, and the backend-side training step (the
 * backend's xent and sgd_multi, as the cuda backend runs it) against the host one, bit for bit.
 *
 * Agreement with torchvision's names and PyTorch's numbers is tests/interop/train_golden.py's job
 * (real torch is the oracle there); this test checks what can be checked without it.
 */
#include "nn/nn.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const ptc__backend_ops *ops;
static ptc__be *be;

static ptc__model *make(ptc__arch arch, uint64_t seed)
{
    ptc__model *m = NULL;
    ptc_error err;
    ptc__model_params p = {arch, 10, ops, be, seed};
    CHECK(ptc__model_new(&m, &p, &err) == 0);
    return m;
}

/* The parameter count of ResNet-18 with 10 classes is known: 11,181,642. */
static void test_structure(void)
{
    ptc__model *m = make(PTC__ARCH_RESNET18, 1);
    int64_t params = 0, buffers = 0, counters = 0;
    for (size_t i = 0; i < ptc__model_nentries(m); i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        if (e->kind == PTC__ENTRY_PARAM)
            params += e->numel;
        else if (e->kind == PTC__ENTRY_BUFFER)
            buffers += e->numel;
        else
            counters++;
    }
    CHECK(params == 11181642);
    CHECK(ptc__model_nparams(m) == 62);
    CHECK(counters == 20);      /* 20 BatchNorm2d layers */
    CHECK(buffers == 2 * 4800); /* running mean and var: 2 x (sum of BN widths) */
    CHECK(ptc__model_nentries(m) == 62 + 40 + 20);
    /* The first entries and the last, in torchvision's order. */
    CHECK(strcmp(ptc__model_entry(m, 0)->name, "conv1.weight") == 0);
    CHECK(strcmp(ptc__model_entry(m, 1)->name, "bn1.weight") == 0);
    CHECK(strcmp(ptc__model_entry(m, 5)->name, "bn1.num_batches_tracked") == 0);
    CHECK(strcmp(ptc__model_entry(m, 6)->name, "layer1.0.conv1.weight") == 0);
    CHECK(strcmp(ptc__model_entry(m, ptc__model_nentries(m) - 1)->name, "fc.bias") == 0);
    ptc__entry *ds = ptc__model_find(m, "layer2.0.downsample.0.weight");
    CHECK(ds && ds->ndim == 4 && ds->shape[0] == 128 && ds->shape[1] == 64 && ds->shape[2] == 1);
    CHECK(ptc__model_find(m, "layer1.0.downsample.0.weight") == NULL);
    ptc__entry *c1 = ptc__model_find(m, "conv1.weight");
    CHECK(c1->shape[2] == 7 && c1->shape[3] == 7);
    ptc__model_free(m);
    m = make(PTC__ARCH_RESNET18_CIFAR, 1);
    c1 = ptc__model_find(m, "conv1.weight");
    CHECK(c1->shape[2] == 3 && c1->shape[3] == 3);
    ptc__model_free(m);
}

/* Initialisation: kaiming normal (fan_out) for convs, BN ones/zeros, fc uniform(+-1/sqrt(512)). */
static void test_init(void)
{
    ptc__model *m = make(PTC__ARCH_RESNET18, 7);
    ptc_error err;
    ptc__entry *w = ptc__model_find(m, "layer3.0.conv2.weight"); /* 256x256x3x3 */
    float *v = malloc((size_t)w->numel * sizeof *v);
    CHECK(ptc__model_read_entry(m, w, v, &err) == 0);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < w->numel; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
    }
    double mean = s / (double)w->numel, sd = sqrt(s2 / (double)w->numel - mean * mean);
    double want = sqrt(2.0 / (256.0 * 9.0));
    CHECK(fabs(mean) < 0.02 * want);
    CHECK(fabs(sd / want - 1.0) < 0.01);
    free(v);
    ptc__entry *fc = ptc__model_find(m, "fc.weight");
    v = malloc((size_t)fc->numel * sizeof *v);
    CHECK(ptc__model_read_entry(m, fc, v, &err) == 0);
    double bound = 1.0 / sqrt(512.0), mx = 0;
    for (int64_t i = 0; i < fc->numel; i++)
        mx = fabs(v[i]) > mx ? fabs(v[i]) : mx;
    CHECK(mx <= bound && mx > 0.95 * bound);
    free(v);
    float g[64], b[64];
    CHECK(ptc__model_read_entry(m, ptc__model_find(m, "bn1.weight"), g, &err) == 0);
    CHECK(ptc__model_read_entry(m, ptc__model_find(m, "bn1.running_var"), b, &err) == 0);
    for (int i = 0; i < 64; i++)
        CHECK(g[i] == 1.0f && b[i] == 1.0f);
    ptc__model_free(m);
}

/* Save, read back with libptc, load into a model with other initial values: identical entries. */
static void test_state_dict_roundtrip(void)
{
    ptc__model *a = make(PTC__ARCH_RESNET18, 3), *b = make(PTC__ARCH_RESNET18, 4);
    ptc_error err;
    *ptc__model_find(a, "layer4.1.bn2.num_batches_tracked")->counter = 1234;
    ptc_doc *d;
    ptc_value *sd;
    CHECK(ptc_doc_new(&d, &err) == 0);
    CHECK_CODE(ptc__model_state_dict(a, d, &sd, &err), 0, &err);
    char path[] = "/tmp/ptc-test-nn-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(ptc_save(sd, path, NULL, &err) == 0);
    ptc_doc_free(d);
    ptc_ckpt *c;
    CHECK(ptc_ckpt_open(&c, path, NULL, &err) == 0);
    const ptc_value *root = ptc_ckpt_root(c);
    CHECK(ptc_dict_is_ordered(root));
    CHECK(ptc_value_len(root) == ptc__model_nentries(a));
    const ptc_value *md = ptc_dict_get(ptc_dict_attrs(root), "_metadata");
    CHECK(md && ptc_dict_get(ptc_dict_get(md, "bn1"), "version") != NULL);
    int64_t ver = 0;
    CHECK(ptc_value_int(ptc_dict_get(ptc_dict_get(md, "layer2.0.downsample.1"), "version"), &ver) ==
              0 &&
          ver == 2);
    CHECK(ptc__model_load_state_dict(b, root, NULL, 1, &err) == 0);
    for (size_t i = 0; i < ptc__model_nentries(a); i++) {
        ptc__entry *ea = ptc__model_entry(a, i), *eb = ptc__model_entry(b, i);
        if (ea->kind == PTC__ENTRY_COUNTER) {
            CHECK(*ea->counter == *eb->counter);
            continue;
        }
        float *va = malloc((size_t)ea->numel * 4), *vb = malloc((size_t)ea->numel * 4);
        CHECK(ptc__model_read_entry(a, ea, va, &err) == 0 &&
              ptc__model_read_entry(b, eb, vb, &err) == 0);
        CHECK(memcmp(va, vb, (size_t)ea->numel * 4) == 0);
        free(va);
        free(vb);
    }
    /* strict: a missing key is an error that names it; unstrict loads the rest */
    ptc_ckpt_close(c);
    remove(path);
    ptc__model_free(a);
    ptc__model_free(b);
}

/* Cross-entropy: the definition in double, the gradient against central differences. */
static void test_cross_entropy(void)
{
    float z[3 * 4] = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 3.0f, -2.0f, 1.0f, -0.25f, 0.75f, 0.0f, 0.1f};
    int64_t y[3] = {2, 1, 0};
    float g[12];
    double loss;
    int64_t correct;
    ptc_error err;
    CHECK(ptc__cross_entropy(z, y, 3, 4, &loss, g, &correct, &err) == 0);
    double want = 0;
    for (int i = 0; i < 3; i++) {
        double s = 0;
        for (int c = 0; c < 4; c++)
            s += exp((double)z[i * 4 + c]);
        want += log(s) - z[i * 4 + y[i]];
    }
    CHECK(fabs(loss - want / 3) < 1e-12);
    CHECK(correct == 1); /* row 0 picks 2 (right); row 1: tie 0/1 -> first, 0 (wrong); row 2: 1 */
    for (int k = 0; k < 12; k++) {
        float zp[12], zm[12];
        memcpy(zp, z, sizeof z);
        memcpy(zm, z, sizeof z);
        zp[k] += 1e-3f;
        zm[k] -= 1e-3f;
        double lp, lm;
        ptc__cross_entropy(zp, y, 3, 4, &lp, NULL, NULL, &err);
        ptc__cross_entropy(zm, y, 3, 4, &lm, NULL, NULL, &err);
        double fd = (lp - lm) / ((double)zp[k] - (double)zm[k]);
        CHECK(fabs(fd - g[k]) < 1e-4);
    }
    int64_t bad[1] = {10};
    CHECK(ptc__cross_entropy(z, bad, 1, 4, &loss, NULL, NULL, &err) == PTC_EINVAL);
}

static void test_schedules(void)
{
    ptc__schedule s;
    CHECK(ptc__schedule_parse(&s, "constant", 0.1) == 0 && ptc__schedule_lr(&s, 100, 5) == 0.1);
    CHECK(ptc__schedule_parse(&s, "step:2:0.5", 0.1) == 0);
    CHECK(ptc__schedule_lr(&s, 0, 0) == 0.1 && ptc__schedule_lr(&s, 0, 1) == 0.1);
    CHECK(fabs(ptc__schedule_lr(&s, 0, 2) - 0.05) < 1e-15 &&
          fabs(ptc__schedule_lr(&s, 0, 5) - 0.025) < 1e-15);
    CHECK(ptc__schedule_parse(&s, "cosine:10", 0.2) == 0);
    s.total = 110;
    CHECK(fabs(ptc__schedule_lr(&s, 0, 0) - 0.02) < 1e-15); /* warm-up: (0 + 1) / 10 */
    CHECK(fabs(ptc__schedule_lr(&s, 9, 0) - 0.2) < 1e-15);
    CHECK(fabs(ptc__schedule_lr(&s, 10, 0) - 0.2) < 1e-15); /* cosine starts at the top */
    CHECK(fabs(ptc__schedule_lr(&s, 60, 0) - 0.1) < 1e-12); /* half way */
    CHECK(fabs(ptc__schedule_lr(&s, 110, 0)) < 1e-15);
    CHECK(ptc__schedule_parse(&s, "linear", 0.1) < 0 &&
          ptc__schedule_parse(&s, "step:0:1", 0.1) < 0);
    CHECK(ptc__lr_scale(0.1, PTC__LR_LINEAR, 4) == 0.4 &&
          ptc__lr_scale(0.1, PTC__LR_SQRT, 4) == 0.2);
}

/* One training step on random data: the loss decreases after a few steps on the same batch,
 * num_batches_tracked counts forwards, eval does not touch running statistics. */
static void test_step(void)
{
    ptc__model *m = make(PTC__ARCH_RESNET18_CIFAR, 5);
    ptc_error err;
    enum { N = 4 };
    float *x = malloc((size_t)N * 3 * 32 * 32 * sizeof *x), logits[N * 10], dl[N * 10];
    int64_t y[N] = {1, 3, 5, 7};
    uint64_t r = 42;
    for (int i = 0; i < N * 3 * 32 * 32; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(r >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
    ptc__sgd_params sp = {0.05, 0.9, 0, 5e-4, 0};
    double first = 0, loss = 0;
    float rv0[64], rv1[64];
    CHECK(ptc__model_read_entry(m, ptc__model_find(m, "bn1.running_var"), rv0, &err) == 0);
    CHECK(ptc__model_forward(m, x, N, 0, logits, &err) == 0);
    CHECK(ptc__model_read_entry(m, ptc__model_find(m, "bn1.running_var"), rv1, &err) == 0);
    CHECK(memcmp(rv0, rv1, sizeof rv0) == 0);
    CHECK(ptc__model_backward(m, dl, &err) == PTC_EINVAL); /* no training forward yet */
    for (int s = 0; s < 5; s++) {
        CHECK(ptc__model_forward(m, x, N, 1, logits, &err) == 0);
        CHECK(ptc__cross_entropy(logits, y, N, 10, &loss, dl, NULL, &err) == 0);
        if (s == 0)
            first = loss;
        CHECK(ptc__model_backward(m, dl, &err) == 0);
        CHECK(ptc__model_sgd_step(m, &sp, sp.lr, s, &err) == 0);
    }
    CHECK(loss < first);
    CHECK(*ptc__model_find(m, "bn1.num_batches_tracked")->counter == 5);
    float mom[64];
    CHECK(ptc__model_read_momentum(m, ptc__model_find(m, "bn1.weight"), mom, &err) == 0);
    CHECK(ptc__model_read_momentum(m, ptc__model_find(m, "bn1.running_mean"), mom, &err) < 0);
    printf("test_step: loss %.4f -> %.4f over 5 steps on one batch\n", first, loss);
    free(x);
    ptc__model_free(m);
}

/* Every tensor of two models (values, gradients, momentum buffers) and the counters: the same
 * bits. */
static void same_model_bits(ptc__model *a, ptc__model *b, const char *when)
{
    ptc_error err;
    size_t bad = 0, n = ptc__model_nentries(a);
    for (size_t i = 0; i < n; i++) {
        ptc__entry *ea = ptc__model_entry(a, i), *eb = ptc__model_entry(b, i);
        if (ea->kind == PTC__ENTRY_COUNTER) {
            CHECK(*ea->counter == *eb->counter);
            continue;
        }
        float *va = malloc((size_t)ea->numel * sizeof *va),
              *vb = malloc((size_t)ea->numel * sizeof *vb);
        CHECK(va && vb);
        if (!va || !vb)
            exit(99);
        for (int what = 0; what < 3; what++) {
            const char *wn = what == 0 ? "value" : what == 1 ? "grad" : "momentum";
            int ra, rb;
            if (what == 0) {
                ra = ptc__model_read_entry(a, ea, va, &err);
                rb = ptc__model_read_entry(b, eb, vb, &err);
            } else if (ea->kind != PTC__ENTRY_PARAM) {
                continue;
            } else if (what == 1) {
                ra = ptc__model_read_grad(a, ea, va, &err);
                rb = ptc__model_read_grad(b, eb, vb, &err);
            } else {
                ra = ptc__model_read_momentum(a, ea, va, &err);
                rb = ptc__model_read_momentum(b, eb, vb, &err);
            }
            CHECK(ra == rb);
            if (ra != 0 || rb != 0)
                continue;
            check_count++;
            if (memcmp(va, vb, (size_t)ea->numel * sizeof *va) != 0) {
                check_failures++;
                for (int64_t k = 0; k < ea->numel; k++)
                    if (memcmp(&va[k], &vb[k], sizeof *va) != 0) {
                        if (bad++ < 10)
                            fprintf(stderr,
                                    "%s: %s %s [%lld]: host path %.9g != backend path %.9g\n", when,
                                    ea->name, wn, (long long)k, (double)va[k], (double)vb[k]);
                        break;
                    }
            }
        }
        free(va);
        free(vb);
    }
}

/* The backend-side step (ptc__model_loss on the backend's xent, backward from the gradient left
 * there, SGD through sgd_multi; the loss read after the step, as the trainer reads it) against
 * the host step (logits read, ptc__cross_entropy, dlogits written, sgd_step per parameter) on
 * ref: losses, correct counts, parameters, gradients, momentum and running statistics must be
 * the same bits after every step. One momentum buffer exists before the first step (as after a
 * partial resume), so that sgd_multi gets both first-step and later-step parameters. */
static void test_backend_step(void)
{
    ptc__backend_ops host_ops = *ops; /* ref without its optional loss and optimizer ops */
    host_ops.xent = NULL;
    host_ops.xent_result = NULL;
    host_ops.sgd_multi = NULL;
    CHECK(ops->xent && ops->xent_result && ops->sgd_multi);
    ptc_error err;
    ptc__be *be2 = NULL;
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 1};
    CHECK(ops->open(&be2, &bp, &err) == 0);
    ptc__model *a = NULL, *b = NULL;
    ptc__model_params pa = {PTC__ARCH_RESNET18_CIFAR, 10, &host_ops, be, 11};
    ptc__model_params pb = {PTC__ARCH_RESNET18_CIFAR, 10, ops, be2, 11};
    CHECK(ptc__model_new(&a, &pa, &err) == 0 && ptc__model_new(&b, &pb, &err) == 0);
    if (!a || !b)
        exit(99);
    CHECK(!ptc__model_has_device_loss(a) && ptc__model_has_device_loss(b));
    enum { N = 3, STEPS = 3 };
    float *x = malloc((size_t)N * 3 * 32 * 32 * sizeof *x), logits[N * 10], dl[N * 10];
    CHECK(x != NULL);
    if (!x)
        exit(99);
    const int64_t labels[STEPS][N] = {{1, 3, 5}, {9, 0, 3}, {2, 2, 7}};
    float fcb_mom[10];
    for (int c = 0; c < 10; c++)
        fcb_mom[c] = 0.01f * (float)(c - 4);
    CHECK(ptc__model_write_momentum(a, ptc__model_find(a, "fc.bias"), fcb_mom, &err) == 0);
    CHECK(ptc__model_write_momentum(b, ptc__model_find(b, "fc.bias"), fcb_mom, &err) == 0);
    /* the errors of the backend path */
    CHECK(ptc__model_backward(b, NULL, &err) == PTC_EINVAL); /* no training forward */
    CHECK(ptc__model_loss(a, labels[0], &err) == PTC_EINVAL);
    ptc__sgd_params sp = {0.02, 0.9, 0.1, 5e-4, 1};
    uint64_t r = 7;
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N * 3 * 32 * 32; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(r >> 11) * 0x1p-53 * 4.0 - 2.0);
        }
        double la = 0, lb = -1;
        int64_t ca = -1, cb = -2;
        CHECK(ptc__model_forward(a, x, N, 1, logits, &err) == 0);
        if (s == 0) /* the host model's backend has no xent */
            CHECK(ptc__model_loss(a, labels[s], &err) == PTC_EUNSUPPORTED);
        CHECK(ptc__cross_entropy(logits, labels[s], N, 10, &la, dl, &ca, &err) == 0);
        CHECK(ptc__model_backward(a, dl, &err) == 0);
        CHECK(ptc__model_sgd_step(a, &sp, sp.lr, s, &err) == 0);
        CHECK(ptc__model_forward(b, x, N, 1, NULL, &err) == 0);
        if (s == 0) {
            CHECK(ptc__model_backward(b, NULL, &err) == PTC_EINVAL); /* no loss taken yet */
            int64_t bad_label[N] = {1, 10, 2};
            CHECK(ptc__model_loss(b, bad_label, &err) == PTC_EINVAL);
            CHECK(strstr(err.message, "label 10 of sample 1 is not a class") != NULL);
        }
        CHECK(ptc__model_loss(b, labels[s], &err) == 0);
        CHECK(ptc__model_backward(b, NULL, &err) == 0);
        CHECK(ptc__model_sgd_step(b, &sp, sp.lr, s, &err) == 0);
        CHECK(ptc__model_loss_result(b, &lb, &cb, &err) == 0);
        check_count++;
        if (memcmp(&la, &lb, sizeof la) != 0 || ca != cb) {
            check_failures++;
            fprintf(stderr,
                    "step %d: host loss %.17g (%lld correct) != backend loss %.17g (%lld)\n", s, la,
                    (long long)ca, lb, (long long)cb);
        }
        char when[32];
        snprintf(when, sizeof when, "after step %d", s);
        same_model_bits(a, b, when);
        printf("test_backend_step: step %d loss %.17g (%lld correct) on both paths\n", s, lb,
               (long long)cb);
    }
    free(x);
    ptc__model_free(a);
    ptc__model_free(b);
    ops->close(be2);
}

int main(void)
{
    ptc_error err;
    ops = ptc__backend_find("ref");
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 1};
    if (!ops || ops->open(&be, &bp, &err) < 0) {
        printf("cannot open the ref backend\n");
        return 99;
    }
    test_structure();
    test_init();
    test_state_dict_roundtrip();
    test_cross_entropy();
    test_schedules();
    test_step();
    test_backend_step();
    ops->close(be);
    return check_exit("test_nn");
}
