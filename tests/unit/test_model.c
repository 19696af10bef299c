/*
 * test_model.c - the public model API of lib/nn/model.c on the ref backend: the params and their
 * size field, making and refusing models, the forward's shapes and refusals at several input sizes
 * (and that a result does not depend on the batch it is in or on the activation sets made and
 * replaced before it), load_state_dict's rules and torch's exact words on state dicts crafted with
 * ptc_doc, and the state dict out.
 *
 * The numbers against torch, and the texts against torch's own, are tests/interop/check_model.py's
 * job (real torch is the oracle there); the texts below were written from torch 2.6's
 * Module.load_state_dict and are confirmed by that script.
 */
#include "nn/model.h"
#include "check.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ptc_model *make(const char *arch, int classes, uint64_t seed)
{
    ptc_model_params p;
    ptc_model_params_default(&p);
    p.arch = arch;
    p.num_classes = classes;
    p.backend = "ref";
    p.threads = 1;
    p.seed = seed;
    ptc_model *m = NULL;
    ptc_error err;
    int rc = ptc_model_new(&m, &p, &err);
    CHECK_CODE(rc, 0, &err);
    return m;
}

/* A deterministic pseudo-random input [n][3][h][w] (the same image i whatever n is). */
static float *input(int n, int h, int w)
{
    float *x = malloc((size_t)n * 3 * h * w * sizeof *x);
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < (size_t)3 * h * w; j++)
            x[(size_t)i * 3 * h * w + j] = (float)sin(0.37 * (double)j + 1.3 * i) * 1.5f;
    return x;
}

static void test_params(void)
{
    ptc_model_params p;
    memset(&p, 0x55, sizeof p);
    ptc_model_params_default(&p);
    CHECK_INT(p.size, sizeof p);
    CHECK_STR(p.arch, "resnet18");
    CHECK_INT(p.num_classes, 10);
    CHECK(p.backend == NULL && p.precision == NULL);
    CHECK_INT(p.threads, 0);
    CHECK_INT(p.device, -1);
    CHECK_INT(p.input_h, 32);
    CHECK_INT(p.input_w, 32);
    CHECK(p.mean[0] == 0.4914f && p.mean[1] == 0.4822f && p.mean[2] == 0.4465f);
    CHECK(p.std[0] == 0.2023f && p.std[1] == 0.1994f && p.std[2] == 0.2010f);
    ptc_model_params_default(NULL); /* does nothing */

    ptc_model *m = make("resnet18-cifar", 7, 3);
    CHECK_STR(ptc_model_arch(m), "resnet18-cifar");
    CHECK_STR(ptc_model_backend(m), "ref");
    CHECK_INT(ptc_model_num_classes(m), 7);
    CHECK(ptc_model_arch(NULL) == NULL && ptc_model_backend(NULL) == NULL);
    CHECK_INT(ptc_model_num_classes(NULL), 0);
    ptc_model_params q;
    ptc_error err;
    ptc_model_params_default(&q);
    CHECK_CODE(ptc_model_get_params(m, &q, &err), 0, &err);
    CHECK_STR(q.arch, "resnet18-cifar");
    CHECK_STR(q.backend, "ref");
    CHECK_STR(q.precision, "f32");
    CHECK_INT(q.num_classes, 7);
    CHECK_INT(q.seed, 3);
    /* An older caller's smaller struct: only its bytes are written. */
    unsigned char raw[sizeof(ptc_model_params) + 8];
    memset(raw, 0xab, sizeof raw);
    ptc_model_params *old = (ptc_model_params *)raw;
    old->size = offsetof(ptc_model_params, mean);
    CHECK_CODE(ptc_model_get_params(m, old, &err), 0, &err);
    CHECK_INT(old->num_classes, 7);
    CHECK_INT(old->size, offsetof(ptc_model_params, mean));
    CHECK(raw[offsetof(ptc_model_params, mean)] == 0xab);
    old->size = 0;
    CHECK_CODE(ptc_model_get_params(m, old, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "size 0 is not this library's") != NULL);
    ptc_model_free(m);
    ptc_model_free(NULL);

    /* An older caller's smaller struct in: the fields after its size keep their defaults. */
    ptc_model_params small;
    ptc_model_params_default(&small);
    small.size = offsetof(ptc_model_params, mean);
    small.backend = "ref";
    small.mean[0] = NAN; /* beyond its size: never read */
    m = NULL;
    CHECK_CODE(ptc_model_new(&m, &small, &err), 0, &err);
    CHECK_CODE(ptc_model_get_params(m, &q, &err), 0, &err);
    CHECK(q.mean[0] == 0.4914f && q.input_h == 32);
    ptc_model_free(m);
}

static void test_refusals(void)
{
    ptc_error err;
    ptc_model *m = (ptc_model *)&err;
    ptc_model_params p;
    CHECK_CODE(ptc_model_new(NULL, NULL, &err), PTC_EINVAL, &err);
    struct {
        const char *what, *needle;
        int code;
    } cases[] = {
        {"size 0", "params: size 0 is not this library's", PTC_EINVAL},
        {"size too large", "is not this library's", PTC_EINVAL},
        {"arch", "unknown arch \"resnet50\"", PTC_EINVAL},
        {"classes", "num_classes 0 is not in", PTC_EINVAL},
        {"input", "input size 16 x 32", PTC_EINVAL},
        {"std", "std positive", PTC_EINVAL},
        {"backend", "unknown backend \"tpu\"", PTC_EINVAL},
        {"precision", "ref backend: --precision bf16 is not available", PTC_EUNSUPPORTED},
        {"precision name", "unknown precision", PTC_EINVAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ptc_model_params_default(&p);
        p.backend = "ref";
        switch (i) {
        case 0:
            p.size = 0;
            break;
        case 1:
            p.size = sizeof p + 1;
            break;
        case 2:
            p.arch = "resnet50";
            break;
        case 3:
            p.num_classes = 0;
            break;
        case 4:
            p.input_h = 16;
            break;
        case 5:
            p.std[1] = 0;
            break;
        case 6:
            p.backend = "tpu";
            break;
        case 7:
            p.precision = "bf16";
            break;
        case 8:
            p.precision = "f8";
            break;
        }
        m = (ptc_model *)&err;
        int rc = ptc_model_new(&m, &p, &err);
        CHECK_CODE(rc, cases[i].code, &err);
        CHECK(m == NULL);
        if (!strstr(err.message, cases[i].needle)) {
            CHECK(!"message");
            fprintf(stderr, "  %s: \"%s\" lacks \"%s\"\n", cases[i].what, err.message,
                    cases[i].needle);
        }
    }
    /* err NULL is allowed: the code still comes back. */
    ptc_model_params_default(&p);
    p.arch = "vgg";
    CHECK_CODE(ptc_model_new(&m, &p, NULL), PTC_EINVAL, (ptc_error *)NULL);
}

static void test_forward(void)
{
    ptc_error err;
    ptc_model *m = make("resnet18", 5, 11);
    /* Image 1 alone and in a batch of 3: eval mode treats images independently. */
    float *x3 = input(3, 40, 36), l3[15], l1[5];
    CHECK_CODE(ptc_model_forward(m, x3, 3, 40, 36, l3, &err), 0, &err);
    CHECK_CODE(ptc_model_forward(m, x3 + 3 * 40 * 36, 1, 40, 36, l1, &err), 0, &err);
    double most = 0, maxd = 0;
    for (int c = 0; c < 5; c++) {
        CHECK(isfinite(l3[c]) && isfinite(l3[5 + c]) && isfinite(l3[10 + c]));
        most = fmax(most, fabs(l3[5 + c]));
        maxd = fmax(maxd, fabs(l3[5 + c] - l1[c]));
    }
    CHECK(most > 0);
    if (maxd > 1e-6 * most) {
        CHECK(!"image 1 in a batch of 3 and alone");
        fprintf(stderr, "  max difference %g, logits up to %g\n", maxd, most);
    }
    /* Several shapes (more than the sets kept) and then the first again: the same logits. */
    static const int shapes[][3] = {{2, 32, 32}, {1, 64, 48}, {2, 33, 70},
                                    {1, 96, 96}, {3, 32, 40}, {1, 40, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int n = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
        float *x = input(n, h, w), *l = malloc((size_t)n * 5 * sizeof *l);
        CHECK_CODE(ptc_model_forward(m, x, n, h, w, l, &err), 0, &err);
        for (int j = 0; j < n * 5; j++)
            CHECK(isfinite(l[j]));
        free(x);
        free(l);
    }
    float again[15];
    CHECK_CODE(ptc_model_forward(m, x3, 3, 40, 36, again, &err), 0, &err);
    CHECK(memcmp(again, l3, sizeof again) == 0);
    /* Refusals. */
    float l[5];
    CHECK_CODE(ptc_model_forward(m, x3, 1, 31, 36, l, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "ptc_model_forward: an input of 1 x 3 x 31 x 36") != NULL);
    CHECK_CODE(ptc_model_forward(m, x3, 1, 40, 31, l, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_forward(m, x3, 0, 40, 36, l, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_forward(m, NULL, 1, 40, 36, l, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_forward(m, x3, 1, 40, 36, NULL, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_forward(NULL, x3, 1, 40, 36, l, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_forward(m, x3, 1, 1 << 20, 40, l, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "too large") != NULL);
    CHECK_CODE(ptc_model_forward(m, x3, 1 << 20, 4096, 4096, l, &err), PTC_EINVAL, &err);
    free(x3);
    ptc_model_free(m);

    /* The CIFAR variant ends at h/8 x w/8 (5x5 here): the adaptive pool averages it. */
    m = make("resnet18-cifar", 10, 2);
    float *x = input(2, 40, 40), lc[20];
    CHECK_CODE(ptc_model_forward(m, x, 2, 40, 40, lc, &err), 0, &err);
    for (int j = 0; j < 20; j++)
        CHECK(isfinite(lc[j]));
    free(x);
    ptc_model_free(m);
}

/* ---- state dicts made with ptc_doc ----------------------------------------------------------- */

static ptc_value *key(ptc_doc *d, const char *s)
{
    return ptc_doc_str(d, s, (size_t)-1);
}

static ptc_value *zeros(ptc_doc *d, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    ptc_storage *s = ptc_doc_storage(d, PTC_FLOAT32, n * 4, NULL, 1, NULL);
    if (s)
        memset(ptc_storage_mutable(s), 0, (size_t)n * 4);
    return ptc_doc_tensor(d, s, PTC_FLOAT32, ndim, shape, NULL, 0, 0);
}

/* A copy of src's pairs (tensors shared) with "module." before every key when prefix, without
 * the key drop, and with fc.weight and fc.bias replaced by zeros of `classes` rows when
 * classes > 0. No _metadata: a plain dict. */
static ptc_value *variant(ptc_doc *d, const ptc_value *src, int prefix, const char *drop,
                          int classes)
{
    ptc_value *out = ptc_doc_dict(d, 1);
    for (size_t i = 0; i < ptc_value_len(src); i++) {
        const char *k;
        size_t kl;
        ptc_value_str(ptc_dict_key(src, i), &k, &kl);
        if (drop && strcmp(k, drop) == 0)
            continue;
        char name[96];
        snprintf(name, sizeof name, "%s%s", prefix ? "module." : "", k);
        const ptc_value *v = ptc_dict_value(src, i);
        int64_t ws[2] = {classes, 512};
        if (classes > 0 && strcmp(k, "fc.weight") == 0)
            v = zeros(d, 2, ws);
        else if (classes > 0 && strcmp(k, "fc.bias") == 0)
            v = zeros(d, 1, ws);
        CHECK(ptc_doc_set(d, out, key(d, name), v) == 0);
    }
    return out;
}

static void check_text(const ptc_model *m, const char *want)
{
    const char *got = ptc_model_load_text(m);
    if (strcmp(got, want) != 0) {
        CHECK(!"load text");
        fprintf(stderr, "  got:  \"%s\"\n  want: \"%s\"\n", got, want);
    }
}

static void test_load(void)
{
    ptc_error err;
    ptc_model *a = make("resnet18", 10, 1), *b = make("resnet18", 10, 2);
    ptc_doc *d;
    ptc_value *sd;
    CHECK(ptc_doc_new(&d, &err) == 0);
    CHECK_CODE(ptc_model_state_dict(a, d, &sd, &err), 0, &err);
    CHECK_INT(ptc_value_len(sd), 122);
    CHECK_STR(ptc_model_load_text(b), "");
    float *x = input(2, 32, 32), la[20], lb[20], lb0[20];
    CHECK_CODE(ptc_model_forward(a, x, 2, 32, 32, la, &err), 0, &err);
    CHECK_CODE(ptc_model_forward(b, x, 2, 32, 32, lb0, &err), 0, &err);
    CHECK(memcmp(la, lb0, sizeof la) != 0);

    /* Missing and unexpected keys: strict refuses in torch's words and changes nothing. */
    ptc_value *odd = variant(d, sd, 0, "fc.bias", 0);
    CHECK(ptc_doc_set(d, odd, key(d, "x"), zeros(d, 0, NULL)) == 0);
    CHECK_CODE(ptc_model_load(b, odd, PTC_LOAD_STRICT, &err), PTC_EINVAL, &err);
    const char *want = "Error(s) in loading state_dict for ResNet:\n\tMissing key(s) in "
                       "state_dict: \"fc.bias\". \n\tUnexpected key(s) in state_dict: \"x\". ";
    check_text(b, want);
    CHECK_STR(err.message, want);
    CHECK_INT(ptc_model_load_nkeys(b, PTC_LOAD_MISSING), 1);
    CHECK_STR(ptc_model_load_key(b, PTC_LOAD_MISSING, 0), "fc.bias");
    CHECK_STR(ptc_model_load_key(b, PTC_LOAD_UNEXPECTED, 0), "x");
    CHECK(ptc_model_load_key(b, PTC_LOAD_UNEXPECTED, 1) == NULL);
    CHECK_CODE(ptc_model_forward(b, x, 2, 32, 32, lb, &err), 0, &err);
    CHECK(memcmp(lb, lb0, sizeof lb) == 0);
    /* Not strict: loads the rest, reports as torch's _IncompatibleKeys. */
    CHECK_CODE(ptc_model_load(b, odd, 0, &err), 0, &err);
    check_text(b, "_IncompatibleKeys(missing_keys=['fc.bias'], unexpected_keys=['x'])");

    /* A 1000-class head: a size mismatch, strict or not; skipped and named with the flag. */
    ptc_value *big = variant(d, sd, 0, NULL, 1000);
    for (unsigned flags = 0; flags <= PTC_LOAD_STRICT; flags++) {
        CHECK_CODE(ptc_model_load(b, big, flags, &err), PTC_EINVAL, &err);
        check_text(b, "Error(s) in loading state_dict for ResNet:\n\tsize mismatch for fc.weight: "
                      "copying a param with shape torch.Size([1000, 512]) from checkpoint, the "
                      "shape in current model is torch.Size([10, 512]).\n\tsize mismatch for "
                      "fc.bias: copying a param with shape torch.Size([1000]) from checkpoint, "
                      "the shape in current model is torch.Size([10]).");
    }
    CHECK_CODE(ptc_model_load(b, big, PTC_LOAD_STRICT | PTC_LOAD_SKIP_MISMATCHED, &err), 0, &err);
    CHECK_INT(ptc_model_load_nkeys(b, PTC_LOAD_MISMATCHED), 2);
    CHECK_STR(ptc_model_load_key(b, PTC_LOAD_MISMATCHED, 0), "fc.weight");
    CHECK_STR(ptc_model_load_key(b, PTC_LOAD_MISMATCHED, 1), "fc.bias");
    check_text(b, "<All keys matched successfully>");

    /* Everything but the head from a, then the whole of a: the logits are a's. */
    CHECK_CODE(ptc_model_load(b, sd, PTC_LOAD_STRICT, &err), 0, &err);
    check_text(b, "<All keys matched successfully>");
    CHECK_CODE(ptc_model_forward(b, x, 2, 32, 32, lb, &err), 0, &err);
    CHECK(memcmp(lb, la, sizeof lb) == 0);

    /* DDP's "module.": unexpected and missing as torch says, loaded with the flag. */
    ptc_value *ddp = variant(d, sd, 1, NULL, 0);
    CHECK_CODE(ptc_model_load(b, ddp, PTC_LOAD_STRICT, &err), PTC_EINVAL, &err);
    CHECK_INT(ptc_model_load_nkeys(b, PTC_LOAD_UNEXPECTED), 122);
    CHECK_STR(ptc_model_load_key(b, PTC_LOAD_UNEXPECTED, 0), "module.conv1.weight");
    /* no _metadata: num_batches_tracked keeps the model's own, as torch does */
    CHECK_INT(ptc_model_load_nkeys(b, PTC_LOAD_MISSING), 102);
    CHECK(strncmp(err.message,
                  "Error(s) in loading state_dict for ResNet:\n\tMissing key(s) in "
                  "state_dict: \"conv1.weight\", \"bn1.weight\"",
                  90) == 0);
    CHECK_CODE(ptc_model_load(b, ddp, PTC_LOAD_STRICT | PTC_LOAD_STRIP_PREFIX, &err), 0, &err);
    check_text(b, "<All keys matched successfully>");

    /* Refusals that are not torch's key rules. */
    CHECK_CODE(ptc_model_load(b, sd, 1u << 7, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_load(b, NULL, 0, &err), PTC_EINVAL, &err);
    CHECK_CODE(ptc_model_load(NULL, sd, 0, &err), PTC_EINVAL, &err);
    ptc_value *list = ptc_doc_seq(d, PTC_VALUE_LIST);
    CHECK_CODE(ptc_model_load(b, list, 0, &err), PTC_EINVAL, &err);
    ptc_value *intkey = ptc_doc_dict(d, 0);
    CHECK(ptc_doc_set(d, intkey, ptc_doc_int(d, 3), zeros(d, 0, NULL)) == 0);
    CHECK_CODE(ptc_model_load(b, intkey, 0, &err), PTC_EINVAL, &err);
    CHECK(strstr(err.message, "key 0 is not a str") != NULL);
    ptc_value *notensor = variant(d, sd, 0, "fc.bias", 0);
    CHECK(ptc_doc_set(d, notensor, key(d, "fc.bias"), ptc_doc_int(d, 3)) == 0);
    CHECK_CODE(ptc_model_load(b, notensor, 0, &err), PTC_EINVAL, &err);
    check_text(b, "Error(s) in loading state_dict for ResNet:\n\tWhile copying the parameter "
                  "named \"fc.bias\", expected torch.Tensor or Tensor-like object from checkpoint "
                  "but received <class 'int'>");

    /* A dtype ptc does not convert (torch would copy a complex tensor's real part): refused
     * before anything is written. */
    CHECK_CODE(ptc_model_load(b, sd, PTC_LOAD_STRICT, &err), 0, &err);
    ptc_value *cplx = variant(d, sd, 0, "fc.bias", 0);
    int64_t bshape[1] = {10};
    ptc_storage *cs = ptc_doc_storage(d, PTC_COMPLEX64, 80, NULL, 1, NULL);
    memset(ptc_storage_mutable(cs), 0, 80);
    CHECK(ptc_doc_set(d, cplx, key(d, "fc.bias"),
                      ptc_doc_tensor(d, cs, PTC_COMPLEX64, 1, bshape, NULL, 0, 0)) == 0);
    CHECK(ptc_doc_set(d, cplx, key(d, "conv1.weight"), zeros(d, 4, (int64_t[]){64, 3, 7, 7})) == 0);
    CHECK_CODE(ptc_model_load(b, cplx, PTC_LOAD_STRICT, &err), PTC_EUNSUPPORTED, &err);
    CHECK(strstr(err.message, "fc.bias: a complex64 tensor") != NULL);
    CHECK_CODE(ptc_model_forward(b, x, 2, 32, 32, lb, &err), 0, &err);
    CHECK(memcmp(lb, la, sizeof lb) == 0); /* conv1.weight was not zeroed */

    /* Copies: load from a file, close it, and the model still holds the values. */
    char path[] = "/tmp/ptc-test-model-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_CODE(ptc_save(sd, path, NULL, &err), 0, &err);
    ptc_model *c = make("resnet18", 10, 3);
    ptc_ckpt *ck;
    CHECK_CODE(ptc_ckpt_open(&ck, path, NULL, &err), 0, &err);
    CHECK_CODE(ptc_model_load(c, ptc_ckpt_root(ck), PTC_LOAD_STRICT, &err), 0, &err);
    ptc_ckpt_close(ck);
    remove(path);
    float lc[20];
    CHECK_CODE(ptc_model_forward(c, x, 2, 32, 32, lc, &err), 0, &err);
    CHECK(memcmp(lc, la, sizeof lc) == 0);
    ptc_model_free(c);
    free(x);
    ptc_doc_free(d);
    ptc_model_free(a);
    ptc_model_free(b);
}

/* A new head through the internal call finetune.c uses: the logits get its width. */
static void test_set_classes(void)
{
    ptc_error err;
    ptc_model *m = make("resnet18-cifar", 10, 4);
    float *x = input(2, 32, 32), l[10];
    CHECK_CODE(ptc_model_forward(m, x, 1, 32, 32, l, &err), 0, &err);
    CHECK_CODE(ptc__model_set_classes(m->net, 3, &err), 0, &err);
    CHECK_INT(ptc_model_num_classes(m), 3);
    ptc__entry *fw = ptc__model_find(m->net, "fc.weight");
    CHECK(fw && fw->shape[0] == 3 && fw->numel == 3 * 512);
    float l3[6];
    CHECK_CODE(ptc_model_forward(m, x, 2, 32, 32, l3, &err), 0, &err);
    for (int j = 0; j < 6; j++)
        CHECK(l3[j] == 0); /* a zero head */
    ptc_doc *d;
    ptc_value *sd;
    CHECK(ptc_doc_new(&d, &err) == 0);
    CHECK_CODE(ptc_model_state_dict(m, d, &sd, &err), 0, &err);
    const ptc_tensor *t = ptc_value_tensor(ptc_dict_get(sd, "fc.weight"));
    CHECK(t && ptc_tensor_shape(t)[0] == 3);
    ptc_doc_free(d);
    free(x);
    ptc_model_free(m);
}

/* The class count a file claims: an expanded view of one element may claim a million classes
 * (torch.save keeps the view's shape over its one-element storage); building that head would
 * take gigabytes from a tiny file, so ptc_model_classes_of refuses it, and takes an honest head. */
static void test_classes_of(void)
{
    ptc_error err;
    ptc_doc *d;
    CHECK(ptc_doc_new(&d, &err) == 0);
    float one = 0.5f;
    ptc_storage *st = ptc_doc_storage(d, PTC_FLOAT32, 4, &one, 1, NULL);
    int64_t shape[2] = {(int64_t)1 << 20, 512}, stride[2] = {0, 0};
    ptc_value *view = ptc_doc_tensor(d, st, PTC_FLOAT32, 2, shape, stride, 0, 0);
    ptc_value *sd = ptc_doc_dict(d, 1);
    CHECK(view && sd && ptc_doc_set(d, sd, ptc_doc_str(d, "fc.weight", (size_t)-1), view) == 0);
    int64_t n = ptc_model_classes_of(sd, &err);
    CHECK_INT(n, PTC_ELIMIT);
    CHECK(strstr(err.message, "fc.weight claims 1048576 classes") != NULL);
    ptc_model_params p;
    ptc_model_params_default(&p);
    CHECK_INT(ptc_model_params_from_state_dict(&p, sd, NULL, &err), PTC_ENOTFOUND); /* no conv1 */

    /* 7 honest rows of a DDP file; and none at all */
    float *w = calloc(7 * 512, sizeof *w);
    ptc_storage *sw = ptc_doc_storage(d, PTC_FLOAT32, 7 * 512 * 4, w, 1, NULL);
    int64_t s7[2] = {7, 512};
    ptc_value *sd7 = ptc_doc_dict(d, 1);
    CHECK(ptc_doc_set(d, sd7, ptc_doc_str(d, "module.fc.weight", (size_t)-1),
                      ptc_doc_tensor(d, sw, PTC_FLOAT32, 2, s7, NULL, 0, 0)) == 0);
    CHECK_INT(ptc_model_classes_of(sd7, &err), 7);
    CHECK_INT(ptc_model_classes_of(ptc_doc_dict(d, 0), &err), 0);
    CHECK_INT(ptc_model_classes_of(NULL, &err), PTC_EINVAL);
    free(w);
    ptc_doc_free(d);
}

int main(void)
{
    test_params();
    test_refusals();
    test_forward();
    test_load();
    test_set_classes();
    test_classes_of();
    return check_exit("test_model");
}
