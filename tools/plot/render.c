/*
 * render.c - the module tool-plot.so: ptc plot's figure (tools/plot/plot.h) laid out and drawn
 * with cairo into a PNG, SVG or PDF file.
 *
 * The figure is read at a glance: a title, then panels stacked on one x axis (steps, or epochs):
 * the loss, the accuracy in percent, and a smaller panel for the learning rate; the ends of the
 * epochs as dashed vertical lines through every panel, labelled with their numbers above the top
 * one; a legend in a column on the right, outside the data. A run has one colour (matplotlib's
 * "tab10" cycle, so a reader used to PyTorch plots sees familiar colours); a series has a line
 * style: thin for the per-step records, a line with dots per epoch, dashed with squares for the
 * test split. With one run the legend names the styles in the run's colour; with several it names
 * each run by its colour and then the styles in grey.
 *
 * The same drawing code serves the three formats: only the cairo surface differs. Text is real
 * text, drawn with cairo's text API in DejaVu Sans (Debian's fonts-dejavu-core, found through
 * fontconfig); the layout reports the family the text was actually drawn in, so that a missing
 * font is seen rather than silently replaced.
 *
 * Sizes scale with the figure: everything is given for 1200 x 800 and multiplied by the smaller
 * of width/1200 and height/800 (never below 0.6, where text stops being legible).
 *
 * The file is written under a temporary name beside the target and renamed when complete.
 */
#include "config.h"

#include "base/module.h"
#include "draw.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cairo.h>
#include <cairo-pdf.h>
#include <cairo-svg.h>
#ifdef CAIRO_HAS_FT_FONT
#include <cairo-ft.h>
#endif
#include <fontconfig/fontconfig.h>

#define FONT "DejaVu Sans"
/* The longest text drawn: a name is cut (with an ellipsis) to this many bytes before it is
 * measured against the room it has. */
#define MAX_TEXT 512

/* matplotlib's tab10 cycle, with its grey (which the epoch lines and the legend's style samples
 * use) replaced by a dark blue. */
static const uint32_t palette[PLOT_MAX_RUNS] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                                0x8c564b, 0xe377c2, 0x393b79, 0xbcbd22, 0x17becf};
static const char *const style_names[PLOT_NSTYLES] = {"train, per step", "train, per epoch",
                                                      "test, per epoch"};
static const char *const panel_names[PLOT_NPANELS] = {"loss", "accuracy (%)", "learning rate"};
/* Relative heights of the panels that are shown. */
static const double panel_weight[PLOT_NPANELS] = {3.0, 3.0, 1.4};

#define RGB_TEXT    0x222222
#define RGB_FRAME   0x404040
#define RGB_GRID    0xe6e6e6
#define RGB_MARK    0xb0b0b0
#define RGB_SAMPLE  0x555555
#define RGB_LEGEND  0xcccccc
#define RGB_SUBTEXT 0x666666

typedef struct fig {
    const plot_figure *f;
    plot_layout *L;
    cairo_t *cr;
    double s; /* scale against 1200 x 800 */
    double fs_title, fs_label, fs_tick, fs_legend;
    ptc__ticks xt, yt[PLOT_NPANELS];
    int nshown, top, bottom; /* the first and last panel shown */
} fig;

/* ---- small drawing helpers -------------------------------------------------------------------
 */

static void set_rgb(cairo_t *cr, uint32_t rgb, double alpha)
{
    cairo_set_source_rgba(cr, ((rgb >> 16) & 0xff) / 255.0, ((rgb >> 8) & 0xff) / 255.0,
                          (rgb & 0xff) / 255.0, alpha);
}

static double text_width(cairo_t *cr, const char *s, double size)
{
    cairo_text_extents_t te;
    cairo_set_font_size(cr, size);
    cairo_text_extents(cr, s, &te);
    return te.x_advance;
}

/* Draws s with its vertical centre at y; halign 0 puts its left end at x, 0.5 its middle, 1 its
 * right end. The box it took is stored in *box when box is not NULL. */
static void show(cairo_t *cr, const char *s, double x, double y, double size, double halign,
                 plot_box *box)
{
    cairo_font_extents_t fe;
    cairo_set_font_size(cr, size);
    cairo_font_extents(cr, &fe);
    double w = text_width(cr, s, size);
    double x0 = x - halign * w;
    cairo_move_to(cr, x0, y + (fe.ascent - fe.descent) / 2);
    cairo_show_text(cr, s);
    cairo_new_path(cr);
    if (box)
        *box = (plot_box){x0, y - (fe.ascent + fe.descent) / 2, w, fe.ascent + fe.descent};
}

/* s, or as much of it as fits in max_w followed by an ellipsis, in buf[MAX_TEXT + 4]. Cuts fall on
 * UTF-8 character boundaries. */
static const char *fit(cairo_t *cr, const char *s, double size, double max_w, char *buf)
{
    size_t n = strlen(s);
    if (n <= MAX_TEXT && text_width(cr, s, size) <= max_w)
        return s;
    if (n > MAX_TEXT)
        n = MAX_TEXT;
    for (;;) {
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--; /* s[n] continues a character: cut before it */
        memcpy(buf, s, n);
        memcpy(buf + n, "\xe2\x80\xa6", 4); /* U+2026 and the NUL */
        if (n == 0 || text_width(cr, buf, size) <= max_w)
            return buf;
        n--;
    }
}

static double xpix(const fig *c, double x)
{
    const plot_box *b = &c->L->panel[c->top];
    return b->x + (x - c->L->x_min) / (c->L->x_max - c->L->x_min) * b->w;
}

static double ypix(const fig *c, int p, double y)
{
    const plot_layout *L = c->L;
    const plot_box *b = &L->panel[p];
    double lo = L->y_min[p], hi = L->y_max[p];
    if (L->y_log[p]) {
        y = log10(y);
        lo = log10(lo);
        hi = log10(hi);
    }
    return b->y + b->h - (y - lo) / (hi - lo) * b->h;
}

/* ---- ranges and layout -----------------------------------------------------------------------
 */

/* The y axis of panel p: its range (snapped to ticks) and ticks for a panel h pixels high. */
static void y_axis(fig *c, int p, double h)
{
    plot_layout *L = c->L;
    double lo = INFINITY, hi = -INFINITY, pos_lo = INFINITY;
    for (size_t i = 0; i < c->f->nseries; i++) {
        const plot_series *sr = &c->f->series[i];
        if ((int)sr->panel != p)
            continue;
        for (size_t k = 0; k < sr->n; k++) {
            lo = fmin(lo, sr->y[k]);
            hi = fmax(hi, sr->y[k]);
            if (sr->y[k] > 0)
                pos_lo = fmin(pos_lo, sr->y[k]);
        }
    }
    int target = (int)(h / (45 * c->s));
    if (target < 3)
        target = 3;
    /* The learning rate over two decades or more (a step schedule of x0.1 drops) reads on a log
     * axis; a constant or gently decaying one on a linear axis from 0. */
    if (p == PLOT_LR && lo > 0 && lo >= 1e-30 && hi / lo >= 50) {
        L->y_log[p] = 1;
        ptc__plot_ticks_log(pos_lo, hi, &c->yt[p], &L->y_min[p], &L->y_max[p]);
        return;
    }
    /* Room above and below the data so that no marker sits on the frame: 4% of the range, or
     * 5% of the value when it is one value. */
    double pad = hi > lo ? (hi - lo) * 0.04 : fabs(hi) > 0 ? fabs(hi) * 0.05 : 1;
    double dlo = lo - pad, dhi = hi + pad;
    if (lo >= 0 && dlo < 0)
        dlo = 0;
    if (p == PLOT_LR && lo >= 0)
        dlo = 0;
    ptc__plot_ticks(dlo, dhi, target, 1, 0, &c->yt[p], &L->y_min[p], &L->y_max[p]);
    if (p == PLOT_ACCURACY) {
        /* Percent: the axis never reaches past 0 or 100 when the data does not. */
        if (L->y_max[p] > 100 && hi <= 100)
            L->y_max[p] = 100;
        if (L->y_min[p] < 0 && lo >= 0)
            L->y_min[p] = 0;
        int n = 0;
        for (int k = 0; k < c->yt[p].n; k++)
            if (c->yt[p].v[k] >= L->y_min[p] - 1e-9 && c->yt[p].v[k] <= L->y_max[p] + 1e-9)
                c->yt[p].v[n++] = c->yt[p].v[k];
        c->yt[p].n = n;
    }
}

/* The legend's entries: the runs (when several) and the styles drawn. */
static void legend_entries(fig *c)
{
    const plot_figure *f = c->f;
    plot_layout *L = c->L;
    int used[PLOT_NSTYLES] = {0};
    for (size_t i = 0; i < f->nseries; i++)
        used[f->series[i].style] = 1;
    L->nlegend = 0;
    if (f->nruns > 1)
        for (int r = 0; r < f->nruns; r++)
            L->legend_entry[L->nlegend++] =
                (plot_legend_entry){f->run_names[r], r, -1, palette[r], {0, 0, 0, 0}};
    for (int st = 0; st < PLOT_NSTYLES; st++)
        if (used[st])
            L->legend_entry[L->nlegend++] = (plot_legend_entry){
                style_names[st], -1, st, f->nruns > 1 ? RGB_SAMPLE : palette[0], {0, 0, 0, 0}};
}

static int has_labelled_marks(const fig *c)
{
    for (size_t i = 0; i < c->f->nmarks; i++)
        if (c->f->marks[i].run == 0)
            return 1;
    return 0;
}

static void layout(fig *c)
{
    const plot_figure *f = c->f;
    plot_layout *L = c->L;
    cairo_t *cr = c->cr;
    double W = f->width, H = f->height, s = c->s;
    double pad = 12 * s, tick = 5 * s;

    L->title = (plot_box){pad, pad, W - 2 * pad, c->fs_title * 1.5};
    double top = L->title.y + L->title.h + 4 * s;
    if (has_labelled_marks(c))
        top += c->fs_tick * 1.8;
    double bottom = H - pad - c->fs_label * 1.5 - c->fs_tick * 1.5 - tick;
    double gap = c->fs_tick * 1.4;

    double wsum = 0;
    c->nshown = 0;
    c->top = -1;
    for (int p = 0; p < PLOT_NPANELS; p++)
        if (L->shown[p]) {
            wsum += panel_weight[p];
            c->nshown++;
            if (c->top < 0)
                c->top = p;
            c->bottom = p;
        }
    double avail = bottom - top - gap * (c->nshown - 1);
    double h[PLOT_NPANELS] = {0};
    for (int p = 0; p < PLOT_NPANELS; p++)
        if (L->shown[p]) {
            h[p] = avail * panel_weight[p] / wsum;
            y_axis(c, p, h[p]);
        }

    /* The left margin holds the widest y tick label and the rotated axis name. */
    double ylab_w = 0;
    char buf[64];
    for (int p = 0; p < PLOT_NPANELS; p++)
        for (int k = 0; L->shown[p] && k < c->yt[p].n; k++) {
            ptc__plot_tick_text(&c->yt[p], c->yt[p].v[k], buf, sizeof buf);
            ylab_w = fmax(ylab_w, text_width(cr, buf, c->fs_tick));
        }
    double left = pad + c->fs_label * 1.6 + ylab_w + tick + 4 * s;

    /* The legend column: as wide as its longest entry, at most 30% of the figure. */
    legend_entries(c);
    double sample_w = 36 * s, lpad = 10 * s;
    double legend_w = 0;
    for (int i = 0; i < L->nlegend; i++)
        legend_w = fmax(legend_w,
                        sample_w + 8 * s + text_width(cr, L->legend_entry[i].text, c->fs_legend));
    legend_w = fmin(legend_w + 2 * lpad, 0.3 * W);
    double right = W - pad - legend_w - pad;

    double y = top;
    for (int p = 0; p < PLOT_NPANELS; p++)
        if (L->shown[p]) {
            L->panel[p] = (plot_box){left, y, right - left, h[p]};
            y += h[p] + gap;
        }
    double row_h = c->fs_legend * 1.7;
    L->legend = (plot_box){right + pad, top, legend_w, L->nlegend * row_h + 2 * lpad};
    for (int i = 0; i < L->nlegend; i++)
        L->legend_entry[i].box = (plot_box){L->legend.x + lpad, L->legend.y + lpad + i * row_h,
                                            legend_w - 2 * lpad, row_h};

    /* The x axis: from 0 (or the first point, when before it) to the last point and a little
     * room, so that the last marker is not cut by the frame. */
    double xlo = INFINITY, xhi = -INFINITY;
    for (size_t i = 0; i < f->nseries; i++)
        for (size_t k = 0; k < f->series[i].n; k++) {
            xlo = fmin(xlo, f->series[i].x[k]);
            xhi = fmax(xhi, f->series[i].x[k]);
        }
    for (size_t i = 0; i < f->nmarks; i++) {
        xlo = fmin(xlo, f->marks[i].x);
        xhi = fmax(xhi, f->marks[i].x);
    }
    xlo = fmin(xlo, 0);
    if (!(xhi > xlo))
        xhi = xlo + 1;
    int target = (int)((right - left) / (100 * s));
    double axlo, axhi;
    ptc__plot_ticks(xlo, xhi, target < 2 ? 2 : target, 0, 1, &c->xt, &axlo, &axhi);
    L->x_min = xlo;
    L->x_max = xhi + (xhi - xlo) * 0.02;
    L->nx_ticks = c->xt.n;
    for (int k = 0; k < c->xt.n; k++)
        ptc__plot_tick_text(&c->xt, c->xt.v[k], L->x_tick_text[k], PLOT_TICK_TEXT);
    for (int p = 0; p < PLOT_NPANELS; p++) {
        L->ny_ticks[p] = L->shown[p] ? c->yt[p].n : 0;
        for (int k = 0; k < L->ny_ticks[p]; k++)
            ptc__plot_tick_text(&c->yt[p], c->yt[p].v[k], L->y_tick_text[p][k], PLOT_TICK_TEXT);
    }
}

/* ---- drawing ---------------------------------------------------------------------------------
 */

static void grid_and_ticks(fig *c, int p)
{
    cairo_t *cr = c->cr;
    const plot_box *b = &c->L->panel[p];
    double s = c->s, tick = 5 * s;
    char buf[64];
    cairo_set_line_width(cr, 1);
    for (int k = 0; k < c->yt[p].n; k++) {
        double y = ypix(c, p, c->yt[p].v[k]);
        set_rgb(cr, RGB_GRID, 1);
        cairo_move_to(cr, b->x, y);
        cairo_line_to(cr, b->x + b->w, y);
        cairo_stroke(cr);
        set_rgb(cr, RGB_FRAME, 1);
        cairo_move_to(cr, b->x - tick, y);
        cairo_line_to(cr, b->x, y);
        cairo_stroke(cr);
        set_rgb(cr, RGB_TEXT, 1);
        ptc__plot_tick_text(&c->yt[p], c->yt[p].v[k], buf, sizeof buf);
        show(cr, buf, b->x - tick - 3 * s, y, c->fs_tick, 1, NULL);
    }
    for (int k = 0; k < c->xt.n; k++) {
        double x = xpix(c, c->xt.v[k]);
        if (x < b->x - 0.5 || x > b->x + b->w + 0.5)
            continue;
        set_rgb(cr, RGB_GRID, 1);
        cairo_move_to(cr, x, b->y);
        cairo_line_to(cr, x, b->y + b->h);
        cairo_stroke(cr);
        set_rgb(cr, RGB_FRAME, 1);
        cairo_move_to(cr, x, b->y + b->h);
        cairo_line_to(cr, x, b->y + b->h + tick);
        cairo_stroke(cr);
        if (p == c->bottom) {
            set_rgb(cr, RGB_TEXT, 1);
            ptc__plot_tick_text(&c->xt, c->xt.v[k], buf, sizeof buf);
            show(cr, buf, x, b->y + b->h + tick + c->fs_tick * 0.9, c->fs_tick, 0.5, NULL);
        }
    }
    /* The panel's name, turned to read upwards, in the left margin. */
    set_rgb(cr, RGB_TEXT, 1);
    cairo_save(cr);
    cairo_translate(cr, 12 * s + c->fs_label * 0.6, b->y + b->h / 2);
    cairo_rotate(cr, -M_PI / 2);
    show(cr, panel_names[p], 0, 0, c->fs_label, 0.5, NULL);
    cairo_restore(cr);
}

/* The smallest of 1, 2, 5, 10, 20, 50, ... whose count of epochs, at span pixels each, spans at
 * least room pixels. */
static int64_t every_of(double span, double room)
{
    static const int m125[3] = {1, 2, 5};
    for (int64_t dec = 1; dec < INT64_C(1000000000000); dec *= 10)
        for (int k = 0; k < 3; k++)
            if ((double)(m125[k] * dec) * span >= room)
                return m125[k] * dec;
    return INT64_C(1000000000000);
}

/* Pixels per epoch of run r: from step 0 to the end of its last recorded epoch; 0 without
 * marks. */
static double epoch_span(const fig *c, int r)
{
    const plot_mark *last = NULL;
    for (size_t i = 0; i < c->f->nmarks; i++)
        if (c->f->marks[i].run == r && (!last || c->f->marks[i].x > last->x))
            last = &c->f->marks[i];
    if (!last || last->epoch < 1)
        return 0;
    return (xpix(c, last->x) - xpix(c, fmin(0, c->L->x_min))) / (double)last->epoch;
}

/* The ends of the epochs: dashed lines through every panel, and run 0's numbers above the top
 * panel. Where epochs are narrow, every 2nd (5th, 10th, ...) line is drawn, so that they stay 8
 * pixels apart, and every k-th of those lines is numbered, so that the numbers do not touch; a
 * number is put in the middle of its epoch when every epoch has one, else over its line. */
static void epoch_marks(fig *c)
{
    const plot_figure *f = c->f;
    plot_layout *L = c->L;
    cairo_t *cr = c->cr;
    double s = c->s;
    const plot_box *tb = &L->panel[c->top];
    double dash[2] = {3 * s, 3 * s};
    int64_t line_every[PLOT_MAX_RUNS];
    for (int r = 0; r < f->nruns; r++)
        line_every[r] = every_of(epoch_span(c, r), 8 * s);
    cairo_set_dash(cr, dash, 2, 0);
    cairo_set_line_width(cr, fmax(1, s));
    for (size_t i = 0; i < f->nmarks; i++) {
        const plot_mark *m = &f->marks[i];
        double x = xpix(c, m->x);
        if (m->epoch % line_every[m->run] || x < tb->x || x > tb->x + tb->w)
            continue;
        L->marks_drawn++;
        if (m->run == 0)
            set_rgb(cr, RGB_MARK, 1);
        else
            set_rgb(cr, palette[m->run], 0.45);
        for (int p = 0; p < PLOT_NPANELS; p++)
            if (L->shown[p]) {
                cairo_move_to(cr, x, L->panel[p].y);
                cairo_line_to(cr, x, L->panel[p].y + L->panel[p].h);
                cairo_stroke(cr);
            }
    }
    cairo_set_dash(cr, NULL, 0, 0);

    double widest = 0, span = epoch_span(c, 0);
    char buf[32];
    for (size_t i = 0; i < f->nmarks; i++)
        if (f->marks[i].run == 0) {
            snprintf(buf, sizeof buf, "%lld", (long long)f->marks[i].epoch);
            widest = fmax(widest, text_width(cr, buf, c->fs_tick));
        }
    if (!(span > 0))
        return;
    int64_t k = every_of(span * (double)line_every[0], widest + 10 * s);
    int64_t every = k > INT64_MAX / line_every[0] ? INT64_MAX : line_every[0] * k;
    double y = tb->y - c->fs_tick * 1.1;
    set_rgb(cr, RGB_SUBTEXT, 1);
    show(cr, "epoch", tb->x - 5 * s, y, c->fs_tick, 1, NULL);
    double prev = fmin(0, L->x_min);
    for (size_t i = 0; i < f->nmarks; i++) {
        const plot_mark *m = &f->marks[i];
        if (m->run != 0)
            continue;
        double x0 = xpix(c, prev), x1 = xpix(c, m->x);
        prev = m->x;
        if (m->epoch % every || x1 < tb->x || x1 > tb->x + tb->w)
            continue;
        snprintf(buf, sizeof buf, "%lld", (long long)m->epoch);
        show(cr, buf, every == 1 ? (x0 + x1) / 2 : x1, y, c->fs_tick, 0.5, NULL);
        L->marks_labelled++;
    }
}

static void marker(cairo_t *cr, int style, double x, double y, double s)
{
    if (style == PLOT_STYLE_TEST)
        cairo_rectangle(cr, x - 3.5 * s, y - 3.5 * s, 7 * s, 7 * s);
    else
        cairo_arc(cr, x, y, (style == PLOT_STYLE_EPOCH ? 3.5 : 1.8) * s, 0, 2 * M_PI);
    cairo_fill(cr);
}

/* How a style strokes: width, alpha and dash. The per-step lines are thin and light, as noisy
 * as they are, except for the learning rate, which is smooth. */
static void stroke_style(fig *c, int style, int panel, uint32_t rgb)
{
    cairo_t *cr = c->cr;
    double s = c->s;
    double dash[2] = {7 * s, 4 * s};
    if (style == PLOT_STYLE_STEP) {
        cairo_set_line_width(cr, panel == PLOT_LR ? 1.6 * s : fmax(1, 1.1 * s));
        set_rgb(cr, rgb, panel == PLOT_LR ? 1 : 0.55);
    } else {
        cairo_set_line_width(cr, 2 * s);
        set_rgb(cr, rgb, 1);
    }
    cairo_set_dash(cr, dash, style == PLOT_STYLE_TEST ? 2 : 0, 0);
}

static void series(fig *c, const plot_series *sr)
{
    cairo_t *cr = c->cr;
    const plot_box *b = &c->L->panel[sr->panel];
    int log = c->L->y_log[sr->panel];
    cairo_save(cr);
    cairo_rectangle(cr, b->x, b->y, b->w, b->h);
    cairo_clip(cr);
    stroke_style(c, sr->style, sr->panel, palette[sr->run]);
    /* The learning rate is drawn as stairs: a record holds the rate of the steps since the
     * previous one (a schedule changes it at the first step of an epoch), so the line drops at
     * the previous record, not on a slope between the two. */
    int stairs = sr->panel == PLOT_LR;
    int pen = 0;
    double px = 0;
    for (size_t k = 0; k < sr->n; k++) {
        if (log && !(sr->y[k] > 0)) {
            pen = 0; /* a gap where the log axis has no place for the value */
            continue;
        }
        double x = xpix(c, sr->x[k]), y = ypix(c, sr->panel, sr->y[k]);
        if (pen && stairs)
            cairo_line_to(cr, px, y);
        if (pen)
            cairo_line_to(cr, x, y);
        else
            cairo_move_to(cr, x, y);
        pen = 1;
        px = x;
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    /* Markers where they stay apart (one per 3 marker widths), and a dot for a series of one
     * point, which has no line to show it. */
    set_rgb(cr, palette[sr->run], 1);
    if ((sr->style != PLOT_STYLE_STEP && (double)sr->n * 21 * c->s <= b->w) || sr->n == 1)
        for (size_t k = 0; k < sr->n; k++)
            if (!log || sr->y[k] > 0)
                marker(cr, sr->style, xpix(c, sr->x[k]), ypix(c, sr->panel, sr->y[k]), c->s);
    cairo_restore(cr);
}

static void legend(fig *c)
{
    plot_layout *L = c->L;
    cairo_t *cr = c->cr;
    double s = c->s, sample_w = 36 * s;
    char buf[MAX_TEXT + 4];
    if (!L->nlegend)
        return;
    set_rgb(cr, 0xffffff, 1);
    cairo_rectangle(cr, L->legend.x, L->legend.y, L->legend.w, L->legend.h);
    cairo_fill_preserve(cr);
    set_rgb(cr, RGB_LEGEND, 1);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    for (int i = 0; i < L->nlegend; i++) {
        const plot_legend_entry *e = &L->legend_entry[i];
        double y = e->box.y + e->box.h / 2, x = e->box.x;
        if (e->run >= 0) {
            cairo_set_line_width(cr, 3 * s);
            set_rgb(cr, e->rgb, 1);
        } else {
            stroke_style(c, e->style, PLOT_LOSS, e->rgb);
        }
        cairo_move_to(cr, x, y);
        cairo_line_to(cr, x + sample_w, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        set_rgb(cr, e->rgb, 1);
        if (e->style == PLOT_STYLE_EPOCH || e->style == PLOT_STYLE_TEST)
            marker(cr, e->style, x + sample_w / 2, y, s);
        set_rgb(cr, RGB_TEXT, 1);
        double tx = x + sample_w + 8 * s;
        show(cr, fit(cr, e->text, c->fs_legend, e->box.x + e->box.w - tx, buf), tx, y, c->fs_legend,
             0, NULL);
    }
}

/* The family of the font cairo chose for FONT (fontconfig substitutes another when it is
 * missing). */
static void font_family(cairo_t *cr, char *out, size_t n)
{
    out[0] = '\0';
#ifdef CAIRO_HAS_FT_FONT
    cairo_scaled_font_t *sf = cairo_get_scaled_font(cr);
    if (cairo_scaled_font_get_type(sf) != CAIRO_FONT_TYPE_FT)
        return;
    FT_Face face = cairo_ft_scaled_font_lock_face(sf);
    if (face && face->family_name)
        snprintf(out, n, "%s", face->family_name);
    cairo_ft_scaled_font_unlock_face(sf);
#else
    (void)cr;
    (void)n;
#endif
}

static void draw(fig *c)
{
    const plot_figure *f = c->f;
    plot_layout *L = c->L;
    cairo_t *cr = c->cr;
    char buf[MAX_TEXT + 4];

    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, c->fs_label);
    font_family(cr, L->font, sizeof L->font);
    layout(c);

    set_rgb(cr, 0xffffff, 1);
    cairo_paint(cr);
    for (int p = 0; p < PLOT_NPANELS; p++)
        if (L->shown[p])
            grid_and_ticks(c, p);
    epoch_marks(c);
    for (int st = 0; st < PLOT_NSTYLES; st++)
        for (size_t i = 0; i < f->nseries; i++)
            if ((int)f->series[i].style == st)
                series(c, &f->series[i]);
    set_rgb(cr, RGB_FRAME, 1);
    cairo_set_line_width(cr, 1);
    for (int p = 0; p < PLOT_NPANELS; p++)
        if (L->shown[p]) {
            cairo_rectangle(cr, L->panel[p].x, L->panel[p].y, L->panel[p].w, L->panel[p].h);
            cairo_stroke(cr);
        }
    const plot_box *bb = &L->panel[c->bottom];
    set_rgb(cr, RGB_TEXT, 1);
    show(cr, f->x_epochs ? "epoch" : "step", bb->x + bb->w / 2,
         f->height - 12 * c->s - c->fs_label * 0.7, c->fs_label, 0.5, NULL);
    legend(c);

    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    const char *title = fit(cr, f->title, c->fs_title, L->title.w, buf);
    show(cr, title, f->width / 2.0, L->title.y + L->title.h / 2, c->fs_title, 0.5, &L->title);
}

/* ---- the figure's checks and the file ---------------------------------------------------------
 */

static int check_figure(const plot_figure *f, ptc_error *err)
{
    if (f->width < PLOT_MIN_WIDTH || f->width > PLOT_MAX_SIDE || f->height < PLOT_MIN_HEIGHT ||
        f->height > PLOT_MAX_SIDE || (int64_t)f->width * f->height > PLOT_MAX_AREA)
        return ptc__err(err, PTC_EINVAL, "", -1, "plot: a %d x %d figure is outside the limits",
                        f->width, f->height);
    if (f->format < PLOT_PNG || f->format > PLOT_PDF || !f->title || f->nruns < 1 ||
        f->nruns > PLOT_MAX_RUNS || !f->nseries || !f->series || f->nmarks > PLOT_MAX_MARKS ||
        (f->nmarks && !f->marks))
        return ptc__err(err, PTC_EINVAL, "", -1, "plot: the figure is incomplete");
    for (int r = 0; r < f->nruns; r++)
        if (!f->run_names[r])
            return ptc__err(err, PTC_EINVAL, "", -1, "plot: run %d has no name", r);
    for (size_t i = 0; i < f->nseries; i++) {
        const plot_series *sr = &f->series[i];
        if ((unsigned)sr->panel >= PLOT_NPANELS || (unsigned)sr->style >= PLOT_NSTYLES ||
            sr->run < 0 || sr->run >= f->nruns || !sr->n || !sr->x || !sr->y)
            return ptc__err(err, PTC_EINVAL, "", -1, "plot: series %zu is malformed", i);
        for (size_t k = 0; k < sr->n; k++)
            if (!isfinite(sr->x[k]) || !isfinite(sr->y[k]))
                return ptc__err(err, PTC_EINVAL, "", -1, "plot: series %zu has a point at infinity",
                                i);
    }
    for (size_t i = 0; i < f->nmarks; i++)
        if (!isfinite(f->marks[i].x) || f->marks[i].run < 0 || f->marks[i].run >= f->nruns)
            return ptc__err(err, PTC_EINVAL, "", -1, "plot: epoch mark %zu is malformed", i);
    return 0;
}

typedef struct sink {
    FILE *f;
    int errnum;
} sink;

static cairo_status_t sink_write(void *closure, const unsigned char *data, unsigned int length)
{
    sink *k = closure;
    if (fwrite(data, 1, length, k->f) != length) {
        k->errnum = errno ? errno : EIO;
        return CAIRO_STATUS_WRITE_ERROR;
    }
    return CAIRO_STATUS_SUCCESS;
}

static int cairo_fail(ptc_error *err, cairo_status_t st, const char *path, int errnum)
{
    if (st == CAIRO_STATUS_NO_MEMORY)
        return ptc__err(err, PTC_ENOMEM, "", -1, "%s: out of memory drawing the figure", path);
    if (st == CAIRO_STATUS_WRITE_ERROR)
        return ptc__err(err, PTC_EIO, "", -1, "%s: %s", path, strerror(errnum ? errnum : EIO));
    if (st == CAIRO_STATUS_INVALID_STRING)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: a text is not valid UTF-8", path);
    return ptc__err(err, PTC_EIO, "", -1, "%s: cairo: %s", path, cairo_status_to_string(st));
}

/* cairo keeps the fonts it made and fontconfig its configuration until the process ends, as
 * caches: a leak checker (LeakSanitizer in the sanitizer build, valgrind) reports them after
 * every figure. Nothing of cairo is alive when this runs, and the next figure makes them again. */
static void release_caches(void)
{
    cairo_debug_reset_static_data();
    FcFini();
}

static int render(const plot_figure *f, const char *path, plot_layout *out, ptc_error *err)
{
    ptc__err_clear(err);
    if (!f || !path || !*path)
        return ptc__err(err, PTC_EINVAL, "", -1, "plot: missing argument");
    int rc = check_figure(f, err);
    if (rc < 0)
        return rc;
    plot_layout L;
    memset(&L, 0, sizeof L);
    for (size_t i = 0; i < f->nseries; i++)
        L.shown[f->series[i].panel] = 1;
    for (int r = 0; r < f->nruns; r++)
        L.run_rgb[r] = palette[r];

    cairo_surface_t *sf = NULL;
    cairo_t *cr = NULL;
    sink k = {NULL, 0};
    int drew = 0; /* cairo was called: its caches are to be released */
    size_t plen = strlen(path);
    char *tmp = ptc__malloc(plen + 8);
    if (!tmp)
        return ptc__err(err, PTC_ENOMEM, "", -1, "plot: out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".XXXXXX", 8);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: %s", path, strerror(errno));
        ptc__free(tmp);
        return rc;
    }
    if (!(k.f = fdopen(fd, "wb"))) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: %s", path, strerror(errno));
        close(fd);
        goto fail;
    }

    drew = 1;
    if (f->format == PLOT_PNG) {
        sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, f->width, f->height);
    } else if (f->format == PLOT_SVG) {
        sf = cairo_svg_surface_create_for_stream(sink_write, &k, f->width, f->height);
#if CAIRO_VERSION >= CAIRO_VERSION_ENCODE(1, 16, 0)
        cairo_svg_surface_set_document_unit(sf, CAIRO_SVG_UNIT_PX);
#endif
    } else {
        sf = cairo_pdf_surface_create_for_stream(sink_write, &k, f->width, f->height);
#if CAIRO_VERSION >= CAIRO_VERSION_ENCODE(1, 16, 0)
        cairo_pdf_surface_set_metadata(sf, CAIRO_PDF_METADATA_TITLE, f->title);
        cairo_pdf_surface_set_metadata(sf, CAIRO_PDF_METADATA_CREATOR, "ptc plot");
#endif
    }
    cr = cairo_create(sf);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        rc = cairo_fail(err, cairo_status(cr), path, k.errnum);
        goto fail;
    }
    fig c = {.f = f, .L = &L, .cr = cr};
    c.s = fmax(0.6, fmin(f->width / 1200.0, f->height / 800.0));
    c.fs_title = 20 * c.s;
    c.fs_label = 15 * c.s;
    c.fs_tick = 13 * c.s;
    c.fs_legend = 14 * c.s;
    draw(&c);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    cr = NULL;
    if (st == CAIRO_STATUS_SUCCESS) {
        if (f->format == PLOT_PNG)
            st = cairo_surface_write_to_png_stream(sf, sink_write, &k);
        else
            cairo_surface_finish(sf);
        if (st == CAIRO_STATUS_SUCCESS)
            st = cairo_surface_status(sf);
    }
    if (st != CAIRO_STATUS_SUCCESS) {
        rc = cairo_fail(err, st, path, k.errnum);
        goto fail;
    }
    cairo_surface_destroy(sf);
    sf = NULL;
    release_caches();
    drew = 0;
    /* The figure is a file like any other: the mode that umask leaves of 0666. */
    mode_t mask = umask(0);
    umask(mask);
    int bad = fchmod(fileno(k.f), 0666 & ~mask) != 0;
    bad |= fflush(k.f) != 0;
    int e = errno;
    bad |= fclose(k.f) != 0;
    k.f = NULL;
    if (bad) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: %s", path, strerror(e ? e : errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: %s", path, strerror(errno));
        goto fail;
    }
    ptc__free(tmp);
    if (out)
        *out = L;
    return 0;

fail:
    if (cr)
        cairo_destroy(cr);
    if (sf)
        cairo_surface_destroy(sf);
    if (drew)
        release_caches();
    if (k.f)
        fclose(k.f);
    unlink(tmp);
    ptc__free(tmp);
    return rc;
}

static const plot_ops ops = {.version = PLOT_OPS_VERSION, .render = render};

static const ptc__plugin desc = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_TOOL,
    .name = "plot",
    .summary = "ptc plot's figures: PNG, SVG and PDF (cairo)",
    .experimental = 0,
    .ops = &ops,
    .probe = NULL,
};

PTC__DEFINE_PLUGIN_ENTRY(desc)
