/*
 * cuda.h - what the cuda backend (lib/backend/cuda.c) shows beyond the module descriptor: its ops
 * table and its probe, named so that tests/gpu/cuda_layers can link cuda.c directly and run the
 * table without loading the module.
 */
#ifndef PTC_BACKEND_CUDA_H
#define PTC_BACKEND_CUDA_H

#include "backend/backend.h"

extern const ptc__backend_ops ptc__backend_cuda;

/* 0 when this machine has a CUDA driver and at least one device; else PTC_EUNSUPPORTED with the
 * reason in err ("no CUDA driver is installed (...)", "no CUDA device (...)"). */
int ptc__cuda_probe(ptc_error *err);

#endif /* PTC_BACKEND_CUDA_H */
