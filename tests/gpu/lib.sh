# tests/gpu/lib.sh: what tests/gpu/run.sh and every tests/gpu/check-*.sh
# share, sourced from the repository root: the GPU count (one definition),
# the checks with their deadlines and the bundle files each one reads
# (tests/gpu/bundle.sh builds exactly these; `run.sh --dry` lists them),
# and the environment that makes the bundle's programs run on a machine
# that has the NVIDIA driver but perhaps no Open MPI, OpenBLAS or Jansson.

GPU_BUNDLE=${GPU_BUNDLE:-build/gpu-bundle}   # `make gpu-bundle` writes it
GPU_OUT=${GPU_OUT:-build/gpu}                # logs and gpu-summary.json

# The checks in the order they run, each NAME:DEADLINE_S; with the probe's
# GPU_PROBE_S they make the overall deadline (GPU_DEADLINE_S, 480 s: a
# borrowed machine runs one command for at most 10 minutes).
GPU_CHECKS="ops:90 cp:40 fp8:25 train:60 mem:75 comm:65 calib:115"
GPU_PROBE_S=10
GPU_DEADLINE_S=480

# The GPUs this machine has: one line per GPU of --query-gpu (`nvidia-smi
# -L` also lists MIG devices); 0 without a driver.
gpu_count() {
    local n
    n=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '^ *[0-9]') || true
    echo "${n:-0}"
}

# The bundle files (relative to it) a check reads; "common" are those of
# every check.
gpu_check_files() {
    case $1 in
        common) echo bin/mpirun lib/libjansson.so.4 lib/libcudart.so.13 mpi/lib/libmpi.so.40 \
                     MANIFEST ;;
        ops)    echo bin/test_ops_cuda.gz ;;
        cp)     echo bin/test_cp_cuda ;;
        fp8)    echo bin/test_fp8_cuda.gz ;;
        train)  echo data/sample.txt train/tiny1.plan train/tiny_cuda train/cpu.jsonl ;;
        mem)    local n f; for n in m1 z0 z1 z2 z3; do for f in "$n" "$n.plan" "$n.check.json"; do
                    echo "mem/$f"; done; done; echo data/sample.txt ;;
        comm)   echo bin/test_comm_cuda bin/planrt-bench-cuda ;;
        calib)  echo bin/planc bin/planrt-calib-cuda data/sample.txt calib/g1024-one calib/g1024-one-sel \
                     calib/g1024-one-full calib/g1024-one.layout ;;
        *)      echo "gpu_check_files: unknown check '$1'" >&2; return 1 ;;
    esac
}

# Point PATH and the loader at the bundle (once): its bin/ first (planc,
# planrt-*-cuda, and bin/mpirun, tests/gpu/mpirun.sh: the system's mpirun
# where there is one, else a single rank as an MPI singleton); the bundle's
# Open MPI (mpi/, found through OPAL_PREFIX) only where the machine has no
# libmpi.so.40; cuBLAS and NCCL, too large to carry, from wherever the
# machine keeps them. GPU_MPI=bundle takes the bundle's Open MPI anyway.
gpu_env() {
    [ "${PLANC_GPU_ENV:-}" = 1 ] && return 0
    if [ ! -d "$GPU_BUNDLE/bin" ]; then
        echo "gpu_env: no bundle at $GPU_BUNDLE (make gpu-bundle builds it)" >&2
        return 1
    fi
    GPU_BUNDLE=$(cd "$GPU_BUNDLE" && pwd)
    export GPU_BUNDLE
    local ldc real d lib
    ldc=$(command -v ldconfig || echo /sbin/ldconfig)
    real=$(command -v mpirun || true)
    if [ "${GPU_MPI:-}" != bundle ] && [ -n "$real" ] && "$ldc" -p 2>/dev/null | grep -q 'libmpi\.so\.40 '; then
        export PLANC_GPU_MPI=system PLANC_REAL_MPIRUN=$real
    else
        export PLANC_GPU_MPI=bundle OPAL_PREFIX=$GPU_BUNDLE/mpi
        export LD_LIBRARY_PATH=$GPU_BUNDLE/mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    export PATH=$GPU_BUNDLE/bin:$PATH
    for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
        "$ldc" -p 2>/dev/null | grep -q " $lib " && continue
        for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/lib \
                 /usr/lib/x86_64-linux-gnu /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
                 /usr/lib/python3/dist-packages/nvidia/*/lib; do
            if [ -e "$d/$lib" ]; then
                case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
                break
            fi
        done
    done
    # a single rank without mpirun starts no daemon (Open MPI's singleton)
    export OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export PLANC_GPU_ENV=1
}

# test_ops_cuda and test_fp8_cuda travel gzipped (26 MiB with OpenBLAS, 7
# packed): unpack NAME (default test_ops_cuda) beside the .gz, or where the
# bundle is read-only into a temporary bin/ whose ../lib points at the
# bundle's; GPU_OPS_EXE names the program.
gpu_unpack() {
    local name=${1:-test_ops_cuda} t
    local z=$GPU_BUNDLE/bin/$name.gz
    GPU_OPS_EXE=$GPU_BUNDLE/bin/$name
    if [ -x "$GPU_OPS_EXE" ] && ! [ "$z" -nt "$GPU_OPS_EXE" ]; then return 0; fi
    if gzip -dc "$z" > "$GPU_OPS_EXE.tmp" 2>/dev/null && chmod +x "$GPU_OPS_EXE.tmp" &&
       mv "$GPU_OPS_EXE.tmp" "$GPU_OPS_EXE"; then return 0; fi
    rm -f "$GPU_OPS_EXE.tmp"
    t=$(mktemp -d) || return 1
    mkdir "$t/bin" && ln -s "$GPU_BUNDLE/lib" "$t/lib" && gzip -dc "$z" > "$t/bin/$name" &&
        chmod +x "$t/bin/$name" || return 1
    GPU_OPS_EXE=$t/bin/$name
}

# Where a library resolves for a bundle program ("missing" if nowhere).
gpu_lib_where() {
    local w
    w=$(ldd "$1" 2>/dev/null | awk -v l="$2" '$1 == l { print $3 }')
    case $w in ""|"not") echo missing ;; *) echo "$w" ;; esac
}

# A figure for gpu-summary.json: run.sh collects the lines "figure: KEY VALUE".
gpu_figure() { echo "figure: $1 $2"; }
