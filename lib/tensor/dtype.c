/*
 * dtype.c - the table of dtypes torch 2.6 can save: names as torch spells them, element sizes,
 * the legacy storage class each one is pickled with (docs/internals/pickle.md), and byte
 * swapping for big-endian files.
 */
#include "tensor/tensor.h"

#include <string.h>

static const ptc__dtype_info table[PTC_DTYPE_COUNT] = {
    [PTC_FLOAT64] = {"float64", "DoubleStorage", 8, 8, false, true},
    [PTC_FLOAT32] = {"float32", "FloatStorage", 4, 4, false, true},
    [PTC_FLOAT16] = {"float16", "HalfStorage", 2, 2, false, true},
    [PTC_BFLOAT16] = {"bfloat16", "BFloat16Storage", 2, 2, false, true},
    [PTC_INT64] = {"int64", "LongStorage", 8, 8, false, false},
    [PTC_INT32] = {"int32", "IntStorage", 4, 4, false, false},
    [PTC_INT16] = {"int16", "ShortStorage", 2, 2, false, false},
    [PTC_INT8] = {"int8", "CharStorage", 1, 1, false, false},
    [PTC_UINT8] = {"uint8", "ByteStorage", 1, 1, false, false},
    [PTC_BOOL] = {"bool", "BoolStorage", 1, 1, false, false},
    [PTC_COMPLEX128] = {"complex128", "ComplexDoubleStorage", 16, 8, true, false},
    [PTC_COMPLEX64] = {"complex64", "ComplexFloatStorage", 8, 4, true, false},
    [PTC_COMPLEX32] = {"complex32", NULL, 4, 2, true, false},
    [PTC_QINT8] = {"qint8", "QInt8Storage", 1, 1, false, false},
    [PTC_QINT32] = {"qint32", "QInt32Storage", 4, 4, false, false},
    [PTC_QUINT8] = {"quint8", "QUInt8Storage", 1, 1, false, false},
    [PTC_QUINT4X2] = {"quint4x2", "QUInt4x2Storage", 1, 1, false, false},
    [PTC_QUINT2X4] = {"quint2x4", "QUInt2x4Storage", 1, 1, false, false},
    [PTC_FLOAT8_E4M3FN] = {"float8_e4m3fn", NULL, 1, 1, false, true},
    [PTC_FLOAT8_E5M2] = {"float8_e5m2", NULL, 1, 1, false, true},
    [PTC_FLOAT8_E4M3FNUZ] = {"float8_e4m3fnuz", NULL, 1, 1, false, true},
    [PTC_FLOAT8_E5M2FNUZ] = {"float8_e5m2fnuz", NULL, 1, 1, false, true},
    [PTC_BITS8] = {"bits8", NULL, 1, 1, false, false},
    [PTC_BITS16] = {"bits16", NULL, 2, 2, false, false},
    [PTC_BITS1X8] = {"bits1x8", NULL, 1, 1, false, false},
    [PTC_BITS2X4] = {"bits2x4", NULL, 1, 1, false, false},
    [PTC_BITS4X2] = {"bits4x2", NULL, 1, 1, false, false},
    [PTC_UINT16] = {"uint16", NULL, 2, 2, false, false},
    [PTC_UINT32] = {"uint32", NULL, 4, 4, false, false},
    [PTC_UINT64] = {"uint64", NULL, 8, 8, false, false},
};

const ptc__dtype_info *ptc__dtype_info_of(ptc_dtype dt)
{
    return (unsigned)dt < PTC_DTYPE_COUNT ? &table[dt] : NULL;
}

const char *ptc_dtype_name(ptc_dtype dt)
{
    const ptc__dtype_info *i = ptc__dtype_info_of(dt);
    return i ? i->name : NULL;
}

size_t ptc_dtype_size(ptc_dtype dt)
{
    const ptc__dtype_info *i = ptc__dtype_info_of(dt);
    return i ? i->size : 0;
}

int ptc_dtype_from_name(const char *name, ptc_dtype *out)
{
    if (!name)
        return PTC_EINVAL;
    for (int i = 0; i < PTC_DTYPE_COUNT; i++) {
        if (strcmp(table[i].name, name) == 0) {
            *out = (ptc_dtype)i;
            return 0;
        }
    }
    return PTC_ENOTFOUND;
}

int ptc__dtype_from_storage_name(const char *name, ptc_dtype *out)
{
    for (int i = 0; i < PTC_DTYPE_COUNT; i++) {
        if (table[i].storage_name && strcmp(table[i].storage_name, name) == 0) {
            *out = (ptc_dtype)i;
            return 0;
        }
    }
    return PTC_ENOTFOUND;
}

void ptc__byteswap(void *data, size_t n, ptc_dtype dt)
{
    const ptc__dtype_info *info = ptc__dtype_info_of(dt);
    size_t w = info ? info->swap : 1;
    uint8_t *p = data;
    if (w <= 1)
        return;
    for (size_t i = 0; i + w <= n; i += w) {
        for (size_t a = 0, b = w - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
    }
}
