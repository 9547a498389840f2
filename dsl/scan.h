/*
 * scan.h: state shared by the scanner (lexer.l), the parser (parser.y) and
 * the driver of a parse (parse.c). Internal to dsl/; not a public header.
 */
#ifndef PLANC_DSL_SCAN_H
#define PLANC_DSL_SCAN_H

#include <stdbool.h>

#include "dsl/dsl.h"

typedef struct DslScan {
    DslArena        *arena;
    DslDiag         *diag;
    const DslSource *src;
    int              line, col;          /* position of the next byte */
    int              end_line, end_col;  /* just after the last real token */
    DslLoc           braces[DSL_MAX_DEPTH]; /* open '{', innermost last */
    int              depth;
    int              last_tok;           /* token most recently returned */
    bool             last_unmatched;     /* it was a '}' with nothing open */
    bool             sent_final_nl;      /* the synthetic NL before EOF */
    bool             fatal;              /* stop: nesting limit exceeded */
    int              n_errors;           /* syntax errors in this parse */
    DslComment      *comments, *comments_tail;
    DslStmt         *result;             /* set by the start rule */
} DslScan;

/* Location of a token starting at (line, col) and ending at (eline, ecol). */
static inline DslLoc dsl_loc(const DslSource *src, int line, int col, int eline, int ecol)
{
    DslLoc l = { src, line, col, eline, ecol };
    return l;
}

#endif /* PLANC_DSL_SCAN_H */
