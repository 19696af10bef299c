/*
 * test_train_scalars.c - what ptc_train records (ptc_train_params.scalar, .log_every, the
 * metrics file; lib/train/record.c), on a deterministic run of the ref backend over a few dozen
 * generated 32 x 32 images (a ptc_source): 26 training images in batches of 4 (7 steps an epoch,
 * the last of 2 images), 3 epochs, an evaluation after epochs 2 and 3, a cosine schedule (so
 * that every step has its own learning rate).
 *   1. log_every 3: the exact sequence of tags and steps (step records at 3, 6, ..., 21, the
 *      epoch's last partial window carried into the next epoch's first record; epoch and eval
 *      records at the global step of their epoch's end), and every callback value equal to the
 *      metrics file's.
 *   2. log_every 1 of the same run: each step record of (1) is the image-weighted mean of the
 *      loss and accuracy of the steps it covers, with the learning rate of its last step.
 *   3. log_every 0: no step records (callback and file), the epoch and eval records still.
 *   4. A caller built with the older, smaller struct (size ending before scalar): the fields it
 *      does not have are the defaults (no callback, no step records).
 */
#include <ptc/ptc.h>

#include "check.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

enum { NTRAIN = 26, NTEST = 10, BATCH = 4, EPOCHS = 3, STEPS_PER_EPOCH = 7, MAX_REC = 512 };

static uint8_t pixels[NTRAIN + NTEST][32 * 32 * 3], labels[NTRAIN + NTEST];

typedef struct images {
    int64_t first;
} images;

static int get(void *ctx, int64_t i, uint8_t *hwc, int64_t *label, ptc_error *err)
{
    const images *im = ctx;
    (void)err;
    memcpy(hwc, pixels[im->first + i], sizeof pixels[0]);
    *label = labels[im->first + i];
    return 0;
}

typedef struct rec {
    char tag[40];
    int64_t step;
    double value;
} rec;

typedef struct recs {
    rec r[MAX_REC];
    int n;
} recs;

static void on_scalar(void *ctx, const char *tag, int64_t step, double value)
{
    recs *rs = ctx;
    if (rs->n >= MAX_REC) {
        CHECK(!"more scalars than the test holds");
        return;
    }
    snprintf(rs->r[rs->n].tag, sizeof rs->r[0].tag, "%s", tag);
    rs->r[rs->n].step = step;
    rs->r[rs->n].value = value;
    rs->n++;
}

static ptc_source src_train, src_test;
static images im_train = {0}, im_test = {NTRAIN};

static void params(ptc_train_params *p, recs *rs, const char *metrics, int64_t log_every)
{
    ptc_train_params_default(p);
    p->backend = "ref";
    p->threads = 1;
    p->epochs = EPOCHS;
    p->batch_size = BATCH;
    p->eval_every = 2;
    p->seed = 5;
    p->schedule = "cosine";
    p->train_source = &src_train;
    p->test_source = &src_test;
    p->metrics = metrics;
    p->scalar = on_scalar;
    p->ctx = rs;
    p->log_every = log_every;
}

/* The metrics file's lines, parsed. */
static int read_lines(const char *path, json_t **out, int max)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && n < max && fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *j = json_loads(line, JSON_ALLOW_NUL, &je);
        if (!j) {
            fprintf(stderr, "%s: not JSON: %s (%s)\n", path, line, je.text);
            CHECK(!"a metrics line is JSON");
            continue;
        }
        out[n++] = j;
    }
    if (f)
        fclose(f);
    return n;
}

static const char *event_of(json_t *j)
{
    return json_string_value(json_object_get(j, "event"));
}

/* The tags a record of event carries, with their JSON members. */
static const char *const STEP_TAGS[][2] = {{"train/loss", "loss"},
                                           {"train/accuracy", "accuracy"},
                                           {"lr", "lr"},
                                           {"images_per_sec", "images_per_sec"}};
static const char *const EPOCH_TAGS[][2] = {{"epoch/train/loss", "loss"},
                                            {"epoch/train/accuracy", "accuracy"},
                                            {"epoch/lr", "lr"},
                                            {"epoch/images_per_sec", "images_per_sec"}};
static const char *const EVAL_TAGS[][2] = {{"test/accuracy", "test_accuracy"},
                                           {"test/loss", "test_loss"}};

/* Walks the file's records in order against the callback's scalars (*k advances): every tagged
 * member of every record, at its step, with the value the file prints. Returns the number of
 * "step" records. */
static int match_file(json_t **lines, int nlines, const recs *rs)
{
    int k = 0, nstep = 0;
    for (int i = 0; i < nlines; i++) {
        const char *ev = event_of(lines[i]);
        const char *const(*tags)[2] = NULL;
        size_t nt = 0;
        int64_t at = 0;
        if (!ev)
            continue;
        if (strcmp(ev, "step") == 0) {
            tags = STEP_TAGS, nt = 4;
            at = json_integer_value(json_object_get(lines[i], "step"));
            nstep++;
        } else if (strcmp(ev, "epoch") == 0) {
            tags = EPOCH_TAGS, nt = 4;
            at = json_integer_value(json_object_get(lines[i], "step"));
        } else if (strcmp(ev, "eval") == 0) {
            tags = EVAL_TAGS, nt = 2;
            at = json_integer_value(json_object_get(lines[i], "step"));
        }
        for (size_t t = 0; t < nt; t++, k++) {
            json_t *v = json_object_get(lines[i], tags[t][1]);
            if (k >= rs->n) {
                fprintf(stderr, "line %d (%s): no scalar for %s\n", i + 1, ev, tags[t][0]);
                CHECK(!"a scalar for every tagged member");
                return nstep;
            }
            const rec *r = &rs->r[k];
            if (strcmp(r->tag, tags[t][0]) != 0 || r->step != at || !json_is_number(v) ||
                json_number_value(v) != r->value) {
                fprintf(stderr,
                        "line %d (%s) member %s = %.17g at %lld; scalar %d: %s = %.17g at %lld\n",
                        i + 1, ev, tags[t][1], json_number_value(v), (long long)at, k, r->tag,
                        r->value, (long long)r->step);
                CHECK(!"the scalar equals the metrics file's member");
            }
        }
    }
    CHECK_INT(k, rs->n); /* no scalar the file does not have */
    return nstep;
}

static void free_lines(json_t **lines, int n)
{
    for (int i = 0; i < n; i++)
        json_decref(lines[i]);
}

static int run(ptc_train_params *p)
{
    ptc_train_result res;
    ptc_error err;
    int rc = ptc_train(p, &res, &err);
    if (rc < 0)
        fprintf(stderr, "ptc_train: %s\n", err.message);
    CHECK_INT(rc, 0);
    return rc;
}

int main(void)
{
    uint64_t s = 42;
    for (int i = 0; i < NTRAIN + NTEST; i++) {
        labels[i] = (uint8_t)(i % 10);
        for (size_t j = 0; j < sizeof pixels[0]; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            pixels[i][j] = (uint8_t)(labels[i] * 20 + (s >> 58));
        }
    }
    ptc_source_default(&src_train);
    src_train.count = NTRAIN;
    src_train.get = get;
    src_train.ctx = &im_train;
    src_test = src_train;
    src_test.count = NTEST;
    src_test.ctx = &im_test;

    char dir[] = "/tmp/ptc-scalars-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return 1;
    }
    char m3[128], m1[128], m0[128], mold[128];
    snprintf(m3, sizeof m3, "%s/every3.jsonl", dir);
    snprintf(m1, sizeof m1, "%s/every1.jsonl", dir);
    snprintf(m0, sizeof m0, "%s/every0.jsonl", dir);
    snprintf(mold, sizeof mold, "%s/old.jsonl", dir);
    static recs r3, r1, r0, rold;
    static json_t *l3[256], *l1[256], *l0[256], *lold[256];
    ptc_train_params p;

    /* 1. log_every 3 */
    params(&p, &r3, m3, 3);
    if (run(&p) < 0)
        return check_exit("test_train_scalars");
    /* the expected sequence: (tag, step) */
    char want[MAX_REC][48];
    int nw = 0;
    for (int e = 1; e <= EPOCHS; e++) {
        for (int st = (e - 1) * STEPS_PER_EPOCH + 1; st <= e * STEPS_PER_EPOCH; st++)
            if (st % 3 == 0)
                for (int t = 0; t < 4; t++)
                    snprintf(want[nw++], sizeof want[0], "%s@%d", STEP_TAGS[t][0], st);
        const int end = e * STEPS_PER_EPOCH; /* the epoch's last global step */
        for (int t = 0; t < 4; t++)
            snprintf(want[nw++], sizeof want[0], "%s@%d", EPOCH_TAGS[t][0], end);
        if (e % 2 == 0 || e == EPOCHS)
            for (int t = 0; t < 2; t++)
                snprintf(want[nw++], sizeof want[0], "%s@%d", EVAL_TAGS[t][0], end);
    }
    CHECK_INT(r3.n, nw);
    for (int i = 0; i < nw && i < r3.n; i++) {
        char got[48];
        snprintf(got, sizeof got, "%s@%lld", r3.r[i].tag, (long long)r3.r[i].step);
        CHECK_STR(got, want[i]);
    }
    int n3 = read_lines(m3, l3, 256);
    CHECK_INT(match_file(l3, n3, &r3), 7); /* steps 3, 6, ..., 21 */
    CHECK(n3 > 0 && strcmp(event_of(l3[n3 - 1]), "summary") == 0);
    for (int i = 0; i < r3.n; i++)
        if (strcmp(r3.r[i].tag, "images_per_sec") == 0)
            CHECK(r3.r[i].value > 0);

    /* 2. log_every 1: the step records of (1) from the steps they cover */
    params(&p, &r1, m1, 1);
    run(&p);
    int n1 = read_lines(m1, l1, 256);
    CHECK_INT(match_file(l1, n1, &r1), EPOCHS * STEPS_PER_EPOCH);
    double loss[EPOCHS * STEPS_PER_EPOCH + 1] = {0}, acc[EPOCHS * STEPS_PER_EPOCH + 1] = {0};
    double lr[EPOCHS * STEPS_PER_EPOCH + 1] = {0};
    for (int i = 0; i < n1; i++) {
        if (strcmp(event_of(l1[i]), "step") != 0)
            continue;
        json_int_t st = json_integer_value(json_object_get(l1[i], "step"));
        if (st < 1 || st > EPOCHS * STEPS_PER_EPOCH) {
            CHECK(!"a step number of the run");
            continue;
        }
        loss[st] = json_number_value(json_object_get(l1[i], "loss"));
        acc[st] = json_number_value(json_object_get(l1[i], "accuracy"));
        lr[st] = json_number_value(json_object_get(l1[i], "lr"));
    }
    int checked = 0;
    for (int i = 0; i < n3; i++) {
        if (strcmp(event_of(l3[i]), "step") != 0)
            continue;
        json_int_t st = json_integer_value(json_object_get(l3[i], "step"));
        double ls = 0, right = 0, seen = 0; /* the file prints 9 digits: compared within that */
        for (json_int_t k = st - 2; k <= st; k++) { /* the steps since the previous record */
            int n = (k - 1) % STEPS_PER_EPOCH == STEPS_PER_EPOCH - 1 ? NTRAIN % BATCH : BATCH;
            ls += loss[k] * n;
            right += round(acc[k] * n); /* the step's correct count */
            seen += n;
        }
        double got_loss = json_number_value(json_object_get(l3[i], "loss"));
        double got_acc = json_number_value(json_object_get(l3[i], "accuracy"));
        double got_lr = json_number_value(json_object_get(l3[i], "lr"));
        if (fabs(got_loss - ls / seen) > 1e-7 * fabs(ls / seen) ||
            fabs(got_acc - right / seen) > 1e-9 || got_lr != lr[st]) {
            fprintf(stderr,
                    "step %lld: loss %.9g accuracy %.9g lr %.9g; from the steps it covers: %.9g "
                    "%.9g %.9g\n",
                    (long long)st, got_loss, got_acc, got_lr, ls / seen, right / seen, lr[st]);
            CHECK(!"a step record is the mean of the steps it covers");
        }
        checked++;
    }
    CHECK_INT(checked, 7);
    /* the same run: the epoch and eval records agree */
    int ne3 = 0, ne1 = 0;
    for (int i = 0; i < n3; i++)
        for (int j = 0, seen = 0; j < n1 && strcmp(event_of(l3[i]), "step") != 0; j++) {
            if (strcmp(event_of(l1[j]), event_of(l3[i])) != 0 || seen)
                continue;
            json_t *a = json_object_get(l3[i], "epoch"), *b = json_object_get(l1[j], "epoch");
            if (!json_equal(a, b))
                continue;
            seen = 1;
            ne3++;
            const char *key = strcmp(event_of(l3[i]), "eval") == 0 ? "test_loss" : "loss";
            if (json_object_get(l3[i], key))
                CHECK(json_equal(json_object_get(l3[i], key), json_object_get(l1[j], key)));
        }
    for (int j = 0; j < n1; j++)
        ne1 += strcmp(event_of(l1[j]), "epoch") == 0 || strcmp(event_of(l1[j]), "eval") == 0;
    CHECK_INT(ne3, 5); /* 3 epochs, 2 evaluations */
    CHECK_INT(ne1, 5);

    /* 3. log_every 0 */
    params(&p, &r0, m0, 0);
    run(&p);
    int n0 = read_lines(m0, l0, 256);
    CHECK_INT(match_file(l0, n0, &r0), 0);
    CHECK_INT(r0.n, EPOCHS * 4 + 2 * 2);

    /* 4. the older struct, which ends before scalar */
    params(&p, &rold, mold, 1);
    p.size = offsetof(ptc_train_params, scalar);
    p.epochs = 1;
    p.max_steps = 2;
    run(&p);
    int nold = read_lines(mold, lold, 256);
    CHECK_INT(rold.n, 0);
    int nstep_old = 0;
    for (int i = 0; i < nold; i++)
        nstep_old += strcmp(event_of(lold[i]), "step") == 0;
    CHECK_INT(nstep_old, 0);
    CHECK(nold >= 2); /* epoch 1, its evaluation (the last epoch), the summary */

    free_lines(l3, n3);
    free_lines(l1, n1);
    free_lines(l0, n0);
    free_lines(lold, nold);
    unlink(m3);
    unlink(m1);
    unlink(m0);
    unlink(mold);
    rmdir(dir);
    return check_exit("test_train_scalars");
}
