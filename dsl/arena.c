/*
 * arena.c: the compilation arena (see arena.h).
 *
 * Blocks of at least 64 KiB are chained; a request larger than a block gets
 * a block of its own. Nothing is ever freed individually.
 */
#include "dsl/arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK_MIN (64u * 1024u)
#define ARENA_ALIGN     16u

struct DslArenaBlock {
    DslArenaBlock *next;
    size_t         size;    /* usable bytes in data[] */
    size_t         off;     /* next free byte */
    _Alignas(16) unsigned char data[];
};

/* Out of memory in the compiler: there is nothing sensible left to do. */
static void arena_oom(size_t size)
{
    fprintf(stderr, "planc: out of memory (allocating %zu bytes)\n", size);
    exit(3);
}

void *dsl_arena_alloc(DslArena *a, size_t size)
{
    size_t need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need < size) arena_oom(size);
    DslArenaBlock *b = a->head;
    if (!b || b->size - b->off < need) {
        size_t cap = need > ARENA_BLOCK_MIN ? need : ARENA_BLOCK_MIN;
        if (cap > SIZE_MAX - sizeof *b) arena_oom(size);
        b = malloc(sizeof *b + cap);
        if (!b) arena_oom(size);
        b->size = cap;
        b->off = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->off;
    b->off += need;
    a->used += need;
    memset(p, 0, need);
    return p;
}

void *dsl_arena_calloc(DslArena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) arena_oom(SIZE_MAX);
    return dsl_arena_alloc(a, n * size);
}

char *dsl_arena_strndup(DslArena *a, const char *s, size_t n)
{
    char *p = dsl_arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *dsl_arena_strdup(DslArena *a, const char *s)
{
    return dsl_arena_strndup(a, s, strlen(s));
}

char *dsl_arena_printf(DslArena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    char *p = dsl_arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void dsl_arena_free(DslArena *a)
{
    DslArenaBlock *b = a->head;
    while (b) {
        DslArenaBlock *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used = 0;
}
