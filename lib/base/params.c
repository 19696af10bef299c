/*
 * params.c - reading a caller's parameter struct (ptc_open_params, ptc_save_params,
 * ptc_verify_params, ptc_train_params, ...) whose first field is its size.
 *
 * Every public parameter struct starts with `size_t size`, which its *_default() sets to the
 * sizeof the caller was compiled with. A library newer than the caller's header finds a smaller
 * size there: it reads only those bytes and keeps its own defaults for the fields added since, so
 * that a program built against an older ptc.h keeps working without being rebuilt. A size of 0
 * (a struct never passed through *_default(), or zeroed) or one larger than the library's (a
 * program built against a newer ptc.h than the library it runs with) cannot be read safely and
 * is refused.
 *
 * Rule for whoever adds a field to such a struct: append it, and make sure it starts at or after
 * the struct's previous sizeof (add explicit padding if it would otherwise land in the old
 * trailing padding), so that an older struct's bytes never cover part of a newer field.
 */
#include "base/base.h"

#include <string.h>

int ptc__params_read(void *dst, size_t dst_size, const void *src, const char *name, ptc_error *err)
{
    if (!src)
        return 0; /* NULL means the defaults, already in dst */
    size_t size;
    memcpy(&size, src, sizeof size);
    if (size < sizeof size || size > dst_size)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "%s: size %zu is not this library's %zu (fill the struct with %s_default() "
                        "and build against the ptc.h of the libptc you run with)",
                        name, size, dst_size, name);
    memcpy(dst, src, size);
    memcpy(dst, &dst_size, sizeof dst_size); /* dst now describes a whole struct of this library */
    return 0;
}
