/*
 * errors.c: what an op failure becomes, for both builds (ops_err.h): one
 * record per step, its text naming the layer and the op, and the
 * PLANRT_FAULT hook that fails one call of one op on purpose.
 *
 * The record holds the first failure since the last prt_ops_sync: a CUDA
 * error usually makes every later kernel fail too, and the first is the
 * one that says why. prt_ops_sync hands it over and clears it, so a step
 * reports its own failure, not a stale one. Nothing here synchronises or
 * allocates; an op's cost is one call and a flag test (two string
 * compares while a fault is armed for another op).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops_err.h"

/* The ops PLANRT_FAULT can fail: each starts with PRT_OP_ENTER (or a
 * prt_op_fault test) in runtime/ops and runtime/cuda alike
 * (tests/fault/run.sh holds both builds to this list). */
static const char *const FAULT_OPS[] = {
    "prt_embedding_fwd", "prt_embedding_bwd", "prt_position_fwd", "prt_position_bwd",
    "prt_rope_fwd", "prt_rope_bwd", "prt_position_cp_fwd", "prt_position_cp_bwd",
    "prt_rope_cp_fwd", "prt_rope_cp_bwd",
    "prt_layernorm_fwd", "prt_layernorm_bwd", "prt_rmsnorm_fwd", "prt_rmsnorm_bwd",
    "prt_linear_fwd", "prt_linear_bwd_input", "prt_linear_bwd_weight", "prt_linear_bwd",
    "prt_bias_add", "prt_bias_grad",
    "prt_attention_fwd", "prt_attention_bwd", "prt_attention_probs_fwd",
    "prt_attention_context_fwd", "prt_attention_dropout_bwd",
    "prt_attention_scores_fwd", "prt_attention_scores_bwd",
    "prt_gelu_fwd", "prt_gelu_bwd", "prt_relu_fwd", "prt_relu_bwd",
    "prt_swiglu_fwd", "prt_swiglu_bwd", "prt_geglu_fwd", "prt_geglu_bwd",
    "prt_dropout_fwd", "prt_dropout_probs_fwd", "prt_dropout_bwd",
    "prt_residual_add", "prt_add_inplace", "prt_grad_add", "prt_affine", "prt_copy_blocks",
    "prt_xent_max", "prt_xent_sumexp", "prt_xent_loss", "prt_xent_bwd",
    "prt_xent_softcap_bwd", "prt_softcap_fwd",
    "prt_moe_router_fwd", "prt_moe_router_bwd", "prt_moe_topk_fwd", "prt_moe_topk_bwd",
    "prt_moe_route", "prt_moe_dispatch", "prt_moe_dispatch_bwd", "prt_moe_combine",
    "prt_moe_combine_bwd", "prt_moe_aux_loss", "prt_moe_aux_bwd",
    "prt_moe_shared_gate_fwd", "prt_moe_shared_gate_bwd",
    "prt_moe_sort_rows", "prt_moe_unsort_rows", "prt_moe_count_add", "prt_moe_bias_update",
    "prt_adamw_step", "prt_grad_sq_norm", "prt_to_act", "prt_from_act",
};
enum { N_FAULT_OPS = sizeof FAULT_OPS / sizeof FAULT_OPS[0] };

static struct {
    bool        pending;     /* a failure since the last prt_ops_sync */
    prt_status  st;
    char        text[1280];   /* its text; "" once a clean sync cleared it */
    const char *what;        /* prt_ops_where: "attention backward" (NULL: outside the layers) */
    int         layer;
} rec = { .layer = -1 };

static struct {
    bool        read;        /* PLANRT_FAULT was read (once per process) */
    const char *op;          /* the entry of FAULT_OPS to fail; NULL: none */
    long        nth, calls;  /* its call to fail (1-based), its calls so far */
    char        why[1280];    /* a refused value, for prt_op_setup */
} fault;

void prt_ops_where(const char *what, int layer)
{
    rec.what = what;
    rec.layer = layer;
}

const char *prt_ops_last_error(void) { return rec.text; }

void prt_op_fail(prt_status st, const char *op, const char *fmt, ...)
{
    if (rec.pending) return;   /* the first of the step says why; the rest follow from it */
    rec.pending = true;
    rec.st = st;
    int n = 0;
    if (rec.what && rec.layer >= 0)
        n = snprintf(rec.text, sizeof rec.text, "layer %d (%s): ", rec.layer, rec.what);
    else if (rec.what)
        n = snprintf(rec.text, sizeof rec.text, "%s: ", rec.what);
    n += snprintf(rec.text + n, sizeof rec.text - (size_t)n, "%s: ", op);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rec.text + n, sizeof rec.text - (size_t)n, fmt, ap);
    va_end(ap);
}

prt_status prt_op_take(void)
{
    prt_status st = rec.pending ? rec.st : PRT_OK;
    if (!rec.pending) rec.text[0] = '\0';
    rec.pending = false;
    rec.what = NULL;   /* a new step: no layer entered yet */
    rec.layer = -1;
    return st;
}

/* The list as one line, for the refusal's hint. */
static void list_ops(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_FAULT_OPS && at + 1 < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? " " : "", FAULT_OPS[i]);
}

/* PLANRT_FAULT=OPNAME[:N]: fail the N-th call (default the first) of OPNAME. */
static void read_fault(void)
{
    fault.read = true;
    const char *v = getenv("PLANRT_FAULT");
    if (!v || !*v) return;
    const char *colon = strchr(v, ':');
    size_t len = colon ? (size_t)(colon - v) : strlen(v);
    long nth = 1;
    if (colon) {
        char *end;
        nth = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || nth < 1) {
            snprintf(fault.why, sizeof fault.why,
                     "PLANRT_FAULT=%s: the call count after ':' must be a whole number >= 1", v);
            return;
        }
    }
    for (int i = 0; i < N_FAULT_OPS; i++)
        if (strlen(FAULT_OPS[i]) == len && !strncmp(FAULT_OPS[i], v, len)) {
            fault.op = FAULT_OPS[i];
            fault.nth = nth;
            return;
        }
    char ops[1024];
    list_ops(ops, sizeof ops);
    snprintf(fault.why, sizeof fault.why, "PLANRT_FAULT=%s: no op named '%.*s'; one of: %s", v,
             (int)len, v, ops);
}

prt_status prt_op_setup(void)
{
    if (!fault.read) read_fault();
    if (!fault.why[0]) return PRT_OK;
    snprintf(rec.text, sizeof rec.text, "%s", fault.why);
    return PRT_ERR_ARG;
}

bool prt_op_fault(const char *op)
{
    if (!fault.read) read_fault();
    if (!fault.op || strcmp(op, fault.op) || ++fault.calls != fault.nth) return false;
    prt_op_fail(PRT_ERR_OP, op, "injected fault (PLANRT_FAULT=%s:%ld)", fault.op, fault.nth);
    return true;
}
