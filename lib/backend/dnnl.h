/*
 * dnnl.h - what the oneDNN backend shows beyond the ops table: counters that let tests and
 * benchmarks see where layouts did not line up, and its one tuning switch.
 *
 * ptc__be_params.winograd (ptc_train_params.dnnl_winograd; `ptc train` sets it from
 * PTC_DNNL_WINOGRAD=1 in its environment) when a dnnl instance is opened lets its 3x3 stride-1
 * convolutions use oneDNN's Winograd F(4x4, 3x3) kernels (forward and both backward passes), where
 * oneDNN has them. On the 2-core Zen 4 machine this makes the convolutions of a ResNet-18 training
 * step about 1.4x (torchvision stem) to 1.7x (CIFAR stem) faster; the results stay within the
 * 1e-5 relative tolerance of the parity tests against ref (largest seen 3.3e-6, against 2.3e-6 for
 * the direct kernels), but their rounding differs more from torch's, which never uses Winograd on
 * the CPU. Off by default.
 *
 * The backend keeps activations and convolution weights in oneDNN's blocked layouts; a reorder
 * inside an op means that a primitive wanted a layout other than the tensor's. For the ResNet-18
 * shapes on a machine with AVX-512 (or AVX2) the only such reorders in a training step are weight
 * reorders, one per convolution per new version of its weights: into the layout of the
 * backward-data primitive (oneDNN wants the blocks of the weights transposed there), or for the
 * convolutions that run as matrix products, into the matrix that forward and backward share.
 */
#ifndef PTC_BACKEND_DNNL_H
#define PTC_BACKEND_DNNL_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct ptc__dnnl_stats {
    uint64_t act_reorders;    /* reorders inside ops of anything but conv_bwd_data's weights */
    uint64_t weight_reorders; /* conv weights for conv_bwd_data, or into a convolution's matrix */
    uint64_t edge_reorders;   /* tensor_write / tensor_read that were not plain copies */
    uint64_t primitives;      /* oneDNN primitives created (plans and the per-instance cache) */
} ptc__dnnl_stats;

/* Copies the counters of a dnnl backend instance (one opened with ptc__backend_dnnl) into out. */
void ptc__dnnl_stats_get(const ptc__be *be, ptc__dnnl_stats *out);

/* Gives t a new version as if it had been written, so that copies derived from it (reordered
 * weights, workspaces) are made again: lets benchmarks time what a training step pays when
 * weights change every step. */
void ptc__dnnl_touch(ptc__be *be, ptc__bt *t);

#endif /* PTC_BACKEND_DNNL_H */
