/*
 * plot_int.h - between `ptc plot`'s command (tools/cmd_plot.c) and its reader of metrics files
 * (tools/plot_read.c): a run is one metrics file, its numbers kept as series of points.
 *
 * Bounded memory whatever the file holds: a line is at most PLOT_MAX_LINE bytes, and a series
 * keeps at most PLOT_MAX_POINTS points: when it is full, every second point is dropped and from
 * then on only every second new one is kept (then every fourth, ...), so that a long run is
 * thinned evenly rather than cut (a figure 1200 pixels wide shows no more anyway).
 */
#ifndef PTC_TOOLS_PLOT_INT_H
#define PTC_TOOLS_PLOT_INT_H

#include <stddef.h>
#include <stdint.h>

#define PLOT_MAX_LINE   65536 /* bytes of one JSON line, its '\n' left out */
#define PLOT_MAX_POINTS 32768 /* kept per series */

typedef struct plot_pt {
    double step;  /* the global optimizer step of the record */
    double epoch; /* the epoch of an epoch or eval record (1, 2, ...); unused for step records */
    double y;     /* the value, finite */
} plot_pt;

typedef struct plot_ser {
    plot_pt *p; /* [n], step ascending */
    size_t n, cap;
    uint64_t seen, stride; /* points offered; one in stride is kept */
} plot_ser;

/* The series of one run. Accuracies are kept as the file has them (0..1). */
enum {
    SER_STEP_LOSS, /* "step" records */
    SER_STEP_ACC,
    SER_STEP_LR,
    SER_EPOCH_LOSS, /* "epoch" records */
    SER_EPOCH_ACC,
    SER_EPOCH_LR,
    SER_TEST_LOSS, /* "eval" records */
    SER_TEST_ACC,
    SER_ENDS, /* the step each epoch ends at (every "epoch" record; y is the epoch) */
    SER_COUNT
};

/* The largest magnitude plotted: a value beyond it (only a hand-made or corrupted file holds
 * one: float32 ends at 3.4e38) is left out with a note, so that an axis' range, its padding and
 * the accuracy in percent (x 100) stay far from overflow. */
#define PLOT_MAX_VALUE 1e300

typedef struct plot_run {
    char *name;      /* the file's base name, escaped for a terminal and for the figure */
    char *path_text; /* the path, escaped, for messages */
    plot_ser ser[SER_COUNT];
    int64_t lines;        /* lines read */
    int64_t records;      /* records of the kinds plotted (step, epoch, eval) */
    int64_t skipped;      /* points left out for a value that is not a finite number */
    int64_t out_of_range; /* points left out for a value beyond +-PLOT_MAX_VALUE */
    int thinned;          /* 1 when a series reached PLOT_MAX_POINTS */
} plot_run;

/* Reads the metrics file path into run (zeroed first). Messages go to stderr ("ptc plot:
 * FILE:LINE: ..."). Returns an exit status (enum cli_exit): CLI_EXIT_IO when the file cannot be
 * read, CLI_EXIT_REFUSED when a line is not a record of the format (the message names its line),
 * when the file holds no record to plot, CLI_EXIT_NOMEM. run is to be freed with plot_run_free
 * whatever it returns. */
int plot_run_read(const char *path, plot_run *run);
void plot_run_free(plot_run *run);

/* The epoch (fractional: 2.5 is the middle of epoch 3) at which step falls, from the ends of the
 * epochs that the run recorded; the steps after the last recorded end are placed with the
 * length of the last epoch. 0 when the run recorded no epoch end. */
int plot_step_to_epoch(const plot_run *run, double step, double *epoch);

#endif /* PTC_TOOLS_PLOT_INT_H */
