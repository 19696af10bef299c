/*
 * axes.c - tick values and their labels for the module tool-plot.so (tools/plot/draw.h): the
 * "nice numbers" of Heckbert (Graphics Gems, 1990): steps of 1, 2 or 5 x 10^k, so that a reader
 * counts along an axis without arithmetic, and ticks at decades on a logarithmic axis.
 *
 * Each tick is computed as k x step from an integer k, never by adding steps, so that the labels
 * of a long axis carry no accumulated rounding ("0.30000000000000004" is printed as "0.3").
 */
#include "draw.h"

#include <math.h>
#include <stdio.h>

/* The 1, 2, 5 or 10 x 10^k nearest to raw (> 0). */
static double nice_step(double raw)
{
    double e = floor(log10(raw));
    double p = pow(10.0, e);
    double f = raw / p;
    double m = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return m * p;
}

void ptc__plot_ticks(double lo, double hi, int target, int snap, double min_step, ptc__ticks *t,
                     double *axis_lo, double *axis_hi)
{
    if (target < 2)
        target = 2;
    if (target > PTC__PLOT_MAX_TICKS - 2)
        target = PTC__PLOT_MAX_TICKS - 2;
    if (!(hi > lo)) {
        /* One value (a single point, a constant learning rate): a range around it. */
        double d = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
        lo -= d;
        hi += d;
    }
    double step = nice_step((hi - lo) / (target - 1));
    if (step < min_step)
        step = min_step;
    double k0, k1;
    for (;;) {
        k0 = snap ? floor(lo / step + 1e-9) : ceil(lo / step - 1e-9);
        k1 = snap ? ceil(hi / step - 1e-9) : floor(hi / step + 1e-9);
        if (k1 - k0 + 1 <= PTC__PLOT_MAX_TICKS)
            break;
        step = nice_step(step * 2.5);
    }
    t->log = 0;
    t->step = step;
    t->n = 0;
    for (double k = k0; k <= k1 && t->n < PTC__PLOT_MAX_TICKS; k++)
        t->v[t->n++] = k * step;
    *axis_lo = snap ? k0 * step : lo;
    *axis_hi = snap ? k1 * step : hi;
}

void ptc__plot_ticks_log(double lo, double hi, ptc__ticks *t, double *axis_lo, double *axis_hi)
{
    double e0 = floor(log10(lo) + 1e-9), e1 = ceil(log10(hi) - 1e-9);
    if (e1 <= e0)
        e1 = e0 + 1;
    /* At most 8 labelled decades: a wider span labels every second (third, ...) one. */
    double every = ceil((e1 - e0) / 7.0);
    t->log = 1;
    t->step = pow(10.0, every);
    t->n = 0;
    for (double e = e0; e <= e1 && t->n < PTC__PLOT_MAX_TICKS; e += every)
        t->v[t->n++] = pow(10.0, e);
    *axis_lo = pow(10.0, e0);
    *axis_hi = pow(10.0, e1);
}

void ptc__plot_tick_text(const ptc__ticks *t, double v, char *buf, size_t n)
{
    if (t->log) {
        snprintf(buf, n, "%g", v);
        return;
    }
    double step = t->step;
    if (fabs(v) < step * 1e-6) {
        snprintf(buf, n, "0"); /* neither "-0", "0k" nor "1.4e-17" */
        return;
    }
    if (step >= 1) {
        if (fmod(step, 1e6) == 0)
            snprintf(buf, n, "%.0fM", v / 1e6);
        else if (fmod(step, 1e3) == 0)
            snprintf(buf, n, "%.0fk", v / 1e3);
        else
            snprintf(buf, n, "%.0f", v);
        return;
    }
    int decimals = (int)ceil(-log10(step) - 1e-9);
    if (decimals < 1)
        decimals = 1;
    if (decimals > 15)
        decimals = 15;
    snprintf(buf, n, "%.*f", decimals, v);
}
