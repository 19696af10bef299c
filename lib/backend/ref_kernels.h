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

/* The forward's register tiles (shared by both instances, hence the guard): CONV_KT output
 * channels by CONV_JT columns of the unfolding, each sum in a lane of its own and run over q in
 * order, so that every output gets exactly the operations of a plain sum over q (a product of
 * doubles, then an addition, never fused: -std=c11 keeps contraction off) and the same bits; the
 * tile only lets independent sums run side by side instead of one after another. The unfolding is
 * packed in panels of CONV_JT columns ([panel][q][CONV_JT], zero past the last column), so that a
 * tile reads contiguous memory. Built for AVX2 too where the compiler can pick at run time. */
#ifndef PTC_REF_CONV_TILE
#define PTC_REF_CONV_TILE
#define CONV_KT 8
#define CONV_JT 4
typedef double ptc__ref_v4d __attribute__((vector_size(CONV_JT * sizeof(double))));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define REF_TILE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define REF_TILE_CLONES
#endif
#endif

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

/* Columns j0 .. j0+jn-1 of the unfolding of the block that starts at image n0 (column j is image
 * n0 + j / P, output pixel j % P), into panel[q * CONV_JT + (j - j0)]. */
static void FN(im2col_cols)(const ptc__conv_shape *s, const REAL *x, int64_t n0, int64_t j0,
                            int64_t jn, double *panel)
{
    const int64_t P = (int64_t)s->oh * s->ow;
    for (int64_t jj = 0; jj < jn; jj++) {
        const int64_t b = (j0 + jj) / P, p = (j0 + jj) % P, oh = p / s->ow, ow = p % s->ow;
        const REAL *xn = x + (n0 + b) * s->c * s->h * s->w;
        for (int64_t c = 0; c < s->c; c++)
            for (int64_t r = 0; r < s->r; r++) {
                const int64_t ih = oh * s->stride - s->pad + r;
                const int row_in = ih >= 0 && ih < s->h;
                for (int64_t sx = 0; sx < s->s; sx++) {
                    const int64_t q = (c * s->r + r) * s->s + sx, iw = ow * s->stride - s->pad + sx;
                    double v = 0.0;
                    if (row_in && iw >= 0 && iw < s->w)
                        v = xn[(c * s->h + ih) * s->w + iw];
                    panel[q * CONV_JT + jj] = v;
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

/* acc[i] = the sums over q of w[i][q] * panel[q][0 .. CONV_JT) (w[i] a row of Q weights). */
REF_TILE_CLONES
static void FN(conv_tile)(const REAL *const w[CONV_KT], int64_t Q, const double *panel,
                          ptc__ref_v4d acc[CONV_KT])
{
    ptc__ref_v4d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
    const REAL *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3], *w4 = w[4], *w5 = w[5], *w6 = w[6],
               *w7 = w[7];
    for (int64_t q = 0; q < Q; q++) {
        ptc__ref_v4d c;
        memcpy(&c, panel + q * CONV_JT, sizeof c);
        a0 += (double)w0[q] * c;
        a1 += (double)w1[q] * c;
        a2 += (double)w2[q] * c;
        a3 += (double)w3[q] * c;
        a4 += (double)w4[q] * c;
        a5 += (double)w5[q] * c;
        a6 += (double)w6[q] * c;
        a7 += (double)w7[q] * c;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
    acc[4] = a4;
    acc[5] = a5;
    acc[6] = a6;
    acc[7] = a7;
}

/* The tile of a block narrower than a panel (the deepest layers of one image: one column): lanes
 * are CONV_JT output channels instead, acc[v][l] = the sum over q of w[v JT + l][q] * col[q], so
 * that no lane is wasted on padding columns. Same operations in the same order per output. */
REF_TILE_CLONES
static void FN(conv_tile_k)(const REAL *w, int64_t Q, const double *col, ptc__ref_v4d acc[4])
{
    ptc__ref_v4d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int64_t q = 0; q < Q; q++) {
        const REAL *p = w + q;
        const double c = col[q * CONV_JT];
        a0 += (ptc__ref_v4d){p[0], p[Q], p[2 * Q], p[3 * Q]} * c;
        a1 += (ptc__ref_v4d){p[4 * Q], p[5 * Q], p[6 * Q], p[7 * Q]} * c;
        a2 += (ptc__ref_v4d){p[8 * Q], p[9 * Q], p[10 * Q], p[11 * Q]} * c;
        a3 += (ptc__ref_v4d){p[12 * Q], p[13 * Q], p[14 * Q], p[15 * Q]} * c;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* scratch: Q * (nb * P + CONV_JT) doubles: the unfolding of a block, in panels. */
static void FN(conv_fwd)(const ptc__conv_shape *s, const REAL *x, const REAL *w, REAL *y,
                         int64_t nb, double *scratch, int nt)
{
    const int64_t Q = (int64_t)s->c * s->r * s->s, P = (int64_t)s->oh * s->ow, K = s->k;
    double *col = scratch;
    for (int64_t n0 = 0; n0 < s->n; n0 += nb) {
        const int64_t m = s->n - n0 < nb ? s->n - n0 : nb, J = m * P;
        const int64_t panels = (J + CONV_JT - 1) / CONV_JT;
        /* column j at col[(j / JT) Q JT + q JT + j % JT]; the last panel's spare columns zero */
        for (int64_t j = J; j < panels * CONV_JT; j++)
            for (int64_t q = 0; q < Q; q++)
                col[(j / CONV_JT) * Q * CONV_JT + q * CONV_JT + j % CONV_JT] = 0.0;
        for (int64_t j0 = 0; j0 < J; j0 += CONV_JT) {
            const int64_t jn = J - j0 < CONV_JT ? J - j0 : CONV_JT;
            FN(im2col_cols)(s, x, n0, j0, jn, col + (j0 / CONV_JT) * Q * CONV_JT);
        }
        if (J < CONV_JT && K % (4 * CONV_JT) == 0) { /* channels in the lanes */
            PAR_FOR(nt)
            for (int64_t k0 = 0; k0 < K; k0 += 4 * CONV_JT)
                for (int64_t j = 0; j < J; j++) {
                    ptc__ref_v4d acc[4];
                    FN(conv_tile_k)(w + k0 * Q, Q, col + j, acc);
                    const int64_t b = j / P, p = j % P;
                    for (int i = 0; i < 4 * CONV_JT; i++)
                        y[((n0 + b) * K + k0 + i) * P + p] = (REAL)acc[i / CONV_JT][i % CONV_JT];
                }
            continue;
        }
        PAR_FOR(nt)
        for (int64_t k0 = 0; k0 < K; k0 += CONV_KT) {
            const int kn = K - k0 < CONV_KT ? (int)(K - k0) : CONV_KT;
            const REAL *wr[CONV_KT];
            for (int i = 0; i < CONV_KT; i++) /* rows past K repeat the last; never stored */
                wr[i] = w + (k0 + (i < kn ? i : kn - 1)) * Q;
            for (int64_t pn = 0; pn < panels; pn++) {
                ptc__ref_v4d acc[CONV_KT];
                FN(conv_tile)(wr, Q, col + pn * Q * CONV_JT, acc);
                for (int64_t jj = 0; jj < CONV_JT && pn * CONV_JT + jj < J; jj++) {
                    const int64_t j = pn * CONV_JT + jj, b = j / P, p = j % P;
                    for (int i = 0; i < kn; i++)
                        y[((n0 + b) * K + k0 + i) * P + p] = (REAL)acc[i][jj];
                }
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
