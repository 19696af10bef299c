/*
 * crc32.c - CRC-32 (IEEE 802.3, the zip checksum) from Intel's ISA-L (crc32_gzip_refl).
 *
 * Saving and verifying checkpoints checksums every byte, so the checksum must keep up with memory.
 * On this Zen 4 (tests/bench/hash/README.md, bench_crc remeasures): zlib 1.2.13's table-driven
 * crc32 runs at about 4.3 GB/s; libdeflate 1.14's and the hand-written 128-bit PCLMULQDQ folding
 * libptc carried before both at about 14.4 GB/s; ISA-L 2.30's crc32_gzip_refl, which folds 512
 * bits at a time with VPCLMULQDQ where the processor has AVX-512 (and picks a smaller kernel at
 * run time where it has not), at about 25 GB/s from memory and 57 GB/s from L2. So libptc uses
 * ISA-L, and the hand-written folding went.
 *
 * crc32_gzip_refl keeps zlib's convention (start from 0, feed pieces in order, the register
 * inverted before and after), so its result is exactly zlib's crc32 for every input and either
 * library can check the other's (tests/unit/test_base.c does, over lengths, alignments and seeds).
 */
#include "base/base.h"

#include <isa-l/crc.h>

uint32_t ptc__crc32(uint32_t crc, const void *data, size_t n)
{
    return crc32_gzip_refl(crc, data, (uint64_t)n);
}
