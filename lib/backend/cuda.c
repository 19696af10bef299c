/*
 * cuda.c - the cuda backend: the ops table of backend.h over the memory of one NVIDIA GPU, built
 * as the module backend-cuda.so (cuDNN for convolutions, cuBLAS for the linear layer, kernels/
 * for everything else).
 *
 * One instance = one device (params->device), one non-blocking stream, and a cuDNN and a cuBLAS
 * handle bound to that stream. Every op only queues work on the stream and returns; tensor_read,
 * sync and the raw forms of host memory wait for it.
 *
 * Layouts (float32 device memory): activations channels-last [n][h][w][c]; convolution weights
 * [k][r][s][c] (cuDNN's NHWC filter layout, so that weights and activations agree); vectors and
 * matrices plain (a matrix [n][c][1][1] is the same bytes in both orders). tensor_write and
 * tensor_read convert from and to the plain layout (NCHW, KCRS) with the layout kernels through a
 * device scratch buffer. Parameters, gradients and momentum buffers share role and shape, hence
 * layout, so the elementwise kernels never reorder.
 *
 * Convolutions: cuDNN's legacy API with NHWC descriptors. The algorithms of the three passes are
 * chosen once per plan with the _v7 heuristics: the first one that cuDNN can run, whose workspace
 * is at most WS_CAP, that keeps float32 math off the tensor cores unless TF32 was asked for, and
 * that is CUDNN_DETERMINISTIC when params->deterministic. The workspace is one buffer per instance,
 * grown to the largest a call has needed.
 *
 * Precision PTC__PREC_BF16 follows torch.autocast: tensors stay float32; a convolution or linear
 * layer rounds its inputs to bf16 scratch (weights once per version of the weight tensor, cached
 * beside it), computes with float32 accumulation (cuDNN: bf16 tensors, compute type float,
 * tensor-op math; cuBLAS: cublasGemmEx with CUDA_R_16BF and CUBLAS_COMPUTE_32F) into a bf16 output,
 * and widens that output back to float32. Batchnorm, pooling, the loss and SGD stay float32.
 *
 * Versions: every op that writes a tensor gives it a new version from the instance's clock. The
 * bf16 copy of a weight is remade when its version changed, and maxpool_bwd re-derives the argmax
 * when x is not the tensor the plan's forward saw.
 *
 * Errors: every CUDA, cuDNN and cuBLAS call goes through CU / DNN / BLAS, and every kernel
 * launcher through KL, which turn a failure into PTC_EIO (PTC_ENOMEM for allocation failures) with
 * the file, line, call and the library's own message, and return it; nothing here exits.
 */
#include "backend/cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <string.h>

#include "base/module.h"
#include "kernels/ptc_kernels.h"

#define WS_CAP ((size_t)256 << 20) /* the largest cuDNN workspace an algorithm may ask for */

/* A device buffer that only grows (scratch, workspace). */
typedef struct dbuf {
    void *p;
    size_t size;
} dbuf;

/* The result slot of xent (kernels/xent.cu writes it on the device, then it is copied down). */
typedef struct xent_res {
    double loss;
    int64_t correct;
} xent_res;

struct ptc__be {
    int device;
    ptc__precision prec;
    int tf32, deterministic;
    cudaStream_t stream;
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    dbuf ws;        /* cuDNN workspace */
    dbuf plain;     /* tensor_write / tensor_read / raw forms of host memory: one tensor, float32 */
    dbuf bf[3];     /* bf16 operands and output of a convolution or linear layer */
    uint64_t clock; /* the last version handed out */
    /* xent: the labels go up through pinned memory (a pageable copy could make the host wait for
     * the stream), lab_copied marks when lab_host may be rewritten; the per-row scratch; the
     * result slot, copied down into pinned xres_host and marked by xent_done, so that
     * xent_result waits for that copy only. Made on first use. */
    int64_t *lab_host;
    int lab_cap;
    cudaEvent_t lab_copied, xent_done;
    int lab_pending, xent_queued;
    dbuf lab_dev, xrows, xres;
    xent_res *xres_host;
};

struct ptc__bt {
    ptc__be *be; /* the instance that made it */
    ptc__role role;
    int dims[4];   /* [n][c][h][w] */
    int64_t numel; /* the product of dims */
    float *d;      /* numel floats in the role's layout */
    uint64_t version;
    /* bf16 precision: the weight rounded to bf16 (a cache of d; kept through const pointers) */
    uint16_t *bf16;
    uint64_t bf16_version; /* the version of d that bf16 holds, 0: none */
};

typedef enum op_kind { OP_CONV = 1, OP_BN, OP_MAXPOOL } op_kind;

struct ptc__op {
    ptc__be *be;
    op_kind kind;
    ptc__conv_shape conv; /* OP_CONV */
    ptc__pool_shape pool; /* OP_MAXPOOL */
    int dims[4];          /* OP_BN: the input [n][c][h][w] */
    double eps;           /* OP_BN */
    /* OP_CONV */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3]; /* forward, backward-data, backward-filter */
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
    /* OP_BN: per-channel scratch (batch mean and variance; eval: the running invstd) */
    float *mean, *var;
    /* OP_MAXPOOL: the winner of each output element, and the x it was computed from */
    int32_t *argmax;
    const ptc__bt *arg_x;
    uint64_t arg_x_version;
};

/* ---- errors ---------------------------------------------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int cu_fail(ptc_error *err, const char *file, int line, const char *call, cudaError_t e)
{
    int code = e == cudaErrorMemoryAllocation ? PTC_ENOMEM : PTC_EIO;
    return ptc__err(err, code, "", -1, "cuda: %s:%d: %s: %s (%s)", base_name(file), line, call,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

static int dnn_fail(ptc_error *err, const char *file, int line, const char *call, cudnnStatus_t e)
{
    int code = e == CUDNN_STATUS_ALLOC_FAILED ? PTC_ENOMEM : PTC_EIO;
    return ptc__err(err, code, "", -1, "cuda: %s:%d: %s: cuDNN: %s", base_name(file), line, call,
                    cudnnGetErrorString(e));
}

static int blas_fail(ptc_error *err, const char *file, int line, const char *call, cublasStatus_t e)
{
    int code = e == CUBLAS_STATUS_ALLOC_FAILED ? PTC_ENOMEM : PTC_EIO;
    return ptc__err(err, code, "", -1, "cuda: %s:%d: %s: cuBLAS: %s", base_name(file), line, call,
                    cublasGetStatusString(e));
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cu_fail(err, __FILE__, __LINE__, #call, e_);                                    \
    } while (0)

#define DNN(call)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t e_ = (call);                                                                 \
        if (e_ != CUDNN_STATUS_SUCCESS)                                                            \
            return dnn_fail(err, __FILE__, __LINE__, #call, e_);                                   \
    } while (0)

#define BLAS(call)                                                                                 \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return blas_fail(err, __FILE__, __LINE__, #call, e_);                                  \
    } while (0)

/* A kernels/ launcher: 0, or the cudaError_t of its launch as a positive int. */
#define KL(call)                                                                                   \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        if (e_ != 0)                                                                               \
            return cu_fail(err, __FILE__, __LINE__, #call, (cudaError_t)e_);                       \
    } while (0)

#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* ---- argument checks (the same rules and messages as ref.c) ---------------------------------- */

/* t must be a tensor of be with the given role and dims [n][c][h][w] (shape.c's rules). */
static int check_t(const ptc__be *be, ptc_error *err, const char *op, const char *arg,
                   const ptc__bt *t, ptc__role role, int64_t n, int64_t c, int64_t h, int64_t w)
{
    ptc__be_seen seen = {.have_be = be != NULL, .null = !t};
    if (t) {
        seen.foreign = t->be != be;
        seen.role = t->role;
        memcpy(seen.dims, t->dims, sizeof seen.dims);
    }
    return ptc__be_check_tensor(err, op, arg, &seen, role, n, c, h, w);
}

static int check_like(const ptc__be *be, ptc_error *err, const char *op, const char *arg,
                      const ptc__bt *t, const ptc__bt *like)
{
    return check_t(be, err, op, arg, t, like->role, like->dims[0], like->dims[1], like->dims[2],
                   like->dims[3]);
}

static int check_vec(const ptc__be *be, ptc_error *err, const char *op, const char *arg,
                     const ptc__bt *t, int64_t c)
{
    return check_t(be, err, op, arg, t, PTC__ROLE_VEC, 1, c, 1, 1);
}

static int check_plan(const ptc__be *be, ptc_error *err, const char *op, const ptc__op *plan,
                      op_kind kind)
{
    return ptc__be_check_plan(err, op, be && plan, plan && plan->be != be,
                              plan && plan->kind != kind);
}

/* ---- helpers --------------------------------------------------------------------------------- */

/* Makes be's device current for this thread: kernels, cuBLAS and cudaMalloc act on the current
 * device, and one thread may drive instances on several devices. */
static int enter(ptc__be *be, ptc_error *err)
{
    CU(cudaSetDevice(be->device));
    return 0;
}

static void touch(ptc__be *be, ptc__bt *t)
{
    t->version = ++be->clock;
}

/* b holds at least bytes. Growing waits for the stream first: queued work may still use the old
 * buffer. */
static int grow(ptc__be *be, dbuf *b, size_t bytes, ptc_error *err)
{
    if (bytes <= b->size)
        return 0;
    CU(cudaStreamSynchronize(be->stream));
    if (b->p) {
        cudaError_t e = cudaFree(b->p);
        b->p = NULL;
        b->size = 0;
        if (e != cudaSuccess)
            return cu_fail(err, __FILE__, __LINE__, "cudaFree(scratch)", e);
    }
    CU(cudaMalloc(&b->p, bytes));
    b->size = bytes;
    return 0;
}

/* Where memory handed in by the caller lives: 1 device, 0 host (pageable or pinned). */
static int is_device_ptr(const void *p, int *out, ptc_error *err)
{
    struct cudaPointerAttributes a;
    CU(cudaPointerGetAttributes(&a, p));
    *out = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    return 0;
}

/* The plain layout differs from the backend's only for activations and conv weights whose
 * channels and spatial size are both above 1. */
static bool needs_reorder(const ptc__bt *t)
{
    return (t->role == PTC__ROLE_ACT || t->role == PTC__ROLE_CONV_W) && t->dims[1] > 1 &&
           (int64_t)t->dims[2] * t->dims[3] > 1;
}

/* t's data rounded to bf16 in scratch bf[slot] (activations, gradients: every call). */
static int to_bf16(ptc__be *be, const ptc__bt *t, int slot, uint16_t **out, ptc_error *err)
{
    TRY(grow(be, &be->bf[slot], (size_t)t->numel * 2, err));
    *out = be->bf[slot].p;
    KL(ptc_k_f32_to_bf16(t->d, *out, t->numel, be->stream));
    return 0;
}

/* A weight rounded to bf16, remade only when the weight has a new version. */
static int weight_bf16(ptc__be *be, const ptc__bt *w, const uint16_t **out, ptc_error *err)
{
    ptc__bt *m = (ptc__bt *)w; /* the cache is not part of the tensor's value */
    if (!m->bf16)
        CU(cudaMalloc((void **)&m->bf16, (size_t)m->numel * 2));
    if (m->bf16_version != m->version) {
        KL(ptc_k_f32_to_bf16(m->d, m->bf16, m->numel, be->stream));
        m->bf16_version = m->version;
    }
    *out = m->bf16;
    return 0;
}

/* Scratch bf[slot] for a bf16 output of count elements. */
static int bf16_out(ptc__be *be, int64_t count, int slot, uint16_t **out, ptc_error *err)
{
    TRY(grow(be, &be->bf[slot], (size_t)count * 2, err));
    *out = be->bf[slot].p;
    return 0;
}

/* ---- probe and instance ---------------------------------------------------------------------- */

int ptc__cuda_probe(ptc_error *err)
{
    int drv = 0, rt = 0, count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    if (drv == 0)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "no CUDA driver is installed (libcuda.so.1 was not found or did not load; "
                        "cudaGetDeviceCount: %s)",
                        cudaGetErrorString(e));
    if (e == cudaErrorInsufficientDriver)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "the CUDA driver (CUDA %d.%d) is older than this build's runtime (CUDA "
                        "%d.%d): %s",
                        drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10,
                        cudaGetErrorString(e));
    if (e != cudaSuccess || count < 1)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "no CUDA device (cudaGetDeviceCount: %s)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
}

static void cuda_close(ptc__be *be)
{
    if (!be)
        return;
    (void)cudaSetDevice(be->device);
    if (be->stream)
        (void)cudaStreamSynchronize(be->stream);
    if (be->blas)
        (void)cublasDestroy(be->blas);
    if (be->dnn)
        (void)cudnnDestroy(be->dnn);
    (void)cudaFree(be->ws.p);
    (void)cudaFree(be->plain.p);
    (void)cudaFree(be->lab_dev.p);
    (void)cudaFree(be->xrows.p);
    (void)cudaFree(be->xres.p);
    (void)cudaFreeHost(be->lab_host);
    (void)cudaFreeHost(be->xres_host);
    if (be->lab_copied)
        (void)cudaEventDestroy(be->lab_copied);
    if (be->xent_done)
        (void)cudaEventDestroy(be->xent_done);
    for (int i = 0; i < 3; i++)
        (void)cudaFree(be->bf[i].p);
    if (be->stream)
        (void)cudaStreamDestroy(be->stream);
    ptc__free(be);
}

static int open_handles(ptc__be *be, ptc_error *err)
{
    CU(cudaSetDevice(be->device));
    CU(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    DNN(cudnnCreate(&be->dnn));
    DNN(cudnnSetStream(be->dnn, be->stream));
    BLAS(cublasCreate(&be->blas));
    BLAS(cublasSetStream(be->blas, be->stream));
    /* float32 GEMMs stay off the tensor cores unless TF32 was asked for (DEFAULT_MATH keeps
     * float32's precision, as torch's allow_tf32 = False); bf16 GEMMs name their compute type
     * (CUBLAS_COMPUTE_32F) in each call. */
    BLAS(cublasSetMathMode(be->blas, be->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return 0;
}

static int cuda_open(ptc__be **out, const ptc__be_params *p, ptc_error *err)
{
    ptc__be_params def = {.dtype = PTC__BE_F32};
    if (!out)
        return ptc__err(err, PTC_EINVAL, "", -1, "cuda open: out is NULL");
    *out = NULL;
    if (!p)
        p = &def;
    if (p->dtype != PTC__BE_F32)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "cuda open: dtype %d is not float32 (the cuda backend has float32 only)",
                        (int)p->dtype);
    if (p->precision != PTC__PREC_F32 && p->precision != PTC__PREC_BF16)
        return ptc__err(err, PTC_EINVAL, "", -1, "cuda open: unknown precision %d",
                        (int)p->precision);
    TRY(ptc__cuda_probe(err));
    int count = 0;
    CU(cudaGetDeviceCount(&count));
    int device = p->device;
    /* The local rank picks the GPU as DDP's LOCAL_RANK does; where the launcher already gave
     * each task its own GPUs (srun --gpus-per-task: each process sees cuda:0 only), the rank
     * wraps onto the GPUs this process sees. */
    if (p->device_by_rank && count > 0 && device >= count)
        device %= count;
    if (device < 0 || device >= count)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "cuda open: there is no device cuda:%d (this machine has %d CUDA "
                        "device%s: cuda:0%s)",
                        p->device, count, count == 1 ? "" : "s", count == 1 ? "" : " and up");
    ptc__be *be = ptc__calloc(1, sizeof *be);
    if (!be)
        return ptc__err(err, PTC_ENOMEM, "", -1, "cuda open: out of memory");
    be->device = device;
    be->prec = p->precision;
    be->tf32 = p->tf32 != 0;
    be->deterministic = p->deterministic != 0;
    int rc = open_handles(be, err);
    if (rc < 0) {
        ptc__err_prefix(err, "cuda open (device cuda:%d): ", device);
        cuda_close(be);
        return rc;
    }
    *out = be;
    return 0;
}

/* ---- tensors --------------------------------------------------------------------------------- */

static int cuda_tensor_new(ptc__be *be, ptc__bt **out, ptc__role role, const int dims[4],
                           ptc_error *err)
{
    if (!be || !out || !dims)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_new: NULL argument");
    *out = NULL;
    if (role != PTC__ROLE_ACT && role != PTC__ROLE_CONV_W && role != PTC__ROLE_VEC &&
        role != PTC__ROLE_MAT)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_new: unknown role %d", (int)role);
    int64_t numel = 1, nbytes;
    for (int i = 0; i < 4; i++) {
        if (dims[i] < 1 || !ptc__mul_i64_ok(numel, dims[i], &numel))
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "tensor_new: %s [%d][%d][%d][%d] is not a shape", ptc__role_name(role),
                            dims[0], dims[1], dims[2], dims[3]);
    }
    if ((role == PTC__ROLE_VEC && (dims[0] != 1 || dims[2] != 1 || dims[3] != 1)) ||
        (role == PTC__ROLE_MAT && (dims[2] != 1 || dims[3] != 1)))
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "tensor_new: %s [%d][%d][%d][%d]: vectors are [1][c][1][1], matrices "
                        "[n][c][1][1]",
                        ptc__role_name(role), dims[0], dims[1], dims[2], dims[3]);
    if (!ptc__mul_i64_ok(numel, 4, &nbytes) || (uint64_t)nbytes > SIZE_MAX)
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensor_new: %s [%d][%d][%d][%d] is too large",
                        ptc__role_name(role), dims[0], dims[1], dims[2], dims[3]);
    TRY(enter(be, err));
    ptc__bt *t = ptc__calloc(1, sizeof *t);
    if (!t)
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensor_new: out of memory");
    cudaError_t e = cudaMalloc((void **)&t->d, (size_t)nbytes);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(t->d, 0, (size_t)nbytes, be->stream); /* zeros, as ref's calloc */
    if (e != cudaSuccess) {
        (void)cudaFree(t->d);
        ptc__free(t);
        return ptc__err(err, e == cudaErrorMemoryAllocation ? PTC_ENOMEM : PTC_EIO, "", -1,
                        "tensor_new: %s [%d][%d][%d][%d]: cannot allocate %lld bytes of device "
                        "memory: %s",
                        ptc__role_name(role), dims[0], dims[1], dims[2], dims[3], (long long)nbytes,
                        cudaGetErrorString(e));
    }
    t->be = be;
    t->role = role;
    memcpy(t->dims, dims, sizeof t->dims);
    t->numel = numel;
    touch(be, t);
    *out = t;
    return 0;
}

static void cuda_tensor_free(ptc__be *be, ptc__bt *t)
{
    if (!t)
        return;
    if (be) {
        /* Queued work may still read or write it. */
        (void)cudaSetDevice(be->device);
        (void)cudaStreamSynchronize(be->stream);
    }
    (void)cudaFree(t->d);
    (void)cudaFree(t->bf16);
    ptc__free(t);
}

static void cuda_tensor_dims(const ptc__bt *t, int dims[4])
{
    memcpy(dims, t->dims, sizeof t->dims);
}

static int cuda_tensor_write(ptc__be *be, ptc__bt *t, const void *plain, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_write: t is NULL");
    TRY(check_like(be, err, "tensor_write", "t", t, t));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_write: plain is NULL");
    TRY(enter(be, err));
    size_t bytes = (size_t)t->numel * 4;
    if (!needs_reorder(t)) {
        CU(cudaMemcpyAsync(t->d, plain, bytes, cudaMemcpyHostToDevice, be->stream));
    } else {
        TRY(grow(be, &be->plain, bytes, err));
        CU(cudaMemcpyAsync(be->plain.p, plain, bytes, cudaMemcpyHostToDevice, be->stream));
        KL(ptc_k_nchw_to_nhwc(be->plain.p, t->d, t->dims[0], t->dims[1],
                              (int64_t)t->dims[2] * t->dims[3], be->stream));
    }
    /* The caller may reuse plain on return: pinned memory is copied asynchronously. */
    CU(cudaStreamSynchronize(be->stream));
    touch(be, t);
    return 0;
}

static int cuda_tensor_read(ptc__be *be, const ptc__bt *t, void *plain, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_read: t is NULL");
    TRY(check_like(be, err, "tensor_read", "t", t, t));
    if (!plain)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_read: plain is NULL");
    TRY(enter(be, err));
    size_t bytes = (size_t)t->numel * 4;
    if (!needs_reorder(t)) {
        CU(cudaMemcpyAsync(plain, t->d, bytes, cudaMemcpyDeviceToHost, be->stream));
    } else {
        TRY(grow(be, &be->plain, bytes, err));
        KL(ptc_k_nhwc_to_nchw(t->d, be->plain.p, t->dims[0], t->dims[1],
                              (int64_t)t->dims[2] * t->dims[3], be->stream));
        CU(cudaMemcpyAsync(plain, be->plain.p, bytes, cudaMemcpyDeviceToHost, be->stream));
    }
    CU(cudaStreamSynchronize(be->stream));
    return 0;
}

/* Raw form: the device bytes as they are; the fingerprint names the layout and the shape (every
 * role's layout is "channels innermost" of its dims). */
static int cuda_tensor_raw_size(ptc__be *be, const ptc__bt *t, size_t *bytes, uint64_t *layout,
                                ptc_error *err)
{
    if (!t || !bytes || !layout)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_raw_size: NULL argument");
    TRY(check_like(be, err, "tensor_raw_size", "t", t, t));
    static const char tag[] = "cuda/f32/nhwc";
    const int64_t dims[4] = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
    *bytes = (size_t)t->numel * 4;
    *layout = ptc__fnv1a(ptc__fnv1a(PTC__FNV_START, tag, sizeof tag - 1), dims, sizeof dims);
    return 0;
}

static int cuda_tensor_pack(ptc__be *be, const ptc__bt *t, void *dst, double scale, ptc_error *err)
{
    if (!t || !dst)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_pack: NULL argument");
    TRY(check_like(be, err, "tensor_pack", "t", t, t));
    TRY(enter(be, err));
    int on_device = 0;
    TRY(is_device_ptr(dst, &on_device, err));
    size_t bytes = (size_t)t->numel * 4;
    const float s = (float)scale; /* rounded to the element type first, as torch does */
    if (on_device) {
        if (scale == 1.0)
            CU(cudaMemcpyAsync(dst, t->d, bytes, cudaMemcpyDeviceToDevice, be->stream));
        else
            KL(ptc_k_scale(t->d, dst, t->numel, s, be->stream));
        return 0;
    }
    const float *src = t->d;
    if (scale != 1.0) {
        TRY(grow(be, &be->plain, bytes, err));
        KL(ptc_k_scale(t->d, be->plain.p, t->numel, s, be->stream));
        src = be->plain.p;
    }
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, be->stream));
    CU(cudaStreamSynchronize(be->stream));
    return 0;
}

static int cuda_tensor_unpack(ptc__be *be, ptc__bt *t, const void *src, ptc_error *err)
{
    if (!t || !src)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_unpack: NULL argument");
    TRY(check_like(be, err, "tensor_unpack", "t", t, t));
    TRY(enter(be, err));
    int on_device = 0;
    TRY(is_device_ptr(src, &on_device, err));
    size_t bytes = (size_t)t->numel * 4;
    CU(cudaMemcpyAsync(t->d, src, bytes,
                       on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, be->stream));
    if (!on_device)
        CU(cudaStreamSynchronize(be->stream));
    touch(be, t);
    return 0;
}

static int cuda_raw_alloc(ptc__be *be, void **out, size_t bytes, ptc_error *err)
{
    if (!be || !out)
        return ptc__err(err, PTC_EINVAL, "", -1, "raw_alloc: NULL argument");
    *out = NULL;
    TRY(enter(be, err));
    CU(cudaMalloc(out, bytes ? bytes : 1));
    return 0;
}

static void cuda_raw_free(ptc__be *be, void *p)
{
    if (!p)
        return;
    if (be) {
        (void)cudaSetDevice(be->device);
        (void)cudaStreamSynchronize(be->stream);
    }
    (void)cudaFree(p);
}

static int cuda_device_info(ptc__be *be, void **stream, int *device, ptc_error *err)
{
    if (!be)
        return ptc__err(err, PTC_EINVAL, "", -1, "device_info: no backend instance");
    if (stream)
        *stream = be->stream;
    if (device)
        *device = be->device;
    return 0;
}

static int cuda_sync(ptc__be *be, ptc_error *err)
{
    if (!be)
        return ptc__err(err, PTC_EINVAL, "", -1, "sync: no backend instance");
    TRY(enter(be, err));
    CU(cudaStreamSynchronize(be->stream));
    return 0;
}

static int cuda_tensor_fill(ptc__be *be, ptc__bt *t, double value, ptc_error *err)
{
    if (!t)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensor_fill: t is NULL");
    TRY(check_like(be, err, "tensor_fill", "t", t, t));
    TRY(enter(be, err));
    KL(ptc_k_fill(t->d, t->numel, (float)value, be->stream));
    touch(be, t);
    return 0;
}

static int cuda_add(ptc__be *be, const ptc__bt *a, const ptc__bt *b, ptc__bt *y, int relu,
                    ptc_error *err)
{
    if (!a)
        return ptc__err(err, PTC_EINVAL, "", -1, "add: a is NULL");
    TRY(check_like(be, err, "add", "a", a, a));
    TRY(check_like(be, err, "add", "b", b, a));
    TRY(check_like(be, err, "add", "y", y, a));
    TRY(enter(be, err));
    KL(ptc_k_add(a->d, b->d, y->d, a->numel, relu != 0, be->stream));
    touch(be, y);
    return 0;
}

static int cuda_accumulate(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    if (!y)
        return ptc__err(err, PTC_EINVAL, "", -1, "accumulate: y is NULL");
    TRY(check_like(be, err, "accumulate", "y", y, y));
    TRY(check_like(be, err, "accumulate", "x", x, y));
    TRY(enter(be, err));
    KL(ptc_k_accumulate(x->d, y->d, y->numel, be->stream));
    touch(be, y);
    return 0;
}

/* ---- convolution ----------------------------------------------------------------------------- */

/* Whether an algorithm cuDNN proposes may be used: it runs, its workspace fits, it does what
 * determinism asks, and float32 math stays off the tensor cores unless TF32 was asked for. */
static bool algo_ok(const ptc__be *be, cudnnStatus_t status, size_t memory, cudnnDeterminism_t det,
                    cudnnMathType_t math)
{
    if (status != CUDNN_STATUS_SUCCESS || memory > WS_CAP)
        return false;
    if (be->deterministic && det != CUDNN_DETERMINISTIC)
        return false;
    if (be->prec == PTC__PREC_F32 && !be->tf32 &&
        (math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
        return false;
    /* ALLOW_CONVERSION lets cuDNN round float32 operands down to half precision (5 exponent
     * bits: overflow past 65504), which TF32 does not mean. */
    if (be->prec == PTC__PREC_F32 && math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        return false;
    return true;
}

static int conv_no_algo(ptc_error *err, const ptc__be *be, const ptc__conv_shape *s,
                        const char *pass)
{
    return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                    "conv_plan: cuDNN has no %s algorithm for input [%d][%d][%d][%d], weight "
                    "[%d][%d][%d][%d], stride %d, pad %d%s%s within a %zu MiB workspace",
                    pass, s->n, s->c, s->h, s->w, s->k, s->c, s->r, s->s, s->stride, s->pad,
                    be->prec == PTC__PREC_BF16 ? ", bf16" : "",
                    be->deterministic ? ", deterministic" : "", WS_CAP >> 20);
}

/* The math type a pass runs with: float32 without TF32 stays FMA_MATH whatever cuDNN proposes
 * (DEFAULT_MATH would let float32 use TF32 tensor cores); otherwise the one the algorithm was
 * proposed with, as cuDNN's documentation of the _v7 calls asks. */
static cudnnMathType_t pass_math(const ptc__be *be, cudnnMathType_t proposed)
{
    return be->prec == PTC__PREC_F32 && !be->tf32 ? CUDNN_FMA_MATH : proposed;
}

static int conv_descriptors(ptc__be *be, ptc__op *op, ptc_error *err)
{
    const ptc__conv_shape *s = &op->conv;
    const bool bf = be->prec == PTC__PREC_BF16;
    const cudnnDataType_t dt = bf ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    DNN(cudnnCreateTensorDescriptor(&op->xd));
    DNN(cudnnCreateTensorDescriptor(&op->yd));
    DNN(cudnnCreateFilterDescriptor(&op->wd));
    DNN(cudnnSetTensor4dDescriptor(op->xd, CUDNN_TENSOR_NHWC, dt, s->n, s->c, s->h, s->w));
    DNN(cudnnSetTensor4dDescriptor(op->yd, CUDNN_TENSOR_NHWC, dt, s->n, s->k, s->oh, s->ow));
    DNN(cudnnSetFilter4dDescriptor(op->wd, dt, CUDNN_TENSOR_NHWC, s->k, s->c, s->r, s->s));
    /* One convolution descriptor per pass, since each pass may run with another math type.
     * Compute (accumulation) in float32 in both precisions. */
    for (int i = 0; i < 3; i++) {
        DNN(cudnnCreateConvolutionDescriptor(&op->cd[i]));
        DNN(cudnnSetConvolution2dDescriptor(op->cd[i], s->pad, s->pad, s->stride, s->stride, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        DNN(cudnnSetConvolutionMathType(op->cd[i], bf         ? CUDNN_TENSOR_OP_MATH
                                                   : be->tf32 ? CUDNN_DEFAULT_MATH
                                                              : CUDNN_FMA_MATH));
    }
    return 0;
}

/* Each pass: the first algorithm of cuDNN's heuristic ranking that algo_ok accepts and whose
 * workspace cuDNN confirms for the math type it will run with (a ranked algorithm can still be
 * refused there; the next one is tried). */
static int conv_choose(ptc__be *be, ptc__op *op, ptc_error *err)
{
    const ptc__conv_shape *s = &op->conv;
    int got = 0, i;
    size_t ws = 0;

    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(be->dnn, op->xd, op->wd, op->cd[0], op->yd,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fp));
    for (i = 0; i < got; i++) {
        if (!algo_ok(be, fp[i].status, fp[i].memory, fp[i].determinism, fp[i].mathType))
            continue;
        DNN(cudnnSetConvolutionMathType(op->cd[0], pass_math(be, fp[i].mathType)));
        if (cudnnGetConvolutionForwardWorkspaceSize(be->dnn, op->xd, op->wd, op->cd[0], op->yd,
                                                    fp[i].algo, &ws) == CUDNN_STATUS_SUCCESS &&
            ws <= WS_CAP)
            break;
    }
    if (i >= got)
        return conv_no_algo(err, be, s, "forward");
    op->fwd_algo = fp[i].algo;
    op->fwd_ws = ws;

    cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(be->dnn, op->wd, op->yd, op->cd[1], op->xd,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got,
                                                    dp));
    for (i = 0; i < got; i++) {
        if (!algo_ok(be, dp[i].status, dp[i].memory, dp[i].determinism, dp[i].mathType))
            continue;
        DNN(cudnnSetConvolutionMathType(op->cd[1], pass_math(be, dp[i].mathType)));
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(be->dnn, op->wd, op->yd, op->cd[1], op->xd,
                                                         dp[i].algo, &ws) == CUDNN_STATUS_SUCCESS &&
            ws <= WS_CAP)
            break;
    }
    if (i >= got)
        return conv_no_algo(err, be, s, "backward-data");
    op->bwd_data_algo = dp[i].algo;
    op->bwd_data_ws = ws;

    cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(be->dnn, op->xd, op->yd, op->cd[2], op->wd,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
                                                      wp));
    for (i = 0; i < got; i++) {
        if (!algo_ok(be, wp[i].status, wp[i].memory, wp[i].determinism, wp[i].mathType))
            continue;
        DNN(cudnnSetConvolutionMathType(op->cd[2], pass_math(be, wp[i].mathType)));
        if (cudnnGetConvolutionBackwardFilterWorkspaceSize(be->dnn, op->xd, op->yd, op->cd[2],
                                                           op->wd, wp[i].algo,
                                                           &ws) == CUDNN_STATUS_SUCCESS &&
            ws <= WS_CAP)
            break;
    }
    if (i >= got)
        return conv_no_algo(err, be, s, "backward-filter");
    op->bwd_filter_algo = wp[i].algo;
    op->bwd_filter_ws = ws;
    return 0;
}

static void cuda_plan_free(ptc__be *be, ptc__op *op)
{
    if (!op)
        return;
    if (be) {
        (void)cudaSetDevice(be->device);
        (void)cudaStreamSynchronize(be->stream); /* the plan's buffers may be in use */
    }
    if (op->xd)
        (void)cudnnDestroyTensorDescriptor(op->xd);
    if (op->yd)
        (void)cudnnDestroyTensorDescriptor(op->yd);
    if (op->wd)
        (void)cudnnDestroyFilterDescriptor(op->wd);
    for (int i = 0; i < 3; i++)
        if (op->cd[i])
            (void)cudnnDestroyConvolutionDescriptor(op->cd[i]);
    (void)cudaFree(op->mean);
    (void)cudaFree(op->var);
    (void)cudaFree(op->argmax);
    ptc__free(op);
}

static int cuda_conv_plan(ptc__be *be, ptc__op **out, const ptc__conv_shape *s, ptc_error *err)
{
    if (!be || !out || !s)
        return ptc__err(err, PTC_EINVAL, "", -1, "conv_plan: NULL argument");
    *out = NULL;
    int oh = ptc__conv_out(s->h, s->r, s->stride, s->pad);
    int ow = ptc__conv_out(s->w, s->s, s->stride, s->pad);
    if (s->n < 1 || s->c < 1 || s->k < 1 || oh < 1 || ow < 1 || s->oh != oh || s->ow != ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "conv_plan: input [%d][%d][%d][%d], weight [%d][%d][%d][%d], stride %d, "
                        "pad %d, output %dx%d is not a convolution (output would be %dx%d)",
                        s->n, s->c, s->h, s->w, s->k, s->c, s->r, s->s, s->stride, s->pad, s->oh,
                        s->ow, oh, ow);
    TRY(enter(be, err));
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "conv_plan: out of memory");
    op->be = be;
    op->kind = OP_CONV;
    op->conv = *s;
    int rc = conv_descriptors(be, op, err);
    if (rc == 0)
        rc = conv_choose(be, op, err);
    if (rc < 0) {
        cuda_plan_free(be, op);
        return rc;
    }
    *out = op;
    return 0;
}

static int cuda_conv_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *w, ptc__bt *y,
                         ptc_error *err)
{
    TRY(check_plan(be, err, "conv_fwd", op, OP_CONV));
    const ptc__conv_shape *s = &op->conv;
    TRY(check_t(be, err, "conv_fwd", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "conv_fwd", "w", w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s));
    TRY(check_t(be, err, "conv_fwd", "y", y, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow));
    TRY(enter(be, err));
    TRY(grow(be, &be->ws, op->fwd_ws, err));
    const float one = 1.0f, zero = 0.0f;
    if (be->prec == PTC__PREC_BF16) {
        uint16_t *xb, *yb;
        const uint16_t *wb;
        TRY(to_bf16(be, x, 0, &xb, err));
        TRY(weight_bf16(be, w, &wb, err));
        TRY(bf16_out(be, y->numel, 2, &yb, err));
        DNN(cudnnConvolutionForward(be->dnn, &one, op->xd, xb, op->wd, wb, op->cd[0], op->fwd_algo,
                                    be->ws.p, op->fwd_ws, &zero, op->yd, yb));
        KL(ptc_k_bf16_to_f32(yb, y->d, y->numel, be->stream));
    } else {
        DNN(cudnnConvolutionForward(be->dnn, &one, op->xd, x->d, op->wd, w->d, op->cd[0],
                                    op->fwd_algo, be->ws.p, op->fwd_ws, &zero, op->yd, y->d));
    }
    touch(be, y);
    return 0;
}

static int cuda_conv_bwd_data(ptc__be *be, ptc__op *op, const ptc__bt *dy, const ptc__bt *w,
                              ptc__bt *dx, ptc_error *err)
{
    TRY(check_plan(be, err, "conv_bwd_data", op, OP_CONV));
    const ptc__conv_shape *s = &op->conv;
    TRY(check_t(be, err, "conv_bwd_data", "dy", dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow));
    TRY(check_t(be, err, "conv_bwd_data", "w", w, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s));
    TRY(check_t(be, err, "conv_bwd_data", "dx", dx, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(enter(be, err));
    TRY(grow(be, &be->ws, op->bwd_data_ws, err));
    const float one = 1.0f, zero = 0.0f;
    if (be->prec == PTC__PREC_BF16) {
        uint16_t *dyb, *dxb;
        const uint16_t *wb;
        TRY(to_bf16(be, dy, 0, &dyb, err));
        TRY(weight_bf16(be, w, &wb, err));
        TRY(bf16_out(be, dx->numel, 2, &dxb, err));
        DNN(cudnnConvolutionBackwardData(be->dnn, &one, op->wd, wb, op->yd, dyb, op->cd[1],
                                         op->bwd_data_algo, be->ws.p, op->bwd_data_ws, &zero,
                                         op->xd, dxb));
        KL(ptc_k_bf16_to_f32(dxb, dx->d, dx->numel, be->stream));
    } else {
        DNN(cudnnConvolutionBackwardData(be->dnn, &one, op->wd, w->d, op->yd, dy->d, op->cd[1],
                                         op->bwd_data_algo, be->ws.p, op->bwd_data_ws, &zero,
                                         op->xd, dx->d));
    }
    touch(be, dx);
    return 0;
}

static int cuda_conv_bwd_weight(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *dy,
                                ptc__bt *dw, ptc_error *err)
{
    TRY(check_plan(be, err, "conv_bwd_weight", op, OP_CONV));
    const ptc__conv_shape *s = &op->conv;
    TRY(check_t(be, err, "conv_bwd_weight", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "conv_bwd_weight", "dy", dy, PTC__ROLE_ACT, s->n, s->k, s->oh, s->ow));
    TRY(check_t(be, err, "conv_bwd_weight", "dw", dw, PTC__ROLE_CONV_W, s->k, s->c, s->r, s->s));
    TRY(enter(be, err));
    TRY(grow(be, &be->ws, op->bwd_filter_ws, err));
    const float one = 1.0f, zero = 0.0f;
    if (be->prec == PTC__PREC_BF16) {
        /* cuDNN accumulates in float32 and rounds the result once to bf16, as autocast's weight
         * gradient is bf16 before the float32 master weight receives it. */
        uint16_t *xb, *dyb, *dwb;
        TRY(to_bf16(be, x, 0, &xb, err));
        TRY(to_bf16(be, dy, 1, &dyb, err));
        TRY(bf16_out(be, dw->numel, 2, &dwb, err));
        DNN(cudnnConvolutionBackwardFilter(be->dnn, &one, op->xd, xb, op->yd, dyb, op->cd[2],
                                           op->bwd_filter_algo, be->ws.p, op->bwd_filter_ws, &zero,
                                           op->wd, dwb));
        KL(ptc_k_bf16_to_f32(dwb, dw->d, dw->numel, be->stream));
    } else {
        DNN(cudnnConvolutionBackwardFilter(be->dnn, &one, op->xd, x->d, op->yd, dy->d, op->cd[2],
                                           op->bwd_filter_algo, be->ws.p, op->bwd_filter_ws, &zero,
                                           op->wd, dw->d));
    }
    touch(be, dw);
    return 0;
}

/* ---- batch normalization --------------------------------------------------------------------- */

static int cuda_bn_plan(ptc__be *be, ptc__op **out, const int dims[4], double eps, ptc_error *err)
{
    if (!be || !out || !dims)
        return ptc__err(err, PTC_EINVAL, "", -1, "bn_plan: NULL argument");
    *out = NULL;
    if (dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[3] < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "bn_plan: [%d][%d][%d][%d] is not a shape",
                        dims[0], dims[1], dims[2], dims[3]);
    if (!(eps >= 0) || !isfinite(eps))
        return ptc__err(err, PTC_EINVAL, "", -1, "bn_plan: eps %g is not a finite value >= 0", eps);
    TRY(enter(be, err));
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "bn_plan: out of memory");
    op->be = be;
    op->kind = OP_BN;
    memcpy(op->dims, dims, sizeof op->dims);
    op->eps = eps;
    cudaError_t e = cudaMalloc((void **)&op->mean, (size_t)dims[1] * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&op->var, (size_t)dims[1] * sizeof(float));
    if (e != cudaSuccess) {
        cuda_plan_free(be, op);
        return cu_fail(err, __FILE__, __LINE__, "cudaMalloc(bn statistics)", e);
    }
    *out = op;
    return 0;
}

static int cuda_bn_fwd_train(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                             const ptc__bt *beta, ptc__bt *y, ptc__bt *save_mean,
                             ptc__bt *save_invstd, ptc__bt *running_mean, ptc__bt *running_var,
                             double momentum, int relu, ptc_error *err)
{
    static const char fn[] = "bn_fwd_train";
    TRY(check_plan(be, err, fn, op, OP_BN));
    const int *d = op->dims;
    TRY(check_t(be, err, fn, "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_vec(be, err, fn, "gamma", gamma, d[1]));
    TRY(check_vec(be, err, fn, "beta", beta, d[1]));
    TRY(check_like(be, err, fn, "y", y, x));
    TRY(check_vec(be, err, fn, "save_mean", save_mean, d[1]));
    TRY(check_vec(be, err, fn, "save_invstd", save_invstd, d[1]));
    TRY(check_vec(be, err, fn, "running_mean", running_mean, d[1]));
    TRY(check_vec(be, err, fn, "running_var", running_var, d[1]));
    const int64_t rows = (int64_t)d[0] * d[2] * d[3];
    if (rows < 2)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%s: expected more than 1 value per channel when training, got input "
                        "[%d][%d][%d][%d]",
                        fn, d[0], d[1], d[2], d[3]);
    TRY(enter(be, err));
    KL(ptc_k_bn_stats(x->d, rows, d[1], op->mean, op->var, be->stream));
    KL(ptc_k_bn_finish_stats(op->mean, op->var, d[1], rows, (float)op->eps, (float)momentum,
                             save_mean->d, save_invstd->d, running_mean->d, running_var->d,
                             be->stream));
    KL(ptc_k_bn_apply(x->d, save_mean->d, save_invstd->d, gamma->d, beta->d, y->d, rows, d[1],
                      relu != 0, be->stream));
    touch(be, y);
    touch(be, save_mean);
    touch(be, save_invstd);
    touch(be, running_mean);
    touch(be, running_var);
    return 0;
}

static int cuda_bn_fwd_eval(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *gamma,
                            const ptc__bt *beta, const ptc__bt *running_mean,
                            const ptc__bt *running_var, ptc__bt *y, int relu, ptc_error *err)
{
    static const char fn[] = "bn_fwd_eval";
    TRY(check_plan(be, err, fn, op, OP_BN));
    const int *d = op->dims;
    TRY(check_t(be, err, fn, "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_vec(be, err, fn, "gamma", gamma, d[1]));
    TRY(check_vec(be, err, fn, "beta", beta, d[1]));
    TRY(check_vec(be, err, fn, "running_mean", running_mean, d[1]));
    TRY(check_vec(be, err, fn, "running_var", running_var, d[1]));
    TRY(check_like(be, err, fn, "y", y, x));
    TRY(enter(be, err));
    const int64_t rows = (int64_t)d[0] * d[2] * d[3];
    KL(ptc_k_bn_invstd(running_var->d, op->var, d[1], (float)op->eps, be->stream));
    KL(ptc_k_bn_apply(x->d, running_mean->d, op->var, gamma->d, beta->d, y->d, rows, d[1],
                      relu != 0, be->stream));
    touch(be, y);
    return 0;
}

static int cuda_bn_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                       const ptc__bt *dy, const ptc__bt *gamma, const ptc__bt *save_mean,
                       const ptc__bt *save_invstd, ptc__bt *dx, ptc__bt *dgamma, ptc__bt *dbeta,
                       ptc_error *err)
{
    static const char fn[] = "bn_bwd";
    TRY(check_plan(be, err, fn, op, OP_BN));
    const int *d = op->dims;
    TRY(check_t(be, err, fn, "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    if (y)
        TRY(check_like(be, err, fn, "y", y, x));
    TRY(check_like(be, err, fn, "dy", dy, x));
    TRY(check_vec(be, err, fn, "gamma", gamma, d[1]));
    TRY(check_vec(be, err, fn, "save_mean", save_mean, d[1]));
    TRY(check_vec(be, err, fn, "save_invstd", save_invstd, d[1]));
    TRY(check_like(be, err, fn, "dx", dx, x));
    TRY(check_vec(be, err, fn, "dgamma", dgamma, d[1]));
    TRY(check_vec(be, err, fn, "dbeta", dbeta, d[1]));
    TRY(enter(be, err));
    const int64_t rows = (int64_t)d[0] * d[2] * d[3];
    KL(ptc_k_bn_bwd(x->d, y ? y->d : NULL, dy->d, gamma->d, save_mean->d, save_invstd->d, dx->d,
                    dgamma->d, dbeta->d, rows, d[1], be->stream));
    touch(be, dx);
    touch(be, dgamma);
    touch(be, dbeta);
    return 0;
}

/* ---- activations and pooling ----------------------------------------------------------------- */

static int cuda_relu_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    if (!x)
        return ptc__err(err, PTC_EINVAL, "", -1, "relu_fwd: x is NULL");
    TRY(check_like(be, err, "relu_fwd", "x", x, x));
    TRY(check_like(be, err, "relu_fwd", "y", y, x));
    TRY(enter(be, err));
    KL(ptc_k_relu_fwd(x->d, y->d, x->numel, be->stream));
    touch(be, y);
    return 0;
}

static int cuda_relu_bwd(ptc__be *be, const ptc__bt *y, const ptc__bt *dy, ptc__bt *dx,
                         ptc_error *err)
{
    if (!y)
        return ptc__err(err, PTC_EINVAL, "", -1, "relu_bwd: y is NULL");
    TRY(check_like(be, err, "relu_bwd", "y", y, y));
    TRY(check_like(be, err, "relu_bwd", "dy", dy, y));
    TRY(check_like(be, err, "relu_bwd", "dx", dx, y));
    TRY(enter(be, err));
    KL(ptc_k_relu_bwd(y->d, dy->d, dx->d, y->numel, be->stream));
    touch(be, dx);
    return 0;
}

static int cuda_maxpool_plan(ptc__be *be, ptc__op **out, const ptc__pool_shape *s, ptc_error *err)
{
    if (!be || !out || !s)
        return ptc__err(err, PTC_EINVAL, "", -1, "maxpool_plan: NULL argument");
    *out = NULL;
    int oh = ptc__conv_out(s->h, s->r, s->stride, s->pad);
    int ow = ptc__conv_out(s->w, s->s, s->stride, s->pad);
    if (s->n < 1 || s->c < 1 || oh < 1 || ow < 1 || s->pad > s->r / 2 || s->pad > s->s / 2 ||
        s->oh != oh || s->ow != ow)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "maxpool_plan: input [%d][%d][%d][%d], window %dx%d, stride %d, pad %d, "
                        "output %dx%d is not a max pool (output would be %dx%d; pad at most half "
                        "the window)",
                        s->n, s->c, s->h, s->w, s->r, s->s, s->stride, s->pad, s->oh, s->ow, oh,
                        ow);
    int64_t count = (int64_t)s->n * s->c * oh * ow;
    if ((int64_t)s->h * s->w > INT32_MAX)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "maxpool_plan: an input plane of %dx%d does not fit the int32 argmax", s->h,
                        s->w);
    TRY(enter(be, err));
    ptc__op *op = ptc__calloc(1, sizeof *op);
    if (!op)
        return ptc__err(err, PTC_ENOMEM, "", -1, "maxpool_plan: out of memory");
    op->be = be;
    op->kind = OP_MAXPOOL;
    op->pool = *s;
    cudaError_t e = cudaMalloc((void **)&op->argmax, (size_t)count * sizeof(int32_t));
    if (e != cudaSuccess) {
        cuda_plan_free(be, op);
        return cu_fail(err, __FILE__, __LINE__, "cudaMalloc(maxpool argmax)", e);
    }
    *out = op;
    return 0;
}

static int cuda_maxpool_fwd(ptc__be *be, ptc__op *op, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    TRY(check_plan(be, err, "maxpool_fwd", op, OP_MAXPOOL));
    const ptc__pool_shape *s = &op->pool;
    TRY(check_t(be, err, "maxpool_fwd", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "maxpool_fwd", "y", y, PTC__ROLE_ACT, s->n, s->c, s->oh, s->ow));
    TRY(enter(be, err));
    KL(ptc_k_maxpool_fwd(x->d, y->d, op->argmax, s->n, s->c, s->h, s->w, s->r, s->s, s->stride,
                         s->pad, s->oh, s->ow, be->stream));
    touch(be, y);
    op->arg_x = x;
    op->arg_x_version = x->version;
    return 0;
}

static int cuda_maxpool_bwd(ptc__be *be, ptc__op *op, const ptc__bt *x, const ptc__bt *y,
                            const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    TRY(check_plan(be, err, "maxpool_bwd", op, OP_MAXPOOL));
    const ptc__pool_shape *s = &op->pool;
    TRY(check_t(be, err, "maxpool_bwd", "x", x, PTC__ROLE_ACT, s->n, s->c, s->h, s->w));
    TRY(check_t(be, err, "maxpool_bwd", "y", y, PTC__ROLE_ACT, s->n, s->c, s->oh, s->ow));
    TRY(check_like(be, err, "maxpool_bwd", "dy", dy, y));
    TRY(check_like(be, err, "maxpool_bwd", "dx", dx, x));
    TRY(enter(be, err));
    if (op->arg_x != x || op->arg_x_version != x->version) {
        /* The argmax is not x's (another forward ran since, or x changed): derive it again, the
         * pooled values going to scratch (y is the caller's and stays as it is). */
        TRY(grow(be, &be->plain, (size_t)y->numel * 4, err));
        KL(ptc_k_maxpool_fwd(x->d, be->plain.p, op->argmax, s->n, s->c, s->h, s->w, s->r, s->s,
                             s->stride, s->pad, s->oh, s->ow, be->stream));
        op->arg_x = x;
        op->arg_x_version = x->version;
    }
    KL(ptc_k_maxpool_bwd(dy->d, op->argmax, dx->d, s->n, s->c, s->h, s->w, s->r, s->s, s->stride,
                         s->pad, s->oh, s->ow, be->stream));
    touch(be, dx);
    return 0;
}

static int cuda_avgpool_fwd(ptc__be *be, const ptc__bt *x, ptc__bt *y, ptc_error *err)
{
    if (!x)
        return ptc__err(err, PTC_EINVAL, "", -1, "avgpool_fwd: x is NULL");
    const int *d = x->dims;
    TRY(check_t(be, err, "avgpool_fwd", "x", x, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_t(be, err, "avgpool_fwd", "y", y, PTC__ROLE_MAT, d[0], d[1], 1, 1));
    TRY(enter(be, err));
    KL(ptc_k_avgpool_fwd(x->d, y->d, d[0], d[1], d[2] * d[3], be->stream));
    touch(be, y);
    return 0;
}

static int cuda_avgpool_bwd(ptc__be *be, const ptc__bt *dy, ptc__bt *dx, ptc_error *err)
{
    if (!dx)
        return ptc__err(err, PTC_EINVAL, "", -1, "avgpool_bwd: dx is NULL");
    const int *d = dx->dims;
    TRY(check_t(be, err, "avgpool_bwd", "dx", dx, PTC__ROLE_ACT, d[0], d[1], d[2], d[3]));
    TRY(check_t(be, err, "avgpool_bwd", "dy", dy, PTC__ROLE_MAT, d[0], d[1], 1, 1));
    TRY(enter(be, err));
    KL(ptc_k_avgpool_bwd(dy->d, dx->d, d[0], d[1], d[2] * d[3], be->stream));
    touch(be, dx);
    return 0;
}

/* ---- linear ----------------------------------------------------------------------------------
 * cuBLAS is column-major: a row-major [r][c] matrix is, as stored, the column-major c x r matrix
 * (its transpose) with leading dimension c. With x [N][K], w [M][K], y [N][M] stored row-major:
 *
 *   y = x w^T   <=>  y^T (M x N) = (w^T stored, K x M)^T . (x^T stored, K x N)
 *               ->   gemm(T, N, m = M, n = N, k = K, A = w lda K, B = x ldb K, C = y ldc M)
 *   dx = dy w   <=>  dx^T (K x N) = (w^T stored, K x M) . (dy^T stored, M x N)
 *               ->   gemm(N, N, m = K, n = N, k = M, A = w lda K, B = dy ldb M, C = dx ldc K)
 *   dw = dy^T x <=>  dw^T (K x M) = (x^T stored, K x N) . (dy^T stored, M x N)^T
 *               ->   gemm(N, T, m = K, n = M, k = N, A = x lda K, B = dy ldb M, C = dw ldc K)
 */

/* C = op(A) op(B) (+ C when accumulate) in float32 or, in bf16 precision, on bf16 copies
 * (A, B of the tensors given; C through bf16 scratch and widened into c). */
static int gemm(ptc__be *be, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const float *a, const uint16_t *a16, int lda, const float *b, const uint16_t *b16,
                int ldb, float *c, int64_t c_count, int ldc, int accumulate, ptc_error *err)
{
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (be->prec != PTC__PREC_BF16) {
        BLAS(cublasSgemm(be->blas, ta, tb, m, n, k, &one, a, lda, b, ldb, &beta, c, ldc));
        return 0;
    }
    uint16_t *c16;
    TRY(bf16_out(be, c_count, 2, &c16, err));
    if (accumulate)
        KL(ptc_k_f32_to_bf16(c, c16, c_count, be->stream));
    BLAS(cublasGemmEx(be->blas, ta, tb, m, n, k, &one, a16, CUDA_R_16BF, lda, b16, CUDA_R_16BF, ldb,
                      &beta, c16, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    KL(ptc_k_bf16_to_f32(c16, c, c_count, be->stream));
    return 0;
}

static int cuda_linear_fwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *b,
                           ptc__bt *y, ptc_error *err)
{
    if (!x || !w)
        return ptc__err(err, PTC_EINVAL, "", -1, "linear_fwd: x or w is NULL");
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(check_t(be, err, "linear_fwd", "x", x, PTC__ROLE_MAT, N, K, 1, 1));
    TRY(check_t(be, err, "linear_fwd", "w", w, PTC__ROLE_MAT, M, K, 1, 1));
    TRY(check_vec(be, err, "linear_fwd", "b", b, M));
    TRY(check_t(be, err, "linear_fwd", "y", y, PTC__ROLE_MAT, N, M, 1, 1));
    TRY(enter(be, err));
    if (be->prec == PTC__PREC_BF16) {
        /* autocast's addmm: bias rounded to bf16, added inside the GEMM (float32), one rounding
         * of the sum to bf16. y holds the broadcast bias first. */
        uint16_t *x16;
        const uint16_t *w16;
        TRY(to_bf16(be, x, 0, &x16, err));
        TRY(weight_bf16(be, w, &w16, err));
        KL(ptc_k_fill(y->d, y->numel, 0.0f, be->stream));
        KL(ptc_k_bias_add(y->d, b->d, N, M, be->stream));
        TRY(gemm(be, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, w->d, w16, K, x->d, x16, K, y->d, y->numel,
                 M, 1, err));
    } else {
        TRY(gemm(be, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, w->d, NULL, K, x->d, NULL, K, y->d,
                 y->numel, M, 0, err));
        KL(ptc_k_bias_add(y->d, b->d, N, M, be->stream));
    }
    touch(be, y);
    return 0;
}

static int cuda_linear_bwd(ptc__be *be, const ptc__bt *x, const ptc__bt *w, const ptc__bt *dy,
                           ptc__bt *dx, ptc__bt *dw, ptc__bt *db, ptc_error *err)
{
    if (!x || !w)
        return ptc__err(err, PTC_EINVAL, "", -1, "linear_bwd: x or w is NULL");
    const int N = x->dims[0], K = x->dims[1], M = w->dims[0];
    TRY(check_t(be, err, "linear_bwd", "x", x, PTC__ROLE_MAT, N, K, 1, 1));
    TRY(check_t(be, err, "linear_bwd", "w", w, PTC__ROLE_MAT, M, K, 1, 1));
    TRY(check_t(be, err, "linear_bwd", "dy", dy, PTC__ROLE_MAT, N, M, 1, 1));
    if (dx)
        TRY(check_like(be, err, "linear_bwd", "dx", dx, x));
    TRY(check_like(be, err, "linear_bwd", "dw", dw, w));
    TRY(check_vec(be, err, "linear_bwd", "db", db, M));
    TRY(enter(be, err));
    uint16_t *x16 = NULL, *dy16 = NULL;
    const uint16_t *w16 = NULL;
    if (be->prec == PTC__PREC_BF16) {
        TRY(to_bf16(be, dy, 0, &dy16, err));
        TRY(to_bf16(be, x, 1, &x16, err));
        TRY(weight_bf16(be, w, &w16, err));
    }
    if (dx) {
        TRY(gemm(be, CUBLAS_OP_N, CUBLAS_OP_N, K, N, M, w->d, w16, K, dy->d, dy16, M, dx->d,
                 dx->numel, K, 0, err));
        touch(be, dx);
    }
    TRY(gemm(be, CUBLAS_OP_N, CUBLAS_OP_T, K, M, N, x->d, x16, K, dy->d, dy16, M, dw->d, dw->numel,
             K, 0, err));
    /* The bias gradient is a float32 sum of dy in both precisions. */
    KL(ptc_k_bias_grad(dy->d, db->d, N, M, be->stream));
    touch(be, dw);
    touch(be, db);
    return 0;
}

/* ---- optimizer ------------------------------------------------------------------------------- */

static int cuda_sgd_step(ptc__be *be, ptc__bt *p, const ptc__bt *g, ptc__bt *buf, const ptc__sgd *h,
                         ptc_error *err)
{
    if (!p || !h)
        return ptc__err(err, PTC_EINVAL, "", -1, "sgd_step: p or the hyperparameters are NULL");
    TRY(check_like(be, err, "sgd_step", "p", p, p));
    TRY(check_like(be, err, "sgd_step", "g", g, p));
    const bool mom = h->momentum != 0;
    if (mom)
        TRY(check_like(be, err, "sgd_step", "buf", buf, p));
    TRY(enter(be, err));
    KL(ptc_k_sgd(p->d, g->d, mom ? buf->d : NULL, p->numel, h->lr, h->momentum, h->dampening,
                 h->weight_decay, h->nesterov != 0, h->first_step != 0, be->stream));
    touch(be, p);
    if (mom)
        touch(be, buf);
    return 0;
}

/* ---- device input ----------------------------------------------------------------------------
 * The dataset's uint8 images live in device memory; a batch is ptc_k_augment from them into x
 * (NHWC, the ACT layout). The per-batch host arrays (the table, the indices, the windows, the
 * flips: 3 KB + 7 bytes a sample) travel in one copy through a pinned staging buffer. The staging
 * buffers belong to the uploaded dataset, not to the instance, so that two datasets used in turn
 * (train and test) never wait on each other's. The pinned buffer is rewritten only after the
 * event recorded behind the previous copy from it has completed (the copy is asynchronous); the
 * device buffer needs no such care: the next copy into it is queued on the same stream after the
 * kernel that reads it. */

struct ptc__bimg {
    ptc__be *be;
    int64_t count;
    uint8_t *d;        /* [count][3][32][32] in device memory */
    void *stage_h;     /* pinned host staging, stage_size bytes */
    void *stage_d;     /* its device copy: lut [3][256] float, idx [n] int32, top, left, flip [n] */
    size_t stage_size; /* 0 until the first batch */
    cudaEvent_t copied; /* recorded after each copy from stage_h (made at upload) */
};

static void cuda_images_free(ptc__be *be, ptc__bimg *im)
{
    (void)be; /* im knows its instance */
    if (!im)
        return;
    (void)cudaSetDevice(im->be->device);
    /* queued kernels may still read the images and the staging */
    (void)cudaStreamSynchronize(im->be->stream);
    (void)cudaFree(im->d);
    (void)cudaFree(im->stage_d);
    if (im->stage_h)
        (void)cudaFreeHost(im->stage_h);
    if (im->copied)
        (void)cudaEventDestroy(im->copied);
    ptc__free(im);
}

static int upload_to_device(ptc__be *be, ptc__bimg *im, const uint8_t *images, size_t bytes,
                            ptc_error *err)
{
    TRY(enter(be, err));
    CU(cudaEventCreateWithFlags(&im->copied, cudaEventDisableTiming));
    CU(cudaMalloc((void **)&im->d, bytes ? bytes : 1));
    if (bytes) {
        CU(cudaMemcpyAsync(im->d, images, bytes, cudaMemcpyHostToDevice, be->stream));
        CU(cudaStreamSynchronize(be->stream)); /* images may be freed on return */
    }
    return 0;
}

static int cuda_images_upload(ptc__be *be, ptc__bimg **out, const uint8_t *images, int64_t count,
                              ptc_error *err)
{
    if (!be || !out || count < 0 || (count > 0 && !images))
        return ptc__err(err, PTC_EINVAL, "", -1, "images_upload: invalid arguments");
    *out = NULL;
    const int64_t pixels = 3 * 32 * 32;
    int64_t bytes;
    if (!ptc__mul_i64_ok(count, pixels, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return ptc__err(err, PTC_ENOMEM, "", -1, "images_upload: %lld images are too many",
                        (long long)count);
    ptc__bimg *im = ptc__calloc(1, sizeof *im);
    if (!im)
        return ptc__err(err, PTC_ENOMEM, "", -1, "images_upload: out of memory");
    im->be = be;
    im->count = count;
    int rc = upload_to_device(be, im, images, (size_t)bytes, err);
    if (rc < 0) {
        ptc__err_prefix(err,
                        "cannot hold %lld images (%.1f MiB) on device cuda:%d: ", (long long)count,
                        (double)bytes / 1048576.0, be->device);
        cuda_images_free(be, im);
        return rc;
    }
    *out = im;
    return 0;
}

/* The staging buffers hold at least bytes; the pinned one is free to write on return. */
static int stage_ready(ptc__be *be, ptc__bimg *im, size_t bytes, ptc_error *err)
{
    if (im->stage_h && im->copied)
        CU(cudaEventSynchronize(im->copied));
    if (bytes <= im->stage_size)
        return 0;
    CU(cudaStreamSynchronize(be->stream)); /* a queued kernel may read the old device buffer */
    if (im->stage_h) {
        cudaError_t e = cudaFreeHost(im->stage_h);
        im->stage_h = NULL;
        if (e != cudaSuccess)
            return cu_fail(err, __FILE__, __LINE__, "cudaFreeHost(staging)", e);
    }
    if (im->stage_d) {
        cudaError_t e = cudaFree(im->stage_d);
        im->stage_d = NULL;
        if (e != cudaSuccess)
            return cu_fail(err, __FILE__, __LINE__, "cudaFree(staging)", e);
    }
    im->stage_size = 0;
    CU(cudaMallocHost(&im->stage_h, bytes));
    CU(cudaMalloc(&im->stage_d, bytes));
    im->stage_size = bytes;
    return 0;
}

static int cuda_images_batch(ptc__be *be, const ptc__bimg *cim, const int32_t *idx,
                             const int8_t *top, const int8_t *left, const uint8_t *flip, int n,
                             const float *lut, ptc__bt *x, ptc_error *err)
{
    if (!cim || !idx || !top || !left || !flip || !lut || n < 1)
        return ptc__err(err, PTC_EINVAL, "", -1, "images_batch: invalid arguments");
    if (cim->be != be)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "images_batch: the images belong to another backend instance");
    TRY(check_t(be, err, "images_batch", "x", x, PTC__ROLE_ACT, n, 3, 32, 32));
    /* the kernel reads wherever an index points: every one is checked here */
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= cim->count)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "images_batch: sample %d: image %d is outside the %lld images", i,
                            (int)idx[i], (long long)cim->count);
        if (top[i] < 0 || top[i] > 8 || left[i] < 0 || left[i] > 8)
            return ptc__err(err, PTC_EINVAL, "", -1,
                            "images_batch: sample %d: window (%d, %d) is outside 0..8", i,
                            (int)top[i], (int)left[i]);
    }
    ptc__bimg *im = (ptc__bimg *)cim; /* the staging is not part of the dataset's value */
    TRY(enter(be, err));
    const size_t lut_bytes = 3 * 256 * sizeof(float), un = (size_t)n;
    const size_t o_idx = lut_bytes, o_top = o_idx + 4 * un, o_left = o_top + un,
                 o_flip = o_left + un, bytes = o_flip + un;
    TRY(stage_ready(be, im, bytes, err));
    uint8_t *h = im->stage_h, *d = im->stage_d;
    memcpy(h, lut, lut_bytes);
    memcpy(h + o_idx, idx, 4 * un);
    memcpy(h + o_top, top, un);
    memcpy(h + o_left, left, un);
    memcpy(h + o_flip, flip, un);
    CU(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, be->stream));
    CU(cudaEventRecord(im->copied, be->stream));
    KL(ptc_k_augment(im->d, 32, 32, 4, (const int32_t *)(d + o_idx), (const int8_t *)(d + o_top),
                     (const int8_t *)(d + o_left), d + o_flip, n, (const float *)d, x->d,
                     be->stream));
    touch(be, x);
    return 0;
}

/* All parameters in one launch (ptc_k_sgd_multi: the per-element arithmetic of ptc_k_sgd). */
static int cuda_sgd_multi(ptc__be *be, int count, ptc__bt *const *p, ptc__bt *const *g,
                          ptc__bt *const *buf, const ptc__sgd *h, ptc_error *err)
{
    if (count < 0 || (count > 0 && (!p || !g)) || !h)
        return ptc__err(err, PTC_EINVAL, "", -1, "sgd_multi: invalid arguments");
    const bool mom = h->momentum != 0;
    if (mom && count > 0 && !buf)
        return ptc__err(err, PTC_EINVAL, "", -1, "sgd_multi: momentum %g needs buffers",
                        h->momentum);
    if (count == 0)
        return 0;
    for (int i = 0; i < count; i++) {
        if (!p[i])
            return ptc__err(err, PTC_EINVAL, "", -1, "sgd_multi: parameter %d is NULL", i);
        TRY(check_like(be, err, "sgd_multi", "p", p[i], p[i]));
        TRY(check_like(be, err, "sgd_multi", "g", g[i], p[i]));
        if (mom)
            TRY(check_like(be, err, "sgd_multi", "buf", buf[i], p[i]));
    }
    TRY(enter(be, err));
    /* the launcher's lists: host arrays of device pointers, copied into the launch itself */
    float **pd = ptc__malloc((size_t)count * (3 * sizeof(float *) + sizeof(int64_t)));
    if (!pd)
        return ptc__err(err, PTC_ENOMEM, "", -1, "sgd_multi: out of memory");
    float **gd = pd + count, **bd = gd + count;
    int64_t *nd = (int64_t *)(void *)(bd + count);
    for (int i = 0; i < count; i++) {
        pd[i] = p[i]->d;
        gd[i] = g[i]->d;
        bd[i] = mom ? buf[i]->d : NULL;
        nd[i] = p[i]->numel;
    }
    int e = ptc_k_sgd_multi(count, pd, (const float *const *)gd, bd, nd, (float)h->lr,
                            (float)h->momentum, (float)h->dampening, (float)h->weight_decay,
                            h->nesterov != 0, h->first_step != 0, be->stream);
    ptc__free(pd);
    if (e != 0)
        return cu_fail(err, __FILE__, __LINE__, "ptc_k_sgd_multi", (cudaError_t)e);
    for (int i = 0; i < count; i++) {
        touch(be, p[i]);
        if (mom)
            touch(be, buf[i]);
    }
    return 0;
}

/* ---- loss ------------------------------------------------------------------------------------ */

/* The buffers of xent for n rows. */
static int xent_buffers(ptc__be *be, int n, ptc_error *err)
{
    if (!be->lab_copied)
        CU(cudaEventCreateWithFlags(&be->lab_copied, cudaEventDisableTiming));
    if (!be->xent_done)
        CU(cudaEventCreateWithFlags(&be->xent_done, cudaEventDisableTiming));
    if (!be->xres_host)
        CU(cudaMallocHost((void **)&be->xres_host, sizeof *be->xres_host));
    if (n > be->lab_cap) {
        if (be->lab_pending)
            CU(cudaEventSynchronize(be->lab_copied));
        be->lab_pending = 0;
        (void)cudaFreeHost(be->lab_host);
        be->lab_host = NULL;
        be->lab_cap = 0;
        CU(cudaMallocHost((void **)&be->lab_host, (size_t)n * sizeof *be->lab_host));
        be->lab_cap = n;
    }
    TRY(grow(be, &be->lab_dev, (size_t)n * sizeof(int64_t), err));
    TRY(grow(be, &be->xrows, (size_t)n * (sizeof(double) + sizeof(int32_t)), err));
    TRY(grow(be, &be->xres, sizeof(xent_res), err));
    return 0;
}

static int cuda_xent(ptc__be *be, const ptc__bt *logits, const int64_t *labels, int n, int classes,
                     ptc__bt *dlogits, ptc_error *err)
{
    if (n < 1 || classes < 1 || !labels)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "xent: %d rows of %d classes (at least 1 of each) and labels %s", n,
                        classes, labels ? "given" : "NULL");
    TRY(check_t(be, err, "xent", "logits", logits, PTC__ROLE_MAT, n, classes, 1, 1));
    TRY(check_t(be, err, "xent", "dlogits", dlogits, PTC__ROLE_MAT, n, classes, 1, 1));
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return ptc__err(err, PTC_EINVAL, "", -1, "label %lld of sample %d is not a class",
                            (long long)labels[i], i);
    TRY(enter(be, err));
    be->xent_queued = 0;
    TRY(xent_buffers(be, n, err));
    /* the previous step's labels have long been copied: this wait is normally free */
    if (be->lab_pending)
        CU(cudaEventSynchronize(be->lab_copied));
    memcpy(be->lab_host, labels, (size_t)n * sizeof *labels);
    CU(cudaMemcpyAsync(be->lab_dev.p, be->lab_host, (size_t)n * sizeof *labels,
                       cudaMemcpyHostToDevice, be->stream));
    CU(cudaEventRecord(be->lab_copied, be->stream));
    be->lab_pending = 1;
    double *rows = be->xrows.p;
    int32_t *right = (int32_t *)(void *)(rows + n);
    xent_res *res = be->xres.p;
    KL(ptc_k_xent(logits->d, be->lab_dev.p, n, classes, dlogits->d, rows, right, &res->loss,
                  &res->correct, be->stream));
    CU(cudaMemcpyAsync(be->xres_host, res, sizeof *res, cudaMemcpyDeviceToHost, be->stream));
    CU(cudaEventRecord(be->xent_done, be->stream));
    be->xent_queued = 1;
    touch(be, dlogits);
    return 0;
}

static int cuda_xent_result(ptc__be *be, double *loss, int64_t *correct, ptc_error *err)
{
    if (!be || !be->xent_queued)
        return ptc__err(err, PTC_EINVAL, "", -1, "xent_result: no xent has been queued");
    TRY(enter(be, err));
    CU(cudaEventSynchronize(be->xent_done));
    if (loss)
        *loss = be->xres_host->loss;
    if (correct)
        *correct = be->xres_host->correct;
    return 0;
}

/* ---- the table and the module ---------------------------------------------------------------- */

const ptc__backend_ops ptc__backend_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .tensor_new = cuda_tensor_new,
    .tensor_free = cuda_tensor_free,
    .tensor_dims = cuda_tensor_dims,
    .tensor_write = cuda_tensor_write,
    .tensor_read = cuda_tensor_read,
    .tensor_fill = cuda_tensor_fill,
    .add = cuda_add,
    .accumulate = cuda_accumulate,
    .conv_plan = cuda_conv_plan,
    .conv_fwd = cuda_conv_fwd,
    .conv_bwd_data = cuda_conv_bwd_data,
    .conv_bwd_weight = cuda_conv_bwd_weight,
    .bn_plan = cuda_bn_plan,
    .bn_fwd_train = cuda_bn_fwd_train,
    .bn_fwd_eval = cuda_bn_fwd_eval,
    .bn_bwd = cuda_bn_bwd,
    .relu_fwd = cuda_relu_fwd,
    .relu_bwd = cuda_relu_bwd,
    .maxpool_plan = cuda_maxpool_plan,
    .maxpool_fwd = cuda_maxpool_fwd,
    .maxpool_bwd = cuda_maxpool_bwd,
    .avgpool_fwd = cuda_avgpool_fwd,
    .avgpool_bwd = cuda_avgpool_bwd,
    .linear_fwd = cuda_linear_fwd,
    .linear_bwd = cuda_linear_bwd,
    .sgd_step = cuda_sgd_step,
    .plan_free = cuda_plan_free,
    .tensor_raw_size = cuda_tensor_raw_size,
    .tensor_pack = cuda_tensor_pack,
    .tensor_unpack = cuda_tensor_unpack,
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .device_info = cuda_device_info,
    .sync = cuda_sync,
    /* ---- device input ---- */
    .images_upload = cuda_images_upload,
    .images_free = cuda_images_free,
    .images_batch = cuda_images_batch,
    /* ---- device loss and optimizer ---- */ .xent = cuda_xent,
    .xent_result = cuda_xent_result,
    .sgd_multi = cuda_sgd_multi,
};

#ifndef PTC_CUDA_NO_MODULE
static const ptc__plugin cuda_plugin = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_BACKEND,
    .name = "cuda",
    .summary = "cuDNN + cuBLAS on an NVIDIA GPU",
    .experimental = 1,
    .ops = &ptc__backend_cuda,
    .probe = ptc__cuda_probe,
};

PTC__DEFINE_PLUGIN_ENTRY(cuda_plugin)
#endif
