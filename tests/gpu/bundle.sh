#!/bin/bash
# tests/gpu/bundle.sh: assemble $GPU_BUNDLE (build/gpu-bundle), everything a
# borrowed GPU machine needs to run tests/gpu/run.sh without building (see
# tests/gpu.mk, which calls it after linking the programs into LINKDIR).
#
#   bin/    planc, planrt-calib-cuda, planrt-bench-cuda, test_comm_cuda,
#           test_cp_cuda, test_ops_cuda.gz and test_fp8_cuda.gz (unpacked where run), mpirun
#           (tests/gpu/mpirun.sh)
#   lib/    the shared libraries of those programs that a bare machine may
#           lack (all but glibc's, libstdc++/libgcc_s, zlib, udev, the CUDA
#           driver, cuBLAS and NCCL); every program's rpath has $ORIGIN/../lib
#   mpi/    Open MPI's libraries, help texts and the plugins that load with
#           them alone, found through OPAL_PREFIX where the machine has no
#           libmpi (then one rank runs as an MPI singleton)
#   data/   sample.txt, the text every program trains on (--data)
#   train/  tiny1.plan, its CUDA program, cpu.jsonl: the CPU program's 5 losses
#   mem/    the plans, `planc check --json` and CUDA programs of check-mem
#           (m1: one rank; z0..z3: dp 2 under each ZeRO stage)
#   calib/  the one-rank layouts of scripts/validate-calib.sh, built (BUILD_ONLY)
#   MANIFEST  every file with its size, the commit and the tools it came from
#
# usage: tests/gpu/bundle.sh LINKDIR PLANC WORKDIR
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/lib.sh
link=$1; planc=$2; work=$3
B=$GPU_BUNDLE
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
LIMIT_MIB=40   # the machine gets the tree and the bundle, 64 MiB in all
die() { echo "gpu-bundle: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# the rpath of the programs planc builds (nvcc appends it to their link)
export NVCC_APPEND_FLAGS='-Xlinker=-rpath,$ORIGIN/../lib'

rm -rf "$B" "$work"
mkdir -p "$B"/{bin,lib,data,train,mem,calib} "$work" || die "cannot create $B"
cp "$link"/{planc,planrt-calib-cuda,planrt-bench-cuda,test_comm_cuda,test_ops_cuda,test_cp_cuda,test_fp8_cuda} "$B/bin/" || die "programs missing in $link"
cp tests/gpu/mpirun.sh "$B/bin/mpirun" && chmod +x "$B/bin/mpirun"
scripts/make-data.sh examples/data/sample.txt >/dev/null && cp examples/data/sample.txt "$B/data/" || die "no data"
data=$(cd "$B/data" && pwd)/sample.txt

# train: tiny.plan on one rank for CUDA, and its losses from the CPU program here
echo "gpu-bundle: train (tiny1.plan: CUDA program; 5 CPU steps run here)"
tests/invariance/make-plan.sh "$B/train/tiny1.plan" 1 "dp 1; tp 1; pp 1; zero 0; micro_batch 4; schedule 1f1b;" || die "train plan"
"$planc" build "$B/train/tiny1.plan" -o "$B/train/tiny_cuda" --target cuda > "$work/train-cuda.log" 2>&1 ||
    { cat "$work/train-cuda.log"; die "train: CUDA build failed"; }
"$planc" build "$B/train/tiny1.plan" -o "$work/tiny_cpu" --target cpu > "$work/train-cpu.log" 2>&1 ||
    { cat "$work/train-cpu.log"; die "train: CPU build failed"; }
$MPIRUN -np 1 "$work/tiny_cpu" --steps 5 --data "$data" --log-json "$B/train/cpu.jsonl" > "$B/train/cpu.log" 2>&1 ||
    { cat "$B/train/cpu.log"; die "train: the CPU run failed"; }

# mem: check-mem's layouts (tests/mem/make-plan.sh, bf16)
echo "gpu-bundle: mem (m1 on one rank, z0..z3 on two)"
for l in "m1 1 dp 1; zero 0;" "z0 2 dp 2; zero 0;" "z1 2 dp 2; zero 1;" "z2 2 dp 2; zero 2;" "z3 2 dp 2; zero 3;"; do
    read -r name np body <<< "$l"
    body="$body tp 1; pp 1; micro_batch 2; global_batch $((8 * np)); schedule 1f1b; recompute none;"
    MEM_DTYPE=bf16 tests/mem/make-plan.sh "$B/mem/$name.plan" "$np" 512 8 "$body" || die "mem: $name plan"
    "$planc" check --json "$B/mem/$name.plan" > "$B/mem/$name.check.json" || die "mem: planc check $name"
    "$planc" build "$B/mem/$name.plan" -o "$B/mem/$name" --target cuda > "$work/mem-$name.log" 2>&1 ||
        { cat "$work/mem-$name.log"; die "mem: $name: CUDA build failed"; }
done

# calib: validate-calib's one-rank layouts of check-calib's model, built
# against a stand-in cluster (the prediction there uses the measured one;
# the programs differ only in comments and the MFU denominator)
echo "gpu-bundle: calib (validate-calib.sh BUILD_ONLY, one rank)"
cat > "$work/standin.plan" <<'P'
cluster gpu {
    nodes 1
    gpus_per_node 1
    device h200-sxm-141gb
    link intra { bandwidth 450 GB/s; latency 2 us }
}
P
BUILD_ONLY=1 TARGET=cuda DTYPE=bf16 RANKS=1 STEPS=6 WARMUP=2 CALIB="$(pwd)/$work/standin.plan" \
    MODELS="g1024:1024,16,4,512" scripts/validate-calib.sh "$planc" "$(cd "$B/calib" && pwd)" > "$work/calib.log" 2>&1 ||
    { cat "$work/calib.log"; die "calib: validate-calib.sh BUILD_ONLY failed"; }
rm -f "$B"/{train,mem,calib}/*.c "$B"/{train,mem,calib}/*.cu "$B"/calib/*.err "$B"/calib/*.plan "$B"/calib/rows.txt

# strip debugging information (the symbols stay, for backtraces), then pack
# test_ops_cuda (26 MiB with OpenBLAS, 7 gzipped)
is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }
elves=()
for f in "$B"/bin/* "$B"/train/* "$B"/mem/* "$B"/calib/*; do
    is_elf "$f" && elves+=("$f")
done
strip --strip-debug "${elves[@]}" || die "strip failed"

# lib/: every shared library they load that is not the base system's nor too
# large to carry (cuBLAS, NCCL: the machine's own CUDA)
base='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libz\.|libudev\.|libcuda\.|libcublas|libcublasLt|libnccl|libmpi\.|libopen-rte\.|libopen-pal\.|libhwloc\.|libevent)'
for f in "${elves[@]}"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r so path; do
    [[ $so =~ $base ]] || cp -L "$path" "$B/lib/$so"
done
missing=$(for f in "${elves[@]}"; do ldd "$f" | grep 'not found'; done | sort -u)
[ -z "$missing" ] || die "libraries not found here: $missing"

# mpi/: Open MPI relocated (OPAL_PREFIX=mpi keeps the paths below the prefix)
libmpi=$(ldd "$B/bin/test_comm_cuda" | awk '$1 == "libmpi.so.40" { print $3 }')
[ -n "$libmpi" ] || die "test_comm_cuda does not link libmpi.so.40"
prefix=$(ompi_info --path prefix --parsable 2>/dev/null | sed -n 's/^path:prefix://p')
pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
datadir=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
case $pkglib in "$prefix"/*) ;; *) die "Open MPI's plugins ($pkglib) are not under its prefix ($prefix)" ;; esac
mkdir -p "$B/mpi/lib" "$B/mpi/${pkglib#"$prefix"/}" "$B/mpi/${datadir#"$prefix"/}"
for so in libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 libevent_core-2.1.so.7 \
          libevent_pthreads-2.1.so.7; do
    cp -L "$(dirname "$libmpi")/$so" "$B/mpi/lib/" || die "no $so beside $libmpi"
done
cp -r "$datadir"/. "$B/mpi/${datadir#"$prefix"/}/"
mbase='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libz\.|libudev\.|libmpi\.|libopen-rte\.|libopen-pal\.|libhwloc\.|libevent)'
for p in "$pkglib"/mca_*.so; do   # the plugins that need nothing more
    ldd "$p" | awk '$2 == "=>" { print $1 }' | grep -qvE "$mbase" || cp "$p" "$B/mpi/${pkglib#"$prefix"/}/"
done

gzip -9 "$B/bin/test_ops_cuda" "$B/bin/test_fp8_cuda" || die "gzip failed"

# every file a check reads is here (tests/gpu/lib.sh's lists)
for c in common $(for e in $GPU_CHECKS; do echo "${e%%:*}"; done); do
    for f in $(gpu_check_files "$c"); do
        [ "$f" = MANIFEST ] || [ -e "$B/$f" ] || die "$c reads $f, which was not built"
    done
done
{
    echo "# planc GPU bundle: built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
    echo "# nvcc $($NVCC_BIN --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $(ompi_info --version 2>/dev/null | head -1)"
    echo "# bytes path"
    (cd "$B" && find . -type f ! -name MANIFEST -printf '%s %P\n' | sort -k2)
} > "$B/MANIFEST"
bytes=$(du -sb "$B" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "gpu-bundle: $B: $(find "$B" -type f | wc -l) files, $mib MiB" \
     "(bin $(du -sh "$B/bin" | cut -f1), lib $(du -sh "$B/lib" | cut -f1), mpi $(du -sh "$B/mpi" | cut -f1)," \
     "programs $(du -shc "$B"/{train,mem,calib} | tail -1 | cut -f1))"
[ "$bytes" -le $((LIMIT_MIB * 1048576)) ] || die "$mib MiB is over the $LIMIT_MIB MiB this bundle may take"
echo "gpu-bundle: on the GPU machine: tests/gpu/run.sh --out DIR (carry $B)"
