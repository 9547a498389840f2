#!/usr/bin/env bash
# codegen.sh: hostile text on its way into generated code and command lines,
# and hostile command lines and data files for the generated executable
# (issue 10, parts 3 and 5).
#
#  - A plan whose data path holds quotes, backslashes, `*/`, `%`, `$(...)`,
#    `;`, backquotes, spaces, trigraphs and non-ASCII text, read from a
#    .plan file whose own path has `*/`, `/*`, `$(...)`, `;`, `%` and
#    quotes, with the longest model name allowed, built to an executable
#    whose path is just as hostile: planc build must succeed, start no shell
#    (strace: every execve is a compiler or linker), and the program must
#    train reading exactly that data file (and fail from a directory where
#    the file is absent).
#  - An output path that starts with '-' must not become a compiler option.
#  - The executable's command line and data: negative, non-numeric and
#    out-of-range step counts, unknown options, missing or unreadable data,
#    a data file shorter than one sequence, a log path that cannot be
#    written, the wrong rank count: each must be refused with a message,
#    quickly, without a signal or a sanitizer report.
#
# usage: tests/hostile/codegen.sh PLANC   (MPIRUN: the mpirun command line)
set -u
planc=$(realpath "${1:?usage: codegen.sh PLANC}")
mpirun=${MPIRUN:-mpirun --oversubscribe --bind-to none}
# as the top Makefile: tests may run as root; one BLAS thread per rank
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../.."
root=$PWD
. tests/hostile/lib.sh
W=$HTMP/w
mkdir -p "$W"
name=$(printf 'm%.0s' $(seq 128))
# the data path as the program sees it, and as the .plan spells it
data='we"ird \ */ %s%n $(touch PWNED) ; `id` données ??/ 数据.txt'
spelled=$(printf '%s' "$data" | sed 's/\\/\\\\/g; s/"/\\"/g')
mkdir -p "$W/$(dirname "$data")"
cp examples/data/sample.txt "$W/$data"
hplan="$W/h*/*p \$(touch PWNED);%s'\".plan"
mkdir -p "$(dirname "$hplan")"
plan_text "$name" one "\"$spelled\"" >"$hplan"
hexe="$W/o;\$(touch PWNED) %s\"'/*/e x\`id\`.exe"
mkdir -p "$(dirname "$hexe")"
plan_text "$name" one "\"$spelled\"" >"$W/data.plan"
cp "$W/data.plan" "$W/exe.plan"

# build_case LABEL PLAN EXE: planc build succeeds without starting a shell
# (checked with strace where it exists), and the program trains 2 steps
# from $W, where the hostile data file is.
build_case() {
    local label=$1 plan=$2 exe=$3
    cd "$W"
    if command -v strace >/dev/null; then
        # LeakSanitizer cannot run under ptrace: leaks are checked elsewhere.
        ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
            expect "build, $label" 0 'planc build: wrote' \
            strace -f -qq -s 256 -e trace=execve -o "$HTMP/trace" "$planc" build "$plan" -o "$exe"
        local progs shells
        progs=$(sed -n 's/.*execve("\([^"]*\)".*= 0$/\1/p' "$HTMP/trace" | xargs -d '\n' -n1 basename | sort -u | tr '\n' ' ')
        echo "  $label: programs started by planc build: $progs"
        shells=$(printf '%s\n' $progs | grep -xE 'sh|bash|dash|zsh|ksh|csh|tcsh|busybox|env|sudo' || true)
        [ -z "$shells" ]
        verdict "no shell started, $label" $(( $? == 0 )) "started: $progs"
    else
        expect "build, $label" 0 'planc build: wrote' "$planc" build "$plan" -o "$exe"
    fi
    if [ ! -x "$exe" ]; then
        verdict "run, $label" 0 "no executable (build failed)"
        return
    fi
    expect "run, $label" 0 '' $mpirun -np 1 "$exe" --steps 2
    local n
    n=$(grep -c '^step' "$HTMP/out")
    verdict "run printed 2 steps, $label" $(( n == 2 )) "$n step lines"
}
build_case "hostile data path" "$W/data.plan" "$W/data.exe"
[ -f "$W/data.exe.c" ] && grep -qF "$name" "$W/data.exe.c"
verdict "model name of 128 bytes kept whole" $(( $? == 0 )) "name cut"
build_case "hostile .plan path" "$hplan" "$W/plan.exe"
build_case "hostile output path" "$W/exe.plan" "$hexe"
if [ -x "$W/data.exe" ]; then
    cd "$HTMP"
    expect "run elsewhere: data file absent" refused 'données' $mpirun -np 1 "$W/data.exe" --steps 1
fi
find "$HTMP" "$root" -maxdepth 3 -name PWNED | grep -q . && found=1 || found=0
verdict "no file PWNED appeared" $(( found == 0 )) "a file PWNED was created"

# ---- an output path that looks like an option ------------------------------------------
mkdir -p "$W/dash" && cd "$W/dash"
plan_text tiny one '"d.txt"' >p.plan
"$planc" build p.plan -o -oops >"$HTMP/out" 2>"$HTMP/err"
rc=$?
# either refused with a message, or built as ./-oops; never `-o ops.c`
[ ! -e ops.c ] && [ ! -e ops.cu ] && { { [ $rc = 0 ] && [ -x ./-oops ]; } || { [ $rc = 2 ] && [ -s "$HTMP/err" ]; }; }
verdict "build -o -oops is no compiler option" $(( $? == 0 )) "exit $rc, files: $(ls | tr '\n' ' ')"
"$planc" emit p.plan -o -x.cu >/dev/null 2>&1
[ -s ./-x.cu ]; verdict "emit -o -x.cu writes ./-x.cu" $(( $? == 0 )) "no ./-x.cu"

# ---- the executable's command line and data (part 5) ------------------------------------
cd "$W"
if [ ! -x "$W/data.exe" ]; then
    finish "hostile code generation (no executable: runtime input not tested)"
    exit
fi
head -c 10 "$data" >short.txt
: >empty.txt
mkdir -p dir.txt
printf 'x' >unreadable.txt; chmod 000 unreadable.txt
e=("$W/data.exe")
expect "exe --steps -1"           refused 'steps' $mpirun -np 1 "${e[@]}" --steps -1
expect "exe --steps abc"          refused 'steps' $mpirun -np 1 "${e[@]}" --steps abc
expect "exe --steps 1x"           refused 'steps' $mpirun -np 1 "${e[@]}" --steps 1x
expect "exe --steps 10^23"        refused 'steps' $mpirun -np 1 "${e[@]}" --steps 99999999999999999999999
expect "exe --steps (no value)"   refused ''      $mpirun -np 1 "${e[@]}" --steps
expect "exe --bogus"              refused 'bogus' $mpirun -np 1 "${e[@]}" --bogus
expect "exe --data missing"       refused 'no/such' $mpirun -np 1 "${e[@]}" --data no/such.txt
expect "exe --data a directory"   refused 'dir.txt' $mpirun -np 1 "${e[@]}" --data dir.txt
expect "exe --data empty"         refused 'empty.txt' $mpirun -np 1 "${e[@]}" --data empty.txt
expect "exe --data short"         refused 'shorter than one sequence' $mpirun -np 1 "${e[@]}" --data short.txt
if [ "$(id -u)" != 0 ]; then
    expect "exe --data unreadable" refused 'unreadable' $mpirun -np 1 "${e[@]}" --data unreadable.txt
fi
expect "exe --log-json unwritable" refused 'no/such' $mpirun -np 1 "${e[@]}" --steps 1 --log-json no/such/log.json
expect "exe on 2 ranks (layout has 1)" refused '' $mpirun -np 2 "${e[@]}" --steps 1
finish "hostile code generation and runtime input"
