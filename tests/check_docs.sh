#!/usr/bin/env bash
# check_docs.sh: the README and docs/ name no repository file that does not
# exist. Every `path` in backquotes that starts with a top-level folder of
# the repository (cli/ dsl/ planner/ codegen/ runtime/ trace/ tests/
# scripts/ examples/ docs/), every relative Markdown link target and every
# document named in the text (a word ending in .md) must exist; one with a `*` must match at least one file. Paths under build/ are
# outputs, not checked. A file that a make target or script writes (not
# tracked) is listed below with what makes it.
#
# Then tests/check_docs.py checks that the docs cannot drift from the code:
# anchors, runnable blocks and their output, the language's keys against
# planner/sema.c's tables, planc's commands and options against --help
# (docs/README.md, "Docs that cannot drift", gives the rules).
#
# usage: tests/check_docs.sh [FILE.md...]   (default README.md docs/*.md)
#        DOCS_OPTS=--no-run: all but the runnable blocks
set -u
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- README.md docs/*.md
# written by scripts/make-data.sh (make demo, make test-codegen)
generated="examples/data/sample.txt"
pass=0 fail=0
check() {   # DOC PATH
    local doc=$1 p=$2
    for g in $generated; do [ "$p" = "$g" ] && return; done
    local here
    here=$(dirname "$doc")/$p   # a link is relative to its document
    case $p in
        *'*'*) compgen -G "$p" >/dev/null ;;
        *) [ -e "$p" ] || [ -e "$here" ] ;;
    esac
    if [ $? = 0 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL $doc names '$p', which the repository does not have (line $(grep -nF -- "$p" "$doc" | head -1 | cut -d: -f1))"
    fi
}
dirs='cli|dsl|planner|codegen|runtime|trace|tests|scripts|examples|docs'
for doc in "$@"; do
    while read -r p; do check "$doc" "$p"; done < <(
        { grep -o '`[^`]*`' "$doc" | tr -d '`' | grep -E "^($dirs)/[A-Za-z0-9_./*-]*$"
          grep -oE '\]\([^)#:]+\)' "$doc" | sed 's/^](//; s/)$//'
          grep -oE '[A-Za-z0-9_./-]+\.md\b' "$doc"; } | sort -u)
done
echo "docs: $pass paths exist, $fail missing"
python3 tests/check_docs.py ${DOCS_OPTS:-} "$@" || fail=$((fail + 1))
[ "$fail" -eq 0 ]
