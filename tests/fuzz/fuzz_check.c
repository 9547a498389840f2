/*
 * fuzz_check.c: libFuzzer target over the whole front end a .plan file
 * meets in `planc check`: the scanner, the parser and sema (AST -> Plan).
 *
 * Any byte string is a possible input (planc reads files people download),
 * so the only acceptable outcomes are "parsed and checked" or diagnostics;
 * a crash, a sanitizer report, a leak (the arena is freed after each input)
 * or more than a second on one input is a bug. Diagnostics are printed (to
 * /dev/null) so the excerpt and caret code runs too.
 *
 * Includes are not followed: the target never touches the file system;
 * include chains are tested by tests/hostile/limits.sh instead.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by tests/fuzz.mk, or
 * with tests/fuzz/replay.c as an ordinary program that replays the kept
 * inputs (tests/fuzz/regress/) in `make test-fuzz-regress`.
 */
#include "planner/sema.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    DslArena a = { 0 };
    DslDiag d;
    DslFile *f = fuzz_parse(&a, &d, data, size);
    if (f) {
        Plan plan;
        plan_sema(f, &d, &a, &plan);
    }
    (void)dsl_diag_exit_code(&d);
    dsl_arena_free(&a);
    return 0;
}
