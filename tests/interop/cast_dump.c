/*
 * cast_dump.c - ptc's float32 -> bfloat16 / float16 conversions of all 2^32 float32 patterns, as
 * digests that tests/interop/check_casts.py compares with torch's.
 *
 * The patterns are cut into 256 chunks of 2^24 consecutive patterns (chunk k holds k * 2^24 ...
 * (k + 1) * 2^24 - 1, in order). For each chunk it prints one line
 *
 *     <k> <sha256 of the bfloat16 results> <sha256 of the float16 results>
 *
 * where the results are the 2^24 16-bit outputs of ptc__f32_to_bf16 / ptc__f32_to_f16 as
 * little-endian bytes, in pattern order. Chunks are computed on every CPU and printed in order.
 *
 *     cast_dump              all 256 chunks
 *     cast_dump --chunk K    the raw outputs of chunk K instead (2^24 bfloat16 results, then 2^24
 *                            float16 results), so that a mismatching chunk can be examined
 *
 * Exit status 0, or 2 on a usage error.
 */
#include "tensor/tensor.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_BITS 24
#define NCHUNKS    (1u << (32 - CHUNK_BITS))
#define CHUNK      (1u << CHUNK_BITS)

typedef struct job {
    unsigned next; /* next chunk to take */
    pthread_mutex_t lock;
    uint8_t digest[NCHUNKS][2][32];
} job;

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Fills bf[] and hf[] (CHUNK little-endian u16 each) for chunk k. */
static void convert_chunk(unsigned k, uint8_t *bf, uint8_t *hf)
{
    uint32_t base = (uint32_t)k << CHUNK_BITS;
    for (uint32_t i = 0; i < CHUNK; i++) {
        float f = f32_of(base + i);
        ptc__put_le16(bf + 2 * (size_t)i, ptc__f32_to_bf16(f));
        ptc__put_le16(hf + 2 * (size_t)i, ptc__f32_to_f16(f));
    }
}

static void *worker(void *arg)
{
    job *j = arg;
    uint8_t *bf = malloc(2 * (size_t)CHUNK), *hf = malloc(2 * (size_t)CHUNK);
    if (!bf || !hf) {
        fprintf(stderr, "cast_dump: out of memory\n");
        exit(1);
    }
    for (;;) {
        pthread_mutex_lock(&j->lock);
        unsigned k = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (k >= NCHUNKS)
            break;
        convert_chunk(k, bf, hf);
        const uint8_t *half[2] = {bf, hf};
        for (int h = 0; h < 2; h++) {
            ptc__sha256 s;
            ptc_error err;
            if (ptc__sha256_init(&s, &err) < 0) {
                fprintf(stderr, "cast_dump: %s\n", err.message);
                exit(1);
            }
            ptc__sha256_update(&s, half[h], 2 * (size_t)CHUNK);
            if (ptc__sha256_final(&s, j->digest[k][h], &err) < 0) {
                fprintf(stderr, "cast_dump: %s\n", err.message);
                exit(1);
            }
        }
    }
    free(bf);
    free(hf);
    return NULL;
}

static void put_hex(const uint8_t d[32])
{
    for (int i = 0; i < 32; i++)
        printf("%02x", d[i]);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--chunk") == 0) {
        char *end;
        unsigned long k = strtoul(argv[2], &end, 10);
        if (*end || k >= NCHUNKS) {
            fprintf(stderr, "cast_dump: chunk must be 0 to %u\n", NCHUNKS - 1);
            return 2;
        }
        uint8_t *bf = malloc(2 * (size_t)CHUNK), *hf = malloc(2 * (size_t)CHUNK);
        if (!bf || !hf)
            return 1;
        convert_chunk((unsigned)k, bf, hf);
        fwrite(bf, 2, CHUNK, stdout);
        fwrite(hf, 2, CHUNK, stdout);
        free(bf);
        free(hf);
        return ferror(stdout) ? 1 : 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: cast_dump [--chunk K]\n");
        return 2;
    }
    static job j;
    pthread_mutex_init(&j.lock, NULL);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
    pthread_t th[64];
    int started = 0;
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[started], NULL, worker, &j) == 0)
            started++;
    if (started == 0)
        worker(&j);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (unsigned k = 0; k < NCHUNKS; k++) {
        printf("%u ", k);
        put_hex(j.digest[k][0]);
        putchar(' ');
        put_hex(j.digest[k][1]);
        putchar('\n');
    }
    return ferror(stdout) ? 1 : 0;
}
