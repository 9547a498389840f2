#!/usr/bin/env bash
# man.sh: write planc(1), the roff manual page, from planc's own help texts.
# `planc --help` and every `planc COMMAND --help` are the page's synopsis
# and its COMMANDS section word for word, so the page says what the program
# says; make test-docs checks those texts against docs/commands.md, and
# make test-install renders the page with `man -l`.
#
# usage: scripts/man.sh PLANC > planc.1
set -euo pipefail
planc=${1:?usage: scripts/man.sh PLANC}
version=$("$planc" --version | sed 's/^planc //')
# the commands, in the order `planc --help` lists them
cmds=$("$planc" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z]*\) .*/\1/p')

# roff-escape one help text: backslashes, and a leading . or ' (a request)
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

cat <<HEAD
.TH PLANC 1 "" "planc $version" "User Commands"
.SH NAME
planc \\- a compiler for parallel training: check, search, draw and emit a .plan
.SH SYNOPSIS
.nf
HEAD
for c in $cmds; do "$planc" "$c" --help | sed -n '/^usage: /,/^$/p' | sed -e 's/^usage: //' -e '/^$/d' | esc; done
cat <<'MID'
.fi
.SH DESCRIPTION
planc reads a .plan file \(em a model's layers, a cluster's topology and a
parallel layout \(em checks it (memory per GPU for every pipeline stage, the
predicted cost of a training step), searches for the best layout, draws the
predicted step, and emits one C/CUDA training program on top of its runtime,
planrt. The manual (docs/ in the source, starting at docs/README.md) is the
reference: docs/language.md for the language, docs/commands.md for these
commands.
.PP
MID
"$planc" --help | sed -n '/^planc compiles/,/^$/p' | esc
echo '.SH COMMANDS'
for c in $cmds; do
    echo ".SS planc $c"
    echo '.nf'
    "$planc" "$c" --help | esc
    echo '.fi'
done
echo '.SH OPTIONS'
echo '.nf'
"$planc" --help | sed -n '/^options:/,/^$/p' | sed '1d;/^$/d' | esc
echo '.fi'
cat <<'TAIL'
.SH EXIT STATUS
.TP
.B 0
success (check: the plan is valid and fits)
.TP
.B 1
the plan is valid but does not fit, or its layout is invalid for the cluster
.TP
.B 2
bad input (syntax, an unknown key, a wrong value or unit, an unreadable file)
or bad usage
.SH DIAGNOSTICS
Problems with the input go to stderr as FILE:LINE:COL: error: MESSAGE, with
the line and a caret; results go to stdout.
.SH ENVIRONMENT
.TP
.B PLANRT_HOME
where planc build finds the runtime (DIR/include, DIR/lib) instead of
beside planc (BIN/../include, BIN/../lib)
.SH FILES
.TP
.I PREFIX/lib/libplanrt.a
the runtime the generated programs link (libplanrt_cuda.a for --target cuda)
.TP
.I PREFIX/include/planrt.h
its header (with prt_*.h)
.TP
.I PREFIX/lib/pkgconfig/planrt.pc
pkg-config's description of planrt
.SH SEE ALSO
.BR mpirun (1)
TAIL
