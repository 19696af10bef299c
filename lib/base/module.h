/*
 * module.h - what a module's sources include to become a loadable module (lib/base/plugin.h):
 * the forwarding functions of lib/base/module.c and the entry-point macro.
 *
 *     static const ptc__plugin desc = {PTC__PLUGIN_ABI, PTC__PLUGIN_BACKEND, "cuda", ...};
 *     PTC__DEFINE_PLUGIN_ENTRY(desc)
 */
#ifndef PTC_BASE_MODULE_H
#define PTC_BASE_MODULE_H

#include "base/base.h"
#include "base/plugin.h"

/* Keeps host for the forwarding functions; -1 when its ABI is not this module's. */
int ptc__module_bind(const ptc__host *host);

#define PTC__DEFINE_PLUGIN_ENTRY(desc)                                                             \
    __attribute__((visibility("default"))) const ptc__plugin *ptc_plugin_entry_v1(                 \
        const ptc__host *host);                                                                    \
    const ptc__plugin *ptc_plugin_entry_v1(const ptc__host *host)                                  \
    {                                                                                              \
        /* A host of another ABI still gets the descriptor, whose abi field tells it why the   \
         * module cannot be used; nothing else is called then. */   \
        (void)ptc__module_bind(host);                                                              \
        return &(desc);                                                                            \
    }

#endif /* PTC_BASE_MODULE_H */
