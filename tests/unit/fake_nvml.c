/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1 with the few entry points lib/train/gpumon.c
 * uses, for tests/unit/test_gpumon (built by make check as tests/unit/.libs/libfake_nvml.so).
 *
 * It answers from a table that the test sets through fake_nvml_set (found with dlsym on the same
 * handle): the readings, which calls fail, how many devices exist and the UUID of each. Only
 * device handles that it gave out are accepted, so a test sees which device was picked.
 */
#include <string.h>

/* make check compiles with -fvisibility=hidden; these are the library's interface */
#define EXPORT __attribute__((visibility("default")))

#define NDEV 4

typedef struct fake_nvml_state {
    unsigned util[NDEV];
    unsigned long long mem_total, mem_used[NDEV];
    unsigned power_mw[NDEV], temp_c[NDEV];
    unsigned fail; /* bits: 1 init, 2 utilisation, 4 memory, 8 power, 16 temperature */
    int ndev;
    int inits;       /* nvmlInit_v2 calls not yet matched by nvmlShutdown */
    int last_handle; /* the device of the last handle given out, -1 none */
} fake_nvml_state;

static fake_nvml_state g = {.ndev = 2, .last_handle = -1};
static int handles[NDEV];

/* Exported for the test (not part of NVML). */
EXPORT fake_nvml_state *fake_nvml_get(void);
EXPORT fake_nvml_state *fake_nvml_get(void)
{
    return &g;
}

EXPORT int nvmlInit_v2(void);
EXPORT int nvmlShutdown(void);
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev);
EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev);
EXPORT int nvmlDeviceGetUtilizationRates(void *dev, unsigned *u);
EXPORT int nvmlDeviceGetMemoryInfo(void *dev, unsigned long long *m);
EXPORT int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw);
EXPORT int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *c);

enum { OK = 0, ERR_INVALID = 2, ERR_NOT_SUPPORTED = 3, ERR_UNINIT = 1, ERR_NOT_FOUND = 6 };

EXPORT int nvmlInit_v2(void)
{
    if (g.fail & 1)
        return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    g.inits++;
    return OK;
}

EXPORT int nvmlShutdown(void)
{
    g.inits--;
    return OK;
}

static int dev_index(void *dev)
{
    for (int i = 0; i < NDEV; i++)
        if (dev == &handles[i])
            return i < g.ndev && g.inits > 0 ? i : -1;
    return -1;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
    if (g.inits <= 0)
        return ERR_UNINIT;
    if (index >= (unsigned)g.ndev)
        return ERR_INVALID;
    *dev = &handles[index];
    g.last_handle = (int)index;
    return OK;
}

EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev)
{
    /* device i is "GPU-fake-<i>" */
    if (g.inits <= 0)
        return ERR_UNINIT;
    if (strncmp(uuid, "GPU-fake-", 9) != 0 || uuid[9] < '0' || uuid[9] >= '0' + g.ndev || uuid[10])
        return ERR_NOT_FOUND;
    int i = uuid[9] - '0';
    *dev = &handles[i];
    g.last_handle = i;
    return OK;
}

EXPORT int nvmlDeviceGetUtilizationRates(void *dev, unsigned *u)
{
    int i = dev_index(dev);
    if (i < 0)
        return ERR_INVALID;
    if (g.fail & 2)
        return ERR_NOT_SUPPORTED;
    u[0] = g.util[i]; /* gpu */
    u[1] = 0;         /* memory */
    return OK;
}

EXPORT int nvmlDeviceGetMemoryInfo(void *dev, unsigned long long *m)
{
    int i = dev_index(dev);
    if (i < 0)
        return ERR_INVALID;
    if (g.fail & 4)
        return ERR_NOT_SUPPORTED;
    m[0] = g.mem_total;                 /* total */
    m[1] = g.mem_total - g.mem_used[i]; /* free */
    m[2] = g.mem_used[i];               /* used */
    return OK;
}

EXPORT int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw)
{
    int i = dev_index(dev);
    if (i < 0)
        return ERR_INVALID;
    if (g.fail & 8)
        return ERR_NOT_SUPPORTED;
    *mw = g.power_mw[i];
    return OK;
}

EXPORT int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *c)
{
    int i = dev_index(dev);
    if (i < 0 || sensor != 0)
        return ERR_INVALID;
    if (g.fail & 16)
        return ERR_NOT_SUPPORTED;
    *c = g.temp_c[i];
    return OK;
}
