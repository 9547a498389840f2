#!/bin/bash
# tests/gpu/check-comm.sh: the GPU checks of planrt's collectives, with the
# bundle's programs (tests/gpu.mk), one rank per GPU (on one GPU, or
# without Open MPI's mpirun, one rank):
#  1. test_comm_cuda: the test program of `make test-comm`, linked against
#     libplanrt_cuda.a (NCCL bootstrapped over MPI): every collective x
#     type x reduction x algorithm x mode on device buffers, compared with
#     values computed on the host.
#  2. planrt-bench-cuda: a short nccl-tests-style run of every collective,
#     NCCL native against planc's own ring and tree over ncclSend/ncclRecv
#     (the clock stops once the device has finished).
# Run by tests/gpu/run.sh. Figures: ranks, and per collective and algorithm
# the busbw and algbw (GB/s) at the largest size (busbw is 0 on one rank).
# Exit status: 0 all passed, 1 a check failed, 77 no GPU here.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
dir=$GPU_OUT/comm
mkdir -p "$dir"
ngpu=${PLANC_GPUS:-$(gpu_count)}
[ "$ngpu" -ge 1 ] || { echo "check-comm: no GPU visible; skipped"; exit 77; }
[ "${PLANC_GPU_MPI:-}" = system ] || ngpu=1
gpu_figure ranks "$ngpu"
MPIRUN="mpirun --oversubscribe --bind-to none"
bin=$GPU_BUNDLE/bin

echo "== check-comm: test_comm_cuda on $ngpu rank(s), one per GPU"
timeout 50 $MPIRUN -np "$ngpu" "$bin/test_comm_cuda" < /dev/null || { echo "check-comm: test_comm_cuda FAILED" >&2; exit 1; }

echo "== check-comm: planrt-bench-cuda on $ngpu rank(s)"
: > "$dir/bench.txt"
bench() {
    timeout 15 $MPIRUN -np "$ngpu" "$bin/planrt-bench-cuda" "$@" < /dev/null | tee -a "$dir/bench.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "check-comm: planrt-bench-cuda $* FAILED" >&2; exit 1; }
}
for c in allreduce allgather reducescatter broadcast; do
    bench -c "$c" -b 8K -e 64M -f 8 -n 20 -w 5 -a native,ring,tree
done
bench -c allreduce -b 1M -e 64M -f 8 -d bf16 -o avg -a native,ring,tree
# the largest size of each table: "# allreduce, N ranks, backend B, algorithm A, TYPE ..."
awk '/^# [a-z]+, [0-9]+ ranks?,/ { c = $2; sub(/,/, "", c); a = ""
         for (i = 1; i <= NF; i++) if ($i == "algorithm") { a = $(i + 1); sub(/,/, "", a) }
         t = ""; for (i = 1; i <= NF; i++) if ($i ~ /^(fp32|bf16|fp16|int32|fp64|int8|uint8)$/) t = $i }
     /^ *[0-9]+ +[0-9]+ / && c != "" { last[c "." t "." a] = $5 " " $6; order[c "." t "." a] = ++n }
     END { for (k in last) { split(last[k], v, " "); printf "figure: busbw_GBps.%s %s\nfigure: algbw_GBps.%s %s\n", k, v[2], k, v[1] } }' \
    "$dir/bench.txt" | sort
echo "== check-comm: passed"
