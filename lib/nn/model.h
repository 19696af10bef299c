/*
 * model.h - the public ptc_model (lib/ptc/ptc.h "Models") over the internal network (nn.h).
 *
 * The handle is split over three files that share this struct: model.c (params, new/free, load,
 * forward, state dict), finetune.c (reset_head, freeze, SGD, train_step) and classify.c (resize,
 * normalise, top-k). Invariants: net, ops and be are set for the life of the handle; which
 * parameters are frozen is net's (ptc__entry.frozen, so that its SGD step and backward see it);
 * params.num_classes is the head's current size; the strings of params point into the handle's
 * own arrays. The model holds no optimizer state: a ptc_sgd owns its momentum buffers
 * (finetune.c).
 */
#ifndef PTC_NN_MODEL_H
#define PTC_NN_MODEL_H

#include "nn/nn.h"

struct ptc_model {
    ptc_model_params params; /* the caller's, completed: backend is the one chosen */
    char arch_name[32], backend_name[16], precision_name[16];
    ptc__arch arch;
    ptc__model *net;
    const ptc__backend_ops *ops;
    ptc__be *be;           /* owned: closed by ptc_model_free */
    float *scratch;        /* host buffer for inputs or logits made by the library, grown on need */
    size_t scratch_n;      /* floats in scratch */
    ptc__load_report load; /* the latest ptc_model_load's keys (ptc_load_keys order) and text */
    /* classify.c: lut[c][v], the normalised float of byte v in channel c, made on first use from
     * params.mean and params.std (fixed for the life of the handle), so that a call on one image
     * does not recompute it. */
    float lut[3][256];
    int lut_ready;
};

/* The checks every entry point makes of a caller's input size (h, w >= 32, n >= 1, sizes whose
 * activations fit): 0 or PTC_EINVAL naming fn. */
int ptc__model_check_input(const ptc_model *m, const char *fn, int n, int h, int w, ptc_error *err);
/* A host scratch buffer of at least n floats, owned by the model (valid until the next call that
 * uses it); NULL and PTC_ENOMEM in err when it cannot grow. */
float *ptc__model_scratch(ptc_model *m, size_t n, ptc_error *err);

#endif /* PTC_NN_MODEL_H */
