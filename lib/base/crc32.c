/*
 * crc32.c - CRC-32 (IEEE 802.3, the zip checksum) from libdeflate.
 *
 * Saving and verifying checkpoints checksums every byte, so the checksum must keep up with the
 * page cache. zlib 1.2.13's table-driven crc32 runs at about 4.3 GB/s here; libdeflate's
 * libdeflate_crc32 folds with carry-less multiplication (PCLMULQDQ, AVX where the processor has
 * it) at about 14.5 GB/s, as fast as the hand-written PCLMULQDQ folding libptc carried before,
 * which therefore went (tests/bench/hash/README.md has the figures and bench_crc.c remeasures).
 * The result is exactly zlib's crc32 for every input, so either library can check the other's.
 */
#include "base/base.h"

#include <libdeflate.h>

uint32_t ptc__crc32(uint32_t crc, const void *data, size_t n)
{
    /* libdeflate takes size_t lengths and the same pre/post-inverted convention as zlib. */
    return libdeflate_crc32(crc, data, n);
}
