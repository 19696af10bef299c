/*
 * train.h - the training loop of the tutorial "ResNet-18 on CIFAR-10": epochs over a
 * DistributedSampler order, the tutorial's augmentation, forward, cross-entropy, backward, SGD,
 * evaluation every few epochs, metrics, progress, the model's state dict saved like the tutorial,
 * full training checkpoints each epoch and resuming from them to the same final weights.
 *
 * The loop owns nothing global: a run is one call. Output goes through callbacks (progress and
 * one line of text per event) so that the library never prints; tools/cmd_train.c draws them.
 */
#ifndef PTC_TRAIN_TRAIN_H
#define PTC_TRAIN_TRAIN_H

#include "data/data.h"
#include "nn/nn.h"

/* The public ptc_train / ptc_evaluate (lib/ptc/ptc.h) are the interface; these resolve the names
 * of datasets and architectures. */
int ptc__dataset_from_name(const char *name, ptc__data_format *out);

/* ptc_train, with the input path chosen: host_input 0 is ptc_train (batches made in the
 * backend's memory when it has images_batch), 1 makes float batches on the host and writes them
 * whatever the backend has, so that tests hold the two paths to the same bits. */
int ptc__train_ex(const ptc_train_params *p, int host_input, ptc_train_result *res, ptc_error *err);

/* ptc_train's choice and opening of the backend from p's backend, precision, device, threads,
 * tf32 and deterministic (ptc_model_new uses it too). */
int ptc__train_open_backend(const ptc_train_params *p, const ptc__backend_ops **ops, ptc__be **be,
                            ptc_error *err);

#endif /* PTC_TRAIN_TRAIN_H */
