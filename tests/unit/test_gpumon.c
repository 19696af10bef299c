/*
 * test_gpumon.c - lib/train/gpumon.c against a stand-in NVML (tests/unit/fake_nvml.c, loaded
 * from the build tree through ptc__gpumon_open_lib): the device picked for a CUDA ordinal (with
 * and without a CUDA_VISIBLE_DEVICES value), the sample fields, the progress text and the JSON
 * members, calls that fail, the sampling interval, the epoch's summary and the under-50% warning,
 * no monitor (and no error) when the library is missing or NVML does not start, and a reading as
 * the training loop records it (metrics line and scalar tags, lib/train/record.c). No GPU needed.
 */
#include "ptc/ptc.h"
#include "train/gpumon.h"
#include "train/record.h"

#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct fake_nvml_state {
    unsigned util[4];
    unsigned long long mem_total, mem_used[4];
    unsigned power_mw[4], temp_c[4];
    unsigned fail;
    int ndev;
    int inits;
    int last_handle;
} fake_nvml_state;

static char lib_path[4096];
static fake_nvml_state *fake;

#define GIB 1073741824.0

static void reset_fake(void)
{
    fake->fail = 0;
    fake->ndev = 2;
    fake->last_handle = -1;
    fake->mem_total = (unsigned long long)(139.8 * GIB);
    for (int i = 0; i < 4; i++) {
        fake->util[i] = 97;
        fake->mem_used[i] = (unsigned long long)(31.2 * GIB);
        fake->power_mw[i] = 512000;
        fake->temp_c[i] = 61;
    }
}

static void test_missing(void)
{
    CHECK(ptc__gpumon_open_lib("/nonexistent/libnvidia-ml.so.1", 0, NULL, 2.0) == NULL);
    reset_fake();
    fake->fail = 1; /* nvmlInit_v2 fails: the driver is not loaded */
    CHECK(ptc__gpumon_open_lib(lib_path, 0, NULL, 2.0) == NULL);
    CHECK_INT(fake->inits, 0);
    reset_fake();
    CHECK(ptc__gpumon_open_lib(lib_path, 2, NULL, 2.0) == NULL); /* only 2 devices */
    CHECK_INT(fake->inits, 0);                                   /* shut down again */
    CHECK(ptc__gpumon_open_lib(lib_path, -1, NULL, 2.0) == NULL);
    ptc__gpumon_close(NULL);
}

static void test_device_choice(void)
{
    reset_fake();
    const char *vis = NULL;
    ptc__gpumon *m = ptc__gpumon_open_lib(lib_path, 1, vis, 2.0);
    CHECK(m != NULL);
    CHECK_INT(fake->last_handle, 1);
    ptc__gpumon_close(m);
    CHECK_INT(fake->inits, 0);

    vis = "1,0";
    m = ptc__gpumon_open_lib(lib_path, 0, vis, 2.0);
    CHECK(m != NULL);
    CHECK_INT(fake->last_handle, 1); /* CUDA's 0 is NVML's 1 */
    ptc__gpumon_close(m);
    m = ptc__gpumon_open_lib(lib_path, 1, vis, 2.0);
    CHECK(m != NULL);
    CHECK_INT(fake->last_handle, 0);
    ptc__gpumon_close(m);
    CHECK(ptc__gpumon_open_lib(lib_path, 2, vis, 2.0) == NULL); /* not visible */

    vis = "GPU-fake-1";
    fake->last_handle = -1;
    m = ptc__gpumon_open_lib(lib_path, 0, vis, 2.0);
    CHECK(m != NULL);
    CHECK_INT(fake->last_handle, 1);
    ptc__gpumon_close(m);
    vis = "GPU-other";
    CHECK(ptc__gpumon_open_lib(lib_path, 0, vis, 2.0) == NULL);
    vis = "bogus";
    CHECK(ptc__gpumon_open_lib(lib_path, 0, vis, 2.0) == NULL);
    CHECK_INT(fake->inits, 0);
}

static void test_fields(void)
{
    reset_fake();
    ptc__gpumon *m = ptc__gpumon_open_lib(lib_path, 0, NULL, 2.0);
    CHECK(m != NULL);
    if (!m)
        return;
    ptc__gpu_sample s;
    char text[128], json[512];
    CHECK_INT(ptc__gpumon_poll(m, 100.0, &s), 1);
    CHECK_INT(s.valid, PTC__GPU_UTIL | PTC__GPU_MEM | PTC__GPU_POWER | PTC__GPU_TEMP);
    CHECK_INT(s.mem_used, fake->mem_used[0]);
    CHECK_INT(s.mem_total, fake->mem_total);
    ptc__gpumon_text(&s, text, sizeof text);
    CHECK_STR(text, "gpu 97% 31.2/139.8 GiB 512 W 61C");
    ptc__gpumon_json(&s, json, sizeof json);
    char want[512];
    snprintf(want, sizeof want,
             ", \"gpu_util\": 97.0, \"gpu_mem_used_bytes\": %llu, \"gpu_mem_total_bytes\": %llu, "
             "\"gpu_power_w\": 512.0, \"gpu_temp_c\": 61",
             fake->mem_used[0], fake->mem_total);
    CHECK_STR(json, want);

    /* the interval: nothing before 2 s have passed */
    CHECK_INT(ptc__gpumon_poll(m, 101.0, &s), 0);
    CHECK_INT(ptc__gpumon_poll(m, 101.99, &s), 0);
    CHECK_INT(ptc__gpumon_poll(m, 102.0, &s), 1);

    /* calls that fail leave their fields out */
    fake->fail = 2 | 8; /* utilisation and power */
    CHECK_INT(ptc__gpumon_poll(m, 105.0, &s), 1);
    CHECK_INT(s.valid, PTC__GPU_MEM | PTC__GPU_TEMP);
    ptc__gpumon_text(&s, text, sizeof text);
    CHECK_STR(text, "gpu 31.2/139.8 GiB 61C");
    ptc__gpumon_json(&s, json, sizeof json);
    snprintf(want, sizeof want,
             ", \"gpu_mem_used_bytes\": %llu, \"gpu_mem_total_bytes\": %llu, \"gpu_temp_c\": 61",
             fake->mem_used[0], fake->mem_total);
    CHECK_STR(json, want);
    fake->fail = 2 | 4 | 8 | 16;
    CHECK_INT(ptc__gpumon_poll(m, 108.0, &s), 1);
    CHECK_INT(s.valid, 0);
    ptc__gpumon_text(&s, text, sizeof text);
    CHECK_STR(text, "");
    ptc__gpumon_json(&s, json, sizeof json);
    CHECK_STR(json, "");
    /* a short buffer is cut, never overrun */
    fake->fail = 0;
    ptc__gpumon_sample(m, 110.0, &s);
    char small[8];
    memset(small, 'x', sizeof small);
    ptc__gpumon_text(&s, small, sizeof small);
    CHECK_STR(small, "gpu 97%");
    ptc__gpumon_close(m);
}

static void test_epoch(void)
{
    reset_fake();
    ptc__gpumon *m = ptc__gpumon_open_lib(lib_path, 1, NULL, 2.0);
    CHECK(m != NULL);
    if (!m)
        return;
    ptc__gpu_sample s, e;
    char text[256];
    /* busy 30, 40, 32 (mean 34): the warning */
    const unsigned busy[3] = {30, 40, 32};
    const unsigned power[3] = {200000, 300000, 250000};
    for (int i = 0; i < 3; i++) {
        fake->util[1] = busy[i];
        fake->power_mw[1] = power[i];
        fake->temp_c[1] = 50 + (unsigned)i * 10 % 25;
        fake->mem_used[1] = (unsigned long long)((10 + i) * GIB);
        CHECK_INT(ptc__gpumon_poll(m, 10.0 * i, &s), 1);
    }
    CHECK_INT(ptc__gpumon_epoch(m, &e), 3);
    CHECK(e.util > 33.99 && e.util < 34.01);
    CHECK(e.power_w > 249.99 && e.power_w < 250.01);
    CHECK_INT(e.mem_used, (unsigned long long)(12 * GIB));
    CHECK(e.temp_c == 70);
    CHECK_INT(ptc__gpumon_epoch_warning(m, 1, text, sizeof text), 1);
    const char *want = "GPU 1 was busy 34% of epoch 1: the input pipeline is the bottleneck";
    if (strncmp(text, want, strlen(want)) != 0) {
        fprintf(stderr, "warning text: \"%s\", expected it to start with \"%s\"\n", text, want);
        CHECK(0);
    }
    /* a new epoch: two samples are too few to judge */
    ptc__gpumon_epoch_reset(m);
    CHECK_INT(ptc__gpumon_epoch(m, &e), 0);
    CHECK_INT(e.valid, 0);
    fake->util[1] = 10;
    ptc__gpumon_sample(m, 100.0, &s);
    ptc__gpumon_sample(m, 101.0, &s);
    CHECK_INT(ptc__gpumon_epoch_warning(m, 2, text, sizeof text), 0);
    /* busy enough: no warning */
    ptc__gpumon_epoch_reset(m);
    fake->util[1] = 50;
    for (int i = 0; i < 4; i++)
        ptc__gpumon_sample(m, 200.0 + i, &s);
    CHECK_INT(ptc__gpumon_epoch_warning(m, 3, text, sizeof text), 0);
    /* utilisation never readable: no warning either */
    ptc__gpumon_epoch_reset(m);
    fake->fail = 2;
    for (int i = 0; i < 4; i++)
        ptc__gpumon_sample(m, 300.0 + i, &s);
    CHECK_INT(ptc__gpumon_epoch_warning(m, 4, text, sizeof text), 0);
    CHECK_INT(ptc__gpumon_epoch(m, &e), 4);
    CHECK_INT(e.valid & PTC__GPU_UTIL, 0);
    ptc__gpumon_close(m);
    CHECK_INT(fake->inits, 0);
}

typedef struct seen_scalar {
    char tag[32][40];
    long long step[32];
    double value[32];
    int n;
} seen_scalar;

static void on_scalar(void *ctx, const char *tag, int64_t step, double value)
{
    seen_scalar *sc = ctx;
    if (sc->n < 32) {
        snprintf(sc->tag[sc->n], sizeof sc->tag[0], "%s", tag);
        sc->step[sc->n] = step;
        sc->value[sc->n++] = value;
    }
}

/* A reading as the training loop records it (lib/train/record.c): the "gpu" line of the metrics
 * file and, at the same step, gpu/utilization (percent) and gpu/memory_used_gib (its bytes / 2^30)
 * to the scalar callback; rank 0 only. */
static void test_record(void)
{
    reset_fake();
    ptc__gpumon *m = ptc__gpumon_open_lib(lib_path, 0, NULL, 2.0);
    CHECK(m != NULL);
    if (!m)
        return;
    ptc__gpu_sample s;
    CHECK_INT(ptc__gpumon_poll(m, 100.0, &s), 1);
    char path[] = "/tmp/ptc-gpurec-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    seen_scalar sc = {.n = 0};
    ptc_train_params p;
    ptc_train_params_default(&p);
    p.metrics = path;
    p.scalar = on_scalar;
    p.ctx = &sc;
    ptc__recorder rec, other;
    ptc_error err;
    CHECK_INT(ptc__recorder_open(&rec, &p, 0, 2, false, &err), 0);
    CHECK_INT(ptc__recorder_open(&other, &p, 1, 2, true, &err), 0); /* rank 1: nothing */
    ptc__record_gpu(&rec, 3, 1234, &s);
    ptc__record_gpu(&other, 3, 1234, &s);
    ptc__recorder_close(&rec);
    ptc__recorder_close(&other);
    char line[512] = "", want[512];
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        CHECK(fgetc(f) == EOF); /* one line: rank 1 wrote none */
        fclose(f);
    }
    snprintf(want, sizeof want,
             "{\"event\": \"gpu\", \"epoch\": 3, \"step\": 1234, \"gpu_util\": 97, "
             "\"gpu_mem_used_bytes\": %llu, \"gpu_mem_total_bytes\": %llu, \"gpu_power_w\": 512, "
             "\"gpu_temp_c\": 61}\n",
             fake->mem_used[0], fake->mem_total);
    CHECK_STR(line, want);
    CHECK_INT(sc.n, 2);
    CHECK_STR(sc.tag[0], "gpu/utilization");
    CHECK_STR(sc.tag[1], "gpu/memory_used_gib");
    CHECK_INT(sc.step[0], 1234);
    CHECK_INT(sc.step[1], 1234);
    CHECK(sc.value[0] == 97.0);
    CHECK(sc.value[1] == (double)fake->mem_used[0] / GIB);
    unlink(path);
    ptc__gpumon_close(m);
}

int main(void)
{
    const char *top = getenv("top_builddir");
    snprintf(lib_path, sizeof lib_path, "%s/tests/unit/.libs/libfake_nvml.so", top ? top : ".");
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    fake_nvml_state *(*get)(void) = NULL;
    if (h)
        *(void **)&get = dlsym(h, "fake_nvml_get");
    if (!get) {
        fprintf(stderr, "test_gpumon: cannot load the stand-in NVML %s: %s\n", lib_path, dlerror());
        return 99;
    }
    fake = get();
    test_missing();
    test_device_choice();
    test_fields();
    test_epoch();
    test_record();
    dlclose(h);
    return check_exit("test_gpumon");
}
