#!/bin/sh
# make-data.sh: write the training text the demo and the tests use,
# examples/data/sample.txt, from text every Debian system has (the licences
# under /usr/share/common-licenses), so nothing is downloaded. Raw bytes are
# the tokens (vocab 256). Idempotent: an existing file is kept.
#   usage: scripts/make-data.sh [OUT]   (default examples/data/sample.txt)
set -eu
out=${1:-examples/data/sample.txt}
[ -s "$out" ] && exit 0
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
src=/usr/share/common-licenses
if [ -d "$src" ] && ls "$src"/* >/dev/null 2>&1; then
    # sorted, so every machine builds the same file from the same licences
    find "$src" -maxdepth 1 -type f | LC_ALL=C sort | while read -r f; do cat "$f"; done > "$tmp"
else
    echo "make-data.sh: $src not found; using planc's own sources" >&2
    cat README.md */*.c > "$tmp"
fi
mv "$tmp" "$out"
echo "make-data.sh: wrote $out ($(wc -c < "$out") bytes)"
