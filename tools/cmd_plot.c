/*
 * cmd_plot.c - `ptc plot METRICS.jsonl... [-o FILE.png|.svg|.pdf]`: the loss, the accuracy and
 * the learning rate of one or more training runs (the metrics files of ptc train --metrics) in
 * one figure.
 *
 * This file parses the options, reads the files (tools/plot_read.c), turns their records into the
 * figure's series (accuracy in percent; x in steps, or in epochs with --x epochs, where the
 * per-step records fall between the ends of their epochs), and hands the figure to the renderer,
 * the module tool-plot.so (tools/plot/render.c), which alone links cairo: ptc gets its table from
 * libptc (ptc_tool_module) and checks the table's version (tools/plot/plot.h). The files are read
 * before the module is loaded, so a malformed file is reported the same with or without it.
 *
 * --layout-json FILE writes where the renderer put the panels, the legend and the title, for the
 * tests (tests/fixtures/check_plot_cli.sh), which check the picture's pixels against it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"
#include "plot/plot.h"
#include "plot_int.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum { O_TITLE = 256, O_WIDTH, O_HEIGHT, O_X, O_LAYOUT };

static const char *const format_names[] = {"", "png", "svg", "pdf"};
static const char *const panel_keys[PLOT_NPANELS] = {"loss", "accuracy", "lr"};
static const char *const style_keys[PLOT_NSTYLES] = {"step", "epoch", "test"};

static void usage(void)
{
    printf("Usage: ptc plot METRICS.jsonl [METRICS2.jsonl ...] [-o FILE.png|.svg|.pdf]\n"
           "                [--title T] [--width W] [--height H] [--x steps|epochs]\n"
           "Draws the loss (train and test), the accuracy (train and test, percent) and the\n"
           "learning rate of the runs whose metrics files (ptc train --metrics) are given: one\n"
           "panel each, on one x axis in optimizer steps with the ends of the epochs marked\n"
           "(--x epochs: in epochs). Several files overlay as runs, one colour each, named by\n"
           "their file names in the legend. -o: the figure's file, PNG, SVG or PDF by its\n"
           "extension (default: the first file's name with .png); --width and --height: its\n"
           "size in pixels (points for SVG and PDF), default 1200 x 800; --title: default the\n"
           "file names. --layout-json FILE: where the panels, legend and title went (for\n"
           "tests). Exit status: 1 a file is not a metrics file (the message names its line)\n"
           "or the renderer is not installed, 2 usage, 3 a file cannot be read or written.\n"
           "See ptc-plot(1).\n");
}

static int parse_size(const char *opt, const char *arg, int min, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno || v < min || v > PLOT_MAX_SIDE)
        return cli_usage_error("%s wants a number from %d to %d", opt, min, PLOT_MAX_SIDE);
    *out = (int)v;
    return 0;
}

/* The format the name's extension asks for, 0 for none of .png, .svg, .pdf (any case). */
static plot_format format_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    if (!dot)
        return 0;
    for (int f = PLOT_PNG; f <= PLOT_PDF; f++)
        if (dot[1] && strcasecmp(dot + 1, format_names[f]) == 0)
            return (plot_format)f;
    return 0;
}

/* The first file's name with its extension replaced by .png ("run.jsonl" -> "run.png"). */
static char *default_output(const char *input)
{
    const char *slash = strrchr(input, '/');
    const char *dot = strrchr(slash ? slash + 1 : input, '.');
    size_t stem = dot && dot != (slash ? slash + 1 : input) ? (size_t)(dot - input) : strlen(input);
    char *out = malloc(stem + 5);
    if (out) {
        memcpy(out, input, stem);
        memcpy(out + stem, ".png", 5);
    }
    return out;
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* ---- the figure ------------------------------------------------------------------------------
 */

typedef struct figure {
    plot_figure f;
    plot_series series[PLOT_MAX_RUNS * 8];
    double *arrays[PLOT_MAX_RUNS * 8];
    plot_mark *marks;
    char *title;
} figure;

static void figure_free(figure *g)
{
    for (size_t i = 0; i < g->f.nseries; i++)
        free(g->arrays[i]);
    free(g->marks);
    free(g->title);
}

/* Adds run r's series `which` to panel with style, its values times scale; x in steps, or in
 * epochs (epoch records at their epoch, step records placed within theirs). A series with no
 * point to draw is left out. */
static int add_series(figure *g, const plot_run *run, int r, int which, plot_panel panel,
                      plot_style style, double scale)
{
    const plot_ser *s = &run->ser[which];
    if (!s->n)
        return 0;
    double *xy = malloc(2 * s->n * sizeof *xy);
    if (!xy)
        return CLI_EXIT_NOMEM;
    size_t m = 0;
    for (size_t k = 0; k < s->n; k++) {
        double x = s->p[k].step;
        if (g->f.x_epochs) {
            if (style != PLOT_STYLE_STEP)
                x = s->p[k].epoch;
            else if (!plot_step_to_epoch(run, s->p[k].step, &x))
                continue;
        }
        double y = s->p[k].y * scale;
        if (!isfinite(x) || !isfinite(y))
            continue;
        xy[m] = x;
        xy[s->n + m] = y;
        m++;
    }
    if (!m) {
        free(xy);
        return 0;
    }
    size_t i = g->f.nseries++;
    g->arrays[i] = xy;
    g->series[i] = (plot_series){panel, style, r, xy, xy + s->n, m};
    return 0;
}

static int has_end(const plot_run *run, double step)
{
    const plot_ser *e = &run->ser[SER_ENDS];
    size_t lo = 0, hi = e->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->p[mid].step < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < e->n && e->p[lo].step == step;
}

/* The ends of the epochs, on an axis of steps: all of run 0's, and another run's where run 0 has
 * none, at most PLOT_MAX_MARKS (every k-th beyond). */
static int add_marks(figure *g, const plot_run *runs, int nruns)
{
    size_t total = 0;
    for (int r = 0; r < nruns; r++)
        total += runs[r].ser[SER_ENDS].n;
    if (!total || g->f.x_epochs)
        return 0;
    size_t every = (total + PLOT_MAX_MARKS - 1) / PLOT_MAX_MARKS;
    g->marks = malloc((total < PLOT_MAX_MARKS ? total : PLOT_MAX_MARKS) * sizeof *g->marks);
    if (!g->marks)
        return CLI_EXIT_NOMEM;
    size_t n = 0;
    for (int r = 0; r < nruns; r++) {
        const plot_ser *e = &runs[r].ser[SER_ENDS];
        for (size_t k = 0; k < e->n && n < PLOT_MAX_MARKS; k++)
            if (k % every == 0 && (r == 0 || !has_end(&runs[0], e->p[k].step)))
                g->marks[n++] = (plot_mark){e->p[k].step, r, (int64_t)e->p[k].epoch};
    }
    g->f.marks = g->marks;
    g->f.nmarks = n;
    return 0;
}

/* Whether run r's name is also another run's. */
static int name_repeats(const plot_run *runs, int nruns, int r)
{
    for (int i = 0; i < nruns; i++)
        if (i != r && strcmp(runs[i].name, runs[r].name) == 0)
            return 1;
    return 0;
}

/* Runs of the same base name (run-a/metrics.jsonl, run-b/metrics.jsonl) would get identical
 * legend entries: such a run is named by its folder and base name, and where that still repeats,
 * by its place among the files as well ("metrics.jsonl #2"). */
static int distinct_names(plot_run *runs, char *const *paths, int nruns)
{
    for (int pass = 0; pass < 2; pass++) {
        int same[PLOT_MAX_RUNS] = {0};
        for (int r = 0; r < nruns; r++)
            same[r] = name_repeats(runs, nruns, r);
        for (int r = 0; r < nruns; r++) {
            if (!same[r])
                continue;
            cli_buf b = {0};
            if (pass == 0) {
                /* The path's last two components, as given ("run-a/metrics.jsonl"). */
                const char *p = paths[r], *end = p + strlen(p);
                while (end > p && end[-1] == '/')
                    end--;
                const char *start = end;
                int slashes = 0;
                while (start > p && !(start[-1] == '/' && ++slashes == 2))
                    start--;
                cli_buf_escape(&b, start, (size_t)(end - start), 0);
            } else {
                cli_buf_printf(&b, "%s #%d", runs[r].name, r + 1);
            }
            char *name = b.oom ? NULL : strdup(cli_buf_str(&b));
            cli_buf_free(&b);
            if (!name)
                return CLI_EXIT_NOMEM;
            free(runs[r].name);
            runs[r].name = name;
        }
    }
    return 0;
}

static int build(figure *g, const plot_run *runs, int nruns)
{
    int rc;
    for (int r = 0; r < nruns; r++) {
        const plot_run *run = &runs[r];
        g->f.run_names[r] = run->name;
        /* The per-step learning rate when the run has it, else the one per epoch: both would
         * draw the same schedule twice. */
        int lr = run->ser[SER_STEP_LR].n ? SER_STEP_LR : SER_EPOCH_LR;
        if ((rc = add_series(g, run, r, SER_STEP_LOSS, PLOT_LOSS, PLOT_STYLE_STEP, 1)) ||
            (rc = add_series(g, run, r, SER_STEP_ACC, PLOT_ACCURACY, PLOT_STYLE_STEP, 100)) ||
            (rc = add_series(g, run, r, SER_EPOCH_LOSS, PLOT_LOSS, PLOT_STYLE_EPOCH, 1)) ||
            (rc = add_series(g, run, r, SER_EPOCH_ACC, PLOT_ACCURACY, PLOT_STYLE_EPOCH, 100)) ||
            (rc = add_series(g, run, r, SER_TEST_LOSS, PLOT_LOSS, PLOT_STYLE_TEST, 1)) ||
            (rc = add_series(g, run, r, SER_TEST_ACC, PLOT_ACCURACY, PLOT_STYLE_TEST, 100)) ||
            (rc = add_series(g, run, r, lr, PLOT_LR,
                             lr == SER_STEP_LR ? PLOT_STYLE_STEP : PLOT_STYLE_EPOCH, 1)))
            return rc;
    }
    g->f.nruns = nruns;
    g->f.series = g->series;
    return add_marks(g, runs, nruns);
}

/* ---- the layout, for tests -------------------------------------------------------------------
 */

static json_t *box_json(const plot_box *b)
{
    return json_pack("[f, f, f, f]", b->x, b->y, b->w, b->h);
}

static json_t *rgb_json(uint32_t rgb)
{
    char hex[8];
    snprintf(hex, sizeof hex, "#%06x", (unsigned)(rgb & 0xffffff));
    return json_string(hex);
}

/* An axis' tick labels (NUL-terminated by the renderer; n is clamped to the table's room). */
static json_t *ticks_json(const char (*text)[PLOT_TICK_TEXT], int n)
{
    json_t *a = json_array();
    for (int k = 0; a && k < n && k < PLOT_MAX_TICKS; k++)
        json_array_append_new(a, json_stringn(text[k], strnlen(text[k], PLOT_TICK_TEXT)));
    return a;
}

static int write_layout(const char *path, const figure *g, const plot_layout *L, const char *out)
{
    const plot_figure *f = &g->f;
    json_t *root = json_object(), *panels = json_array(), *runs = json_array();
    json_t *entries = json_array(), *series = json_array();
    if (!root || !panels || !runs || !entries || !series)
        goto nomem;
    for (int p = 0; p < PLOT_NPANELS; p++)
        if (L->shown[p])
            json_array_append_new(
                panels, json_pack("{s:s, s:o, s:f, s:f, s:b, s:i, s:o}", "name", panel_keys[p],
                                  "box", box_json(&L->panel[p]), "y_min", L->y_min[p], "y_max",
                                  L->y_max[p], "log", L->y_log[p], "ticks", L->ny_ticks[p],
                                  "tick_text", ticks_json(L->y_tick_text[p], L->ny_ticks[p])));
    for (int r = 0; r < f->nruns; r++)
        json_array_append_new(runs, json_pack("{s:s, s:o}", "name", f->run_names[r], "color",
                                              rgb_json(L->run_rgb[r])));
    for (int i = 0; i < L->nlegend; i++) {
        const plot_legend_entry *e = &L->legend_entry[i];
        json_array_append_new(
            entries, json_pack("{s:s, s:i, s:s?, s:o, s:o}", "text", e->text, "run", e->run,
                               "style", e->style >= 0 ? style_keys[e->style] : NULL, "color",
                               rgb_json(e->rgb), "box", box_json(&e->box)));
    }
    for (size_t i = 0; i < f->nseries; i++) {
        const plot_series *s = &f->series[i];
        json_array_append_new(series, json_pack("{s:s, s:s, s:i, s:I}", "panel",
                                                panel_keys[s->panel], "style", style_keys[s->style],
                                                "run", s->run, "points", (json_int_t)s->n));
    }
    json_object_set_new(root, "file", json_string(out));
    json_object_set_new(root, "format", json_string(format_names[f->format]));
    json_object_set_new(root, "width", json_integer(f->width));
    json_object_set_new(root, "height", json_integer(f->height));
    json_object_set_new(root, "font", json_string(L->font));
    json_object_set_new(root, "title",
                        json_pack("{s:s, s:o}", "text", f->title, "box", box_json(&L->title)));
    json_object_set_new(root, "x",
                        json_pack("{s:s, s:f, s:f, s:i, s:o}", "unit",
                                  f->x_epochs ? "epoch" : "step", "min", L->x_min, "max", L->x_max,
                                  "ticks", L->nx_ticks, "tick_text",
                                  ticks_json(L->x_tick_text, L->nx_ticks)));
    json_object_set_new(root, "panels", panels);
    json_object_set_new(root, "runs", runs);
    json_object_set_new(root, "series", series);
    json_object_set_new(root, "legend",
                        json_pack("{s:o, s:o}", "box", box_json(&L->legend), "entries", entries));
    json_object_set_new(root, "marks",
                        json_pack("{s:I, s:i, s:i}", "given", (json_int_t)f->nmarks, "drawn",
                                  L->marks_drawn, "labelled", L->marks_labelled));
    panels = runs = entries = series = NULL;
    if (json_dump_file(root, path, JSON_INDENT(1) | JSON_SORT_KEYS) != 0) {
        json_decref(root);
        cli_error("--layout-json %s: cannot be written", path);
        return CLI_EXIT_IO;
    }
    json_decref(root);
    return CLI_EXIT_OK;
nomem:
    json_decref(root);
    json_decref(panels);
    json_decref(runs);
    json_decref(entries);
    json_decref(series);
    return CLI_EXIT_NOMEM;
}

/* ---- the command -----------------------------------------------------------------------------
 */

/* The renderer's table, checked against this program's. */
static int renderer(const plot_ops **out)
{
    const void *ops = NULL;
    ptc_error err;
    int rc = ptc_tool_module("plot", &ops, &err);
    if (rc < 0) {
        int st = cli_report(rc, &err);
        if (rc == PTC_ENOTFOUND)
            fprintf(stderr, "(ptc plot draws with the module tool-plot.so, built when configure "
                            "finds cairo: apt-get install libcairo2-dev fonts-dejavu-core)\n");
        return st;
    }
    const plot_ops *t = ops;
    if (t->version != PLOT_OPS_VERSION) {
        cli_error("tool-plot.so has a table of version %d, this ptc needs version %d (install "
                  "the module built with this ptc)",
                  t->version, PLOT_OPS_VERSION);
        return CLI_EXIT_REFUSED;
    }
    /* Every function of the table, so that a broken build is refused rather than called. */
    if (!t->render) {
        cli_error("tool-plot.so has a table of version %d without its render function (a broken "
                  "build: install the module built with this ptc)",
                  t->version);
        return CLI_EXIT_REFUSED;
    }
    *out = t;
    return CLI_EXIT_OK;
}

int cmd_plot(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"title", required_argument, NULL, O_TITLE},
        {"width", required_argument, NULL, O_WIDTH},
        {"height", required_argument, NULL, O_HEIGHT},
        {"x", required_argument, NULL, O_X},
        {"layout-json", required_argument, NULL, O_LAYOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *output = NULL, *title = NULL, *layout_path = NULL;
    int width = 1200, height = 800, x_epochs = 0, c, rc;
    cli_getopt_reset();
    while ((c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case O_TITLE:
            title = optarg;
            break;
        case O_WIDTH:
            if ((rc = parse_size("--width", optarg, PLOT_MIN_WIDTH, &width)))
                return rc;
            break;
        case O_HEIGHT:
            if ((rc = parse_size("--height", optarg, PLOT_MIN_HEIGHT, &height)))
                return rc;
            break;
        case O_X:
            if (strcmp(optarg, "steps") != 0 && strcmp(optarg, "epochs") != 0)
                return cli_usage_error("--x is steps or epochs");
            x_epochs = strcmp(optarg, "epochs") == 0;
            break;
        case O_LAYOUT:
            layout_path = optarg;
            break;
        case 'h':
            usage();
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("invalid option");
        }
    }
    int nfiles = argc - optind;
    if (nfiles < 1)
        return cli_usage_error("no metrics file given");
    if (nfiles > PLOT_MAX_RUNS)
        return cli_usage_error("at most %d metrics files (runs) in one figure, not %d",
                               PLOT_MAX_RUNS, nfiles);
    if ((int64_t)width * height > PLOT_MAX_AREA)
        return cli_usage_error("a figure of %d x %d is more than %d pixels", width, height,
                               PLOT_MAX_AREA);
    char **inputs = argv + optind;

    figure g;
    memset(&g, 0, sizeof g);
    plot_run runs[PLOT_MAX_RUNS];
    memset(runs, 0, sizeof runs);
    char *out = output ? strdup(output) : default_output(inputs[0]);
    cli_buf b = {0};
    rc = CLI_EXIT_NOMEM;
    if (!out)
        goto done;
    plot_format format = format_of(out);
    if (!format) {
        cli_buf_msg_name(&b, out, strlen(out));
        rc = cli_usage_error("%s: the figure's name must end in .png, .svg or .pdf (its format)",
                             cli_buf_str(&b));
        goto done;
    }
    for (int i = 0; i < nfiles; i++)
        if (same_file(out, inputs[i])) {
            cli_buf_msg_name(&b, out, strlen(out));
            rc = cli_usage_error("%s is a metrics file given: the figure would overwrite it",
                                 cli_buf_str(&b));
            goto done;
        }
    /* The layout is written after the figure: it must overwrite neither it nor an input. */
    for (int i = 0; layout_path && i <= nfiles; i++)
        if (same_file(layout_path, i < nfiles ? inputs[i] : out)) {
            cli_buf_msg_name(&b, layout_path, strlen(layout_path));
            rc = cli_usage_error(i < nfiles ? "--layout-json %s is a metrics file given: the "
                                              "layout would overwrite it"
                                            : "--layout-json %s is the figure: the layout would "
                                              "overwrite it",
                                 cli_buf_str(&b));
            goto done;
        }

    for (int i = 0; i < nfiles; i++)
        if ((rc = plot_run_read(inputs[i], &runs[i])))
            goto done;
    if ((rc = distinct_names(runs, inputs, nfiles)))
        goto done;
    g.f.width = width;
    g.f.height = height;
    g.f.format = format;
    g.f.x_epochs = x_epochs;
    if ((rc = build(&g, runs, nfiles)))
        goto done;
    if (!g.f.nseries) {
        /* Only with --x epochs: step records of a run that recorded no epoch end. */
        cli_error("nothing to draw against epochs: the files have step records but no epoch "
                  "record (try --x steps)");
        rc = CLI_EXIT_REFUSED;
        goto done;
    }
    if (title)
        cli_buf_escape(&b, title, strlen(title), 0);
    else
        for (int r = 0; r < nfiles; r++)
            cli_buf_printf(&b, "%s%s", r ? ", " : "", runs[r].name);
    if (b.oom || !(g.title = strdup(cli_buf_str(&b))))
        goto done;
    g.f.title = g.title;

    const plot_ops *ops = NULL;
    if ((rc = renderer(&ops)))
        goto done;
    plot_layout L;
    ptc_error err;
    int prc = ops->render(&g.f, out, &L, &err);
    if (prc < 0) {
        rc = cli_report(prc, &err);
        goto done;
    }
    if (layout_path && (rc = write_layout(layout_path, &g, &L, out)))
        goto done;
    if (strcmp(L.font, "DejaVu Sans") != 0)
        cli_error("warning: the text was drawn in \"%s\", not DejaVu Sans (apt-get install "
                  "fonts-dejavu-core)",
                  L.font[0] ? L.font : "an unknown font");
    cli_buf_truncate(&b, 0);
    cli_buf_msg_name(&b, out, strlen(out));
    int npanels = L.shown[0] + L.shown[1] + L.shown[2];
    printf("%s: %s, %d x %d, %d run%s, %d panel%s\n", cli_buf_str(&b), format_names[format], width,
           height, nfiles, nfiles > 1 ? "s" : "", npanels, npanels > 1 ? "s" : "");
    for (int r = 0; r < nfiles; r++) {
        if (runs[r].skipped)
            cli_error("note: %s: %lld value%s not a finite number (NaN, inf, null): left out",
                      runs[r].path_text, (long long)runs[r].skipped,
                      runs[r].skipped == 1 ? "" : "s");
        if (runs[r].out_of_range)
            cli_error("note: %s: %lld value%s beyond +-%g (a corrupted or hand-made log): left out",
                      runs[r].path_text, (long long)runs[r].out_of_range,
                      runs[r].out_of_range == 1 ? "" : "s", PLOT_MAX_VALUE);
        if (runs[r].thinned)
            cli_error("note: %s: series of more than %d points thinned evenly", runs[r].path_text,
                      PLOT_MAX_POINTS);
    }
    rc = CLI_EXIT_OK;
done:
    cli_buf_free(&b);
    figure_free(&g);
    for (int i = 0; i < nfiles; i++)
        plot_run_free(&runs[i]);
    free(out);
    return rc;
}
