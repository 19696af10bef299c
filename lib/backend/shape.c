/*
 * shape.c - the pure helpers every backend shares: layout fingerprints, the output size of a
 * convolution or pooling window, and the argument checks of ref and cuda (one set of rules and
 * messages, so that a caller's mistake reads the same on every backend). No allocation, no state:
 * compiled into libptc and into each backend module alike (lib/base/plugin.h).
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

const char *ptc__role_name(ptc__role r)
{
    switch (r) {
    case PTC__ROLE_ACT:
        return "act";
    case PTC__ROLE_CONV_W:
        return "conv_w";
    case PTC__ROLE_VEC:
        return "vec";
    case PTC__ROLE_MAT:
        return "mat";
    }
    return "?";
}

int ptc__be_check_tensor(ptc_error *err, const char *op, const char *arg, const ptc__be_seen *t,
                         ptc__role role, int64_t n, int64_t c, int64_t h, int64_t w)
{
    if (!t->have_be)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: no backend instance", op);
    if (t->null)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: %s is NULL", op, arg);
    if (t->foreign)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: %s belongs to another backend instance", op,
                        arg);
    const int *d = t->dims;
    if (t->role != role || d[0] != n || d[1] != c || d[2] != h || d[3] != w)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%s: %s is %s [%d][%d][%d][%d], expected %s [%lld][%lld][%lld][%lld]", op,
                        arg, ptc__role_name(t->role), d[0], d[1], d[2], d[3], ptc__role_name(role),
                        (long long)n, (long long)c, (long long)h, (long long)w);
    return 0;
}

int ptc__be_check_plan(ptc_error *err, const char *op, int have, int foreign, int wrong_kind)
{
    if (!have)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: no backend instance or no plan", op);
    if (foreign)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: the plan belongs to another backend instance",
                        op);
    if (wrong_kind)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: the plan is for another kind of layer", op);
    return 0;
}
