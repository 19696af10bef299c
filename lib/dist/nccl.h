/*
 * nccl.h - what lib/dist/nccl.c offers a test that compiles it next to libptc_core (with
 * PTC_MODULE_LINKED_IN, as tests/gpu/nccl_mock does over a host imitation of CUDA and NCCL):
 * the module's descriptor without its entry point, and the dead-peer deadline, which is 30 s in
 * the module and must be shorter for a test to wait for it. Nothing in libptc calls these.
 */
#ifndef PTC_DIST_NCCL_H
#define PTC_DIST_NCCL_H

#include "base/plugin.h"
#include "dist/dist.h"

/* The descriptor that ptc_plugin_entry_v1 hands the loader in the module. */
const ptc__plugin *ptc__nccl_plugin(void);
/* The time a collective may take before the communicator is aborted (seconds, > 0). */
void ptc__nccl_set_timeout(ptc_comm *c, double seconds);

#endif /* PTC_DIST_NCCL_H */
