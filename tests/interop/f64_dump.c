/*
 * f64_dump.c - `f64_dump [--salvage] FILE`: every tensor of a checkpoint as ptc_tensor_read_f64
 * reads it, one line each, "<path> <dtype> <v0> <v1> ..." with each double as ptc_float_text
 * writes it (Python's repr; a complex element is two values, real then imaginary), then with
 * --salvage (the file opened with PTC_OPEN_SALVAGE) one line "<path> <ndim> <d0> ..." per tensor
 * giving its shape. tests/interop/check_read_f64.py compares the lines with torch's own conversion
 * to float64 / complex128, check_salvage_numpy.py with numpy's. Public API only.
 * Exit status 0, 1 when a tensor could not be read (the error on stderr), 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ptc/ptc.h>

int main(int argc, char **argv)
{
    int salvage = argc == 3 && strcmp(argv[1], "--salvage") == 0;
    if (argc != 2 + salvage) {
        fprintf(stderr, "usage: f64_dump [--salvage] FILE\n");
        return 2;
    }
    ptc_open_params op;
    ptc_open_params_default(&op);
    op.flags = salvage ? PTC_OPEN_SALVAGE : 0;
    ptc_ckpt *c = NULL;
    ptc_walk *w = NULL;
    ptc_error err;
    const char *path;
    const ptc_tensor *t;
    int rc, status = 0;
    if (ptc_ckpt_open(&c, argv[1 + salvage], &op, &err) < 0 ||
        ptc_walk_new(&w, ptc_ckpt_root(c), &err) < 0) {
        fprintf(stderr, "f64_dump: %s\n", err.message);
        ptc_ckpt_close(c);
        return 1;
    }
    while ((rc = ptc_walk_next(w, &path, &t)) > 0) {
        ptc_dtype dt = ptc_tensor_dtype(t);
        int comps = dt == PTC_COMPLEX32 || dt == PTC_COMPLEX64 || dt == PTC_COMPLEX128 ? 2 : 1;
        size_t n = (size_t)ptc_tensor_numel(t) * (size_t)comps;
        double *v = malloc((n ? n : 1) * sizeof *v);
        if (!v || ptc_tensor_read_f64(t, v, n, &err) < 0) {
            fprintf(stderr, "f64_dump: %s: %s\n", path, v ? err.message : "out of memory");
            free(v);
            status = 1;
            continue;
        }
        if (salvage) {
            printf("shape %s %d", path, ptc_tensor_ndim(t));
            for (int d = 0; d < ptc_tensor_ndim(t); d++)
                printf(" %lld", (long long)ptc_tensor_shape(t)[d]);
            putchar('\n');
        }
        printf("%s %s", path, ptc_dtype_name(dt));
        for (size_t i = 0; i < n; i++) {
            char text[32];
            ptc_float_text(v[i], text, sizeof text);
            printf(" %s", text);
        }
        putchar('\n');
        free(v);
    }
    if (rc < 0) {
        fprintf(stderr, "f64_dump: %s\n", ptc_walk_error(w)->message);
        status = 1;
    }
    ptc_walk_free(w);
    ptc_ckpt_close(c);
    return status;
}
