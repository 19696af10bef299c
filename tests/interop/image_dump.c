/*
 * image_dump.c - the C side of tests/interop/check_predict.py: ptc's image decoding, dataset
 * records and resize, written as raw bytes for the script to compare with torchvision's.
 *
 *   image_dump decode IMAGE OUT     OUT: the decoded [h][w][3] bytes; prints "h w"
 *   image_dump record FILE INDEX OUT    OUT: the record's [32][32][3] bytes; prints "label"
 *   image_dump resize IN H W OH OW OUT  IN: raw [H][W][3] bytes; OUT: [OH][OW][3]
 * On a refusal: prints "error CODE_NAME: message" and exits 1 (the script checks the reason).
 */
#include <ptc/ptc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(int rc, const ptc_error *err)
{
    printf("error %s: %s\n", ptc_err_name(rc), err->message);
    return 1;
}

static int write_all(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "image_dump: cannot write %s\n", path);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    ptc_error err;
    if (argc == 4 && strcmp(argv[1], "decode") == 0) {
        uint8_t *rgb;
        int h, w, rc = ptc_image_read(argv[2], &rgb, &h, &w, &err);
        if (rc < 0)
            return refuse(rc, &err);
        printf("%d %d\n", h, w);
        rc = write_all(argv[3], rgb, (size_t)h * w * 3);
        ptc_image_free(rgb);
        return rc;
    }
    if (argc == 5 && strcmp(argv[1], "record") == 0) {
        uint8_t rgb[32 * 32 * 3];
        int label, rc = ptc_image_record(argv[2], strtoll(argv[3], NULL, 10), rgb, &label, &err);
        if (rc < 0)
            return refuse(rc, &err);
        printf("%d\n", label);
        return write_all(argv[4], rgb, sizeof rgb);
    }
    if (argc == 8 && strcmp(argv[1], "resize") == 0) {
        int h = atoi(argv[3]), w = atoi(argv[4]), oh = atoi(argv[5]), ow = atoi(argv[6]);
        size_t n = (size_t)h * w * 3, on = (size_t)oh * ow * 3;
        uint8_t *in = malloc(n), *out = malloc(on);
        FILE *f = fopen(argv[2], "rb");
        if (!in || !out || !f || fread(in, 1, n, f) != n) {
            fprintf(stderr, "image_dump: cannot read %zu bytes of %s\n", n, argv[2]);
            return 2;
        }
        fclose(f);
        int rc = ptc_image_resize(in, h, w, out, oh, ow, &err);
        if (rc < 0)
            return refuse(rc, &err);
        rc = write_all(argv[7], out, on);
        free(in);
        free(out);
        return rc;
    }
    fprintf(stderr, "usage: image_dump decode IMAGE OUT | record FILE INDEX OUT | "
                    "resize IN H W OH OW OUT\n");
    return 2;
}
