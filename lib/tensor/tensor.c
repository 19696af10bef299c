/*
 * tensor.c - tensor views over storages: the bounds proof done at load time, the public
 * accessors, and the row-major readout (little-endian, conj/neg applied) behind ptc_tensor_read and
 * ptc_tensor_sha256.
 *
 * Bounds (threat model 4.2): with sizes, strides and offset all non-negative, the largest element
 * index a non-empty tensor addresses is offset + sum((size_d - 1) * stride_d); it must be below the
 * storage length in elements. Every product and sum is checked for overflow. torch 2.6 makes the
 * same proof when it sets the view, but has no limit on dimensions and lets an empty tensor's
 * offset lie anywhere: those two refusals carry PTC_ERR_STRICTER.
 */
#include "tensor/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int ptc__tensor_check(const ptc_tensor *t, uint32_t max_ndim, const char *member, int64_t off,
                      ptc_error *err)
{
    const ptc__dtype_info *info = ptc__dtype_info_of(t->dtype);
    if (!info)
        return ptc__err(err, PTC_EFORMAT, member, off, "tensor has an invalid dtype");
    if (t->ndim < 0)
        return ptc__err(err, PTC_EFORMAT, member, off, "tensor has %d dimensions", t->ndim);
    if ((uint32_t)t->ndim > max_ndim)
        return ptc__err_stricter(err, PTC_EFORMAT, member, off,
                                 "tensor has %d dimensions (limit %u)", t->ndim, max_ndim);
    if (t->offset < 0)
        return ptc__err(err, PTC_EFORMAT, member, off, "negative storage offset %lld",
                        (long long)t->offset);
    int64_t numel = 1, last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || t->stride[d] < 0)
            return ptc__err(err, PTC_EFORMAT, member, off,
                            "dimension %d has size %lld and stride %lld; neither may be negative",
                            d, (long long)t->shape[d], (long long)t->stride[d]);
        if (!ptc__mul_i64_ok(numel, t->shape[d], &numel))
            return ptc__err(err, PTC_EFORMAT, member, off,
                            "element count overflows at dimension %d", d);
    }
    int64_t nbytes;
    if (!ptc__mul_i64_ok(numel, (int64_t)info->size, &nbytes))
        return ptc__err(err, PTC_EFORMAT, member, off, "tensor byte size overflows");
    int64_t storage_elems = t->storage->nbytes / (int64_t)info->size;
    if (numel == 0) {
        /* Nothing is addressed, but a wild offset is still refused (torch skips this check). */
        if (t->offset > storage_elems)
            return ptc__err_stricter(err, PTC_EFORMAT, member, off,
                                     "empty tensor's offset %lld lies beyond its storage of %lld "
                                     "elements",
                                     (long long)t->offset, (long long)storage_elems);
        return 0;
    }
    for (int d = 0; d < t->ndim; d++) {
        int64_t span;
        if (!ptc__mul_i64_ok(t->shape[d] - 1, t->stride[d], &span) ||
            !ptc__add_i64_ok(last, span, &last))
            return ptc__err(err, PTC_EFORMAT, member, off,
                            "tensor extent overflows at dimension %d", d);
    }
    if (last >= storage_elems)
        return ptc__err(err, PTC_EFORMAT, member, off,
                        "tensor addresses element %lld but its storage \"%s\" holds %lld elements "
                        "of %s",
                        (long long)last, t->storage->key, (long long)storage_elems, info->name);
    return 0;
}

/* ---- accessors --------------------------------------------------------------------------------- */

ptc_dtype ptc_tensor_dtype(const ptc_tensor *t)
{
    return t->dtype;
}
int ptc_tensor_ndim(const ptc_tensor *t)
{
    return t->ndim;
}
const int64_t *ptc_tensor_shape(const ptc_tensor *t)
{
    return t->shape;
}
const int64_t *ptc_tensor_stride(const ptc_tensor *t)
{
    return t->stride;
}
int64_t ptc_tensor_storage_offset(const ptc_tensor *t)
{
    return t->offset;
}
int64_t ptc_tensor_numel(const ptc_tensor *t)
{
    return t->numel;
}
int64_t ptc_tensor_nbytes(const ptc_tensor *t)
{
    return t->numel * (int64_t)ptc_dtype_size(t->dtype);
}
int ptc_tensor_requires_grad(const ptc_tensor *t)
{
    return t->requires_grad;
}
int ptc_tensor_is_parameter(const ptc_tensor *t)
{
    return t->parameter;
}
int ptc_tensor_is_conj(const ptc_tensor *t)
{
    return t->conj;
}
int ptc_tensor_is_neg(const ptc_tensor *t)
{
    return t->neg;
}
const ptc_storage *ptc_tensor_storage(const ptc_tensor *t)
{
    return t->storage;
}

const void *ptc_tensor_data(const ptc_tensor *t)
{
    return t->storage->data + t->offset * (int64_t)ptc_dtype_size(t->dtype);
}

int ptc_tensor_is_contiguous(const ptc_tensor *t)
{
    if (t->numel == 0)
        return 1;
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expected)
            return 0;
        expected *= t->shape[d];
    }
    return 1;
}

const char *ptc_storage_key(const ptc_storage *s)
{
    return s->key;
}
const char *ptc_storage_location(const ptc_storage *s)
{
    return s->location;
}
ptc_dtype ptc_storage_dtype(const ptc_storage *s)
{
    return s->dtype;
}
int64_t ptc_storage_nbytes(const ptc_storage *s)
{
    return s->nbytes;
}
const void *ptc_storage_data(const ptc_storage *s)
{
    return s->data;
}
int ptc_storage_is_mapped(const ptc_storage *s)
{
    return s->mapped;
}

/* ---- row-major readout ------------------------------------------------------------------------
 * Elements are produced in chunks into a buffer and handed to a sink; the host is little-endian
 * for every platform ptc supports, so host order is the output order. conj negates the imaginary
 * component of complex elements; neg negates every component. */

static bool host_is_little(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void negate(uint8_t *e, const ptc__dtype_info *info, ptc_dtype dt)
{
    size_t comp = info->is_complex ? info->size / 2u : info->size;
    for (size_t c = 0; c < (info->is_complex ? 2u : 1u); c++) {
        uint8_t *p = e + c * comp;
        if (info->is_floating || info->is_complex) {
            /* IEEE-style formats (all of torch's floating dtypes): flip the sign bit, which is the
             * top bit of the last byte in little-endian order. The fnuz float8 formats have no
             * negative zero: torch maps -0 to 0 (0x80 is their NaN), which flipping would not. */
            if ((dt == PTC_FLOAT8_E4M3FNUZ || dt == PTC_FLOAT8_E5M2FNUZ) && (p[0] & 0x7F) == 0)
                continue;
            p[comp - 1] ^= 0x80;
        } else {
            /* Two's complement: invert and add one. */
            unsigned carry = 1;
            for (size_t k = 0; k < comp; k++) {
                unsigned v = (unsigned)(uint8_t)~p[k] + carry;
                p[k] = (uint8_t)v;
                carry = v >> 8;
            }
        }
    }
}

static void conjugate(uint8_t *e, const ptc__dtype_info *info)
{
    if (info->is_complex)
        e[info->size - 1] ^= 0x80; /* sign bit of the imaginary part */
}

typedef int (*sink_fn)(void *ud, const uint8_t *p, size_t n);

static int readout(const ptc_tensor *t, sink_fn sink, void *ud, ptc_error *err)
{
    const ptc__dtype_info *info = ptc__dtype_info_of(t->dtype);
    size_t es = info->size;
    const uint8_t *base = ptc_tensor_data(t);
    bool fix = t->conj || t->neg || !host_is_little();
    if (t->numel == 0)
        return 0;
    if (!fix && ptc_tensor_is_contiguous(t))
        return sink(ud, base, (size_t)t->numel * es);

    enum { CHUNK = 64 * 1024 };
    uint8_t *buf = ptc__malloc(CHUNK);
    int64_t *idx = ptc__calloc((size_t)(t->ndim ? t->ndim : 1), sizeof *idx);
    if (!buf || !idx) {
        ptc__free(buf);
        ptc__free(idx);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory reading a tensor");
    }
    size_t fill = 0;
    int rc = 0;
    int64_t pos = 0; /* element offset from base */
    for (int64_t n = 0; n < t->numel; n++) {
        uint8_t *e = buf + fill;
        memcpy(e, base + pos * (int64_t)es, es);
        if (!host_is_little())
            ptc__byteswap(e, es, t->dtype);
        if (t->neg)
            negate(e, info, t->dtype);
        if (t->conj)
            conjugate(e, info);
        fill += es;
        if (fill + es > CHUNK) {
            if ((rc = sink(ud, buf, fill)) < 0)
                break;
            fill = 0;
        }
        /* Advance the multi-index, innermost dimension first. */
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) {
                pos += t->stride[d];
                break;
            }
            pos -= (idx[d] - 1) * t->stride[d];
            idx[d] = 0;
        }
    }
    if (rc == 0 && fill)
        rc = sink(ud, buf, fill);
    ptc__free(buf);
    ptc__free(idx);
    return rc;
}

typedef struct copy_ctx {
    uint8_t *dst;
    size_t left;
} copy_ctx;

static int copy_sink(void *ud, const uint8_t *p, size_t n)
{
    copy_ctx *c = ud;
    if (n > c->left)
        return PTC_EINVAL;
    memcpy(c->dst, p, n);
    c->dst += n;
    c->left -= n;
    return 0;
}

int ptc_tensor_read(const ptc_tensor *t, void *dst, size_t dst_len, ptc_error *err)
{
    if (!t || (!dst && ptc_tensor_nbytes(t) > 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_tensor_read: no tensor or no buffer");
    if ((uint64_t)ptc_tensor_nbytes(t) > dst_len)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_tensor_read: buffer of %zu bytes is smaller than the tensor's %lld",
                        dst_len, (long long)ptc_tensor_nbytes(t));
    copy_ctx c = {dst, dst_len};
    return readout(t, copy_sink, &c, err);
}

static int sha_sink(void *ud, const uint8_t *p, size_t n)
{
    ptc__sha256_update(ud, p, n);
    return 0;
}

int ptc_tensor_sha256(const ptc_tensor *t, uint8_t digest[32], ptc_error *err)
{
    if (!t || !digest)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_tensor_sha256: missing argument");
    ptc__sha256 s;
    int rc = ptc__sha256_init(&s, err);
    if (rc < 0)
        return rc;
    if ((rc = readout(t, sha_sink, &s, err)) < 0) {
        ptc__sha256_discard(&s);
        return rc;
    }
    return ptc__sha256_final(&s, digest, err);
}

/* The readout above for other modules (conversions, the safetensors writer), so that they stream
 * a tensor of any layout without a second copy of it. */
int ptc__tensor_readout(const ptc_tensor *t, ptc__tensor_sink sink, void *ud, ptc_error *err)
{
    return readout(t, sink, ud, err);
}

int ptc_tensor_sha256_charged(const ptc_tensor *t, ptc_budget *b, const char *path,
                              uint8_t digest[32], ptc_error *err)
{
    if (!t || !digest)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_tensor_sha256_charged: missing argument");
    int64_t nb = ptc_tensor_nbytes(t);
    int rc = ptc_budget_charge(b, 0, nb >= 0 ? (uint64_t)nb : UINT64_MAX, err);
    if (rc < 0) {
        if (err) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "hashing tensor %.64s (%" PRId64 " bytes): %.*s",
                     path && path[0] ? path : "(root)", nb, (int)sizeof msg - 128, err->message);
            memcpy(err->message, msg, sizeof msg);
        }
        return rc;
    }
    return ptc_tensor_sha256(t, digest, err);
}
