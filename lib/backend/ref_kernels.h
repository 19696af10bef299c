/*
 * ref_kernels.h - the arithmetic of the reference backend, written once for an element type and
 * included twice by ref.c (no include guard on purpose):
 *
 *     #define REAL float           the element type of every tensor
 *     #define FN(name) name##_f32  the suffix that keeps the two instances apart
 *     #define FMA fmaf             fused multiply-add of REAL (torch's add(x, alpha=a) is one)
 *     #include "backend/ref_kernels.h"
 *
 * These functions only compute: ref.c has checked every shape, role and aliasing rule, and hands
 * in the scratch memory (doubles) and the number of threads (PAR_FOR, SIMD and THREAD_ID come
 * from ref.c).
 *
 * Precision. Every reduction (convolution, linear, batchnorm statistics and gradients, average
 * pool) is accumulated in double and rounded to REAL once at the end. For float32 each product of
 * two floats is exact in double, so these results are closer to the exact value than torch's
 * float32 kernels (which accumulate in float with blocking). Elementwise operations (add,
 * accumulate, relu, the scatter of maxpool's backward, SGD) are done in REAL in torch's order, so
 * they match torch bit for bit.
 *
 * Determinism. A thread owns whole output rows or planes, and every sum runs in a fixed order
 * that does not depend on the number of threads: results are the same bits for any thread count.
 */

/* ---- elementwise ----------------------------------------------------------------------------- */

static void FN(fill)(REAL *y, int64_t n, double value)
{
    REAL v = (REAL)value;
    for (int64_t i = 0; i < n; i++)
        y[i] = v;
}

/* torch.relu is clamp_min(x, 0): negative values become +0, -0.0 and NaN pass unchanged. */
static inline REAL FN(relu1)(REAL v)
{
    return v < 0 ? (REAL)0 : v;
}

static void FN(add)(const REAL *a, const REAL *b, REAL *y, int64_t n, int relu)
{
    for (int64_t i = 0; i < n; i++) {
        REAL v = a[i] + b[i];
        y[i] = relu ? FN(relu1)(v) : v;
    }
}

static void FN(accumulate)(const REAL *x, REAL *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void FN(relu_fwd)(const REAL *x, REAL *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = FN(relu1)(x[i]);
}

/* torch's threshold_backward(dy, y, 0): y <= 0 ? 0 : dy (a NaN output lets the gradient pass). */
static void FN(relu_bwd)(const REAL *y, const REAL *dy, REAL *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = y[i] <= 0 ? (REAL)0 : dy[i];
}

/* ---- convolution -------------------------------------------------------------------------------
 * A block of nb images (ref.c chooses nb so that a block has a few hundred output pixels) is
 * unfolded (im2col) into a matrix with Q = C*R*S rows and J = nb*OH*OW columns, column
 * j = (image in block) * P + output pixel, P = OH*OW, with zeros where a window reads padding;
 * with dyt[k][j], the output gradient of the block laid out the same way:
 *     forward      y[k][j]    = sum_q w[k][q] col[q][j]
 *     data grad    dcol[q][j] = sum_k w[k][q] dyt[k][j], folded back onto dx (col2im)
 *     weight grad  dw[k][q]   = sum over blocks, sum_j dyt[k][j] col[q][j]
 * Each is written with the innermost loop running over contiguous memory without a loop-carried
 * dependency (an axpy), so that it is reasonably fast without being clever; working on a block
 * of images keeps those loops long where the images are small (the deep layers of ResNet). */

/* Writes element (q, j) of the unfolding of images n0 .. n0+nb-1 at col[q * ldq + j * ldj]. */
static void FN(im2col)(const ptc__conv_shape *s, const REAL *x, int64_t n0, int64_t nb, double *col,
                       int64_t ldq, int64_t ldj)
{
    const int64_t P = (int64_t)s->oh * s->ow;
    for (int64_t b = 0; b < nb; b++) {
        const REAL *xn = x + (n0 + b) * s->c * s->h * s->w;
        for (int64_t c = 0; c < s->c; c++)
            for (int64_t r = 0; r < s->r; r++)
                for (int64_t sx = 0; sx < s->s; sx++) {
                    const int64_t q = (c * s->r + r) * s->s + sx;
                    for (int64_t oh = 0; oh < s->oh; oh++) {
                        const int64_t ih = oh * s->stride - s->pad + r;
                        const int row_in = ih >= 0 && ih < s->h;
                        for (int64_t ow = 0; ow < s->ow; ow++) {
                            const int64_t iw = ow * s->stride - s->pad + sx;
                            double v = 0.0;
                            if (row_in && iw >= 0 && iw < s->w)
                                v = xn[(c * s->h + ih) * s->w + iw];
                            col[q * ldq + (b * P + oh * s->ow + ow) * ldj] = v;
                        }
                    }
                }
    }
}

/* dyt[k][j] = dy[n0 + j / P][k][j % P] for the nb images of a block. */
static void FN(gather_dy)(const ptc__conv_shape *s, const REAL *dy, int64_t n0, int64_t nb,
                          double *dyt)
{
    const int64_t P = (int64_t)s->oh * s->ow, J = nb * P;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t k = 0; k < s->k; k++) {
            const REAL *src = dy + ((n0 + b) * s->k + k) * P;
            for (int64_t p = 0; p < P; p++)
                dyt[k * J + b * P + p] = src[p];
        }
}

/* scratch: (Q + nt) * nb * P doubles: the columns, and one row of sums per thread. */
static void FN(conv_fwd)(const ptc__conv_shape *s, const REAL *x, const REAL *w, REAL *y,
                         int64_t nb, double *scratch, int nt)
{
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow;
    double *col = scratch, *sums = scratch + Q * nb * P;
    for (int64_t n0 = 0; n0 < s->n; n0 += nb) {
        const int64_t m = s->n - n0 < nb ? s->n - n0 : nb, J = m * P;
        FN(im2col)(s, x, n0, m, col, J, 1);
        PAR_FOR(nt)
        for (int64_t k = 0; k < s->k; k++) {
            double *acc = sums + (int64_t)THREAD_ID() * nb * P;
            for (int64_t j = 0; j < J; j++)
                acc[j] = 0.0;
            for (int64_t q = 0; q < Q; q++) {
                const double wv = w[k * Q + q], *cq = col + q * J;
                SIMD()
                for (int64_t j = 0; j < J; j++)
                    acc[j] += wv * cq[j];
            }
            for (int64_t b = 0; b < m; b++) {
                REAL *yk = y + ((n0 + b) * s->k + k) * P;
                for (int64_t p = 0; p < P; p++)
                    yk[p] = (REAL)acc[b * P + p];
            }
        }
    }
}

/* scratch: (K + Q) * nb * P + nt * H * W doubles: dyt, dcol, and one plane of sums per thread. */
static void FN(conv_bwd_data)(const ptc__conv_shape *s, const REAL *dy, const REAL *w, REAL *dx,
                              int64_t nb, double *scratch, int nt)
{
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow;
    const int64_t HW = (int64_t)s->h * s->w;
    double *dyt = scratch, *dcol = dyt + s->k * nb * P, *planes = dcol + Q * nb * P;
    for (int64_t n0 = 0; n0 < s->n; n0 += nb) {
        const int64_t m = s->n - n0 < nb ? s->n - n0 : nb, J = m * P;
        FN(gather_dy)(s, dy, n0, m, dyt);
        PAR_FOR(nt)
        for (int64_t q = 0; q < Q; q++) {
            double *dq = dcol + q * J;
            for (int64_t j = 0; j < J; j++)
                dq[j] = 0.0;
            for (int64_t k = 0; k < s->k; k++) {
                const double wv = w[k * Q + q], *dk = dyt + k * J;
                SIMD()
                for (int64_t j = 0; j < J; j++)
                    dq[j] += wv * dk[j];
            }
        }
        /* col2im: every (q, j) that read an input pixel gives its gradient back to it. */
        PAR_FOR(nt)
        for (int64_t bc = 0; bc < m * s->c; bc++) {
            const int64_t b = bc / s->c, c = bc % s->c;
            double *acc = planes + (int64_t)THREAD_ID() * HW;
            for (int64_t i = 0; i < HW; i++)
                acc[i] = 0.0;
            for (int64_t r = 0; r < s->r; r++)
                for (int64_t sx = 0; sx < s->s; sx++) {
                    const double *dq = dcol + ((c * s->r + r) * s->s + sx) * J + b * P;
                    for (int64_t oh = 0; oh < s->oh; oh++) {
                        const int64_t ih = oh * s->stride - s->pad + r;
                        if (ih < 0 || ih >= s->h)
                            continue;
                        for (int64_t ow = 0; ow < s->ow; ow++) {
                            const int64_t iw = ow * s->stride - s->pad + sx;
                            if (iw >= 0 && iw < s->w)
                                acc[ih * s->w + iw] += dq[oh * s->ow + ow];
                        }
                    }
                }
            REAL *dxp = dx + ((n0 + b) * s->c + c) * HW;
            for (int64_t i = 0; i < HW; i++)
                dxp[i] = (REAL)acc[i];
        }
    }
}

/* scratch: K * Q + nb * P * Q + K * nb * P doubles: the sums, the columns transposed (colt[j][q])
 * and dyt. Every weight sums over the blocks in order, then over j. */
static void FN(conv_bwd_weight)(const ptc__conv_shape *s, const REAL *x, const REAL *dy, REAL *dw,
                                int64_t nb, double *scratch, int nt)
{
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow, K = s->k;
    double *acc = scratch, *colt = acc + K * Q, *dyt = colt + nb * P * Q;
    for (int64_t i = 0; i < K * Q; i++)
        acc[i] = 0.0;
    for (int64_t n0 = 0; n0 < s->n; n0 += nb) {
        const int64_t m = s->n - n0 < nb ? s->n - n0 : nb, J = m * P;
        FN(im2col)(s, x, n0, m, colt, 1, Q);
        FN(gather_dy)(s, dy, n0, m, dyt);
        PAR_FOR(nt)
        for (int64_t k = 0; k < K; k++) {
            double *ak = acc + k * Q;
            for (int64_t j = 0; j < J; j++) {
                const double d = dyt[k * J + j], *cj = colt + j * Q;
                SIMD()
                for (int64_t q = 0; q < Q; q++)
                    ak[q] += d * cj[q];
            }
        }
    }
    for (int64_t i = 0; i < K * Q; i++)
        dw[i] = (REAL)acc[i];
}

/* ---- batch normalization ------------------------------------------------------------------------
 * Channel c of x [N][C][HW] holds M = N * HW values; the threads split the channels. */

static void FN(bn_fwd_train)(int64_t N, int64_t C, int64_t HW, double eps, double momentum,
                             int relu, const REAL *x, const REAL *gamma, const REAL *beta, REAL *y,
                             REAL *save_mean, REAL *save_invstd, REAL *running_mean,
                             REAL *running_var, int nt)
{
    const int64_t M = N * HW;
    PAR_FOR(nt)
    for (int64_t c = 0; c < C; c++) {
        double sum = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const REAL *xc = x + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++)
                sum += xc[i];
        }
        const double mean = sum / (double)M;
        /* Two passes: the squared deviations from the mean, not E[x^2] - E[x]^2. */
        double ssd = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const REAL *xc = x + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) {
                double d = xc[i] - mean;
                ssd += d * d;
            }
        }
        const double var = ssd / (double)M;                /* biased: normalises */
        const double var_unbiased = ssd / (double)(M - 1); /* enters the running variance */
        const double invstd = 1.0 / sqrt(var + eps);
        const double g = gamma[c], b = beta[c];
        for (int64_t n = 0; n < N; n++) {
            const REAL *xc = x + (n * C + c) * HW;
            REAL *yc = y + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) {
                REAL v = (REAL)((xc[i] - mean) * invstd * g + b);
                yc[i] = relu ? FN(relu1)(v) : v;
            }
        }
        save_mean[c] = (REAL)mean;
        save_invstd[c] = (REAL)invstd;
        /* torch: momentum * x + (1 - momentum) * r, in double (acc_type of float on the CPU). */
        running_mean[c] = (REAL)(momentum * mean + (1.0 - momentum) * (double)running_mean[c]);
        running_var[c] =
            (REAL)(momentum * var_unbiased + (1.0 - momentum) * (double)running_var[c]);
    }
}

static void FN(bn_fwd_eval)(int64_t N, int64_t C, int64_t HW, double eps, int relu, const REAL *x,
                            const REAL *gamma, const REAL *beta, const REAL *running_mean,
                            const REAL *running_var, REAL *y, int nt)
{
    PAR_FOR(nt)
    for (int64_t c = 0; c < C; c++) {
        const double mean = running_mean[c], invstd = 1.0 / sqrt((double)running_var[c] + eps);
        const double g = gamma[c], b = beta[c];
        for (int64_t n = 0; n < N; n++) {
            const REAL *xc = x + (n * C + c) * HW;
            REAL *yc = y + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) {
                REAL v = (REAL)((xc[i] - mean) * invstd * g + b);
                yc[i] = relu ? FN(relu1)(v) : v;
            }
        }
    }
}

/* torch's batch_norm_backward for training mode, with xhat = (x - mean) invstd:
 *     dbeta = sum(dy'), dgamma = sum(dy' (x - mean)) invstd,
 *     dx = (dy' - sum(dy') / M - (x - mean) sum(dy' (x - mean)) invstd^2 / M) invstd gamma,
 * where dy' is dy masked by y <= 0 when relu was fused (y != NULL). */
static void FN(bn_bwd)(int64_t N, int64_t C, int64_t HW, const REAL *x, const REAL *y,
                       const REAL *dy, const REAL *gamma, const REAL *save_mean,
                       const REAL *save_invstd, REAL *dx, REAL *dgamma, REAL *dbeta, int nt)
{
    const int64_t M = N * HW;
    PAR_FOR(nt)
    for (int64_t c = 0; c < C; c++) {
        const double mean = save_mean[c], invstd = save_invstd[c], g = gamma[c];
        double sum = 0.0, dotp = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const int64_t o = (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) {
                double d = (y && y[o + i] <= 0) ? 0.0 : (double)dy[o + i];
                sum += d;
                dotp += (x[o + i] - mean) * d;
            }
        }
        const double proj = dotp * invstd * invstd / (double)M, grad_mean = sum / (double)M;
        for (int64_t n = 0; n < N; n++) {
            const int64_t o = (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) {
                double d = (y && y[o + i] <= 0) ? 0.0 : (double)dy[o + i];
                dx[o + i] = (REAL)((d - grad_mean - (x[o + i] - mean) * proj) * invstd * g);
            }
        }
        dgamma[c] = (REAL)(dotp * invstd);
        dbeta[c] = (REAL)sum;
    }
}

/* ---- pooling --------------------------------------------------------------------------------- */

/* torch's max_pool2d window at (oh, ow) of one plane: the maximum starts at -inf and is replaced
 * by a larger value or a NaN, scanning the in-bounds part of the window in row-major order, so a
 * tie keeps the first maximum and padding is never chosen. Returns the index in the plane. */
static int64_t FN(pool_argmax)(const ptc__pool_shape *s, const REAL *xp, int64_t oh, int64_t ow,
                               REAL *max)
{
    int64_t ih0 = oh * s->stride - s->pad, iw0 = ow * s->stride - s->pad;
    int64_t ih1 = ih0 + s->r < s->h ? ih0 + s->r : s->h;
    int64_t iw1 = iw0 + s->s < s->w ? iw0 + s->s : s->w;
    if (ih0 < 0)
        ih0 = 0;
    if (iw0 < 0)
        iw0 = 0;
    int64_t best = ih0 * s->w + iw0;
    REAL m = (REAL)-INFINITY;
    for (int64_t ih = ih0; ih < ih1; ih++)
        for (int64_t iw = iw0; iw < iw1; iw++) {
            REAL v = xp[ih * s->w + iw];
            if (v > m || isnan(v)) {
                m = v;
                best = ih * s->w + iw;
            }
        }
    *max = m;
    return best;
}

static void FN(maxpool_fwd)(const ptc__pool_shape *s, const REAL *x, REAL *y, int nt)
{
    const int64_t planes = (int64_t)s->n * s->c, HW = (int64_t)s->h * s->w;
    const int64_t OHW = (int64_t)s->oh * s->ow;
    PAR_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oh = 0; oh < s->oh; oh++)
            for (int64_t ow = 0; ow < s->ow; ow++)
                FN(pool_argmax)(s, x + pl * HW, oh, ow, &y[pl * OHW + oh * s->ow + ow]);
}

/* The argmax is found again from x (the same scan as forward, so the same element); gradients of
 * overlapping windows are added in REAL in row-major order of the outputs, as torch does. */
static void FN(maxpool_bwd)(const ptc__pool_shape *s, const REAL *x, const REAL *dy, REAL *dx,
                            int nt)
{
    const int64_t planes = (int64_t)s->n * s->c, HW = (int64_t)s->h * s->w;
    const int64_t OHW = (int64_t)s->oh * s->ow;
    PAR_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++) {
        REAL *dxp = dx + pl * HW;
        REAL unused;
        for (int64_t i = 0; i < HW; i++)
            dxp[i] = 0;
        for (int64_t oh = 0; oh < s->oh; oh++)
            for (int64_t ow = 0; ow < s->ow; ow++)
                dxp[FN(pool_argmax)(s, x + pl * HW, oh, ow, &unused)] +=
                    dy[pl * OHW + oh * s->ow + ow];
    }
}

/* Global average pool: torch computes adaptive_avg_pool2d to 1x1 as x.mean((-1, -2)); its
 * backward is dy / (h * w) in the element type. */
static void FN(avgpool_fwd)(int64_t planes, int64_t HW, const REAL *x, REAL *y)
{
    for (int64_t pl = 0; pl < planes; pl++) {
        double sum = 0.0;
        for (int64_t i = 0; i < HW; i++)
            sum += x[pl * HW + i];
        y[pl] = (REAL)(sum / (double)HW);
    }
}

static void FN(avgpool_bwd)(int64_t planes, int64_t HW, const REAL *dy, REAL *dx)
{
    for (int64_t pl = 0; pl < planes; pl++) {
        REAL d = dy[pl] / (REAL)HW;
        for (int64_t i = 0; i < HW; i++)
            dx[pl * HW + i] = d;
    }
}

/* ---- linear: x [N][K], w [M][K], b [M] -> y [N][M] ----------------------------------------- */

static void FN(linear_fwd)(int64_t N, int64_t K, int64_t M, const REAL *x, const REAL *w,
                           const REAL *b, REAL *y)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)x[n * K + k] * w[m * K + k];
            y[n * M + m] = (REAL)(acc + b[m]);
        }
}

/* dx = dy w (when dx is not NULL), dw = dy^T x, db = the column sums of dy. */
static void FN(linear_bwd)(int64_t N, int64_t K, int64_t M, const REAL *x, const REAL *w,
                           const REAL *dy, REAL *dx, REAL *dw, REAL *db)
{
    if (dx)
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                double acc = 0.0;
                for (int64_t m = 0; m < M; m++)
                    acc += (double)dy[n * M + m] * w[m * K + k];
                dx[n * K + k] = (REAL)acc;
            }
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) {
            double acc = 0.0;
            for (int64_t n = 0; n < N; n++)
                acc += (double)dy[n * M + m] * x[n * K + k];
            dw[m * K + k] = (REAL)acc;
        }
        double acc = 0.0;
        for (int64_t n = 0; n < N; n++)
            acc += dy[n * M + m];
        db[m] = (REAL)acc;
    }
}

/* ---- SGD ----------------------------------------------------------------------------------------
 * torch.optim.SGD (foreach off, as on the CPU) for one parameter, every step in REAL like torch's
 * elementwise kernels, which compute a.add(b, alpha=s) as one fused multiply-add fma(b, s, a) and
 * cast the Python float hyperparameters to the element type first:
 *     d = g.add(p, alpha=wd)                        if wd != 0
 *     buf = clone(d)                                on the first step, else
 *     buf.mul_(momentum).add_(d, alpha=1-dampening)
 *     d = d.add(buf, alpha=momentum) if nesterov else buf      (when momentum != 0)
 *     p.add_(d, alpha=-lr) */
static void FN(sgd_step)(REAL *p, const REAL *g, REAL *buf, int64_t n, const ptc__sgd *h)
{
    const REAL wd = (REAL)h->weight_decay, mom = (REAL)h->momentum;
    const REAL keep = (REAL)(1.0 - h->dampening), neg_lr = (REAL)(-h->lr);
    for (int64_t i = 0; i < n; i++) {
        REAL d = g[i];
        if (h->weight_decay != 0)
            d = FMA(p[i], wd, d);
        if (h->momentum != 0) {
            if (h->first_step)
                buf[i] = d;
            else
                buf[i] = FMA(d, keep, buf[i] * mom);
            d = h->nesterov ? FMA(buf[i], mom, d) : buf[i];
        }
        p[i] = FMA(d, neg_lr, p[i]);
    }
}

/* ---- softmax cross-entropy ----------------------------------------------------------------------
 * ptc__cross_entropy's loop (lib/nn/state.c), expression for expression, so that a training step
 * through the xent op gives the bits of the host loss: the first maximum, lse in double, the
 * rows' losses summed in row order, (exp(z - lse) - onehot) / n rounded to REAL. Labels have been
 * checked. */
static void FN(xent)(const REAL *logits, const int64_t *labels, int n, int classes, REAL *dlogits,
                     double *loss, int64_t *correct)
{
    double total = 0;
    int64_t right = 0;
    for (int i = 0; i < n; i++) {
        const REAL *z = logits + (size_t)i * (size_t)classes;
        int64_t y = labels[i];
        int best = 0;
        double mx = z[0];
        for (int c = 1; c < classes; c++)
            if (z[c] > z[best])
                best = c;
        mx = z[best];
        double sum = 0;
        for (int c = 0; c < classes; c++)
            sum += exp((double)z[c] - mx);
        double lse = mx + log(sum);
        total += lse - (double)z[y];
        right += best == y;
        REAL *g = dlogits + (size_t)i * (size_t)classes;
        for (int c = 0; c < classes; c++)
            g[c] = (REAL)((exp((double)z[c] - lse) - (c == y ? 1.0 : 0.0)) / n);
    }
    *loss = total / n;
    *correct = right;
}
