#!/bin/bash
# run.sh: generated programs under the accidents of real runs (issue 8).
#
#   usage: run.sh PLANC OUTDIR COMPARE   (MPIRUN from the environment)
#
# tiny.plan's model is built for four layouts: dp2 tp2 pp2 ZeRO-1 (tiny.plan
# itself, 8 ranks), dp1 tp4 pp2 (8), dp2 pp2 ZeRO-3 interleaved (4) and one
# rank; and a Llama-style model of the same size (another model). Then:
#
#  1. resume equality: an uninterrupted 12-step run saving every 3 steps; the
#     same run killed with SIGKILL once a checkpoint exists, resumed with
#     --resume: every loss after the resume point equals the uninterrupted
#     run's in all 9 printed digits of the JSON log;
#  2. resume on other layouts: the killed run's step-3 checkpoint resumed on
#     the three other layouts: losses within 1e-5 relative and final weights
#     within 1e-4 (COMPARE, tests/invariance/compare.c); and the same for a
#     padded vocabulary (257: tp 2 pads it to 258 rows, tp 4 to 260, one
#     rank not at all): a tp 2 checkpoint holds wte and lm_head as (257, 64)
#     and resumes on tp 4 and on one rank;
#  3. refusals: a truncated rank file, a flipped byte, a missing index.json
#     and another model's checkpoint each stop the run (non-zero, no crash)
#     with a message naming the file or the mismatch;
#  4. a rank killed with SIGKILL mid-run ends the job non-zero within 60 s,
#     named; a rank stopped (SIGSTOP: alive but silent) makes the others
#     time out (--timeout 5) and end the job within 60 s, named;
#  5. a NaN gradient norm injected at step 5 (PLANRT_TEST_NAN_STEP) stops
#     the run with the step named, and the newest complete checkpoint is
#     step 4's, which resumes;
#  6. --export's consolidated safetensors file: its header is JSON and its
#     tensors equal the run's --dump-params bit for bit
#     (runtime/ckpt/check_consolidated.py);
#  7. mixture of experts (issue 17): an expert-parallel checkpoint (dp 4,
#     ep 2, ZeRO-3: the experts' own group sharded over expert-DP) holds
#     global tensors: resumed on one rank (ep 1) and on dp 2 ep 2 pp 2 it
#     trains like the uninterrupted run, and its --export equals its dump;
# and that `planc build --launch slurm` wrote a valid sbatch script, that the
# progress line and the JSON log have every field (and PLANRT_PROGRESS=redraw
# redraws one line), and that a host list (mpirun -H) launches.
set -u
planc=$1; dir=$2; compare=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
inv="$root/tests/invariance/make-plan.sh"
rm -rf "$dir"; mkdir -p "$dir"
fails=0; n=0; t0=$(date +%s)
ok()   { n=$((n + 1)); printf 'ok   %s\n' "$1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); printf 'FAIL %s\n' "$1"; [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 12 "$2"; }
run()  { local np=$1; shift; (cd "$root" && $mpirun -np "$np" "$@" < /dev/null); }

# ---- builds ------------------------------------------------------------------
cp "$root/examples/tiny.plan" "$dir/tiny.plan"
sed -i 's|^include "clusters/laptop.plan"|include "'"$root"'/examples/clusters/laptop.plan"|' "$dir/tiny.plan"
"$inv" "$dir/tp4.plan" 8 "dp 1; tp 4; pp 2; zero 0; micro_batch 4; schedule 1f1b;"
"$inv" "$dir/z3.plan"  4 "dp 2; tp 1; pp 2; zero 3; micro_batch 2; schedule interleaved; chunks 2;"
"$inv" "$dir/one.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 16; schedule 1f1b;"
"$inv" "$dir/llama.plan" 8 "llama; dp 2; tp 2; pp 2; zero 1; micro_batch 2; schedule 1f1b;"
"$inv" "$dir/v257.plan" 4 "vocab257; dp 1; tp 2; pp 2; zero 1; micro_batch 2; schedule 1f1b;"
"$inv" "$dir/v257-tp4.plan" 4 "vocab257; dp 1; tp 4; pp 1; zero 0; micro_batch 4; schedule 1f1b;"
"$inv" "$dir/v257-one.plan" 1 "vocab257; dp 1; tp 1; pp 1; zero 0; micro_batch 16; schedule 1f1b;"
"$inv" "$dir/moe-ep.plan" 4 "moe; dp 4; ep 2; tp 1; pp 1; zero 3; micro_batch 2; schedule 1f1b;"
"$inv" "$dir/moe-one.plan" 1 "moe; dp 1; tp 1; pp 1; zero 0; micro_batch 16; schedule 1f1b;"
"$inv" "$dir/moe-pp2.plan" 4 "moe; dp 2; ep 2; tp 1; pp 2; zero 1; micro_batch 2; schedule 1f1b;"
"$inv" "$dir/md-ep.plan" 4 "moedense; dp 2; ep 2; tp 1; pp 2; zero 3; micro_batch 2; schedule 1f1b;"
"$inv" "$dir/md-tp2.plan" 4 "moedense; dp 1; tp 2; pp 2; zero 0; micro_batch 4; schedule interleaved; chunks 2;"
"$inv" "$dir/eb-ep.plan" 4 "moebias; dp 2; ep 2; tp 1; pp 2; zero 1; micro_batch 2; schedule 1f1b;"
"$inv" "$dir/eb-tp2.plan" 2 "moebias; dp 1; tp 2; pp 1; zero 0; micro_batch 4; schedule 1f1b;"
printf '%s\n' tiny tp4 z3 one llama v257 v257-tp4 v257-one moe-ep moe-one moe-pp2 md-ep md-tp2 eb-ep eb-tp2 |
    xargs -P 2 -I{} sh -c '"$1" build "$2/$3.plan" -o "$2/$3" --launch slurm > "$2/$3.build.log" 2>&1 || touch "$2/$3.build-failed"' \
        sh "$planc" "$dir" {}
for b in tiny tp4 z3 one llama v257 v257-tp4 v257-one moe-ep moe-one moe-pp2 md-ep md-tp2 eb-ep eb-tp2; do
    if [ -e "$dir/$b.build-failed" ]; then fail "planc build $b" "$dir/$b.build.log"; echo "resilience: cannot go on"; exit 1; fi
done
steps=12
# --launch slurm: the sbatch script beside the executable, sized from the plan
sb="$dir/tiny.sbatch"
if [ -x "$sb" ] && bash -n "$sb" && grep -q '^#SBATCH --nodes=1$' "$sb" && grep -q '^#SBATCH --ntasks=8$' "$sb" &&
   grep -q '^#SBATCH --ntasks-per-node=8$' "$sb" && grep -qF "srun --kill-on-bad-exit=1 '$dir/tiny' \"\$@\"" "$sb"; then
    ok "planc build --launch slurm: tiny.sbatch, 1 node x 8 tasks, srun of the executable"
else
    fail "planc build --launch slurm: tiny.sbatch" "$sb"
fi

# The "loss" field of every line of a JSON log, as "STEP LOSS" text.
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/p' "$1"; }

# ---- 1. save, kill -9, resume: exact -----------------------------------------
run 8 "$dir/tiny" --steps $steps --save "$dir/full.ck" --save-every 3 --log-json "$dir/full.jsonl" \
    --dump-params "$dir/full.dump" --export "$dir/model.safetensors" > "$dir/full.log" 2>&1 ||
    fail "uninterrupted run" "$dir/full.log"
run 8 "$dir/tiny" --steps $steps --save "$dir/ck" --save-every 3 --log-json "$dir/killed.jsonl" \
    > "$dir/killed.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ -e "$dir/ck/step-00000003/index.json" ] && break; sleep 0.05; done
victim=$(pgrep -f "^$dir/tiny --steps" | sed -n 4p)
[ -n "$victim" ] && kill -9 "$victim"
wait $job; rc=$?
last=$(ls "$dir/ck" | tail -n 1)
if [ "$rc" = 0 ] || [ -z "$victim" ] || [ "$last" = "step-$(printf %08d $steps)" ]; then
    fail "the run was not killed before its end (status $rc, newest checkpoint $last)" "$dir/killed.log"
fi
run 8 "$dir/tiny" --steps $steps --save "$dir/ck" --save-every 3 --resume "$dir/ck" \
    --log-json "$dir/resumed.jsonl" > "$dir/resumed.log" 2>&1 || fail "resume after kill -9" "$dir/resumed.log"
from=$(sed -n 's/^resumed from .*: \([0-9]*\) steps done/\1/p' "$dir/resumed.log")
if [ -n "$from" ] && [ "$from" -ge 3 ] && [ "$from" -lt $steps ] &&
   [ "$(losses "$dir/resumed.jsonl")" = "$(losses "$dir/full.jsonl" | awk -v f="$from" '$1 > f')" ] &&
   [ "$(losses "$dir/resumed.jsonl" | wc -l)" = $((steps - from)) ]; then
    ok "kill -9 after step $from, --resume: losses of steps $((from + 1))-$steps identical to the uninterrupted run (9 digits)"
else
    fail "resume after kill -9 (from '$from'): losses differ"; paste <(losses "$dir/full.jsonl") <(losses "$dir/resumed.jsonl") | head -n 12
fi

# a resume with nothing left to do says so (and still exits 0)
if run 8 "$dir/tiny" --steps 3 --resume "$dir/full.ck/step-00000006" > "$dir/nothing.log" 2>&1 &&
   grep -q 'nothing to train: the checkpoint has done 6 steps and --steps is 3' "$dir/nothing.log" &&
   ! grep -q '^step' "$dir/nothing.log"; then
    ok "--resume at step 6 with --steps 3: says there is nothing to train, trains nothing"
else
    fail "--resume with nothing to do" "$dir/nothing.log"
fi

# ---- progress line and JSON log ---------------------------------------------------
# one line per step when stdout is no terminal (under mpirun: see docs/codegen.md);
# PLANRT_PROGRESS=redraw redraws one line in place
re='^step +[0-9]+/12 \| loss [0-9.]+ \| +[0-9]+ tok/s \| +[0-9.]+ ms/step \| MFU +[0-9.]+% \| ETA [0-9hms]+$'
keys='"step": [0-9]+, "total": 12, "loss": [0-9.e+-]+, "grad_norm": [0-9.e+-]+, "tokens_per_s": [0-9.]+, "ms": [0-9.]+, "mfu": [0-9.e+-]+, "eta_s": [0-9.]+'
PLANRT_PROGRESS=redraw run 8 "$dir/tiny" --steps 2 > "$dir/redraw.log" 2>&1
if [ "$(grep -cE "$re" "$dir/full.log")" = $steps ] && [ "$(grep -cE "$keys" "$dir/full.jsonl")" = $steps ] &&
   [ "$(tr -cd '\r' < "$dir/redraw.log" | wc -c)" = 1 ] && [ "$(grep -c 'step ' "$dir/redraw.log")" = 1 ]; then
    ok "progress: $steps lines '$(grep -m 1 '^step' "$dir/full.log" | tr -s ' ')'; JSON with every field; PLANRT_PROGRESS=redraw: one line redrawn"
else
    fail "progress line or JSON log" "$dir/full.log"; head -n 2 "$dir/full.jsonl"; od -c "$dir/redraw.log" | head -n 5
fi

# a host list, as across machines (here: this one, 8 slots)
if (cd "$root" && $mpirun -H localhost:8 -np 8 "$dir/tiny" --steps 2 < /dev/null > "$dir/hosts.log" 2>&1) &&
   [ "$(grep -c '^step' "$dir/hosts.log")" = 2 ]; then
    ok "mpirun -H localhost:8 -np 8: trains"
else
    fail "mpirun -H localhost:8" "$dir/hosts.log"
fi

# ---- 2. resume on other layouts -------------------------------------------------
sed -n '4,$p' "$dir/full.jsonl" > "$dir/ref-after3.jsonl"
for c in "tp4 8" "z3 4" "one 1"; do
    set -- $c
    run "$2" "$dir/$1" --steps $steps --resume "$dir/ck/step-00000003" --log-json "$dir/$1.jsonl" \
        --dump-params "$dir/$1.dump" > "$dir/$1.log" 2>&1 || { fail "resume on $1" "$dir/$1.log"; continue; }
    if out=$("$compare" "$dir/ref-after3.jsonl" "$dir/full.dump" "$dir/$1.jsonl" "$dir/$1.dump"); then
        ok "dp2 tp2 pp2 checkpoint resumed on $1 ($2 ranks): $(echo "$out" | tail -n 1 | sed 's/^ *//')"
    else
        fail "resume on $1: $out"
    fi
done

# a padded vocabulary: the checkpoint holds the model's (257, 64) tensors,
# not tp 2's 258 padded rows, so tp 4 (260 rows) and one rank (257) resume it
run 4 "$dir/v257" --steps 6 --save "$dir/ck257" --save-every 3 --log-json "$dir/v257.jsonl" \
    --dump-params "$dir/v257.dump" --export "$dir/v257.safetensors" > "$dir/v257.log" 2>&1 ||
    fail "padded vocabulary: tp 2 run" "$dir/v257.log"
shapes=$(python3 -c '
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
print(h["wte.weight"]["shape"], h["lm_head.weight"]["shape"])' "$dir/v257.safetensors" 2>&1)
if [ "$shapes" = "[257, 64] [257, 64]" ]; then
    ok "padded vocabulary: the tp 2 checkpoint's wte and lm_head are $shapes (no padding rows)"
else
    fail "padded vocabulary: exported shapes '$shapes', expected [257, 64] [257, 64]"
fi
sed -n '4,$p' "$dir/v257.jsonl" > "$dir/v257-after3.jsonl"
for c in "v257-tp4 4" "v257-one 1"; do
    set -- $c
    run "$2" "$dir/$1" --steps 6 --resume "$dir/ck257/step-00000003" --log-json "$dir/$1.jsonl" \
        --dump-params "$dir/$1.dump" > "$dir/$1.log" 2>&1 || { fail "resume on $1" "$dir/$1.log"; continue; }
    if out=$("$compare" "$dir/v257-after3.jsonl" "$dir/v257.dump" "$dir/$1.jsonl" "$dir/$1.dump"); then
        ok "vocab 257: tp 2 (258 rows) checkpoint resumed on $1 ($2 ranks): $(echo "$out" | tail -n 1 | sed 's/^ *//')"
    else
        fail "vocab 257: resume on $1: $out"
    fi
done

# ---- 3. refusals ------------------------------------------------------------------
# expect NAME WHAT PATTERN: the last run failed cleanly, its log matching PATTERN.
refused() {
    local name=$1 rc=$2 pat=$3 log=$4
    if [ "$rc" != 0 ] && [ "$rc" -lt 128 ] && grep -q -- "$pat" "$log" && ! grep -qi 'segmentation\|core dumped\|Sanitizer' "$log"; then
        ok "$name refused: $(grep -m 1 -- "$pat" "$log" | cut -c 1-150)"
    else
        fail "$name: status $rc, expected a message matching '$pat'" "$log"
    fi
}
bad() { rm -rf "$dir/bad-$1"; mkdir -p "$dir/bad-$1"; cp -r "$dir/ck/step-00000003" "$dir/bad-$1/"; echo "$dir/bad-$1/step-00000003"; }
d=$(bad trunc); f="$d/rank-00001.safetensors"; truncate -s $(( $(stat -c %s "$f") - 100 )) "$f"
run 8 "$dir/tiny" --steps $steps --resume "$d" > "$dir/trunc.log" 2>&1; refused "truncated file" $? "rank-00001.safetensors" "$dir/trunc.log"
d=$(bad flip); f="$d/rank-00002.safetensors"; at=$(( $(stat -c %s "$f") / 2 ))
b=$(od -An -tu1 -j $at -N1 "$f" | tr -d ' '); printf "$(printf '\\%03o' $(( b ^ 16 )))" | dd of="$f" bs=1 seek=$at conv=notrunc 2> /dev/null
run 8 "$dir/tiny" --steps $steps --resume "$d" > "$dir/flip.log" 2>&1; refused "flipped byte" $? "rank-00002.safetensors.*\(checksum\|CRC\)" "$dir/flip.log"
d=$(bad noindex); rm "$d/index.json"
run 8 "$dir/tiny" --steps $steps --resume "$d" > "$dir/noindex.log" 2>&1; refused "missing index.json" $? "index.json" "$dir/noindex.log"
run 8 "$dir/tiny" --steps $steps --resume "$dir/bad-noindex" > "$dir/noindex2.log" 2>&1; refused "a root with only an incomplete checkpoint" $? "no complete checkpoint" "$dir/noindex2.log"
run 8 "$dir/llama" --steps $steps --resume "$dir/ck" > "$dir/llama.log" 2>&1; refused "another model's checkpoint" $? "not a checkpoint of this model.*tiny" "$dir/llama.log"

# ---- 4. a rank dies or hangs mid-run -------------------------------------------------
# kill_test NAME SIGNAL PATTERN: start a long run, send SIGNAL to one rank
# after its first steps, expect the job to end non-zero within 60 s.
kill_test() {
    local name=$1 sig=$2 pat=$3 log="$dir/$1.log"
    run 8 "$dir/tiny" --steps 400 --timeout 5 --log-json "$dir/$1.jsonl" > "$log" 2>&1 &
    local job=$! v=
    for _ in $(seq 600); do [ -s "$dir/$1.jsonl" ] && [ "$(wc -l < "$dir/$1.jsonl")" -ge 2 ] && break; sleep 0.05; done
    v=$(pgrep -f "^$dir/tiny --steps 400" | sed -n 6p)
    local t=$(date +%s.%N)
    [ -n "$v" ] && kill "-$sig" "$v"
    local waited=0
    while kill -0 $job 2> /dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 $job 2> /dev/null; then
        fail "$name: the job still runs 60 s after the rank's $sig (a hang)" "$log"
        pkill -9 -f "^$dir/tiny --steps 400"; wait $job; return
    fi
    wait $job; local rc=$?
    local dt=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    [ "$sig" = STOP ] && kill -9 "$v" 2> /dev/null
    if [ "$rc" != 0 ] && [ -n "$v" ] && grep -qi -- "$pat" "$log"; then
        ok "$name: job ended in $dt s, status $rc: $(grep -m 1 -i -- "$pat" "$log" | cut -c 1-140)"
    else
        fail "$name: status $rc after $dt s, expected a message matching '$pat'" "$log"
    fi
}
kill_test "rank killed (SIGKILL) mid-run" KILL "signal 9\|killed\|timed out"
kill_test "rank stopped (SIGSTOP) mid-run" STOP "timed out"

# ---- 5. NaN --------------------------------------------------------------------------
PLANRT_TEST_NAN_STEP=5 run 8 "$dir/tiny" --steps $steps --save "$dir/nan.ck" --save-every 2 > "$dir/nan.log" 2>&1
rc=$?
newest=$(ls "$dir/nan.ck" 2> /dev/null | tail -n 1)
if [ "$rc" != 0 ] && grep -q "NaN at step 5" "$dir/nan.log" && [ "$newest" = step-00000004 ] &&
   [ -e "$dir/nan.ck/step-00000004/index.json" ] && ! grep -q "^step *5/" "$dir/nan.log"; then
    ok "NaN gradient norm at step 5: stopped (status $rc), newest checkpoint $newest: $(grep -m 1 NaN "$dir/nan.log" | cut -c 1-110)"
else
    fail "NaN injection: status $rc, newest checkpoint '$newest'" "$dir/nan.log"
fi
if run 8 "$dir/tiny" --steps 6 --resume "$dir/nan.ck" > "$dir/nan-resume.log" 2>&1 &&
   grep -q "resumed from .*step-00000004" "$dir/nan-resume.log"; then
    ok "the last good checkpoint (step 4) resumes"
else
    fail "resume from the last good checkpoint" "$dir/nan-resume.log"
fi

# ---- 6. consolidated model ---------------------------------------------------------------
tail -c +9 "$dir/full.dump" > "$dir/full.expected"   # PRTDUMP1 magic off: u32 count, tensors
if out=$(python3 "$root/runtime/ckpt/check_consolidated.py" "$dir/model.safetensors" "$dir/full.expected" 2>&1); then
    ok "--export: $(echo "$out" | tail -n 1)"
else
    fail "--export's consolidated file: $out"
fi

# ---- 7. mixture of experts: an expert-parallel checkpoint ---------------------------------
run 4 "$dir/moe-ep" --steps 6 --save "$dir/ckmoe" --save-every 3 --log-json "$dir/moe-ep.jsonl" \
    --dump-params "$dir/moe-ep.dump" --export "$dir/moe-ep.safetensors" > "$dir/moe-ep.log" 2>&1 ||
    fail "MoE: the dp 4 ep 2 ZeRO-3 run" "$dir/moe-ep.log"
sed -n '4,$p' "$dir/moe-ep.jsonl" > "$dir/moe-after3.jsonl"
for c in "moe-one 1" "moe-pp2 4"; do
    set -- $c
    run "$2" "$dir/$1" --steps 6 --resume "$dir/ckmoe/step-00000003" --log-json "$dir/$1.jsonl" \
        --dump-params "$dir/$1.dump" > "$dir/$1.log" 2>&1 || { fail "MoE: resume on $1" "$dir/$1.log"; continue; }
    if out=$("$compare" "$dir/moe-after3.jsonl" "$dir/moe-ep.dump" "$dir/$1.jsonl" "$dir/$1.dump"); then
        ok "MoE: dp 4 ep 2 ZeRO-3 checkpoint resumed on $1 ($2 ranks): $(echo "$out" | tail -n 1 | sed 's/^ *//')"
    else
        fail "MoE: resume on $1: $out"
    fi
done
# a dense first block then mixtures (issue 29, two consecutive repeats): the
# pipeline cut between them, saved at ep 2 ZeRO-3, resumed at tp 2 interleaved
run 4 "$dir/md-ep" --steps 6 --save "$dir/ckmd" --save-every 3 --log-json "$dir/md-ep.jsonl" \
    --dump-params "$dir/md-ep.dump" > "$dir/md-ep.log" 2>&1 || fail "MoE dense-first: the ep 2 run" "$dir/md-ep.log"
sed -n '4,$p' "$dir/md-ep.jsonl" > "$dir/md-after3.jsonl"
if ! run 4 "$dir/md-tp2" --steps 6 --resume "$dir/ckmd/step-00000003" --log-json "$dir/md-tp2.jsonl" \
        --dump-params "$dir/md-tp2.dump" > "$dir/md-tp2.log" 2>&1; then
    fail "MoE dense-first: resume on tp 2" "$dir/md-tp2.log"
elif out=$("$compare" "$dir/md-after3.jsonl" "$dir/md-ep.dump" "$dir/md-tp2.jsonl" "$dir/md-tp2.dump"); then
    ok "MoE dense-first: dp 2 ep 2 pp 2 checkpoint resumed on tp 2 pp 2 interleaved: $(echo "$out" | tail -n 1 | sed 's/^ *//')"
else
    fail "MoE dense-first: resume on tp 2: $out"
fi
# aux-loss-free balancing (issue 29): the experts' biases are state beside
# the weights (moe_expert_bias.txt, by name); a checkpoint of dp 2 ep 2 pp 2
# resumed on tp 2 routes as the uninterrupted run, and the same checkpoint
# without the file is refused naming it (zero biases would route otherwise)
run 4 "$dir/eb-ep" --steps 6 --save "$dir/ckeb" --save-every 3 --log-json "$dir/eb-ep.jsonl" \
    --dump-params "$dir/eb-ep.dump" > "$dir/eb-ep.log" 2>&1 || fail "MoE expert bias: the ep 2 run" "$dir/eb-ep.log"
sed -n '4,$p' "$dir/eb-ep.jsonl" > "$dir/eb-after3.jsonl"
if ! grep -q '^layers.2.block_sparse_moe.gate.e_score_correction_bias ' "$dir/ckeb/step-00000003/moe_expert_bias.txt"; then
    fail "MoE expert bias: the checkpoint names the biases" "$dir/ckeb/step-00000003/moe_expert_bias.txt"
elif ! run 2 "$dir/eb-tp2" --steps 6 --resume "$dir/ckeb/step-00000003" --log-json "$dir/eb-tp2.jsonl" \
        --dump-params "$dir/eb-tp2.dump" > "$dir/eb-tp2.log" 2>&1; then
    fail "MoE expert bias: resume on tp 2" "$dir/eb-tp2.log"
elif out=$("$compare" "$dir/eb-after3.jsonl" "$dir/eb-ep.dump" "$dir/eb-tp2.jsonl" "$dir/eb-tp2.dump"); then
    ok "MoE expert bias: dp 2 ep 2 pp 2 checkpoint resumed on tp 2 with its biases: $(echo "$out" | tail -n 1 | sed 's/^ *//')"
else
    fail "MoE expert bias: resume on tp 2: $out"
fi
rm "$dir/ckeb/step-00000003/moe_expert_bias.txt"
if ! run 2 "$dir/eb-tp2" --steps 6 --resume "$dir/ckeb/step-00000003" > "$dir/eb-nofile.log" 2>&1 &&
   grep -q "has no moe_expert_bias.txt, the experts' routing biases of expert_bias true" "$dir/eb-nofile.log"; then
    ok "MoE expert bias: a checkpoint without the biases is refused, naming them"
else
    fail "MoE expert bias: a checkpoint without the biases" "$dir/eb-nofile.log"
fi
tail -c +9 "$dir/moe-ep.dump" > "$dir/moe-ep.expected"
if out=$(python3 "$root/runtime/ckpt/check_consolidated.py" "$dir/moe-ep.safetensors" "$dir/moe-ep.expected" 2>&1); then
    ok "MoE: --export of the ep 2 run: $(echo "$out" | tail -n 1)"
else
    fail "MoE: --export's consolidated file: $out"
fi

echo "resilience: $n checks, $fails failed, $(( $(date +%s) - t0 )) s"
[ "$fails" = 0 ]
