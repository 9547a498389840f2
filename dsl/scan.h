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
    const char      *brace_key[DSL_MAX_DEPTH];  /* key of the statement it opens */
    int              brace_indent[DSL_MAX_DEPTH]; /* column of the first token of its line */
    int              depth;
    bool             mid_stmt;           /* the next token does not start a statement */
    const char      *stmt_key;           /* first name of the current statement */
    int              tok_line;           /* line of the last token returned */
    int              line_indent;        /* column of the first token of that line */
    DslLoc           suspect;            /* a '{' closed by a '}' indented for an outer block */
    const char      *suspect_key;        /* key of its statement */
    bool             has_suspect;
    int              pending_close;      /* synthetic '}' still to return */
    int              spare_closes;       /* '}' at depth 0 to drop: a synthetic one came first */
    int              held;               /* token to return after them (WORD, INCLUDE), or 0 */
    const char      *held_str;
    int              held_line, held_col, held_eline, held_ecol;
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

/* The '{' that a missing '}' most likely belongs to (s->depth > 0): the
 * one closed by a '}' at an outer block's indentation, else the innermost
 * open one. *key is the key of the statement it opens (NULL if unknown). */
static inline DslLoc dsl_scan_unclosed(const DslScan *s, const char **key)
{
    if (s->has_suspect) {   /* cleared at depth 0: it lies inside the open blocks */
        *key = s->suspect_key;
        return s->suspect;
    }
    *key = s->brace_key[s->depth - 1];
    return s->braces[s->depth - 1];
}

#endif /* PLANC_DSL_SCAN_H */
