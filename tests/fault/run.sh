#!/bin/bash
# run.sh: the op-error path end to end (issue 24), on the CPU build, with
# PLANRT_FAULT failing one call of one op as a failed CUDA launch would.
# tiny.plan's model (tests/invariance/make-plan.sh) is built twice with
# `planc build`: one rank, and a two-stage pipeline (pp 2, 1F1B). Checks:
#   - every op of runtime/ops/errors.c's list is hooked in both builds;
#   - a fault in the middle of the step (prt_linear_bwd:3, 2 ranks) ends
#     the run within the first step (no step line), non-zero, without a
#     hang (every run under `timeout`), its message naming the rank, the
#     layer and the op;
#   - the layer and pass are the right ones: one rank, the first
#     prt_linear_bwd is the lm_head's backward (layer 10 of tiny's 11), the
#     second prt_gelu_fwd the second MLP's forward (layer 4);
#   - unknown op names and bad counts are refused at start;
#   - without PLANRT_FAULT the same program trains (the control).
#
#   usage: run.sh PLANC OUTDIR   (MPIRUN from the environment)
set -u
planc=$1; dir=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
limit=120   # seconds a run may take before it counts as a hang
mkdir -p "$dir"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# ---- every listed op is hooked in both builds ----------------------------------
cd "$root" || exit 1
ops=$(sed -n '/FAULT_OPS\[\] = {/,/^};/p' runtime/ops/errors.c | grep -o '"prt_[a-z0-9_]*"' | tr -d '"')
[ "$(echo "$ops" | wc -w)" -gt 40 ] || fail "the op list of runtime/ops/errors.c was not found"
for op in $ops; do
    cpu=$(cat runtime/ops/*.c | grep -cE "(PRT_OP_ENTER|prt_op_fault)\(\"$op\"\)")
    gpu=$(cat runtime/cuda/ops_*.cu runtime/cuda/ops_mem.c | grep -cE "(PRT_OP_ENTER|prt_op_fault)\(\"$op\"\)")
    [ "$cpu" = 1 ] && [ "$gpu" = 1 ] || fail "$op: hooked $cpu times in the CPU ops, $gpu in the CUDA ops (want 1 and 1)"
done
echo "ok   hooks: $(echo "$ops" | wc -w) ops, each hooked once in either build"

# ---- the programs ----------------------------------------------------------------
build() {   # NAME RANKS BODY
    "$here/../invariance/make-plan.sh" "$dir/$1.plan" "$2" "$3" &&
        "$planc" build "$dir/$1.plan" -o "$dir/$1" > "$dir/$1.build.log" 2>&1 ||
        { fail "$1: planc build failed"; cat "$dir/$1.build.log"; return 1; }
}
build one 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 4; schedule 1f1b; recompute none;" || exit 1
build pp2 2 "pp 2; micro_batch 2; schedule 1f1b;" || exit 1

# Run NAME on RANKS with PLANRT_FAULT=$3 ("" unset) for 3 steps into NAME.log;
# prints the exit status (124: the harness's timeout, a hang).
run() {
    local log="$dir/$1.$4.log"
    if [ -n "$3" ]; then
        PLANRT_FAULT=$3 timeout $limit $mpirun -x PLANRT_FAULT -np "$2" "$dir/$1" --steps 3 --timeout 60 \
            < /dev/null > "$log" 2>&1
    else
        timeout $limit $mpirun -np "$2" "$dir/$1" --steps 3 --timeout 60 < /dev/null > "$log" 2>&1
    fi
    echo $?
}

# Case NAME: status $2 (of run), log $3, then regexes the log must hold.
expect_failure() {
    local name=$1 rc=$2 log=$3 before=$fails; shift 3
    if [ "$rc" = 124 ]; then fail "$name: no end within $limit s (a hang)"; return; fi
    [ "$rc" != 0 ] || fail "$name: exit status 0, want non-zero"
    for re in "$@"; do
        grep -qE "$re" "$log" || fail "$name: no line matches /$re/"
    done
    ! grep -qE '^step +[0-9]+/' "$log" || fail "$name: a step line printed: it did not stop within the first step"
    if [ "$fails" = "$before" ]; then echo "ok   $name (status $rc): $(grep -m 1 -E 'error: rank' "$log" | cut -c 1-200)"
    else echo "---- $log"; tail -n 20 "$log"; fi
}

rc=$(run pp2 2 prt_linear_bwd:3 mid)
expect_failure "mid-step fault, 2 ranks" "$rc" "$dir/pp2.mid.log" \
    'error: rank [01]: prt_ops_sync\(\): a compute op failed: layer [0-9]+ \((attention|mlp|lm_head) backward\): prt_linear_bwd: injected fault \(PLANRT_FAULT=prt_linear_bwd:3\)'

rc=$(run one 1 prt_linear_bwd first)
expect_failure "first call by default, 1 rank" "$rc" "$dir/one.first.log" \
    'error: rank 0: .*layer 10 \(lm_head backward\): prt_linear_bwd: injected fault \(PLANRT_FAULT=prt_linear_bwd:1\)'

rc=$(run one 1 prt_gelu_fwd:2 fwd)
expect_failure "forward fault, 1 rank" "$rc" "$dir/one.fwd.log" \
    'error: rank 0: .*layer 4 \(mlp forward\): prt_gelu_fwd: injected fault'

rc=$(run pp2 2 prt_no_such_op bad)
expect_failure "unknown op refused" "$rc" "$dir/pp2.bad.log" \
    "PLANRT_FAULT=prt_no_such_op: no op named 'prt_no_such_op'; one of: prt_embedding_fwd "

rc=$(run one 1 prt_linear_bwd:0 count)
expect_failure "bad count refused" "$rc" "$dir/one.count.log" \
    "PLANRT_FAULT=prt_linear_bwd:0: the call count after ':' must be a whole number >= 1"

# the control: the same program, no fault, trains its 3 steps
rc=$(run one 1 "" none)
if [ "$rc" = 0 ] && grep -qE '^step +3/3' "$dir/one.none.log"; then echo "ok   no fault: 3 steps, status 0"
else fail "no fault: status $rc"; tail -n 20 "$dir/one.none.log"; fi

echo "fault: $fails failed"
[ "$fails" = 0 ]
