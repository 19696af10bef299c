/*
 * classify.c - ptc_model_classify (8-bit RGB images in, top-k classes and probabilities out) and
 * ptc_model_params_from_state_dict (the model and preprocessing a state dict records); contracts
 * in lib/ptc/ptc.h.
 *
 * The pipeline is torchvision's, step for step, so that its results equal torch's on the same
 * image: Resize((input_h, input_w), antialias=True) on the uint8 image (lib/data/image.h, skipped
 * when the image already has that size), ToTensor (v / 255 in float32), Normalize (sub the float32
 * mean, then div by the float32 std: two correctly rounded operations, as torch does them), the
 * eval-mode forward, then softmax in double from the float32 logits (the probabilities are those
 * of the logits as torch would compute them in float64, rounded once to float).
 *
 * Images go through the network in groups of at most CHUNK, so that a call with many images holds
 * one group's floats, not all of them.
 */
#include "nn/model.h"

#include "data/image.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CHUNK 32

/* lut[c][v]: the normalised float of byte v in channel c (ToTensor + Normalize). */
static void normaliser(float lut[3][256], const float mean[3], const float std[3])
{
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            /* volatile: each step one float32 operation whatever the compiler's contraction */
            volatile float x = (float)v / 255.0f;
            volatile float d = x - mean[c];
            lut[c][v] = d / std[c];
        }
}

/* The k best of z[0..C) by value (ties: the lower class first), with softmax probabilities. */
static void top_k(const float *z, int C, int k, int *classes, float *probs)
{
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < C; j++)
        if (z[j] > mx)
            mx = z[j];
    for (int j = 0; j < C; j++)
        sum += exp((double)z[j] - mx);
    for (int r = 0; r < k; r++) {
        int best = -1;
        for (int j = 0; j < C; j++) {
            int taken = 0;
            for (int q = 0; q < r && !taken; q++)
                taken = classes[q] == j;
            /* NaN logits sort last, so that a class is still chosen */
            if (!taken && (best < 0 || z[j] > z[best] || (isnan(z[best]) && !isnan(z[j]))))
                best = j;
        }
        classes[r] = best;
        if (probs)
            probs[r] = (float)(exp((double)z[best] - mx) / sum);
    }
}

int ptc_model_classify(ptc_model *m, const uint8_t *rgb, int n, int h, int w, int k, int *classes,
                       float *probs, ptc_error *err)
{
    ptc__err_clear(err);
    if (!m || !rgb || !classes)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_classify: m, rgb and classes must "
                        "not be NULL");
    const int C = m->params.num_classes, H = m->params.input_h, W = m->params.input_w;
    if (n < 1 || h < 1 || w < 1)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_classify: %d images of %dx%d: need at least one image of at "
                        "least 1x1 pixels",
                        n, h, w);
    if (k < 1 || k > C)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_classify: k = %d: must be between 1 and the %d classes", k, C);
    uint64_t in_px = (uint64_t)h * (uint64_t)w;
    if (in_px > PTC__IMAGE_MAX_PIXELS)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "ptc_model_classify: images of %dx%d: more than %llu pixels", h, w,
                        (unsigned long long)PTC__IMAGE_MAX_PIXELS);
    const int nb = n < CHUNK ? n : CHUNK;
    int rc = ptc__model_check_input(m, "ptc_model_classify", nb, H, W, err);
    if (rc < 0)
        return rc;
    const size_t HW = (size_t)H * (size_t)W;
    const int resize = h != H || w != W;
    /* The images' floats and the logits in the model's scratch (kept between calls: one image
     * costs no allocation); its size cannot overflow, check_input bounded nb * 3 * HW. */
    float *x = ptc__model_scratch(m, (size_t)nb * 3 * HW + (size_t)nb * (size_t)C, NULL);
    float *logits = x ? x + (size_t)nb * 3 * HW : NULL;
    uint8_t *sized = resize ? ptc__malloc(HW * 3) : NULL;
    if (!x || (resize && !sized)) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1,
                      "ptc_model_classify: out of memory for %d images of %dx%d", nb, H, W);
        goto done;
    }
    if (!m->lut_ready) {
        normaliser(m->lut, m->params.mean, m->params.std);
        m->lut_ready = 1;
    }
    const float(*lut)[256] = m->lut;
    for (int i0 = 0; i0 < n; i0 += nb) {
        int cnt = n - i0 < nb ? n - i0 : nb;
        for (int i = 0; i < cnt; i++) {
            const uint8_t *src = rgb + (size_t)(i0 + i) * (size_t)in_px * 3;
            if (resize) {
                if ((rc = ptc__image_resize(src, h, w, sized, H, W, err)) < 0)
                    goto done;
                src = sized;
            }
            float *dst = x + (size_t)i * 3 * HW; /* [3][H][W] */
            for (size_t p = 0; p < HW; p++)
                for (int c = 0; c < 3; c++)
                    dst[(size_t)c * HW + p] = lut[c][src[p * 3 + c]];
        }
        if ((rc = ptc_model_forward(m, x, cnt, H, W, logits, err)) < 0)
            goto done;
        for (int i = 0; i < cnt; i++)
            top_k(logits + (size_t)i * C, C, k, classes + (size_t)(i0 + i) * k,
                  probs ? probs + (size_t)(i0 + i) * k : NULL);
    }
done:
    ptc__free(sized);
    return rc;
}

/* ---- what a state dict records ----------------------------------------------------------------
 */

/* The state dict inside root: root itself, or a training checkpoint's "model_state_dict" (or
 * "state_dict") when root has no fc.weight of its own. */
static const ptc_value *state_dict_of(const ptc_value *root)
{
    static const char *const keys[] = {"model_state_dict", "state_dict"};
    if (ptc_value_kind_of(root) == PTC_VALUE_DICT && !ptc_dict_get(root, "fc.weight") &&
        !ptc_dict_get(root, "module.fc.weight"))
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            const ptc_value *v = ptc_dict_get(root, keys[i]);
            if (v && ptc_value_kind_of(v) == PTC_VALUE_DICT)
                return v;
        }
    return root;
}

static const ptc_tensor *entry(const ptc_value *sd, const char *key)
{
    char full[64];
    const ptc_value *v = ptc_dict_get(sd, key);
    if (!v) { /* DDP's prefix */
        snprintf(full, sizeof full, "module.%s", key);
        v = ptc_dict_get(sd, full);
    }
    return v ? ptc_value_tensor(v) : NULL;
}

int64_t ptc_model_classes_of(const ptc_value *root, ptc_error *err)
{
    ptc__err_clear(err);
    if (!root)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc_model_classes_of: root is NULL");
    const ptc_tensor *fw = entry(state_dict_of(root), "fc.weight");
    if (!fw || ptc_tensor_ndim(fw) != 2)
        return 0;
    int64_t rows = ptc_tensor_shape(fw)[0], cols = ptc_tensor_shape(fw)[1];
    const ptc_storage *st = ptc_tensor_storage(fw);
    double head = (double)rows * (double)(cols > 0 ? cols : 1) * 4.0;
    double held = st ? (double)ptc_storage_nbytes(st) : 0.0;
    if (rows < 0 || head > 64.0 * held + 64.0 * 1048576.0)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "fc.weight claims %lld classes, a head of %.0f bytes, over a storage of "
                        "%.0f bytes: a view that much larger than what the file holds is not "
                        "built from the file's word (give the number of classes to build it)",
                        (long long)rows, head, held);
    return rows;
}

/* n numbers of a list or tuple into out; -1 when v is not that. */
static int numbers(const ptc_value *v, int n, double *out)
{
    ptc_value_kind k = v ? ptc_value_kind_of(v) : PTC_VALUE_NONE;
    if ((k != PTC_VALUE_LIST && k != PTC_VALUE_TUPLE) || ptc_value_len(v) != (size_t)n)
        return -1;
    for (int i = 0; i < n; i++) {
        const ptc_value *e = ptc_value_item(v, (size_t)i);
        int64_t iv;
        if (ptc_value_float(e, &out[i]) == 0)
            continue;
        if (ptc_value_int(e, &iv) < 0)
            return -1;
        out[i] = (double)iv;
    }
    return 0;
}

int ptc_model_params_from_state_dict(ptc_model_params *p, const ptc_value *root,
                                     const char **dataset, ptc_error *err)
{
    ptc__err_clear(err);
    if (dataset)
        *dataset = NULL;
    if (!p || !root)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_params_from_state_dict: p and root must not be NULL");
    if (p->size == 0 || p->size > sizeof *p)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "ptc_model_params_from_state_dict: params: size %zu is not this "
                        "library's %zu (set it with ptc_model_params_default)",
                        p->size, sizeof *p);
    /* An older caller's struct: work on a whole one, give back its first p->size bytes. */
    ptc_model_params q;
    ptc_model_params_default(&q);
    memcpy(&q, p, p->size);
    const ptc_value *sd = state_dict_of(root);
    const ptc_tensor *fw = entry(sd, "fc.weight"), *cw = entry(sd, "conv1.weight");
    if (!fw || !cw)
        return ptc__err(err, PTC_ENOTFOUND, "", -1,
                        "not a ResNet-18 state dict: it has no %s tensor",
                        !fw ? "fc.weight" : "conv1.weight");
    const int64_t *fs = ptc_tensor_shape(fw), *cs = ptc_tensor_shape(cw);
    if (ptc_tensor_ndim(fw) != 2 || fs[1] != 512 || fs[0] < 1 || fs[0] > (1 << 24))
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "fc.weight has %d dimensions%s: ResNet-18's is [classes, 512]",
                        ptc_tensor_ndim(fw), ptc_tensor_ndim(fw) == 2 ? " of another shape" : "");
    if (ptc_tensor_ndim(cw) != 4 || cs[0] != 64 || cs[1] != 3 || cs[2] != cs[3] ||
        (cs[2] != 7 && cs[2] != 3))
        return ptc__err(err, PTC_EFORMAT, "", -1,
                        "conv1.weight is not [64, 3, 7, 7] (resnet18) or [64, 3, 3, 3] "
                        "(resnet18-cifar)");
    int64_t classes = ptc_model_classes_of(root, err);
    if (classes < 0)
        return (int)classes;
    q.num_classes = (int)classes;
    q.arch = cs[2] == 7 ? "resnet18" : "resnet18-cifar";
    const ptc_value *attrs = ptc_dict_attrs(sd);
    const ptc_value *md = attrs ? ptc_dict_get(attrs, "_metadata") : NULL;
    const ptc_value *rec = md ? ptc_dict_get(md, "ptc.preprocess") : NULL;
    if (rec) {
        double mean[3], std[3], size[2];
        const ptc_value *ds = ptc_dict_get(rec, "dataset");
        if (numbers(ptc_dict_get(rec, "mean"), 3, mean) < 0 ||
            numbers(ptc_dict_get(rec, "std"), 3, std) < 0 ||
            numbers(ptc_dict_get(rec, "input_size"), 2, size) < 0 || size[0] < 32 || size[1] < 32 ||
            size[0] > 65536 || size[1] > 65536)
            return ptc__err(err, PTC_EFORMAT, "", -1,
                            "_metadata[\"ptc.preprocess\"]: mean and std must be 3 numbers each "
                            "and input_size 2 integers between 32 and 65536");
        for (int c = 0; c < 3; c++) {
            if (!isfinite(mean[c]) || !isfinite(std[c]) || !(std[c] > 0))
                return ptc__err(err, PTC_EFORMAT, "", -1,
                                "_metadata[\"ptc.preprocess\"]: channel %d: mean %g, std %g (std "
                                "must be positive)",
                                c, mean[c], std[c]);
            q.mean[c] = (float)mean[c];
            q.std[c] = (float)std[c];
        }
        q.input_h = (int)size[0];
        q.input_w = (int)size[1];
        const char *s;
        size_t len;
        if (dataset && ds && ptc_value_str(ds, &s, &len) == 0 && strlen(s) == len)
            *dataset = s;
    }
    memcpy(p, &q, p->size);
    return 0;
}
