/*
 * convert.c - dtype conversions of tensors, bit for bit as torch 2.6's Tensor.to(dtype) produces
 * them on an x86-64 CPU, and the scalar float32 <-> float16 / bfloat16 conversions behind them.
 *
 * What torch does, measured with torch 2.6.0 on x86-64 (AVX-512) by
 * tests/interop/gen_cast_golden.py, and what ptc does (every rule below is checked against torch's
 * outputs in testdata/casts/):
 *
 *   float32 -> bfloat16  round to nearest, ties to even, on the bit pattern; overflow gives +-inf,
 *                        float32 subnormals round like any other value; -0.0 stays.
 *                        Every NaN becomes 0xFFFF (torch's vectorised kernel blends in 0xFFFF
 *                        whatever the sign or payload; torch's scalar c10::BFloat16 would give
 *                        0x7FC0, but torch 2.6 uses the vector kernel for every element here).
 *   float32 -> float16   round to nearest even (IEEE, what F16C's vcvtps2ph does): values from
 *                        65520 up become inf, float16 subnormals are produced exactly, -0.0 stays.
 *                        NaN keeps its sign and the top 10 payload bits and is made quiet:
 *                        sign | 0x7E00 | mantissa >> 13. torch's contiguous kernel treats the
 *                        last (n mod 8) elements of each thread's slice with a scalar tail loop
 *                        that writes 0x7FFF for every NaN instead; ptc does not reproduce that
 *                        tail, which depends on the tensor's length and torch's thread count.
 *   float16 -> float32   exact; NaN keeps sign and payload and is made quiet (vcvtph2ps):
 *                        sign | 0x7FC00000 | mantissa << 13. (torch's tail loop: 0x7FFFFFFF.)
 *   bfloat16 -> float32  exact, bits << 16, NaN payloads untouched (signalling NaNs stay so).
 *   float64 -> float32   round to nearest even; NaN: sign | 0x7FC00000 | mantissa >> 29 (cvtsd2ss).
 *   float32 -> float64   exact; NaN: sign | 0x7FF8000000000000 | mantissa << 29 (cvtss2sd).
 *   float64 -> float16 / bfloat16
 *                        through float32: the double is first rounded to float32, then to 16
 *                        bits (double rounding, as torch does: 1 + 2^-8 + 2^-30 becomes bfloat16
 *                        1.0, not 1 + 2^-7). NaN: float16 as float32 -> float16 above; bfloat16
 *                        0xFFFF (torch's vector kernel; its scalar tail, the last n mod 16
 *                        elements of each thread's slice, writes 0x7FC0).
 *   float16 -> bfloat16  through float32; NaN becomes 0x7FC0 (torch's scalar c10 path here).
 *   bfloat16 -> float16  through float32 (exact), then float32 -> float16 above.
 *   float16 / bfloat16 -> float64   through float32, then float32 -> float64.
 *   float -> int         truncation toward zero. For NaN and values outside the target's range,
 *                        C leaves the result undefined; torch on x86-64 gives what cvttss2si /
 *                        cvttsd2si give, and ptc reproduces that exactly, without undefined
 *                        behaviour: int64: INT64_MIN for NaN, +-inf and |x| >= 2^63 (except
 *                        -2^63 itself); int32: INT32_MIN for NaN and anything outside
 *                        (-2^31 - 1, 2^31); int16 and int8: the value is first converted to
 *                        int32 as just said and its low 16 or 8 bits are kept (70000.0 -> int16
 *                        4464, NaN -> 0, 1e10 -> 0); uint8: the low 8 bits of the int64
 *                        conversion instead (torch differs here: float64 -2147483649.0 gives
 *                        uint8 255 but int8 0; -1.5 -> uint8 255).
 *   float -> bool        x != 0: NaN and +-inf are true, +-0.0 is false.
 *   int -> float         int64 / int32 -> float64 and float32: round to nearest even, once
 *                        (2^60 + 2^36 + 1 -> float32 0x5D800001). -> float16 / bfloat16: first to
 *                        float32, then to 16 bits (double rounding, as torch: 2^25 + 2^17 + 1 ->
 *                        bfloat16 0x4C00).
 *   int -> int           two's complement truncation to the target width (int64 300 -> uint8 44).
 *   int -> bool          x != 0.  bool -> anything: 0 or 1. A bool byte other than 0 and 1 (which
 *                        torch never writes) counts as true.
 *
 * These results hold on x86-64; on other architectures torch's float -> int results for NaN and
 * out-of-range values differ (they follow that hardware), while ptc's stay as documented here.
 * Non-NaN rounding needs the default floating-point environment (round to nearest, no flush to
 * zero), which C guarantees unless the program changes it.
 */
#include "tensor/tensor.h"

#include <string.h>

/* ---- scalar conversions ---------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double f64_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

uint16_t ptc__f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return 0xFFFF;
    /* Adding 0x7FFF plus the lowest kept bit rounds to nearest even on the bit pattern: a carry
     * out of the mantissa steps the exponent, and from the largest finite values reaches the
     * infinity pattern, which is exactly IEEE overflow. NaN is excluded above, so the carry never
     * reaches the sign bit. */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t ptc__f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) /* 65520 and above (inf included) round to inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a >= 0x38800000u) {
        /* Normal float16 (>= 2^-14): rebias the exponent from 127 to 15, then round the 13
         * dropped bits to nearest even; a carry out of the mantissa steps the exponent, which
         * stays finite because a < 65520. */
        uint32_t r = a - 0x38000000u;
        r += 0xFFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) /* up to 2^-25 (a tie that goes to the even 0): zero */
        return sign;
    /* Subnormal float16: the value in units of 2^-24 is m * 2^(e - 126) with the implicit bit in
     * m; shift right by 126 - e (14 to 24) and round the shifted-out bits to nearest even. A
     * result of 0x400 is the smallest normal, which the same encoding represents. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e;
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

float ptc__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1F) /* inf, or NaN made quiet as vcvtph2ps does */
        return f32_from_bits(sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0));
    if (e == 0) {
        if (m == 0)
            return f32_from_bits(sign);
        /* Subnormal: normalise the mantissa; every float16 subnormal is a float32 normal. */
        e = 1;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        m &= 0x3FFu;
    }
    return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

float ptc__bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

/* float64 -> float32 and back with the NaN handling of SSE's cvtsd2ss / cvtss2sd made explicit,
 * so that the results do not depend on the compiler or the architecture. */
static float f64_to_f32(double d)
{
    if (d != d) {
        uint64_t u = f64_bits(d);
        return f32_from_bits((uint32_t)(u >> 32 & 0x80000000u) | 0x7FC00000u |
                             (uint32_t)(u >> 29 & 0x3FFFFFu));
    }
    return (float)d;
}

static double f32_to_f64(float f)
{
    if (f != f) {
        uint32_t u = f32_bits(f);
        return f64_from_bits((uint64_t)(u & 0x80000000u) << 32 | 0x7FF8000000000000ull |
                             (uint64_t)(u & 0x3FFFFFu) << 29);
    }
    return (double)f;
}

/* float -> int32 as cvttsd2si computes it: truncation, and INT32_MIN (the "integer indefinite")
 * for NaN and out-of-range values. The comparisons are false for NaN. */
static int32_t f64_to_i32(double d)
{
    if (d > -2147483649.0 && d < 2147483648.0)
        return (int32_t)d;
    return INT32_MIN;
}

static int64_t f64_to_i64(double d)
{
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0)
        return (int64_t)d;
    return INT64_MIN;
}

/* ---- tensor conversion ----------------------------------------------------------------------- */

typedef enum { K_F64, K_F32, K_F16, K_BF16, K_INT, K_BOOL, K_OTHER } kind;

static kind kind_of(ptc_dtype dt)
{
    switch (dt) {
    case PTC_FLOAT64:
        return K_F64;
    case PTC_FLOAT32:
        return K_F32;
    case PTC_FLOAT16:
        return K_F16;
    case PTC_BFLOAT16:
        return K_BF16;
    case PTC_INT64:
    case PTC_INT32:
    case PTC_INT16:
    case PTC_INT8:
    case PTC_UINT8:
        return K_INT;
    case PTC_BOOL:
        return K_BOOL;
    default:
        return K_OTHER;
    }
}

/* One source element decoded: the float kinds as float32 (float16 and bfloat16 are exact in it)
 * or float64, the integer kinds and bool as int64. */
typedef struct elem {
    kind k;
    uint16_t h; /* the raw 16 bits for float16 / bfloat16 (float16 NaN -> bfloat16 needs them) */
    float f;
    double d;
    int64_t i;
} elem;

static void decode(ptc_dtype dt, const uint8_t *p, elem *e)
{
    e->k = kind_of(dt);
    switch (dt) {
    case PTC_FLOAT64:
        e->d = f64_from_bits(ptc__le64(p));
        break;
    case PTC_FLOAT32:
        e->f = f32_from_bits(ptc__le32(p));
        break;
    case PTC_FLOAT16:
        e->h = ptc__le16(p);
        e->f = ptc__f16_to_f32(e->h);
        break;
    case PTC_BFLOAT16:
        e->h = ptc__le16(p);
        e->f = ptc__bf16_to_f32(e->h);
        break;
    case PTC_INT64:
        e->i = (int64_t)ptc__le64(p);
        break;
    case PTC_INT32:
        e->i = (int32_t)ptc__le32(p);
        break;
    case PTC_INT16:
        e->i = (int16_t)ptc__le16(p);
        break;
    case PTC_INT8:
        e->i = (int8_t)p[0];
        break;
    case PTC_UINT8:
        e->i = p[0];
        break;
    case PTC_BOOL:
        e->i = p[0] != 0;
        break;
    default:
        break;
    }
}

static bool is_float(kind k)
{
    return k == K_F64 || k == K_F32 || k == K_F16 || k == K_BF16;
}

/* The source as float32, the way torch narrows each kind (see the table at the top). */
static float as_f32(const elem *e)
{
    if (e->k == K_F64)
        return f64_to_f32(e->d);
    if (is_float(e->k))
        return e->f;
    return (float)e->i;
}

/* The source as a double for float -> int and -> bool; exact for every float kind. */
static double as_f64(const elem *e)
{
    return e->k == K_F64 ? e->d : (double)e->f;
}

static void store(void *dst, const void *v, size_t n)
{
    memcpy(dst, v, n);
}

static void encode(ptc_dtype dt, const elem *e, uint8_t *out)
{
    kind dk = kind_of(dt);
    if (dk == K_F64) {
        double d = e->k == K_F64 ? e->d : is_float(e->k) ? f32_to_f64(e->f) : (double)e->i;
        store(out, &d, 8);
    } else if (dk == K_F32) {
        float f = as_f32(e);
        store(out, &f, 4);
    } else if (dk == K_F16) {
        uint16_t h = ptc__f32_to_f16(as_f32(e));
        store(out, &h, 2);
    } else if (dk == K_BF16) {
        bool f16_nan = e->k == K_F16 && (e->h & 0x7FFFu) > 0x7C00u;
        uint16_t h = f16_nan ? 0x7FC0 : ptc__f32_to_bf16(as_f32(e));
        store(out, &h, 2);
    } else if (dk == K_BOOL) {
        uint8_t b = is_float(e->k) ? !(as_f64(e) == 0.0) : e->i != 0;
        out[0] = b;
    } else {
        /* Integers: the int64 value, or the float truncated as described at the top; then the
         * low bytes, which is two's complement truncation without implementation-defined casts. */
        uint64_t v;
        if (!is_float(e->k))
            v = (uint64_t)e->i;
        else if (dt == PTC_INT64 || dt == PTC_UINT8)
            v = (uint64_t)f64_to_i64(as_f64(e));
        else
            v = (uint64_t)(int64_t)f64_to_i32(as_f64(e));
        switch (dt) {
        case PTC_INT64: {
            int64_t x;
            memcpy(&x, &v, 8);
            store(out, &x, 8);
            break;
        }
        case PTC_INT32: {
            uint32_t x = (uint32_t)v;
            store(out, &x, 4);
            break;
        }
        case PTC_INT16: {
            uint16_t x = (uint16_t)v;
            store(out, &x, 2);
            break;
        }
        default:
            out[0] = (uint8_t)v;
            break;
        }
    }
}

typedef struct conv_ctx {
    ptc_dtype src, dst;
    size_t ss, ds; /* element sizes */
    uint8_t *out;
    size_t left; /* bytes left in out */
    ptc_error *err;
} conv_ctx;

static bool host_is_little(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Receives little-endian source elements in row-major order; writes host-order results. */
static int conv_sink(void *ud, const uint8_t *p, size_t n)
{
    conv_ctx *c = ud;
    size_t count = n / c->ss;
    if (count > c->left / c->ds)
        return ptc__err(c->err, PTC_EINVAL, "", -1, "ptc__convert: output buffer too small");
    if (c->src == c->dst) {
        memcpy(c->out, p, n);
        if (!host_is_little())
            ptc__byteswap(c->out, n, c->dst);
    } else {
        elem e = {0};
        for (size_t i = 0; i < count; i++) {
            decode(c->src, p + i * c->ss, &e);
            encode(c->dst, &e, c->out + i * c->ds);
        }
    }
    c->out += count * c->ds;
    c->left -= count * c->ds;
    return 0;
}

int ptc__convert(const ptc_tensor *t, ptc_dtype dst, void *out, size_t out_len, ptc_error *err)
{
    const ptc__dtype_info *si = t ? ptc__dtype_info_of(t->dtype) : NULL;
    const ptc__dtype_info *di = ptc__dtype_info_of(dst);
    if (!si || !di || (!out && t->numel > 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__convert: missing or invalid argument");
    if (t->dtype != dst && (kind_of(t->dtype) == K_OTHER || kind_of(dst) == K_OTHER))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__convert: cannot convert %s to %s", si->name,
                        di->name);
    uint64_t need;
    if (!ptc__mul_u64_ok((uint64_t)t->numel, di->size, &need) || need > out_len)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc__convert: %lld elements of %s need more than the %zu bytes given",
                        (long long)t->numel, di->name, out_len);
    conv_ctx c = {t->dtype, dst, si->size, di->size, out, out_len, err};
    return ptc__tensor_readout(t, conv_sink, &c, err);
}
