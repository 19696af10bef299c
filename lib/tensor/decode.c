/*
 * decode.c - tensor elements as doubles (ptc_dtype_element_f64, ptc_tensor_read_f64): every
 * numeric dtype torch has, float8 variants and complex included, decoded exactly. What `ptc diff`
 * compares and what an embedder reads a tensor of any dtype with.
 */
#include "tensor/tensor.h"

#include <math.h>
#include <string.h>

/* An unsigned little-endian integer of n bytes. */
static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static double half_to_double(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(m + 1024, e - 25);
    return s ? -v : v;
}

/* float8 formats without infinities: e4m3fn (bias 7, NaN = S.1111.111) and the "fnuz" forms
 * (bias 8 and 16, one NaN 0x80, no negative zero). */
static double f8_to_double(uint8_t b, int ebits, int bias, int fnuz)
{
    int mbits = 7 - ebits, s = b >> 7, e = (b >> mbits) & ((1 << ebits) - 1);
    int m = b & ((1 << mbits) - 1);
    if (fnuz && b == 0x80)
        return NAN;
    if (!fnuz && e == (1 << ebits) - 1 && m == (1 << mbits) - 1)
        return NAN;
    double v = e == 0 ? ldexp(m, 1 - bias - mbits) : ldexp(m + (1 << mbits), e - bias - mbits);
    return s ? -v : v;
}

/* Component c (0 real, 1 imaginary) of the element at p; false for a dtype without a value. */
static bool load(ptc_dtype dt, const uint8_t *p, int c, double *out)
{
    float f;
    double d;
    uint32_t u32;
    uint64_t u64;
    switch (dt) {
    case PTC_FLOAT64:
    case PTC_COMPLEX128:
        u64 = le(p + 8 * c, 8);
        memcpy(&d, &u64, 8);
        *out = d;
        return true;
    case PTC_FLOAT32:
    case PTC_COMPLEX64:
        u32 = (uint32_t)le(p + 4 * c, 4);
        memcpy(&f, &u32, 4);
        *out = f;
        return true;
    case PTC_FLOAT16:
    case PTC_COMPLEX32:
        *out = half_to_double((uint16_t)le(p + 2 * c, 2));
        return true;
    case PTC_BFLOAT16:
        u32 = (uint32_t)le(p, 2) << 16;
        memcpy(&f, &u32, 4);
        *out = f;
        return true;
    case PTC_FLOAT8_E5M2:
        *out = half_to_double((uint16_t)(p[0] << 8));
        return true;
    case PTC_FLOAT8_E4M3FN:
        *out = f8_to_double(p[0], 4, 7, 0);
        return true;
    case PTC_FLOAT8_E4M3FNUZ:
        *out = f8_to_double(p[0], 4, 8, 1);
        return true;
    case PTC_FLOAT8_E5M2FNUZ:
        *out = f8_to_double(p[0], 5, 16, 1);
        return true;
    case PTC_INT64:
        *out = (double)(int64_t)le(p, 8);
        return true;
    case PTC_INT32:
        *out = (double)(int32_t)(uint32_t)le(p, 4);
        return true;
    case PTC_INT16:
        *out = (double)(int16_t)(uint16_t)le(p, 2);
        return true;
    case PTC_INT8:
        *out = (double)(int8_t)p[0];
        return true;
    case PTC_UINT8:
    case PTC_BOOL:
        *out = p[0];
        return true;
    case PTC_UINT16:
        *out = (double)le(p, 2);
        return true;
    case PTC_UINT32:
        *out = (double)le(p, 4);
        return true;
    case PTC_UINT64:
        *out = (double)le(p, 8);
        return true;
    default:
        return false;
    }
}

static bool is_complex(ptc_dtype dt)
{
    return dt == PTC_COMPLEX128 || dt == PTC_COMPLEX64 || dt == PTC_COMPLEX32;
}

int ptc_dtype_element_f64(ptc_dtype dt, const void *elem, double *re, double *im)
{
    if (!elem || !re)
        return PTC_EINVAL;
    double r, i = 0;
    if (!load(dt, elem, 0, &r))
        return PTC_EUNSUPPORTED;
    if (is_complex(dt))
        load(dt, elem, 1, &i);
    *re = r;
    if (im)
        *im = i;
    return 0;
}

typedef struct f64_sink {
    ptc_dtype dt;
    size_t esize;
    int comps;
    double *out;
} f64_sink;

static int f64_put(void *ud, const uint8_t *p, size_t n)
{
    f64_sink *s = ud;
    for (size_t off = 0; off + s->esize <= n; off += s->esize)
        for (int c = 0; c < s->comps; c++)
            load(s->dt, p + off, c, s->out++);
    return 0;
}

int ptc_tensor_read_f64(const ptc_tensor *t, double *out, size_t n, ptc_error *err)
{
    if (!t || !out)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_tensor_read_f64: missing argument");
    ptc_dtype dt = ptc_tensor_dtype(t);
    double probe;
    static const uint8_t zero[16];
    if (!load(dt, zero, 0, &probe))
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "ptc_tensor_read_f64: a %s tensor has no numeric value to read",
                        ptc_dtype_name(dt) ? ptc_dtype_name(dt) : "?");
    int comps = is_complex(dt) ? 2 : 1;
    int64_t numel = ptc_tensor_numel(t);
    if (numel < 0 || (uint64_t)numel > n / (size_t)comps)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_tensor_read_f64: %lld elements need %llu doubles; out holds %zu",
                        (long long)numel, (unsigned long long)numel * (unsigned)comps, n);
    f64_sink s = {dt, ptc_dtype_size(dt), comps, out};
    return ptc__tensor_readout(t, f64_put, &s, err);
}
