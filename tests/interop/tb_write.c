/*
 * tb_write.c - the driver of tests/interop/check_tensorboard.py: writes an event file with the
 * module tool-tensorboard.so, loaded as ptc train loads it (ptc_tool_module), from scalars read on
 * standard input, one a line: TAG<TAB>STEP<TAB>VALUE (VALUE as strtod reads it: "nan", "inf" and
 * "-inf" too). Prints the event file's path on standard output.
 *
 *     printf 'train/loss\t1\t2.5\n' | tb_write DIR
 *
 * Exit status: 0 written and closed, 1 the module refused something (its message on stderr), 2
 * usage or an unreadable line.
 */
#include "ptc/ptc.h"
#include "tensorboard/tb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES 4096

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tb_write DIR < scalars (TAG<TAB>STEP<TAB>VALUE lines)\n");
        return 2;
    }
    const void *p;
    ptc_error err;
    int rc = ptc_tool_module("tensorboard", &p, &err);
    if (rc < 0) {
        fprintf(stderr, "tb_write: %s\n", err.message);
        return 1;
    }
    const ptc__tb_ops *tb = p;
    if (tb->version != PTC__TB_OPS_VERSION || tb->size < sizeof(ptc__tb_ops)) {
        fprintf(stderr, "tb_write: module table version %d, expected %d\n", tb->version,
                PTC__TB_OPS_VERSION);
        return 1;
    }
    ptc__tb_writer *w;
    if ((rc = tb->open(argv[1], &w, &err)) < 0) {
        fprintf(stderr, "tb_write: %s\n", err.message);
        return 1;
    }
    int status = 0;
    char line[LINE_MAX_BYTES];
    for (int n = 1; fgets(line, sizeof line, stdin); n++) {
        line[strcspn(line, "\n")] = '\0';
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2) {
            fprintf(stderr, "tb_write: line %d: not TAG<TAB>STEP<TAB>VALUE\n", n);
            status = 2;
            break;
        }
        *t1 = *t2 = '\0';
        char *end;
        errno = 0;
        long long step = strtoll(t1 + 1, &end, 10);
        if (errno || *end) {
            fprintf(stderr, "tb_write: line %d: bad step\n", n);
            status = 2;
            break;
        }
        double v = strtod(t2 + 1, &end);
        if (*end) {
            fprintf(stderr, "tb_write: line %d: bad value\n", n);
            status = 2;
            break;
        }
        if ((rc = tb->scalar(w, line, step, v, &err)) < 0) {
            fprintf(stderr, "tb_write: line %d: %s\n", n, err.message);
            status = 1;
            break;
        }
    }
    printf("%s\n", tb->path(w));
    if ((rc = tb->close(w, &err)) < 0) {
        fprintf(stderr, "tb_write: %s\n", err.message);
        status = 1;
    }
    return status;
}
