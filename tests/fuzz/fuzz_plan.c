/*
 * fuzz_plan.c: libFuzzer target over all of `planc check`: the front end
 * (as fuzz_check) and then, for a file sema accepts, the planner and its
 * report (plan_check_report: the layout, memory per stage, the Program and
 * its simulated step, as text and as JSON).
 *
 * sema admits only plans whose numbers are in range, so what reaches the
 * planner is any valid model, cluster and layout a user could write:
 * a crash, a sanitizer report (a division by zero, an overflow, a read
 * past a table), a leak or more than a second on one input (planc check
 * answers in milliseconds, for identical blocks in O(1) per layout) is a
 * bug in the planner, not in the input.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined by tests/fuzz.mk, or
 * with tests/fuzz/replay.c as an ordinary program that replays the kept
 * inputs and the examples in `make test-fuzz-regress`.
 */
#include "planner/report.h"
#include "planner/sema.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    DslArena a = { 0 };
    DslDiag d;
    DslFile *f = fuzz_parse(&a, &d, data, size);
    Plan plan;
    if (f && plan_sema(f, &d, &a, &plan) == 0) {
        (void)plan_check_report(fuzz_sink(), fuzz_sink(), &plan, false);
        (void)plan_check_report(fuzz_sink(), fuzz_sink(), &plan, true);
    }
    (void)dsl_diag_exit_code(&d);
    dsl_arena_free(&a);
    return 0;
}
