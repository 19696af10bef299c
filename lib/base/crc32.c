/*
 * crc32.c - CRC-32 (IEEE 802.3, the zip checksum) with carry-less multiplication where the
 * processor has it.
 *
 * Saving and verifying checkpoints checksums every byte; zlib's table-driven CRC runs at about
 * 2 GB/s here, slower than the page cache delivers the bytes. With PCLMULQDQ four 128-bit lanes
 * are folded 64 bytes at a time (the method of Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", with the constants for the bit-reflected polynomial 0xEDB88320),
 * then reduced to 32 bits by a Barrett step. Inputs shorter than 64 bytes, the tail that is not a
 * multiple of 16 bytes, and processors without the instruction use zlib's crc32, so the result is
 * always exactly zlib's.
 */
#include "base/base.h"

#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PTC_CRC_PCLMUL 1

__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i x, __m128i k,
                                                                    __m128i data)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

/* crc is the running register (zlib's value inverted); len >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t crc, const uint8_t *p,
                                                                  size_t len)
{
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL); /* u', P' */
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p);
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;
    while (len >= 64) {
        x1 = fold(x1, k1k2, _mm_loadu_si128((const __m128i *)p));
        x2 = fold(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold(x4, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }
    x1 = fold(x1, k3k4, x2);
    x1 = fold(x1, k3k4, x3);
    x1 = fold(x1, k3k4, x4);
    while (len >= 16) {
        x1 = fold(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    /* 128 -> 64 bits (appending 32 zero bits), then 64 -> 32 by Barrett reduction. */
    __m128i t = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 4), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly, 0x00);
    x1 = _mm_xor_si128(x1, t);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

uint32_t ptc__crc32(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
#ifdef PTC_CRC_PCLMUL
    if (n >= 64 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
        size_t bulk = n & ~(size_t)15;
        crc = ~crc_fold(~crc, p, bulk);
        p += bulk;
        n -= bulk;
    }
#endif
    while (n > 0) {
        /* zlib takes lengths in unsigned int pieces. */
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}
