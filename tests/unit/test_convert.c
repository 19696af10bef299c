/*
 * test_convert.c - dtype conversions (lib/tensor/convert.c) against torch 2.6 and against an
 * independent reference.
 *
 *   1. torch's answers recorded by tests/interop/gen_cast_golden.py in testdata/casts/:
 *      f32_16.bin.gz (a 1.6 million pattern sample of float32 -> bfloat16 / float16, and every
 *      16-bit pattern -> float32 and back) and cases.txt (7000 conversions between the ten dtypes
 *      ptc converts), checked exactly; the cases also go through a transposed view and through
 *      the neg bit, so that ptc__convert's row-major walk is exercised.
 *   2. All 2^32 float32 patterns: ptc__f32_to_bf16 and ptc__f32_to_f16 against reference
 *      conversions written here in another style (double arithmetic: scale by a power of two,
 *      rint, compare with the overflow threshold), and every 16-bit pattern through float32 and
 *      back.
 *   3. Argument errors.
 *
 * The file format of f32_16.bin.gz is described in tests/interop/gen_cast_golden.py. Step 2
 * checks every 64th float32 pattern instead of all when PTC_TEST_QUICK=1 is set, and in a
 * sanitizer build unless PTC_TEST_EXHAUSTIVE=1 is set (the scalar conversions touch no memory,
 * and the full sweep takes about 30 CPU-seconds at -O2 but several minutes under ASan).
 */
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"

static char casts_dir[4096];

/* ---- helpers --------------------------------------------------------------------------------- */

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reports a mismatch; only the first few of each kind are printed. */
static int report(int *shown, const char *what, uint64_t in, uint64_t got, uint64_t want)
{
    check_count++;
    if (got == want)
        return 0;
    check_failures++;
    if ((*shown)++ < 8)
        fprintf(stderr, "%s(0x%llx) = 0x%llx, expected 0x%llx\n", what, (unsigned long long)in,
                (unsigned long long)got, (unsigned long long)want);
    return 1;
}

/* ---- 1. torch's golden tables ---------------------------------------------------------------- */

typedef struct gzr {
    gzFile f;
    int bad;
} gzr;

static int gz_read(gzr *g, void *p, size_t n)
{
    if (g->bad)
        return -1;
    if (n > 0 && gzread(g->f, p, (unsigned)n) != (int)n) {
        g->bad = 1;
        return -1;
    }
    return 0;
}

static uint32_t gz_u32(gzr *g)
{
    uint8_t b[4] = {0};
    gz_read(g, b, 4);
    return ptc__le32(b);
}

static void test_golden_f32(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/f32_16.bin.gz", casts_dir);
    gzr g = {gzopen(path, "rb"), 0};
    CHECK(g.f != NULL);
    if (!g.f) {
        fprintf(stderr, "cannot open %s\n", path);
        return;
    }
    char magic[8];
    gz_read(&g, magic, 8);
    CHECK(memcmp(magic, "PTCCAST2", 8) == 0);
    uint32_t nsec = gz_u32(&g);
    CHECK(nsec >= 1 && nsec <= 16);
    int shown_bf = 0, shown_h = 0;
    uint64_t total = 0;
    for (uint32_t s = 0; s < nsec && !g.bad; s++) {
        uint32_t n = gz_u32(&g);
        uint8_t *buf = malloc((size_t)n * 8 + 1);
        if (!buf || gz_read(&g, buf, (size_t)n * 8) < 0) {
            CHECK(!"section readable");
            free(buf);
            break;
        }
        const uint8_t *delta = buf, *bf = buf + (size_t)n * 4, *hf = bf + (size_t)n * 2;
        uint32_t x = 0;
        for (uint32_t i = 0; i < n; i++) {
            x += ptc__le32(delta + 4 * i);
            float f = f32_of(x);
            report(&shown_bf, "torch bf16 vs ptc__f32_to_bf16", x, ptc__f32_to_bf16(f),
                   ptc__le16(bf + 2 * i));
            report(&shown_h, "torch f16 vs ptc__f32_to_f16", x, ptc__f32_to_f16(f),
                   ptc__le16(hf + 2 * i));
        }
        total += n;
        free(buf);
    }
    /* Every 16-bit pattern: to float32 and back, as torch does it. */
    uint8_t *col = malloc(65536 * 12);
    if (!col || gz_read(&g, col, 65536 * 12) < 0) {
        CHECK(!"16-bit columns readable");
    } else {
        int s1 = 0, s2 = 0, s3 = 0, s4 = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            report(&s1, "torch f16->f32 vs ptc__f16_to_f32", h,
                   bits_of(ptc__f16_to_f32((uint16_t)h)), ptc__le32(col + 4 * h));
            report(&s2, "torch bf16->f32 vs ptc__bf16_to_f32", h,
                   bits_of(ptc__bf16_to_f32((uint16_t)h)), ptc__le32(col + 262144 + 4 * h));
            report(&s3, "torch f16 round trip", h, ptc__f32_to_f16(ptc__f16_to_f32((uint16_t)h)),
                   ptc__le16(col + 524288 + 2 * h));
            report(&s4, "torch bf16 round trip", h, ptc__f32_to_bf16(ptc__bf16_to_f32((uint16_t)h)),
                   ptc__le16(col + 655360 + 2 * h));
        }
    }
    free(col);
    uint8_t extra;
    CHECK(!g.bad && gzread(g.f, &extra, 1) == 0); /* nothing after the last column */
    gzclose(g.f);
    printf("golden: %llu float32 patterns and 65536 16-bit patterns checked against torch\n",
           (unsigned long long)total);
}

/* A tensor over a caller-owned storage; shape/stride arrays are the caller's. */
static ptc_tensor make_tensor(ptc_storage *s, ptc_dtype dt, int ndim, int64_t *shape,
                              int64_t *stride)
{
    ptc_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    t.shape = shape;
    t.stride = stride;
    t.storage = s;
    t.numel = 1;
    for (int d = 0; d < ndim; d++)
        t.numel *= shape[d];
    return t;
}

static void put_bits(uint8_t *p, size_t size, uint64_t v)
{
    for (size_t k = 0; k < size; k++)
        p[k] = (uint8_t)(v >> (8 * k)); /* little-endian; the test hosts are little-endian */
}

static uint64_t get_bits(const uint8_t *p, size_t size)
{
    uint64_t v = 0;
    for (size_t k = 0; k < size; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

/* The bits of -x for a dtype, as torch's neg would store them (sign flip for floats, two's
 * complement for integers). */
static uint64_t negate_bits(ptc_dtype dt, uint64_t v)
{
    size_t size = ptc_dtype_size(dt);
    uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    if (ptc__dtype_info_of(dt)->is_floating)
        return v ^ (1ull << (8 * size - 1));
    return (~v + 1) & mask;
}

typedef struct case_set {
    ptc_dtype src, dst;
    size_t n, cap;
    uint64_t *in, *out;
} case_set;

/* Converts one (src, dst) group of cases three ways: contiguous, through a transposed view, and
 * through the neg bit (integers only for neg: torch never sets it on bool). */
static void check_cases(const case_set *cs, int *shown)
{
    size_t ss = ptc_dtype_size(cs->src), ds = ptc_dtype_size(cs->dst), n = cs->n;
    size_t cols = 2, rows = (n + 1) / 2; /* transposed layout pads to an even count */
    uint8_t *plain = calloc(n ? n : 1, ss), *tr = calloc(rows * cols, ss);
    uint8_t *ng = calloc(n ? n : 1, ss), *out = calloc(n ? n : 1, ds);
    if (!plain || !tr || !ng || !out) {
        CHECK(!"out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        put_bits(plain + i * ss, ss, cs->in[i]);
        /* element i of the row-major (rows x 2) view lives at storage (i % 2) * rows + i / 2 */
        put_bits(tr + ((i % 2) * rows + i / 2) * ss, ss, cs->in[i]);
        put_bits(ng + i * ss, ss, negate_bits(cs->src, cs->in[i]));
    }
    char what[96];
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2 && cs->src == PTC_BOOL)
            continue;
        ptc_storage s;
        memset(&s, 0, sizeof s);
        s.key = "0";
        s.location = "cpu";
        s.dtype = cs->src;
        s.data = mode == 0 ? plain : mode == 1 ? tr : ng;
        s.nbytes = (int64_t)((mode == 1 ? rows * cols : n) * ss);
        int64_t shape1[1] = {(int64_t)n}, stride1[1] = {1};
        int64_t shape2[2] = {(int64_t)rows, 2}, stride2[2] = {1, (int64_t)rows};
        ptc_tensor t = mode == 1 ? make_tensor(&s, cs->src, 2, shape2, stride2)
                                 : make_tensor(&s, cs->src, 1, shape1, stride1);
        t.neg = mode == 2;
        size_t count = mode == 1 ? rows * 2 : n;
        uint8_t *o = mode == 1 ? calloc(count, ds) : out;
        ptc_error err;
        CHECK_CODE(ptc__convert(&t, cs->dst, o, count * ds, &err), 0, &err);
        snprintf(what, sizeof what, "%s %s -> %s",
                 mode == 0   ? "contiguous"
                 : mode == 1 ? "transposed"
                             : "neg bit",
                 ptc_dtype_name(cs->src), ptc_dtype_name(cs->dst));
        for (size_t i = 0; i < n; i++)
            report(shown, what, cs->in[i], get_bits(o + i * ds, ds), cs->out[i]);
        if (o != out)
            free(o);
    }
done:
    free(plain);
    free(tr);
    free(ng);
    free(out);
}

static void test_cases(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/cases.txt", casts_dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return;
    }
    case_set cs = {0};
    char sname[32], dname[32], line[256];
    unsigned long long in, out;
    int shown = 0;
    size_t ncases = 0, npairs = 0;
    for (;;) {
        char *l = fgets(line, sizeof line, f);
        ptc_dtype s = PTC_FLOAT32, d = PTC_FLOAT32;
        bool ok = l && sscanf(line, "%31s %31s %llx %llx", sname, dname, &in, &out) == 4 &&
                  ptc_dtype_from_name(sname, &s) == 0 && ptc_dtype_from_name(dname, &d) == 0;
        if (l && !ok) {
            CHECK(!"cases.txt line parses");
            fprintf(stderr, "bad line: %s", line);
            continue;
        }
        if (cs.n && (!l || s != cs.src || d != cs.dst)) {
            check_cases(&cs, &shown);
            npairs++;
            cs.n = 0;
        }
        if (!l)
            break;
        if (cs.n == cs.cap) {
            cs.cap = cs.cap ? cs.cap * 2 : 256;
            cs.in = realloc(cs.in, cs.cap * sizeof *cs.in);
            cs.out = realloc(cs.out, cs.cap * sizeof *cs.out);
            if (!cs.in || !cs.out)
                abort();
        }
        cs.src = s;
        cs.dst = d;
        cs.in[cs.n] = in;
        cs.out[cs.n++] = out;
        ncases++;
    }
    fclose(f);
    free(cs.in);
    free(cs.out);
    CHECK(npairs == 90);
    printf("cases: %zu conversions in %zu dtype pairs checked against torch (3 layouts)\n", ncases,
           npairs);
}

/* ---- 2. exhaustive, against a reference in double arithmetic --------------------------------- */

/* The references round in double arithmetic instead of on bit patterns: adding and subtracting
 * C = q * 2^52 rounds |x| (< C) to a multiple of the quantum q with the hardware's own round to
 * nearest even, because the sum lies in [C, 2C) where doubles are spaced exactly q apart. The
 * quantum comes from the float32 exponent E: bfloat16 keeps 8 significant bits, so q = 2^(E-134)
 * (2^-133 for float32 subnormals); float16 keeps 11, q = 2^(E-137), and 2^-24 below 2^-14. */
static double pow2(int e) /* 2^e for a normal double exponent, built from its bits */
{
    uint64_t b = (uint64_t)(e + 1023) << 52;
    double d;
    memcpy(&d, &b, 8);
    return d;
}

static double round_to(double x, double q)
{
    double c = q * 0x1p52;
    return (x + c) - c; /* C evaluates this as written (no reassociation without -ffast-math) */
}

static uint16_t ref_bf16(uint32_t u)
{
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    uint32_t E = u >> 23 & 0xFF;
    if (E == 0xFF)
        return (u & 0x7FFFFFu) ? 0xFFFF : (uint16_t)(sign | 0x7F80u); /* torch: every NaN */
    double x = fabs((double)f32_of(u));
    double r = round_to(x, E ? pow2((int)E - 134) : 0x1p-133);
    if (r >= 0x1p128)
        return sign | 0x7F80;
    return (uint16_t)(sign | bits_of((float)r) >> 16);
}

static uint16_t ref_f16(uint32_t u)
{
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    uint32_t E = u >> 23 & 0xFF;
    if (E == 0xFF) /* NaN: quiet, top 10 payload bits */
        return (u & 0x7FFFFFu) ? (uint16_t)(sign | 0x7E00u | (u >> 13 & 0x3FFu))
                               : (uint16_t)(sign | 0x7C00u);
    double x = fabs((double)f32_of(u));
    double r = round_to(x, x >= 0x1p-14 ? pow2((int)E - 137) : 0x1p-24);
    if (r >= 65536.0)
        return sign | 0x7C00;
    if (r < 0x1p-14)
        return (uint16_t)(sign | (uint16_t)(r * 0x1p24)); /* subnormal: count of 2^-24 */
    uint32_t b = bits_of((float)r); /* exact; re-encode with float16's exponent bias */
    return (uint16_t)(sign | (((b >> 23) - 112u) << 10) | (b >> 13 & 0x3FFu));
}

/* The sweep runs on every CPU: each thread takes a contiguous quarter (or so) of the patterns. */
typedef struct sweep {
    uint64_t begin, end, step;
    uint64_t n, bad_bf, bad_h;
    uint32_t first_bf, first_h; /* first mismatching pattern of each kind */
} sweep;

static void *sweep_run(void *arg)
{
    sweep *w = arg;
    for (uint64_t i = w->begin; i < w->end; i += w->step) {
        uint32_t u = (uint32_t)i;
        float f = f32_of(u);
        if (ptc__f32_to_bf16(f) != ref_bf16(u) && w->bad_bf++ == 0)
            w->first_bf = u;
        if (ptc__f32_to_f16(f) != ref_f16(u) && w->bad_h++ == 0)
            w->first_h = u;
        w->n++;
    }
    return NULL;
}

static bool env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* The sweep touches no memory, so a sanitizer build gains nothing from all 2^32 patterns but
 * would take minutes: there it checks every 64th unless PTC_TEST_EXHAUSTIVE is set. */
static bool sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

static void test_exhaustive(void)
{
    uint64_t step =
        env_flag("PTC_TEST_QUICK") || (sanitized() && !env_flag("PTC_TEST_EXHAUSTIVE")) ? 64 : 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
    sweep w[64];
    pthread_t th[64];
    uint64_t per = ((1ull << 32) / (uint64_t)nt + step - 1) / step * step;
    bool ran_here[64];
    double t0 = now_s();
    for (int k = 0; k < nt; k++) {
        memset(&w[k], 0, sizeof w[k]);
        w[k].begin = per * (uint64_t)k;
        w[k].end = k == nt - 1 ? 1ull << 32 : per * (uint64_t)(k + 1);
        w[k].step = step;
        ran_here[k] = pthread_create(&th[k], NULL, sweep_run, &w[k]) != 0;
        if (ran_here[k])
            sweep_run(&w[k]); /* no thread: do the share here */
    }
    uint64_t n = 0, bad_bf = 0, bad_h = 0;
    for (int k = 0; k < nt; k++) {
        if (!ran_here[k])
            pthread_join(th[k], NULL);
        n += w[k].n;
        if (w[k].bad_bf && !bad_bf) {
            uint32_t u = w[k].first_bf;
            fprintf(stderr, "ptc__f32_to_bf16(0x%08x) = 0x%04x, reference 0x%04x\n", u,
                    ptc__f32_to_bf16(f32_of(u)), ref_bf16(u));
        }
        if (w[k].bad_h && !bad_h) {
            uint32_t u = w[k].first_h;
            fprintf(stderr, "ptc__f32_to_f16(0x%08x) = 0x%04x, reference 0x%04x\n", u,
                    ptc__f32_to_f16(f32_of(u)), ref_f16(u));
        }
        bad_bf += w[k].bad_bf;
        bad_h += w[k].bad_h;
    }
    CHECK_INT(bad_bf, 0);
    CHECK_INT(bad_h, 0);
    CHECK_INT(n, (1ull << 32) / step);
    printf("exhaustive: %llu float32 patterns (every %llu), bf16 and f16 against the reference, "
           "%d threads, %.1f s\n",
           (unsigned long long)n, (unsigned long long)step, nt, now_s() - t0);

    /* Every 16-bit pattern through float32 and back; float16 -> float32 against ldexp. */
    uint64_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t e = h >> 10 & 0x1F, m = h & 0x3FF;
        bool nan16 = e == 0x1F && m != 0;
        float f = ptc__f16_to_f32((uint16_t)h);
        double want = e == 0 ? ldexp(m, -24) : e == 0x1F ? INFINITY : ldexp(1024 + m, (int)e - 25);
        if (!nan16 && fabs((double)f) != want)
            bad++;
        if (nan16 && !(isnan(f) && bits_of(f) == ((h & 0x8000u) << 16 | 0x7FC00000u | m << 13)))
            bad++;
        if (!nan16 && (signbit(f) != 0) != ((h & 0x8000) != 0))
            bad++;
        /* Non-NaN values come back unchanged; NaN comes back quiet (torch does the same). */
        if (ptc__f32_to_f16(f) != (nan16 ? (h | 0x200) : h))
            bad++;
        uint16_t bh = ptc__f32_to_bf16(ptc__bf16_to_f32((uint16_t)h));
        bool nanb = (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
        if (bits_of(ptc__bf16_to_f32((uint16_t)h)) != h << 16 || bh != (nanb ? 0xFFFF : h))
            bad++;
    }
    CHECK_INT(bad, 0);
}

/* ---- 3. errors and small cases --------------------------------------------------------------- */

static void test_errors(void)
{
    uint8_t data[16] = {0};
    ptc_storage s;
    memset(&s, 0, sizeof s);
    s.key = "0";
    s.location = "cpu";
    s.dtype = PTC_COMPLEX64;
    s.data = data;
    s.nbytes = sizeof data;
    int64_t shape[1] = {2}, stride[1] = {1};
    ptc_tensor t = make_tensor(&s, PTC_COMPLEX64, 1, shape, stride);
    uint8_t out[64];
    ptc_error err;
    CHECK_CODE(ptc__convert(&t, PTC_FLOAT32, out, sizeof out, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "complex64") != NULL);
    CHECK_CODE(ptc__convert(&t, PTC_COMPLEX64, out, sizeof out, &err), 0, &err); /* same dtype */
    t.dtype = PTC_FLOAT32;
    s.dtype = PTC_FLOAT32;
    shape[0] = 4;
    t.numel = 4;
    CHECK_CODE(ptc__convert(&t, PTC_FLOAT64, out, 31, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc__convert(&t, PTC_FLOAT64, out, 32, &err), 0, &err);
    CHECK_CODE(ptc__convert(&t, (ptc_dtype)999, out, 32, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc__convert(NULL, PTC_FLOAT64, out, 32, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc__convert(&t, PTC_FLOAT8_E5M2, out, 32, &err), PTC_EINVAL, &err);
    /* An empty tensor converts to nothing, even with no buffer. */
    shape[0] = 0;
    t.numel = 0;
    CHECK_CODE(ptc__convert(&t, PTC_FLOAT16, NULL, 0, &err), 0, &err);
    /* A few values spelled out (torch 2.6 gives the same). */
    float in[4] = {1.0f, -2.5f, 65520.0f, 0x1p-25f};
    memcpy(data, in, 16);
    shape[0] = 4;
    t.numel = 4;
    uint16_t h[4];
    CHECK_CODE(ptc__convert(&t, PTC_FLOAT16, h, sizeof h, &err), 0, &err);
    CHECK_INT(h[0], 0x3C00);
    CHECK_INT(h[1], 0xC100);
    CHECK_INT(h[2], 0x7C00);
    CHECK_INT(h[3], 0x0000);
    uint8_t u8[4];
    CHECK_CODE(ptc__convert(&t, PTC_UINT8, u8, sizeof u8, &err), 0, &err);
    CHECK_INT(u8[0], 1);
    CHECK_INT(u8[1], 254);
    CHECK_INT(u8[2], 240); /* 65520 = 0xFFF0 */
    CHECK_INT(u8[3], 0);
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    snprintf(casts_dir, sizeof casts_dir, "%s/testdata/casts", top ? top : ".");
    test_golden_f32();
    test_cases();
    test_errors();
    test_exhaustive();
    return check_exit("test_convert");
}
