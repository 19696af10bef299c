/*
 * draw.h - what the two sources of the module tool-plot.so share: the tick choice of
 * tools/plot/axes.c (nice values 1, 2, 5 x 10^k, decades on a log axis, and their labels),
 * used by the layout and drawing of tools/plot/render.c. Nothing here touches cairo.
 */
#ifndef PTC_TOOLS_PLOT_DRAW_H
#define PTC_TOOLS_PLOT_DRAW_H

#include <stddef.h>

#include "plot.h"

/* The most ticks an axis gets (a target asks for fewer). */
#define PTC__PLOT_MAX_TICKS PLOT_MAX_TICKS
/* Room for one tick label: "%.17g" of a double is at most 24 bytes. */
#define PTC__PLOT_TICK_TEXT PLOT_TICK_TEXT

/* How an axis' labels are printed, chosen once for all its ticks. */
typedef enum ptc__tick_fmt {
    PTC__TICK_FIXED = 0, /* "%.*f": "0.25" */
    PTC__TICK_INT = 1,   /* "%.0f": "40" */
    PTC__TICK_K = 2,     /* thousands: "12k" */
    PTC__TICK_G = 3      /* "%.*g": "6e+27", "2.5e-07", the decades of a log axis */
} ptc__tick_fmt;

typedef struct ptc__ticks {
    double v[PTC__PLOT_MAX_TICKS]; /* ascending, inside [lo, hi] of the axis */
    int n;
    double step; /* between neighbours (linear); the factor between them (log) */
    int log;
    ptc__tick_fmt fmt; /* the labels' format and its precision, such that no two ticks */
    int prec;          /* read the same */
} ptc__ticks;

/* Ticks for the data range [lo, hi] (any doubles: a range beyond +-1e306 is clamped, one
 * narrower than 1e-290 or 1e-9 of its magnitude widened, NaN read as 0), about target of them (2 or more)
 * at multiples of 1, 2 or 5 x 10^k, and never closer than min_step (1 on an axis of steps or
 * epochs, whose values are whole; 0: no minimum). With snap the axis range (*axis_lo, *axis_hi)
 * is widened to the ticks just outside the data, else it is [lo, hi]. */
void ptc__plot_ticks(double lo, double hi, int target, int snap, double min_step, ptc__ticks *t,
                     double *axis_lo, double *axis_hi);

/* Ticks at powers of ten for a logarithmic axis over [lo, hi] (0 < lo <= hi), with the axis
 * widened to the decades around the data. */
void ptc__plot_ticks_log(double lo, double hi, ptc__ticks *t, double *axis_lo, double *axis_hi);

/* The label of tick value v of t: as few decimals as the step needs ("0.25", "40"), thousands
 * as "12k" when every tick is a multiple of 1000, "%g" with as many digits as tell the ticks
 * apart from 1e6 up and for steps below 1e-4 ("6e+27", "2.5e-07"), "1e-05" on a log axis. */
void ptc__plot_tick_text(const ptc__ticks *t, double v, char *buf, size_t n);

#endif /* PTC_TOOLS_PLOT_DRAW_H */
