/*
 * bench_crc.c - CRC-32 throughput of libptc's ptc__crc32 (ISA-L's crc32_gzip_refl) against zlib's
 * crc32() and, where configure found libdeflate (PTC_BENCH_LIBDEFLATE), libdeflate_crc32(), on the
 * same buffers, to decide (and re-check) which one libptc uses (tests/bench/hash/README.md). Built
 * by make, run by tests/bench/hash/run.sh, never by make check.
 *
 *   bench_crc [MIB] [ROUNDS]
 *
 * Two working sets: MIB mebibytes (default 256), larger than any cache, so the rate is bounded by
 * memory as when a checkpoint is saved or verified; and 256 KiB, which stays in L2, so the rate is
 * the code's own. Each round times every contender once, alternating, over the same bytes; the
 * median and range of the rounds are printed in GB/s (10^9 bytes per second). Every contender's
 * result is compared with zlib's first, so a fast wrong answer is reported, never timed.
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#ifdef PTC_BENCH_LIBDEFLATE
#include <libdeflate.h>
#endif

#define MAX_ROUNDS 101

typedef uint32_t (*crc_fn)(uint32_t crc, const uint8_t *p, size_t n);

static uint32_t run_zlib(uint32_t crc, const uint8_t *p, size_t n)
{
    /* zlib takes unsigned int lengths. */
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

#ifdef PTC_BENCH_LIBDEFLATE
static uint32_t run_libdeflate(uint32_t crc, const uint8_t *p, size_t n)
{
    return libdeflate_crc32(crc, p, n);
}
#endif

static uint32_t run_ptc(uint32_t crc, const uint8_t *p, size_t n)
{
    return ptc__crc32(crc, p, n);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int rounds = argc > 2 ? atoi(argv[2]) : 11;
    if (mib == 0 || mib > 16384 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_crc [MIB (1-16384)] [ROUNDS (1-%d)]\n", MAX_ROUNDS);
        return 2;
    }
    static const struct {
        const char *name;
        crc_fn fn;
    } who[] = {{"zlib crc32", run_zlib},
#ifdef PTC_BENCH_LIBDEFLATE
               {"libdeflate_crc32", run_libdeflate},
#endif
               {"ptc__crc32 (libptc: ISA-L crc32_gzip_refl)", run_ptc}};
    enum { NWHO = sizeof who / sizeof who[0] };
    size_t big = mib << 20;
    uint8_t *buf = malloc(big);
    if (!buf) {
        fprintf(stderr, "bench_crc: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < big; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    const struct {
        const char *name;
        size_t n;
        int reps; /* passes per timing, so that each timing lasts long enough */
    } sets[] = {{"large (beyond cache)", big, 1}, {"256 KiB (in L2)", 256 << 10, (int)(big >> 18)}};
    printf("| working set | implementation | median GB/s | range GB/s |\n|---|---|---|---|\n");
    for (size_t s = 0; s < 2; s++) {
        uint32_t want = run_zlib(0, buf, sets[s].n);
        for (int w = 0; w < NWHO; w++) {
            uint32_t got = who[w].fn(0, buf, sets[s].n);
            if (got != want) {
                fprintf(stderr, "bench_crc: %s gives %08x where zlib gives %08x\n", who[w].name,
                        got, want);
                return 1;
            }
        }
        double t[NWHO][MAX_ROUNDS];
        volatile uint32_t sink = 0;
        for (int r = 0; r < rounds; r++) {
            for (int w = 0; w < NWHO; w++) {
                double t0 = now();
                for (int k = 0; k < sets[s].reps; k++)
                    sink ^= who[w].fn(0, buf, sets[s].n);
                t[w][r] = now() - t0;
            }
        }
        for (int w = 0; w < NWHO; w++) {
            qsort(t[w], (size_t)rounds, sizeof t[w][0], cmp_double);
            double bytes = (double)sets[s].n * sets[s].reps;
            printf("| %s | %s | %.2f | %.2f-%.2f |\n", sets[s].name, who[w].name,
                   bytes / t[w][rounds / 2] / 1e9, bytes / t[w][rounds - 1] / 1e9,
                   bytes / t[w][0] / 1e9);
        }
        (void)sink;
    }
    free(buf);
    return 0;
}
