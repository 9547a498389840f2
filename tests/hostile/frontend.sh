#!/usr/bin/env bash
# frontend.sh: hostile names and strings through `planc check` and `planc fmt`.
#
# Model and cluster names are words of the language ([A-Za-z_][A-Za-z0-9_.-]*,
# at most 128 bytes), so quotes, backslashes, `*/`, `%`, `$(...)`, `;`,
# spaces, non-ASCII bytes or a very long name in them must be refused with a
# diagnostic (exit 2), never crash. Strings (the data path) may hold any
# valid UTF-8 except control characters: hostile but representable ones are
# accepted, and `check --json` must still print valid JSON and `fmt` must
# keep them byte for byte; unrepresentable ones (newline, control bytes,
# malformed UTF-8, unknown escapes, longer than 4095 bytes) are refused.
#
# usage: tests/hostile/frontend.sh PLANC
set -u
planc=${1:?usage: frontend.sh PLANC}
cd "$(dirname "$0")/../.."
. tests/hostile/lib.sh
p=$HTMP/case.plan
long=$(printf 'n%.0s' $(seq 200))
ok128=$(printf 'm%.0s' $(seq 128))

# ---- names that cannot be represented: refused --------------------------------
refuse_name() {   # NAME_TEXT REGEX
    plan_text "$1" one '"d.txt"' >"$p"
    expect "model name [$1]" 2 "$2" "$planc" check "$p"
    plan_text tiny "$1" '"d.txt"' >"$p"
    expect "cluster name [$1]" 2 "$2" "$planc" check "$p"
    expect "fmt, name [$1]" any '' "$planc" fmt "$p"
}
refuse_name 'a"b'          'error: '
refuse_name 'a\b'          "stray '\\\\' in input"
refuse_name 'a*/b'         "stray '\\*' in input"
refuse_name '/*x*/'        "stray '/' in input"
refuse_name 'a%s%n'        "stray '%' in input"
refuse_name '$(touch PWNED)' "stray '\\$' in input"
refuse_name '`id`'         "stray '\`' in input"
refuse_name 'a;b'          'error: '
refuse_name 'a b'          'error: '
refuse_name 'café'         'stray U\+00E9 .* in input; names are ASCII'
refuse_name "$long"        'name of 200 characters is longer than the 128 allowed'
[ ! -e PWNED ]; verdict "no file PWNED appeared" $(( $? == 0 )) "a file PWNED appeared"

# ---- strings that cannot be represented: refused --------------------------------
refuse_data() {   # LABEL DATA_TEXT REGEX [fmt-too]
    plan_text tiny one "$2" >"$p"
    expect "data $1" 2 "$3" "$planc" check "$p"
    [ "${4:-fmt}" = fmt ] && expect "fmt, data $1" 2 "$3" "$planc" fmt "$p"
}
refuse_data newline        $'"a\nb.txt"'        'unterminated string'
refuse_data control-byte   $'"a\001b.txt"'      'control character 0x01 in string'
refuse_data escape-n       '"a\nb.txt"'         "unknown escape '\\\\n'"
refuse_data bad-utf8       $'"a\xffb.txt"'      'byte 0xff in string is not valid UTF-8'
refuse_data overlong-utf8  $'"a\xc0\xafb.txt"'  'byte 0xc0 in string is not valid UTF-8'
refuse_data surrogate      $'"a\xed\xa0\x80.txt"' 'byte 0xed in string is not valid UTF-8'
refuse_data cut-utf8       $'"a\xc3"'           'byte 0xc3 in string is not valid UTF-8'
refuse_data 5000-bytes     "\"$(printf 'p%.0s' $(seq 5000))\"" 'string of 5000 bytes is longer than the 4095 allowed'
refuse_data empty          '""'                 "'data' must not be empty" check-only

# ---- hostile but representable: accepted, JSON valid, fmt keeps them -------------
accept_data() {   # LABEL DATA_TEXT
    plan_text "$ok128" one "$2" >"$p"
    expect "data $1: check" 0 '' "$planc" check "$p"
    expect "data $1: check --json" 0 '' "$planc" check --json "$p"
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$HTMP/out" 2>/dev/null
    verdict "data $1: --json is valid JSON" $(( $? == 0 )) "invalid JSON"
    "$planc" fmt "$p" >"$HTMP/f1.plan" 2>/dev/null
    "$planc" fmt "$HTMP/f1.plan" >"$HTMP/f2.plan" 2>/dev/null
    grep -qF -- "$2" "$HTMP/f1.plan" && cmp -s "$HTMP/f1.plan" "$HTMP/f2.plan"
    verdict "data $1: fmt keeps it" $(( $? == 0 )) "fmt changed the string or is not idempotent"
}
accept_data quotes       '"we\"ird\".txt"'
accept_data backslashes  '"a\\b\\\\c.txt"'
accept_data comment-end  '"a*/b/*c*/.txt"'
accept_data percent      '"%s%n%d%%.txt"'
accept_data shell        '"$(touch PWNED);`touch PWNED`|| rm -rf x &.txt"'
accept_data spaces-tab   $'"a b\tc .txt"'
accept_data non-ascii    '"données-数据-🚀.txt"'
accept_data trigraph     '"??/??=??(.txt"'
accept_data 4095-bytes   "\"$(printf 'q%.0s' $(seq 4095))\""
[ ! -e PWNED ]; verdict "no file PWNED appeared" $(( $? == 0 )) "a file PWNED appeared"
finish "hostile front end"
