/*
 * draw.h - what the two sources of the module tool-plot.so share: the tick choice of
 * tools/plot/axes.c (nice values 1, 2, 5 x 10^k, decades on a log axis, and their labels),
 * used by the layout and drawing of tools/plot/render.c. Nothing here touches cairo.
 */
#ifndef PTC_TOOLS_PLOT_DRAW_H
#define PTC_TOOLS_PLOT_DRAW_H

#include <stddef.h>

/* The most ticks an axis gets (a target asks for fewer). */
#define PTC__PLOT_MAX_TICKS 32

typedef struct ptc__ticks {
    double v[PTC__PLOT_MAX_TICKS]; /* ascending, inside [lo, hi] of the axis */
    int n;
    double step; /* between neighbours (linear); the factor between them (log) */
    int log;
} ptc__ticks;

/* Ticks for the data range [lo, hi] (lo <= hi, both finite), about target of them (2 or more)
 * at multiples of 1, 2 or 5 x 10^k, and never closer than min_step (1 on an axis of steps or
 * epochs, whose values are whole; 0: no minimum). With snap the axis range (*axis_lo, *axis_hi)
 * is widened to the ticks just outside the data, else it is [lo, hi]. */
void ptc__plot_ticks(double lo, double hi, int target, int snap, double min_step, ptc__ticks *t,
                     double *axis_lo, double *axis_hi);

/* Ticks at powers of ten for a logarithmic axis over [lo, hi] (0 < lo <= hi), with the axis
 * widened to the decades around the data. */
void ptc__plot_ticks_log(double lo, double hi, ptc__ticks *t, double *axis_lo, double *axis_hi);

/* The label of tick value v of t: as few decimals as the step needs ("0.25", "40"), thousands
 * as "12k" when every tick is a multiple of 1000, "1e-05" on a log axis. */
void ptc__plot_tick_text(const ptc__ticks *t, double v, char *buf, size_t n);

#endif /* PTC_TOOLS_PLOT_DRAW_H */
