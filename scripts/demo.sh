#!/usr/bin/env bash
# demo.sh: the main job of `make demo`, end to end on this machine.
#
#  1. `planc check` on every example: layers, exact parameter count, cluster,
#     layout, memory per stage and the predicted step;
#  2. `planc search` on tiny.plan: the best layouts for its cluster;
#     then `planc calibrate --ranks 2` measures this machine once (cached in
#     build/calib/measured.plan, as `make validate` does) and `planc search`
#     ranks tiny's model on 2 ranks of it, the cluster that was measured;
#  3. `planc build examples/tiny.plan` for the CPU (dp 2 x tp 2 x pp 2,
#     ZeRO-1, 1F1B): one generated C program, compiled against libplanrt;
#  4. trains it on 8 MPI ranks for about two minutes on text the project
#     makes itself (scripts/make-data.sh), printing the loss as it falls,
#     saving a checkpoint every 200 steps and the model as one safetensors
#     file at the end;
#  5. says where the generated source and the checkpoints are.
#
# usage: scripts/demo.sh     (PLANC=path/to/planc, DEMO_STEPS=N, MPIRUN=...)
set -uo pipefail
cd "$(dirname "$0")/.."
planc=${PLANC:-build/bin/planc}
steps=${DEMO_STEPS:-600}
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
status=0
for f in examples/tiny.plan examples/gpt2-small.plan examples/gpt3-175b.plan \
         examples/llama3-8b.plan examples/llama3-70b.plan; do
    echo "==== planc check $f"
    "$planc" check "$f"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "demo: planc check $f exited with $rc" >&2
        status=1
    fi
    echo
done

echo "==== planc search examples/tiny.plan --top 5"
if ! "$planc" search examples/tiny.plan --top 5; then
    echo "demo: planc search is not available in this build; skipped"
fi
echo

out=build/demo
mkdir -p "$out"
calib=build/calib/measured.plan
if [ ! -s "$calib" ]; then
    echo "==== planc calibrate --target cpu --ranks 2 -o $calib   (once; later demos and make validate-calib reuse it)"
    mkdir -p build/calib
    "$planc" calibrate --target cpu --ranks 2 -o "$calib" || { echo "demo: planc calibrate failed" >&2; status=1; }
    echo
fi
if [ -s "$calib" ]; then
    { echo "include \"../calib/measured.plan\""; sed -e '/^include/d' -e '/^plan *{/,/^}/d' examples/tiny.plan
      echo 'plan { micro_batch 2; global_batch 16; }'; } > "$out/tiny-measured.plan"
    echo "==== planc search $out/tiny-measured.plan --top 5   (tiny's model on this machine, as measured)"
    "$planc" search "$out/tiny-measured.plan" --top 5 || status=1
    echo
fi
echo "==== planc build examples/tiny.plan -o $out/tiny"
scripts/make-data.sh examples/data/sample.txt || exit 1
if ! "$planc" build examples/tiny.plan -o "$out/tiny"; then
    echo "demo: planc build failed" >&2
    exit 1
fi
echo
rm -rf "$out/ckpt"
# the line as it runs here, so it works when pasted (as root and on fewer
# cores than ranks too)
envs="OPENBLAS_NUM_THREADS=1"
[ "$(id -u)" = 0 ] && envs="OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $envs"
echo "==== $envs $mpirun -np 8 $out/tiny --steps $steps --save $out/ckpt --save-every 200 --export $out/model.safetensors"
echo "     (every 10th step shown; full log: $out/train.jsonl)"
$mpirun -np 8 "$out/tiny" --steps "$steps" --log-json "$out/train.jsonl" --save "$out/ckpt" \
        --save-every 200 --export "$out/model.safetensors" |
    awk -v last="$steps" '!/^step/ || $2 % 10 == 0 || $2 == last'
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo "demo: training exited with $rc" >&2
    exit 1
fi
first=$(sed -n '1s/.*"loss": \([0-9.]*\).*/\1/p' "$out/train.jsonl")
final=$(sed -n '$s/.*"loss": \([0-9.]*\).*/\1/p' "$out/train.jsonl")
echo
echo "loss $first -> $final over $steps steps (ln 256 = 5.545 is a uniform guess over bytes)"
echo "the generated program is $out/tiny.c: read it from the top (planc emit prints the same)"
echo "checkpoints: $(ls "$out/ckpt" | tr '\n' ' ')(resume with --resume $out/ckpt, on any layout)"
echo "the trained model as one safetensors file: $out/model.safetensors"
exit $status
