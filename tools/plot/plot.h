/*
 * plot.h - the table that `ptc plot` (tools/cmd_plot.c) and its renderer, the module
 * tool-plot.so (tools/plot/render.c, linked with cairo), share.
 *
 * The program reads the metrics files and hands the module a figure made of numbers and
 * strings only: runs, series of points (x, y) already in the unit they are drawn in (accuracy in
 * percent, x in steps or epochs), and the epoch boundaries. The module lays the figure out
 * (panels, ticks, legend), draws it with cairo into a PNG, SVG or PDF file, and reports where it
 * put each part (plot_layout), which ptc plot --layout-json writes for the tests. The module
 * never reads a metrics file and the program never calls cairo: only `ptc plot` maps cairo
 * (DESIGN.md decision 11; tests/fixtures/check_plugins.sh).
 *
 * The table carries its own version (PLOT_OPS_VERSION), which the program checks before the
 * first call: bump it whenever a struct below changes. libptc checks the plugin ABI of the module
 * (lib/base/plugin.h) and nothing of this table.
 */
#ifndef PTC_TOOLS_PLOT_H
#define PTC_TOOLS_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include <ptc/ptc.h>

#define PLOT_OPS_VERSION 2

/* Caps shared by both sides: the program refuses or thins what exceeds them, the module refuses
 * a figure that does not keep to them. */
#define PLOT_MAX_RUNS   10   /* metrics files overlaid: one colour each */
#define PLOT_MAX_MARKS  4096 /* epoch boundaries over all runs */
#define PLOT_MIN_WIDTH  320  /* pixels (PNG) or points (SVG, PDF) */
#define PLOT_MIN_HEIGHT 240
#define PLOT_MAX_SIDE   8192
#define PLOT_MAX_AREA   (8192 * 4096) /* a PNG's pixels: 128 MiB at 4 bytes each */
#define PLOT_MAX_LEGEND (PLOT_MAX_RUNS + 4)
#define PLOT_MAX_TICKS  32 /* ticks on one axis */
#define PLOT_TICK_TEXT  32 /* bytes of one tick label, its NUL included */

typedef enum plot_format { PLOT_PNG = 1, PLOT_SVG = 2, PLOT_PDF = 3 } plot_format;

/* The panels, top to bottom; a panel without a series is left out. */
typedef enum plot_panel {
    PLOT_LOSS = 0,     /* cross-entropy loss */
    PLOT_ACCURACY = 1, /* percent */
    PLOT_LR = 2,       /* the learning rate, a smaller panel */
    PLOT_NPANELS = 3
} plot_panel;

/* How a series is drawn; the legend names the styles: "train, per step", "train, per epoch",
 * "test, per epoch". */
typedef enum plot_style {
    PLOT_STYLE_STEP = 0,  /* a thin line (the per-step records) */
    PLOT_STYLE_EPOCH = 1, /* a line with round markers (one point per epoch) */
    PLOT_STYLE_TEST = 2,  /* a dashed line with square markers (one point per evaluation) */
    PLOT_NSTYLES = 3
} plot_style;

typedef struct plot_series {
    plot_panel panel;
    plot_style style;
    int run;             /* index into plot_figure.run_names */
    const double *x, *y; /* [n], finite; joined in this order (the records' order of steps) */
    size_t n;            /* 1 or more */
} plot_series;

/* The end of an epoch: a vertical line at x across the panels; run 0's are labelled with their
 * epoch number above the top panel, another run's (where they differ) are drawn in its colour. */
typedef struct plot_mark {
    double x;
    int run;
    int64_t epoch; /* 1, 2, ...: the epoch that ends at x */
} plot_mark;

typedef struct plot_figure {
    int width, height; /* PLOT_MIN_WIDTH.. / PLOT_MIN_HEIGHT..PLOT_MAX_SIDE, width*height <=
                           PLOT_MAX_AREA */
    plot_format format;
    const char *title;                    /* printable UTF-8 (the program escapes file names) */
    int x_epochs;                         /* 0: x counts optimizer steps; 1: x counts epochs */
    int nruns;                            /* 1..PLOT_MAX_RUNS */
    const char *run_names[PLOT_MAX_RUNS]; /* printable UTF-8 */
    const plot_series *series;
    size_t nseries;
    const plot_mark *marks; /* [nmarks], nmarks <= PLOT_MAX_MARKS */
    size_t nmarks;
} plot_figure;

/* A rectangle in the figure's pixels (points for SVG and PDF), y down from the top. */
typedef struct plot_box {
    double x, y, w, h;
} plot_box;

typedef struct plot_legend_entry {
    const char *text; /* a run's name (borrowed from the figure) or a style's (static) */
    int run;          /* the run it names, or -1 for a style's entry */
    int style;        /* the style it shows, or -1 for a run's entry */
    uint32_t rgb;     /* the colour of its sample, 0xRRGGBB */
    plot_box box;     /* sample and text */
} plot_legend_entry;

/* Where the module drew what, for tests and for the program's report. */
typedef struct plot_layout {
    plot_box title;
    int shown[PLOT_NPANELS];
    plot_box panel[PLOT_NPANELS]; /* the plot areas (inside the frame) */
    double x_min, x_max;          /* the x axis, shared by the panels */
    double y_min[PLOT_NPANELS], y_max[PLOT_NPANELS];
    int y_log[PLOT_NPANELS]; /* 1: logarithmic (the learning rate over decades) */
    int nx_ticks, ny_ticks[PLOT_NPANELS];
    /* The labels of those ticks, as drawn. */
    char x_tick_text[PLOT_MAX_TICKS][PLOT_TICK_TEXT];
    char y_tick_text[PLOT_NPANELS][PLOT_MAX_TICKS][PLOT_TICK_TEXT];
    uint32_t run_rgb[PLOT_MAX_RUNS];
    plot_box legend;
    int nlegend;
    plot_legend_entry legend_entry[PLOT_MAX_LEGEND];
    int marks_drawn; /* epoch boundaries drawn (those closer than a few pixels are left out) */
    int marks_labelled;
    char font[64]; /* the family of the font the text was drawn in, as the font file names
                          it ("DejaVu Sans"); "" when cairo cannot tell */
} plot_layout;

typedef struct plot_ops {
    int version; /* PLOT_OPS_VERSION */
    /* Draws fig into the file path, written under a temporary name beside it and renamed, so
     * that path holds a whole figure or is left as it was. layout (may be NULL) receives where
     * each part went. 0, or a negative PTC_E* code with err set: PTC_EINVAL (a figure outside
     * the caps above), PTC_EIO (the file could not be written: the message names it),
     * PTC_ENOMEM. One call at a time. */
    int (*render)(const plot_figure *fig, const char *path, plot_layout *layout, ptc_error *err);
} plot_ops;

#endif /* PTC_TOOLS_PLOT_H */
