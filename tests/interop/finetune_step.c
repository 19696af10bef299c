/*
 * finetune_step.c - the C side of tests/interop/check_finetune.py: K fine-tuning steps through
 * the public model API, for comparison with torch doing the same steps.
 *
 *     finetune_step START.pth CLASSES BATCH.pth OUT.pth MODE K LR MOMENTUM DAMPENING WD NESTEROV
 *                   [HEAD_CLASSES HEAD_SEED]
 *
 * START.pth: a resnet18 state dict of CLASSES classes, loaded strictly. With HEAD_CLASSES the head
 * is then replaced (ptc_model_reset_head(HEAD_CLASSES, HEAD_SEED)). MODE: "fc" (everything frozen
 * but fc), "layer4" (layer4 and fc trainable) or "all". BATCH.pth: {"x": float32 [n][3][h][w],
 * "labels": int64 [n]}. K steps of ptc_model_train_step with one ptc_sgd(LR, MOMENTUM, DAMPENING,
 * WD, NESTEROV); prints "loss K VALUE" per step (%.17g) and saves the state dict to OUT.pth.
 * The backend is PTC_TEST_BACKEND's (default "ref", the oracle backend).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ptc/ptc.h>

static const ptc_tensor *get(const ptc_value *root, const char *key, ptc_dtype dt, int ndim)
{
    const ptc_tensor *t = ptc_value_tensor(ptc_dict_get(root, key));
    if (!t || ptc_tensor_dtype(t) != dt || ptc_tensor_ndim(t) != ndim) {
        fprintf(stderr, "finetune_step: the batch needs \"%s\" of %d dimensions\n", key, ndim);
        return NULL;
    }
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 12 && argc != 14) {
        fprintf(stderr, "usage: finetune_step START.pth CLASSES BATCH.pth OUT.pth MODE K LR "
                        "MOMENTUM DAMPENING WD NESTEROV [HEAD_CLASSES HEAD_SEED]\n");
        return 2;
    }
    ptc_error err = {0};
    ptc_model_params mp;
    ptc_model_params_default(&mp);
    mp.num_classes = atoi(argv[2]);
    mp.backend = getenv("PTC_TEST_BACKEND") ? getenv("PTC_TEST_BACKEND") : "ref";
    const char *mode = argv[5];
    int steps = atoi(argv[6]);
    ptc_model *m = NULL;
    ptc_ckpt *c = NULL, *bc = NULL;
    ptc_sgd *opt = NULL;
    ptc_doc *doc = NULL;
    ptc_value *sd;
    int ok = ptc_model_new(&m, &mp, &err) == 0 && ptc_ckpt_open(&c, argv[1], NULL, &err) == 0 &&
             ptc_model_load(m, ptc_ckpt_root(c), PTC_LOAD_STRICT, &err) == 0;
    if (ok && argc == 14)
        ok = ptc_model_reset_head(m, atoi(argv[12]), strtoull(argv[13], NULL, 10), &err) == 0;
    if (ok && strcmp(mode, "all") != 0)
        ok = ptc_model_freeze(m, "", 1, &err) == 0 && ptc_model_freeze(m, "fc", 0, &err) == 0 &&
             (strcmp(mode, "layer4") != 0 || ptc_model_freeze(m, "layer4", 0, &err) == 0);
    ok = ok && ptc_sgd_new(&opt, m, atof(argv[7]), atof(argv[8]), atof(argv[9]), atof(argv[10]),
                           atoi(argv[11]), &err) == 0;
    ok = ok && ptc_ckpt_open(&bc, argv[3], NULL, &err) == 0;
    const ptc_tensor *x = ok ? get(ptc_ckpt_root(bc), "x", PTC_FLOAT32, 4) : NULL;
    const ptc_tensor *y = ok ? get(ptc_ckpt_root(bc), "labels", PTC_INT64, 1) : NULL;
    ok = ok && x && y;
    for (int k = 0; ok && k < steps; k++) {
        const int64_t *s = ptc_tensor_shape(x);
        double loss;
        ok = ptc_model_train_step(m, opt, ptc_tensor_data(x), ptc_tensor_data(y), (int)s[0],
                                  (int)s[2], (int)s[3], &loss, &err) == 0;
        if (ok)
            printf("loss %d %.17g\n", k, loss);
    }
    ok = ok && ptc_doc_new(&doc, &err) == 0 && ptc_model_state_dict(m, doc, &sd, &err) == 0 &&
         ptc_save(sd, argv[4], NULL, &err) == 0;
    if (!ok)
        fprintf(stderr, "finetune_step: %s\n", err.message);
    ptc_doc_free(doc);
    ptc_ckpt_close(bc);
    ptc_ckpt_close(c);
    ptc_sgd_free(opt);
    ptc_model_free(m);
    return ok ? 0 : 1;
}
