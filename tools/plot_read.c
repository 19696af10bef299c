/*
 * plot_read.c - the metrics files of `ptc train --metrics` read for `ptc plot` (tools/plot_int.h).
 *
 * The format (ptc-train(1) METRICS; lib/train/train.c writes it): JSON lines, each an object with
 * an "event" string:
 *   "step"  every --log-every steps: epoch, step, loss, accuracy (0..1), lr, images_per_sec
 *   "epoch" after each epoch: epoch (1, 2, ...), step (the last of the epoch), loss, accuracy,
 *           lr, images_per_sec, seconds
 *   "eval"  after an evaluation: epoch, step, test_accuracy, test_loss, images, images_per_sec
 *   "gpu", "summary" and events of later versions: read as JSON, not plotted.
 * Files without "step" records (written before they existed, or with --log-every 0) plot their
 * epochs alone.
 *
 * The file is input like any other, and may be hostile or still being written:
 *   - a line that is not a JSON object with an "event" string, or a record of a plotted kind
 *     whose epoch or step is missing or not a whole number, or whose value is not a number, is
 *     an error naming the file and the line;
 *   - a last line without its '\n' that does not parse is a run still writing it: left out with
 *     a note;
 *   - NaN and infinite values (printf's "nan", "-nan", "inf", Python's "NaN", "Infinity", which
 *     JSON has no spelling for: a diverging run writes them) are read as missing, and the point
 *     is left out;
 *   - lines are at most PLOT_MAX_LINE bytes and series thinned to PLOT_MAX_POINTS
 *     (plot_int.h), so memory stays bounded whatever the length of the file;
 *   - a record at or before the step of the previous one of its series replaces the points from
 *     there on: `ptc train --resume` from an earlier checkpoint appends to the file and repeats
 *     the epochs after it, and the repeat is what the checkpoints hold.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"
#include "plot_int.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    plot_run *run;
    int64_t line;
    char *raw;  /* [PLOT_MAX_LINE + 1] */
    char *json; /* [2 * PLOT_MAX_LINE + 1]: raw with NaN spellings turned into null */
} reader;

static int line_error(const reader *r, const char *fmt, ...) CLI_PRINTF(2, 3);

static int line_error(const reader *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cli_error("%s:%lld: %s", r->run->path_text, (long long)r->line, text);
    return CLI_EXIT_REFUSED;
}

/* ---- series -----------------------------------------------------------------------------------
 */

static int ser_add(plot_run *run, int which, double step, double epoch, double y)
{
    plot_ser *s = &run->ser[which];
    /* A resumed run repeating steps: its records replace the earlier ones from there on. */
    while (s->n && s->p[s->n - 1].step >= step)
        s->n--;
    if (!isfinite(y)) {
        run->skipped++;
        return 0;
    }
    if (fabs(y) > PLOT_MAX_VALUE) {
        run->out_of_range++;
        return 0;
    }
    if (!s->stride)
        s->stride = 1;
    if (s->seen++ % s->stride)
        return 0;
    if (s->n == s->cap) {
        if (s->cap >= PLOT_MAX_POINTS) {
            /* Full: keep every second point, and from now on every second new one. */
            for (size_t i = 0; 2 * i < s->n; i++)
                s->p[i] = s->p[2 * i];
            s->n = (s->n + 1) / 2;
            s->stride *= 2;
            run->thinned = 1;
        } else {
            size_t cap = s->cap ? s->cap * 2 : 64;
            if (cap > PLOT_MAX_POINTS)
                cap = PLOT_MAX_POINTS;
            plot_pt *p = realloc(s->p, cap * sizeof *p);
            if (!p)
                return CLI_EXIT_NOMEM;
            s->p = p;
            s->cap = cap;
        }
    }
    s->p[s->n++] = (plot_pt){step, epoch, y};
    return 0;
}

/* ---- one line ---------------------------------------------------------------------------------
 */

/* Copies in[0..n) to out (room for 2n + 1 bytes), replacing the bare words nan, inf and infinity
 * (any case, with a sign) outside strings by null. Anything else is copied as it is, for jansson
 * to judge. Returns the length written. */
static size_t nan_to_null(const char *in, size_t n, char *out)
{
    size_t o = 0;
    int in_string = 0;
    for (size_t i = 0; i < n;) {
        char ch = in[i];
        if (in_string) {
            out[o++] = ch;
            i++;
            if (ch == '\\' && i < n)
                out[o++] = in[i++];
            else if (ch == '"')
                in_string = 0;
            continue;
        }
        if (ch == '"') {
            in_string = 1;
            out[o++] = in[i++];
            continue;
        }
        size_t j = i + ((ch == '-' || ch == '+') ? 1 : 0);
        size_t k = j;
        while (k < n && ((in[k] >= 'a' && in[k] <= 'z') || (in[k] >= 'A' && in[k] <= 'Z')))
            k++;
        if (k > j && ((k - j == 3 && (strncasecmp(in + j, "nan", 3) == 0 ||
                                      strncasecmp(in + j, "inf", 3) == 0)) ||
                      (k - j == 8 && strncasecmp(in + j, "infinity", 8) == 0))) {
            memcpy(out + o, "null", 4);
            o += 4;
            i = k;
            continue;
        }
        if (k == i) /* not a word: one byte */
            k = i + 1;
        memcpy(out + o, in + i, k - i);
        o += k - i;
        i = k;
    }
    out[o] = '\0';
    return o;
}

/* A whole number >= min: the epoch or step of a record. */
static int get_count(const reader *r, json_t *rec, const char *event, const char *key, int64_t min,
                     double *out)
{
    json_t *v = json_object_get(rec, key);
    if (!v)
        return line_error(r, "a \"%s\" record without \"%s\"", event, key);
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > (INT64_C(1) << 53))
        return line_error(r, "\"%s\" of a \"%s\" record is not a whole number from %lld to 2^53",
                          key, event, (long long)min);
    *out = (double)json_integer_value(v);
    return 0;
}

/* A value: a number, or NaN (missing, null: a value the run could not compute). */
static int get_value(const reader *r, json_t *rec, const char *event, const char *key, double *out)
{
    json_t *v = json_object_get(rec, key);
    *out = NAN;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return line_error(r, "\"%s\" of a \"%s\" record is not a number", key, event);
    *out = json_number_value(v);
    return 0;
}

static int record(reader *r, json_t *rec)
{
    plot_run *run = r->run;
    if (!json_is_object(rec))
        return line_error(r, "not a JSON object");
    json_t *ev = json_object_get(rec, "event");
    if (!json_is_string(ev))
        return line_error(r, "no \"event\" string");
    const char *event = json_string_value(ev);
    double step, epoch = 0, a, b, c;
    int rc;
    if (strcmp(event, "step") == 0) {
        if ((rc = get_count(r, rec, event, "step", 0, &step)) ||
            (rc = get_value(r, rec, event, "loss", &a)) ||
            (rc = get_value(r, rec, event, "accuracy", &b)) ||
            (rc = get_value(r, rec, event, "lr", &c)))
            return rc;
        if ((rc = ser_add(run, SER_STEP_LOSS, step, 0, a)) ||
            (rc = ser_add(run, SER_STEP_ACC, step, 0, b)) ||
            (rc = ser_add(run, SER_STEP_LR, step, 0, c)))
            return rc;
    } else if (strcmp(event, "epoch") == 0) {
        if ((rc = get_count(r, rec, event, "epoch", 1, &epoch)) ||
            (rc = get_count(r, rec, event, "step", 0, &step)) ||
            (rc = get_value(r, rec, event, "loss", &a)) ||
            (rc = get_value(r, rec, event, "accuracy", &b)) ||
            (rc = get_value(r, rec, event, "lr", &c)))
            return rc;
        if ((rc = ser_add(run, SER_EPOCH_LOSS, step, epoch, a)) ||
            (rc = ser_add(run, SER_EPOCH_ACC, step, epoch, b)) ||
            (rc = ser_add(run, SER_EPOCH_LR, step, epoch, c)) ||
            (rc = ser_add(run, SER_ENDS, step, epoch, epoch)))
            return rc;
    } else if (strcmp(event, "eval") == 0) {
        if ((rc = get_count(r, rec, event, "epoch", 1, &epoch)) ||
            (rc = get_count(r, rec, event, "step", 0, &step)) ||
            (rc = get_value(r, rec, event, "test_loss", &a)) ||
            (rc = get_value(r, rec, event, "test_accuracy", &b)))
            return rc;
        if ((rc = ser_add(run, SER_TEST_LOSS, step, epoch, a)) ||
            (rc = ser_add(run, SER_TEST_ACC, step, epoch, b)))
            return rc;
    } else {
        return 0; /* gpu, summary, and what later versions add */
    }
    run->records++;
    return 0;
}

/* Reads the next line into r->raw: *len bytes without the '\n'; *nl says whether a '\n' ended
 * it. 0 at the end of the file (nothing read), 1 for a line, or an exit status < 0 negated. */
static int next_line(reader *r, FILE *f, size_t *len, int *nl)
{
    size_t n = 0;
    int ch;
    *nl = 0;
    while ((ch = getc_unlocked(f)) != EOF) {
        if (ch == '\n') {
            *nl = 1;
            break;
        }
        if (n == PLOT_MAX_LINE) {
            r->line++;
            line_error(r, "longer than %d bytes: not a line of a metrics file", PLOT_MAX_LINE);
            return -CLI_EXIT_REFUSED;
        }
        r->raw[n++] = (char)ch;
    }
    if (ferror(f)) {
        cli_error("%s: %s", r->run->path_text, strerror(errno ? errno : EIO));
        return -CLI_EXIT_IO;
    }
    *len = n;
    return n || *nl ? 1 : 0;
}

static int read_lines(reader *r, FILE *f)
{
    size_t len;
    int nl, got;
    while ((got = next_line(r, f, &len, &nl)) > 0) {
        r->line++;
        r->run->lines++;
        size_t i = 0;
        while (i < len && (r->raw[i] == ' ' || r->raw[i] == '\t' || r->raw[i] == '\r'))
            i++;
        if (i == len)
            continue; /* a blank line */
        size_t n = nan_to_null(r->raw, len, r->json);
        json_error_t je;
        json_t *rec = json_loadb(r->json, n, JSON_REJECT_DUPLICATES, &je);
        if (!rec) {
            if (!nl) {
                cli_error("%s:%lld: the last line is incomplete (the run is still writing it?): "
                          "left out",
                          r->run->path_text, (long long)r->line);
                return CLI_EXIT_OK;
            }
            cli_buf b = {0};
            cli_buf_escape(&b, je.text, strlen(je.text), 0);
            int rc = line_error(r, "not JSON: %s (column %d)", cli_buf_str(&b), je.column);
            cli_buf_free(&b);
            return rc;
        }
        int rc = record(r, rec);
        json_decref(rec);
        if (rc)
            return rc;
    }
    return got < 0 ? -got : CLI_EXIT_OK;
}

int plot_run_read(const char *path, plot_run *run)
{
    memset(run, 0, sizeof *run);
    cli_buf b = {0};
    const char *base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    cli_buf_escape(&b, base, strlen(base), 0);
    run->name = b.oom ? NULL : strdup(cli_buf_str(&b));
    cli_buf_free(&b);
    cli_buf_msg_name(&b, path, strlen(path));
    run->path_text = b.oom ? NULL : strdup(cli_buf_str(&b));
    cli_buf_free(&b);
    if (!run->name || !run->path_text)
        return CLI_EXIT_NOMEM;

    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("%s: %s", run->path_text, strerror(errno));
        return CLI_EXIT_IO;
    }
    reader r = {.run = run};
    r.raw = malloc(PLOT_MAX_LINE + 1);
    r.json = malloc(2 * PLOT_MAX_LINE + 1);
    int rc = r.raw && r.json ? read_lines(&r, f) : CLI_EXIT_NOMEM;
    free(r.raw);
    free(r.json);
    fclose(f);
    if (rc)
        return rc;
    if (!run->lines) {
        cli_error("%s: empty file: no records to plot", run->path_text);
        return CLI_EXIT_REFUSED;
    }
    size_t points = 0;
    for (int i = 0; i < SER_ENDS; i++)
        points += run->ser[i].n;
    if (!points) {
        cli_error("%s: no step, epoch or eval record with a number to plot (%lld lines, %lld "
                  "such records)",
                  run->path_text, (long long)run->lines, (long long)run->records);
        return CLI_EXIT_REFUSED;
    }
    return CLI_EXIT_OK;
}

void plot_run_free(plot_run *run)
{
    if (!run)
        return;
    for (int i = 0; i < SER_COUNT; i++)
        free(run->ser[i].p);
    free(run->name);
    free(run->path_text);
    memset(run, 0, sizeof *run);
}

int plot_step_to_epoch(const plot_run *run, double step, double *epoch)
{
    const plot_ser *e = &run->ser[SER_ENDS];
    if (!e->n)
        return 0;
    const plot_pt *p = e->p;
    size_t n = e->n;
    /* The first end recorded, p[0], follows epoch p[0].epoch - 1, taken to be as long as the
     * others were on average (from step 0: one epoch when the file starts at epoch 1). */
    double s0 = p[0].step * (p[0].epoch - 1) / p[0].epoch, e0 = p[0].epoch - 1;
    if (step <= p[0].step) {
        *epoch = p[0].step > s0 ? e0 + (step - s0) / (p[0].step - s0) : p[0].epoch;
        return 1;
    }
    if (step > p[n - 1].step) {
        double len = n > 1 ? (p[n - 1].step - p[n - 2].step) / (p[n - 1].epoch - p[n - 2].epoch)
                           : p[0].step - s0;
        if (!(len > 0))
            return 0;
        *epoch = p[n - 1].epoch + (step - p[n - 1].step) / len;
        return 1;
    }
    size_t lo = 0, hi = n - 1; /* p[lo].step < step <= p[hi].step */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p[mid].step < step)
            lo = mid;
        else
            hi = mid;
    }
    *epoch =
        p[lo].epoch + (p[hi].epoch - p[lo].epoch) * (step - p[lo].step) / (p[hi].step - p[lo].step);
    return 1;
}
