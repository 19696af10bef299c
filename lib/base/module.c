/*
 * module.c - the side of lib/base/plugin.h that lives inside a module (backend-dnnl.so,
 * backend-cuda.so, comm-mpi.so, comm-nccl.so).
 *
 * A module's code is written like the rest of lib/: it calls ptc__malloc, ptc__err, ptc__getenv.
 * Linked into a module, this file provides those functions by forwarding them to the host table
 * that libptc passed to the module's entry point, so that a module allocates through libptc's one
 * replaceable allocator and formats errors exactly as libptc does. It is never linked into libptc.
 *
 * PTC__DEFINE_PLUGIN_ENTRY (below) writes the entry point: it keeps the host table (the one piece
 * of state of a module, set before any other call) and returns the descriptor.
 */
#include "base/module.h"
#include "base/env.h"

#include <string.h>

static const ptc__host *g_host;

int ptc__module_bind(const ptc__host *host)
{
    if (!host || host->abi != PTC__PLUGIN_ABI)
        return -1;
    g_host = host;
    return 0;
}

void *ptc__realloc(void *ptr, size_t size)
{
    return g_host->realloc(ptr, size);
}

void *ptc__malloc(size_t size)
{
    return g_host->realloc(NULL, size ? size : 1);
}

void *ptc__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = ptc__malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void ptc__free(void *ptr)
{
    if (ptr)
        g_host->realloc(ptr, 0);
}

int ptc__verr(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt,
              va_list ap)
{
    return g_host->verr(err, code, member, offset, fmt, ap);
}

int ptc__err(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = g_host->verr(err, code, member, offset, fmt, ap);
    va_end(ap);
    return rc;
}

void ptc__verr_prefix(ptc_error *err, const char *fmt, va_list ap)
{
    g_host->verr_prefix(err, fmt, ap);
}

void ptc__err_prefix(ptc_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_host->verr_prefix(err, fmt, ap);
    va_end(ap);
}

void ptc__err_clear(ptc_error *err)
{
    if (!err)
        return;
    err->code = 0;
    err->offset = -1;
    err->member[0] = '\0';
    err->message[0] = '\0';
    err->flags = 0;
}

const char *ptc__getenv(const char *name)
{
    return g_host->getenv(name);
}
