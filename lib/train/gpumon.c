/*
 * gpumon.c - GPU monitoring through NVML loaded at run time (see gpumon.h).
 *
 * NVML's C interface is stable across drivers; the few types used here are declared below rather
 * than taken from nvml.h, which the CUDA toolkit does not always carry and which would tie
 * libptc's build to it. Every NVML call may fail on its own (a GPU without power readings, a MIG
 * slice without utilisation): a failing call leaves its field out of the sample, never fails the
 * run.
 *
 * NVML numbers GPUs by PCI bus order, CUDA by speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and
 * CUDA_VISIBLE_DEVICES renumbers them: the CUDA ordinal is mapped through CUDA_VISIBLE_DEVICES's
 * value, which the caller passes in (the library reads no environment here: lib/base/env.h),
 * an index or a GPU-/MIG- UUID, and taken as NVML's index when there is none, which holds on
 * machines whose GPUs are all alike (every data-parallel machine ptc targets).
 */
#include "train/gpumon.h"

#include "base/base.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARN_BUSY_PCT    50.0
#define WARN_MIN_SAMPLES 3

/* NVML's types, as nvml.h declares them. */
typedef int nvml_ret;      /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef void *nvml_device; /* nvmlDevice_t */
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
#define NVML_TEMPERATURE_GPU 0

typedef struct nvml_api {
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    nvml_ret (*by_index)(unsigned int index, nvml_device *dev);
    nvml_ret (*by_uuid)(const char *uuid, nvml_device *dev);
    nvml_ret (*utilization)(nvml_device dev, nvml_utilization *u);
    nvml_ret (*memory)(nvml_device dev, nvml_memory *m);
    nvml_ret (*power)(nvml_device dev, unsigned int *milliwatts);
    nvml_ret (*temperature)(nvml_device dev, int sensor, unsigned int *celsius);
} nvml_api;

struct ptc__gpumon {
    void *lib;
    nvml_api api;
    nvml_device dev;
    double interval, last;
    int sampled; /* a sample was taken (last is meaningful) */
    int cuda_ordinal;
    /* this epoch */
    int n, nutil, npower;
    double util_sum, power_sum, temp_max;
    uint64_t mem_max, mem_total;
    unsigned valid;
};

/* The k-th entry of the visible-device list v (CUDA_VISIBLE_DEVICES's value) into buf; 0 when v
 * is NULL (the variable is not set). */
static int visible_entry(const char *v, int k, char *buf, size_t n)
{
    if (!v)
        return 0;
    for (int i = 0; i < k && v; i++) {
        v = strchr(v, ',');
        if (v)
            v++;
    }
    size_t len = v ? strcspn(v, ",") : 0;
    if (len >= n)
        len = n - 1;
    if (v)
        memcpy(buf, v, len);
    buf[len] = '\0';
    return 1;
}

static int find_device(ptc__gpumon *m, int ordinal, const char *visible)
{
    char e[128];
    if (!visible_entry(visible, ordinal, e, sizeof e))
        return m->api.by_index((unsigned)ordinal, &m->dev) == 0 ? 0 : -1;
    const char *s = e;
    while (*s == ' ')
        s++;
    if (isdigit((unsigned char)*s)) {
        char *end;
        unsigned long idx = strtoul(s, &end, 10);
        return *end == '\0' && idx < 1u << 16 && m->api.by_index((unsigned)idx, &m->dev) == 0 ? 0
                                                                                              : -1;
    }
    if ((strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0) && m->api.by_uuid)
        return m->api.by_uuid(s, &m->dev) == 0 ? 0 : -1;
    return -1;
}

ptc__gpumon *ptc__gpumon_open_lib(const char *path, int cuda_ordinal, const char *visible,
                                  double interval_s)
{
    if (!path || cuda_ordinal < 0)
        return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return NULL; /* no driver: no monitor, by design */
    int inited = 0;
    ptc__gpumon *m = ptc__calloc(1, sizeof *m);
    if (!m)
        goto fail;
    m->lib = lib;
    m->interval = interval_s;
    m->cuda_ordinal = cuda_ordinal;
    /* POSIX allows converting dlsym's void * to a function pointer; memcpy keeps -Wpedantic
     * quiet about it. */
    static const struct {
        const char *name;
        size_t off;
        int needed;
    } syms[] = {
        {"nvmlInit_v2", offsetof(nvml_api, init), 1},
        {"nvmlShutdown", offsetof(nvml_api, shutdown), 1},
        {"nvmlDeviceGetHandleByIndex_v2", offsetof(nvml_api, by_index), 1},
        {"nvmlDeviceGetHandleByUUID", offsetof(nvml_api, by_uuid), 0},
        {"nvmlDeviceGetUtilizationRates", offsetof(nvml_api, utilization), 0},
        {"nvmlDeviceGetMemoryInfo", offsetof(nvml_api, memory), 0},
        {"nvmlDeviceGetPowerUsage", offsetof(nvml_api, power), 0},
        {"nvmlDeviceGetTemperature", offsetof(nvml_api, temperature), 0},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        void *f = dlsym(lib, syms[i].name);
        if (!f && syms[i].needed)
            goto fail;
        memcpy((char *)&m->api + syms[i].off, &f, sizeof f);
    }
    if (m->api.init() != 0)
        goto fail;
    inited = 1;
    if (find_device(m, cuda_ordinal, visible) < 0)
        goto fail;
    return m;
fail:
    if (inited)
        m->api.shutdown();
    dlclose(lib);
    ptc__free(m);
    return NULL;
}

ptc__gpumon *ptc__gpumon_open(int cuda_ordinal, const char *visible, double interval_s)
{
    return ptc__gpumon_open_lib("libnvidia-ml.so.1", cuda_ordinal, visible, interval_s);
}

void ptc__gpumon_close(ptc__gpumon *m)
{
    if (!m)
        return;
    m->api.shutdown();
    dlclose(m->lib);
    ptc__free(m);
}

void ptc__gpumon_sample(ptc__gpumon *m, double now_s, ptc__gpu_sample *out)
{
    memset(out, 0, sizeof *out);
    m->last = now_s;
    m->sampled = 1;
    nvml_utilization u;
    nvml_memory mem;
    unsigned int mw, c;
    if (m->api.utilization && m->api.utilization(m->dev, &u) == 0 && u.gpu <= 100) {
        out->valid |= PTC__GPU_UTIL;
        out->util = u.gpu;
    }
    if (m->api.memory && m->api.memory(m->dev, &mem) == 0 && mem.used <= mem.total) {
        out->valid |= PTC__GPU_MEM;
        out->mem_used = mem.used;
        out->mem_total = mem.total;
    }
    if (m->api.power && m->api.power(m->dev, &mw) == 0) {
        out->valid |= PTC__GPU_POWER;
        out->power_w = mw / 1000.0;
    }
    if (m->api.temperature && m->api.temperature(m->dev, NVML_TEMPERATURE_GPU, &c) == 0) {
        out->valid |= PTC__GPU_TEMP;
        out->temp_c = c;
    }
    /* the epoch's summary */
    m->n++;
    m->valid |= out->valid;
    if (out->valid & PTC__GPU_UTIL) {
        m->nutil++;
        m->util_sum += out->util;
    }
    if (out->valid & PTC__GPU_POWER) {
        m->npower++;
        m->power_sum += out->power_w;
    }
    if ((out->valid & PTC__GPU_MEM) && out->mem_used >= m->mem_max) {
        m->mem_max = out->mem_used;
        m->mem_total = out->mem_total;
    }
    if ((out->valid & PTC__GPU_TEMP) && out->temp_c > m->temp_max)
        m->temp_max = out->temp_c;
}

int ptc__gpumon_poll(ptc__gpumon *m, double now_s, ptc__gpu_sample *out)
{
    if (m->sampled && now_s - m->last < m->interval)
        return 0;
    ptc__gpumon_sample(m, now_s, out);
    return 1;
}

int ptc__gpumon_epoch(const ptc__gpumon *m, ptc__gpu_sample *out)
{
    memset(out, 0, sizeof *out);
    if (m->nutil) {
        out->valid |= PTC__GPU_UTIL;
        out->util = m->util_sum / m->nutil;
    }
    if (m->npower) {
        out->valid |= PTC__GPU_POWER;
        out->power_w = m->power_sum / m->npower;
    }
    if (m->valid & PTC__GPU_MEM) {
        out->valid |= PTC__GPU_MEM;
        out->mem_used = m->mem_max;
        out->mem_total = m->mem_total;
    }
    if (m->valid & PTC__GPU_TEMP) {
        out->valid |= PTC__GPU_TEMP;
        out->temp_c = m->temp_max;
    }
    return m->n;
}

void ptc__gpumon_epoch_reset(ptc__gpumon *m)
{
    m->n = m->nutil = m->npower = 0;
    m->util_sum = m->power_sum = m->temp_max = 0;
    m->mem_max = m->mem_total = 0;
    m->valid = 0;
}

int ptc__gpumon_epoch_warning(const ptc__gpumon *m, int epoch, char *buf, size_t n)
{
    if (m->nutil < WARN_MIN_SAMPLES)
        return 0;
    double busy = m->util_sum / m->nutil;
    if (busy >= WARN_BUSY_PCT)
        return 0;
    snprintf(buf, n,
             "GPU %d was busy %.0f%% of epoch %d: the input pipeline is the bottleneck (the GPU "
             "waits for batches: try more loader threads or fewer processes per GPU)",
             m->cuda_ordinal, busy, epoch);
    return 1;
}

/* Appends to buf (always terminated). */
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...) PTC_PRINTF(4, 5);
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    if (*at >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *at, n - *at, fmt, ap);
    va_end(ap);
    if (k > 0)
        *at = *at + (size_t)k < n ? *at + (size_t)k : n - 1;
}

void ptc__gpumon_text(const ptc__gpu_sample *s, char *buf, size_t n)
{
    size_t at = 0;
    if (!n)
        return;
    buf[0] = '\0';
    if (!s->valid)
        return;
    put(buf, n, &at, "gpu");
    if (s->valid & PTC__GPU_UTIL)
        put(buf, n, &at, " %.0f%%", s->util);
    if (s->valid & PTC__GPU_MEM)
        put(buf, n, &at, " %.1f/%.1f GiB", (double)s->mem_used / 1073741824.0,
            (double)s->mem_total / 1073741824.0);
    if (s->valid & PTC__GPU_POWER)
        put(buf, n, &at, " %.0f W", s->power_w);
    if (s->valid & PTC__GPU_TEMP)
        put(buf, n, &at, " %.0fC", s->temp_c);
}

void ptc__gpumon_json(const ptc__gpu_sample *s, char *buf, size_t n)
{
    size_t at = 0;
    if (!n)
        return;
    buf[0] = '\0';
    if (s->valid & PTC__GPU_UTIL)
        put(buf, n, &at, ", \"gpu_util\": %.1f", s->util);
    if (s->valid & PTC__GPU_MEM)
        put(buf, n, &at, ", \"gpu_mem_used_bytes\": %llu, \"gpu_mem_total_bytes\": %llu",
            (unsigned long long)s->mem_used, (unsigned long long)s->mem_total);
    if (s->valid & PTC__GPU_POWER)
        put(buf, n, &at, ", \"gpu_power_w\": %.1f", s->power_w);
    if (s->valid & PTC__GPU_TEMP)
        put(buf, n, &at, ", \"gpu_temp_c\": %.0f", s->temp_c);
}
