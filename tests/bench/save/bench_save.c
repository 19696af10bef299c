/*
 * bench_save.c - time ptc_save against a plain write + fsync of the same bytes, in one process,
 * for tests/bench/save/run.sh (which also times torch.save + fsync, and reads the lines this
 * prints). Public API only; never run by make check.
 *
 *     bench_save IN OUTDIR
 *
 * IN is opened with ptc_ckpt_open and PTC_OPEN_COPY, so that the storages are in the heap as a
 * state dict in torch's memory is when torch.save runs: a mapping of the file would let the kernel
 * drop its pages under memory pressure and read them again inside a timing. Every page is
 * touched once more before the timings. One untimed ptc_save to OUTDIR/ptc.pth gives the bytes the plain write
 * writes (read into the heap). Then commands are read from standard input, one a line, and each
 * answered with one line on standard output, so that the driver can alternate contenders:
 *
 *   ptc     ptc_save(root, OUTDIR/ptc.pth): temporary file, writes, fsync, rename, folder fsync
 *   plain   open(OUTDIR/plain.pth, O_CREAT|O_TRUNC), write(2) of the whole buffer, fsync, close
 *   check   compares OUTDIR/ptc.pth with the buffer: "same" or "differs"
 *   quit
 *
 * Before each timed run the output is unlinked and sync(2) writes back every dirty page, outside
 * the timing, so that no run pays for another's writeback. A timed run answers "<wall> <cpu>":
 * wall-clock seconds, then the process's user + system CPU seconds over the same span (the work
 * itself, which other processes on a busy machine inflate less than the wall time).
 */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <ptc/ptc.h>

#define MAX_PATH 4096
#define PAGE     4096

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len)) &&
            fread(b, 1, (size_t)len, f) != (size_t)len) {
            free(b);
            b = NULL;
        }
        *n = len > 0 ? (size_t)len : 0;
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: bench_save IN OUTDIR\n");
        return 2;
    }
    char out_ptc[MAX_PATH], out_plain[MAX_PATH];
    snprintf(out_ptc, sizeof out_ptc, "%s/ptc.pth", argv[2]);
    snprintf(out_plain, sizeof out_plain, "%s/plain.pth", argv[2]);
    ptc_ckpt *c;
    ptc_error err;
    ptc_open_params op;
    ptc_open_params_default(&op);
    op.flags = PTC_OPEN_COPY;
    ptc_limits lim;
    ptc_limits_default(&lim);
    lim.max_heap_bytes = UINT64_MAX; /* the copies are the point; the input is the bench's own */
    op.limits = &lim;
    if (ptc_ckpt_open(&c, argv[1], &op, &err) < 0) {
        fprintf(stderr, "bench_save: %s: %s\n", argv[1], err.message);
        return 1;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < ptc_ckpt_nstorages(c); i++) {
        const ptc_storage *s = ptc_ckpt_storage(c, i);
        const uint8_t *p = ptc_storage_data(s);
        for (int64_t o = 0; o < ptc_storage_nbytes(s); o += PAGE)
            sink ^= p[o];
    }
    const ptc_value *root = ptc_ckpt_root(c);
    if (ptc_save(root, out_ptc, NULL, &err) < 0) {
        fprintf(stderr, "bench_save: ptc_save %s: %s\n", out_ptc, err.message);
        return 1;
    }
    size_t n = 0;
    uint8_t *same = read_file(out_ptc, &n);
    if (!same) {
        fprintf(stderr, "bench_save: cannot read back %s\n", out_ptc);
        return 1;
    }
    printf("ready %zu\n", n);
    fflush(stdout);

    char cmd[64];
    while (fgets(cmd, sizeof cmd, stdin)) {
        cmd[strcspn(cmd, "\n")] = '\0';
        if (strcmp(cmd, "quit") == 0)
            break;
        if (strcmp(cmd, "check") == 0) {
            size_t m = 0;
            uint8_t *b = read_file(out_ptc, &m);
            printf("%s\n", b && m == n && memcmp(b, same, n) == 0 ? "same" : "differs");
            free(b);
        } else if (strcmp(cmd, "ptc") == 0 || strcmp(cmd, "plain") == 0) {
            bool is_ptc = cmd[1] == 't';
            const char *out = is_ptc ? out_ptc : out_plain;
            unlink(out);
            sync();
            double t0 = now_seconds(), c0 = cpu_seconds();
            if (is_ptc) {
                if (ptc_save(root, out, NULL, &err) < 0) {
                    fprintf(stderr, "bench_save: ptc_save %s: %s\n", out, err.message);
                    return 1;
                }
            } else {
                int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
                if (fd < 0 || write_all(fd, same, n) < 0 || fsync(fd) < 0 || close(fd) < 0) {
                    fprintf(stderr, "bench_save: plain write %s: %s\n", out, strerror(errno));
                    return 1;
                }
            }
            double t1 = now_seconds(), c1 = cpu_seconds();
            printf("%.6f %.6f\n", t1 - t0, c1 - c0);
        } else {
            fprintf(stderr, "bench_save: unknown command \"%s\"\n", cmd);
            return 2;
        }
        fflush(stdout);
    }
    unlink(out_ptc);
    unlink(out_plain);
    free(same);
    ptc_ckpt_close(c);
    (void)sink;
    return 0;
}
