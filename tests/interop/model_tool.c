/*
 * model_tool.c - the C side of check_model.py, through the public model API only (<ptc/ptc.h>),
 * so that what the test checks is what an embedding program gets.
 *
 *   model_tool forward WEIGHTS ARCH BACKEND N H W IN OUT
 *       makes a model of ARCH ("resnet18" or "resnet18-cifar") with as many classes as the rows
 *       of WEIGHTS' fc.weight on BACKEND, loads WEIGHTS strictly, runs ptc_model_forward on IN
 *       (raw float32 [N][3][H][W], host byte order) and writes the logits (raw float32
 *       [N][classes]) to OUT.
 *   model_tool save WEIGHTS ARCH OUT
 *       the same load, then ptc_model_state_dict saved with ptc_save to OUT.
 *
 * Exit status: 0 done, 1 ptc refused or failed (its message on stderr), 2 usage error.
 */
#include <ptc/ptc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: model_tool forward WEIGHTS ARCH BACKEND N H W IN OUT\n"
                    "       model_tool save WEIGHTS ARCH OUT\n");
    return 2;
}

static int report(const char *what, const ptc_error *err)
{
    fprintf(stderr, "model_tool: %s: %s (%s)\n", what, err->message, ptc_err_name(err->code));
    return 1;
}

/* A model of the checkpoint's class count, loaded strictly; the checkpoint is closed after. */
static int open_model(ptc_model **m, const char *weights, const char *arch, const char *backend,
                      ptc_error *err)
{
    ptc_ckpt *c;
    if (ptc_ckpt_open(&c, weights, NULL, err) < 0)
        return report("open", err);
    const ptc_tensor *fc = ptc_value_tensor(ptc_dict_get(ptc_ckpt_root(c), "fc.weight"));
    ptc_model_params p;
    ptc_model_params_default(&p);
    p.arch = arch;
    p.backend = backend;
    p.num_classes = fc ? (int)ptc_tensor_shape(fc)[0] : 10;
    int rc = ptc_model_new(m, &p, err) < 0 ? report("ptc_model_new", err) : 0;
    if (rc == 0 && ptc_model_load(*m, ptc_ckpt_root(c), PTC_LOAD_STRICT, err) < 0)
        rc = report("ptc_model_load", err);
    ptc_ckpt_close(c); /* the model holds copies */
    return rc;
}

static int forward(char **argv)
{
    int n = atoi(argv[3]), h = atoi(argv[4]), w = atoi(argv[5]);
    ptc_model *m = NULL;
    ptc_error err;
    int rc = open_model(&m, argv[0], argv[1], argv[2], &err);
    size_t nx = (size_t)n * 3 * (size_t)h * (size_t)w, nl = (size_t)n * 1000000;
    float *x = NULL, *logits = NULL;
    if (rc == 0) {
        nl = (size_t)n * (size_t)ptc_model_num_classes(m);
        x = malloc(nx * sizeof *x);
        logits = malloc(nl * sizeof *logits);
        FILE *f = fopen(argv[6], "rb");
        if (!x || !logits || !f || fread(x, sizeof *x, nx, f) != nx) {
            fprintf(stderr, "model_tool: cannot read %zu floats from %s\n", nx, argv[6]);
            rc = 1;
        }
        if (f)
            fclose(f);
    }
    if (rc == 0 && ptc_model_forward(m, x, n, h, w, logits, &err) < 0)
        rc = report("ptc_model_forward", &err);
    if (rc == 0) {
        FILE *f = fopen(argv[7], "wb");
        if (!f || fwrite(logits, sizeof *logits, nl, f) != nl || fclose(f) != 0) {
            fprintf(stderr, "model_tool: cannot write %s\n", argv[7]);
            rc = 1;
        }
    }
    free(x);
    free(logits);
    ptc_model_free(m);
    return rc;
}

static int save(char **argv)
{
    ptc_model *m = NULL;
    ptc_doc *d = NULL;
    ptc_value *root;
    ptc_error err;
    int rc = open_model(&m, argv[0], argv[1], "ref", &err);
    if (rc == 0 && ptc_doc_new(&d, &err) < 0)
        rc = report("ptc_doc_new", &err);
    if (rc == 0 && ptc_model_state_dict(m, d, &root, &err) < 0)
        rc = report("ptc_model_state_dict", &err);
    ptc_model_free(m); /* the document holds copies of the values */
    if (rc == 0 && ptc_save(root, argv[2], NULL, &err) < 0)
        rc = report("ptc_save", &err);
    ptc_doc_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 10 && strcmp(argv[1], "forward") == 0)
        return forward(argv + 2);
    if (argc == 5 && strcmp(argv[1], "save") == 0)
        return save(argv + 2);
    return usage();
}
