/*
 * test_kernels_gpu.c - every launcher of kernels/ptc_kernels.h run on the GPU on random inputs and
 * compared with kernels/kmath.h run on the host (the arithmetic test_kmath checks against ref):
 * bit for bit for layout, elementwise, casts, pooling, the bias, SGD (single and multi-tensor)
 * and the augmentation; batch normalisation within 1e-5 relative to max(|host|, 1) (the device
 * sums in a different, fixed order). A NaN produced by arithmetic (add, accumulate) matches any
 * NaN: the GPU returns its canonical NaN where the host returns an operand's. The softmax
 * cross-entropy (xent) uses CUDA's double exp and log, which may differ from glibc's in the last
 * bit: its correct count must be equal, its dlogits within 1 float ulp (the exact matches are
 * counted and printed) and its mean loss within 1e-13 relative of the host's.
 *
 * Exits 77 when no GPU is found; prints "test_kernels_gpu: N checks, M failed" (one check per
 * compared array) and, for information, the time of a few kernels at ResNet-18 / CIFAR sizes.
 */
#include "kmath.h"
#include "ptc_kernels.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks, failures;
static cudaStream_t stream;

static void fail_rc(const char *what, int rc)
{
    fprintf(stderr, "%s: launcher returned %d (%s)\n", what, rc,
            cudaGetErrorString((cudaError_t)rc));
    exit(1);
}

#define RUN(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_)                                                                                   \
            fail_rc(#call, rc_);                                                                   \
    } while (0)

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    cuda_ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
}

static void *halloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void up(void *d, const void *h, size_t bytes)
{
    cuda_ok(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

/* Waits for the stream first: every launcher is asynchronous. */
static void down(void *h, const void *d, size_t bytes)
{
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda_ok(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rnd_f(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rnd64() >> 40) / (double)(1ull << 24));
}

static void fill_rand(float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_f(lo, hi);
}

enum { BITS, VAL, REL };

/* One check: device array got against host array want, n floats. */
static void cmp_f32(const char *what, const float *got, const float *want, int64_t n, int mode,
                    double tol)
{
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t a = ptc_km_f32_bits(got[i]), b = ptc_km_f32_bits(want[i]);
        int ok;
        if (mode == REL) {
            double d = fabs((double)got[i] - (double)want[i]), s = fabs((double)want[i]);
            s = s < 1 ? 1 : s;
            ok = d <= tol * s || a == b;
            if (d / s > worst)
                worst = d / s;
        } else {
            ok = a == b || (mode == VAL && got[i] != got[i] && want[i] != want[i]);
        }
        if (!ok && bad++ == 0)
            first = i;
    }
    checks++;
    if (bad) {
        failures++;
        fprintf(stderr,
                "FAIL %s: %lld of %lld differ; first [%lld]: gpu %.9g (0x%08X) != host %.9g "
                "(0x%08X)%s\n",
                what, (long long)bad, (long long)n, (long long)first, (double)got[first],
                (unsigned)ptc_km_f32_bits(got[first]), (double)want[first],
                (unsigned)ptc_km_f32_bits(want[first]), mode == REL ? " (relative check)" : "");
        if (mode == REL)
            fprintf(stderr, "     worst relative difference %.3g, tolerance %.1g\n", worst, tol);
    }
}

static void cmp_bytes(const char *what, const void *got, const void *want, size_t bytes)
{
    checks++;
    if (memcmp(got, want, bytes) != 0) {
        const unsigned char *a = got, *b = want;
        size_t i = 0;
        while (a[i] == b[i])
            i++;
        failures++;
        fprintf(stderr, "FAIL %s: first differing byte %zu: gpu 0x%02X != host 0x%02X\n", what, i,
                a[i], b[i]);
    }
}

/* ---- layout ---------------------------------------------------------------------------------- */

static void test_layout(void)
{
    const int64_t n = 3, c = 37, hw = 50, t = n * c * hw;
    float *h = halloc(4 * t), *want = halloc(4 * t), *got = halloc(4 * t);
    float *d0 = dalloc(4 * t), *d1 = dalloc(4 * t);
    fill_rand(h, t, -1, 1);
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t i = 0; i < hw; i++)
                want[(b * hw + i) * c + ch] = h[(b * c + ch) * hw + i];
    up(d0, h, 4 * t);
    RUN(ptc_k_nchw_to_nhwc(d0, d1, n, c, hw, stream));
    down(got, d1, 4 * t);
    cmp_f32("nchw_to_nhwc", got, want, t, BITS, 0);
    RUN(ptc_k_nhwc_to_nchw(d1, d0, n, c, hw, stream));
    down(got, d0, 4 * t);
    cmp_f32("nhwc_to_nchw", got, h, t, BITS, 0);
    free(h), free(want), free(got), cudaFree(d0), cudaFree(d1);
}

/* ---- elementwise ----------------------------------------------------------------------------- */

static void test_elementwise(void)
{
    const int64_t n = 100003; /* not a multiple of 4 */
    const float special[] = {0.0f, -0.0f, 1.0f,   -1.0f,   INFINITY, -INFINITY,
                             NAN,  -NAN,  1e-45f, -1e-45f, 3.4e38f,  -3.4e38f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    float *a = halloc(4 * n), *b = halloc(4 * n), *want = halloc(4 * n), *got = halloc(4 * n);
    float *da = dalloc(4 * (n + 1)), *db = dalloc(4 * (n + 1)), *dy = dalloc(4 * (n + 1));
    fill_rand(a, n, -2, 2);
    fill_rand(b, n, -2, 2);
    for (int i = 0; i < ns * ns; i++) {
        a[i] = special[i % ns];
        b[i] = special[i / ns];
    }
    char what[64];
    /* off = 0: float4 path; off = 1: every pointer misaligned, element path */
    for (int off = 0; off < 2; off++) {
        up(da + off, a, 4 * n);
        up(db + off, b, 4 * n);
        for (int relu = 0; relu < 2; relu++) {
            RUN(ptc_k_add(da + off, db + off, dy + off, n, relu, stream));
            down(got, dy + off, 4 * n);
            for (int64_t i = 0; i < n; i++)
                want[i] = ptc_km_add(a[i], b[i], relu);
            snprintf(what, sizeof what, "add relu=%d offset %d", relu, off);
            cmp_f32(what, got, want, n, VAL, 0);
        }
        RUN(ptc_k_relu_fwd(da + off, dy + off, n, stream));
        down(got, dy + off, 4 * n);
        for (int64_t i = 0; i < n; i++)
            want[i] = ptc_km_relu(a[i]);
        snprintf(what, sizeof what, "relu_fwd offset %d", off);
        cmp_f32(what, got, want, n, BITS, 0);
    }
    up(da, a, 4 * n);
    up(db, b, 4 * n);
    /* add in place: y aliases a */
    RUN(ptc_k_add(da, db, da, n, 1, stream));
    down(got, da, 4 * n);
    for (int64_t i = 0; i < n; i++)
        want[i] = ptc_km_add(a[i], b[i], 1);
    cmp_f32("add relu=1 in place", got, want, n, VAL, 0);

    up(da, a, 4 * n);
    RUN(ptc_k_accumulate(da, db, n, stream)); /* db = b + a */
    down(got, db, 4 * n);
    for (int64_t i = 0; i < n; i++)
        want[i] = ptc_km_accumulate(b[i], a[i]);
    cmp_f32("accumulate", got, want, n, VAL, 0);

    up(db, b, 4 * n);
    RUN(ptc_k_relu_bwd(da, db, db, n, stream)); /* dx aliases dy */
    down(got, db, 4 * n);
    for (int64_t i = 0; i < n; i++)
        want[i] = ptc_km_relu_bwd(a[i], b[i]);
    cmp_f32("relu_bwd in place", got, want, n, BITS, 0);

    RUN(ptc_k_scale(da, dy, n, 0.25f + 1.0f / 3.0f, stream));
    down(got, dy, 4 * n);
    for (int64_t i = 0; i < n; i++)
        want[i] = ptc_km_scale(a[i], 0.25f + 1.0f / 3.0f);
    cmp_f32("scale", got, want, n, VAL, 0);

    RUN(ptc_k_fill(dy, n, -3.5f, stream));
    down(got, dy, 4 * n);
    for (int64_t i = 0; i < n; i++)
        want[i] = -3.5f;
    cmp_f32("fill", got, want, n, BITS, 0);
    RUN(ptc_k_fill(dy, 0, 1.0f, stream)); /* a count of 0 launches nothing */
    free(a), free(b), free(want), free(got), cudaFree(da), cudaFree(db), cudaFree(dy);
}

/* ---- casts ---------------------------------------------------------------------------------- */

static void test_casts(void)
{
    const int64_t n = 1 << 20;
    float *x = halloc(4 * n), *fgot = halloc(4 * 65536), *fwant = halloc(4 * 65536);
    uint16_t *got = halloc(2 * n), *want = halloc(2 * n), *all = halloc(2 * 65536);
    float *dx = dalloc(4 * n);
    uint16_t *dh = dalloc(2 * n);
    for (int64_t i = 0; i < n; i++) {
        /* random words (NaNs and subnormals included), every 4th a tie */
        uint32_t u = (uint32_t)rnd64();
        if (i % 4 == 0)
            u = (u & 0xFFFF0000u) | 0x8000u;
        x[i] = ptc_km_bits_f32(u);
        want[i] = ptc_km_f32_to_bf16(x[i]);
    }
    up(dx, x, 4 * n);
    RUN(ptc_k_f32_to_bf16(dx, dh, n, stream));
    down(got, dh, 2 * n);
    cmp_bytes("f32_to_bf16", got, want, 2 * n);
    for (int i = 0; i < 65536; i++) {
        all[i] = (uint16_t)i;
        fwant[i] = ptc_km_bf16_to_f32((uint16_t)i);
    }
    up(dh, all, 2 * 65536);
    RUN(ptc_k_bf16_to_f32(dh, dx, 65536, stream));
    down(fgot, dx, 4 * 65536);
    cmp_bytes("bf16_to_f32 (all 65536)", fgot, fwant, 4 * 65536);
    free(x), free(fgot), free(fwant), free(got), free(want), free(all), cudaFree(dx), cudaFree(dh);
}

/* ---- pooling --------------------------------------------------------------------------------- */

static void maxpool_case(int n, int c, int h, int w, int r, int st, int pad)
{
    ptc_km_pool s = {
        n, c, h, w, r, r, st, pad, (h + 2 * pad - r) / st + 1, (w + 2 * pad - r) / st + 1};
    const int64_t nx = (int64_t)n * h * w * c, ny = (int64_t)n * s.oh * s.ow * c;
    float *x = halloc(4 * nx), *y = halloc(4 * ny), *dy = halloc(4 * ny), *dx = halloc(4 * nx);
    float *gy = halloc(4 * ny), *gdx = halloc(4 * nx);
    int32_t *am = halloc(4 * ny), *gam = halloc(4 * ny);
    float *d_x = dalloc(4 * nx), *d_y = dalloc(4 * ny), *d_dy = dalloc(4 * ny),
          *d_dx = dalloc(4 * nx);
    int32_t *d_am = dalloc(4 * ny);
    for (int64_t i = 0; i < nx; i++) {
        x[i] = (float)(int)(rnd64() % 4) - ((i % c) % 2 ? 10.0f : 0.0f); /* ties, negatives */
        if (rnd64() % 101 == 0)
            x[i] = NAN;
    }
    fill_rand(dy, ny, -1, 1);
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < s.oh; oy++)
            for (int ox = 0; ox < s.ow; ox++)
                for (int ch = 0; ch < c; ch++) {
                    int64_t o = (((int64_t)b * s.oh + oy) * s.ow + ox) * c + ch;
                    am[o] = ptc_km_maxpool_win(&s, x, b, oy, ox, ch, &y[o]);
                }
    for (int b = 0; b < n; b++)
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++)
                for (int ch = 0; ch < c; ch++)
                    dx[(((int64_t)b * h + iy) * w + ix) * c + ch] =
                        ptc_km_maxpool_bwd_elem(&s, dy, am, b, iy, ix, ch);
    up(d_x, x, 4 * nx);
    up(d_dy, dy, 4 * ny);
    RUN(ptc_k_maxpool_fwd(d_x, d_y, d_am, n, c, h, w, r, r, st, pad, s.oh, s.ow, stream));
    RUN(ptc_k_maxpool_bwd(d_dy, d_am, d_dx, n, c, h, w, r, r, st, pad, s.oh, s.ow, stream));
    down(gy, d_y, 4 * ny);
    down(gam, d_am, 4 * ny);
    down(gdx, d_dx, 4 * nx);
    char what[80];
    snprintf(what, sizeof what, "maxpool %dx%d s%d p%d [%d][%d][%d][%d]", r, r, st, pad, n, h, w,
             c);
    cmp_f32(what, gy, y, ny, BITS, 0);
    strcat(what, " argmax");
    cmp_bytes(what, gam, am, 4 * ny);
    snprintf(what, sizeof what, "maxpool_bwd %dx%d s%d p%d [%d][%d][%d][%d]", r, r, st, pad, n, h,
             w, c);
    cmp_f32(what, gdx, dx, nx, BITS, 0);
    free(x), free(y), free(dy), free(dx), free(gy), free(gdx), free(am), free(gam);
    cudaFree(d_x), cudaFree(d_y), cudaFree(d_dy), cudaFree(d_dx), cudaFree(d_am);
}

static void test_pool(void)
{
    maxpool_case(4, 64, 16, 16, 3, 2, 1);
    maxpool_case(3, 5, 9, 7, 3, 1, 1);
    maxpool_case(2, 33, 8, 8, 2, 2, 0);

    const int n = 8, c = 515, hw = 16;
    const int64_t t = (int64_t)n * hw * c;
    float *x = halloc(4 * t), *y = halloc(4 * n * c), *gy = halloc(4 * n * c);
    float *dx = halloc(4 * t), *gdx = halloc(4 * t);
    float *d_x = dalloc(4 * t), *d_y = dalloc(4 * n * c);
    fill_rand(x, t, -3, 3);
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            y[b * c + ch] = ptc_km_avgpool(x, b, c, hw, ch);
    up(d_x, x, 4 * t);
    RUN(ptc_k_avgpool_fwd(d_x, d_y, n, c, hw, stream));
    down(gy, d_y, 4 * n * c);
    cmp_f32("avgpool_fwd", gy, y, (int64_t)n * c, BITS, 0);
    for (int64_t i = 0; i < t; i++)
        dx[i] = ptc_km_avgpool_bwd(y[(i / ((int64_t)hw * c)) * c + i % c], hw);
    RUN(ptc_k_avgpool_bwd(d_y, d_x, n, c, hw, stream));
    down(gdx, d_x, 4 * t);
    cmp_f32("avgpool_bwd", gdx, dx, t, BITS, 0);
    free(x), free(y), free(gy), free(dx), free(gdx), cudaFree(d_x), cudaFree(d_y);
}

/* ---- batch normalisation --------------------------------------------------------------------- */

static void bn_case(int64_t rows, int c, float offset, int relu)
{
    const int64_t t = rows * c;
    const float eps = 1e-5f, mom = 0.1f;
    float *x = halloc(4 * t), *dy = halloc(4 * t), *y = halloc(4 * t), *dx = halloc(4 * t);
    float *gt = halloc(4 * t);
    float *p = halloc(4 * c * 16), *gp = halloc(4 * c * 16);
    /* parameter block: gamma beta mean var save_mean save_invstd rmean rvar dgamma dbeta invstd */
    float *gam = p, *bet = p + c, *mean = p + 2 * c, *var = p + 3 * c, *sm = p + 4 * c;
    float *si = p + 5 * c, *rm = p + 6 * c, *rv = p + 7 * c, *dg = p + 8 * c, *dbt = p + 9 * c;
    float *ivs = p + 10 * c;
    float *d_x = dalloc(4 * t), *d_dy = dalloc(4 * t), *d_y = dalloc(4 * t), *d_dx = dalloc(4 * t);
    float *d_p = dalloc(4 * c * 16);
    for (int64_t i = 0; i < t; i++) {
        int ch = (int)(i % c);
        x[i] = offset * (float)(ch % 7 + 1) + rnd_f(-2, 2) * (float)(ch % 5 + 1);
        dy[i] = rnd_f(-1, 1);
    }
    memset(p, 0, 4 * c * 16);
    for (int ch = 0; ch < c; ch++) {
        gam[ch] = rnd_f(0.5f, 1.5f);
        bet[ch] = rnd_f(-0.5f, 0.5f);
        rm[ch] = rnd_f(-1, 1);
        rv[ch] = rnd_f(0.5f, 2);
    }
    up(d_x, x, 4 * t);
    up(d_dy, dy, 4 * t);
    up(d_p, p, 4 * c * 16);
    float *D = d_p;
    RUN(ptc_k_bn_stats(d_x, rows, c, D + 2 * c, D + 3 * c, stream));
    RUN(ptc_k_bn_finish_stats(D + 2 * c, D + 3 * c, c, rows, eps, mom, D + 4 * c, D + 5 * c,
                              D + 6 * c, D + 7 * c, stream));
    RUN(ptc_k_bn_apply(d_x, D + 4 * c, D + 5 * c, D, D + c, d_y, rows, c, relu, stream));
    RUN(ptc_k_bn_bwd(d_x, relu ? d_y : NULL, d_dy, D, D + 4 * c, D + 5 * c, d_dx, D + 8 * c,
                     D + 9 * c, rows, c, stream));
    RUN(ptc_k_bn_invstd(D + 7 * c, D + 10 * c, c, eps, stream));
    /* host */
    for (int ch = 0; ch < c; ch++) {
        double s1 = 0, s2 = 0, k = x[ch];
        for (int64_t r = 0; r < rows; r++) {
            double d = (double)x[r * c + ch] - k;
            s1 += d;
            s2 += d * d;
        }
        ptc_km_bn_moments(s1, s2, k, rows, &mean[ch], &var[ch]);
        ptc_km_bn_finish(mean[ch], var[ch], rows, eps, mom, &sm[ch], &si[ch], &rm[ch], &rv[ch]);
        ivs[ch] = ptc_km_bn_invstd(rv[ch], eps);
    }
    for (int64_t i = 0; i < t; i++) {
        int ch = (int)(i % c);
        y[i] = ptc_km_bn_apply(x[i], sm[ch], si[ch], gam[ch], bet[ch], relu);
    }
    /* the backward's relu mask is the device's own forward output: a host y within rounding of
     * 0 would otherwise flip an element of the mask */
    float *ym = halloc(4 * t);
    down(ym, d_y, 4 * t);
    for (int ch = 0; ch < c; ch++) {
        double sum = 0, dotp = 0;
        for (int64_t r = 0; r < rows; r++) {
            double d = ptc_km_bn_dy(relu ? ym : NULL, dy, r * c + ch);
            sum += d;
            dotp += ((double)x[r * c + ch] - (double)sm[ch]) * d;
        }
        ptc_km_bn_bwd_params(sum, dotp, si[ch], &dg[ch], &dbt[ch]);
        for (int64_t r = 0; r < rows; r++) {
            int64_t i = r * c + ch;
            dx[i] = ptc_km_bn_dx(ptc_km_bn_dy(relu ? ym : NULL, dy, i), x[i], sm[ch], si[ch],
                                 gam[ch], sum, dotp, rows);
        }
    }
    down(gp, d_p, 4 * c * 16);
    char what[96];
    static const char *names[] = {"mean",        "var",          "save_mean",
                                  "save_invstd", "running_mean", "running_var",
                                  "dgamma",      "dbeta",        "invstd (eval)"};
    for (int k = 0; k < 9; k++) {
        snprintf(what, sizeof what, "bn rows %lld c %d offset %g relu %d: %s", (long long)rows, c,
                 (double)offset, relu, names[k]);
        cmp_f32(what, gp + (2 + k) * c, p + (2 + k) * c, c, REL, 1e-5);
    }
    down(gt, d_y, 4 * t);
    snprintf(what, sizeof what, "bn rows %lld c %d offset %g relu %d: y", (long long)rows, c,
             (double)offset, relu);
    cmp_f32(what, gt, y, t, REL, 1e-5);
    down(gt, d_dx, 4 * t);
    snprintf(what, sizeof what, "bn rows %lld c %d offset %g relu %d: dx", (long long)rows, c,
             (double)offset, relu);
    cmp_f32(what, gt, dx, t, REL, 1e-5);
    free(x), free(dy), free(y), free(dx), free(gt), free(p), free(gp), free(ym);
    cudaFree(d_x), cudaFree(d_dy), cudaFree(d_y), cudaFree(d_dx), cudaFree(d_p);
}

static void test_bn(void)
{
    bn_case(100, 64, 0.0f, 0);
    bn_case(20000, 70, 0.0f, 1); /* many chunks, c not a multiple of 32 */
    bn_case(128 * 8 * 8, 256, 5.0f, 1);
    bn_case(3000, 3, 100.0f, 0); /* |mean| >> std */
    bn_case(5, 33, 0.0f, 1);     /* fewer rows than row lanes; a slab of 1 channel */
}

/* ---- linear ---------------------------------------------------------------------------------- */

static void linear_case(int n, int m)
{
    float *y = halloc(4 * n * m), *b = halloc(4 * m), *want = halloc(4 * n * m);
    float *got = halloc(4 * n * m), *db = halloc(4 * m);
    float *d_y = dalloc(4 * n * m), *d_b = dalloc(4 * m);
    fill_rand(y, (int64_t)n * m, -2, 2);
    fill_rand(b, m, -1, 1);
    for (int i = 0; i < n * m; i++)
        want[i] = y[i] + b[i % m];
    up(d_y, y, 4 * n * m);
    up(d_b, b, 4 * m);
    RUN(ptc_k_bias_add(d_y, d_b, n, m, stream));
    down(got, d_y, 4 * n * m);
    cmp_f32("bias_add", got, want, (int64_t)n * m, BITS, 0);
    for (int j = 0; j < m; j++) {
        double acc = 0; /* ref's order: rows in order, in double, rounded once */
        for (int i = 0; i < n; i++)
            acc += want[i * m + j];
        db[j] = (float)acc;
    }
    RUN(ptc_k_bias_grad(d_y, d_b, n, m, stream));
    down(got, d_b, 4 * m);
    cmp_f32("bias_grad", got, db, m, BITS, 0);
    free(y), free(b), free(want), free(got), free(db), cudaFree(d_y), cudaFree(d_b);
}

static void test_linear(void)
{
    linear_case(512, 10);
    linear_case(7, 300); /* bias_grad over 3 blocks of 128 columns, the last one partial */
}

/* ---- SGD ------------------------------------------------------------------------------------- */

static void test_sgd(void)
{
    enum { T = 70, STEPS = 3 }; /* 70 tensors: the multi launch splits at 64 */
    int64_t n[T], total = 0, off[T];
    for (int i = 0; i < T; i++) {
        n[i] = i % 7 == 0 ? 1 : i % 5 == 0 ? 70000 + i : 1000 + 37 * i;
        if (i == 3)
            n[i] = 0; /* an empty parameter is skipped */
        off[i] = total;
        total += n[i];
    }
    float *p0 = halloc(4 * total), *g = halloc(4 * total * STEPS), *ph = halloc(4 * total);
    float *bh = halloc(4 * total), *got = halloc(4 * total);
    float *d_p = dalloc(4 * total), *d_g = dalloc(4 * total * STEPS), *d_b = dalloc(4 * total);
    for (int64_t i = 0; i < total; i++)
        p0[i] = rnd_f(-1, 1) * powf(10.0f, (float)(int)(rnd64() % 7) - 4.0f);
    for (int64_t i = 0; i < total * STEPS; i++)
        g[i] = rnd_f(-1, 1) * powf(10.0f, (float)(int)(rnd64() % 7) - 5.0f);
    up(d_g, g, 4 * total * STEPS);
    float *pp[T], *bb[T];
    const float *gg[T];
    for (int combo = 0; combo < 32; combo++) {
        const float lr = combo & 1 ? 0.0123f : 0.1f, mom = combo & 2 ? 0.9f : 0.0f;
        /* damp a double, as the backend holds it: (float)(1.0 - 0.9) differs from
         * (float)(1.0 - (double)(float)0.9), so a launcher that took a float would fail here */
        const double damp = combo & 4 ? 0.9 : 0.0;
        const float wd = combo & 16 ? 5e-4f : 0.0f;
        const int nest = (combo & 8) != 0, multi = combo % 3 != 0;
        memcpy(ph, p0, 4 * total);
        memset(bh, 0, 4 * total);
        up(d_p, p0, 4 * total);
        cuda_ok(cudaMemset(d_b, 0, 4 * total), "cudaMemset");
        for (int s = 0; s < STEPS; s++) {
            ptc_km_sgd_hp h = ptc_km_sgd_prepare(lr, mom, damp, wd, nest, s == 0);
            for (int64_t i = 0; i < total; i++)
                ptc_km_sgd(&ph[i], g[s * total + i], mom != 0 ? &bh[i] : NULL, &h);
            for (int i = 0; i < T; i++) {
                pp[i] = d_p + off[i];
                gg[i] = d_g + s * total + off[i];
                bb[i] = mom != 0 ? d_b + off[i] : NULL;
                if (!multi)
                    RUN(ptc_k_sgd(pp[i], gg[i], bb[i], n[i], lr, mom, damp, wd, nest, s == 0,
                                  stream));
            }
            if (multi)
                RUN(ptc_k_sgd_multi(T, pp, gg, bb, n, lr, mom, damp, wd, nest, s == 0, stream));
        }
        char what[96];
        snprintf(what, sizeof what, "sgd%s lr %g mom %g damp %g nest %d wd %g: p",
                 multi ? "_multi" : "", (double)lr, (double)mom, damp, nest, (double)wd);
        down(got, d_p, 4 * total);
        cmp_f32(what, got, ph, total, BITS, 0);
        if (mom != 0) {
            what[strlen(what) - 1] = 'b';
            down(got, d_b, 4 * total);
            cmp_f32(what, got, bh, total, BITS, 0);
        }
    }
    free(p0), free(g), free(ph), free(bh), free(got), cudaFree(d_p), cudaFree(d_g), cudaFree(d_b);
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

static int64_t ulp_dist(float a, float b)
{
    int64_t ia = (int32_t)ptc_km_f32_bits(a), ib = (int32_t)ptc_km_f32_bits(b);
    ia = ia < 0 ? (int64_t)INT32_MIN - ia : ia; /* monotonic integer order of floats */
    ib = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return ia > ib ? ia - ib : ib - ia;
}

static void xent_case(int n, int classes, float spread, int levels)
{
    const int64_t t = (int64_t)n * classes;
    float *z = halloc(4 * t), *gh = halloc(4 * t), *gd = halloc(4 * t);
    int64_t *y = halloc(8 * (size_t)n);
    for (int64_t i = 0; i < t; i++)
        z[i] = levels ? (float)(int)(rnd64() % (uint64_t)levels) * 0.25f : rnd_f(-spread, spread);
    for (int i = 0; i < n; i++)
        y[i] = (int64_t)(rnd64() % (uint64_t)classes);
    /* the host: kernels/xent.cu's composition of kmath.h */
    double total = 0;
    int64_t right_h = 0;
    for (int i = 0; i < n; i++) {
        const float *zr = z + (int64_t)i * classes;
        const int best = ptc_km_xent_argmax(zr, classes);
        const double lse = ptc_km_xent_lse(zr, classes, best);
        total += ptc_km_xent_row_loss(zr, lse, y[i]);
        right_h += best == y[i];
        for (int c = 0; c < classes; c++)
            gh[(int64_t)i * classes + c] = ptc_km_xent_grad(zr[c], lse, c == y[i], n);
    }
    const double loss_h = total / n;
    float *d_z = dalloc(4 * t), *d_g = dalloc(4 * t);
    int64_t *d_y = dalloc(8 * (size_t)n), *d_c = dalloc(8);
    double *d_rows = dalloc(8 * (size_t)n), *d_l = dalloc(8);
    int32_t *d_r = dalloc(4 * (size_t)n);
    up(d_z, z, 4 * t);
    up(d_y, y, 8 * (size_t)n);
    RUN(ptc_k_xent(d_z, d_y, n, classes, d_g, d_rows, d_r, d_l, d_c, stream));
    double loss_d;
    int64_t right_d;
    down(gd, d_g, 4 * t);
    down(&loss_d, d_l, 8);
    down(&right_d, d_c, 8);
    int64_t exact = 0, far = 0, first = -1;
    for (int64_t i = 0; i < t; i++) {
        int64_t u = ulp_dist(gd[i], gh[i]);
        exact += u == 0;
        if (u > 1 && far++ == 0)
            first = i;
    }
    checks += 3;
    if (far) {
        failures++;
        fprintf(stderr,
                "FAIL xent n %d classes %d: %lld dlogits more than 1 ulp off; first [%lld]: "
                "gpu %.9g != host %.9g\n",
                n, classes, (long long)far, (long long)first, (double)gd[first], (double)gh[first]);
    }
    if (right_d != right_h) {
        failures++;
        fprintf(stderr, "FAIL xent n %d classes %d: correct gpu %lld != host %lld\n", n, classes,
                (long long)right_d, (long long)right_h);
    }
    if (!(fabs(loss_d - loss_h) <= 1e-13 * fabs(loss_h))) {
        failures++;
        fprintf(stderr, "FAIL xent n %d classes %d: loss gpu %.17g != host %.17g\n", n, classes,
                loss_d, loss_h);
    }
    printf("xent n %d classes %d: loss gpu %.17g host %.17g, correct %lld, dlogits %lld of %lld "
           "bit-identical\n",
           n, classes, loss_d, loss_h, (long long)right_d, (long long)exact, (long long)t);
    free(z), free(gh), free(gd), free(y);
    cudaFree(d_z), cudaFree(d_g), cudaFree(d_y), cudaFree(d_c), cudaFree(d_rows), cudaFree(d_l);
    cudaFree(d_r);
}

static void test_xent(void)
{
    xent_case(1, 10, 3, 0);
    xent_case(512, 10, 3, 0);
    xent_case(500, 10, 80, 0); /* exp underflows */
    xent_case(257, 10, 0, 3);  /* ties: the first maximum */
    xent_case(64, 1000, 5, 0);
}

/* ---- augmentation ---------------------------------------------------------------------------- */

static void test_augment(void)
{
    enum { COUNT = 20, H = 32, W = 32, PAD = 4, N = 200 };
    const int64_t img_bytes = (int64_t)COUNT * 3 * H * W, t = (int64_t)N * H * W * 3;
    uint8_t *img = halloc(img_bytes), flip[N];
    int32_t idx[N];
    int8_t top[N], left[N];
    float lut[3 * 256], *want = halloc(4 * t), *got = halloc(4 * t);
    for (int64_t i = 0; i < img_bytes; i++)
        img[i] = (uint8_t)rnd64();
    fill_rand(lut, 3 * 256, -3, 3);
    for (int i = 0; i < N; i++) {
        idx[i] = (int32_t)(rnd64() % COUNT);
        top[i] = (int8_t)(i < 162 ? i / 18 : (int)(rnd64() % 9)); /* every offset and flip */
        left[i] = (int8_t)(i < 162 ? (i / 2) % 9 : (int)(rnd64() % 9));
        flip[i] = (uint8_t)(i < 162 ? i % 2 : (int)(rnd64() % 2));
    }
    for (int s = 0; s < N; s++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < 3; c++)
                    want[(((int64_t)s * H + y) * W + x) * 3 + c] =
                        ptc_km_augment(img + (int64_t)idx[s] * 3 * H * W, H, W, PAD, top[s],
                                       left[s], flip[s], lut, y, x, c);
    uint8_t *d_img = dalloc(img_bytes), *d_flip = dalloc(N);
    int32_t *d_idx = dalloc(4 * N);
    int8_t *d_top = dalloc(N), *d_left = dalloc(N);
    float *d_lut = dalloc(sizeof lut), *d_out = dalloc(4 * t);
    up(d_img, img, img_bytes);
    up(d_flip, flip, N);
    up(d_idx, idx, 4 * N);
    up(d_top, top, N);
    up(d_left, left, N);
    up(d_lut, lut, sizeof lut);
    RUN(ptc_k_augment(d_img, H, W, PAD, d_idx, d_top, d_left, d_flip, N, d_lut, d_out, stream));
    down(got, d_out, 4 * t);
    cmp_f32("augment", got, want, t, BITS, 0);
    free(img), free(want), free(got);
    cudaFree(d_img), cudaFree(d_flip), cudaFree(d_idx), cudaFree(d_top), cudaFree(d_left);
    cudaFree(d_lut), cudaFree(d_out);
}

/* ---- timing (information only) --------------------------------------------------------------- */

static void timing(void)
{
    /* the first stage of ResNet-18 on CIFAR at batch 512: [512][32][32][64] */
    const int64_t rows = 512 * 32 * 32, c = 64, t = rows * c;
    float *x = dalloc(4 * t), *y = dalloc(4 * t), *p = dalloc(4 * 8 * c);
    int32_t *am = dalloc(4 * t / 4);
    cudaEvent_t e0, e1;
    cuda_ok(cudaEventCreate(&e0), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&e1), "cudaEventCreate");
    RUN(ptc_k_fill(x, t, 0.5f, stream));
    RUN(ptc_k_fill(p, 8 * c, 1.0f, stream));
    for (int k = 0; k < 5; k++) {
        const char *name = "";
        double bytes = 0;
        for (int rep = 0; rep < 2; rep++) { /* the first run warms up */
            cuda_ok(cudaEventRecord(e0, stream), "cudaEventRecord");
            switch (k) {
            case 0:
                name = "bn_stats", bytes = 4.0 * t;
                RUN(ptc_k_bn_stats(x, rows, (int)c, p, p + c, stream));
                break;
            case 1:
                name = "bn_apply+relu", bytes = 8.0 * t;
                RUN(ptc_k_bn_apply(x, p, p + c, p + 2 * c, p + 3 * c, y, rows, (int)c, 1, stream));
                break;
            case 2:
                name = "bn_bwd", bytes = 4.0 * 4 * t;
                RUN(ptc_k_bn_bwd(x, y, x, p, p, p + c, y, p + 4 * c, p + 5 * c, rows, (int)c,
                                 stream));
                break;
            case 3:
                name = "add+relu", bytes = 12.0 * t;
                RUN(ptc_k_add(x, y, y, t, 1, stream));
                break;
            case 4:
                name = "maxpool 3x3 s2", bytes = 6.0 * t;
                RUN(ptc_k_maxpool_fwd(x, y, am, 512, (int)c, 32, 32, 3, 3, 2, 1, 16, 16, stream));
                break;
            }
            cuda_ok(cudaEventRecord(e1, stream), "cudaEventRecord");
        }
        cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float ms = 0;
        cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        printf("time %-14s %8.3f ms  %7.1f GB/s  (512x32x32x64)\n", name, (double)ms,
               bytes / (ms * 1e6));
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(x), cudaFree(y), cudaFree(p), cudaFree(am);
}

int main(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("no NVIDIA GPU found: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 77;
    }
    struct cudaDeviceProp prop;
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    /* a stream of its own, as the backend uses, but a blocking one: the plain cudaMemcpy and
     * cudaMemset calls of this test (legacy default stream) are then ordered with its kernels */
    cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    test_layout();
    test_elementwise();
    test_casts();
    test_pool();
    test_bn();
    test_linear();
    test_sgd();
    test_xent();
    test_augment();
    if (!getenv("PTC_KERNELS_NO_TIMING"))
        timing();
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda_ok(cudaGetLastError(), "cudaGetLastError");
    printf("test_kernels_gpu: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
