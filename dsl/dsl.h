/*
 * dsl.h: the front end's public interface.
 *
 *     DslArena a = {0};  DslDiag d;  dsl_diag_init(&d, stderr);
 *     DslFile *f = dsl_load(&a, &d, "examples/tiny.plan");   // parse + includes
 *     if (d.n_errors) ... exit(dsl_diag_exit_code(&d));
 *     plan_sema(f, &d, &a, &plan);                             // planner/sema.h
 *
 * dsl_parse_* read one file and keep its `include` statements; dsl_load
 * also reads every included file (relative to the including one) and
 * splices its statements in place of the include. Both report every syntax
 * error they can recover from and return NULL if there was any.
 *
 * Limits, so that no input can hang planc or exhaust memory: a source file
 * is at most DSL_MAX_FILE_SIZE bytes, blocks nest at most DSL_MAX_DEPTH
 * deep, includes at most DSL_MAX_INCLUDE_DEPTH deep (a cycle is an error),
 * and one compilation reads at most DSL_MAX_INCLUDES included files and
 * DSL_MAX_TOTAL_SIZE bytes in all (a file that includes another many times,
 * which includes another many times, ... would otherwise grow exponentially).
 *
 * Names and strings end up in generated code, file names and command lines,
 * so the scanner only accepts what can be written there safely: a name is
 * ASCII letters, digits, '_', '.', '-' and at most DSL_MAX_NAME bytes; a
 * string is valid UTF-8 without control characters (tab excepted) and at
 * most DSL_MAX_STRING bytes once decoded.
 */
#ifndef PLANC_DSL_DSL_H
#define PLANC_DSL_DSL_H

#include <stdio.h>

#include "dsl/arena.h"
#include "dsl/ast.h"
#include "dsl/diag.h"

#define DSL_MAX_DEPTH          32   /* nested { } */
#define DSL_MAX_INCLUDE_DEPTH  16   /* nested include */
#define DSL_MAX_INCLUDES       256  /* included files per compilation */
#define DSL_MAX_TOTAL_SIZE     (16u << 20)   /* bytes of all included files */
#define DSL_MAX_NAME           128  /* bytes of a name */
#define DSL_MAX_STRING         4095 /* bytes of a decoded string (PATH_MAX - 1) */

/* Parse one source held in memory. */
DslFile *dsl_parse_source(DslArena *a, DslDiag *d, const DslSource *src);
/* Parse one file (no includes followed). */
DslFile *dsl_parse_file(DslArena *a, DslDiag *d, const char *path);
/* Parse a file and everything it includes, spliced into one tree. */
DslFile *dsl_load(DslArena *a, DslDiag *d, const char *path);

/* Print the canonical form of a parsed (not loaded) file: one statement per
 * line, four-space indentation, short blocks of entries on one line,
 * comments kept. Parsing the output gives an equal tree, and formatting it
 * again gives the same bytes. */
void dsl_format(FILE *out, const DslFile *f);

/* Write the value as it is written in canonical form ("80 GiB", "\"x\\\"y\""). */
void dsl_value_print(FILE *out, const DslValue *v);

#endif /* PLANC_DSL_DSL_H */
