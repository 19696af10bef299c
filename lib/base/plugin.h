/*
 * plugin.h - loadable modules: how libptc finds, checks and uses the parts that carry heavy
 * dependencies (DESIGN.md decision 11).
 *
 * libptc links libc, libm, zlib, minizip, jansson and ISA-L only (libcrypto is dlopen()ed by
 * lib/base/digest.c for SHA-256). oneDNN, MPI, CUDA, cuDNN, cuBLAS and
 * NCCL are reached through modules that libptc dlopen()s when a caller asks for them by name:
 *
 *   backend-dnnl.so   a backend table (lib/backend/dnnl.c)            -> libdnnl
 *   backend-cuda.so   a backend table (lib/backend/cuda.c, kernels/)  -> cudart, cuBLAS, cuDNN
 *   comm-mpi.so       a communicator  (lib/dist/mpi.c)                -> libmpi
 *   comm-nccl.so      a device communicator (lib/dist/nccl.c)         -> cudart, NCCL
 *   image-codecs.so   PNG and JPEG decoding (lib/data/codecs.c)       -> libpng, libjpeg
 *   tool-tensorboard.so  ptc train --tensorboard's event files (tools/) -> libprotobuf-c
 *   tool-plot.so      ptc plot's figures (tools/)                     -> libcairo
 *
 * Tool modules serve one command of the ptc program, not the library: libptc finds and checks
 * them like the others (ptc_tool_module) and hands the program their table, whose layout
 * tools/toolmod.h defines; libptc itself never calls them.
 *
 * A module exports one symbol, PTC__PLUGIN_ENTRY, a function that takes libptc's host table and
 * returns the module's descriptor. The descriptor's abi must equal PTC__PLUGIN_ABI, or the module
 * is refused with a message that says which ABI each side has.
 *
 * Modules never link libptc's internals: everything a module needs from the library (the one
 * allocator, error detail, the environment) reaches it through ptc__host, which
 * lib/base/module.c turns back into the usual ptc__malloc / ptc__err / ... calls inside the
 * module. So ptc_set_allocator reaches module allocations too.
 *
 * Search order for "<kind>-<name>.so": every directory of PTC_PLUGIN_PATH (':'-separated; empty
 * entries skipped) when it is set and not empty, and nothing else; otherwise the directory libptc
 * itself was loaded from (a build tree's lib/.libs, so that an uninstalled build finds its
 * modules), that directory's ptc/ subdirectory, and $(pkglibdir).
 *
 * Bump PTC__PLUGIN_ABI whenever ptc__host, ptc__plugin, ptc__backend_ops, ptc__comm_ops or any
 * struct they pass changes.
 */
#ifndef PTC_BASE_PLUGIN_H
#define PTC_BASE_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ptc/ptc.h"

#define PTC__PLUGIN_ABI   2
#define PTC__PLUGIN_ENTRY "ptc_plugin_entry_v1"

typedef enum ptc__plugin_kind {
    PTC__PLUGIN_BACKEND = 1, /* ops: const ptc__backend_ops * (lib/backend/backend.h) */
    PTC__PLUGIN_COMM = 2,    /* ops: const ptc__comm_plugin * (lib/dist/dist.h) */
    PTC__PLUGIN_IMAGE = 3,   /* ops: const ptc__image_ops * (lib/data/image.h) */
    PTC__PLUGIN_TOOL = 4     /* ops: a table of tools/toolmod.h, opaque to libptc */
} ptc__plugin_kind;

/* What libptc hands a module. */
typedef struct ptc__host {
    int abi;                                  /* PTC__PLUGIN_ABI */
    void *(*realloc)(void *ptr, size_t size); /* ptc__realloc: the replaceable allocator */
    int (*verr)(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt,
                va_list ap);
    void (*verr_prefix)(ptc_error *err, const char *fmt, va_list ap);
    const char *(*getenv)(const char *name); /* lib/base/env.c: the one reader of environ */
} ptc__host;

/* What a module returns. */
typedef struct ptc__plugin {
    int abi; /* PTC__PLUGIN_ABI */
    ptc__plugin_kind kind;
    const char *name; /* "dnnl", "cuda", "mpi", "nccl", "codecs", "tensorboard", "plot": the file is
                              <kind>-<name>.so */
    const char *summary; /* one line for `ptc --version` */
    int experimental;    /* 1 until it has run where it is meant to run */
    const void *ops;     /* by kind, see ptc__plugin_kind */
    /* 0 when the module can run on this machine; else a negative PTC_E* code and the reason in
     * err ("no CUDA driver is installed (libcuda.so.1 was not found)"). May be NULL (always can). */
    int (*probe)(ptc_error *err);
} ptc__plugin;

typedef const ptc__plugin *(*ptc__plugin_entry_fn)(const ptc__host *host);

/* The module of that kind and name, loaded on first use (and kept: modules are never unloaded).
 * PTC_ENOTFOUND: no such file in the search path (the message lists where it looked);
 * PTC_EUNSUPPORTED: it is there but is not a regular file, is a truncated ELF file (both
 * refused before dlopen, which hangs or crashes on them), cannot be loaded (dlerror's text), has
 * no entry point, or was built for another ABI; the message says which and what to do.
 * Thread-safe. */
int ptc__plugin_load(ptc__plugin_kind kind, const char *name, const ptc__plugin **out,
                     ptc_error *err);

/* d->probe, called the one way: 0 when d can run here (or has no probe); else a negative code
 * and a message in err, one that says so when the probe itself gave none. */
int ptc__plugin_probe(const ptc__plugin *d, ptc_error *err);

#endif /* PTC_BASE_PLUGIN_H */
