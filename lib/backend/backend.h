/*
 * backend.h - where the numbers of training are computed: one table of operations per backend.
 *
 * Model code (lib/nn) never calls oneDNN, cuDNN or BLAS: it holds tensors and layer plans that a
 * backend made, and calls the backend's table. Backends:
 *   ref   plain C, always built, float32 and float64 (the oracle every other backend is tested
 *         against, and the one gradient checks run on);
 *   dnnl  oneDNN (Debian's libdnnl-dev), float32 (and bf16 precision on CPUs with bf16
 *         instructions): activations stay in oneDNN's preferred blocked layouts from layer to
 *         layer, reordered only at the edges (tensor_write / tensor_read);
 *   cuda  cuDNN + cuBLAS + kernels/ (a module, backend-cuda.so): the same table over the memory
 *         of one GPU and one stream per instance, activations channels-last (NHWC). Calls return
 *         once the work is queued; tensor_read, sync and the raw forms of host memory wait.
 *
 * Tensors. A tensor has a logical shape [n][c][h][w] (vectors are [1][c][1][1], matrices
 * [n][c][1][1]) and a role that lets the backend choose its memory layout. Only tensor_write and
 * tensor_read see the plain layout (row-major NCHW, or [k][c][r][s] for convolution weights, of
 * the backend's element type). Parameters, their gradients and SGD momentum buffers of one
 * parameter share a layout, so elementwise updates need no reorder.
 *
 * Plans. A layer at one shape gets a plan once (conv_plan, bn_plan, pool_plan); the backend caches
 * in it whatever it needs (oneDNN primitives, scratch memory, cuDNN descriptors). Plans and
 * tensors belong to the backend instance that made them.
 *
 * Semantics are PyTorch's, exactly (DESIGN.md decision 5):
 *   conv: cross-correlation, no bias, zero padding, groups 1, dilation 1;
 *   batchnorm training: batch mean and biased variance normalise; running_mean and running_var are
 *     updated with momentum (r = (1 - m) r + m x) and the UNBIASED batch variance (n / (n - 1));
 *     eps is added to the variance; save_mean and save_invstd (1 / sqrt(var + eps)) are kept for
 *     backward; eval uses the running statistics;
 *   maxpool: padding never wins (-inf), ties go to the first maximum in row-major window order;
 *   avgpool: global (adaptive to 1x1): the mean over h x w;
 *   linear: y = x w^T + b with w of shape [m][k];
 *   SGD: torch.optim.SGD's update (weight decay added to the gradient, momentum buffer set to the
 *     gradient on the first step, dampening, nesterov), one parameter at a time.
 * Gradients are written, not accumulated, unless the call says otherwise.
 *
 * Errors: every call returns 0 or a negative PTC_E* code with detail in err. Nothing here keeps
 * global state; a backend instance is used from one thread at a time (it may use threads inside).
 */
#ifndef PTC_BACKEND_BACKEND_H
#define PTC_BACKEND_BACKEND_H

#include "base/base.h"

typedef struct ptc__be ptc__be;     /* a backend instance: threads, engine, stream */
typedef struct ptc__bt ptc__bt;     /* a tensor in the backend's memory and layout */
typedef struct ptc__op ptc__op;     /* a layer's plan at one shape */
typedef struct ptc__bimg ptc__bimg; /* a uint8 image dataset held in the backend's memory */

typedef enum ptc__dtype_be { PTC__BE_F32 = 4, PTC__BE_F64 = 8 } ptc__dtype_be;

typedef enum ptc__role {
    PTC__ROLE_ACT,    /* activations and their gradients: [n][c][h][w] */
    PTC__ROLE_CONV_W, /* convolution weights and their gradients: [k][c][r][s] */
    PTC__ROLE_VEC,    /* per-channel vectors (batchnorm), biases: [1][c][1][1] */
    PTC__ROLE_MAT     /* linear weights [m][k][1][1], and [n][k] inputs/outputs of linear */
} ptc__role;

typedef enum ptc__precision {
    PTC__PREC_F32 = 0, /* every layer in the tensors' element type */
    PTC__PREC_BF16 = 1 /* torch.autocast(dtype=bfloat16)'s rules: convolutions and linear layers
                          compute in bfloat16 (inputs and weights rounded to bf16, float32
                          accumulation, output rounded to bf16); batchnorm statistics, the loss,
                          master weights and momentum stay float32 (cuda; dnnl where the CPU
                          has AVX512_BF16 or AMX, else PTC_EUNSUPPORTED; ref refuses it) */
} ptc__precision;

typedef struct ptc__be_params {
    ptc__dtype_be dtype; /* PTC__BE_F32, or PTC__BE_F64 where the backend has it (ref) */
    int threads;         /* 0: the backend's default (all cores it may use) */
    int device;          /* device backends: the GPU ordinal (0 default) */
    int device_by_rank;  /* device is this process's local rank, not a choice: a process that sees
                            fewer GPUs (a launcher gave each task its own through
                            CUDA_VISIBLE_DEVICES) takes device modulo the GPUs it sees */
    ptc__precision precision;
    int tf32;          /* device backends: allow TF32 tensor cores in float32 math */
    int deterministic; /* only algorithms whose results do not depend on scheduling */
    int winograd;      /* dnnl: 3x3 stride-1 convolutions may use Winograd F(4x4, 3x3) */
} ptc__be_params;

typedef struct ptc__conv_shape {
    int n, c, h, w;  /* input */
    int k, r, s;     /* output channels, kernel height and width */
    int stride, pad; /* the same along both axes */
    int oh, ow;      /* output: (h + 2 pad - r) / stride + 1 */
} ptc__conv_shape;

typedef struct ptc__pool_shape {
    int n, c, h, w;
    int r, s, stride, pad; /* maxpool window; unused for the global average pool */
    int oh, ow;
} ptc__pool_shape;

typedef struct ptc__sgd {
    double lr, momentum, dampening, weight_decay;
    int nesterov;
    int first_step; /* the momentum buffer does not exist yet: it becomes the gradient */
} ptc__sgd;

typedef struct ptc__backend_ops {
    const char *name;
    int (*open)(ptc__be **out, const ptc__be_params *p, ptc_error *err);
    void (*close)(ptc__be *be);

    /* ---- tensors ---- */
    int (*tensor_new)(ptc__be *be, ptc__bt **out, ptc__role role, const int dims[4],
                      ptc_error *err);
    void (*tensor_free)(ptc__be *be, ptc__bt *t); /* accepts NULL */
    /* The logical shape [n][c][h][w] the tensor was made with. */
    void (*tensor_dims)(const ptc__bt *t, int dims[4]);
    /* Plain layout in or out, elements of the backend's dtype. */
    int (*tensor_write)(ptc__be *be, ptc__bt *t, const void *plain, ptc_error *err);
    int (*tensor_read)(ptc__be *be, const ptc__bt *t, void *plain, ptc_error *err);
    int (*tensor_fill)(ptc__be *be, ptc__bt *t, double value, ptc_error *err);
    /* y = a + b (residual connections); with relu, y = max(a + b, 0). y may alias a or b. */
    int (*add)(ptc__be *be, const ptc__bt *a, const ptc__bt *b, ptc__bt *y, int relu,
               ptc_error *err);
    /* y += x (gradients meeting at a fork). */
    int (*accumulate)(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err);

    /* ---- convolution ---- */
    int (*conv_plan)(ptc__be *be, ptc__op **out, const ptc__conv_shape *s, ptc_error *err);
    int (*conv_fwd)(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *w, ptc__bt *y,
                    ptc_error *err);
    int (*conv_bwd_data)(ptc__be *be, ptc__op *op, const ptc__bt *dy, const ptc__bt *w, ptc__bt *dx,
                         ptc_error *err);
    int (*conv_bwd_weight)(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *dy,
                           ptc__bt *dw, ptc_error *err);

    /* ---- batch normalization (input [n][c][h][w]) ---- */
    int (*bn_plan)(ptc__be *be, ptc__op **out, const int dims[4], double eps, ptc_error *err);
    /* Training: normalises with the batch statistics, writes save_mean and save_invstd, updates
     * the running statistics with momentum; relu applies max(., 0) to y. */
    int (*bn_fwd_train)(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                        const ptc__bt *beta, ptc__bt *y, ptc__bt *save_mean, ptc__bt *save_invstd,
                        ptc__bt *running_mean, ptc__bt *running_var, double momentum, int relu,
                        ptc_error *err);
    int (*bn_fwd_eval)(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                       const ptc__bt *beta, const ptc__bt *running_mean, const ptc__bt *running_var,
                       ptc__bt *y, int relu, ptc_error *err);
    /* Backward of training mode. y is the forward output (needed when relu was fused: dy is
     * masked where y == 0); NULL when relu was not fused. */
    int (*bn_bwd)(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y, const ptc__bt *dy,
                  const ptc__bt *gamma, const ptc__bt *save_mean, const ptc__bt *save_invstd,
                  ptc__bt *dx, ptc__bt *dgamma, ptc__bt *dbeta, ptc_error *err);

    /* ---- activations and pooling ---- */
    int (*relu_fwd)(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err); /* y may be x */
    /* dx = dy where y > 0, else 0; dx may be dy. */
    int (*relu_bwd)(ptc__be *be, const ptc__bt *y, const ptc__bt *dy, ptc__bt *dx, ptc_error *err);
    int (*maxpool_plan)(ptc__be *be, ptc__op **out, const ptc__pool_shape *s, ptc_error *err);
    int (*maxpool_fwd)(ptc__be *be, ptc__op *op, const ptc__bt *x, ptc__bt *y, ptc_error *err);
    /* x and y are the forward input and output (the plan may also keep the argmax). */
    int (*maxpool_bwd)(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                       const ptc__bt *dy, ptc__bt *dx, ptc_error *err);
    /* Global average pool [n][c][h][w] -> [n][c][1][1] (role MAT on output). */
    int (*avgpool_fwd)(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err);
    int (*avgpool_bwd)(ptc__be *be, const ptc__bt *dy, ptc__bt *dx, ptc_error *err);

    /* ---- linear: x [n][k], w [m][k], b [m] -> y [n][m] ---- */
    int (*linear_fwd)(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *b, ptc__bt *y,
                      ptc_error *err);
    int (*linear_bwd)(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *dy,
                      ptc__bt *dx, ptc__bt *dw, ptc__bt *db, ptc_error *err); /* dx may be NULL */

    /* ---- optimizer: one parameter p with gradient g and momentum buffer buf (same role and
     * shape; buf unused when momentum is 0) ---- */
    int (*sgd_step)(ptc__be *be, ptc__bt *p, const ptc__bt *g, ptc__bt *buf, const ptc__sgd *h,
                    ptc_error *err);

    void (*plan_free)(ptc__be *be, ptc__op *op); /* accepts NULL */

    /* ---- raw form, for communication between processes (lib/dist) ----
     * A tensor's bytes exactly as the backend holds them (its own layout, padding included), so
     * that gradients are summed across processes without reordering: elementwise sums do not
     * care about the order of elements as long as every process uses the same one. layout is a
     * fingerprint of that order (backend, element type, layout, padding); equal fingerprints on
     * two processes mean their raw forms can be summed. Raw buffers are memory of the backend's
     * kind (host here; device memory for a device backend). */
    int (*tensor_raw_size)(ptc__be *be, const ptc__bt *t, size_t *bytes, uint64_t *layout,
                           ptc_error *err);
    /* dst = scale x t in raw form (scale rounded to the element type first, as torch multiplies
     * a tensor by a Python number; scale 1 is a copy). */
    int (*tensor_pack)(ptc__be *be, const ptc__bt *t, void *dst, double scale, ptc_error *err);
    /* t = src in raw form. */
    int (*tensor_unpack)(ptc__be *be, ptc__bt *t, const void *src, ptc_error *err);
    /* Optional (NULL where absent; host backends only): t's storage becomes raw, host memory of
     * tensor_raw_size bytes, 64-byte aligned, which then holds t in raw form (t's values are
     * copied there first), so that every later write of t lands in raw and every read of t reads
     * it: the DDP reducer keeps gradients as views into its buckets this way (torch's
     * gradient_as_bucket_view), and all-reduces them where the backward wrote them. raw NULL
     * gives t its own storage back (the values copied there). raw equal to the current storage
     * only tells the backend that its bytes were changed from outside (caches keyed on t's
     * contents are dropped). The caller keeps raw alive and untouched by others while it is
     * bound, and unbinds before freeing it; t may be freed while bound (raw is not freed).
     * PTC_EINVAL when raw is not 64-byte aligned. */
    int (*tensor_bind_raw)(ptc__be *be, ptc__bt *t, void *raw, ptc_error *err);

    /* ---- device backends (NULL in host backends) ----
     * For a device backend, dst and src of tensor_pack / tensor_unpack may be memory from
     * raw_alloc (queued on the instance's stream) or host memory (copied through; returns when
     * the host memory may be used). */
    int (*raw_alloc)(ptc__be *be, void **out, size_t bytes, ptc_error *err);
    void (*raw_free)(ptc__be *be, void *p); /* accepts NULL */
    /* The instance's stream (a cudaStream_t) and device ordinal, for a device communicator. */
    int (*device_info)(ptc__be *be, void **stream, int *device, ptc_error *err);
    /* Returns when every operation queued on the instance has finished. */
    int (*sync)(ptc__be *be, ptc_error *err);

    /* ---- device input (optional: NULL where absent; the trainer then makes float batches on
     * the host and writes them with tensor_write) ----
     * The dataset's uint8 images [count][3][32][32] are copied once into the backend's memory,
     * and each batch is made there from the sample indices and the random choices alone, so
     * that no float batch crosses PCIe and no host thread augments. images_upload copies images
     * (the caller may free them on return); PTC_ENOMEM when the backend cannot hold them. */
    int (*images_upload)(ptc__be *be, ptc__bimg **out, const uint8_t *images, int64_t count,
                         ptc_error *err);
    void (*images_free)(ptc__be *be, ptc__bimg *im); /* accepts NULL */
    /* x (ACT [n][3][32][32]) = for each sample i, ptc__augment_image (lib/data/augment.c) of
     * image idx[i] with the window (top[i], left[i]) of the image zero-padded by 4 pixels (each
     * in 0..8; 4, 4 is no crop), mirrored when flip[i], normalised through lut[c][v] ([3][256],
     * ptc__normalizer's table): the same bits as the host path. idx, top, left, flip and lut
     * are host arrays, copied by the call (they may be reused on return); an index outside the
     * dataset or a window outside 0..8 is PTC_EINVAL. */
    int (*images_batch)(ptc__be *be, const ptc__bimg *im, const int32_t *idx, const int8_t *top,
                        const int8_t *left, const uint8_t *flip, int n, const float *lut,
                        ptc__bt *x, ptc_error *err);

    /* ---- device loss and optimizer ----
     * Optional (NULL where a backend has none; lib/nn then computes the loss on the host and
     * steps one parameter at a time). They let a training step run without the host waiting.
     *
     * xent: the mean softmax cross-entropy of logits [n][classes] (role MAT) against labels
     * (a host array of n int64, each in [0, classes), copied by the backend: the caller may
     * reuse it on return), with ptc__cross_entropy's arithmetic (lib/nn/nn.h): dlogits
     * [n][classes] (role MAT) = (softmax - onehot) / n. A device backend only queues the work;
     * the loss and the number of rows whose first maximum is the label go to a result slot of
     * the instance, which the next xent replaces. xent_result waits for the latest xent only
     * (not for work queued after it) and reads that slot; PTC_EINVAL when no xent was queued. */
    int (*xent)(ptc__be *be, const ptc__bt *logits, const int64_t *labels, int n, int classes,
                ptc__bt *dlogits, ptc_error *err);
    int (*xent_result)(ptc__be *be, double *loss, int64_t *correct, ptc_error *err);
    /* sgd_step over count parameters at once, with one set of hyperparameters (first_step
     * included): the same result, element for element, as sgd_step on each in turn (one launch
     * on a device backend). buf may be NULL, and buf[i] NULL, when momentum is 0. */
    int (*sgd_multi)(ptc__be *be, int count, ptc__bt *const *p, ptc__bt *const *g,
                     ptc__bt *const *buf, const ptc__sgd *h, ptc_error *err);
} ptc__backend_ops;

/* The backend built into libptc. */
extern const ptc__backend_ops ptc__backend_ref;
/* The oneDNN backend's table: defined in lib/backend/dnnl.c, which is compiled into the module
 * backend-dnnl.so (and into the tests that look inside it), never into libptc. */
extern const ptc__backend_ops ptc__backend_dnnl;
/* By name: ref, or the table of the module of that name (loaded on first use); NULL when there is
 * no such backend or its module cannot be loaded. Does not ask the module whether it can run. */
const ptc__backend_ops *ptc__backend_find(const char *name);
/* The backend to train with: "ref", "dnnl", "cuda", or NULL / "auto" (cuda when its module loads
 * and its probe finds a usable GPU, else dnnl when its module loads, else ref). A named module
 * that is missing or cannot run gives PTC_ENOTFOUND / PTC_EUNSUPPORTED / the probe's code, with
 * the reason ("backend \"cuda\" cannot run here: no CUDA driver ..."). */
int ptc__backend_get(const char *name, const ptc__backend_ops **out, ptc_error *err);

/* FNV-1a over n bytes, continuing from h (start with PTC__FNV_START): layout fingerprints. */
#define PTC__FNV_START 0xcbf29ce484222325ull
uint64_t ptc__fnv1a(uint64_t h, const void *p, size_t n);

/* conv output size, or -1 when the shape is impossible (checked arithmetic). */
int ptc__conv_out(int in, int kernel, int stride, int pad);

/* The argument checks of ref and cuda (shape.c): what a check sees of a tensor argument, and the
 * one message for each mistake ("conv_fwd: x is act [2][3][8][8], expected act [2][4][8][8]"). */
typedef struct ptc__be_seen {
    int have_be; /* the call had a backend instance */
    int null;    /* the tensor is NULL */
    int foreign; /* the tensor belongs to another instance */
    ptc__role role;
    int dims[4];
} ptc__be_seen;
const char *ptc__role_name(ptc__role r); /* "act", "conv_w", "vec", "mat" */
int ptc__be_check_tensor(ptc_error *err, const char *op, const char *arg, const ptc__be_seen *t,
                         ptc__role role, int64_t n, int64_t c, int64_t h, int64_t w);
/* have: a backend instance and a plan were given; foreign: the plan is another instance's;
 * wrong_kind: it is for another kind of layer. */
int ptc__be_check_plan(ptc_error *err, const char *op, int have, int foreign, int wrong_kind);

#endif /* PTC_BACKEND_BACKEND_H */
