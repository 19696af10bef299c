/*
 * cmd_load.c - `ptc load WEIGHTS`: does what
 *     model = torchvision.models.resnet18(num_classes=N)
 *     print(model.load_state_dict(torch.load(WEIGHTS, weights_only=True), strict=S))
 * does, and prints what torch prints: "<All keys matched successfully>", the _IncompatibleKeys
 * repr of a non-strict load, or the text of the RuntimeError torch raises (exit status 1). The
 * design's "load" tool: check that a checkpoint fits the model before shipping it.
 *
 * The work is ptc_model_load's (lib/nn/state.c holds torch's rules); this file parses options and
 * presents the result. The model is made on the ref backend: loading computes nothing, and no
 * module (oneDNN, CUDA) needs to be loaded for it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { O_ARCH = 256, O_CLASSES, O_STRICT, O_NO_STRICT, O_STRIP, O_JSON };

/* The load's text: the library escaped every key; lines after the first start with torch's tab. */
static void put_text(const char *s)
{
    for (;;) {
        size_t n = strcspn(s, "\n");
        const char *line = s;
        if (line[0] == '\t') {
            putchar('\t');
            line++;
            n--;
        }
        cli_escape_put(stdout, line, n, CLI_ESC_RAW_BACKSLASH);
        putchar('\n');
        if (!s[line - s + n])
            break;
        s = line + n + 1;
    }
}

static json_t *key_array(const ptc_model *m, ptc_load_keys kind)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < ptc_model_load_nkeys(m, kind); i++)
        if (json_array_append_new(a, json_string(ptc_model_load_key(m, kind, i))) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static int put_json(const ptc_model *m, int strict, int ok)
{
    json_t *o = json_object();
    int bad = !o;
    bad = bad || json_object_set_new(o, "arch", json_string(ptc_model_arch(m))) < 0;
    bad = bad || json_object_set_new(o, "num_classes", json_integer(ptc_model_num_classes(m))) < 0;
    bad = bad || json_object_set_new(o, "strict", json_boolean(strict)) < 0;
    bad = bad || json_object_set_new(o, "ok", json_boolean(ok)) < 0;
    bad = bad || json_object_set_new(o, "missing", key_array(m, PTC_LOAD_MISSING)) < 0;
    bad = bad || json_object_set_new(o, "unexpected", key_array(m, PTC_LOAD_UNEXPECTED)) < 0;
    bad = bad || json_object_set_new(o, "mismatched", key_array(m, PTC_LOAD_MISMATCHED)) < 0;
    bad = bad || json_object_set_new(o, "message", json_string(ptc_model_load_text(m))) < 0;
    char *text = bad ? NULL : json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text) {
        cli_error("out of memory");
        return CLI_EXIT_NOMEM;
    }
    cli_put_json_text(stdout, text, strlen(text));
    putchar('\n');
    free(text);
    return CLI_EXIT_OK;
}

int cmd_load(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"arch", required_argument, NULL, O_ARCH},
        {"num-classes", required_argument, NULL, O_CLASSES},
        {"strict", no_argument, NULL, O_STRICT},
        {"no-strict", no_argument, NULL, O_NO_STRICT},
        {"strip-prefix", no_argument, NULL, O_STRIP},
        {"json", no_argument, NULL, O_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ptc_model_params mp;
    ptc_model_params_default(&mp);
    mp.backend = "ref";
    int strict = 1, strip = 0, json = 0, c;
    long classes = 0;
    cli_getopt_reset();
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case O_ARCH:
            mp.arch = optarg;
            break;
        case O_CLASSES:
            classes = strtol(optarg, &end, 10);
            if (end == optarg || *end || classes < 1 || classes > (1 << 20))
                return cli_usage_error("--num-classes wants a number from 1 to %d", 1 << 20);
            break;
        case O_STRICT:
            strict = 1;
            break;
        case O_NO_STRICT:
            strict = 0;
            break;
        case O_STRIP:
            strip = 1;
            break;
        case O_JSON:
            json = 1;
            break;
        case 'h':
            printf(
                "Usage: ptc load WEIGHTS [--arch resnet18|resnet18-cifar] [--num-classes N]\n"
                "                [--strict|--no-strict] [--strip-prefix] [--json]\n"
                "Loads a state dict into torchvision's resnet18(num_classes=N) as\n"
                "model.load_state_dict(torch.load(WEIGHTS, weights_only=True), strict) does,\n"
                "and prints what torch prints: <All keys matched successfully>, the missing\n"
                "and unexpected keys of a --no-strict load, or torch's error (exit status 1).\n"
                "N defaults to the rows of the checkpoint's fc.weight (or module.fc.weight),\n"
                "else 10. --strip-prefix removes DDP's \"module.\" from the keys first (torch's\n"
                "consume_prefix_in_state_dict_if_present). --json: one JSON object with ok,\n"
                "missing, unexpected, mismatched and message.\n");
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("invalid option");
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error(optind == argc ? "missing WEIGHTS" : "only one WEIGHTS file");
    const char *weights = argv[optind];
    ptc_ckpt *ck = NULL;
    ptc_model *m = NULL;
    ptc_error err;
    int rc = ptc_ckpt_open(&ck, weights, NULL, &err);
    if (rc < 0)
        return cli_report(rc, &err);
    if (!classes) { /* the rows of fc.weight, unless the file claims far more than it holds */
        int64_t n = ptc_model_classes_of(ptc_ckpt_root(ck), &err);
        if (n < 0) {
            ptc_ckpt_close(ck);
            return cli_report((int)n, &err);
        }
        classes = (long)n;
    }
    mp.num_classes = classes >= 1 && classes <= (1 << 20) ? (int)classes : 10;
    if ((rc = ptc_model_new(&m, &mp, &err)) < 0) {
        ptc_ckpt_close(ck);
        return rc == PTC_EINVAL ? cli_usage_error("%s", err.message) : cli_report(rc, &err);
    }
    unsigned flags = (strict ? PTC_LOAD_STRICT : 0) | (strip ? PTC_LOAD_STRIP_PREFIX : 0);
    rc = ptc_model_load(m, ptc_ckpt_root(ck), flags, &err);
    int status;
    if (rc < 0 && !ptc_model_load_text(m)[0]) { /* no verdict: not a state dict at all */
        status = cli_report(rc, &err);
        if (rc == PTC_EINVAL) /* the file's fault (a list, a key that is not a str) */
            status = CLI_EXIT_REFUSED;
    } else if (json)
        status = put_json(m, strict, rc == 0);
    else {
        put_text(ptc_model_load_text(m));
        status = CLI_EXIT_OK;
    }
    if (status == CLI_EXIT_OK && rc < 0)
        status = CLI_EXIT_REFUSED;
    ptc_model_free(m);
    ptc_ckpt_close(ck);
    return status;
}
