/*
 * train_step.c - one forward/backward of ptc's ResNet-18 on the first images of a CIFAR-10 folder,
 * written to a checkpoint for tests/interop/train_golden.py to compare with PyTorch.
 *
 *   train_step BACKEND INIT.pth DATA_DIR N OUT.pth [ARCH]
 *
 * Loads the state dict INIT.pth (written by torch) into ptc's model on BACKEND (ref or dnnl),
 * takes the first N training images of DATA_DIR in file order, normalised with the tutorial's
 * constants and not augmented, and writes OUT.pth holding:
 *   eval_logits   [N][10] float32, the model in eval mode (running statistics)
 *   train_logits  [N][10] float32, then in training mode (batch statistics)
 *   loss          the mean cross-entropy of train_logits against the labels (float)
 *   grads         an OrderedDict of every parameter's gradient after that backward
 *   state         the state dict after the training forward (running statistics updated,
 *                 num_batches_tracked 1)
 * Exit 0, or 1 with a message.
 */
#include "data/data.h"
#include "nn/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const ptc_error *err)
{
    fprintf(stderr, "train_step: %s: %s\n", what, err ? err->message : "");
    return 1;
}

static ptc_value *float_tensor(ptc_doc *d, const float *v, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    ptc_storage *s = ptc_doc_storage(d, PTC_FLOAT32, n * 4, v, 1, NULL);
    return s ? ptc_doc_tensor(d, s, PTC_FLOAT32, ndim, shape, NULL, 0, 0) : NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: train_step BACKEND INIT.pth DATA_DIR N OUT.pth [ARCH]\n");
        return 2;
    }
    const char *backend = argv[1], *init = argv[2], *dir = argv[3], *out = argv[5];
    int n = atoi(argv[4]);
    int arch = ptc__arch_from_name(argc > 6 ? argv[6] : "resnet18");
    ptc_error err;
    const ptc__backend_ops *ops = ptc__backend_find(backend);
    if (!ops || n < 1 || arch < 0)
        return fail("unknown backend or architecture, or N < 1", NULL);
    ptc__be *be;
    ptc__be_params bp = {.dtype = PTC__BE_F32, .threads = 0};
    if (ops->open(&be, &bp, &err) < 0)
        return fail("backend", &err);
    ptc__data_params dp = ptc__data_params_default();
    dp.format = PTC__DATA_CIFAR10;
    dp.dir = dir;
    ptc__dataset *data;
    if (ptc__dataset_new(&data, &dp, &err) < 0)
        return fail("dataset", &err);
    if (data->train.n < n)
        return fail("fewer training images than N", NULL);

    /* The first n images, as the loader presents them without augmentation. */
    ptc__normalizer nz;
    ptc__normalizer_init(&nz, data->norm_mean, data->norm_std);
    float *images = malloc((size_t)n * PTC__DATA_PIXELS * sizeof *images);
    int64_t *labels = malloc((size_t)n * sizeof *labels);
    float *logits = malloc((size_t)n * 10 * sizeof *logits);
    float *dlogits = malloc((size_t)n * 10 * sizeof *dlogits);
    if (!images || !labels || !logits || !dlogits)
        return fail("out of memory", NULL);
    for (int i = 0; i < n; i++) {
        ptc__augment_image(&nz, data->train.images + (size_t)i * PTC__DATA_PIXELS, 4, 4, false,
                           images + (size_t)i * PTC__DATA_PIXELS);
        labels[i] = data->train.labels[i];
    }

    ptc__model *m;
    ptc__model_params mp = {(ptc__arch)arch, 10, ops, be, 0};
    if (ptc__model_new(&m, &mp, &err) < 0)
        return fail("model", &err);
    ptc_ckpt *c;
    if (ptc_ckpt_open(&c, init, NULL, &err) < 0)
        return fail(init, &err);
    if (ptc__model_load_state_dict(m, ptc_ckpt_root(c), NULL, 1, &err) < 0)
        return fail("load_state_dict", &err);
    ptc_ckpt_close(c);

    ptc_doc *d;
    if (ptc_doc_new(&d, &err) < 0)
        return fail("doc", &err);
    ptc_value *root = ptc_doc_dict(d, 0), *grads = ptc_doc_dict(d, 1);
    int64_t lshape[2] = {n, 10};
    double loss;
    if (ptc__model_forward(m, images, n, 0, logits, &err) < 0)
        return fail("eval forward", &err);
    ptc_doc_set(d, root, ptc_doc_str(d, "eval_logits", (size_t)-1),
                float_tensor(d, logits, 2, lshape));
    if (ptc__model_forward(m, images, n, 1, logits, &err) < 0)
        return fail("train forward", &err);
    ptc_doc_set(d, root, ptc_doc_str(d, "train_logits", (size_t)-1),
                float_tensor(d, logits, 2, lshape));
    if (ptc__cross_entropy(logits, labels, n, 10, &loss, dlogits, NULL, &err) < 0 ||
        ptc__model_backward(m, dlogits, &err) < 0)
        return fail("backward", &err);
    ptc_doc_set(d, root, ptc_doc_str(d, "loss", (size_t)-1), ptc_doc_float(d, loss));
    for (size_t i = 0; i < ptc__model_nentries(m); i++) {
        ptc__entry *e = ptc__model_entry(m, i);
        if (e->kind != PTC__ENTRY_PARAM)
            continue;
        float *g = malloc((size_t)e->numel * sizeof *g);
        if (!g || ptc__model_read_grad(m, e, g, &err) < 0)
            return fail("gradient", &err);
        ptc_doc_set(d, grads, ptc_doc_str(d, e->name, (size_t)-1),
                    float_tensor(d, g, e->ndim, e->shape));
        free(g);
    }
    ptc_doc_set(d, root, ptc_doc_str(d, "grads", (size_t)-1), grads);
    ptc_value *sd;
    if (ptc__model_state_dict(m, d, &sd, &err) < 0)
        return fail("state dict", &err);
    ptc_doc_set(d, root, ptc_doc_str(d, "state", (size_t)-1), sd);
    if (ptc_doc_error(d)->code)
        return fail("building the output", ptc_doc_error(d));
    if (ptc_save(root, out, NULL, &err) < 0)
        return fail(out, &err);
    ptc_doc_free(d);
    ptc__model_free(m);
    ops->close(be);
    ptc__dataset_free(data);
    free(images);
    free(labels);
    free(logits);
    free(dlogits);
    return 0;
}
