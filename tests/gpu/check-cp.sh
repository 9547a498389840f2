#!/bin/bash
# tests/gpu/check-cp.sh: context-parallel attention on the GPU (issue 26),
# with the bundle's test_cp_cuda (tests/test_cp_cuda.c): every form (ring,
# all_gather, all_to_all, hierarchical) forward and backward against the
# whole-sequence attention computed on the CPU in fp32, within bf16
# tolerance, and the buffers against prt_par.h's CUDA counts.
#  1. one rank (cp 1): every form's degenerate case on one GPU;
#  2. cp 2 and cp 4 where the machine has that many GPUs and Open MPI's
#     mpirun: planrt puts one rank on one GPU (two ranks on one physical
#     GPU are refused by UUID), so a one-GPU machine skips them and says so.
# Run by tests/gpu/run.sh. Figures: ranks_run ("1", "1 2", "1 2 4"),
# ranks_skipped, cases, cases_failed, max_err_out, max_err_dqkv (largest
# |gpu - cpu| over every case and run).
# Exit status: 0 passed, 1 failed, 77 no usable GPU.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
gpu_env || exit 1
dir=$GPU_OUT/cp
mkdir -p "$dir"
ngpu=${PLANC_GPUS:-$(gpu_count)}
[ "$ngpu" -ge 1 ] || { echo "check-cp: no GPU visible; skipped"; exit 77; }
[ "${PLANC_GPU_MPI:-}" = system ] || ngpu=1   # the bundle's Open MPI runs one rank
MPIRUN="mpirun --oversubscribe --bind-to none"
exe=$GPU_BUNDLE/bin/test_cp_cuda
ran=""; skipped=""; status=0
for np in 1 2 4; do
    if [ "$np" -gt "$ngpu" ]; then
        echo "== check-cp: cp $np skipped: needs $np GPUs (this machine has $ngpu visible to Open MPI's mpirun;" \
             "planrt refuses two ranks on one GPU)"
        skipped="$skipped $np"; continue
    fi
    echo "== check-cp: test_cp_cuda on $np rank(s), cp $np"
    # 16 s for one rank (CUDA, cuBLAS and NCCL start, then ~50 cases), 12 s
    # for each multi-rank run: 40 s in all, the check's deadline
    timeout $([ "$np" = 1 ] && echo 16 || echo 12) $MPIRUN -np "$np" "$exe" < /dev/null > "$dir/cp$np.txt" 2>&1
    rc=$?
    cat "$dir/cp$np.txt"
    if [ $rc = 77 ]; then echo "check-cp: no usable GPU, nothing checked" >&2; exit 77; fi
    [ $rc = 0 ] || { echo "check-cp: test_cp_cuda on $np rank(s) FAILED (status $rc)" >&2; status=1; }
    ran="$ran $np"
done
gpu_figure ranks_run "${ran# }"
gpu_figure ranks_skipped "${skipped:+${skipped# }}${skipped:-none}"
# "# test_cp_cuda: cp N: P passed, F failed; max |err| out X dqkv Y", one per run
cat "$dir"/cp*.txt | awk '/^# test_cp_cuda: cp / { p += $5; f += $7; o = $12 + 0 > o ? $12 + 0 : o; g = $14 + 0 > g ? $14 + 0 : g; n++ }
    END { if (n) printf "figure: cases %d\nfigure: cases_failed %d\nfigure: max_err_out %g\nfigure: max_err_dqkv %g\n", p + f, f, o, g }'
[ $status = 0 ] && echo "== check-cp: passed"
exit $status
