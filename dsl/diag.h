/*
 * diag.h: source files, locations and GCC-style diagnostics.
 *
 * Every message planc prints about its input goes through here, so they all
 * look the same and editors can jump to them:
 *
 *     examples/x.plan:12:5: error: unknown key 'tpp' in plan; did you mean 'tp'?
 *        12 |     tpp 2
 *           |     ^~~
 *
 * Diagnostics go to one stream (stderr in the driver, a memory stream in the
 * tests); nothing else is written to it. Errors are counted by class, which
 * decides the exit status (docs/DESIGN.md): input errors give 2, an otherwise
 * valid plan whose layout does not match the cluster gives 1.
 *
 * This file knows nothing of the language; the scanner, parser and sema call
 * it with a location and a message.
 */
#ifndef PLANC_DSL_DIAG_H
#define PLANC_DSL_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "dsl/arena.h"

/* One source file held in memory for the whole compilation. */
typedef struct {
    const char *name;       /* path as the user or an include spelled it */
    const char *text;       /* contents, NUL-terminated, without a leading UTF-8 BOM */
    size_t      len;
} DslSource;

/* A range in a source file; lines and columns start at 1, columns count
 * bytes (as GCC's do: after `µ`, two bytes, the next column is 3 more; the
 * caret of an excerpt is placed by characters). src == NULL means "no
 * location" (command-line problems). */
typedef struct {
    const DslSource *src;
    int line, col;          /* first character */
    int end_line, end_col;  /* last character (inclusive) */
} DslLoc;

typedef enum {
    DSL_ERR_INPUT,          /* bad input: syntax, names, units, ranges -> exit 2 */
    DSL_ERR_CLUSTER,        /* layout invalid for the cluster -> exit 1 */
} DslErrClass;

/* After this many errors the rest are counted but not printed. */
#define DSL_MAX_PRINTED_ERRORS 50

typedef struct {
    FILE *out;              /* where diagnostics go */
    int   n_errors;         /* all errors */
    int   n_input;          /* errors of class DSL_ERR_INPUT */
    int   n_cluster;        /* errors of class DSL_ERR_CLUSTER */
    char  first[512];       /* the first error's "file:line:col: error: msg" */
} DslDiag;

void dsl_diag_init(DslDiag *d, FILE *out);

/* Report an input error (class DSL_ERR_INPUT) at loc. */
void dsl_error(DslDiag *d, DslLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Report an error of the given class at loc. */
void dsl_error_class(DslDiag *d, DslErrClass cls, DslLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A note attached to the previous error ("first set here"); not counted. */
void dsl_note(DslDiag *d, DslLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A warning at loc: printed like an error, not counted (the exit status
 * does not change). */
void dsl_warning(DslDiag *d, DslLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 0 without errors, 2 if any input error, else 1 (cluster errors only). */
int dsl_diag_exit_code(const DslDiag *d);

/* Levenshtein distance between two short strings (capped at 255). */
int dsl_edit_distance(const char *a, const char *b);
/* The candidate closest to `word` if it is close enough to be a likely typo
 * (distance <= 2 and smaller than the word), else NULL. */
const char *dsl_suggest(const char *word, const char *const *candidates, int n);

/* Read a whole file into the arena as a DslSource (a UTF-8 byte-order mark
 * at its start is dropped). Returns NULL and sets *why to a static reason
 * on failure (missing, too large, not a file). */
#define DSL_MAX_FILE_SIZE (4u << 20)   /* 4 MiB per source file */
DslSource *dsl_source_read(DslArena *a, const char *path, const char **why);
/* Wrap text already in memory (copied into the arena, without a BOM). */
DslSource *dsl_source_from_string(DslArena *a, const char *name, const char *text, size_t len);

#endif /* PLANC_DSL_DIAG_H */
