/*
 * cmd_predict.c - `ptc predict --weights W INPUT...`: the top classes of each input by a ResNet-18
 * state dict, as torchvision would compute them (decode_image, Resize, ToTensor, Normalize, the
 * model, softmax).
 *
 * Inputs: PNG and JPEG files (ptc_image_read: the image-codecs module, loaded by the first one),
 * and records of a CIFAR-10 binary or IDX images file named FILE:INDEX (ptc_image_record). The
 * model comes from the checkpoint (ptc_model_params_from_state_dict: classes from fc.weight, arch
 * from conv1.weight, and the preprocessing ptc train recorded); --dataset gives the preprocessing
 * and class names of a checkpoint that records none. The work is libptc's (ptc_model_classify);
 * this file parses options, reads the inputs and presents the results.
 *
 * Each input is classified on its own, so one that cannot be read costs only its own line: the
 * error names the input and the reason, the others are still classified, and the exit status is
 * that of the first failure.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { O_WEIGHTS = 256, O_ARCH, O_DATASET, O_TOP, O_LABELS, O_JSON, O_BACKEND, O_THREADS };

#define MAX_LABELS_BYTES (1 << 20)
#define MAX_TOP          1000

/* torchvision.datasets.CIFAR10(...).classes and FashionMNIST(...).classes. */
static const char *const cifar10_names[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                              "dog",      "frog",       "horse", "ship", "truck"};
static const char *const fashion_names[10] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                              "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
/* The Normalize of ptc train on Fashion-MNIST: the statistics of its 60,000 training images
 * padded to 32x32 (lib/data/dataset.c computes them; the same for the three channels). */
#define FASHION_MEAN 0.21899983206954657
#define FASHION_STD  0.33181137299995894

typedef struct labels {
    char *text;   /* the file's bytes, lines cut at '\n' */
    char **names; /* [n], into text */
    int n;
} labels;

static void labels_free(labels *l)
{
    free(l->text);
    free(l->names);
}

/* One name per line ('\n' or "\r\n"), valid UTF-8, at most 1 MiB in all; a last line without
 * '\n' counts, an empty last line does not. */
static int labels_read(labels *l, const char *path)
{
    memset(l, 0, sizeof *l);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        cli_error("--labels %s: %s", path, strerror(e));
        return e == ENOENT ? CLI_EXIT_USAGE : CLI_EXIT_IO;
    }
    l->text = malloc(MAX_LABELS_BYTES + 1);
    size_t n = l->text ? fread(l->text, 1, MAX_LABELS_BYTES + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!l->text)
        return CLI_EXIT_NOMEM;
    if (bad) {
        cli_error("--labels %s: read error", path);
        return CLI_EXIT_IO;
    }
    if (n > MAX_LABELS_BYTES) {
        cli_error("--labels %s: more than %d bytes", path, MAX_LABELS_BYTES);
        return CLI_EXIT_USAGE;
    }
    l->text[n] = '\0';
    if (!ptc_utf8_valid(l->text, n) || memchr(l->text, '\0', n)) {
        cli_error("--labels %s: not UTF-8 text", path);
        return CLI_EXIT_USAGE;
    }
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += l->text[i] == '\n';
    l->names = malloc(((size_t)lines + 1) * sizeof *l->names);
    if (!l->names)
        return CLI_EXIT_NOMEM;
    char *p = l->text;
    while (*p) {
        char *e = strchr(p, '\n');
        if (e)
            *e = '\0';
        size_t len = strlen(p);
        if (len && p[len - 1] == '\r')
            p[len - 1] = '\0';
        l->names[l->n++] = p;
        if (!e)
            break;
        p = e + 1;
    }
    return CLI_EXIT_OK;
}

/* "FILE:INDEX" when INPUT is not itself a file and ends in ':' and digits: the record's index and
 * FILE (a new string) in *file; else 0. */
static int split_record(const char *input, char **file, long long *index)
{
    struct stat st;
    const char *colon = strrchr(input, ':');
    if (!colon || colon == input || !colon[1] ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return 0;
    if (stat(input, &st) == 0)
        return 0;
    errno = 0;
    char *end;
    long long v = strtoll(colon + 1, &end, 10);
    if (errno || *end)
        return 0;
    *file = strndup(input, (size_t)(colon - input));
    *index = v;
    return *file != NULL;
}

typedef struct ctx {
    ptc_model *m;
    int k, json;
    const char *const *names; /* [classes] or NULL */
    int *classes;
    float *probs;
} ctx;

/* The input's name for a JSON string: as given when it is UTF-8, else escaped (cli.h), since a
 * JSON string holds only UTF-8. Borrowed from input or b. */
static const char *json_name(const char *input, cli_buf *b)
{
    if (ptc_utf8_valid(input, strlen(input)))
        return input;
    cli_buf_escape(b, input, strlen(input), 0);
    return b->oom ? "?" : cli_buf_str(b);
}

static void put_failure(const ctx *c, const char *input, int rc, const ptc_error *err)
{
    /* The library's message names the file; an input that failed before reaching it (a record
     * index) is named here. */
    const char *msg = err->message[0] ? err->message : ptc_strerror(rc);
    if (c->json) {
        cli_buf b = {0};
        json_t *o = json_pack("{s:s, s:s, s:s}", "input", json_name(input, &b), "error",
                              ptc_err_name(rc), "message", msg);
        cli_buf_free(&b);
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (text) {
            cli_put_json_text(stdout, text, strlen(text));
            putchar('\n');
        }
        free(text);
        json_decref(o);
    }
    cli_report(rc, err);
}

static int put_result(const ctx *c, const char *input)
{
    if (c->json) {
        cli_buf b = {0};
        json_t *o = json_object(), *top = json_array();
        int bad = !o || !top;
        bad = bad || json_object_set_new(o, "input", json_string(json_name(input, &b))) < 0;
        cli_buf_free(&b);
        for (int r = 0; !bad && r < c->k; r++) {
            int cl = c->classes[r];
            /* A model whose weights hold NaN gives NaN probabilities: JSON has no NaN, so null
             * (the text output writes nan, as Python prints it). */
            double pr = (double)c->probs[r];
            json_t *e = json_pack("{s:i, s:o, s:o}", "class", cl, "label",
                                  c->names ? json_string(c->names[cl]) : json_null(), "prob",
                                  isfinite(pr) ? json_real(pr) : json_null());
            bad = !e || json_array_append_new(top, e) < 0;
        }
        bad = bad || json_object_set(o, "top", top) < 0;
        char *text = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(7));
        json_decref(top);
        json_decref(o);
        if (!text) {
            cli_error("%s: out of memory (or not UTF-8)", input);
            return CLI_EXIT_NOMEM;
        }
        cli_put_json_text(stdout, text, strlen(text));
        putchar('\n');
        free(text);
        return CLI_EXIT_OK;
    }
    cli_escape_put(stdout, input, strlen(input), 0);
    putchar(':');
    for (int r = 0; r < c->k; r++) {
        int cl = c->classes[r];
        printf("%s %d", r ? "," : "", cl);
        if (c->names) {
            printf(" ");
            cli_escape_put(stdout, c->names[cl], strlen(c->names[cl]), 0);
        }
        double pr = (double)c->probs[r];
        if (isnan(pr))
            printf(" nan");
        else
            printf(" %.4f", pr);
    }
    putchar('\n');
    return CLI_EXIT_OK;
}

/* Classifies one input; 0 or the exit status of its failure (already reported). */
static int predict_one(const ctx *c, const char *input)
{
    ptc_error err;
    memset(&err, 0, sizeof err);
    char *file = NULL;
    long long index = 0;
    uint8_t rec[32 * 32 * 3], *rgb = NULL;
    int h, w, rc;
    if (split_record(input, &file, &index)) {
        rc = ptc_image_record(file, index, rec, NULL, &err);
        free(file);
        h = w = 32;
        if (rc == 0)
            rc = ptc_model_classify(c->m, rec, 1, h, w, c->k, c->classes, c->probs, &err);
    } else {
        rc = ptc_image_read(input, &rgb, &h, &w, &err);
        if (rc == 0)
            rc = ptc_model_classify(c->m, rgb, 1, h, w, c->k, c->classes, c->probs, &err);
        ptc_image_free(rgb);
    }
    if (rc < 0) {
        put_failure(c, input, rc, &err);
        return cli_exit_code(rc);
    }
    return put_result(c, input);
}

/* The state dict in a file: the root, or a training checkpoint's "model_state_dict". */
static const ptc_value *state_dict(const ptc_value *root)
{
    const ptc_value *sd = ptc_dict_get(root, "model_state_dict");
    return sd && !ptc_dict_get(root, "fc.weight") ? sd : root;
}

static void usage(void)
{
    printf(
        "Usage: ptc predict --weights W [--arch resnet18|resnet18-cifar]\n"
        "                   [--dataset cifar10|fashion-mnist] [--top K] [--labels FILE]\n"
        "                   [--backend B] [--threads N] [--json] INPUT...\n"
        "Prints the K most likely classes (default 5, at most the model's) of each INPUT: a PNG\n"
        "or JPEG file, or FILE:INDEX, record INDEX (from 0) of a CIFAR-10 binary file or an\n"
        "IDX images file (.gz or plain; 28x28 padded to 32x32 and grey made RGB, as in\n"
        "training). The classes and architecture come from W; the preprocessing (mean, std,\n"
        "input size) from what ptc train recorded in W, else from --dataset (default cifar10:\n"
        "the tutorial's mean and std, 32x32). Images of another size are resized as\n"
        "torchvision's Resize (bilinear, antialias). Class names: --labels FILE (one per\n"
        "line), else CIFAR-10's or Fashion-MNIST's for a 10-class model. --json: one JSON\n"
        "line per input. Exit status: that of the first input that failed (each is named on\n"
        "stderr), else 0. See ptc-predict(1).\n");
}

int cmd_predict(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"weights", required_argument, NULL, O_WEIGHTS},
        {"arch", required_argument, NULL, O_ARCH},
        {"dataset", required_argument, NULL, O_DATASET},
        {"top", required_argument, NULL, O_TOP},
        {"labels", required_argument, NULL, O_LABELS},
        {"json", no_argument, NULL, O_JSON},
        {"backend", required_argument, NULL, O_BACKEND},
        {"threads", required_argument, NULL, O_THREADS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *weights = NULL, *arch = NULL, *dataset = NULL, *labels_path = NULL;
    const char *backend = NULL;
    long top = 5, threads = 0;
    int json = 0, c;
    cli_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case O_WEIGHTS:
            weights = optarg;
            break;
        case O_ARCH:
            arch = optarg;
            break;
        case O_DATASET:
            if (strcmp(optarg, "cifar10") != 0 && strcmp(optarg, "fashion-mnist") != 0)
                return cli_usage_error("--dataset is cifar10 or fashion-mnist");
            dataset = optarg;
            break;
        case O_TOP:
            top = strtol(optarg, &end, 10);
            if (end == optarg || *end || top < 1 || top > MAX_TOP)
                return cli_usage_error("--top wants a number from 1 to %d", MAX_TOP);
            break;
        case O_LABELS:
            labels_path = optarg;
            break;
        case O_JSON:
            json = 1;
            break;
        case O_BACKEND:
            backend = optarg;
            break;
        case O_THREADS:
            threads = strtol(optarg, &end, 10);
            if (end == optarg || *end || threads < 0 || threads > 4096)
                return cli_usage_error("--threads wants a number from 0 to 4096");
            break;
        case 'h':
            usage();
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("invalid option");
        }
    }
    if (!weights)
        return cli_usage_error("--weights W is required");
    if (optind == argc)
        return cli_usage_error("no INPUT to classify");

    ptc_model_params mp;
    ptc_model_params_default(&mp);
    mp.backend = backend;
    mp.threads = (int)threads;
    if (dataset && strcmp(dataset, "fashion-mnist") == 0)
        for (int ch = 0; ch < 3; ch++) {
            mp.mean[ch] = (float)FASHION_MEAN;
            mp.std[ch] = (float)FASHION_STD;
        }
    ptc_ckpt *ck = NULL;
    ptc_model *m = NULL;
    labels lb = {0};
    ctx cx = {0};
    ptc_error err;
    int status = CLI_EXIT_OK;
    int rc = ptc_ckpt_open(&ck, weights, NULL, &err);
    if (rc < 0)
        return cli_report(rc, &err);
    const ptc_value *sd = state_dict(ptc_ckpt_root(ck));
    const char *recorded = NULL;
    if ((rc = ptc_model_params_from_state_dict(&mp, sd, &recorded, &err)) < 0) {
        status = cli_report(rc, &err);
        goto done;
    }
    if (arch)
        mp.arch = arch;
    /* The names: --labels, else the recorded dataset's, else --dataset's (cifar10 by default). */
    const char *names_of = recorded ? recorded : dataset ? dataset : "cifar10";
    if (labels_path) {
        if ((status = labels_read(&lb, labels_path)) != CLI_EXIT_OK)
            goto done;
        if (lb.n < mp.num_classes) {
            status = cli_usage_error("--labels %s has %d names; the model has %d classes",
                                     labels_path, lb.n, mp.num_classes);
            goto done;
        }
        cx.names = (const char *const *)lb.names;
    } else if (mp.num_classes == 10 && strcmp(names_of, "fashion-mnist") == 0) {
        cx.names = fashion_names;
    } else if (mp.num_classes == 10 && strcmp(names_of, "cifar10") == 0) {
        cx.names = cifar10_names; /* a caller's own images ("source") have no names built in */
    }
    if ((rc = ptc_model_new(&m, &mp, &err)) < 0) {
        status = rc == PTC_EINVAL ? cli_usage_error("%s", err.message) : cli_report(rc, &err);
        goto done;
    }
    if ((rc = ptc_model_load(m, sd, PTC_LOAD_STRICT | PTC_LOAD_STRIP_PREFIX, &err)) < 0) {
        const char *text = ptc_model_load_text(m);
        if (!text[0]) { /* not a state dict at all */
            status = cli_report(rc, &err);
        } else { /* torch's text, its lines as torch prints them (escaped by the library) */
            cli_error("%s does not load into %s(num_classes=%d):", weights, mp.arch,
                      mp.num_classes);
            for (const char *p = text; *p;) {
                size_t n = strcspn(p, "\n");
                if (*p == '\t') { /* torch's indentation */
                    fputc('\t', stderr);
                    p++;
                    n--;
                }
                cli_escape_put(stderr, p, n, CLI_ESC_RAW_BACKSLASH);
                fputc('\n', stderr);
                p += n + (p[n] ? 1 : 0);
            }
            status = CLI_EXIT_REFUSED;
        }
        if (rc == PTC_EINVAL)
            status = CLI_EXIT_REFUSED;
        goto done;
    }
    ptc_ckpt_close(ck); /* the model holds copies */
    ck = NULL;
    cx.m = m;
    cx.json = json;
    cx.k = top < mp.num_classes ? (int)top : mp.num_classes;
    cx.classes = malloc((size_t)cx.k * sizeof *cx.classes);
    cx.probs = malloc((size_t)cx.k * sizeof *cx.probs);
    if (!cx.classes || !cx.probs) {
        cli_error("out of memory");
        status = CLI_EXIT_NOMEM;
        goto done;
    }
    for (int i = optind; i < argc; i++) {
        int st = predict_one(&cx, argv[i]);
        if (st != CLI_EXIT_OK && status == CLI_EXIT_OK)
            status = st;
        fflush(stdout);
    }
done:
    free(cx.classes);
    free(cx.probs);
    labels_free(&lb);
    ptc_model_free(m);
    ptc_ckpt_close(ck);
    return status;
}
