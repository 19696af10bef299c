/*
 * tensor.h - dtypes, storages and tensor views (internal side of the ptc_tensor / ptc_storage
 * handles of ptc.h).
 *
 * Invariants once ptc__tensor_check has accepted a tensor: ndim <= limits.max_ndim; every size,
 * stride and the storage offset is non-negative; numel and nbytes fit in int64; and every element
 * the tensor can address lies inside its storage (for empty tensors, the offset is at most the
 * storage length). Storage bytes are in host byte order.
 */
#ifndef PTC_TENSOR_TENSOR_H
#define PTC_TENSOR_TENSOR_H

#include "base/base.h"

typedef struct ptc__dtype_info {
    const char *name;         /* torch's name: "float32" */
    const char *storage_name; /* legacy storage class ("FloatStorage"), NULL for the v3 dtypes */
    uint8_t size;             /* bytes per element */
    uint8_t swap;             /* unit of byte swapping (component size for complex), 1 = none */
    bool is_complex;
    bool is_floating;
} ptc__dtype_info;

const ptc__dtype_info *ptc__dtype_info_of(ptc_dtype dt); /* NULL for invalid values */
/* Storage class name ("FloatStorage", no module) to its dtype; PTC_ENOTFOUND if none. */
int ptc__dtype_from_storage_name(const char *name, ptc_dtype *out);

struct ptc_storage {
    const char *key;      /* "0", "1", ... */
    const char *location; /* "cpu", "cuda:0" */
    ptc_dtype dtype;      /* from the storage class; uint8 for UntypedStorage */
    bool untyped;         /* pickled as torch.storage.UntypedStorage (numel counts bytes) */
    int64_t nbytes;
    const uint8_t *data; /* host byte order */
    void *owned;         /* heap copy (freed with the checkpoint) or NULL when mapped */
    bool mapped;
    bool referenced;       /* some tensor uses it */
    bool writable;         /* a document's own memory (ptc_storage_mutable) */
    ptc_storage *parent;   /* legacy views: the storage whose bytes this one shares */
    int64_t parent_offset; /* bytes */
    bool salvaged;         /* a numpy array's bytes copied out of the pickle ("numpy.<n>"): no
                            * record or stream data belongs to it */
};

struct ptc_tensor {
    ptc_dtype dtype;
    int ndim;
    int64_t *shape;  /* [ndim] */
    int64_t *stride; /* [ndim], elements */
    int64_t offset;  /* elements */
    int64_t numel;
    const ptc_storage *storage;
    bool requires_grad, parameter, conj, neg;
    /* Python attributes the file set on the tensor (_rebuild_parameter_with_state,
     * _rebuild_from_type_v2): the state as read, a dict or (dict, slots); NULL for none. */
    const struct ptc_value *state;
};

/* Proves the invariants above. member/offset label the error (the pickle position). */
int ptc__tensor_check(const ptc_tensor *t, uint32_t max_ndim, const char *member, int64_t offset,
                      ptc_error *err);

/* Converts t's elements, in row-major order, to dtype dst, writing numel elements to out
 * (contiguous, host byte order; conj/neg applied). Supported: every pair among float64, float32,
 * float16, bfloat16, int64, int32, int16, int8, uint8, bool (and the same dtype to itself for any
 * dtype). Float to float16/bfloat16 rounds to nearest even as torch does; NaN stays NaN (torch's
 * bit patterns); float to int truncates toward zero as torch does. PTC_EINVAL otherwise. */
int ptc__convert(const ptc_tensor *t, ptc_dtype dst, void *out, size_t out_len, ptc_error *err);
/* Scalar conversions used by ptc__convert, exposed for the exhaustive tests. */
uint16_t ptc__f32_to_f16(float f);
uint16_t ptc__f32_to_bf16(float f);
float ptc__f16_to_f32(uint16_t h);
float ptc__bf16_to_f32(uint16_t h);

/* Visits t's elements in row-major order, as little-endian bytes with conj/neg applied (the bytes
 * ptc_tensor_read produces), in chunks of whole elements: sink(ud, p, n) for each chunk, in order.
 * p is valid only during the call (for a contiguous tensor it may point into the storage). A
 * negative return from sink stops the walk and is returned. */
typedef int (*ptc__tensor_sink)(void *ud, const uint8_t *p, size_t n);
int ptc__tensor_readout(const ptc_tensor *t, ptc__tensor_sink sink, void *ud, ptc_error *err);

/* Swaps every element of n bytes of data in place, by the dtype's swap unit. */
void ptc__byteswap(void *data, size_t n, ptc_dtype dt);

#endif /* PTC_TENSOR_TENSOR_H */
