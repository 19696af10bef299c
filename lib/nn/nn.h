/*
 * nn.h - torchvision's ResNet-18 on a backend: its modules, names and parameter order, PyTorch's
 * initialisation, forward and backward, cross-entropy, SGD and learning-rate schedules, and the
 * state dict in both directions.
 *
 * Names are torchvision's (DESIGN.md decision 6): the state dict of a model built here has exactly
 * the keys, order, shapes and dtypes of torchvision.models.resnet18(num_classes=N).state_dict()
 * (float32 parameters and running statistics, int64 num_batches_tracked), so each loads into the
 * other with strict keys. Two architectures: "resnet18" (torchvision's: 7x7 stride-2 stem and a
 * 3x3 stride-2 max pool) and "resnet18-cifar" (a 3x3 stride-1 stem and no max pool, the usual
 * CIFAR variant; the same names and shapes except conv1.weight, 64x3x3x3).
 *
 * The model holds its parameters, gradients and buffers in backend tensors; activations are made
 * per input shape (n, h, w) on first use and kept, the least recently used of four replaced (a
 * training run sees at most four: the batch and the last, shorter one, and evaluation's two);
 * gradient tensors only once a training forward ran at that shape. Inputs are any h, w >= 32
 * (the network ends with a global average pool, as torchvision's adaptive one to 1x1); ptc train
 * uses 32x32. Host arrays cross the boundary only as plain float32: images [n][3][h][w] in (or
 * made in the backend's memory at 32x32: ptc__model_input), logits [n][classes] out, state dicts
 * both ways.
 *
 * Numerics are PyTorch's (decision 5): see lib/backend/backend.h for each layer; cross-entropy is
 * the mean over the batch of -log softmax, computed in double from float32 logits; SGD is
 * torch.optim.SGD's.
 */
#ifndef PTC_NN_NN_H
#define PTC_NN_NN_H

#include "backend/backend.h"

typedef enum ptc__arch { PTC__ARCH_RESNET18, PTC__ARCH_RESNET18_CIFAR } ptc__arch;
/* "resnet18", "resnet18-cifar" -> arch; -1 when unknown. */
int ptc__arch_from_name(const char *name);
const char *ptc__arch_name(ptc__arch a);

typedef struct ptc__model ptc__model;

typedef struct ptc__model_params {
    ptc__arch arch;
    int num_classes;             /* 10 */
    const ptc__backend_ops *ops; /* the backend */
    ptc__be *be;                 /* its instance (float32), borrowed */
    uint64_t seed;               /* for the initialisation */
} ptc__model_params;

/* One entry of the state dict, in torchvision's order. */
typedef enum ptc__entry_kind {
    PTC__ENTRY_PARAM,  /* a parameter: has a gradient and an optimizer state */
    PTC__ENTRY_BUFFER, /* running_mean / running_var */
    PTC__ENTRY_COUNTER /* num_batches_tracked (int64, kept on the host) */
} ptc__entry_kind;

typedef struct ptc__entry {
    const char *name; /* "layer1.0.conv1.weight" */
    ptc__entry_kind kind;
    int ndim;
    int64_t shape[4];
    int64_t numel;
    ptc__bt *value;    /* NULL for a counter */
    ptc__bt *grad;     /* parameters only */
    ptc__bt *momentum; /* parameters only; made by the first SGD step with momentum */
    int64_t *counter;  /* counters only */
    /* Parameters only: requires_grad is off (ptc_model_freeze). The SGD step leaves it alone
     * entirely (no weight decay, no momentum: torch skips a parameter whose grad is None), and
     * backward stops early once every parameter it has yet to reach is frozen (its gradient is
     * then stale). BatchNorm's running statistics are buffers: a training forward updates them
     * whatever is frozen, as torch does. 0 when made. */
    int frozen;
} ptc__entry;

int ptc__model_new(ptc__model **out, const ptc__model_params *p, ptc_error *err);
/* What ptc train records of how it presented its images: ptc__model_state_dict writes it, once
 * set, into the state dict's _metadata["ptc.preprocess"] (whose layout lib/ptc/ptc.h gives, at
 * ptc_model_params_from_state_dict). dataset: "cifar10" or "fashion-mnist" (28x28 grey images
 * padded by 2 pixels and replicated to 3 channels); mean, std: its Normalize; the input is 32x32.
 * ptc__model_preprocess gives it back: 1 when set, 0 when not. */
void ptc__model_set_preprocess(ptc__model *m, const char *dataset, const double mean[3],
                               const double std[3]);
int ptc__model_preprocess(const ptc__model *m, const char **dataset, double mean[3], double std[3]);

void ptc__model_free(ptc__model *m); /* accepts NULL */

size_t ptc__model_nentries(const ptc__model *m);
ptc__entry *ptc__model_entry(ptc__model *m, size_t i);
/* The entry by name; NULL when absent. */
ptc__entry *ptc__model_find(ptc__model *m, const char *name);
size_t ptc__model_nparams(const ptc__model *m); /* entries of kind PARAM: 62 for ResNet-18 */

/* An entry's values as plain float32 (shape order), in or out. Not for counters. */
int ptc__model_write_entry(ptc__model *m, ptc__entry *e, const float *values, ptc_error *err);
int ptc__model_read_entry(ptc__model *m, const ptc__entry *e, float *values, ptc_error *err);
/* A parameter's gradient as plain float32. */
int ptc__model_read_grad(ptc__model *m, const ptc__entry *e, float *values, ptc_error *err);
/* A parameter's momentum buffer in or out (write creates it); reading one that does not exist
 * is PTC_ENOTFOUND. */
int ptc__model_read_momentum(ptc__model *m, const ptc__entry *e, float *values, ptc_error *err);
int ptc__model_write_momentum(ptc__model *m, ptc__entry *e, const float *values, ptc_error *err);

/* Sets the entries from a state dict read by libptc as torch's load_state_dict does (any float
 * dtype is converted to float32; num_batches_tracked any int dtype). strip_prefix (NULL: none)
 * is removed from the keys that carry it first, as torch's consume_prefix_in_state_dict_if_present
 * ("module." for DDP checkpoints). strict: missing and unexpected keys are errors, as
 * load_state_dict(strict=True); otherwise they are skipped. Shapes must match, and every value
 * be a tensor. On any error nothing is written, and err's message is torch's RuntimeError text. */
int ptc__model_load_state_dict(ptc__model *m, const ptc_value *root, const char *strip_prefix,
                               int strict, ptc_error *err);

/* Keys found by a load, escaped (owned). */
typedef struct ptc__keylist {
    char **keys;
    size_t n, cap;
} ptc__keylist;

/* What a load found: keys[0] torch's missing_keys, keys[1] its unexpected_keys (both in torch's
 * order), keys[2] the entries whose tensor had another shape; text: what torch prints (the
 * result's repr, or the RuntimeError's text), owned. */
typedef struct ptc__load_report {
    ptc__keylist keys[3];
    char *text;
} ptc__load_report;
void ptc__load_report_free(ptc__load_report *r); /* frees the contents; the struct is zeroed */

/* ptc__model_load_state_dict with its report (rep may be NULL) and, with skip_mismatched,
 * entries of another shape left as they are (listed in keys[2]) instead of being errors. */
int ptc__model_load_state_dict_ex(ptc__model *m, const ptc_value *root, const char *strip_prefix,
                                  int strict, int skip_mismatched, ptc__load_report *rep,
                                  ptc_error *err);
/* The state dict as an OrderedDict in d, with torchvision's _metadata (version 1 per module, as
 * nn.Module.state_dict writes it). The tensors own copies of the current values. */
int ptc__model_state_dict(ptc__model *m, ptc_doc *d, ptc_value **out, ptc_error *err);

/* Forward of n images ([n][3][32][32] float32, normalised; ptc__model_forward_hw below for other
 * sizes). train: batch statistics (and running
 * statistics updated, num_batches_tracked incremented) and activations kept for backward; else
 * running statistics. logits: [n][num_classes] out, or NULL to leave them on the backend (a
 * training step whose loss ptc__model_loss computes there: the host does not wait). */
int ptc__model_forward(ptc__model *m, const float *images, int n, int train, float *logits,
                       ptc_error *err);
/* The same forward from the model's input tensor as the caller filled it, without tensor_write:
 * ptc__model_input gives the ACT [n][3][32][32] tensor of batch size n (made on first use), a
 * backend's images_batch fills it, ptc__model_forward_filled runs on it. Between the two calls
 * no other batch size may be used. */
int ptc__model_input(ptc__model *m, int n, ptc__bt **x, ptc_error *err);
int ptc__model_forward_filled(ptc__model *m, int n, int train, float *logits, ptc_error *err);
/* The same for any input size h x w (h, w >= 32; ptc__model_forward is h = w = 32): images are
 * [n][3][h][w]. Activations are made per (n, h, w) on first use and kept: training alternates
 * two batch sizes at one image size; a model used at many sizes keeps the most recent few. The
 * final map (h/32 x w/32 for resnet18, h/4 x w/4 for resnet18-cifar, rounded as the convolutions
 * round) is averaged to 1x1 as nn.AdaptiveAvgPool2d((1, 1)) does. */
int ptc__model_forward_hw(ptc__model *m, const float *images, int n, int h, int w, int train,
                          float *logits, ptc_error *err);
/* Whether an input of n x 3 x h x w is one the model can run (h, w >= 32 and every activation
 * below 2^31 elements); 0 or PTC_EINVAL with fn named in the message. */
int ptc__model_check_size(const ptc__model *m, const char *fn, int n, int h, int w, ptc_error *err);
/* The number of classes (fc's outputs) and the architecture. */
int ptc__model_classes(const ptc__model *m);
ptc__arch ptc__model_arch(const ptc__model *m);
/* A new head: fc.weight [classes][512] and fc.bias [classes] are made anew (values zero, no
 * gradient or momentum history) and the activation sets dropped; the entries keep their places,
 * so entry indices and pointers stay valid. The caller initialises the values. */
int ptc__model_set_classes(ptc__model *m, int classes, ptc_error *err);
/* Backward of the last training forward, from dlogits [n][num_classes], or with dlogits NULL from
 * the gradient that ptc__model_loss left on the backend: every parameter's gradient is written
 * (not accumulated). Without a gradient hook, backward stops at the first module below which
 * every parameter is frozen (their gradients are then not written); with a hook every gradient
 * is made, frozen or not. */
int ptc__model_backward(ptc__model *m, const float *dlogits, ptc_error *err);

/* The loss on the backend (its optional xent op; see backend.h). has_device_loss: whether the
 * backend has it. ptc__model_loss: the mean cross-entropy of the last training forward's logits
 * against labels (host array, n of them, copied), with ptc__cross_entropy's arithmetic, its
 * gradient kept on the backend for ptc__model_backward(m, NULL); a device backend only queues
 * it. ptc__model_loss_result: the loss and correct count of the latest ptc__model_loss, waiting
 * for that computation only (call it before the next ptc__model_loss, which replaces them). */
int ptc__model_has_device_loss(const ptc__model *m);
int ptc__model_loss(ptc__model *m, const int64_t *labels, ptc_error *err);
int ptc__model_loss_result(ptc__model *m, double *loss, int64_t *correct, ptc_error *err);

/* Called by backward as soon as a parameter's gradient is final, once per parameter, in the
 * order backward produces them (roughly the reverse of the parameter order); a negative return
 * stops backward with that code. The hook lets the DDP reducer start an all-reduce while the rest
 * of backward runs. fn NULL removes it. */
typedef int (*ptc__grad_hook)(void *ctx, ptc__entry *e, ptc_error *err);
void ptc__model_set_grad_hook(ptc__model *m, ptc__grad_hook fn, void *ctx);
/* The backend the model lives on (borrowed). */
const ptc__backend_ops *ptc__model_ops(const ptc__model *m);
ptc__be *ptc__model_be(const ptc__model *m);

/* Synchronised batch normalization (SyncBatchNorm): with a sync callback set, every training
 * forward normalises with the statistics of all ranks' batches together, and backward uses the
 * global sums (lib/nn/syncbn.c). sync sums n doubles in place over the ranks (an all-reduce);
 * NULL returns to per-rank statistics. Evaluation is unchanged (running statistics). */
typedef int (*ptc__bn_sync)(void *ctx, double *buf, size_t n, ptc_error *err);
void ptc__model_set_bn_sync(ptc__model *m, ptc__bn_sync fn, void *ctx);

/* ---- synchronised batchnorm, for resnet.c (syncbn.c) ---- */
typedef struct ptc__syncbn_scratch {
    float *f[3];
    size_t fcap;
    double *d;
    size_t dcap;
} ptc__syncbn_scratch;
void ptc__syncbn_scratch_free(ptc__syncbn_scratch *s);

typedef struct ptc__syncbn_ctx {
    const ptc__backend_ops *ops;
    ptc__be *be;
    ptc__bn_sync sync;
    void *sync_ctx;
    double eps, momentum;
    ptc__syncbn_scratch *scratch;
} ptc__syncbn_ctx;

/* One layer's tensors: forward reads x, gamma, beta and writes y, save_mean, save_invstd and the
 * running statistics; backward reads x, y (NULL unless relu was fused), dy, gamma, save_mean,
 * save_invstd and writes dx, dgamma, dbeta. */
typedef struct ptc__syncbn_layer {
    const ptc__bt *x, *gamma, *beta, *dy;
    ptc__bt *y, *save_mean, *save_invstd, *running_mean, *running_var, *dx, *dgamma, *dbeta;
    int relu;
} ptc__syncbn_layer;
int ptc__syncbn_forward(const ptc__syncbn_ctx *k, const ptc__syncbn_layer *l, ptc_error *err);
int ptc__syncbn_backward(const ptc__syncbn_ctx *k, const ptc__syncbn_layer *l, ptc_error *err);

/* Mean cross-entropy of logits against labels, and its gradient (softmax - one_hot) / n in
 * dlogits (may be NULL). correct: number of rows whose first maximum is the label (may be NULL).
 * A label outside [0, classes) is PTC_EINVAL. */
int ptc__cross_entropy(const float *logits, const int64_t *labels, int n, int classes, double *loss,
                       float *dlogits, int64_t *correct, ptc_error *err);

/* ---- SGD and learning rates ------------------------------------------------------------------ */

typedef struct ptc__sgd_params {
    double lr, momentum, dampening, weight_decay;
    int nesterov;
} ptc__sgd_params;

/* One torch.optim.SGD step over every parameter that is not frozen with the learning rate lr
 * (frozen ones keep their values and momentum buffers untouched); step counts the
 * optimizer steps taken before this one (momentum buffers are created on step 0, or when a
 * parameter has none yet, as torch does). Through the backend's sgd_multi when it has one (one
 * launch on a device), else sgd_step per parameter: the same bits. */
int ptc__model_sgd_step(ptc__model *m, const ptc__sgd_params *p, double lr, int64_t step,
                        ptc_error *err);

typedef enum ptc__schedule_kind {
    PTC__SCHED_CONSTANT,
    PTC__SCHED_STEP,
    PTC__SCHED_COSINE
} ptc__schedule_kind;

typedef struct ptc__schedule {
    ptc__schedule_kind kind;
    double base_lr;
    int64_t step_size; /* step: every step_size epochs the rate is multiplied by gamma */
    double gamma;
    int64_t warmup; /* cosine: linear warmup over this many optimizer steps from 0 */
    int64_t total;  /* cosine: total optimizer steps (the rate reaches 0 at total) */
} ptc__schedule;

/* The learning rate for optimizer step `step` (0-based) in epoch `epoch` (0-based). */
double ptc__schedule_lr(const ptc__schedule *s, int64_t step, int64_t epoch);
/* "constant", "step:S:G" (S epochs, factor G), "cosine" or "cosine:W" (W warmup steps); -1 when
 * the text is not one of these. total is set later by the trainer. */
int ptc__schedule_parse(ptc__schedule *s, const char *text, double base_lr);

/* --lr-scaling: the rate for a global batch world x batch, from the rate for one process. */
typedef enum ptc__lr_scaling { PTC__LR_NONE, PTC__LR_SQRT, PTC__LR_LINEAR } ptc__lr_scaling;
double ptc__lr_scale(double lr, ptc__lr_scaling s, int world);

#endif /* PTC_NN_NN_H */
