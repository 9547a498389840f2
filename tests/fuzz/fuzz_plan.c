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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsl/dsl.h"
#include "planner/report.h"
#include "planner/sema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where diagnostics and reports go: opened once, so each input costs no
 * system call. */
static FILE *sink(void)
{
    static FILE *null;
    if (!null) null = fopen("/dev/null", "w");
    return null ? null : stderr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > DSL_MAX_FILE_SIZE) return 0;   /* dsl_source_read refuses these */
    DslArena a = { 0 };
    DslDiag d;
    dsl_diag_init(&d, sink());
    DslSource *src = dsl_source_from_string(&a, "fuzz.plan", (const char *)data, size);
    DslFile *f = dsl_parse_source(&a, &d, src);
    Plan plan;
    if (f && plan_sema(f, &d, &a, &plan) == 0) {
        (void)plan_check_report(sink(), &plan, false);
        (void)plan_check_report(sink(), &plan, true);
    }
    (void)dsl_diag_exit_code(&d);
    dsl_arena_free(&a);
    return 0;
}
