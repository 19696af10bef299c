/*
 * backend.c - what every backend shares: finding a backend's table by name, and the output size
 * of a convolution or pooling window.
 *
 * Which backends exist is decided at build time (PTC_HAVE_DNNL); ref is always there.
 */
#include "config.h" /* PTC_HAVE_DNNL */

#include "backend/backend.h"

#include <string.h>

const ptc__backend_ops *ptc__backend_find(const char *name)
{
    static const ptc__backend_ops *const all[] = {
        &ptc__backend_ref,
#ifdef PTC_HAVE_DNNL
        &ptc__backend_dnnl,
#endif
    };
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}
