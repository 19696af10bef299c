/*
 * classify.c - embed ResNet-18 inference in a C program: open a state dict that torch saved
 * (torch.save(model.state_dict(), "model.pth") of a torchvision resnet18), and print the three
 * most likely classes of each PNG (or JPEG) file given on the command line.
 *
 *     cc classify.c $(pkg-config --cflags --libs ptc) -o classify
 *     ./classify model.pth cat.png dog.png
 *
 * The model's shape (classes, stem) and the preprocessing `ptc train` recorded come from the
 * state dict itself; a state dict without that record gets the CIFAR-10 tutorial's Normalize and
 * 32x32 input (ptc_model_params_default). Images of another size are resized as torchvision's
 * Resize does. Exit status: 0 when every image was classified, 1 otherwise.
 */
#include <ptc/ptc.h>

#include <stdio.h>

#define TOP 3

/* The model a state dict describes, with its weights loaded. */
static int open_model(const char *path, ptc_model **m, ptc_error *err)
{
    ptc_ckpt *ck;
    int rc = ptc_ckpt_open(&ck, path, NULL, err); /* the default policy: torch's weights_only */
    if (rc < 0)
        return rc;
    const ptc_value *sd = ptc_ckpt_root(ck);
    ptc_model_params mp;
    ptc_model_params_default(&mp);
    mp.backend = "ref"; /* plain C: no module needed for a few images */
    rc = ptc_model_params_from_state_dict(&mp, sd, NULL, err);
    if (rc == 0)
        rc = ptc_model_new(m, &mp, err);
    if (rc == 0 &&
        (rc = ptc_model_load(*m, sd, PTC_LOAD_STRICT | PTC_LOAD_STRIP_PREFIX, err)) < 0) {
        ptc_model_free(*m);
        *m = NULL;
    }
    ptc_ckpt_close(ck); /* the model holds its own copy of the weights */
    return rc;
}

/* Prints "IMAGE: class (probability), ..." for one image file. */
static int classify_file(ptc_model *m, const char *path, ptc_error *err)
{
    uint8_t *rgb; /* [h][w][3] */
    int h, w, classes[TOP];
    float probs[TOP];
    int rc = ptc_image_read(path, &rgb, &h, &w, err);
    if (rc < 0)
        return rc;
    int k = ptc_model_num_classes(m) < TOP ? ptc_model_num_classes(m) : TOP;
    rc = ptc_model_classify(m, rgb, 1, h, w, k, classes, probs, err);
    ptc_image_free(rgb);
    if (rc < 0)
        return rc;
    printf("%s (%dx%d):", path, w, h);
    for (int i = 0; i < k; i++)
        printf("%s class %d (%.4f)", i ? "," : "", classes[i], (double)probs[i]);
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s STATE_DICT.pth IMAGE.png...\n", argv[0]);
        return 2;
    }
    ptc_error err;
    ptc_model *m;
    if (open_model(argv[1], &m, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[1], err.message);
        return 1;
    }
    printf("%s: %s, %d classes, on the %s backend\n", argv[1], ptc_model_arch(m),
           ptc_model_num_classes(m), ptc_model_backend(m));
    int status = 0;
    for (int i = 2; i < argc; i++)
        if (classify_file(m, argv[i], &err) < 0) {
            fprintf(stderr, "%s\n", err.message); /* the message names the file */
            status = 1;
        }
    ptc_model_free(m);
    return status;
}
