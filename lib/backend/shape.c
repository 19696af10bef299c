/*
 * shape.c - the pure helpers every backend shares: layout fingerprints and the output size of a
 * convolution or pooling window. No allocation, no state: compiled into libptc and into each
 * backend module alike (lib/base/plugin.h).
 */
#include "backend/backend.h"

uint64_t ptc__fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* floor((in + 2 pad - kernel) / stride) + 1, as torch computes it for dilation 1 and ceil_mode
 * off. The window must fit the padded input at least once; the sum is formed in 64 bits so that no
 * int overflows on the way, and the result must fit an int. */
int ptc__conv_out(int in, int kernel, int stride, int pad)
{
    if (in < 1 || kernel < 1 || stride < 1 || pad < 0)
        return -1;
    int64_t span = (int64_t)in + 2 * (int64_t)pad - kernel;
    if (span < 0)
        return -1;
    int64_t out = span / stride + 1;
    return out > INT32_MAX ? -1 : (int)out;
}
