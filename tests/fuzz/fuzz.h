/*
 * fuzz.h: what the libFuzzer targets (fuzz_check, fuzz_fmt, fuzz_plan)
 * share: libFuzzer's entry point, the sink their diagnostics go to, and the
 * input read as a .plan file. Header-only (static inline): each target is
 * one translation unit, linked either with libFuzzer or with replay.c.
 */
#ifndef PLANC_FUZZ_H
#define PLANC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsl/dsl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where diagnostics (and fuzz_plan's reports) go: /dev/null, opened once,
 * so each input costs no system call. */
static inline FILE *fuzz_sink(void)
{
    static FILE *null;
    if (!null) null = fopen("/dev/null", "w");
    return null ? null : stderr;
}

/* The input parsed as "fuzz.plan" into arena a, its diagnostics into d
 * (initialised here, printed to the sink so the excerpt and caret code
 * runs too): the tree, or NULL. An input longer than dsl_source_read
 * accepts is not parsed (NULL). */
static inline DslFile *fuzz_parse(DslArena *a, DslDiag *d, const uint8_t *data, size_t size)
{
    dsl_diag_init(d, fuzz_sink());
    if (size > DSL_MAX_FILE_SIZE) return NULL;   /* dsl_source_read refuses these */
    DslSource *src = dsl_source_from_string(a, "fuzz.plan", (const char *)data, size);
    return dsl_parse_source(a, d, src);
}

#endif /* PLANC_FUZZ_H */
