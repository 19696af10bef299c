/*
 * list_tensors.c - embed libptc: open a checkpoint and list its tensors.
 *
 *     list_tensors model.pth
 *     conv1.weight float32 [64, 3, 7, 7] = -0.0104, -0.00611, -0.00181, 0.0746, ...
 *     bn1.num_batches_tracked int64 []
 *
 * Build against an installed libptc with
 *     cc list_tensors.c $(pkg-config --cflags --libs ptc) -o list_tensors
 *
 * Nothing in the file is executed: ptc_ckpt_open applies the same allowlist as
 * torch.load(weights_only=True) and refuses anything else with a reason. Tensors are read in place
 * from the file's mapping, so listing a large checkpoint touches only the values printed.
 */
#include <inttypes.h>
#include <stdio.h>

#include <ptc/ptc.h>

#define NPREVIEW 4 /* values printed per float32 tensor */

/* Paths are dict keys from the file: a hostile checkpoint can put terminal escape sequences in
 * them, so every byte outside printable ASCII is shown as \xNN. */
static void print_escaped(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7f && c != '\\')
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

static void print_shape(const ptc_tensor *t)
{
    const int64_t *shape = ptc_tensor_shape(t);
    printf("[");
    for (int d = 0; d < ptc_tensor_ndim(t); d++)
        printf("%s%" PRId64, d ? ", " : "", shape[d]);
    printf("]");
}

/* The first values in row-major order. The tensor may be a strided view of its storage (a slice
 * or a transpose), so each element's position is computed from its index and the strides rather
 * than assumed to be contiguous. */
static void print_preview(const ptc_tensor *t)
{
    const float *data = ptc_tensor_data(t); /* element at storage_offset, host byte order */
    const int64_t *shape = ptc_tensor_shape(t), *stride = ptc_tensor_stride(t);
    int ndim = ptc_tensor_ndim(t);
    int64_t numel = ptc_tensor_numel(t);
    int64_t n = numel < NPREVIEW ? numel : NPREVIEW;

    for (int64_t i = 0; i < n; i++) {
        int64_t rest = i, offset = 0;
        for (int d = ndim - 1; d >= 0; d--) {
            offset += (rest % shape[d]) * stride[d];
            rest /= shape[d];
        }
        float v = data[offset];
        if (ptc_tensor_is_neg(t)) /* torch's lazy negation: the storage holds -v */
            v = -v;
        printf("%s%g", i ? ", " : " = ", v);
    }
    if (numel > n)
        printf(", ...");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CHECKPOINT\n", argv[0]);
        return 2;
    }

    ptc_ckpt *ckpt = NULL;
    ptc_walk *walk = NULL;
    ptc_error err;
    int status = 1;

    /* NULL parameters: the default policy and limits. */
    if (ptc_ckpt_open(&ckpt, argv[1], NULL, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[1], err.message);
        return 1;
    }
    if (ptc_walk_new(&walk, ptc_ckpt_root(ckpt), &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[1], err.message);
        goto fail;
    }

    const char *path;
    const ptc_tensor *t;
    int rc;
    while ((rc = ptc_walk_next(walk, &path, &t)) > 0) {
        ptc_dtype dt = ptc_tensor_dtype(t);
        print_escaped(path[0] ? path : "(root)"); /* a checkpoint may be a single tensor */
        printf(" %s ", ptc_dtype_name(dt));
        print_shape(t);
        if (dt == PTC_FLOAT32)
            print_preview(t);
        printf("\n");
    }
    if (rc < 0) {
        fprintf(stderr, "%s: walking the tensors failed: %s\n", argv[1], ptc_strerror(rc));
        goto fail;
    }
    status = 0;

fail:
    ptc_walk_free(walk);
    ptc_ckpt_close(ckpt);
    return status;
}
