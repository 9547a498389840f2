/*
 * svg.c: draw timelines as one standalone SVG document.
 *
 * Layout of the picture, top to bottom: a title (model, layout, step time,
 * bubble), the topology strip (the network's tiers — GPUs in nodes on
 * NVLink, nodes in pods on InfiniBand, pods on the pod link — and the tier
 * each of the TP, DP and PP groups spans), then one panel per timeline (predicted, and under --compare the
 * measured one beneath, on the same time axis), then a legend. A panel
 * opens with its summary: per stage one bar of where the step went
 * (TrStageSummary, stacked in TrItem order on the panel's time axis), and
 * a line giving the stage that ends last item by item. Then each pipeline
 * stage is a row: a tall compute lane (forward, backward, optimizer), the
 * in-pass lane where passes have TP or EP collectives (their segments),
 * and two thin lanes, one for pipeline sends and receive waits, one for
 * DP/ZeRO collectives. Idle compute time is left empty over a light band,
 * so the bubble is what the eye sees.
 *
 * Boxes are placed at exactly their start and end times (x = x0 + t *
 * px_per_ms, written on the root element as data-x0 and data-px-per-ms), so
 * idle time can be measured back from the drawing; tests do just that.
 * Everything scales with the stage count (row heights, fonts) and labels
 * are written only where they fit, so 64 stages x 256 micro-batches stay
 * readable. Hover tooltips (<title>) are kept while the picture is small.
 *
 * This file must not decide anything about schedules: it draws boxes.
 */
#include "trace/trace.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SVG_W        1280.0   /* px, whole picture */
#define SVG_LEFT       84.0   /* px, room for the stage names */
#define SVG_RIGHT      24.0
#define SVG_TITLE_H    52.0   /* px, two title lines */
#define SVG_HEAD_H     22.0   /* px, a panel's heading */
#define SVG_AXIS_H     34.0   /* px, ticks and their labels */
#define SVG_TOOLTIP_MAX 20000 /* boxes: above this, no <title> per box */
#define SVG_TOPO_H     70.0   /* px, the topology strip */
#define TOPO_SHOWN      3     /* pods, and nodes per pod, drawn before an ellipsis */

/* Colour and short name of each op kind. ORDER PlanOpKind */
static const struct { const char *cls, *fill, *ink, *legend; } KIND[PLAN_N_OPKINDS] = {
    { "FWD",  "#4e79a7", "#ffffff", "forward" },
    { "BWD",  "#59a14f", "#ffffff", "backward" },
    { "BWDI", "#76b7b2", "#000000", "backward (input)" },
    { "BWDW", "#edc948", "#000000", "backward (weight)" },
    { "SACT", "#f28e2b", "#000000", "send activation" },
    { "RACT", "#f28e2b", "#000000", "receive wait (activation)" },
    { "SGRD", "#ff9d9a", "#000000", "send gradient" },
    { "RGRD", "#ff9d9a", "#000000", "receive wait (gradient)" },
    { "GATH", "#b07aa1", "#ffffff", "ZeRO-3 gather" },
    { "RED",  "#e15759", "#ffffff", "gradient reduce" },
    { "OPT",  "#79706e", "#ffffff", "optimizer" },
    { "SYNC", "#9c755f", "#ffffff", "parameter sync" },
    { "SPNR", "#d37295", "#ffffff", "SP norm-gradient all-reduce" },
    { "EMBR", "#fabfd2", "#000000", "tied-embedding all-reduce" },
    { "NRMR", "#bab0ac", "#000000", "gradient-norm all-reduce" },
    { "EPA2A", "#8cd17d", "#000000", "EP all-to-all (inside the pass)" },
    { "TPC",  "#17becf", "#000000", "TP collectives (inside the pass)" },
    { "CPC",  "#ff7f0e", "#000000", "CP attention transfers (inside the pass)" },
};

/* Colour and class of each summary item, most from the kind drawn for
 * it below. ORDER TrItem */
static const struct { const char *cls, *fill, *ink, *label; } ITEM[TR_N_ITEMS] = {
    { "sFWD", "#4e79a7", "#ffffff", "fwd" },   { "sBWD", "#59a14f", "#ffffff", "bwd" },
    { "sRC", "#b6992d", "#ffffff", "recomp" }, { "sTP", "#17becf", "#000000", "TP" },
    { "sEP", "#8cd17d", "#000000", "EP" },     { "sDP", "#e15759", "#ffffff", "DP" },
    { "sSLOW", "#ff9da7", "#000000", "slowed" }, { "sP2P", "#f28e2b", "#000000", "p2p" },
    { "sSTEP", "#bab0ac", "#000000", "step" }, { "sOPT", "#79706e", "#ffffff", "opt" },
    { "sBUB", "#e8e8e8", "#000000", "bubble" },  { "sGAP", "#c7c7e8", "#000000", "gaps" },
    { "sCP", "#ff7f0e", "#000000", "CP" },
};

static bool is_recv(PlanOpKind k)
{
    return k == OP_RECV_ACT || k == OP_RECV_GRAD;
}

/* Row geometry, scaled to the number of stages so that 2 and 64 stages
 * both fill a screen-sized picture. */
typedef struct {
    double row, lane, gap;     /* px: compute lane, each thin lane, between stages */
    bool   pass;               /* the in-pass lane (TP / EP segments) is drawn */
    double bar, bar_gap;       /* px: a stage's summary bar, between bars */
    double font;               /* px: box labels (0: none) */
    double stage_font;         /* px: stage names */
    int    stage_every;        /* name every n-th stage */
} Rows;

static Rows rows_for(int pp)
{
    Rows r;
    r.pass = false;
    r.row = floor(320.0 / (pp > 0 ? pp : 1));
    if (r.row > 28) r.row = 28;
    if (r.row < 8) r.row = 8;
    r.lane = fmax(2, floor(r.row / 4));
    r.gap = fmax(2, floor(r.row / 4));
    r.font = r.row >= 12 ? fmin(11, floor(r.row * 0.6)) : 0;
    r.stage_font = fmin(12, fmax(7, r.row));
    r.stage_every = r.row >= 10 ? 1 : 4;
    r.bar = fmax(3, floor(r.row * 0.5));
    r.bar_gap = fmax(1, floor(r.bar / 4));
    return r;
}

/* The rows of timeline t: rows_for its stages, with the in-pass lane
 * where a pass has TP or EP segments. */
static Rows rows_of(const TrTimeline *t)
{
    Rows r = rows_for(t->pp);
    for (int i = 0; i < t->n_boxes && !r.pass; i++) r.pass = tr_lane_of(t->boxes[i].kind) == TR_LANE_PASS;
    return r;
}

static double stage_h(const Rows *r)
{
    return r->row + (r->pass ? 3 : 2) * r->lane + r->gap;
}

static double summary(FILE *f, const TrTimeline *t, const Rows *r, double y, double px_per_ms);

static double panel_h(const TrTimeline *t, const Rows *r)
{
    return SVG_HEAD_H + summary(NULL, t, r, 0, 0) + t->pp * stage_h(r) + SVG_AXIS_H;
}

/* Write s with XML's five special characters escaped. */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A round tick step giving about eight ticks over [0, span] (1-2-5 series). */
static double tick_step(double span)
{
    double raw = span / 8, mag = pow(10, floor(log10(raw))), n = raw / mag;
    return (n < 1.5 ? 1 : n < 3.5 ? 2 : n < 7.5 ? 5 : 10) * mag;
}

/* The label of a box: micro-batch, then ".chunk" when stages hold several. */
static void box_label(const TrTimeline *t, const TrBox *b, char *buf, size_t len)
{
    if (b->kind == OP_OPT_STEP) snprintf(buf, len, "opt");
    else if (b->mb < 0) buf[0] = 0;
    else if (t->chunks > 1 && b->chunk >= 0) snprintf(buf, len, "%d.%d", b->mb, b->chunk);
    else snprintf(buf, len, "%d", b->mb);
}

/* The heading of a panel: source, step time and bubble; under --compare,
 * also the step time's error against the first (predicted) panel. */
static void heading(FILE *f, const TrTimeline *t, const TrTimeline *ref, double y)
{
    fprintf(f, "<text class=\"head\" x=\"%.1f\" y=\"%.1f\">", SVG_LEFT, y + 15);
    xml_text(f, t->source);
    fprintf(f, ": step %.3f ms", t->step_time * 1e3);
    if (ref && ref->step_time > 0) {
        double err = 100 * (t->step_time - ref->step_time) / ref->step_time;
        fprintf(f, " (%+.1f %% against the prediction)", fabs(err) < 0.05 ? 0 : err);
    }
    fprintf(f, ", bubble %.1f %%", 100 * t->bubble_fraction);
    fputs("</text>\n", f);
}

/* Vertical grid lines and the tick labels of the time axis, in ms. */
static void axis(FILE *f, double y_top, double y_axis, double tmax_ms, double px_per_ms)
{
    double step = tick_step(tmax_ms);
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    fprintf(f, "<line class=\"ax\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
            SVG_LEFT, y_axis, SVG_W - SVG_RIGHT, y_axis);
    for (int i = 0; i * step <= tmax_ms * (1 + 1e-9); i++) {
        double x = SVG_LEFT + i * step * px_per_ms;
        fprintf(f, "<line class=\"grid\" x1=\"%.3f\" y1=\"%.1f\" x2=\"%.3f\" y2=\"%.1f\"/>"
                   "<text class=\"tick\" x=\"%.3f\" y=\"%.1f\">%.*f</text>\n",
                x, y_top, x, y_axis + 4, x, y_axis + 16, dec, i * step);
    }
    fprintf(f, "<text class=\"unit\" x=\"%.1f\" y=\"%.1f\">ms</text>\n",
            SVG_W - SVG_RIGHT, y_axis + 30);
}

/* One box, its tooltip, and its label where the label fits. */
static void box(FILE *f, const TrTimeline *t, const TrBox *b, const Rows *r, double y_stage,
                double px_per_ms, bool tooltip)
{
    TrLane lane = tr_lane_of(b->kind);
    double y = y_stage, h = r->row, pass = r->pass ? r->lane : 0;
    if (lane == TR_LANE_PASS) { y += r->row; h = r->lane; }
    if (lane == TR_LANE_P2P) { y += r->row + pass; h = r->lane; }
    if (lane == TR_LANE_COLL) { y += r->row + pass + r->lane; h = r->lane; }
    double x = SVG_LEFT + b->start * 1e3 * px_per_ms;
    double w = (b->end - b->start) * 1e3 * px_per_ms;
    if (w < 0) w = 0;
    const char *cls = (unsigned)b->kind < PLAN_N_OPKINDS ? KIND[b->kind].cls : "FWD";
    bool odd = t->chunks > 1 && b->chunk > 0 && b->chunk % 2 == 1;
    fprintf(f, "<rect class=\"op %s%s%s\" x=\"%.3f\" y=\"%.1f\" width=\"%.3f\" height=\"%.1f\"",
            cls, is_recv(b->kind) ? " recv" : "", odd ? " odd" : "", x, y, w, h);
    if (tooltip) {
        fprintf(f, "><title>%s", tr_op_title(b->kind));
        if (b->mb >= 0) fprintf(f, " mb %d", b->mb);
        if (b->chunk >= 0 && t->chunks > 1) fprintf(f, " chunk %d", b->chunk);
        fprintf(f, ": %.3f-%.3f ms", b->start * 1e3, b->end * 1e3);
        if (b->bytes > 0) fprintf(f, ", %.3g MB", b->bytes / 1e6);
        fputs("</title></rect>\n", f);
    } else {
        fputs("/>\n", f);
    }
    char lbl[32];
    box_label(t, b, lbl, sizeof lbl);
    if (lane != TR_LANE_COMPUTE || r->font <= 0 || !lbl[0]) return;
    if (w < strlen(lbl) * r->font * 0.62 + 2) return;
    fprintf(f, "<text class=\"lbl\" x=\"%.3f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
            x + w / 2, y + h / 2 + r->font * 0.36, KIND[b->kind].ink, lbl);
}

/* Seconds as the summary writes them: s from 1 s up, else ms. */
static void secs(char *buf, size_t len, double t, double scale)
{
    if (scale >= 1) snprintf(buf, len, "%.2f s", t);
    else snprintf(buf, len, "%.2f ms", t * 1e3);
}

/* Lay out (draw when f is not NULL) timeline t's summary from y: a line
 * naming each item with its seconds on the stage that ends last (the
 * legend of the bars), then per stage one bar of the items stacked in
 * order (TrItem), on the timeline's time axis, so a bar's length is the
 * stage's end and the longest is the step. Returns its height (0: no
 * summary, a measured trace). */
static double summary(FILE *f, const TrTimeline *t, const Rows *r, double y, double px_per_ms)
{
    if (!t->summary || t->pp < 1) return 0;
    int crit = t->critical >= 0 && t->critical < t->pp ? t->critical : 0;
    const TrStageSummary *c = &t->summary[crit];
    bool shown[TR_N_ITEMS] = { false };
    for (int s = 0; s < t->pp; s++)
        for (int i = 0; i < TR_N_ITEMS; i++) shown[i] |= t->summary[s].item[i] > 0;
    double x = SVG_LEFT, line = 0, lh = 16;
    char txt[96], sec[32];
    if (f) {
        fprintf(f, "<g class=\"summary\">\n<text class=\"leg\" x=\"%.1f\" y=\"%.1f\">where the time "
                   "goes, per stage (bars on the time axis below); stage %d, the one that ends last:</text>\n",
                SVG_LEFT, y + 11, crit);
    }
    line += lh;
    for (int i = 0; i < TR_N_ITEMS; i++) {
        if (!shown[i]) continue;
        secs(sec, sizeof sec, c->item[i], t->step_time);
        snprintf(txt, sizeof txt, "%s %s (%.1f %%)", tr_item_name((TrItem)i), sec,
                 c->end > 0 ? 100 * c->item[i] / c->end : 0);
        double w = 22 + strlen(txt) * 6.2;
        if (x + w > SVG_W - SVG_RIGHT) { x = SVG_LEFT; line += lh; }
        if (f)
            fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\"/>"
                       "<text class=\"leg\" x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                    ITEM[i].cls, x, y + line + 1, x + 18, y + line + 10, txt);
        x += w;
    }
    line += lh + 2;
    for (int s = 0; f && s < t->pp; s++) {
        const TrStageSummary *g = &t->summary[s];
        double yb = y + line + s * (r->bar + r->bar_gap), xb = SVG_LEFT;
        fprintf(f, "<g class=\"sumbar\" data-stage=\"%d\" data-end=\"%.9g\">\n", s, g->end);
        if (s % r->stage_every == 0 || s == t->pp - 1)
            fprintf(f, "<text class=\"stg\" x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\">%d</text>\n",
                    SVG_LEFT - 6, yb + r->bar / 2 + fmin(r->bar, 10) * 0.36, fmin(r->bar, 10), s);
        for (int i = 0; i < TR_N_ITEMS; i++) {
            double w = g->item[i] * 1e3 * px_per_ms;
            if (g->item[i] <= 0) continue;
            secs(sec, sizeof sec, g->item[i], t->step_time);
            fprintf(f, "<rect class=\"sum %s\" x=\"%.3f\" y=\"%.1f\" width=\"%.3f\" height=\"%.1f\" "
                       "data-s=\"%.9g\"><title>stage %d: %s %s (%.1f %%)</title></rect>\n",
                    ITEM[i].cls, xb, yb, w, r->bar, g->item[i], s, tr_item_name((TrItem)i), sec,
                    g->end > 0 ? 100 * g->item[i] / g->end : 0);
            /* its short name and share, where they fit */
            double font = fmin(10, floor(r->bar * 0.75));
            snprintf(txt, sizeof txt, "%s %.0f%%", ITEM[i].label, g->end > 0 ? 100 * g->item[i] / g->end : 0);
            if (font >= 7 && w >= strlen(txt) * font * 0.6 + 4)
                fprintf(f, "<text class=\"slbl\" x=\"%.3f\" y=\"%.1f\" font-size=\"%.0f\" fill=\"%s\">%s</text>\n",
                        xb + w / 2, yb + r->bar / 2 + font * 0.36, font, ITEM[i].ink, txt);
            xb += w;
        }
        fputs("</g>\n", f);
    }
    if (f) fputs("</g>\n", f);
    return line + t->pp * (r->bar + r->bar_gap) + 8;
}

/* One panel: heading, summary, stage rows with their boxes, axis. Returns its height. */
static double panel(FILE *f, const TrTimeline *t, const TrTimeline *ref, double y0,
                    double tmax_ms, double px_per_ms, bool tooltip)
{
    Rows r = rows_of(t);
    fprintf(f, "<g class=\"panel\" data-source=\"");
    xml_text(f, t->source);
    fputs("\">\n", f);
    heading(f, t, ref, y0);
    double top = y0 + SVG_HEAD_H;
    top += summary(f, t, &r, top, px_per_ms);
    double sh = stage_h(&r);
    double y_axis = top + t->pp * sh;
    axis(f, top, y_axis, tmax_ms, px_per_ms);
    int i = 0;
    for (int s = 0; s < t->pp; s++) {
        double y = top + s * sh;
        fprintf(f, "<g class=\"stage\" data-stage=\"%d\">\n", s);
        fprintf(f, "<rect class=\"band\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n",
                SVG_LEFT, y, SVG_W - SVG_LEFT - SVG_RIGHT, r.row);
        if (s % r.stage_every == 0 || s == t->pp - 1)
            fprintf(f, "<text class=\"stg\" x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\">stage %d</text>\n",
                    SVG_LEFT - 6, y + r.row / 2 + r.stage_font * 0.36, r.stage_font, s);
        /* boxes are stored stage by stage; tolerate any order anyway */
        for (i = 0; i < t->n_boxes; i++)
            if (t->boxes[i].stage == s) box(f, t, &t->boxes[i], &r, y, px_per_ms, tooltip);
        fputs("</g>\n", f);
    }
    fputs("</g>\n", f);
    return panel_h(t, &r);
}

/* Which kinds appear in any panel (the legend shows only those). */
static bool kinds_seen(const TrTimeline *const *panels, int n, bool *seen)
{
    bool chunks = false;
    memset(seen, 0, PLAN_N_OPKINDS * sizeof *seen);
    for (int p = 0; p < n; p++) {
        chunks |= panels[p]->chunks > 1;
        for (int i = 0; i < panels[p]->n_boxes; i++)
            if ((unsigned)panels[p]->boxes[i].kind < PLAN_N_OPKINDS) seen[panels[p]->boxes[i].kind] = true;
    }
    return chunks;
}

/* Lay out (draw when f is not NULL) the legend's swatches from y: the kinds
 * that appear, then the empty (idle) swatch, then a note. Returns its height. */
static double legend(FILE *f, const TrTimeline *const *panels, int n, double y)
{
    bool seen[PLAN_N_OPKINDS];
    bool chunks = kinds_seen(panels, n, seen);
    double x = SVG_LEFT, row = 0;
    if (f) fputs("<g class=\"legend\">\n", f);
    for (int k = 0; k <= PLAN_N_OPKINDS; k++) {
        if (k < PLAN_N_OPKINDS && !seen[k]) continue;
        const char *name = k < PLAN_N_OPKINDS ? KIND[k].legend : "idle (bubble)";
        double w = 22 + strlen(name) * 6.6;
        if (x + w > SVG_W - SVG_RIGHT) { x = SVG_LEFT; row += 18; }
        double yy = y + row;
        x += w;
        if (!f) continue;
        if (k < PLAN_N_OPKINDS)
            fprintf(f, "<rect class=\"%s%s\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\"/>",
                    KIND[k].cls, is_recv((PlanOpKind)k) ? " recv" : "", x - w, yy);
        else
            fprintf(f, "<rect class=\"band idle\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\"/>",
                    x - w, yy);
        fprintf(f, "<text class=\"leg\" x=\"%.1f\" y=\"%.1f\">%s</text>\n", x - w + 18, yy + 9, name);
    }
    if (f) {
        fprintf(f, "<text class=\"leg\" x=\"%.1f\" y=\"%.1f\">box labels: micro-batch%s; "
                   "%sthin lanes under each stage: %spipeline p2p, then DP/ZeRO collectives</text>\n",
                SVG_LEFT, y + row + 30, chunks ? ".chunk" : "",
                chunks ? "odd chunks drawn lighter; " : "",
                seen[OP_CP_COLL] ? "the TP / EP / CP collectives the pass above waits for (drawn at its end), "
                : seen[OP_TP_COLL] || seen[OP_EP_ALL_TO_ALL]
                    ? "the TP / EP collectives the pass above waits for (drawn at its end), " : "");
        fputs("</g>\n", f);
    }
    return row + 40;
}

/* One node: a box of (at most 8 drawn) GPU squares, px wide returned. */
static double topo_node(FILE *f, double x, double y, int64_t gpus)
{
    int64_t shown = gpus < 8 ? gpus : 8;
    double w = 8 + 8 * (double)shown + (gpus > shown ? 10 : 0);
    fprintf(f, "<rect class=\"tnode\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"16\"/>\n", x, y, w);
    for (int64_t g = 0; g < shown; g++)
        fprintf(f, "<rect class=\"tgpu\" x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\"/>", x + 4 + 8 * (double)g,
                y + 5);
    if (gpus > shown) fprintf(f, "<text class=\"tl\" x=\"%.1f\" y=\"%.1f\">..</text>", x + w - 9, y + 11);
    fputc('\n', f);
    return w;
}

/* The topology strip: pods of nodes of GPUs (the first TOPO_SHOWN of each
 * drawn), the three links' bandwidths and each group's tier. */
static void topology(FILE *f, const TrTimeline *t, double y)
{
    static const char *const tier[] = { "inside a node (NVLink)", "across nodes (InfiniBand)",
                                        "across pods (pod link)" };   /* ORDER PlanTier */
    double x = 12;
    fputs("<g class=\"topology\">\n", f);
    int64_t pods = t->pods > TOPO_SHOWN ? TOPO_SHOWN : t->pods;
    int64_t nodes = t->nodes_per_pod > TOPO_SHOWN ? TOPO_SHOWN : t->nodes_per_pod;
    for (int64_t p = 0; p < pods; p++) {
        double x0 = x;
        x += 6;
        for (int64_t n = 0; n < nodes; n++) x += topo_node(f, x, y + 16, t->gpus_per_node) + 6;
        if (t->nodes_per_pod > nodes) {
            fprintf(f, "<text class=\"tl\" x=\"%.1f\" y=\"%.1f\">.. %lld nodes</text>\n", x, y + 28,
                    (long long)t->nodes_per_pod);
            x += 58;
        }
        fprintf(f, "<rect class=\"tpod\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"28\"/>\n", x0, y + 10,
                x - x0);
        x += 10;
    }
    if (t->pods > pods)
        fprintf(f, "<text class=\"tl\" x=\"%.1f\" y=\"%.1f\">.. %lld pods</text>\n", x, y + 28, (long long)t->pods);
    fprintf(f, "<text class=\"tl\" x=\"12\" y=\"%.1f\">%lld pod%s x %lld nodes x %lld GPUs; links per GPU per "
               "direction: NVLink %.4g GB/s, InfiniBand %.4g GB/s",
            y + 52, (long long)t->pods, t->pods > 1 ? "s" : "", (long long)t->nodes_per_pod,
            (long long)t->gpus_per_node, t->link_bw[0] / 1e9, t->link_bw[1] / 1e9);
    if (t->pods > 1) fprintf(f, ", pod link %.4g GB/s", t->link_bw[2] / 1e9);
    fprintf(f, ". TP %s, DP %s, PP %s</text>\n", tier[t->tier[0]], tier[t->tier[1]], tier[t->tier[2]]);
    fputs("</g>\n", f);
}

static const char STYLE[] =
    "<style>\n"
    "text{font-family:Helvetica,Arial,sans-serif;fill:#222}\n"
    ".title{font-size:15px;font-weight:bold}.sub{font-size:12px}\n"
    ".head{font-size:12px;font-weight:bold}\n"
    ".stg{text-anchor:end}.tick{font-size:10px;text-anchor:middle}\n"
    ".unit{font-size:10px;text-anchor:end}.leg{font-size:11px}\n"
    ".lbl{text-anchor:middle;font-size:%.0fpx}.slbl{text-anchor:middle}\n"
    ".band{fill:#f2f2f2}.idle{stroke:#999;stroke-width:.5}\n"
    ".grid{stroke:#ddd;stroke-width:.5}.ax{stroke:#555;stroke-width:1}\n"
    ".op{stroke:#fff;stroke-width:.3}.odd{fill-opacity:.62}\n"
    ".recv{fill-opacity:.25;stroke:#555;stroke-width:.4}\n"
    ".tpod{fill:none;stroke:#888;stroke-dasharray:3 2}.tnode{fill:#f4f4f4;stroke:#777;stroke-width:.6}\n"
    ".tgpu{fill:#5b8def}.tl{font-size:11px}\n";

/* Mean drawn width of a forward/backward box, px. */
static double mean_compute_px(const TrTimeline *const *panels, int n, double px_per_ms)
{
    double w = 0;
    int k = 0;
    for (int p = 0; p < n; p++)
        for (int i = 0; i < panels[p]->n_boxes; i++)
            if (tr_is_compute(panels[p]->boxes[i].kind)) {
                w += (panels[p]->boxes[i].end - panels[p]->boxes[i].start) * 1e3 * px_per_ms;
                k++;
            }
    return k ? w / k : 0;
}

bool tr_write_svg(FILE *f, const TrTimeline *const *panels, int n)
{
    if (n < 1) return false;
    double topo_h = panels[0]->nodes > 0 ? SVG_TOPO_H : 0;
    double tmax = 0, h = SVG_TITLE_H + topo_h + 6 + legend(NULL, panels, n, 0);
    int boxes = 0, pp_max = 1;
    for (int p = 0; p < n; p++) {
        Rows r = rows_of(panels[p]);
        tmax = fmax(tmax, panels[p]->step_time);
        h += panel_h(panels[p], &r);
        boxes += panels[p]->n_boxes;
        if (panels[p]->pp > pp_max) pp_max = panels[p]->pp;
    }
    double tmax_ms = tmax > 0 ? tmax * 1e3 : 1;
    double px_per_ms = (SVG_W - SVG_LEFT - SVG_RIGHT) / tmax_ms;
    Rows r0 = rows_for(pp_max);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" data-x0=\"%.1f\" data-px-per-ms=\"%.9g\">\n",
            SVG_W, h, SVG_W, h, SVG_LEFT, px_per_ms);
    fprintf(f, STYLE, r0.font > 0 ? r0.font : 8);
    if (mean_compute_px(panels, n, px_per_ms) < 4)   /* dense: white edges would wash out the colour */
        fputs(".op{stroke:none}\n", f);
    bool seen[PLAN_N_OPKINDS];
    kinds_seen(panels, n, seen);
    for (int k = 0; k < PLAN_N_OPKINDS; k++)   /* the in-pass segments' styles only where drawn */
        if ((k != OP_EP_ALL_TO_ALL && k != OP_TP_COLL && k != OP_CP_COLL) || seen[k])
            fprintf(f, ".%s{fill:%s}\n", KIND[k].cls, KIND[k].fill);
    bool sums = false;
    for (int p = 0; p < n; p++) sums |= panels[p]->summary != NULL;
    for (int i = 0; sums && i < TR_N_ITEMS; i++)   /* CP's only where drawn: plans without CP unchanged */
        if (i != TR_ITEM_CP || seen[OP_CP_COLL]) fprintf(f, ".%s{fill:%s}\n", ITEM[i].cls, ITEM[i].fill);
    fputs("</style>\n", f);
    fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", SVG_W, h);
    const TrTimeline *t = panels[0];
    fputs("<text class=\"title\" x=\"12\" y=\"20\">", f);
    xml_text(f, t->name);
    fputs(": ", f);
    xml_text(f, t->layout);
    fputs("</text>\n", f);
    fprintf(f, "<text class=\"sub\" x=\"12\" y=\"38\">step %.3f ms, bubble %.1f %% "
               "(idle time of the busiest stage over its compute time)",
            t->step_time * 1e3, 100 * t->bubble_fraction);
    for (int p = 1; p < n; p++) {
        fputs(p == 1 ? "; beneath: the " : ", the ", f);
        xml_text(f, panels[p]->source);
        fputs(" trace", f);
    }
    fputs("</text>\n", f);
    if (topo_h > 0) topology(f, t, SVG_TITLE_H - 4);
    double y = SVG_TITLE_H + topo_h;
    for (int p = 0; p < n; p++)
        y += panel(f, panels[p], p > 0 ? panels[0] : NULL, y, tmax_ms, px_per_ms,
                   boxes <= SVG_TOOLTIP_MAX);
    legend(f, panels, n, y + 6);
    fputs("</svg>\n", f);
    return !ferror(f);
}
