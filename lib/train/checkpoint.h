/*
 * checkpoint.h - ptc train's training checkpoint (checkpoint.c), apart from the loop that writes
 * and resumes it (train.c).
 *
 * Layout (torch.load reads it; PyTorch's usual keys): {"epoch": epochs completed, "step":
 * optimizer steps, "model_state_dict": OrderedDict, "optimizer_state_dict": exactly
 * torch.optim.SGD.state_dict(), "seed", "arch", "world"}. Reading one back range-checks every
 * number in it before use (checkpoint.c's header comment lists the ranges).
 */
#ifndef PTC_TRAIN_CHECKPOINT_H
#define PTC_TRAIN_CHECKPOINT_H

#include "data/data.h"
#include "nn/nn.h"

/* What a checkpoint records besides the weights and the optimizer's buffers. */
typedef struct ptc__train_ckpt_info {
    const ptc__sgd_params *sgd; /* the optimizer's settings (its param group) */
    uint64_t seed;
    ptc__arch arch;
    int world; /* the processes of the run */
} ptc__train_ckpt_info;

/* Writes m to path: the full checkpoint (full) at epoch and step with learning rate lr, or only
 * the state dict. PTC_EIO and the save errors, the message prefixed with path. */
int ptc__train_save(ptc__model *m, const ptc__train_ckpt_info *info, const char *path, int epoch,
                    int64_t step, double lr, int full, ptc_error *err);

/* Loads a full checkpoint written by ptc__train_save into m (weights and momentum buffers) and
 * gives its epoch and step; world must equal the checkpoint's, epochs bounds its epoch.
 * PTC_EFORMAT naming the key and its range for anything out of range, PTC_EINVAL for another
 * world, and the open and load errors. */
int ptc__train_resume(ptc__model *m, const char *path, int world, int epochs, int *epoch,
                      int64_t *step, ptc_error *err);

/* Loads the state dict in path (the root, or a checkpoint's "model_state_dict" / "state_dict" /
 * "model"; a DDP "module." prefix removed) into m with strict keys. The open and load errors,
 * the message prefixed with path. */
int ptc__train_load_weights(ptc__model *m, const char *path, ptc_error *err);

#endif /* PTC_TRAIN_CHECKPOINT_H */
