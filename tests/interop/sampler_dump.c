/*
 * sampler_dump.c - prints what the data layer (lib/data/) computes, for
 * tests/interop/check_sampler.py to compare with torch and torchvision.
 *
 *   sampler_dump [--drop-last] [--shuffle SEED EPOCH] N WORLD
 *       one line per rank 0..WORLD-1: the indices ptc__sampler_indices gives that rank, separated
 *       by spaces (an empty line for none)
 *   sampler_dump --eval N WORLD
 *       the same for ptc__eval_shard
 *   sampler_dump --normalize M0 M1 M2 S0 S1 S2
 *       three lines (channels), each 256 float32 bit patterns in hex: byte v through ToTensor +
 *       Normalize(mean, std)
 *   sampler_dump --augment M0 M1 M2 S0 S1 S2 TOP LEFT FLIP
 *       reads one 3x32x32 uint8 image (3072 bytes, CHW) from stdin and writes the 3072 float32
 *       results of ptc__augment_image (little-endian, CHW) to stdout
 *   sampler_dump --draw SEED RANK EPOCH INDEX
 *       "TOP LEFT FLIP" of ptc__augment_draw
 *
 * Exit status 0, 1 on a library error, 2 on a usage error.
 */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: sampler_dump [--drop-last] [--shuffle SEED EPOCH] N WORLD\n"
                    "       sampler_dump --eval N WORLD\n"
                    "       sampler_dump --normalize M0 M1 M2 S0 S1 S2\n"
                    "       sampler_dump --augment M0 M1 M2 S0 S1 S2 TOP LEFT FLIP < image\n"
                    "       sampler_dump --draw SEED RANK EPOCH INDEX\n");
    return 2;
}

static bool num(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool unum(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return false;
    *out = v;
    return true;
}

static bool mean_std(char **argv, double mean[3], double std[3])
{
    for (int c = 0; c < 6; c++) {
        char *end;
        double v = strtod(argv[c], &end);
        if (end == argv[c] || *end)
            return false;
        (c < 3 ? mean : std)[c % 3] = v;
    }
    return true;
}

static void print_list(const int64_t *idx, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        printf("%s%lld", k ? " " : "", (long long)idx[k]);
    printf("\n");
}

int main(int argc, char **argv)
{
    ptc_error err;
    if (argc == 8 && strcmp(argv[1], "--normalize") == 0) {
        double mean[3], std[3];
        if (!mean_std(argv + 2, mean, std))
            return usage();
        ptc__normalizer nz;
        ptc__normalizer_init(&nz, mean, std);
        for (int c = 0; c < 3; c++)
            for (int v = 0; v < 256; v++) {
                uint32_t u;
                memcpy(&u, &nz.lut[c][v], 4);
                printf("%08x%s", u, v == 255 ? "\n" : " ");
            }
        return 0;
    }
    if (argc == 11 && strcmp(argv[1], "--augment") == 0) {
        double mean[3], std[3];
        long long top, left, flip;
        if (!mean_std(argv + 2, mean, std) || !num(argv[8], 0, 8, &top) ||
            !num(argv[9], 0, 8, &left) || !num(argv[10], 0, 1, &flip))
            return usage();
        uint8_t img[PTC__DATA_PIXELS];
        float out[PTC__DATA_PIXELS];
        if (fread(img, 1, sizeof img, stdin) != sizeof img) {
            fprintf(stderr, "sampler_dump: expected %d bytes on stdin\n", PTC__DATA_PIXELS);
            return 2;
        }
        ptc__normalizer nz;
        ptc__normalizer_init(&nz, mean, std);
        ptc__augment_image(&nz, img, (int)top, (int)left, flip != 0, out);
        uint8_t le[4 * PTC__DATA_PIXELS];
        for (int k = 0; k < PTC__DATA_PIXELS; k++) {
            uint32_t u;
            memcpy(&u, &out[k], 4);
            ptc__put_le32(le + 4 * k, u);
        }
        return fwrite(le, 1, sizeof le, stdout) == sizeof le ? 0 : 1;
    }
    if (argc == 6 && strcmp(argv[1], "--draw") == 0) {
        uint64_t seed, rank, epoch;
        long long index;
        if (!unum(argv[2], &seed) || !unum(argv[3], &rank) || !unum(argv[4], &epoch) ||
            !num(argv[5], 0, INT64_MAX, &index))
            return usage();
        int top, left;
        bool flip;
        ptc__augment_draw(seed, rank, epoch, index, &top, &left, &flip);
        printf("%d %d %d\n", top, left, (int)flip);
        return 0;
    }

    bool drop_last = false, shuffle = false, eval = false;
    uint64_t seed = 0, epoch = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        if (strcmp(argv[i], "--drop-last") == 0) {
            drop_last = true;
        } else if (strcmp(argv[i], "--eval") == 0) {
            eval = true;
        } else if (strcmp(argv[i], "--shuffle") == 0 && i + 2 < argc) {
            shuffle = true;
            if (!unum(argv[i + 1], &seed) || !unum(argv[i + 2], &epoch))
                return usage();
            i += 2;
        } else {
            return usage();
        }
    }
    long long n, world;
    if (argc - i != 2 || !num(argv[i], 0, INT64_MAX, &n) || !num(argv[i + 1], 1, 1 << 20, &world))
        return usage();
    for (int r = 0; r < world; r++) {
        int64_t *idx = NULL, count = 0;
        int rc;
        if (eval) {
            rc = ptc__eval_shard(n, (int)world, r, &idx, &count, &err);
        } else {
            ptc__sampler_params p = {.n = n,
                                     .world = (int)world,
                                     .rank = r,
                                     .shuffle = shuffle,
                                     .drop_last = drop_last,
                                     .seed = seed};
            rc = ptc__sampler_indices(&p, epoch, &idx, &count, &err);
        }
        if (rc < 0) {
            fprintf(stderr, "sampler_dump: %s\n", err.message);
            return 1;
        }
        print_list(idx, count);
        ptc__free(idx);
    }
    return 0;
}
