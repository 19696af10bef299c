/*
 * bench_load.c - time loading a checkpoint with libptc (public API only), against the plain read()
 * of the same file that bounds any loader working from the page cache.
 *
 *     bench_load MODE FILE [REPEATS]
 *
 *   open   ptc_ckpt_open, walk every tensor (metadata only, no data touched), close;
 *   read   ptc_ckpt_open, read every byte of every storage once (a sum of 64-bit words, so the
 *          compiler cannot skip it and the cost is that of bringing the bytes in), close;
 *   plain  open(2) and read(2) the whole file through a 1 MiB buffer, close;
 *   inspect  run `PTC inspect --json FILE` as a whole process (PTC, the fourth argument: the
 *          ptc binary itself, not a wrapper script), its output to /dev/null, and wait for it:
 *          what a user who times the command sees.
 *
 * Each mode runs REPEATS times (default 5) in this process and prints one line of key=value pairs:
 * the median and minimum seconds, peak RSS (getrusage ru_maxrss, which counts the pages of a
 * mapped file that were touched) and peak anonymous RSS (RssAnon from /proc/self/status, sampled
 * while the checkpoint is open: the heap ptc itself needs, page cache excluded; -1 where
 * /proc is unavailable). run.sh turns these lines into the table; nothing here asserts a speed.
 */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ptc/ptc.h>

#define PLAIN_BUF_BYTES (1u << 20)
#define MAX_REPEATS     1000

typedef struct result {
    uint64_t ntensors; /* open: tensors walked */
    uint64_t nbytes;   /* read, plain: bytes brought in */
    uint64_t checksum; /* read: sum of the storages' 64-bit words; keeps the reads alive */
    double cpu_s;      /* inspect: user + system seconds of the process (wall time minus waiting
                        * for a core, on a loaded machine) */
} result;

static long peak_anon_kib = -1;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* RssAnon of this process in KiB, -1 if unknown. Sampled while a checkpoint is open, it is the
 * heap the load holds, apart from the file's pages that the mapping shares with the page cache. */
static void sample_anon_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return;
    char line[256];
    long kib;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "RssAnon: %ld kB", &kib) == 1) {
            if (kib > peak_anon_kib)
                peak_anon_kib = kib;
            break;
        }
    }
    fclose(f);
}

static int open_ckpt(ptc_ckpt **c, const char *path)
{
    ptc_error err;
    if (ptc_ckpt_open(c, path, NULL, &err) < 0) {
        fprintf(stderr, "bench_load: %s: %s\n", path, err.message);
        return -1;
    }
    return 0;
}

static int run_open(const char *path, result *r)
{
    ptc_ckpt *c;
    ptc_walk *w;
    ptc_error err;
    if (open_ckpt(&c, path) < 0)
        return -1;
    if (ptc_walk_new(&w, ptc_ckpt_root(c), &err) < 0) {
        fprintf(stderr, "bench_load: %s: %s\n", path, err.message);
        ptc_ckpt_close(c);
        return -1;
    }
    const char *name;
    const ptc_tensor *t;
    r->ntensors = 0;
    while (ptc_walk_next(w, &name, &t) > 0)
        r->ntensors++;
    sample_anon_rss();
    ptc_walk_free(w);
    ptc_ckpt_close(c);
    return 0;
}

static uint64_t sum_words(const uint8_t *p, uint64_t n)
{
    uint64_t s = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w); /* a storage copied to the heap need not be 8-aligned */
        s += w;
    }
    for (; i < n; i++)
        s += p[i];
    return s;
}

static int run_read(const char *path, result *r)
{
    ptc_ckpt *c;
    if (open_ckpt(&c, path) < 0)
        return -1;
    r->nbytes = 0;
    r->checksum = 0;
    size_t n = ptc_ckpt_nstorages(c);
    for (size_t i = 0; i < n; i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        uint64_t nbytes = (uint64_t)ptc_storage_nbytes(s);
        r->checksum += sum_words(ptc_storage_data(s), nbytes);
        r->nbytes += nbytes;
    }
    sample_anon_rss();
    ptc_ckpt_close(c);
    return 0;
}

static int run_plain(const char *path, result *r)
{
    static uint8_t buf[PLAIN_BUF_BYTES];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "bench_load: %s: %s\n", path, strerror(errno));
        return -1;
    }
    r->nbytes = 0;
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            fprintf(stderr, "bench_load: %s: %s\n", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (got == 0)
            break;
        r->nbytes += (uint64_t)got;
    }
    close(fd);
    return 0;
}

extern char **environ;

static const char *inspect_ptc; /* inspect: the ptc binary */

/* One `ptc inspect --json FILE` process, stdout to /dev/null; -1 unless it ran and exited 0. */
static int run_inspect(const char *path, result *r)
{
    const char *ptc = inspect_ptc;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *args[] = {(char *)ptc, "inspect", "--json", (char *)path, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, ptc, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "bench_load: %s: %s\n", ptc, strerror(rc));
        return -1;
    }
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR)
            return -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_load: %s inspect --json %s failed (status 0x%x)\n", ptc, path,
                status);
        return -1;
    }
    r->ntensors = 0;
    r->cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5 || (argc == 5) != (strcmp(argv[1], "inspect") == 0)) {
        fprintf(stderr, "usage: bench_load open|read|plain FILE [REPEATS]\n"
                        "       bench_load inspect FILE REPEATS PTC\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    int (*run)(const char *, result *);
    if (strcmp(mode, "open") == 0)
        run = run_open;
    else if (strcmp(mode, "read") == 0)
        run = run_read;
    else if (strcmp(mode, "plain") == 0)
        run = run_plain;
    else if (strcmp(mode, "inspect") == 0)
        run = run_inspect;
    else {
        fprintf(stderr, "bench_load: unknown mode '%s' (open, read, plain, inspect)\n", mode);
        return 2;
    }
    long repeats = 5;
    inspect_ptc = argc == 5 ? argv[4] : NULL;
    if (argc >= 4) {
        char *end;
        repeats = strtol(argv[3], &end, 10);
        if (*end != '\0' || repeats < 1 || repeats > MAX_REPEATS) {
            fprintf(stderr, "bench_load: REPEATS must be 1 to %d\n", MAX_REPEATS);
            return 2;
        }
    }

    static double times[MAX_REPEATS], cpus[MAX_REPEATS];
    result r = {0, 0, 0, 0};
    for (long i = 0; i < repeats; i++) {
        double t0 = now_seconds();
        if (run(path, &r) < 0)
            return 1;
        times[i] = now_seconds() - t0;
        cpus[i] = r.cpu_s;
    }
    qsort(cpus, (size_t)repeats, sizeof cpus[0], cmp_double);
    double cpu_median =
        repeats % 2 ? cpus[repeats / 2] : (cpus[repeats / 2 - 1] + cpus[repeats / 2]) / 2;
    qsort(times, (size_t)repeats, sizeof times[0], cmp_double);
    double median =
        repeats % 2 ? times[repeats / 2] : (times[repeats / 2 - 1] + times[repeats / 2]) / 2;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("mode=%s repeats=%ld median_s=%.6f min_s=%.6f cpu_median_s=%.6f peak_rss_kib=%ld "
           "peak_anon_kib=%ld tensors=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
           " file=%s\n",
           mode, repeats, median, times[0], cpu_median, ru.ru_maxrss, peak_anon_kib, r.ntensors,
           r.nbytes, r.checksum, path);
    return 0;
}
