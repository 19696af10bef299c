/*
 * keytext.c - the text of dict keys and ints as ptc shows them: the path segments ptc_walk
 * builds, the ints `ptc inspect` prints, and the same for embedders (ptc_key_text,
 * ptc_value_int_text). One implementation, so that a path a command prints and a path the walk
 * reports can never differ.
 */
#include "pth/pth.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* snprintf's contract for a piece of text that is already made: copies what fits into dst,
 * NUL-terminates, returns n. */
static size_t put(char *dst, size_t size, const void *s, size_t n)
{
    if (dst && size) {
        size_t k = n < size - 1 ? n : size - 1;
        if (k)
            memcpy(dst, s, k);
        dst[k] = '\0';
    }
    return n;
}

static size_t putf(char *dst, size_t size, const char *fmt, ...) PTC_PRINTF(3, 4);

static size_t putf(char *dst, size_t size, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return put(dst, size, tmp, n < 0 ? 0 : (size_t)n);
}

/* Decimal digits of a two's-complement little-endian integer of n bytes (n <= PTC_INT_TEXT_MAX):
 * divided by 10^9 repeatedly, each remainder 9 digits, least significant first. */
static size_t big_decimal(const uint8_t *bytes, size_t n, char *dst, size_t size)
{
    uint8_t mag[PTC_INT_TEXT_MAX];
    uint32_t chunk[PTC_INT_TEXT_MAX / 3 + 2];
    char text[PTC_INT_TEXT_MAX * 5 / 2 + 16]; /* 2.41 digits per byte, a sign and a NUL */
    size_t nchunk = 0;
    int neg = n && (bytes[n - 1] & 0x80);
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned v = neg ? (unsigned)(uint8_t)~bytes[i] + carry : bytes[i]; /* |x| = ~x + 1 */
        mag[i] = (uint8_t)v;
        carry = neg ? v >> 8 : 0;
    }
    size_t top = n;
    while (top && mag[top - 1] == 0)
        top--;
    while (top) {
        uint64_t rem = 0;
        for (size_t i = top; i-- > 0;) {
            uint64_t cur = (rem << 8) | mag[i];
            mag[i] = (uint8_t)(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        chunk[nchunk++] = (uint32_t)rem;
        while (top && mag[top - 1] == 0)
            top--;
    }
    if (nchunk == 0)
        return put(dst, size, "0", 1);
    int o = snprintf(text, sizeof text, "%s%u", neg ? "-" : "", (unsigned)chunk[nchunk - 1]);
    for (size_t i = nchunk - 1; i-- > 0;)
        o += snprintf(text + o, sizeof text - (size_t)o, "%09u", (unsigned)chunk[i]);
    return put(dst, size, text, (size_t)o);
}

size_t ptc_value_int_text(const ptc_value *v, size_t max_bytes, char *dst, size_t size)
{
    if (!v || v->kind != PTC_VALUE_INT)
        return put(dst, size, "?", 1);
    if (v->u.i.fits)
        return putf(dst, size, "%lld", (long long)v->u.i.v);
    if (max_bytes == 0 || max_bytes > PTC_INT_TEXT_MAX)
        max_bytes = PTC_INT_TEXT_MAX;
    if (v->u.i.nbytes > max_bytes)
        return putf(dst, size, "<int of %zu bytes>", (size_t)v->u.i.nbytes);
    return big_decimal(v->u.i.bytes, v->u.i.nbytes, dst, size);
}

/* Replaces the "[-]d.ddde[+-]XX" text in e by the decimal one unit of its last digit away from
 * it, up (toward larger magnitude when up matches the sign) or down; false when that would leave
 * the form (a mantissa of 0). */
static bool other_neighbour(char e[40], bool up)
{
    char *m = e[0] == '-' ? e + 1 : e, *end = strchr(m, 'e');
    if (!end)
        return false;
    if (e[0] == '-')
        up = !up; /* the magnitude moves the other way */
    int exp10 = (int)strtol(end + 1, NULL, 10);
    char digits[24];
    size_t nd = 0;
    for (char *q = m; q < end; q++)
        if (*q >= '0' && *q <= '9' && nd < sizeof digits)
            digits[nd++] = *q;
    size_t i = nd;
    if (up) {
        while (i > 0 && digits[i - 1] == '9')
            digits[--i] = '0';
        if (i == 0) { /* 9.99 -> 10.0: 1.00 one decade up */
            digits[0] = '1';
            exp10++;
        } else {
            digits[i - 1]++;
        }
    } else {
        while (i > 0 && digits[i - 1] == '0')
            digits[--i] = '9';
        if (i == 0)
            return false;
        digits[i - 1]--;
        if (digits[0] == '0') { /* 1.00 -> 0.99: 9.9 one decade down, one digit fewer */
            if (nd < 2)
                return false;
            memmove(digits, digits + 1, nd - 1);
            digits[nd - 1] = '9';
            exp10--;
        }
    }
    char out[40];
    size_t o = 0;
    if (e[0] == '-')
        out[o++] = '-';
    out[o++] = digits[0];
    if (nd > 1) {
        out[o++] = '.';
        memcpy(out + o, digits + 1, nd - 1);
        o += nd - 1;
    }
    snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    memcpy(e, out, strlen(out) + 1);
    return true;
}

/* Python's repr: the fewest significant digits that read back exactly, laid out in fixed notation
 * for decimal exponents -4..15 and in scientific notation otherwise ("0.1", "100.0", "1e-05",
 * "1e+16"). */
size_t ptc_float_text(double x, char *dst, size_t size)
{
    char e[40];
    if (isnan(x))
        return put(dst, size, "nan", 3);
    if (isinf(x))
        return x > 0 ? put(dst, size, "inf", 3) : put(dst, size, "-inf", 4);
    /* The fewest significant digits that read back exactly, in "d.ddde+XX" form. At each count
     * the two decimals around x are candidates: the nearest (what %e rounds to) and, when that
     * one reads back as another double, its neighbour on x's other side. Next to a power of two
     * the doubles below are twice as dense as those above, so the nearest can miss where the
     * other reads back: 2^-24 is "5.960464477539063e-08" (repr), not 17 digits. */
    for (int prec = 0; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, x);
        double back = strtod(e, NULL);
        if (back == x || (prec < 17 && other_neighbour(e, back < x) && strtod(e, NULL) == x))
            break;
    }
    /* Split into sign, digits and decimal exponent, then lay out as Python's repr does: fixed
     * notation for exponents -4..15, scientific otherwise. */
    const char *p = e;
    int neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof digits - 1)
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = *p == 'e' ? (int)strtol(p + 1, NULL, 10) : 0;

    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = -1; i > exp10; i--)
                out[o++] = '0';
            for (size_t i = 0; i < nd; i++)
                out[o++] = digits[i];
        } else {
            size_t nint = (size_t)exp10 + 1;
            for (size_t i = 0; i < nint; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > nint)
                for (size_t i = nint; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    return put(dst, size, out, strlen(out));
}

size_t ptc_key_text(const ptc_value *key, char *dst, size_t size)
{
    if (!key)
        return put(dst, size, "?", 1);
    switch (key->kind) {
    case PTC_VALUE_STR:
        return put(dst, size, key->u.s.p, key->u.s.n);
    case PTC_VALUE_INT:
        return ptc_value_int_text(key, PTC_KEY_INT_MAX, dst, size);
    case PTC_VALUE_BOOL:
        return key->u.b ? put(dst, size, "True", 4) : put(dst, size, "False", 5);
    case PTC_VALUE_NONE:
        return put(dst, size, "None", 4);
    case PTC_VALUE_FLOAT:
        return ptc_float_text(key->u.f, dst, size);
    case PTC_VALUE_DTYPE: {
        const char *name = ptc_dtype_name(key->u.dt);
        return putf(dst, size, "torch.%s", name ? name : "?");
    }
    default:
        return putf(dst, size, "<%s>", ptc_value_kind_name((ptc_value_kind)key->kind));
    }
}

int ptc__key_text_append(ptc__buf *b, const ptc_value *key)
{
    size_t n = ptc_key_text(key, NULL, 0);
    int rc = ptc__buf_reserve(b, n + 1);
    if (rc < 0)
        return rc; /* PTC_ENOMEM, or PTC_ELIMIT past the buffer's cap (the walk's PTC_PATH_MAX) */
    ptc_key_text(key, (char *)b->data + b->len, n + 1);
    b->len += n;
    return 0;
}
