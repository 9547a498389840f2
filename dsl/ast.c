/*
 * ast.c: the unit table, and comparing and dumping trees.
 *
 * Units are part of the syntax (a number followed by a unit is one token),
 * so their table lives here; which kind of unit a key accepts is sema's
 * business. Decimal prefixes are powers of 1000, binary ones (KiB...) of
 * 1024; a lower-case `b` counts bits (Gb/s = 1e9/8 bytes per second).
 */
#include <string.h>

#include "dsl/ast.h"

/* ORDER UNITKIND (grouped), as listed in the README's language section. */
static const DslUnit UNITS[] = {
    { "B",      DSL_UNIT_SIZE,      1.0,                 1 },
    { "KB",     DSL_UNIT_SIZE,      1e3,                 1000ull },
    { "MB",     DSL_UNIT_SIZE,      1e6,                 1000000ull },
    { "GB",     DSL_UNIT_SIZE,      1e9,                 1000000000ull },
    { "TB",     DSL_UNIT_SIZE,      1e12,                1000000000000ull },
    { "KiB",    DSL_UNIT_SIZE,      1024.0,              1ull << 10 },
    { "MiB",    DSL_UNIT_SIZE,      1048576.0,           1ull << 20 },
    { "GiB",    DSL_UNIT_SIZE,      1073741824.0,        1ull << 30 },
    { "TiB",    DSL_UNIT_SIZE,      1099511627776.0,     1ull << 40 },
    { "B/s",    DSL_UNIT_BANDWIDTH, 1.0,                 1 },
    { "KB/s",   DSL_UNIT_BANDWIDTH, 1e3,                 1000ull },
    { "MB/s",   DSL_UNIT_BANDWIDTH, 1e6,                 1000000ull },
    { "GB/s",   DSL_UNIT_BANDWIDTH, 1e9,                 1000000000ull },
    { "TB/s",   DSL_UNIT_BANDWIDTH, 1e12,                1000000000000ull },
    { "Gb/s",   DSL_UNIT_BANDWIDTH, 1e9 / 8.0,           125000000ull },
    { "Tb/s",   DSL_UNIT_BANDWIDTH, 1e12 / 8.0,          125000000000ull },
    { "GFLOPS", DSL_UNIT_COMPUTE,   1e9,                 1000000000ull },
    { "TFLOPS", DSL_UNIT_COMPUTE,   1e12,                1000000000000ull },
    { "PFLOPS", DSL_UNIT_COMPUTE,   1e15,                1000000000000000ull },
    { "ns",     DSL_UNIT_TIME,      1e-9,                0 },
    { "us",     DSL_UNIT_TIME,      1e-6,                0 },
    { "ms",     DSL_UNIT_TIME,      1e-3,                0 },
    { "s",      DSL_UNIT_TIME,      1.0,                 1 },
};

const DslUnit *dsl_unit_find(const char *name)
{
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++)
        if (strcmp(UNITS[i].name, name) == 0) return &UNITS[i];
    return NULL;
}

const DslUnit *dsl_units(int *n)
{
    *n = (int)(sizeof UNITS / sizeof UNITS[0]);
    return UNITS;
}

const char *dsl_unit_kind_name(DslUnitKind k)
{
    switch (k) {   /* ORDER UNITKIND */
    case DSL_UNIT_SIZE:      return "size";
    case DSL_UNIT_BANDWIDTH: return "bandwidth";
    case DSL_UNIT_COMPUTE:   return "compute rate";
    case DSL_UNIT_TIME:      return "time";
    }
    return "?";
}

static bool value_equal(const DslValue *a, const DslValue *b)
{
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case DSL_VAL_WORD:
    case DSL_VAL_STRING:
        return strcmp(a->text, b->text) == 0;
    case DSL_VAL_BOOL:
        return a->b == b->b;
    case DSL_VAL_NUMBER:
        return a->is_int == b->is_int && a->i == b->i && a->d == b->d && a->unit == b->unit;
    }
    return false;
}

bool dsl_is_top_keyword(const char *word)
{
    static const char *const top[] = { "model", "cluster", "plan", "train" };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(word, top[i]) == 0) return true;
    return false;
}

bool dsl_ast_equal(const DslStmt *a, const DslStmt *b)
{
    for (; a && b; a = a->next, b = b->next) {
        if (a->kind != b->kind || strcmp(a->key, b->key) != 0 || a->n_args != b->n_args) return false;
        const DslValue *va = a->args, *vb = b->args;
        for (; va && vb; va = va->next, vb = vb->next)
            if (!value_equal(va, vb)) return false;
        if (va || vb) return false;
        if (!dsl_ast_equal(a->body, b->body)) return false;
    }
    return a == NULL && b == NULL;
}

void dsl_ast_dump(FILE *out, const DslStmt *s, int indent)
{
    static const char *const kinds[] = { "entry", "block", "include" };
    for (; s; s = s->next) {
        fprintf(out, "%*s%s %s", indent * 2, "", kinds[s->kind], s->key);
        for (const DslValue *v = s->args; v; v = v->next) {
            switch (v->kind) {
            case DSL_VAL_WORD:   fprintf(out, " word:%s", v->text); break;
            case DSL_VAL_STRING: fprintf(out, " string:\"%s\"", v->text); break;
            case DSL_VAL_BOOL:   fprintf(out, " bool:%s", v->b ? "true" : "false"); break;
            case DSL_VAL_NUMBER:
                if (v->is_int) fprintf(out, " int:%lld", (long long)v->i);
                else fprintf(out, " float:%.17g", v->d);
                if (v->unit) fprintf(out, "[%s]", v->unit->name);
                break;
            }
        }
        fputc('\n', out);
        if (s->kind == DSL_STMT_BLOCK) dsl_ast_dump(out, s->body, indent + 1);
    }
}
