/*
 * finetune.c - embed libptc: fine-tune an ImageNet ResNet-18 on your own images, for PyTorch.
 *
 *     finetune resnet18.pth finetuned.pth [check.pth]
 *
 * resnet18.pth is torchvision's state dict (torch.save(torchvision.models.resnet18().state_dict(),
 * ...)). The program replaces its 1000-class head by one of NUM_CLASSES, trains the head alone,
 * then layer4 with it, on images it makes itself (stripes and checks, 32x32 RGB) through a
 * ptc_source, and saves what torch loads strictly into resnet18(num_classes=NUM_CLASSES). With
 * check.pth it also saves a batch of inputs and ptc's logits for them ({"x", "logits"}), which
 * tests/interop/check_finetune.py compares with torch's.
 *
 * Build against an installed libptc with
 *     cc finetune.c $(pkg-config --cflags --libs ptc) -o finetune
 */
#include <stdio.h>
#include <stdlib.h>

#include <ptc/ptc.h>

#define NUM_CLASSES 4
#define SIDE        32
#define BATCH       8
#define STEPS       6 /* per phase: fc alone, then layer4 and fc */

/* The caller's images: class i % 4 is horizontal stripes, vertical stripes, a checkerboard or
 * diagonals, in a colour and phase that vary with i. Any function of i would do. */
static int get(void *ctx, int64_t i, uint8_t *rgb, int64_t *label, ptc_error *err)
{
    (void)ctx, (void)err;
    int c = (int)(i % NUM_CLASSES), shift = (int)(i / NUM_CLASSES) % 4;
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++) {
            int on = c == 0   ? (y + shift) / 4 % 2
                     : c == 1 ? (x + shift) / 4 % 2
                     : c == 2 ? (x / 4 + y / 4 + shift) % 2
                              : (x + y + shift) / 4 % 2;
            for (int ch = 0; ch < 3; ch++)
                rgb[(y * SIDE + x) * 3 + ch] = on ? (uint8_t)(60 * (ch + 1) + 7 * i % 40) : 20;
        }
    *label = c;
    return 0;
}

/* Images first..first+BATCH-1 of the source as the normalised [BATCH][3][SIDE][SIDE] floats the
 * model takes (torchvision's ImageNet mean and std, as the weights were trained with). */
static int take(const ptc_source *s, int64_t first, float *x, int64_t *labels, ptc_error *err)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    uint8_t rgb[SIDE * SIDE * 3];
    for (int b = 0; b < BATCH; b++) {
        int rc = s->get(s->ctx, (first + b) % s->count, rgb, &labels[b], err);
        if (rc < 0)
            return rc;
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < SIDE * SIDE; p++)
                x[(b * 3 + ch) * SIDE * SIDE + p] = (rgb[p * 3 + ch] / 255.0f - mean[ch]) / std[ch];
    }
    return 0;
}

/* The batch and its logits as {"x": tensor, "logits": tensor}, for comparing with torch. */
static int save_check(const char *path, const float *x, const float *logits, ptc_error *err)
{
    ptc_doc *d;
    if (ptc_doc_new(&d, err) < 0)
        return -1;
    const int64_t xs[4] = {BATCH, 3, SIDE, SIDE}, ls[2] = {BATCH, NUM_CLASSES};
    ptc_value *root = ptc_doc_dict(d, 0);
    ptc_storage *sx = ptc_doc_storage(d, PTC_FLOAT32, BATCH * 3 * SIDE * SIDE * 4, x, 1, NULL);
    ptc_storage *sl = ptc_doc_storage(d, PTC_FLOAT32, BATCH * NUM_CLASSES * 4, logits, 1, NULL);
    int rc = root && sx && sl ? 0 : -1;
    if (rc == 0)
        rc = ptc_doc_set(d, root, ptc_doc_str(d, "x", 1),
                         ptc_doc_tensor(d, sx, PTC_FLOAT32, 4, xs, NULL, 0, 0));
    if (rc == 0)
        rc = ptc_doc_set(d, root, ptc_doc_str(d, "logits", 6),
                         ptc_doc_tensor(d, sl, PTC_FLOAT32, 2, ls, NULL, 0, 0));
    if (rc < 0)
        *err = *ptc_doc_error(d);
    else
        rc = ptc_save(root, path, NULL, err);
    ptc_doc_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s resnet18.pth finetuned.pth [check.pth]\n", argv[0]);
        return 2;
    }
    ptc_error err;
    ptc_model_params mp;
    ptc_model_params_default(&mp);
    mp.num_classes = 1000; /* the checkpoint's head, replaced below */
    ptc_model *m = NULL;
    ptc_ckpt *c = NULL;
    ptc_sgd *opt = NULL;
    ptc_doc *doc = NULL;
    ptc_value *sd;
    ptc_source src;
    ptc_source_default(&src);
    src.count = 64;
    src.get = get;
    static float x[BATCH * 3 * SIDE * SIDE], logits[BATCH * NUM_CLASSES];
    int64_t labels[BATCH];
    double loss;
    int ok = ptc_model_new(&m, &mp, &err) == 0 && ptc_ckpt_open(&c, argv[1], NULL, &err) == 0 &&
             ptc_model_load(m, ptc_ckpt_root(c), PTC_LOAD_STRICT, &err) == 0;
    ptc_ckpt_close(c); /* the model holds copies of the parameters */
    /* torch: model.fc = nn.Linear(512, 4) after torch.manual_seed(0); requires_grad_(False) on
     * everything but fc; SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4) */
    ok = ok && ptc_model_reset_head(m, NUM_CLASSES, 0, &err) == 0 &&
         ptc_model_freeze(m, "", 1, &err) == 0 && ptc_model_freeze(m, "fc", 0, &err) == 0 &&
         ptc_sgd_new(&opt, m, 0.01, 0.9, 0, 1e-4, 0, &err) == 0;
    for (int step = 0; ok && step < 2 * STEPS; step++) {
        if (step == STEPS) /* then layer4 too: the same optimizer takes it up from its first step */
            ok = ptc_model_freeze(m, "layer4", 0, &err) == 0;
        ok = ok && take(&src, (int64_t)step * BATCH, x, labels, &err) == 0 &&
             ptc_model_train_step(m, opt, x, labels, BATCH, SIDE, SIDE, &loss, &err) == 0;
        if (ok)
            printf("step %2d (%s): loss %.4f\n", step + 1, step < STEPS ? "fc" : "layer4+fc", loss);
    }
    ok = ok && take(&src, 3, x, labels, &err) == 0 &&
         ptc_model_forward(m, x, BATCH, SIDE, SIDE, logits, &err) == 0 &&
         ptc_doc_new(&doc, &err) == 0 && ptc_model_state_dict(m, doc, &sd, &err) == 0 &&
         ptc_save(sd, argv[2], NULL, &err) == 0 &&
         (argc < 4 || save_check(argv[3], x, logits, &err) == 0);
    if (ok)
        printf("saved %s: load it with torchvision.models.resnet18(num_classes=%d)\n", argv[2],
               NUM_CLASSES);
    else
        fprintf(stderr, "finetune: %s\n", err.message);
    ptc_doc_free(doc);
    ptc_sgd_free(opt); /* before its model */
    ptc_model_free(m);
    return ok ? 0 : 1;
}
