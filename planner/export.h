/*
 * export.h: a checked plan as the configuration of another framework:
 * Megatron-LM's pretrain_gpt.py arguments, a torchtitan TOML job file, a
 * DeepSpeed ds_config.json. What maps to what is one table in the README
 * ("planc -> Megatron-LM / torchtitan / DeepSpeed"); what the framework
 * cannot say is written as a note, never as an invented setting.
 */
#ifndef PLANC_EXPORT_H
#define PLANC_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "planner/plan.h"

typedef enum {
    EXPORT_MEGATRON,    /* one line of pretrain_gpt.py arguments */
    EXPORT_TORCHTITAN,  /* a TOML job file */
    EXPORT_DEEPSPEED,   /* a ds_config.json */
} PlanExportTarget;

/* The target named s ("megatron", "torchtitan", "deepspeed"), or -1. */
int plan_export_target(const char *s);

/* The version of target t that v names ("core-0.14", "0.2", "0.17"; NULL
 * or "" the default, the first of those), or NULL with the reason in why
 * (an unknown version; torchtitan 0.3, whose jobs are Python, not TOML). */
const char *plan_export_version(PlanExportTarget t, const char *v, char *why, size_t len);

/* Write plan p for target t at version (plan_export_version's; NULL the
 * default) to out, and one line per note ("planc: note: megatron: ...")
 * to notes. The layout's auto fields take planc's defaults (layout.h).
 * Returns 0; 1 (the reason in why) when the layout is invalid for the
 * cluster or a stage does not fit; 2 (the reason in why, naming the
 * setting and the framework's rule) when the target cannot run the
 * layout or hold a setting planc trains with. On 1 or 2 what was written
 * to out is not an export and must be discarded. */
int plan_export(const Plan *p, PlanExportTarget t, const char *version, FILE *out, FILE *notes, char *why,
                size_t len);

/* Whether target t (its default version) can run layout l of plan p:
 * its layout rules alone (DeepSpeed: no TP without an mpu, ZeRO 0/1 and
 * 1F1B under its pipeline, Ulysses only; Megatron-LM: 1F1B or equal
 * interleaved chunks; torchtitan: ZeRO 0 or 3, no zb-h1, even stages),
 * the rule broken in why. `planc search --for` ranks only
 * these. */
bool plan_export_layout_ok(const Plan *p, const Layout *l, PlanExportTarget t, char *why, size_t len);

/* "megatron", "torchtitan", "deepspeed". */
const char *plan_export_target_name(PlanExportTarget t);

/* The software stack (planner/stacks.h) of target t: "megatron-core",
 * "torchtitan", "deepspeed". */
const char *plan_export_stack(PlanExportTarget t);

/* The table of where each train-block key goes in each target, as TSV
 * (key, megatron, torchtitan, deepspeed; "script: ..." where no
 * configuration of that framework holds it): `planc export --settings`. */
void plan_export_settings(FILE *o);

#endif /* PLANC_EXPORT_H */
