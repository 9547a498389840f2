/*
 * search_svg.c: the layout space of `planc search --svg` as a scatter plot.
 *
 * x is the peak memory per GPU (GiB, the largest stage), y the predicted
 * step time (ms). Every evaluated layout is a point; those that do not fit
 * are grey, and lie beyond the device-memory line (dashed, the region past
 * it shaded). The Pareto front of the feasible layouts (no other feasible
 * layout is both faster and smaller) is joined by a line, and the best
 * layout is ringed and labelled. An axis whose range spans more than 30x
 * is drawn in log scale, since a search mixes layouts that differ by
 * orders of magnitude in memory (ZeRO-3 versus replicated states).
 *
 * The plot only draws the numbers it is given; the search computes them.
 */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "planner/layout.h"

#define PW 960.0
#define PH 600.0
#define ML 84.0
#define MR 36.0
#define MT 56.0
#define MB 64.0
#define GIB 1073741824.0
#define SEARCH_TOOLTIP_MAX 20000   /* points: above this, no <title> per point */

typedef struct {
    double lo, hi;
    bool   log;
} Axis;

/* Fraction of the way along the axis of value v. */
static double frac(const Axis *a, double v)
{
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

/* An axis over [lo, hi] with some margin; log when the range is wide. */
static Axis axis_over(double lo, double hi)
{
    Axis a;
    if (!(hi > 0)) hi = 1;
    if (!(lo > 0) || lo > hi) lo = hi;
    a.log = hi / lo > 30;
    if (a.log) { a.lo = lo / 1.3; a.hi = hi * 1.3; }
    else {
        double pad = (hi - lo) * 0.08 + hi * 0.02;
        a.lo = fmax(0, lo - pad);
        a.hi = hi + pad;
        if (lo - pad < hi * 0.25) a.lo = 0;   /* start at zero when close to it */
    }
    return a;
}

static double xpx(const Axis *a, double v) { return ML + frac(a, v) * (PW - ML - MR); }
static double ypx(const Axis *a, double v) { return PH - MB - frac(a, v) * (PH - MT - MB); }

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* Tick values of an axis: 1-2-5 steps (linear) or 1-2-5 per decade (log). */
static int ticks(const Axis *a, double *out, int max)
{
    int n = 0;
    if (a->log) {
        for (double d = pow(10, floor(log10(a->lo))); d <= a->hi && n < max; d *= 10)
            for (int m = 0; m < 3 && n < max; m++) {
                double v = d * (m == 0 ? 1 : m == 1 ? 2 : 5);
                if (v >= a->lo && v <= a->hi) out[n++] = v;
            }
        return n;
    }
    double raw = (a->hi - a->lo) / 8, mag = pow(10, floor(log10(raw))), r = raw / mag;
    double step = (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
    for (double v = ceil(a->lo / step) * step; v <= a->hi * (1 + 1e-9) && n < max; v += step)
        out[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}

/* A tick label: plain digits up to 10^7, then %g. */
static void tick_text(char *buf, size_t len, double v)
{
    if (v >= 1e4 && v < 1e7) snprintf(buf, len, "%.0f", v);
    else snprintf(buf, len, "%g", v);
}

/* Grid, ticks, frame and axis titles (the unit and whether log is used). */
static void axes(FILE *f, const Axis *x, const Axis *y, const char *yunit)
{
    char tl[32];
    double t[64];
    int n = ticks(x, t, 64);
    for (int i = 0; i < n; i++) {
        double px = xpx(x, t[i]);
        fprintf(f, "<line class=\"grid\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>"
                   "<text class=\"tx\" x=\"%.2f\" y=\"%.1f\">%s</text>\n",
                px, MT, px, PH - MB + 4, px, PH - MB + 17, (tick_text(tl, sizeof tl, t[i]), tl));
    }
    n = ticks(y, t, 64);
    for (int i = 0; i < n; i++) {
        double py = ypx(y, t[i]);
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\"/>"
                   "<text class=\"ty\" x=\"%.1f\" y=\"%.2f\">%s</text>\n",
                ML - 4, py, PW - MR, py, ML - 7, py + 3.5, (tick_text(tl, sizeof tl, t[i]), tl));
    }
    fprintf(f, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n",
            ML, MT, PW - ML - MR, PH - MT - MB);
    fprintf(f, "<text class=\"lab\" x=\"%.1f\" y=\"%.1f\">peak memory per GPU (GiB%s)</text>\n",
            (ML + PW - MR) / 2, PH - 22, x->log ? ", log scale" : "");
    fprintf(f, "<text class=\"lab\" transform=\"translate(20 %.1f) rotate(-90)\">"
               "predicted step time (%s%s)</text>\n", (MT + PH - MB) / 2, yunit,
            y->log ? ", log scale" : "");
}

static bool drawable(const TrPoint *p)
{
    return isfinite(p->step_time) && p->step_time > 0 && isfinite(p->peak_memory) && p->peak_memory > 0;
}

typedef struct {
    double mem, time;
    int    idx;
} Ranked;

static int by_memory(const void *a, const void *b)
{
    const Ranked *x = a, *y = b;
    if (x->mem != y->mem) return x->mem < y->mem ? -1 : 1;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->idx - y->idx;
}

/* The Pareto front of the feasible points, by memory: indices into pts. */
static int pareto(const TrSearchPlot *s, int *front)
{
    Ranked *r = malloc(sizeof *r * (size_t)(s->n ? s->n : 1));
    if (!r) return 0;
    int n = 0, m = 0;
    for (int i = 0; i < s->n; i++)
        if (s->points[i].feasible && s->points[i].exact && drawable(&s->points[i]))
            r[n++] = (Ranked){ s->points[i].peak_memory, s->points[i].step_time, i };
    qsort(r, (size_t)n, sizeof *r, by_memory);
    double best = INFINITY;
    for (int i = 0; i < n; i++)
        if (r[i].time < best) {
            best = r[i].time;
            front[m++] = r[i].idx;
        }
    free(r);
    return m;
}

bool tr_write_search_svg(FILE *f, const TrSearchPlot *s)
{
    double xlo = INFINITY, xhi = 0, ylo = INFINITY, yhi = 0;
    int nf = 0, shown = 0;
    bool tooltips = s->n <= SEARCH_TOOLTIP_MAX;
    for (int i = 0; i < s->n; i++) {
        const TrPoint *p = &s->points[i];
        if (!drawable(p)) continue;
        shown++;
        nf += p->feasible;
        xlo = fmin(xlo, p->peak_memory / GIB); xhi = fmax(xhi, p->peak_memory / GIB);
        ylo = fmin(ylo, p->step_time); yhi = fmax(yhi, p->step_time);
    }
    /* the y unit: ms, or s once steps reach 10 s */
    double ys = yhi >= 10 ? 1 : 1e3;
    const char *yunit = ys == 1 ? "s" : "ms";
    ylo *= ys;
    yhi *= ys;
    if (s->memory > 0) { xlo = fmin(xlo, s->memory / GIB); xhi = fmax(xhi, s->memory / GIB); }
    Axis x = axis_over(xlo, xhi), y = axis_over(ylo, yhi);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\">\n<style>\n"
               "text{font-family:Helvetica,Arial,sans-serif;fill:#222}\n"
               ".title{font-size:15px;font-weight:bold}.sub{font-size:12px}\n"
               ".tx{font-size:10px;text-anchor:middle}.ty{font-size:10px;text-anchor:end}\n"
               ".lab{font-size:12px;text-anchor:middle}.note{font-size:11px}\n"
               ".grid{stroke:#e4e4e4;stroke-width:.6}.frame{fill:none;stroke:#555}\n"
               ".beyond{fill:#f0f0f0}.memline{stroke:#e15759;stroke-width:1.2;stroke-dasharray:6 4}\n"
               ".ok{fill:#4e79a7;fill-opacity:.75}.no{fill:#b8b8b8;fill-opacity:.8}\n"
               ".bound{fill-opacity:0;stroke-width:.8}.ok.bound{stroke:#4e79a7}.no.bound{stroke:#b8b8b8}\n"
               ".front{fill:none;stroke:#f28e2b;stroke-width:1.8}\n"
               ".best{fill:none;stroke:#e15759;stroke-width:2}\n"
               ".bestlab{font-size:12px;font-weight:bold;paint-order:stroke;stroke:#fff;stroke-width:3px}\n"
               "</style>\n<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n",
            PW, PH, PW, PH, PW, PH);
    fputs("<text class=\"title\" x=\"12\" y=\"22\">", f);
    esc(f, s->title ? s->title : "layout search");
    fprintf(f, "</text>\n<text class=\"sub\" x=\"12\" y=\"40\">%d layouts, %d fit (grey: does not "
               "fit; hollow: ruled out by a bound, drawn at the bound); orange: Pareto front</text>\n",
            shown, nf);
    if (s->memory > 0) {
        double mx = xpx(&x, s->memory / GIB);
        fprintf(f, "<rect class=\"beyond\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"/>\n",
                mx, MT, fmax(0, PW - MR - mx), PH - MT - MB);
    }
    axes(f, &x, &y, yunit);
    if (s->memory > 0) {
        double mx = xpx(&x, s->memory / GIB);
        fprintf(f, "<line class=\"memline\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>"
                   "<text class=\"note\" x=\"%.2f\" y=\"%.1f\">device memory %.3g GiB</text>\n",
                mx, MT, mx, PH - MB, mx + 4, MT + 12, s->memory / GIB);
    }
    /* infeasible first, so the feasible ones are drawn on top */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n; i++) {
            const TrPoint *p = &s->points[i];
            if (!drawable(p) || p->feasible != (pass == 1)) continue;
            fprintf(f, "<circle class=\"pt %s%s\" cx=\"%.2f\" cy=\"%.2f\" r=\"3\"%s",
                    p->feasible ? "ok" : "no", p->exact ? "" : " bound",
                    xpx(&x, p->peak_memory / GIB), ypx(&y, p->step_time * ys),
                    tooltips ? "><title>" : "/>\n");
            if (!tooltips) continue;
            esc(f, p->label);
            fprintf(f, ": %s%.3f ms, %.2f GiB%s</title></circle>\n", p->exact ? "" : "at least ",
                    p->step_time * 1e3, p->peak_memory / GIB, p->feasible ? "" : " (does not fit)");
        }
    int *front = malloc(sizeof(int) * (size_t)(s->n ? s->n : 1));
    if (!front) return false;
    int m = pareto(s, front);
    if (m > 0) {
        fputs("<polyline class=\"front\" points=\"", f);
        for (int i = 0; i < m; i++) {
            const TrPoint *p = &s->points[front[i]];
            fprintf(f, "%s%.2f,%.2f", i ? " " : "", xpx(&x, p->peak_memory / GIB), ypx(&y, p->step_time * ys));
        }
        fputs("\"/>\n", f);
    }
    /* the caller's choice, else the fastest fitting layout (the front's last) */
    int best = s->best >= 0 && s->best < s->n && drawable(&s->points[s->best]) ? s->best
             : m > 0 ? front[m - 1] : -1;
    free(front);
    if (best >= 0) {
        const TrPoint *p = &s->points[best];
        double bx = xpx(&x, p->peak_memory / GIB), by = ypx(&y, p->step_time * ys);
        char lab[160], num[64];
        snprintf(lab, sizeof lab, "best: %s", p->label ? p->label : "");
        snprintf(num, sizeof num, "%.4g %s per step, %.3g GiB per GPU", p->step_time * ys, yunit,
                 p->peak_memory / GIB);
        /* beside the point where it fits (right, else left), else in the top-left corner */
        double w = fmax(strlen(lab), strlen(num)) * 6.6, lx = bx + 10, ly = by - 22;
        const char *anchor = "start";
        if (lx + w > PW - MR) { lx = bx - 10; anchor = "end"; }
        if (lx - w < ML && anchor[0] == 'e') { lx = ML + 8; ly = MT + 18; anchor = "start"; }
        if (ly < MT + 14) ly = by + 22;
        fprintf(f, "<circle class=\"best\" cx=\"%.2f\" cy=\"%.2f\" r=\"7\"/>"
                   "<text class=\"bestlab\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\">", bx, by, lx, ly, anchor);
        esc(f, lab);
        fprintf(f, "<tspan x=\"%.2f\" dy=\"15\">%s</tspan></text>\n", lx, num);
    }
    fputs("</svg>\n", f);
    return !ferror(f);
}

/* "dp 8 tp 2 pp 4 z1 mb 2 1f1b" (+ chunks, recomputation, sp when set). */
static void layout_label(const Layout *l, char *buf, size_t len)
{
    int n = snprintf(buf, len, "dp %d tp %d pp %d z%d mb %lld %s", l->dp, l->tp, l->pp, l->zero,
                     (long long)l->micro_batch, plan_schedule_name(l->schedule));
    if (n > 0 && (size_t)n < len && l->chunks > 1)
        n += snprintf(buf + n, len - (size_t)n, " v%d", l->chunks);
    if (n > 0 && (size_t)n < len && l->recompute > RECOMPUTE_NONE)
        n += snprintf(buf + n, len - (size_t)n, " rc %s", plan_recompute_name(l->recompute));
    if (n > 0 && (size_t)n < len && l->sequence_parallel == 1)
        snprintf(buf + n, len - (size_t)n, " sp");
}

static bool same_layout(const Layout *a, const Layout *b)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->zero == b->zero &&
           a->micro_batch == b->micro_batch && a->global_batch == b->global_batch &&
           a->schedule == b->schedule && a->chunks == b->chunks && a->recompute == b->recompute &&
           a->sequence_parallel == b->sequence_parallel;
}

#define LABEL_LEN 64

/* The points of a search: every recorded layout, else the top results. */
static int search_points(const PlanSearch *s, TrPoint *pt, char *labels, int *best)
{
    int n = 0;
    *best = -1;
    bool rec = s->n_points > 0;
    int64_t total = rec ? s->n_points : s->n_results;
    for (int64_t i = 0; i < total; i++, n++) {
        const Layout *l;
        if (rec) {
            const PlanSearchPoint *q = &s->points[i];
            l = &q->layout;
            pt[n] = (TrPoint){ q->step_time, (double)q->peak_memory, q->feasible, q->exact, NULL };
        } else {
            const PlanEval *e = &s->results[i];
            l = &e->layout;
            pt[n] = (TrPoint){ e->step_time, (double)e->peak_memory, e->feasible, true, NULL };
        }
        layout_label(l, labels + (size_t)n * LABEL_LEN, LABEL_LEN);
        pt[n].label = labels + (size_t)n * LABEL_LEN;
        if (*best < 0 && s->n_results > 0 && same_layout(l, &s->results[0].layout)) *best = n;
    }
    return n;
}

int tr_search_svg(const char *path, const Plan *p, const PlanSearch *s)
{
    int64_t total = s->n_points > 0 ? s->n_points : s->n_results;
    TrPoint *pt = malloc(sizeof *pt * (size_t)(total > 0 ? total : 1));
    char *labels = malloc((size_t)LABEL_LEN * (size_t)(total > 0 ? total : 1));
    if (!pt || !labels) {
        free(pt); free(labels);
        fprintf(stderr, "planc: error: out of memory drawing '%s'\n", path);
        return 2;
    }
    char title[256];
    snprintf(title, sizeof title, "%s on %s (%lld x %lld GPUs): the layout space",
             p->model.name ? p->model.name : "model", p->cluster.name ? p->cluster.name : "cluster",
             (long long)p->cluster.nodes, (long long)p->cluster.gpus_per_node);
    TrSearchPlot plot = { title, (double)p->cluster.device.memory, 0, pt, -1 };
    plot.n = search_points(s, pt, labels, &plot.best);
    FILE *f = fopen(path, "w");
    bool ok = f && tr_write_search_svg(f, &plot);
    if (f) ok &= fclose(f) == 0;
    if (!ok) fprintf(stderr, "planc: error: cannot write '%s'\n", path);
    free(pt);
    free(labels);
    return ok ? 0 : 2;
}
