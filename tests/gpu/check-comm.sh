#!/bin/bash
# check-comm.sh: the GPU checks of planrt's collectives, for a machine with
# NVIDIA GPUs (tests/gpu/run.sh calls every tests/gpu/check-*.sh).
#
#  1. test_comm_cuda: the test program of `make test-comm`, linked against
#     libplanrt_cuda.a (NCCL bootstrapped over MPI, one rank per GPU): every
#     collective x type x reduction x algorithm x mode on device buffers,
#     compared with values computed on the host.
#  2. planrt-bench-cuda: a short nccl-tests-style run of every collective,
#     NCCL native against planc's own ring and tree over ncclSend/ncclRecv.
#
# Usage: tests/gpu/check-comm.sh [BUILD_DIR]   (default: $BUILD, else build)
# Fits the 200 s run.sh gives each check (each step has its own timeout).
# Exit status: 0 all passed, 1 a check failed, 77 no GPU here.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build}}

if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "check-comm: no GPU visible; skipped"
    exit 77
fi
ngpu=$(nvidia-smi -L | wc -l)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe --bind-to none"

make --no-print-directory BUILD="$BUILD" "$BUILD/tests/test_comm_cuda" "$BUILD/bin/planrt-bench-cuda"

echo "== check-comm: test_comm_cuda on $ngpu rank(s), one per GPU"
timeout 90 $MPIRUN -np "$ngpu" "$BUILD/tests/test_comm_cuda"

echo "== check-comm: planrt-bench-cuda on $ngpu rank(s)"
for c in allreduce allgather reducescatter broadcast; do
    timeout 20 $MPIRUN -np "$ngpu" "$BUILD/bin/planrt-bench-cuda" -c "$c" -b 8K -e 64M -f 8 \
        -n 20 -w 5 -a native,ring,tree
done
timeout 20 $MPIRUN -np "$ngpu" "$BUILD/bin/planrt-bench-cuda" -c allreduce -b 1M -e 64M -f 8 \
    -d bf16 -o avg -a native,ring,tree
echo "== check-comm: passed"
