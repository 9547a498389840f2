/*
 * ast.h: the syntax tree of a .plan file.
 *
 * The language has one shape of statement, so the tree has one node type:
 *
 *     key value value ...                    an entry    (DSL_STMT_ENTRY)
 *     key value ... { statements }           a block     (DSL_STMT_BLOCK)
 *     include "path"                         an include  (DSL_STMT_INCLUDE)
 *
 * `model tiny { ... }`, `repeat 4 { ... }`, `device h100-sxm-80gb { ... }`
 * and `dim 64` are all statements. The parser only builds this tree; which
 * keys exist, what their values mean and which units they take is decided
 * by planner/sema.c. Every node carries its source range for diagnostics.
 *
 * Values keep what was written (the literal text of numbers, the decoded
 * contents of strings) so `planc fmt` can print them back unchanged, and
 * what it means (integer or double, the unit) for sema.
 */
#ifndef PLANC_DSL_AST_H
#define PLANC_DSL_AST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dsl/diag.h"

/* ORDER UNITKIND: the kinds a unit can have (dsl_unit_kind_name follows). */
typedef enum {
    DSL_UNIT_SIZE,          /* bytes */
    DSL_UNIT_BANDWIDTH,     /* bytes per second */
    DSL_UNIT_COMPUTE,       /* FLOP per second */
    DSL_UNIT_TIME,          /* seconds */
} DslUnitKind;

/* A unit of the language: `GiB`, `Gb/s`, `TFLOPS`, `us`, ... */
typedef struct {
    const char  *name;      /* as written */
    DslUnitKind  kind;
    double       scale;     /* base units (B, B/s, FLOP/s, s) per unit */
    uint64_t     iscale;    /* the same as an exact integer, 0 if fractional */
} DslUnit;

/* The unit called `name`, or NULL. */
const DslUnit *dsl_unit_find(const char *name);
/* Every unit, for suggestions and documentation; *n receives the count. */
const DslUnit *dsl_units(int *n);
/* "size", "bandwidth", "compute rate", "time". */
const char *dsl_unit_kind_name(DslUnitKind k);

typedef enum {
    DSL_VAL_WORD,           /* identifier: fp32, a100-sxm-80gb, auto, zb-h1 */
    DSL_VAL_STRING,         /* "double-quoted", decoded */
    DSL_VAL_NUMBER,         /* 64, 1_000_000, 3e-4, 80 GiB (with unit) */
    DSL_VAL_BOOL,           /* true, false */
} DslValueKind;

typedef struct DslValue {
    DslValueKind     kind;
    DslLoc           loc;
    const char      *text;  /* WORD: the name; STRING: the decoded contents;
                               NUMBER: the literal as written, without unit */
    bool             is_int;   /* NUMBER: an integer literal (no '.', no exponent) */
    bool             overflow; /* NUMBER: integer literal too large for int64 */
    int64_t          i;        /* NUMBER: value if is_int */
    double           d;        /* NUMBER: value as a double (always set) */
    const DslUnit   *unit;     /* NUMBER: NULL when written without a unit */
    bool             b;        /* BOOL */
    struct DslValue *next;
} DslValue;

typedef enum {
    DSL_STMT_ENTRY,         /* key values */
    DSL_STMT_BLOCK,         /* key values { body } */
    DSL_STMT_INCLUDE,       /* include "path" (args holds the string) */
} DslStmtKind;

typedef struct DslStmt {
    DslStmtKind     kind;
    const char     *key;    /* "model", "dim", "repeat", "include", ... */
    DslLoc          loc;    /* the whole statement */
    DslLoc          key_loc;
    DslValue       *args;   /* values after the key, in order */
    int             n_args;
    struct DslStmt *body;   /* BLOCK: first statement inside the braces */
    DslLoc          open, close;   /* BLOCK: the braces */
    struct DslStmt *next;   /* next statement of the same block or file */
} DslStmt;

/* A `#` comment, kept beside the tree for `planc fmt`. */
typedef struct DslComment {
    DslLoc             loc;
    const char        *text;   /* from '#' to the end of the line */
    struct DslComment *next;
} DslComment;

typedef struct {
    const DslSource *src;   /* the file that was parsed */
    DslStmt         *stmts; /* top-level statements (includes spliced in by dsl_load) */
    DslComment      *comments;  /* in source order (of src only) */
} DslFile;

/* Structural equality, ignoring locations and comments: same statements,
 * keys, values (kind, number, unit, text) and nesting. */
bool dsl_ast_equal(const DslStmt *a, const DslStmt *b);
/* Whether word starts a top-level block (model, cluster, plan, train):
 * the scanner takes one met first on a line inside a block for a missing
 * '}' before it, so `planc fmt` never writes such a key first on a line. */
bool dsl_is_top_keyword(const char *word);
/* A canonical dump of the tree (one node per line) for tests and debugging. */
void dsl_ast_dump(FILE *out, const DslStmt *s, int indent);

#endif /* PLANC_DSL_AST_H */
