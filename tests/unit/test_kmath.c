/*
 * test_kmath.c - the per-element arithmetic of the CUDA kernels (kernels/kmath.h), run on the host
 * against what the device results must equal:
 *
 *   1. bf16 rounding: bit for bit against torch 2.6's Tensor.to(torch.bfloat16) on the ~2000
 *      patterns of testdata/kmath/bf16.txt (ties, subnormals, carries to inf, NaNs; made by
 *      make_bf16.py) and against lib/tensor/convert.c on random words; bf16 -> f32 on all 65536.
 *   2. SGD: every combination of momentum, dampening, nesterov and weight decay, 4 steps (the first
 *      one creating the buffer), bit for bit against the ref backend's sgd_step.
 *   3. relu, relu backward, add (+ relu), accumulate: bit for bit against ref on special values.
 *   4. Max pool with ties, NaN, -inf and padding (values, argmax and backward) and the global
 *      average pool: bit for bit against ref (ref is NCHW, kmath NHWC).
 *   5. The augmentation: bit for bit against ptc__augment_image for every crop offset and flip.
 *   6. Batch normalisation forward (training, eval, fused relu) and backward: within 1e-6 of ref,
 *      relative to max(|ref|, 1) (ref sums in double in another order and keeps mean/invstd in
 *      double where the kernels hand floats between launches).
 *   7. Softmax cross-entropy, composed from kmath.h as kernels/xent.cu composes it (rows, then
 *      their losses summed in row order by one thread): the mean loss (double), the correct count
 *      and every dlogit bit for bit against ptc__cross_entropy (lib/nn, the host training path)
 *      and against the ref backend's xent (ref_kernels.h), on ties, large and tiny logits, -inf,
 *      NaN, 1 to 1000 classes. (On the device exp and log are CUDA's: tests/gpu checks those.)
 *
 * Every failure prints both sides; the last line counts checks and failures.
 */
#include "backend/backend.h"
#include "data/data.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

#include "kmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ref_kernels.h, instantiated for float as ref.c does, single-threaded. */
#define PAR_FOR(nt) (void)(nt);
#define SIMD()
#define THREAD_ID() 0
#define REAL        float
#define FN(name)    name##_f32
#define FMA         fmaf
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "backend/ref_kernels.h"
#pragma GCC diagnostic pop

#include "check.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static int printed; /* failures printed so far: the first 20 */

static uint32_t bits(float f)
{
    return ptc_km_f32_bits(f);
}

/* One bit-for-bit comparison of floats. */
static void same_bits(const char *what, long i, float got, float want)
{
    check_count++;
    if (bits(got) != bits(want)) {
        check_failures++;
        if (printed++ < 20)
            fprintf(stderr, "%s [%ld]: kmath %.9g (0x%08X) != ref %.9g (0x%08X)\n", what, i,
                    (double)got, (unsigned)bits(got), (double)want, (unsigned)bits(want));
    }
}

/* The same, except that a NaN computed by arithmetic matches any NaN: which operand's NaN an
 * addition returns is the host compiler's choice (it may swap the operands of addss), and the
 * GPU returns its canonical NaN anyway. */
static void same_val(const char *what, long i, float got, float want)
{
    check_count++;
    if (bits(got) != bits(want) && !(got != got && want != want)) {
        check_failures++;
        if (printed++ < 20)
            fprintf(stderr, "%s [%ld]: kmath %.9g (0x%08X) != ref %.9g (0x%08X)\n", what, i,
                    (double)got, (unsigned)bits(got), (double)want, (unsigned)bits(want));
    }
}

static double worst_rel;

static void near(const char *what, long i, float got, float want, double tol)
{
    double d = fabs((double)got - (double)want), scale = fabs((double)want);
    if (scale < 1.0)
        scale = 1.0;
    check_count++;
    if (d / scale > worst_rel)
        worst_rel = d / scale;
    if (!(d <= tol * scale)) {
        check_failures++;
        if (printed++ < 20)
            fprintf(stderr, "%s [%ld]: kmath %.9g != ref %.9g (|diff| %.3g > %.1g x %.3g)\n", what,
                    i, (double)got, (double)want, d, tol, scale);
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static float rnd_f(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rnd64() >> 40) / (double)(1ull << 24));
}

/* ---- 1. bf16 -------------------------------------------------------------------------------- */

static void test_bf16(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/testdata/kmath/bf16.txt", top ? top : ".");
    FILE *f = fopen(path, "r");
    check_count++;
    if (!f) {
        check_failures++;
        fprintf(stderr, "bf16: cannot open %s (set top_srcdir)\n", path);
        return;
    }
    char line[128];
    long n = 0;
    int before = check_failures;
    while (fgets(line, sizeof line, f)) {
        unsigned in, want;
        if (line[0] == '#')
            continue;
        if (sscanf(line, "%x %x", &in, &want) != 2) {
            check_count++;
            check_failures++;
            fprintf(stderr, "bf16: bad line in %s: %s", path, line);
            continue;
        }
        uint16_t got = ptc_km_f32_to_bf16(ptc_km_bits_f32(in));
        check_count++;
        n++;
        if (got != want) {
            check_failures++;
            if (printed++ < 20)
                fprintf(stderr, "bf16: 0x%08X -> kmath 0x%04X != torch 0x%04X\n", in, got, want);
        }
    }
    fclose(f);
    check_count++;
    if (n < 2000) {
        check_failures++;
        fprintf(stderr, "bf16: only %ld patterns in %s (expected >= 2000)\n", n, path);
    }
    /* against lib/tensor/convert.c, the host's conversion, on random words */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rnd64();
        float x = ptc_km_bits_f32(u);
        uint16_t a = ptc_km_f32_to_bf16(x), b = ptc__f32_to_bf16(x);
        check_count++;
        if (a != b) {
            check_failures++;
            if (printed++ < 20)
                fprintf(stderr, "bf16: 0x%08X -> kmath 0x%04X != convert.c 0x%04X\n", u, a, b);
        }
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float got = ptc_km_bf16_to_f32((uint16_t)h);
        check_count++;
        if (bits(got) != h << 16 || bits(ptc__bf16_to_f32((uint16_t)h)) != h << 16) {
            check_failures++;
            if (printed++ < 20)
                fprintf(stderr,
                        "bf16 -> f32: 0x%04X -> kmath 0x%08X, convert.c 0x%08X, want 0x%08X\n", h,
                        bits(got), bits(ptc__bf16_to_f32((uint16_t)h)), h << 16);
        }
    }
    printf("bf16: %ld torch patterns, 200000 random words, 65536 bf16 -> f32 (%d failed)\n", n,
           check_failures - before);
}

/* ---- 2. SGD ---------------------------------------------------------------------------------- */

static void test_sgd(void)
{
    enum { N = 777, STEPS = 4 };
    static float p0[N], g[STEPS][N], pr[N], br[N], pk[N], bk[N];
    const double lrs[2] = {0.1, 0.0123};
    int before = check_failures, combos = 0;
    for (int i = 0; i < N; i++) {
        /* magnitudes from 1e-6 to 1e2 so that every rounding path is taken */
        p0[i] = rnd_f(-1, 1) * powf(10.0f, (float)(int)(rnd64() % 9) - 6.0f);
        for (int s = 0; s < STEPS; s++)
            g[s][i] = rnd_f(-1, 1) * powf(10.0f, (float)(int)(rnd64() % 9) - 6.0f);
    }
    p0[0] = 0.0f;
    p0[1] = -0.0f;
    g[0][2] = 0.0f;
    for (int combo = 0; combo < 32; combo++) {
        ptc__sgd h;
        h.lr = lrs[combo & 1];
        h.momentum = (combo & 2) ? 0.9 : 0.0;
        h.dampening = (combo & 4) ? 0.1 : 0.0;
        h.nesterov = (combo & 8) != 0;
        h.weight_decay = (combo & 16) ? 5e-4 : 0.0;
        memcpy(pr, p0, sizeof pr);
        memcpy(pk, p0, sizeof pk);
        memset(br, 0, sizeof br);
        memset(bk, 0, sizeof bk);
        combos++;
        for (int s = 0; s < STEPS; s++) {
            h.first_step = s == 0;
            sgd_step_f32(pr, g[s], h.momentum != 0 ? br : NULL, N, &h);
            ptc_km_sgd_hp hp = ptc_km_sgd_prepare(h.lr, h.momentum, h.dampening, h.weight_decay,
                                                  h.nesterov, h.first_step);
            for (int i = 0; i < N; i++)
                ptc_km_sgd(&pk[i], g[s][i], h.momentum != 0 ? &bk[i] : NULL, &hp);
            char what[96];
            snprintf(what, sizeof what, "sgd lr %g mom %g damp %g nest %d wd %g step %d p", h.lr,
                     h.momentum, h.dampening, h.nesterov, h.weight_decay, s + 1);
            for (int i = 0; i < N; i++)
                same_bits(what, i, pk[i], pr[i]);
            if (h.momentum != 0) {
                what[strlen(what) - 1] = 'b';
                for (int i = 0; i < N; i++)
                    same_bits(what, i, bk[i], br[i]);
            }
        }
    }
    printf("sgd: %d hyperparameter combinations x %d steps x %d elements (%d failed)\n", combos,
           STEPS, N, check_failures - before);
}

/* ---- 3. elementwise -------------------------------------------------------------------------- */

static void test_elementwise(void)
{
    enum { N = 4096 };
    static float a[N], b[N], r1[N], k1[N];
    const float special[] = {0.0f, -0.0f,  1.0f,    -1.0f,   INFINITY, -INFINITY, NAN,
                             -NAN, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f, 1e-38f,    -1e-38f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    int before = check_failures;
    for (int i = 0; i < N; i++) {
        a[i] = i < ns * ns ? special[i % ns] : rnd_f(-2, 2);
        b[i] = i < ns * ns ? special[i / ns] : rnd_f(-2, 2);
    }
    for (int relu = 0; relu < 2; relu++) {
        add_f32(a, b, r1, N, relu);
        for (int i = 0; i < N; i++)
            k1[i] = ptc_km_add(a[i], b[i], relu);
        for (int i = 0; i < N; i++)
            same_val(relu ? "add+relu" : "add", i, k1[i], r1[i]);
    }
    relu_fwd_f32(a, r1, N);
    for (int i = 0; i < N; i++)
        same_bits("relu", i, ptc_km_relu(a[i]), r1[i]);
    relu_bwd_f32(a, b, r1, N);
    for (int i = 0; i < N; i++)
        same_bits("relu_bwd", i, ptc_km_relu_bwd(a[i], b[i]), r1[i]);
    memcpy(r1, b, sizeof r1);
    accumulate_f32(a, r1, N);
    for (int i = 0; i < N; i++)
        same_val("accumulate", i, ptc_km_accumulate(b[i], a[i]), r1[i]);
    printf(
        "elementwise: add, add+relu, relu, relu_bwd, accumulate on %d pairs incl. +-0, inf, NaN, "
        "subnormals (%d failed)\n",
        N, check_failures - before);
}

/* ---- 4. pooling ------------------------------------------------------------------------------ */

/* NHWC index of (n, y, x, c) and NCHW index */
static int64_t nhwc(int n, int y, int x, int c, int H, int W, int C)
{
    return (((int64_t)n * H + y) * W + x) * C + c;
}

static int64_t nchw(int n, int y, int x, int c, int H, int W, int C)
{
    return (((int64_t)n * C + c) * H + y) * W + x;
}

static void maxpool_case(int n, int c, int h, int w, int r, int st, int pad, int levels)
{
    ptc__pool_shape s = {n, c, h, w, r, r, st, pad, 0, 0};
    s.oh = (h + 2 * pad - r) / st + 1;
    s.ow = (w + 2 * pad - r) / st + 1;
    ptc_km_pool k = {n, c, h, w, r, r, st, pad, s.oh, s.ow};
    const int64_t nx = (int64_t)n * c * h * w, ny = (int64_t)n * c * s.oh * s.ow;
    float *xk = malloc(sizeof(float) * nx), *xr = malloc(sizeof(float) * nx);
    float *yr = malloc(sizeof(float) * ny), *dyk = malloc(sizeof(float) * ny);
    float *dyr = malloc(sizeof(float) * ny), *dxr = malloc(sizeof(float) * nx);
    int32_t *am = malloc(sizeof(int32_t) * ny);
    if (!xk || !xr || !yr || !dyk || !dyr || !dxr || !am) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    /* few distinct values (ties everywhere), all negative on some channels (padding must not win
     * over them), a NaN and a -inf now and then */
    for (int in = 0; in < n; in++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < c; ch++) {
                    float v = (float)(int)(rnd64() % (uint64_t)levels) - (ch % 2 ? 10.0f : 0.0f);
                    uint64_t z = rnd64() % 97;
                    if (z == 0)
                        v = NAN;
                    else if (z == 1)
                        v = -INFINITY;
                    xk[nhwc(in, y, x, ch, h, w, c)] = v;
                    xr[nchw(in, y, x, ch, h, w, c)] = v;
                }
    maxpool_fwd_f32(&s, xr, yr, 1);
    char what[96];
    snprintf(what, sizeof what, "maxpool %dx%d s%d p%d on %dx%d", r, r, st, pad, h, w);
    for (int in = 0; in < n; in++)
        for (int oy = 0; oy < s.oh; oy++)
            for (int ox = 0; ox < s.ow; ox++)
                for (int ch = 0; ch < c; ch++) {
                    float m, mr;
                    int64_t o = nhwc(in, oy, ox, ch, s.oh, s.ow, c);
                    am[o] = ptc_km_maxpool_win(&k, xk, in, oy, ox, ch, &m);
                    int64_t ar =
                        pool_argmax_f32(&s, xr + ((int64_t)in * c + ch) * h * w, oy, ox, &mr);
                    same_bits(what, (long)o, m, yr[nchw(in, oy, ox, ch, s.oh, s.ow, c)]);
                    check_count++;
                    if (am[o] != ar) {
                        check_failures++;
                        if (printed++ < 20)
                            fprintf(stderr, "%s argmax (%d,%d,%d,%d): kmath %d != ref %lld\n", what,
                                    in, oy, ox, ch, am[o], (long long)ar);
                    }
                    float d = rnd_f(-1, 1);
                    dyk[o] = d;
                    dyr[nchw(in, oy, ox, ch, s.oh, s.ow, c)] = d;
                }
    maxpool_bwd_f32(&s, xr, dyr, dxr, 1);
    snprintf(what, sizeof what, "maxpool_bwd %dx%d s%d p%d on %dx%d", r, r, st, pad, h, w);
    for (int in = 0; in < n; in++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < c; ch++)
                    same_bits(what, (long)nhwc(in, y, x, ch, h, w, c),
                              ptc_km_maxpool_bwd_elem(&k, dyk, am, in, y, x, ch),
                              dxr[nchw(in, y, x, ch, h, w, c)]);
    free(xk), free(xr), free(yr), free(dyk), free(dyr), free(dxr), free(am);
}

static void test_pool(void)
{
    int before = check_failures;
    maxpool_case(2, 3, 9, 9, 3, 2, 1, 3);   /* ResNet's stem pool, odd size */
    maxpool_case(2, 4, 8, 8, 3, 2, 1, 2);   /* even size: windows hang over the far edge */
    maxpool_case(1, 2, 8, 6, 2, 2, 0, 3);   /* no overlap, non-square */
    maxpool_case(2, 3, 5, 7, 3, 1, 1, 2);   /* stride 1: every input in up to 9 windows */
    maxpool_case(1, 2, 11, 10, 5, 3, 2, 4); /* larger window, stride 3 */

    enum { N = 3, C = 5, HW = 49 };
    static float xk[N * HW * C], xr[N * C * HW], yr[N * C], dyk[N * C], dxr[N * C * HW];
    for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++)
            for (int c = 0; c < C; c++) {
                float v = rnd_f(-3, 3);
                xk[((int64_t)n * HW + i) * C + c] = v;
                xr[((int64_t)n * C + c) * HW + i] = v;
            }
    avgpool_fwd_f32(N * C, HW, xr, yr);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            same_bits("avgpool", n * C + c, ptc_km_avgpool(xk, n, C, HW, c), yr[n * C + c]);
            dyk[n * C + c] = rnd_f(-1, 1);
        }
    avgpool_bwd_f32(N * C, HW, dyk, dxr);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++)
            for (int c = 0; c < C; c++)
                same_bits("avgpool_bwd", (long)i, ptc_km_avgpool_bwd(dyk[n * C + c], HW),
                          dxr[((int64_t)n * C + c) * HW + i]);
    printf("pool: max pool (5 shapes: ties, NaN, -inf, padding; values, argmax, backward), global "
           "average pool forward and backward (%d failed)\n",
           check_failures - before);
}

/* ---- 5. augmentation ------------------------------------------------------------------------- */

static void test_augment(void)
{
    enum { H = PTC__DATA_H, W = PTC__DATA_W };
    static uint8_t img[3 * H * W];
    static float want[3 * H * W];
    static ptc__normalizer nz;
    const double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2470, 0.2435, 0.2616};
    int before = check_failures, combos = 0;
    ptc__normalizer_init(&nz, mean, std);
    for (int i = 0; i < 3 * H * W; i++)
        img[i] = (uint8_t)(rnd64() % 255 + 1); /* nonzero: padding (lut[0]) is told apart */
    for (int top = 0; top <= 8; top++)
        for (int left = 0; left <= 8; left++)
            for (int flip = 0; flip < 2; flip++) {
                ptc__augment_image(&nz, img, top, left, flip, want);
                int bad = 0;
                long first = -1;
                float fk = 0, fr = 0;
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++)
                        for (int c = 0; c < 3; c++) {
                            float got = ptc_km_augment(img, H, W, 4, top, left, flip, &nz.lut[0][0],
                                                       y, x, c);
                            float w = want[(c * H + y) * W + x];
                            if (bits(got) != bits(w) && bad++ == 0) {
                                first = (long)((c * H + y) * W + x);
                                fk = got;
                                fr = w;
                            }
                        }
                combos++;
                check_count++;
                if (bad) {
                    check_failures++;
                    fprintf(stderr,
                            "augment top %d left %d flip %d: %d of %d differ; first at CHW %ld: "
                            "kmath %.9g != augment.c %.9g\n",
                            top, left, flip, bad, 3 * H * W, first, (double)fk, (double)fr);
                }
            }
    printf("augment: %d crops x flips, every element bit for bit (%d failed)\n", combos,
           check_failures - before);
}

/* ---- 6. batch normalisation ----------------------------------------------------------------- */

static void bn_case(int N, int C, int H, int W, float offset, int relu)
{
    const int64_t rows = (int64_t)N * H * W, total = rows * C, HW = (int64_t)H * W;
    float *xk = malloc(sizeof(float) * total), *xr = malloc(sizeof(float) * total);
    float *yr = malloc(sizeof(float) * total), *yk = malloc(sizeof(float) * total);
    float *dyk = malloc(sizeof(float) * total), *dyr = malloc(sizeof(float) * total);
    float *dxr = malloc(sizeof(float) * total);
    float *g = malloc(sizeof(float) * C * 12);
    if (!xk || !xr || !yr || !yk || !dyk || !dyr || !dxr || !g) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    float *beta = g + C, *sm = g + 2 * C, *si = g + 3 * C, *rm = g + 4 * C, *rv = g + 5 * C;
    float *rmk = g + 6 * C, *rvk = g + 7 * C, *dgr = g + 8 * C, *dbr = g + 9 * C;
    float *mk = g + 10 * C, *ik = g + 11 * C;
    for (int c = 0; c < C; c++) {
        g[c] = rnd_f(0.5f, 1.5f);
        beta[c] = rnd_f(-0.5f, 0.5f);
        rm[c] = rmk[c] = rnd_f(-1, 1);
        rv[c] = rvk[c] = rnd_f(0.5f, 2);
    }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++)
            for (int c = 0; c < C; c++) {
                float v = offset * (float)(c + 1) + rnd_f(-2, 2) * (float)(c + 1);
                float d = rnd_f(-1, 1);
                xk[((int64_t)n * HW + i) * C + c] = v;
                xr[((int64_t)n * C + c) * HW + i] = v;
                dyk[((int64_t)n * HW + i) * C + c] = d;
                dyr[((int64_t)n * C + c) * HW + i] = d;
            }
    const double eps = 1e-5, mom = 0.1;
    bn_fwd_train_f32(N, C, HW, eps, mom, relu, xr, g, beta, yr, sm, si, rm, rv, 1);
    char what[96];
    snprintf(what, sizeof what, "bn [%d][%d][%d][%d] offset %g relu %d", N, C, H, W, (double)offset,
             relu);
    for (int c = 0; c < C; c++) {
        /* the kernels' statistics, summed here in row order */
        double s1 = 0, s2 = 0, k = xk[c];
        for (int64_t r = 0; r < rows; r++) {
            double d = (double)xk[r * C + c] - k;
            s1 += d;
            s2 += d * d;
        }
        float mean, var;
        ptc_km_bn_moments(s1, s2, k, rows, &mean, &var);
        ptc_km_bn_finish(mean, var, rows, (float)eps, (float)mom, &mk[c], &ik[c], &rmk[c], &rvk[c]);
        near("bn save_mean", c, mk[c], sm[c], 1e-6);
        near("bn save_invstd", c, ik[c], si[c], 1e-6);
        near("bn running_mean", c, rmk[c], rm[c], 1e-6);
        near("bn running_var", c, rvk[c], rv[c], 1e-6);
    }
    /* The kernels normalise with the mean rounded to float32, as torch's CUDA batchnorm does;
     * ref keeps it in double. That rounding moves x - mean by up to |mean| 2^-24, so y by
     * |gamma| invstd |mean| 2^-24: the floor of the comparison, added to 1e-6 per channel (it
     * matters where |mean| >> std, the offset 100 case: about 5e-6 of y there). */
    double *floor_y = malloc(sizeof(double) * C);
    if (!floor_y) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int c = 0; c < C; c++)
        floor_y[c] = 1e-6 + fabs((double)g[c]) * (double)ik[c] * fabs((double)mk[c]) * 0x1p-24;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++)
            for (int c = 0; c < C; c++) {
                int64_t o = ((int64_t)n * HW + i) * C + c;
                yk[o] = ptc_km_bn_apply(xk[o], mk[c], ik[c], g[c], beta[c], relu);
                near(what, (long)o, yk[o], yr[((int64_t)n * C + c) * HW + i], floor_y[c]);
            }
    /* eval: running statistics through bn_invstd */
    bn_fwd_eval_f32(N, C, HW, eps, relu, xr, g, beta, rm, rv, yr, 1);
    for (int c = 0; c < C; c++) {
        float inv = ptc_km_bn_invstd(rv[c], (float)eps);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                int64_t o = ((int64_t)n * HW + i) * C + c;
                near("bn eval", (long)o, ptc_km_bn_apply(xk[o], rm[c], inv, g[c], beta[c], relu),
                     yr[((int64_t)n * C + c) * HW + i], 1e-6);
            }
    }
    /* backward (dy masked by the fused relu's output) */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < HW; i++)
            for (int c = 0; c < C; c++)
                yr[((int64_t)n * C + c) * HW + i] = yk[((int64_t)n * HW + i) * C + c];
    bn_bwd_f32(N, C, HW, xr, relu ? yr : NULL, dyr, g, sm, si, dxr, dgr, dbr, 1);
    for (int c = 0; c < C; c++) {
        double sum = 0, dotp = 0;
        for (int64_t r = 0; r < rows; r++) {
            double d = ptc_km_bn_dy(relu ? yk : NULL, dyk, r * C + c);
            sum += d;
            dotp += ((double)xk[r * C + c] - (double)mk[c]) * d;
        }
        float dgk, dbk;
        ptc_km_bn_bwd_params(sum, dotp, ik[c], &dgk, &dbk);
        /* The same floor. dotp sums (x - mean) d with the float mean: off by |sum| dmean, so
         * dgamma = dotp invstd by |sum| dmean invstd. dx = gamma invstd (d - sum / rows - (x -
         * mean) invstd dotp invstd / rows) moves by gamma invstd^3 (|dotp| + |x - mean| |sum|)
         * dmean / rows; |x - mean| is bounded by the channel's largest |x| + |mean|. */
        double dmean = fabs((double)mk[c]) * 0x1p-24, xmax = 0;
        for (int64_t r = 0; r < rows; r++)
            xmax = fmax(xmax, fabs((double)xk[r * C + c]));
        double i3 = (double)ik[c] * ik[c] * ik[c];
        near("bn dgamma", c, dgk, dgr[c], 1e-6 + fabs(sum) * dmean * (double)ik[c]);
        near("bn dbeta", c, dbk, dbr[c], 1e-6);
        double floor_dx = 1e-6 + fabs((double)g[c]) * i3 *
                                     (fabs(dotp) + (xmax + fabs((double)mk[c])) * fabs(sum)) *
                                     dmean / (double)rows;
        for (int64_t r = 0; r < rows; r++) {
            int64_t o = r * C + c;
            double d = ptc_km_bn_dy(relu ? yk : NULL, dyk, o);
            float dx = ptc_km_bn_dx(d, xk[o], mk[c], ik[c], g[c], sum, dotp, rows);
            int64_t n = r / HW, i = r % HW;
            near("bn dx", (long)o, dx, dxr[(n * C + c) * HW + i], floor_dx);
        }
    }
    free(xk), free(xr), free(yr), free(yk), free(dyk), free(dyr), free(dxr), free(g);
    free(floor_y);
}

static void test_bn(void)
{
    int before = check_failures;
    worst_rel = 0;
    bn_case(4, 7, 5, 3, 0.0f, 0);
    bn_case(4, 7, 5, 3, 0.0f, 1);
    bn_case(8, 16, 8, 8, 3.0f, 1);
    bn_case(2, 3, 4, 4, 100.0f, 0); /* |mean| >> std: the shifted sums keep their precision */
    printf(
        "batchnorm: training/eval forward (+relu), running stats, backward; worst relative "
        "difference %.3g (tolerance 1e-6 + the float32 mean's rounding, per channel) (%d failed)\n",
        worst_rel, check_failures - before);
}

/* ---- 7. cross-entropy ------------------------------------------------------------------------ */

/* kernels/xent.cu's composition of the kmath.h functions, on the host. */
static void km_xent(const float *logits, const int64_t *labels, int n, int classes, float *dlogits,
                    double *loss, int64_t *correct)
{
    double *rows = malloc((size_t)n * sizeof *rows);
    int32_t *right = malloc((size_t)n * sizeof *right);
    if (!rows || !right) {
        fprintf(stderr, "out of memory\n");
        exit(99);
    }
    for (int i = 0; i < n; i++) {
        const float *z = logits + (int64_t)i * classes;
        const int64_t y = labels[i];
        const int best = ptc_km_xent_argmax(z, classes);
        const double lse = ptc_km_xent_lse(z, classes, best);
        rows[i] = ptc_km_xent_row_loss(z, lse, y);
        right[i] = best == y;
        for (int c = 0; c < classes; c++)
            dlogits[(int64_t)i * classes + c] = ptc_km_xent_grad(z[c], lse, c == y, n);
    }
    double total = 0;
    int64_t r = 0;
    for (int i = 0; i < n; i++) {
        total += rows[i];
        r += right[i];
    }
    *loss = total / n;
    *correct = r;
    free(rows);
    free(right);
}

static void same_double(const char *what, double got, double want)
{
    check_count++;
    uint64_t a, b;
    memcpy(&a, &got, sizeof a);
    memcpy(&b, &want, sizeof b);
    if (a != b && !(got != got && want != want)) {
        check_failures++;
        if (printed++ < 20)
            fprintf(stderr, "%s: kmath %.17g (0x%016llX) != %.17g (0x%016llX)\n", what, got,
                    (unsigned long long)a, want, (unsigned long long)b);
    }
}

/* kind: 0 uniform [-3, 3), 1 wide [-80, 80) (exp underflows), 2 few levels (ties), 3 with -inf
 * and NaN logits sprinkled in (never all of a row -inf) */
static void xent_case(int n, int classes, int kind)
{
    size_t total = (size_t)n * (size_t)classes;
    float *z = malloc(total * sizeof *z), *g_km = malloc(total * sizeof *g_km),
          *g_host = malloc(total * sizeof *g_host), *g_ref = malloc(total * sizeof *g_ref);
    int64_t *y = calloc((size_t)n, sizeof *y);
    if (!z || !g_km || !g_host || !g_ref || !y) {
        fprintf(stderr, "out of memory\n");
        exit(99);
    }
    for (size_t k = 0; k < total; k++) {
        switch (kind) {
        case 0:
            z[k] = rnd_f(-3.0f, 3.0f);
            break;
        case 1:
            z[k] = rnd_f(-80.0f, 80.0f);
            break;
        case 2:
            z[k] = (float)(int)(rnd64() % 3) * 0.5f;
            break;
        default:
            z[k] = rnd_f(-5.0f, 5.0f);
            if (k % (size_t)classes != 0 && rnd64() % 7 == 0)
                z[k] = rnd64() % 5 == 0 ? NAN : -INFINITY;
        }
    }
    for (int i = 0; i < n; i++)
        y[i] = (int64_t)(rnd64() % (uint64_t)classes);
    double l_km, l_host, l_ref;
    int64_t c_km, c_host, c_ref;
    ptc_error err;
    km_xent(z, y, n, classes, g_km, &l_km, &c_km);
    if (ptc__cross_entropy(z, y, n, classes, &l_host, g_host, &c_host, &err) != 0) {
        check_count++;
        check_failures++;
        fprintf(stderr, "xent n %d classes %d: ptc__cross_entropy failed: %s\n", n, classes,
                err.message);
        goto out;
    }
    xent_f32(z, y, n, classes, g_ref, &l_ref, &c_ref);
    char what[96];
    snprintf(what, sizeof what, "xent n %d classes %d kind %d: loss vs host", n, classes, kind);
    same_double(what, l_km, l_host);
    snprintf(what, sizeof what, "xent n %d classes %d kind %d: loss vs ref", n, classes, kind);
    same_double(what, l_km, l_ref);
    check_count++;
    if (c_km != c_host || c_km != c_ref) {
        check_failures++;
        fprintf(stderr, "xent n %d classes %d kind %d: correct kmath %lld, host %lld, ref %lld\n",
                n, classes, kind, (long long)c_km, (long long)c_host, (long long)c_ref);
    }
    snprintf(what, sizeof what, "xent n %d classes %d kind %d: dlogits vs host", n, classes, kind);
    for (size_t k = 0; k < total; k++)
        same_val(what, (long)k, g_km[k], g_host[k]);
    snprintf(what, sizeof what, "xent n %d classes %d kind %d: dlogits vs ref", n, classes, kind);
    for (size_t k = 0; k < total; k++)
        same_val(what, (long)k, g_km[k], g_ref[k]);
out:
    free(z);
    free(g_km);
    free(g_host);
    free(g_ref);
    free(y);
}

static void test_xent(void)
{
    int f0 = check_failures;
    static const int shapes[][2] = {{1, 1},    {1, 10}, {3, 10},   {128, 10},
                                    {257, 10}, {5, 2},  {4, 1000}, {33, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kind = 0; kind < 4; kind++)
            xent_case(shapes[s][0], shapes[s][1], kind);
    /* the first maximum wins a tie: rows [1 1 0] and [0 2 2] pick 0 and 1 */
    float z[6] = {1, 1, 0, 0, 2, 2};
    int64_t y[2] = {1, 2};
    float g[6];
    double l;
    int64_t c;
    km_xent(z, y, 2, 3, g, &l, &c);
    check_count++;
    if (c != 0) {
        check_failures++;
        fprintf(stderr, "xent ties: correct %lld, expected 0 (the first maximum wins)\n",
                (long long)c);
    }
    printf("cross-entropy: loss, correct count and dlogits bit for bit against ptc__cross_entropy "
           "and ref (%d failed)\n",
           check_failures - f0);
}

int main(void)
{
    test_bf16();
    test_sgd();
    test_elementwise();
    test_pool();
    test_augment();
    test_bn();
    test_xent();
    return check_exit("test_kmath");
}
