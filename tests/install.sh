#!/usr/bin/env bash
# install.sh: `make install DESTDIR=STAGE` puts what a user needs where a
# user looks, and it works from there (make test-install):
#
#  1. the files: bin/planc, planrt-ckpt, planrt-bench, planrt-calib (and
#     their CUDA builds where nvcc built the CUDA library), lib/libplanrt.a,
#     include/planrt.h and the prt_*.h it includes, lib/pkgconfig/planrt.pc,
#     share/man/man1/planc.1;
#  2. a tiny program compiled against the installed header and library
#     through pkg-config alone (mpicc $(pkg-config --cflags --libs planrt)),
#     run: one linear layer, its output checked by hand;
#  3. the installed planc builds examples/tiny.plan against the installed
#     runtime (BIN/../include, BIN/../lib), not the source tree's;
#  4. `man -l` renders planc.1 with no warning, naming every command.
#
# usage: tests/install.sh STAGE PREFIX   (after make install DESTDIR=STAGE PREFIX=PREFIX)
set -uo pipefail
stage=${1:?usage: tests/install.sh STAGE PREFIX}
prefix=${2:?usage: tests/install.sh STAGE PREFIX}
root=$stage$prefix
fails=0
bad() { echo "FAIL: install: $*" >&2; fails=$((fails + 1)); }

files="bin/planc bin/planrt-ckpt bin/planrt-bench bin/planrt-calib lib/libplanrt.a
       include/planrt.h lib/pkgconfig/planrt.pc share/man/man1/planc.1"
for h in runtime/include/*.h; do files="$files include/$(basename "$h")"; done
if [ -e build/lib/libplanrt_cuda.a ] && [ "${NVCC_BUILT:-0}" = 1 ]; then
    files="$files lib/libplanrt_cuda.a bin/planrt-calib-cuda bin/planrt-bench-cuda lib/pkgconfig/planrt-cuda.pc"
fi
n=0
for f in $files; do
    n=$((n + 1))
    [ -s "$root/$f" ] || bad "$root/$f is missing"
done
for f in bin/planc bin/planrt-ckpt; do [ -x "$root/$f" ] || bad "$root/$f is not executable"; done

# 2: a program against the installed header and library, found by pkg-config
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/tiny.c" <<'C'
#include <planrt.h>
#include <stdio.h>
/* out (1, 3) = x (1, 2) W^T + b, W (3, 2): [1 0; 0 1; 1 1], b = (0, 0, 1) */
int main(void)
{
    const prt_act x[2] = { 1, 2 }, w[6] = { 1, 0, 0, 1, 1, 1 }, b[3] = { 0, 0, 1 };
    prt_act out[3];
    prt_linear_fwd(out, x, w, b, 1, 2, 3);
    printf("%s %g %g %g\n", prt_status_str(PRT_OK), out[0], out[1], out[2]);
    return 0;
}
C
pcdir=$root/lib/pkgconfig
# the .pc file names the installed prefix; a staged one is found through
# pkg-config's sysroot, as a packager's build would
flags=$(PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$stage pkg-config --cflags --libs planrt) ||
    bad "pkg-config does not know planrt ($pcdir)"
case $flags in *"-I$root/include"*) ;; *) bad "pkg-config --cflags planrt does not name $root/include: $flags" ;; esac
# shellcheck disable=SC2086
if mpicc -std=gnu11 -Wall -Werror -o "$work/tiny" "$work/tiny.c" $flags 2> "$work/cc.err"; then
    got=$("$work/tiny")
    [ "${got#* }" = "1 2 4" ] || bad "the tiny program printed '$got', not 'STATUS 1 2 4'"
else
    cat "$work/cc.err" >&2
    bad "a program does not compile against the installed planrt.h and libplanrt.a"
fi

# 3: the installed planc builds against the installed runtime
cp examples/tiny.plan "$work/" && mkdir -p "$work/clusters" && cp examples/clusters/laptop.plan "$work/clusters/"
if env -u PLANRT_HOME "$root/bin/planc" build "$work/tiny.plan" -o "$work/tiny-train" > "$work/build.out" 2>&1; then
    [ -x "$work/tiny-train" ] || bad "the installed planc build wrote no executable"
else
    cat "$work/build.out" >&2
    bad "the installed planc cannot build examples/tiny.plan against the installed runtime"
fi

# 4: the man page renders, without warnings, and names every command
if ! command -v man > /dev/null; then
    bad "man is missing (scripts/deps.sh installs man-db)"
else
    MANWIDTH=80 man --warnings -l "$root/share/man/man1/planc.1" > "$work/man.txt" 2> "$work/man.err"
    [ -s "$work/man.err" ] && { cat "$work/man.err" >&2; bad "man -l warns on planc.1"; }
    for c in check fmt search emit build trace import export calibrate; do
        grep -q "^   planc $c\$" "$work/man.txt" || bad "planc.1 has no section for planc $c"
    done
    grep -q -- '--max-layouts N' "$work/man.txt" || bad "planc.1 lacks search's --max-layouts"
fi

if [ $fails -gt 0 ]; then echo "install: $fails check(s) failed" >&2; exit 1; fi
echo "install: $n files under $root; a program built through pkg-config runs (1 2 4); the installed planc builds tiny.plan; man -l renders planc(1)"
