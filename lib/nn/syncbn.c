/*
 * syncbn.c - synchronised batch normalization (torch.nn.SyncBatchNorm) for data-parallel runs:
 * the batch statistics of a training forward are those of the global batch, every rank's images
 * together, and backward uses the global sums, so N ranks of batch B compute exactly what one
 * process computes on the N x B images (up to rounding).
 *
 * It works on any backend through the plain layout (tensor_read / tensor_write), so the numbers
 * are computed here, on the host, in double:
 *   forward   per channel, the local sum and sum of squares of x and the local count go through
 *             the sync callback (an all-reduce sum over the ranks); mean = S / n, biased
 *             var = Q / n - mean^2, invstd = 1 / sqrt(var + eps); y = (x - mean) invstd gamma +
 *             beta (then relu when fused); running statistics with momentum and the unbiased
 *             variance var n / (n - 1), n the global count, as SyncBatchNorm does;
 *   backward  g = dy (masked by y > 0 when relu was fused); the local sums of g and of
 *             g (x - mean) give dgamma and dbeta (local, as SyncBatchNorm's weight and bias
 *             gradients are; the DDP reducer averages them); their global sums give
 *             dx = gamma invstd (g - sum_g / n - (x - mean) invstd^2 sum_gxmu / n).
 * The callback sees the same buffer sizes in the same order on every rank (one call per layer
 * forward and one per layer backward).
 */
#include "nn/nn.h"

#include <math.h>
#include <string.h>

/* The host scratch: grows to the largest activation seen. */
static int grow(ptc__syncbn_scratch *s, size_t nfloat, size_t ndouble, ptc_error *err)
{
    if (nfloat > s->fcap) {
        for (int i = 0; i < 3; i++) {
            float *p = ptc__realloc(s->f[i], nfloat * sizeof *p);
            if (!p)
                return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory (synchronised batchnorm)");
            s->f[i] = p;
        }
        s->fcap = nfloat;
    }
    if (ndouble > s->dcap) {
        double *p = ptc__realloc(s->d, ndouble * sizeof *p);
        if (!p)
            return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory (synchronised batchnorm)");
        s->d = p;
        s->dcap = ndouble;
    }
    return 0;
}

void ptc__syncbn_scratch_free(ptc__syncbn_scratch *s)
{
    for (int i = 0; i < 3; i++)
        ptc__free(s->f[i]);
    ptc__free(s->d);
    memset(s, 0, sizeof *s);
}

/* A [1][c][1][1] backend vector in or out as float. */
static int vec_read(const ptc__syncbn_ctx *k, const ptc__bt *t, float *v, ptc_error *err)
{
    return k->ops->tensor_read(k->be, t, v, err);
}

/* x's shape, and scratch for it: three activations (or 6 vectors of C), 4C + 1 doubles. */
static int prepare(const ptc__syncbn_ctx *k, const ptc__bt *x, size_t *N, size_t *C, size_t *HW,
                   ptc_error *err)
{
    int dims[4];
    k->ops->tensor_dims(x, dims);
    *N = (size_t)dims[0];
    *C = (size_t)dims[1];
    *HW = (size_t)dims[2] * (size_t)dims[3];
    size_t n = *N * *C * *HW;
    return grow(k->scratch, n > 6 * *C ? n : 6 * *C, 4 * *C + 1, err);
}

int ptc__syncbn_forward(const ptc__syncbn_ctx *k, const ptc__syncbn_layer *l, ptc_error *err)
{
    /* f[0]: x then y; f[1]: 6 vectors of C (gamma, beta, mean, invstd, running mean and var);
     * d: 2C + 1 sums, then mean and invstd in double */
    size_t N, C, HW;
    int rc = prepare(k, l->x, &N, &C, &HW, err);
    if (rc < 0)
        return rc;
    float *x = k->scratch->f[0], *v = k->scratch->f[1];
    float *gamma = v, *beta = v + C, *smean = v + 2 * C, *sinv = v + 3 * C, *rm = v + 4 * C,
          *rv = v + 5 * C;
    double *sums = k->scratch->d, *mean = sums + 2 * C + 1, *inv = mean + C;
    if ((rc = k->ops->tensor_read(k->be, l->x, x, err)) < 0)
        return rc;
    for (size_t c = 0; c < C; c++) {
        double s = 0, q = 0;
        for (size_t i = 0; i < N; i++) {
            const float *p = x + (i * C + c) * HW;
            for (size_t j = 0; j < HW; j++) {
                s += p[j];
                q += (double)p[j] * p[j];
            }
        }
        sums[c] = s;
        sums[C + c] = q;
    }
    sums[2 * C] = (double)(N * HW);
    if ((rc = k->sync(k->sync_ctx, sums, 2 * C + 1, err)) < 0)
        return rc;
    const double cnt = sums[2 * C];
    if (cnt < 2)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "synchronised batchnorm: %.0f value(s) per channel over all ranks; "
                        "training needs more than 1",
                        cnt);
    if ((rc = vec_read(k, l->gamma, gamma, err)) < 0 ||
        (rc = vec_read(k, l->beta, beta, err)) < 0 ||
        (rc = vec_read(k, l->running_mean, rm, err)) < 0 ||
        (rc = vec_read(k, l->running_var, rv, err)) < 0)
        return rc;
    for (size_t c = 0; c < C; c++) {
        double mu = sums[c] / cnt, var = sums[C + c] / cnt - mu * mu;
        if (var < 0)
            var = 0;
        mean[c] = mu;
        inv[c] = 1.0 / sqrt(var + k->eps);
        smean[c] = (float)mu;
        sinv[c] = (float)inv[c];
        rm[c] = (float)((1.0 - k->momentum) * rm[c] + k->momentum * mu);
        rv[c] = (float)((1.0 - k->momentum) * rv[c] + k->momentum * var * cnt / (cnt - 1.0));
    }
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) {
            float *p = x + (i * C + c) * HW;
            const double a = inv[c] * gamma[c], b = beta[c] - mean[c] * a;
            for (size_t j = 0; j < HW; j++) {
                float y = (float)(p[j] * a + b);
                p[j] = l->relu && !(y > 0) ? 0.0f : y;
            }
        }
    if ((rc = k->ops->tensor_write(k->be, l->y, x, err)) < 0 ||
        (rc = k->ops->tensor_write(k->be, l->save_mean, smean, err)) < 0 ||
        (rc = k->ops->tensor_write(k->be, l->save_invstd, sinv, err)) < 0 ||
        (rc = k->ops->tensor_write(k->be, l->running_mean, rm, err)) < 0)
        return rc;
    return k->ops->tensor_write(k->be, l->running_var, rv, err);
}

int ptc__syncbn_backward(const ptc__syncbn_ctx *k, const ptc__syncbn_layer *l, ptc_error *err)
{
    size_t N, C, HW;
    int rc = prepare(k, l->x, &N, &C, &HW, err);
    if (rc < 0)
        return rc;
    const size_t n = N * C * HW;
    float *x = k->scratch->f[0], *g = k->scratch->f[1], *y = k->scratch->f[2];
    double *sums = k->scratch->d, *local = sums + 2 * C + 1;
    if ((rc = k->ops->tensor_read(k->be, l->x, x, err)) < 0 ||
        (rc = k->ops->tensor_read(k->be, l->dy, g, err)) < 0 ||
        (l->y && (rc = k->ops->tensor_read(k->be, l->y, y, err)) < 0))
        return rc;
    if (l->y)
        for (size_t i = 0; i < n; i++)
            g[i] = y[i] > 0 ? g[i] : 0.0f;
    /* y's scratch is free now: the per-channel vectors live there */
    float *gamma = y, *smean = y + C, *sinv = y + 2 * C, *dgamma = y + 3 * C, *dbeta = y + 4 * C;
    if ((rc = vec_read(k, l->gamma, gamma, err)) < 0 ||
        (rc = vec_read(k, l->save_mean, smean, err)) < 0 ||
        (rc = vec_read(k, l->save_invstd, sinv, err)) < 0)
        return rc;
    for (size_t c = 0; c < C; c++) {
        double sg = 0, sgx = 0;
        for (size_t i = 0; i < N; i++) {
            const float *pg = g + (i * C + c) * HW, *px = x + (i * C + c) * HW;
            for (size_t j = 0; j < HW; j++) {
                sg += pg[j];
                sgx += (double)pg[j] * ((double)px[j] - smean[c]);
            }
        }
        sums[c] = local[c] = sg;
        sums[C + c] = local[C + c] = sgx;
    }
    sums[2 * C] = (double)(N * HW);
    if ((rc = k->sync(k->sync_ctx, sums, 2 * C + 1, err)) < 0)
        return rc;
    const double cnt = sums[2 * C];
    for (size_t c = 0; c < C; c++) {
        dgamma[c] = (float)(local[C + c] * sinv[c]);
        dbeta[c] = (float)local[c];
    }
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++) {
            float *pg = g + (i * C + c) * HW;
            const float *px = x + (i * C + c) * HW;
            const double is = sinv[c], a = gamma[c] * is, mg = sums[c] / cnt,
                         mgx = sums[C + c] / cnt * is * is;
            for (size_t j = 0; j < HW; j++)
                pg[j] = (float)(a * (pg[j] - mg - ((double)px[j] - smean[c]) * mgx));
        }
    if ((rc = k->ops->tensor_write(k->be, l->dx, g, err)) < 0 ||
        (rc = k->ops->tensor_write(k->be, l->dgamma, dgamma, err)) < 0)
        return rc;
    return k->ops->tensor_write(k->be, l->dbeta, dbeta, err);
}
