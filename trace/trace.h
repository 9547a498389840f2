/*
 * trace.h: pictures of a training step — the timeline of a Program as SVG
 * or as a Chrome/Perfetto trace, reading such a trace back (measured runs),
 * and the scatter plot of a layout search.
 *
 * The trace module only draws. A timeline is made from a Program and the
 * simulator's spans (planner/program.h, planner/simulate.h) or read from a
 * Chrome trace file; it never re-derives a schedule. Times inside are
 * seconds from the start of the step; the SVG axis is in milliseconds and
 * the Chrome trace in microseconds, as that format requires.
 *
 * The trace format (README, section trace) is shared with the generated
 * executable's `--trace OUT.json`, so a measured timeline reads back into
 * the same TrTimeline and is drawn beside the predicted one.
 */
#ifndef PLANC_TRACE_H
#define PLANC_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "planner/program.h"
#include "planner/search.h"
#include "planner/simulate.h"

/* The lanes of a stage's row (drawn top to bottom: compute, in-pass,
 * p2p, collectives; the in-pass lane only where a pass has TP or EP
 * collectives). The JSON `tid` is the lane. */
typedef enum {
    TR_LANE_COMPUTE,   /* forward, backward, optimizer; receive waits (JSON only) */
    TR_LANE_P2P,       /* pipeline sends (filled) and receive waits (outlined) */
    TR_LANE_COLL,      /* DP / ZeRO collectives: gathers, reductions, sync */
    TR_LANE_PASS,      /* the TP collectives and EP all-to-alls inside a pass, which the
                          compute stream waits for: segments of their pass's box */
} TrLane;

#define TR_N_LANES 4

/* Where a stage's step went, the items of its summary bar, in the order
 * they are stacked. Each is seconds of the stage's compute stream; the
 * items add up to the stage's end (planner/simulate.h, PlanStageTimes).
 * ORDER TrItem */
typedef enum {
    TR_ITEM_FWD,       /* forward kernels (the pass less its TP and EP collectives) */
    TR_ITEM_BWD,       /* backward kernels, less recomputation and collectives */
    TR_ITEM_RECOMPUTE, /* the backward's recomputed forward kernels */
    TR_ITEM_TP,        /* exposed TP collectives inside the passes (OP_TP_COLL) */
    TR_ITEM_EP,        /* exposed EP all-to-alls inside the passes (OP_EP_ALL_TO_ALL) */
    TR_ITEM_DP,        /* exposed DP / ZeRO: waits for reductions and ZeRO-3 gathers, the
                          ZeRO-1/2 parameter all-gather */
    TR_ITEM_SLOWED,    /* compute slowed by the DP collectives beside it (Link.overlap_compute) */
    TR_ITEM_P2P,       /* blocking pipeline sends, waits for the stage's own sends */
    TR_ITEM_STEPCOLL,  /* the step-level all-reduces: SP norms, tied embedding, gradient norm */
    TR_ITEM_OPT,       /* the optimizer step */
    TR_ITEM_BUBBLE,    /* waiting for other stages (the pipeline bubble) */
    TR_ITEM_GAP,       /* a measured trace: the compute stream idle before a pass with no
                          box to say why (launch gaps, host work; predicted: 0, the
                          simulator books every second) */
    TR_ITEM_CP,        /* exposed context-parallel attention transfers inside the passes
                          (OP_CP_COLL); last, so the items before it keep their order */
} TrItem;

#define TR_N_ITEMS 13

/* One stage's summary: seconds per item, and when the stage ends. */
typedef struct {
    double item[TR_N_ITEMS];
    double end;            /* s: the stage's last op ends (the items' sum) */
} TrStageSummary;

/* One drawn box: one op of one stage. */
typedef struct {
    int        stage;       /* pipeline stage: the row */
    int        op;          /* index in the stage's Program op list, -1 unknown */
    PlanOpKind kind;
    int        mb, chunk;   /* micro-batch, chunk; -1 for step-level ops */
    double     start, end;  /* s from the start of the step */
    double     bytes;       /* bytes moved (comm ops), 0 otherwise */
} TrBox;

/* A timeline: the boxes of every stage of one step. */
typedef struct {
    char    name[64];        /* model (plan) name */
    char    layout[160];     /* "dp 2 x tp 2 x pp 2, ZeRO-1, 1f1b, 8 micro-batches" */
    char    source[16];      /* "predicted" or "measured" */
    int     pp, chunks;
    int     n_boxes, cap;
    TrBox  *boxes;           /* stage by stage, each in op-list order */
    TrStageSummary *summary; /* [pp] where each stage's step went (tr_from_program, or
                                tr_summarise_boxes for a measured trace); NULL: none */
    int     critical;        /* the stage that ends last (the summary's text names it) */
    double  step_time;       /* s: last end of any box */
    double  bubble_fraction; /* simulator's (predicted), or from the boxes (measured) */
    /* the cluster's network tiers, drawn as the topology strip under the
     * title (tr_set_topology; nodes 0: not drawn, a measured trace) */
    int64_t pods, nodes_per_pod, nodes, gpus_per_node;
    double  link_bw[3];      /* B/s per GPU per direction: NVLink, inter-node, pod link */
    int     tier[3];         /* PlanTier of the TP, DP and PP groups (planner/comm.h) */
} TrTimeline;

/* Record cluster c's tiers and where the TP, DP and PP groups of layout
 * (dp, tp, pp) land on them, for the picture. */
void tr_set_topology(TrTimeline *t, const Cluster *c, int dp, int tp, int pp);

/* Build the timeline of Program p timed by r; `name` is the model's. The
 * summary of stage s is r's books of it (PlanStageTimes) with the passes'
 * time split by the Program's ops (PlanOp.tp_dur, ep_dur, rc_dur). */
bool tr_from_program(const PlanProgram *p, const PlanSimResult *r, const char *name,
                     TrTimeline *out);
void tr_timeline_free(TrTimeline *t);

/* The name of a summary item ("forward", "exposed TP", ...). */
const char *tr_item_name(TrItem i);

/* The summary of a timeline read from a trace (tr_read_chrome calls it),
 * from its boxes alone, stage by stage in op order along the compute
 * stream: passes to forward / backward (less the TP and EP segments the
 * trace has, booked to theirs; recomputation is inside the backward),
 * receive waits and the wait before a collective over several stages
 * after the stage's other boxes ended to the bubble (tr_bubble_of's
 * rule), the optimizer, the ZeRO-1/2 sync and the waits before the
 * step-level ops for the stage's own streams to exposed DP, the rest of
 * the compute stream's idle time to TR_ITEM_GAP. The items add up to the
 * stage's last box's end. False out of memory. */
bool tr_summarise_boxes(TrTimeline *t);

/* Which lane an op kind is drawn in (receives: TR_LANE_P2P in the SVG). */
TrLane tr_lane_of(PlanOpKind k);
bool   tr_is_compute(PlanOpKind k);   /* FWD, BWD, BWD_INPUT, BWD_WEIGHT */
/* The name an op's box or event carries: plan_op_name, except the
 * step-level collectives, which say what they sum over which group
 * ("gradient-norm all-reduce (all ranks)", "tied-embedding all-reduce
 * (first + last stage)", "SP norm-gradient all-reduce (TP)"). */
const char *tr_op_title(PlanOpKind k);

/* Bubble fraction of a timeline from its boxes, as the simulator defines
 * it (planner/simulate.h): on the stage that ends last, its receive waits
 * and its waits before the collectives over several stages, over its
 * forward/backward box time (a box of a ZeRO-3 compute op includes its
 * waits for gathers, so there the two differ by those). */
double tr_bubble_of(const TrTimeline *t);

/* Draw one timeline, or several stacked with one time axis (--compare:
 * predicted above measured), as a standalone SVG document. */
bool tr_write_svg(FILE *f, const TrTimeline *const *panels, int n);

/* Write t as a Chrome Trace Event Format document (README, section trace). */
bool tr_write_chrome(FILE *f, const TrTimeline *t);

/* Read a Chrome trace in that format (e.g. a measured one) into out. For
 * each stage only the events of its lowest `args.rank` are kept; times are
 * shifted so the first event starts at 0. False with a reason in why. */
bool tr_read_chrome(const char *path, TrTimeline *out, char *why, size_t len);

/* ---- the layout-space plot of `planc search --svg` -------------------- */

/* One evaluated layout. */
typedef struct {
    double      step_time;    /* s, predicted */
    double      peak_memory;  /* bytes per GPU, the largest stage */
    bool        feasible;     /* fits in device memory and is valid */
    bool        exact;        /* evaluated in full; false: known by the search's bounds */
    const char *label;        /* "dp 8 tp 2 pp 4 z1 1f1b mb 2" */
} TrPoint;

typedef struct {
    const char    *title;     /* e.g. "gpt3-175b on dgx-a100 x 192" */
    double         memory;    /* bytes of device memory: the memory line */
    int            n;
    const TrPoint *points;
    int            best;      /* index of the chosen layout, -1 none */
} TrSearchPlot;

/* Every layout as a point (step time against peak memory per GPU),
 * infeasible ones grey beyond the memory line, the Pareto front of the
 * feasible ones joined, the best labelled. */
bool tr_write_search_svg(FILE *f, const TrSearchPlot *s);

/* The plot of search s of plan p into the file at path: every recorded
 * layout (plan_search with PlanSearchOptions.record set; without it, the
 * top results only), the best (results[0]) labelled. Returns 0, or 2 when
 * the file cannot be written (the reason on stderr). */
int tr_search_svg(const char *path, const Plan *p, const PlanSearch *s);

#endif /* PLANC_TRACE_H */
