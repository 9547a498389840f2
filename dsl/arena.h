/*
 * arena.h: one bump allocator per compilation.
 *
 * The compiler never frees a node on its own: the AST, the source texts, the
 * diagnostics' bookkeeping and the checked Plan all live in one arena that
 * the driver frees once at the end (chibicc's policy, PostgreSQL's memory
 * contexts). This removes every ownership question from the parser's error
 * recovery: a discarded subtree simply stays in the arena until the end.
 *
 * Allocation failure is not recoverable in a compiler of this size: the
 * arena prints one line and exits, so callers never test for NULL.
 */
#ifndef PLANC_DSL_ARENA_H
#define PLANC_DSL_ARENA_H

#include <stddef.h>

typedef struct DslArenaBlock DslArenaBlock;

typedef struct {
    DslArenaBlock *head;    /* newest block first */
    size_t         used;    /* bytes handed out, for statistics */
} DslArena;

/* Zeroed memory, aligned for any scalar type. */
void *dsl_arena_alloc(DslArena *a, size_t size);
/* Zeroed array of n elements of `size` bytes; checks n*size for overflow. */
void *dsl_arena_calloc(DslArena *a, size_t n, size_t size);
char *dsl_arena_strdup(DslArena *a, const char *s);
char *dsl_arena_strndup(DslArena *a, const char *s, size_t n);
/* printf into the arena. */
char *dsl_arena_printf(DslArena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees every block; the arena can be reused afterwards. */
void dsl_arena_free(DslArena *a);

#endif /* PLANC_DSL_ARENA_H */
