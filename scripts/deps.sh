#!/bin/sh
# deps.sh [hf]: install the Debian packages planc needs, only those that are
# missing. Called by `make demo` and `make test`, so a fresh Debian 12 machine
# needs nothing but these two commands. Safe to run again: it does nothing when
# all packages are present.
#
# Optional groups, installed only when named:
#   hf  Debian's CPU PyTorch and the Python modules transformers takes from
#       Debian, for `make test-hf` (scripts/hf-env.sh; about 600 MB, 35 s here)
set -eu

# clang + libclang-rt-14-dev: `make fuzz` (libFuzzer, ASan, UBSan runtimes);
# strace: test-hostile checks that `planc build` starts no shell;
# libjansson-dev: planc import reads Hugging Face config.json files;
# man-db + groff-base: test-install renders the installed planc(1) with man -l.
PKGS="make gcc flex bison libcmocka-dev libopenmpi-dev openmpi-bin \
libopenblas-dev pkg-config python3 clang libclang-rt-14-dev strace libjansson-dev \
man-db groff-base"

for group in "$@"; do
    case $group in
        hf) PKGS="$PKGS python3-torch python3-venv python3-numpy python3-yaml python3-requests" ;;
        *) echo "deps: unknown group '$group' (known: hf)" >&2; exit 2 ;;
    esac
done

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

[ -z "$missing" ] && exit 0

echo "deps: installing:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "deps: need root (or sudo) to install:$missing" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: done"
