/*
 * gpumon.h - what a GPU is doing while ptc trains on it: utilisation, memory, power and
 * temperature from NVML, loaded at run time from the driver (libnvidia-ml.so.1), for the progress
 * line, the metrics file and the warning when the GPU waits for its input.
 *
 * NVML is reached with dlopen, never linked (DESIGN.md decision 11): a machine without the driver
 * gets no monitor and no error. The training loop opens a monitor only for a GPU backend, on
 * rank 0. A monitor is used by one thread.
 */
#ifndef PTC_TRAIN_GPUMON_H
#define PTC_TRAIN_GPUMON_H

#include <stddef.h>
#include <stdint.h>

typedef struct ptc__gpumon ptc__gpumon;

/* Which fields of a sample hold a value (the NVML call for it succeeded). */
enum {
    PTC__GPU_UTIL = 1u << 0,
    PTC__GPU_MEM = 1u << 1,
    PTC__GPU_POWER = 1u << 2,
    PTC__GPU_TEMP = 1u << 3
};

typedef struct ptc__gpu_sample {
    unsigned valid;               /* PTC__GPU_* bits; 0: nothing could be read */
    double util;                  /* percent of the last sample period a kernel ran, 0..100 */
    uint64_t mem_used, mem_total; /* bytes */
    double power_w;
    double temp_c;
} ptc__gpu_sample;

/* A monitor of the GPU that CUDA calls cuda_ordinal in this process; visible is the value of
 * CUDA_VISIBLE_DEVICES in this process (NULL: not set), followed to NVML's numbering: an index,
 * or a GPU-/MIG- UUID. NULL when NVML or the device cannot be had (no error: monitoring is
 * optional). interval_s: the least time between samples (2 s in training). */
ptc__gpumon *ptc__gpumon_open(int cuda_ordinal, const char *visible, double interval_s);
/* The same from the NVML library at path (tests load a stand-in). */
ptc__gpumon *ptc__gpumon_open_lib(const char *path, int cuda_ordinal, const char *visible,
                                  double interval_s);
void ptc__gpumon_close(ptc__gpumon *m); /* accepts NULL */

/* A sample at time now_s (seconds, any monotonic origin) when interval_s has passed since the
 * last one (or none was taken): 1 and *out filled; 0 when it is not time yet. The sample counts
 * towards the epoch's averages. */
int ptc__gpumon_poll(ptc__gpumon *m, double now_s, ptc__gpu_sample *out);
/* A sample now, whatever the time; counts towards the epoch's averages. */
void ptc__gpumon_sample(ptc__gpumon *m, double now_s, ptc__gpu_sample *out);

/* "gpu 97% 31.2/139.8 GiB 512 W 61C": the fields that are valid, in that order; "" when none. */
void ptc__gpumon_text(const ptc__gpu_sample *s, char *buf, size_t n);
/* The valid fields as JSON members, each with a leading ", ": ", \"gpu_util\": 97.0,
 * \"gpu_mem_used_bytes\": 33500000000, \"gpu_mem_total_bytes\": ..., \"gpu_power_w\": 512.0,
 * \"gpu_temp_c\": 61"; "" when none. */
void ptc__gpumon_json(const ptc__gpu_sample *s, char *buf, size_t n);

/* The epoch's samples so far, summarised (utilisation and power averaged, memory and
 * temperature at their highest) into *out; the number of samples is returned. _epoch_reset
 * starts the next epoch. */
int ptc__gpumon_epoch(const ptc__gpumon *m, ptc__gpu_sample *out);
void ptc__gpumon_epoch_reset(ptc__gpumon *m);

/* The warning of an epoch whose GPU averaged under 50% busy over at least 3 samples: 1 and the
 * text in buf ("GPU 0 was busy 34% of epoch 1: the input pipeline is the bottleneck ..."); 0
 * otherwise. */
int ptc__gpumon_epoch_warning(const ptc__gpumon *m, int epoch, char *buf, size_t n);

#endif /* PTC_TRAIN_GPUMON_H */
