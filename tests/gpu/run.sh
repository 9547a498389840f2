#!/bin/bash
# tests/gpu/run.sh: the one command to run on a borrowed GPU machine.
#
# `make gpu-bundle` builds everything the checks run into build/gpu-bundle
# (tests/gpu.mk), here; the machine gets the working tree with that folder
# and runs `tests/gpu/run.sh --out $OUT`, which
#   1. probes (at most GPU_PROBE_S, 10 s): the GPU count (tests/gpu/lib.sh's
#      gpu_count, the one every check uses), the driver, the CUDA version
#      the driver supports, NCCL's version, Open MPI (the machine's, else the
#      bundle's, one rank as a singleton), which build tools exist, and the
#      libraries the bundle's programs cannot find;
#   2. uses the bundle; builds it only where it is missing and the tools
#      exist (the build counts against the overall deadline), else says
#      what is missing;
#   3. runs tests/gpu/check-{ops,cp,fp8,train,mem,comm,calib}.sh in that order (the
#      most telling first), each under its own deadline (lib.sh's
#      GPU_CHECKS), all within GPU_DEADLINE_S (480 s) of the start, with
#      PLANRT_TIMEOUT_S=60 and NCCL_DEBUG=WARN;
#   4. writes to DIR: run.log (this output), probe.txt, NAME.log and NAME/
#      per check, and gpu-summary.json: the machine, then per check its
#      name, status (pass, fail, timeout, skipped), seconds, deadline and
#      the figures it printed ("figure: KEY VALUE" lines: max loss
#      difference, model TFLOP/s, busbw, ...).
# `--dry` prints the plan instead: each check, its deadline and the bundle
# files it reads (ok, MISSING, or "to build" without a bundle), ending with
# "total deadline N s"; it runs nothing and exits 0 (make test-gpu-dry).
#
#   tests/gpu/run.sh [--dry] [--out DIR] [--bundle DIR]   (defaults build/gpu, build/gpu-bundle)
# PLANC_GPUS=N and GPU_MPI=bundle in the environment rehearse a run (N GPUs
# assumed, the bundle's Open MPI) on a machine that lacks them.
# Exit status: 0 every check passed or was skipped for want of hardware; 1
# a check failed or the run could not start; 2 bad arguments.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
usage() { echo "usage: tests/gpu/run.sh [--dry] [--out DIR] [--bundle DIR]"; }
dry=0
while [ $# -gt 0 ]; do
    case $1 in
        --dry) dry=1; shift ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; GPU_OUT=$2; shift 2 ;;
        --bundle) [ $# -ge 2 ] || { usage >&2; exit 2; }; GPU_BUNDLE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
checks=()
for e in $GPU_CHECKS; do checks+=("$e"); done

# ---- --dry: the plan -----------------------------------------------------------
if [ "$dry" = 1 ]; then
    if [ -f "$GPU_BUNDLE/MANIFEST" ]; then have=1; echo "# bundle $GPU_BUNDLE: $(head -1 "$GPU_BUNDLE/MANIFEST" | sed 's/^# //')"
    else have=0; echo "# bundle $GPU_BUNDLE: not built (make gpu-bundle builds the files marked 'to build')"; fi
    files() {
        local f s out=""
        for f in $(gpu_check_files "$1"); do
            if [ "$have" = 0 ]; then s="to build"; elif [ -e "$GPU_BUNDLE/$f" ]; then s=ok; else s=MISSING; fi
            out="$out $f ($s)"
        done
        echo "${out# }"
    }
    total=$GPU_PROBE_S
    printf '%-6s deadline %3d s  nvidia-smi, ldd of the bundle programs\n' probe "$GPU_PROBE_S"
    printf '%-6s                 reads %s\n' all "$(files common)"
    for e in "${checks[@]}"; do
        name=${e%%:*}; d=${e#*:}; total=$((total + d))
        [ -f "tests/gpu/check-$name.sh" ] || echo "MISSING: tests/gpu/check-$name.sh"
        printf '%-6s deadline %3d s  tests/gpu/check-%s.sh reads %s\n' "$name" "$d" "$name" "$(files "$name")"
    done
    [ "$total" -le "$GPU_DEADLINE_S" ] || echo "# the checks' deadlines add up to more than the overall $GPU_DEADLINE_S s"
    echo "total deadline $total s"
    exit 0
fi

# ---- the run ---------------------------------------------------------------------
mkdir -p "$GPU_OUT" || exit 1
GPU_OUT=$(cd "$GPU_OUT" && pwd)
export GPU_OUT GPU_BUNDLE
exec > >(tee "$GPU_OUT/run.log") 2>&1
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\000-\037')"; }

# probe
gpus=${PLANC_GPUS:-$(timeout 5 bash -c '. tests/gpu/lib.sh; gpu_count')}   # preset: a rehearsal without a GPU
gpus=${gpus:-0}
smi=$(timeout 5 nvidia-smi 2>/dev/null | head -4)
driver=$(timeout 5 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
gpu_name=$(timeout 5 nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
cuda=$(sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' <<< "$smi")
tools=""; lacking=""
for t in make gcc nvcc mpicc mpirun flex bison pkg-config python3; do
    if command -v "$t" >/dev/null 2>&1 || { [ "$t" = nvcc ] && [ -x /usr/local/cuda/bin/nvcc ]; }; then tools="$tools $t"
    else lacking="$lacking $t"; fi
done
{
    echo "gpus: $gpus ($gpu_name)"
    echo "driver: ${driver:-none}, CUDA (driver's): ${cuda:-unknown}"
    echo "tools present:${tools:- none}; absent:${lacking:- none}"
} | tee "$GPU_OUT/probe.txt" | sed 's/^/run.sh: /'

summary() {   # summary STATUS_OF_RUN: write gpu-summary.json from the check records
    local f=$GPU_OUT/gpu-summary.json
    {
        echo "{"
        echo "  \"passed\": $1,"
        echo "  \"seconds\": $(elapsed), \"deadline_s\": $GPU_DEADLINE_S,"
        echo "  \"gpus\": $gpus, \"gpu\": $(json_str "$gpu_name"), \"driver\": $(json_str "$driver"),"
        echo "  \"cuda\": $(json_str "$cuda"), \"nccl\": $(json_str "${nccl:-}"), \"mpi\": $(json_str "${PLANC_GPU_MPI:-}"),"
        echo "  \"bundle\": $(json_str "$(head -1 "$GPU_BUNDLE/MANIFEST" 2>/dev/null | sed 's/^# //')"),"
        echo "  \"tools_absent\": $(json_str "${lacking# }"), \"libs_missing\": $(json_str "${libs_missing:-}"),"
        echo "  \"checks\": ["
        local i n=${#records[@]}
        for ((i = 0; i < n; i++)); do echo "    ${records[$i]}$([ $((i + 1)) -lt "$n" ] && echo ,)"; done
        echo "  ]"
        echo "}"
    } > "$f"
    echo "run.sh: wrote $f"
}
records=()
skip_all() {   # skip_all REASON: every check skipped, summary, exit 1
    local e
    for e in "${checks[@]}"; do
        records+=("{\"name\": \"${e%%:*}\", \"status\": \"skipped\", \"seconds\": 0, \"deadline_s\": ${e#*:}, \"why\": $(json_str "$1"), \"figures\": {}}")
    done
    echo "run.sh: $1; no check run"
    summary false
    exit 1
}
[ "$gpus" -ge 1 ] || skip_all "no GPU visible (nvidia-smi --query-gpu finds none)"

# the bundle: use it, or build it where the tools are
if [ ! -f "$GPU_BUNDLE/MANIFEST" ]; then
    need=""
    for t in make gcc nvcc mpicc flex bison pkg-config; do case " $tools " in *" $t "*) ;; *) need="$need $t" ;; esac; done
    [ -z "$need" ] || skip_all "no bundle at $GPU_BUNDLE and no way to build it here (missing:$need); run make gpu-bundle where planc builds and carry $GPU_BUNDLE"
    echo "run.sh: no bundle at $GPU_BUNDLE: building it (make gpu-bundle, log build.log)"
    if ! timeout $((GPU_DEADLINE_S / 2)) make --no-print-directory -j"$(nproc)" gpu-bundle GPU_BUNDLE="$GPU_BUNDLE" \
            > "$GPU_OUT/build.log" 2>&1; then
        tail -20 "$GPU_OUT/build.log"
        skip_all "make gpu-bundle failed (build.log)"
    fi
fi
gpu_env || skip_all "the bundle at $GPU_BUNDLE is unusable"
echo "run.sh: bundle: $(head -1 "$GPU_BUNDLE/MANIFEST" | sed 's/^# //')"
echo "run.sh: Open MPI: $([ "$PLANC_GPU_MPI" = system ] && echo "the machine's ($PLANC_REAL_MPIRUN)" || echo "the bundle's (one rank, as a singleton)")" | tee -a "$GPU_OUT/probe.txt"
gpu_unpack >/dev/null || skip_all "cannot unpack bin/test_ops_cuda.gz"
libs_missing=""
for p in "$GPU_BUNDLE"/bin/{test_ops_cuda,test_comm_cuda,test_fp8_cuda,planrt-bench-cuda,planrt-calib-cuda,planc} "$GPU_BUNDLE/train/tiny_cuda"; do
    [ -e "$p" ] || continue
    libs_missing="$libs_missing $(ldd "$p" 2>/dev/null | awk '/not found/ { print $1 }')"
done
libs_missing=$(tr ' ' '\n' <<< "$libs_missing" | sort -u | tr '\n' ' ' | sed 's/^ *//; s/ *$//')
ncclso=$(gpu_lib_where "$GPU_BUNDLE/bin/test_comm_cuda" libnccl.so.2)
[ "$ncclso" = missing ] || nccl=$(grep -a -o -m1 'NCCL version [0-9][0-9A-Za-z.+]*' "$ncclso" 2>/dev/null | head -1 | sed 's/NCCL version //')
{
    echo "cuBLAS: $(gpu_lib_where "$GPU_OPS_EXE" libcublas.so.13)"
    echo "NCCL: $ncclso ${nccl:-}"
    echo "libraries not found:${libs_missing:+ }${libs_missing:-none}"
} | tee -a "$GPU_OUT/probe.txt" | sed 's/^/run.sh: /'
echo "run.sh: probe done at $(elapsed) s"

# the checks
export PLANRT_TIMEOUT_S=60 NCCL_DEBUG=WARN PLANC_GPUS=$gpus
status=0
for e in "${checks[@]}"; do
    name=${e%%:*}; own=${e#*:}
    left=$((GPU_DEADLINE_S - $(elapsed)))
    d=$own; [ "$left" -lt "$d" ] && d=$left
    log=$GPU_OUT/$name.log
    if [ "$d" -lt 10 ]; then
        echo "==== $name: skipped (the overall deadline of $GPU_DEADLINE_S s is reached)"
        records+=("{\"name\": \"$name\", \"status\": \"skipped\", \"seconds\": 0, \"deadline_s\": $own, \"why\": \"overall deadline\", \"figures\": {}}")
        status=1; continue
    fi
    echo "==== $name: tests/gpu/check-$name.sh (deadline $d s, log $name.log)"
    t0=$(date +%s)
    timeout -k 5 "$d" bash "tests/gpu/check-$name.sh" > "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    case $rc in
        0) st=pass ;;
        77) st=skipped ;;
        124|137) st=timeout; echo "check-$name: stopped at its deadline of $d s" >> "$log" ;;
        *) st=fail ;;
    esac
    [ "$st" = pass ] || [ "$st" = skipped ] || status=1
    figs=$(sed -n 's/^figure: \([A-Za-z0-9_.]*\) \(.*\)$/\1 \2/p' "$log" | awk '
        { v = $2; for (i = 3; i <= NF; i++) v = v " " $i
          if (v !~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) { gsub(/["\\]/, "", v); v = "\"" v "\"" }
          printf "%s\"%s\": %s", (n++ ? ", " : ""), $1, v }')
    records+=("{\"name\": \"$name\", \"status\": \"$st\", \"seconds\": $secs, \"deadline_s\": $own, \"log\": \"$name.log\", \"figures\": {$figs}}")
    grep '^figure: ' "$log" | sed 's/^/    /'
    if [ "$st" = fail ] || [ "$st" = timeout ]; then tail -15 "$log" | sed 's/^/    | /'; fi
    echo "==== $name: $st in $secs s"
done
echo "==== run.sh: $(elapsed) s of $GPU_DEADLINE_S, $([ $status = 0 ] && echo 'every check passed' || echo 'some checks FAILED')"
summary "$([ $status = 0 ] && echo true || echo false)"
exit $status
