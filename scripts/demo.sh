#!/usr/bin/env bash
# demo.sh: the main job of `make demo`. For now: `planc check` on every
# example, which prints each model's layers and exact parameter count, its
# cluster and its layout (and, as the planner grows, memory per stage and
# the predicted step). Later issues add search, code generation and a real
# training run of examples/tiny.plan on the CPU.
#
# usage: scripts/demo.sh            (PLANC=path/to/planc to use another build)
set -uo pipefail
cd "$(dirname "$0")/.."
planc=${PLANC:-build/bin/planc}
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
exit $status
