#!/bin/bash
# tests/gpu/run.sh: the one script to run on a machine with a GPU.
#
# Builds what the GPU checks need (in $BUILD, default build/gpu, so a CPU
# build tree is left alone), then runs every tests/gpu/check-*.sh in turn
# (check-ops.sh: CUDA ops vs CPU ops and a GPT-2-small step; check-comm.sh:
# the NCCL collectives; check-calib.sh: `planc calibrate --target cuda
# --quick` and the predicted-vs-measured table of planc's CUDA programs on
# that profile). Each check gets at most 200 s. Exit status: 0 if every
# check passed.
#
#   tests/gpu/run.sh            # from anywhere; prints figures to report
set -u
cd "$(dirname "$0")/../.." || exit 2
export BUILD=${BUILD:-build/gpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
if ! nvidia-smi -L; then
    echo "run.sh: no GPU visible (nvidia-smi failed); the checks would only skip" >&2
    exit 1
fi
nvcc --version 2>/dev/null | tail -1 || /usr/local/cuda/bin/nvcc --version | tail -1
mkdir -p "$BUILD"
echo "==== build ($BUILD)"
if ! make --no-print-directory -j"$(nproc)" BUILD="$BUILD" "$BUILD/lib/libplanrt.a" \
        "$BUILD/lib/libplanrt_cuda.a" > "$BUILD/build.log" 2>&1; then
    tail -30 "$BUILD/build.log" >&2
    echo "run.sh: build failed (log: $BUILD/build.log)" >&2
    exit 1
fi
status=0
for check in tests/gpu/check-*.sh; do
    echo "==== $check"
    timeout 200 bash "$check"
    rc=$?
    if [ $rc != 0 ]; then
        echo "==== $check FAILED (status $rc)"
        status=1
    fi
done
echo "==== run.sh: $(( $(date +%s) - start )) s, $([ $status = 0 ] && echo 'all checks passed' || echo 'some checks FAILED')"
exit $status
