#!/bin/bash
# run.sh: `make test-hf` (issue 28, item 4): planc's runs checked by the real
# transformers library, for a tiny model of each of seven architectures.
#
# For each ARCH (llama mistral qwen2 gemma gemma2 mixtral gpt2):
#  0. hfref.py writes the tiny config.json; `planc import` makes it a model
#     block; the plan adds dtype fp32, dp 2 x tp 2, ZeRO-1 (Mixtral: ep 2) on
#     tests/hf/cpu4.plan's 4 CPU ranks, and `planc build` compiles it.
#  1. planc's forward against transformers', under planc's documented
#     conventions (tests/hf/ref_export.py, an independent Python mapping;
#     the families it maps): 4 steps are trained with a checkpoint after
#     each; the weights after step 3, mapped, loaded strictly by
#     transformers, give on step 4's batch the loss planc logged for step 4
#     and, in a run resumed from step 3 (--dump-logits), its logits.
#  2. Out: `planrt-ckpt export-hf` of the last checkpoint (planc's C
#     exporter) loads in AutoModelForCausalLM.from_pretrained without a
#     warning or a missing or unexpected key; a planc run started from it
#     (--init-from, one step) logs as its first loss transformers' loss of
#     it on that batch, and its logits (--dump-logits) are transformers';
#     greedy generation of 16 tokens agrees: transformers generates
#     (generate() = full forwards), and planc's argmax after each prefix of
#     that sequence (its logits, the sequence as data) is the next token;
#     the export's tensors are the reference mapping's, bit for bit.
#  3. In: a transformers model from a fixed seed, save_pretrained, starts a
#     planc run (--init-from) whose first loss and logits are transformers'
#     on its batch; with --steps 0 the executable's --export-hf gives back
#     the very tensors save_pretrained wrote.
# gemma2 also holds tests/hf/reference.py (test-hf-roundtrip's plain-Python
# forward) to transformers on a hfdir.py directory. olmo2 (post-norms, the
# q/k norm of the whole projections) is a row like the others.
# Losses and logits agree to a relative 1e-4 (fp32; logits: the largest
# difference over the largest logit, and the L2 norms). Every failure is counted and
# printed; the script exits 1 if any check failed.
#
#   usage: run.sh PLANC PLANRT_CKPT VENV OUTDIR [ARCH ...]   (MPIRUN from the environment)
set -u
planc=$1; ckpt_tool=$2; venv=$3; dir=$4; shift 4
archs=${*:-llama mistral qwen2 gemma gemma2 mixtral gpt2 olmo2}
here=$(cd "$(dirname "$0")" && pwd)
py="$venv/bin/python"
hfref="$here/hfref.py"
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
ranks=4; batch=8; seed=3; steps=4
fails=0

[ -x "$py" ] || { echo "✗ test-hf: no Python environment at $venv (scripts/hf-env.sh)" >&2; exit 1; }
mkdir -p "$dir"
data="$dir/data.bin"
"$py" "$hfref" data "$data" || exit 1

bad() { echo "✗ $*" >&2; fails=$((fails + 1)); }

# run NAME LOG ARGS...: the program on 4 ranks; its output in LOG.
run() {
    local name=$1 log=$2; shift 2
    $mpirun -np $ranks "$@" > "$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        bad "$name: exit status $rc from: $*"; sed 's/^/    /' "$log" | grep -v '^    --*$' | tail -n 6 >&2
        return 1
    fi
}

# plan ARCH OUT.plan: the imported model block, fp32, with the test's layout.
plan() {
    local arch=$1 out=$2 cfg="$dir/$1/config.json" extra=""
    "$py" "$hfref" config "$arch" "$cfg" || return 1
    "$planc" import "$cfg" -o "$dir/$arch/model.plan" 2> "$dir/$arch/import.log" || {
        bad "$arch: planc import $cfg failed"; cat "$dir/$arch/import.log" >&2; return 1; }
    [ "$arch" = mixtral ] && extra="ep 2;"
    {
        echo "include \"$here/cpu4.plan\""
        sed 's/^\( *\)dtype bf16$/\1dtype fp32/' "$dir/$arch/model.plan"
        echo "plan { dp 2; tp 2; pp 1; zero 1; $extra micro_batch 2; global_batch $batch; schedule 1f1b; recompute none; }"
        echo "train { steps $steps; lr 1e-3; seed $seed; optimizer adamw { weight_decay 0.0 } }"
    } > "$out"
    grep -q 'dtype fp32' "$out" || { bad "$arch: the imported plan has no dtype line to make fp32"; return 1; }
}

# check_loss WHAT HF_DIR LOG STEP: transformers' loss of HF_DIR on the batch
# of planc's step STEP == the loss planc logged for it.
check_loss() {
    "$py" "$hfref" check-loss "$2" "$3" --data "$data" --seed $seed --batch $batch --step "$4" \
        --what "$1" || bad "$1: loss differs (above)"
}

# check_logits WHAT HF_DIR PREFIX [STEP]: planc's logits of step STEP (1:
# the first; --dump-logits PREFIX) == transformers' of HF_DIR on that batch.
check_logits() {
    "$py" "$hfref" check-logits "$2" "$3" --data "$data" --seed $seed --batch $batch \
        --step "${4:-1}" --what "$1" || bad "$1: logits differ (above)"
}

for arch in $archs; do
    echo "---- $arch"
    d="$dir/$arch"; rm -rf "$d"; mkdir -p "$d"
    if [ "$arch" = gemma2 ]; then   # reference.py's Gemma 2 is transformers'
        python3 "$here/hfdir.py" make gemma2 "$d/hfdir" --dtype f32 > /dev/null &&
        "$py" "$hfref" check-reference "$d/hfdir" "$data" --what "gemma2 reference.py" ||
            bad "gemma2: transformers and reference.py differ"
    fi
    plan "$arch" "$d/$arch.plan" || continue
    "$planc" build "$d/$arch.plan" -o "$d/train" --target cpu > "$d/build.log" 2>&1 || {
        bad "$arch: planc build failed"; tail -n 15 "$d/build.log" >&2; continue; }
    exe="$d/train"

    # 1. planc's forward, under its documented conventions
    run "$arch: train" "$d/train.log" "$exe" --data "$data" --steps $steps \
        --log-json "$d/train.jsonl" --save "$d/ck" --save-every 1 || continue
    last="$d/ck/$(printf step-%08d $steps)"
    if "$py" "$here/ref_export.py" --has "$d/config.json"; then
        for k in $((steps - 1)) $steps; do
            "$ckpt_tool" consolidate "$d/ck/$(printf step-%08d $k)" "$d/ref-$k.safetensors" \
                --skip opt > /dev/null &&
            "$py" "$here/ref_export.py" "$d/ref-$k.safetensors" "$d/config.json" "$d/ref-$k" ||
                bad "$arch: the reference mapping of step $k failed"
        done
        check_loss "$arch forward (reference mapping)" "$d/ref-$((steps - 1))" "$d/train.jsonl" $steps
        # ... and its logits: step 4 again, resumed from step 3's checkpoint
        if run "$arch: --resume step $((steps - 1))" "$d/resume.log" "$exe" --data "$data" --steps $steps \
               --resume "$d/ck/$(printf step-%08d $((steps - 1)))" --dump-logits "$d/ref-logits"; then
            check_logits "$arch forward (reference mapping)" "$d/ref-$((steps - 1))" "$d/ref-logits" $steps
        fi
    fi

    # 2. out: planc's own export of the last checkpoint
    if "$ckpt_tool" export-hf "$last" "$d/export" --dtype fp32 > "$d/export.log" 2>&1; then
        if run "$arch: --init-from export" "$d/fwd.log" "$exe" --data "$data" --steps 1 \
               --init-from "$d/export" --log-json "$d/fwd.jsonl" --dump-logits "$d/fwd-logits"; then
            check_loss "$arch export" "$d/export" "$d/fwd.jsonl" 1
            check_logits "$arch export" "$d/export" "$d/fwd-logits"
        fi
        if "$py" "$hfref" gen-data "$d/export" "$d/gen.bin" --what "$arch export" &&
           run "$arch: --init-from export, generated tokens" "$d/gen.log" "$exe" --data "$d/gen.bin" \
               --steps 1 --init-from "$d/export" --dump-logits "$d/gen-logits"; then
            "$py" "$hfref" check-generate "$d/export" "$d/gen-logits" --data "$d/gen.bin" --batch $batch \
                --what "$arch export" || bad "$arch: greedy generation differs"
        else
            bad "$arch: no greedy generation to compare"
        fi
        if [ -d "$d/ref-$steps" ]; then
            "$py" "$hfref" same "$d/export" "$d/ref-$steps" --what "$arch export" ||
                bad "$arch: planc's export and the reference mapping differ"
        fi
    else
        bad "$arch: planrt-ckpt export-hf $last failed"; sed 's/^/    /' "$d/export.log" | tail -n 8 >&2
    fi

    # 3. in: a transformers-initialised model starts a planc run
    "$py" "$hfref" init "$arch" "$d/init" || { bad "$arch: save_pretrained failed"; continue; }
    if run "$arch: --init-from save_pretrained" "$d/init.log" "$exe" --data "$data" --steps 1 \
           --init-from "$d/init" --log-json "$d/init.jsonl" --dump-logits "$d/init-logits"; then
        check_loss "$arch init" "$d/init" "$d/init.jsonl" 1
        check_logits "$arch init" "$d/init" "$d/init-logits"
    fi
    # ... and with no step, the executable's --export-hf gives it back unchanged
    if run "$arch: --steps 0 --export-hf" "$d/rt.log" "$exe" --data "$data" --steps 0 \
           --init-from "$d/init" --save "$d/rt-ck" --export-hf "$d/roundtrip"; then
        "$py" "$hfref" same "$d/roundtrip" "$d/init" --what "$arch round trip" ||
            bad "$arch: HF -> planc -> HF changed the tensors"
    fi
done

if [ $fails -ne 0 ]; then
    echo "✗ test-hf: $fails check(s) failed" >&2
    exit 1
fi
echo "✓ test-hf: $archs: forward, export and init agree with transformers"
