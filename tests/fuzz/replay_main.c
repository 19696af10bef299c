/*
 * replay_main.c - a main() for the fuzz targets when they are built with an ordinary compiler.
 *
 * libFuzzer brings its own main; without it, each target links this file instead and becomes a
 * replay program: `fuzz_load FILE|DIR...` runs LLVMFuzzerTestOneInput once on every file named,
 * descending into directories (in sorted order, so runs are reproducible), and prints how many
 * inputs it ran. That is how make check runs the seed corpus and every fixture through the targets
 * on machines without clang, and how a crash file from a fuzzing campaign is reproduced under gdb
 * or valgrind.
 *
 * Each input is copied into a heap buffer of exactly its size, as libFuzzer does, so that a read
 * one byte past the end is caught by ASan or valgrind. With FUZZ_REPLAY_VERBOSE set in the
 * environment each file name is printed before it runs: the last name printed before a crash is
 * the culprit.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct replay {
    const char *prog;
    int verbose;
    unsigned long ninputs;
    int failed; /* a path could not be read: reported, and the exit status says so */
} replay;

static void replay_path(replay *r, const char *path, int depth);

/* Returns 0, or an errno value saying why the file could not be read whole. */
static int read_whole(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return e;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (!buf || (n > 0 && fread(buf, 1, n, f) != n)) {
        /* A short read of a regular file means it changed under us or an I/O error. */
        int e = buf ? (ferror(f) ? EIO : EAGAIN) : ENOMEM;
        free(buf);
        fclose(f);
        return e;
    }
    fclose(f);
    *out = buf;
    *len = n;
    return 0;
}

static void replay_file(replay *r, const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int e = read_whole(path, &data, &len);
    if (e != 0) {
        fprintf(stderr, "%s: cannot read %s: %s\n", r->prog, path, strerror(e));
        r->failed = 1;
        return;
    }
    if (r->verbose) {
        fprintf(stderr, "%s: running %s (%zu bytes)\n", r->prog, path, len);
        fflush(stderr);
    }
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    r->ninputs++;
}

static void replay_dir(replay *r, const char *path, int depth)
{
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "%s: cannot list %s: %s\n", r->prog, path, strerror(errno));
        r->failed = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
            size_t len = strlen(path) + 1 + strlen(name) + 1;
            char *child = malloc(len);
            if (child) {
                snprintf(child, len, "%s/%s", path, name);
                replay_path(r, child, depth + 1);
                free(child);
            }
        }
        free(names[i]);
    }
    free(names);
}

static void replay_path(replay *r, const char *path, int depth)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        fprintf(stderr, "%s: cannot stat %s: %s\n", r->prog, path, strerror(errno));
        r->failed = 1;
        return;
    }
    if (S_ISDIR(st.st_mode)) {
        /* Below the top level only links to files are followed (lstat does not follow links),
         * so a link loop cannot make the walk endless; the depth cap is a backstop. */
        if (depth < 64)
            replay_dir(r, path, depth);
    } else if (S_ISREG(st.st_mode)) {
        replay_file(r, path);
    } else if (S_ISLNK(st.st_mode) && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        replay_file(r, path);
    }
}

int main(int argc, char **argv)
{
    replay r = {0};
    const char *slash = strrchr(argv[0], '/');
    r.prog = slash ? slash + 1 : argv[0];
    const char *verbose = getenv("FUZZ_REPLAY_VERBOSE");
    r.verbose = verbose != NULL && verbose[0] != '\0' && strcmp(verbose, "0") != 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", r.prog);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        /* A directory given on the command line is followed even when it is a link. */
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            replay_dir(&r, argv[i], 0);
        else
            replay_path(&r, argv[i], 0);
    }
    printf("%s: %lu inputs replayed\n", r.prog, r.ninputs);
    return r.failed ? 1 : 0;
}
