/*
 * bench_infer.c - one-image inference latency through libptc's public model API (ptc.h "Models"),
 * and the machine's single-thread float32 GEMM ceiling, for tests/bench/infer/run.sh.
 *
 *     bench_infer classify WEIGHTS IMAGE BACKEND [CALLS [WARMUP]]
 *     bench_infer forward  WEIGHTS IMAGE BACKEND [CALLS [WARMUP]]
 *     bench_infer gemm     [N [REPEATS]]
 *
 *   classify  ptc_model_classify of one 32x32 RGB image (IMAGE: 3072 bytes, [32][32][3] uint8),
 *             top-1 class and its probability: what `ptc predict` does per image after decoding;
 *   forward   ptc_model_forward of the same image normalised beforehand (ToTensor + Normalize
 *             with the model's mean and std, done once outside the timed calls): the network alone;
 *   gemm      dnnl_sgemm of N x N matrices (default 2048) on one thread, best of REPEATS
 *             (default 3): the float32 ceiling the convolutions could reach on this core.
 *
 * The model is resnet18 with the checkpoint's classes on BACKEND ("ref" or "dnnl") with
 * threads = 1, WEIGHTS a state dict torch.save wrote (loaded strictly). WARMUP calls (default 50)
 * are not timed; then CALLS (default 1000) calls are, each alone with CLOCK_MONOTONIC. One line of
 * key=value pairs is printed: median, p99 (nearest rank) and min in microseconds, and the top-1
 * class and probability of the last call (run.sh compares them with torch's); forward adds an
 * FNV-1a hash of the logits' bytes, so that a speed change can be shown to keep every bit; both
 * print the library's allocations per timed call (through ptc_set_allocator). For gemm: the best
 * time and its GFLOP/s. Nothing here asserts a speed.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ptc/ptc.h>

#ifdef PTC_BENCH_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

#define SIDE        32
#define IMAGE_BYTES (SIDE * SIDE * 3)
#define MAX_CALLS   1000000
#define MAX_GEMM_N  8192

/* The library's allocator, counting: allocations (and growths) made during the timed calls show
 * as allocs_per_call (module code, oneDNN's own memory, is not counted: it allocates its own). */
static unsigned long long n_allocs;

static void *counting_realloc(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    n_allocs++;
    return realloc(ptr, size);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A positive count from argv, or the default when absent; -1 when it is not one. */
static long count_arg(int argc, char **argv, int i, long def, long max)
{
    if (argc <= i)
        return def;
    char *end;
    errno = 0;
    long v = strtol(argv[i], &end, 10);
    return errno || *end || end == argv[i] || v < 1 || v > max ? -1 : v;
}

static int read_image(const char *path, uint8_t img[IMAGE_BYTES])
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_infer: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t got = fread(img, 1, IMAGE_BYTES, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != IMAGE_BYTES || extra != EOF) {
        fprintf(stderr, "bench_infer: %s: expected exactly %d bytes ([32][32][3] uint8)\n", path,
                IMAGE_BYTES);
        return -1;
    }
    return 0;
}

static int open_model(ptc_model **m, const char *weights, const char *backend)
{
    ptc_error err;
    ptc_ckpt *c = NULL;
    ptc_model_params mp;
    ptc_model_params_default(&mp);
    mp.backend = backend;
    mp.threads = 1;
    *m = NULL;
    int rc = ptc_ckpt_open(&c, weights, NULL, &err);
    if (rc == 0) {
        int64_t classes = ptc_model_classes_of(ptc_ckpt_root(c), &err);
        rc = classes < 1 ? (classes < 0 ? (int)classes : PTC_EFORMAT) : 0;
        mp.num_classes = (int)classes;
    }
    if (rc == 0)
        rc = ptc_model_new(m, &mp, &err);
    if (rc == 0)
        rc = ptc_model_load(*m, ptc_ckpt_root(c), PTC_LOAD_STRICT, &err);
    ptc_ckpt_close(c);
    if (rc < 0) {
        fprintf(stderr, "bench_infer: %s on %s: %s\n", weights, backend, err.message);
        ptc_model_free(*m);
        *m = NULL;
    }
    return rc;
}

static int bench_model(int forward, int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_infer %s WEIGHTS IMAGE BACKEND [CALLS [WARMUP]]\n", argv[1]);
        return 2;
    }
    long calls = count_arg(argc, argv, 5, 1000, MAX_CALLS);
    long warmup = count_arg(argc, argv, 6, 50, MAX_CALLS);
    if (calls < 0 || warmup < 0) {
        fprintf(stderr, "bench_infer: CALLS and WARMUP must be between 1 and %d\n", MAX_CALLS);
        return 2;
    }
    uint8_t img[IMAGE_BYTES];
    if (read_image(argv[3], img) < 0)
        return 1;
    ptc_model *m;
    if (open_model(&m, argv[2], argv[4]) < 0)
        return 1;
    const int C = ptc_model_num_classes(m);
    int status = 1, cls = -1;
    float prob = 0, x[3 * SIDE * SIDE];
    float *logits = malloc((size_t)C * sizeof *logits);
    double *t = malloc((size_t)calls * sizeof *t);
    if (!logits || !t) {
        fprintf(stderr, "bench_infer: out of memory\n");
        goto done;
    }
    if (forward) { /* ToTensor + Normalize as ptc_model_classify does them, once */
        ptc_model_params mp;
        ptc_model_params_default(&mp);
        ptc_model_get_params(m, &mp, NULL);
        for (int p = 0; p < SIDE * SIDE; p++)
            for (int c = 0; c < 3; c++) {
                volatile float v = (float)img[p * 3 + c] / 255.0f;
                volatile float d = v - mp.mean[c];
                x[c * SIDE * SIDE + p] = d / mp.std[c];
            }
    }
    ptc_error err;
    unsigned long long allocs0 = 0;
    for (long i = -warmup; i < calls; i++) {
        if (i == 0)
            allocs0 = n_allocs;
        double t0 = now_us();
        int rc = forward ? ptc_model_forward(m, x, 1, SIDE, SIDE, logits, &err)
                         : ptc_model_classify(m, img, 1, SIDE, SIDE, 1, &cls, &prob, &err);
        double t1 = now_us();
        if (rc < 0) {
            fprintf(stderr, "bench_infer: %s: %s\n", argv[1], err.message);
            goto done;
        }
        if (i >= 0)
            t[i] = t1 - t0;
    }
    uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a of the logits' bytes: same bits, same hash */
    if (forward) { /* the top-1 of the logits, ties to the lower class as classify */
        for (int j = 0; j < C; j++)
            if (cls < 0 || logits[j] > logits[cls])
                cls = j;
        const unsigned char *b = (const unsigned char *)logits;
        for (size_t i = 0; i < (size_t)C * sizeof *logits; i++)
            hash = (hash ^ b[i]) * 0x100000001b3ull;
    }
    qsort(t, (size_t)calls, sizeof *t, cmp_double);
    long p99 = (calls * 99 + 99) / 100 - 1; /* nearest rank: ceil(0.99 n), 1-based */
    printf("mode=%s backend=%s calls=%ld median_us=%.2f p99_us=%.2f min_us=%.2f max_us=%.2f "
           "class=%d allocs_per_call=%.2f",
           argv[1], ptc_model_backend(m), calls,
           calls % 2 ? t[calls / 2] : (t[calls / 2 - 1] + t[calls / 2]) / 2, t[p99], t[0],
           t[calls - 1], cls, (double)(n_allocs - allocs0) / (double)calls);
    if (forward)
        printf(" logit0=%.6f logits_fnv=%016llx\n", (double)logits[0], (unsigned long long)hash);
    else
        printf(" prob=%.6f\n", (double)prob);
    status = 0;
done:
    free(logits);
    free(t);
    ptc_model_free(m);
    return status;
}

static int bench_gemm(int argc, char **argv)
{
    long n = count_arg(argc, argv, 2, 2048, MAX_GEMM_N);
    long reps = count_arg(argc, argv, 3, 3, 100);
    if (n < 0 || reps < 0) {
        fprintf(stderr, "usage: bench_infer gemm [N (1..%d) [REPEATS (1..100)]]\n", MAX_GEMM_N);
        return 2;
    }
#ifdef PTC_BENCH_DNNL
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    int status = 1;
    if (!a || !b || !c) {
        fprintf(stderr, "bench_infer: out of memory for three %ldx%ld matrices\n", n, n);
        goto done;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 13) * 0.25f - 1.5f;
        b[i] = (float)(i % 7) * 0.5f - 1.5f;
    }
    omp_set_num_threads(1);
    double best = 0;
    for (long r = -1; r < reps; r++) { /* the first run warms the caches and the JIT */
        double t0 = now_us();
        dnnl_status_t st = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = now_us() - t0;
        if (st != dnnl_success) {
            fprintf(stderr, "bench_infer: dnnl_sgemm failed: %d\n", (int)st);
            goto done;
        }
        if (r >= 0 && (best == 0 || dt < best))
            best = dt;
    }
    printf("mode=gemm n=%ld threads=1 best_us=%.1f gflops=%.2f check=%g\n", n, best,
           2.0 * (double)n * (double)n * (double)n / best * 1e-3, (double)c[nn / 2]);
    status = 0;
done:
    free(a);
    free(b);
    free(c);
    return status;
#else
    fprintf(stderr, "bench_infer: built without oneDNN (configure --with-dnnl): no gemm\n");
    return 1;
#endif
}

int main(int argc, char **argv)
{
    ptc_set_allocator(counting_realloc, NULL); /* before any handle exists */
    if (argc >= 2 && strcmp(argv[1], "classify") == 0)
        return bench_model(0, argc, argv);
    if (argc >= 2 && strcmp(argv[1], "forward") == 0)
        return bench_model(1, argc, argv);
    if (argc >= 2 && strcmp(argv[1], "gemm") == 0)
        return bench_gemm(argc, argv);
    fprintf(stderr, "usage: bench_infer classify|forward WEIGHTS IMAGE BACKEND [CALLS [WARMUP]]\n"
                    "       bench_infer gemm [N [REPEATS]]\n");
    return 2;
}
