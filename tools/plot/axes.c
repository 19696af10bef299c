/*
 * axes.c - tick values and their labels for the module tool-plot.so (tools/plot/draw.h): the
 * "nice numbers" of Heckbert (Graphics Gems, 1990): steps of 1, 2 or 5 x 10^k, so that a reader
 * counts along an axis without arithmetic, and ticks at decades on a logarithmic axis.
 *
 * Each tick is computed as k x step from an integer k, never by adding steps, so that the labels
 * of a long axis carry no accumulated rounding ("0.30000000000000004" is printed as "0.3").
 *
 * Every input ends in bounded time with a finite, non-zero step: a range is first clamped to
 * +-PTC__PLOT_MAX_ABS (so that its width, its padding and k x step cannot overflow) and widened
 * to at least PTC__PLOT_MIN_SPAN and 1e-9 of its magnitude (a spread below that is below what
 * labels of 10 significant digits can tell apart, and a subnormal width has no nice step).
 */
#include "draw.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PTC__PLOT_MAX_ABS  1e306  /* |axis end|: width 2e306 and k x step stay finite */
#define PTC__PLOT_MIN_SPAN 1e-290 /* the narrowest axis: its step is a normal double */
#define PTC__PLOT_REL_SPAN 1e-9   /* the narrowest axis relative to its magnitude */
#define PTC__PLOT_ROUNDS   64     /* widenings of the step; each one at least doubles it */

/* The 1, 2, 5 or 10 x 10^k nearest to raw (> 0, normal), or raw itself where that is not
 * finite and non-zero. */
static double nice_step(double raw)
{
    double e = floor(log10(raw));
    double p = pow(10.0, e);
    double f = raw / p;
    double m = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    double s = m * p;
    return isfinite(s) && s > 0 ? s : raw;
}

static double clamp_abs(double v)
{
    if (isnan(v))
        return 0;
    return fmax(-PTC__PLOT_MAX_ABS, fmin(PTC__PLOT_MAX_ABS, v));
}

/* Chooses how the labels of t are printed (t->fmt, t->prec) so that no two ticks read the same;
 * where even 17 significant digits cannot tell them apart (never, after the widening above, but
 * the rule is kept total), every second tick is dropped until they can. */
static void choose_format(ptc__ticks *t)
{
    double mag = 0;
    for (int k = 0; k < t->n; k++)
        mag = fmax(mag, fabs(t->v[k]));
    if (t->log) {
        t->fmt = PTC__TICK_G;
        t->prec = 6;
    } else if (mag >= 1e6 || t->step < 1e-4) {
        /* "6e+27" rather than 28 digits of float noise, "2.5e-07" rather than 0.00000025. */
        t->fmt = PTC__TICK_G;
        int p = (int)(floor(log10(fmax(mag, t->step))) - floor(log10(t->step))) + 1;
        t->prec = p < 1 ? 1 : p > 17 ? 17 : p;
    } else if (t->step >= 1) {
        t->fmt = fmod(t->step, 1e3) == 0 && mag >= 1e3 ? PTC__TICK_K : PTC__TICK_INT;
        t->prec = 0;
    } else {
        t->fmt = PTC__TICK_FIXED;
        int d = (int)ceil(-log10(t->step) - 1e-9);
        t->prec = d < 1 ? 1 : d > 15 ? 15 : d;
    }
    for (;;) {
        int dup = 0;
        char a[PTC__PLOT_TICK_TEXT], b[PTC__PLOT_TICK_TEXT];
        for (int k = 1; k < t->n && !dup; k++) {
            ptc__plot_tick_text(t, t->v[k - 1], a, sizeof a);
            ptc__plot_tick_text(t, t->v[k], b, sizeof b);
            dup = strcmp(a, b) == 0;
        }
        if (!dup)
            return;
        if (t->fmt != PTC__TICK_INT && t->fmt != PTC__TICK_K && t->prec < 17) {
            t->prec++;
            continue;
        }
        if (t->n <= 1)
            return;
        int n = 0;
        for (int k = 0; k < t->n; k += 2)
            t->v[n++] = t->v[k];
        t->n = n;
        t->fmt = PTC__TICK_G;
        t->prec = 17;
    }
}

void ptc__plot_ticks(double lo, double hi, int target, int snap, double min_step, ptc__ticks *t,
                     double *axis_lo, double *axis_hi)
{
    if (target < 2)
        target = 2;
    if (target > PTC__PLOT_MAX_TICKS - 2)
        target = PTC__PLOT_MAX_TICKS - 2;
    lo = clamp_abs(lo);
    hi = clamp_abs(hi);
    if (hi < lo) {
        double x = lo;
        lo = hi;
        hi = x;
    }
    double mag = fmax(fabs(lo), fabs(hi));
    if (!(hi > lo)) {
        /* One value (a single point, a constant learning rate): a range around it. */
        double d = mag > 0 ? mag * 0.1 : 1.0;
        lo -= d;
        hi += d;
        lo = clamp_abs(lo);
        hi = clamp_abs(hi);
    }
    double min_w = fmax(PTC__PLOT_MIN_SPAN, mag * PTC__PLOT_REL_SPAN);
    if (hi - lo < min_w) {
        /* A spread below what a label can show (1 and 1 + 2^-52, a subnormal value). */
        int nonneg = lo >= 0;
        double mid = lo / 2 + hi / 2;
        lo = mid - min_w / 2;
        hi = mid + min_w / 2;
        if (nonneg && lo < 0) {
            lo = 0;
            hi = min_w;
        }
    }
    double step = nice_step((hi - lo) / (target - 1));
    if (min_step > 0 && step < min_step)
        step = min_step;
    double k0 = 0, k1 = 0;
    for (int round = 0; round < PTC__PLOT_ROUNDS; round++) {
        k0 = snap ? floor(lo / step + 1e-9) : ceil(lo / step - 1e-9);
        k1 = snap ? ceil(hi / step - 1e-9) : floor(hi / step + 1e-9);
        if (k1 - k0 + 1 <= PTC__PLOT_MAX_TICKS)
            break;
        step = nice_step(step * 2.5);
    }
    if (!(k1 - k0 + 1 <= PTC__PLOT_MAX_TICKS) || !(k1 >= k0)) {
        /* Not reached with the range above; kept so that no input loops or draws nothing. */
        step = hi - lo;
        k0 = snap ? floor(lo / step) : ceil(lo / step);
        k1 = k0 + 1;
    }
    t->log = 0;
    t->step = step;
    t->n = 0;
    for (double k = k0; k <= k1 && t->n < PTC__PLOT_MAX_TICKS; k++)
        t->v[t->n++] = k * step;
    *axis_lo = snap ? k0 * step : lo;
    *axis_hi = snap ? k1 * step : hi;
    choose_format(t);
}

void ptc__plot_ticks_log(double lo, double hi, ptc__ticks *t, double *axis_lo, double *axis_hi)
{
    /* Decades -300..300 at most: pow(10, e) of each is a normal, finite double. */
    double e0 = lo > 0 && isfinite(lo) ? floor(log10(lo) + 1e-9) : -300;
    double e1 = hi > 0 && isfinite(hi) ? ceil(log10(hi) - 1e-9) : 300;
    e0 = fmax(-300, fmin(299, e0));
    e1 = fmax(-300, fmin(300, e1));
    if (e1 <= e0)
        e1 = e0 + 1;
    /* At most 8 labelled decades: a wider span labels every second (third, ...) one. */
    double every = ceil((e1 - e0) / 7.0);
    t->log = 1;
    t->step = pow(10.0, fmin(every, 300));
    t->n = 0;
    for (double e = e0; e <= e1 && t->n < PTC__PLOT_MAX_TICKS; e += every)
        t->v[t->n++] = pow(10.0, e);
    *axis_lo = pow(10.0, e0);
    *axis_hi = pow(10.0, e1);
    choose_format(t);
}

void ptc__plot_tick_text(const ptc__ticks *t, double v, char *buf, size_t n)
{
    if (!t->log && fabs(v) < t->step * 1e-6) {
        snprintf(buf, n, "0"); /* neither "-0", "0k" nor "1.4e-17" */
        return;
    }
    switch (t->fmt) {
    case PTC__TICK_G:
        snprintf(buf, n, "%.*g", t->prec, v);
        break;
    case PTC__TICK_K:
        snprintf(buf, n, "%.0fk", v / 1e3);
        break;
    case PTC__TICK_INT:
        snprintf(buf, n, "%.0f", v);
        break;
    default:
        snprintf(buf, n, "%.*f", t->prec, v);
        break;
    }
}
