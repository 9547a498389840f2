/*
 * parser.y: the .plan grammar (pure Bison parser with locations).
 *
 * The whole language is a list of statements, each `key values` or
 * `key values { statements }`, ended by ';' or the end of the line; the last
 * statement before a '}' or the end of the file needs no terminator. This
 * grammar only builds the tree (dsl/ast.h) with source ranges; it does not
 * know which keys exist, nor what their values mean: planner/sema.c does
 * (PostgreSQL's gram.y NOTES: semantic checks belong to parse analysis).
 *
 * Error handling: yyerror turns Bison's message into one that names the fix
 * where it can ("'}' expected (to close '{' at line 12)", "'}' without a
 * matching '{'"); a '{' left open before the next top-level block is found
 * and closed by the scanner (lexer.l), so the parse goes on there. Error productions recover at the next ';' or newline, or
 * just before the '}' of the enclosing block, so one run reports every
 * syntax error; a '{' on its own line gets its own hint. Default reductions
 * are limited to consistent states and LAC is on, so an error is caught on
 * the token that causes it, while the parser is still inside the right
 * block, and recovery does not swallow the '}' that closes it.
 *
 * Memory: every semantic value (strings, values, statements) is allocated in
 * the compilation arena (dsl/arena.h) and freed with it, so nothing needs a
 * %destructor: a value Bison discards during recovery is reclaimed with the
 * arena, and a parse with errors returns no tree at all (parse.c).
 */
%define api.pure full
%define api.prefix {dsl_yy}
%define parse.error detailed
%define parse.lac full
%define lr.default-reduction consistent
%locations
%expect 0

%param {void *scanner}
%parse-param {DslScan *ctx}

%code requires {
#include <stdbool.h>
#include "dsl/scan.h"

/* A list under construction: first and last statement. */
typedef struct { DslStmt *head, *tail; } DslStmtList;
/* A list of values under construction. */
typedef struct { DslValue *head, *tail; int n; } DslValueList;
}

%code provides {
/* The names Flex's bison-bridge expects. */
#define YYSTYPE DSL_YYSTYPE
#define YYLTYPE DSL_YYLTYPE
int dsl_yylex(DSL_YYSTYPE *lval, DSL_YYLTYPE *lloc, void *scanner);
void dsl_yyerror(DSL_YYLTYPE *loc, void *scanner, DslScan *ctx, const char *msg);
}

%code {
#include <string.h>
static DslLoc loc_of(const DslScan *ctx, DSL_YYLTYPE l);
static DslStmt *new_stmt(DslScan *ctx, DslStmtKind kind, const char *key, DSL_YYLTYPE key_loc,
                         DslValueList args, DSL_YYLTYPE whole);
static DslValue *new_value(DslScan *ctx, DslValueKind kind, DSL_YYLTYPE l);
static DslStmtList append(DslStmtList list, DslStmt *s);
}

%union {
    const char   *str;
    bool          boolean;
    DslValue     *value;
    DslStmt      *stmt;
    DslStmtList   list;
    DslValueList  values;
}

%token <str>     WORD    "name"
%token <str>     STRING  "string"
%token <value>   NUMBER  "number"
%token <boolean> BOOL    "true or false"
%token           INCLUDE "'include'"
%token           NL      "end of line"

%type <list>   items body
%type <stmt>   entry block include
%type <values> args
%type <value>  value

%%

file:
    items                   { ctx->result = $1.head; }
  | file '}' items          {
                              dsl_error(ctx->diag, loc_of(ctx, @2), "'}' without a matching '{'");
                              ctx->n_errors++;
                            }
  ;

items:
    %empty                  { $$.head = $$.tail = NULL; }
  | items ';'               { $$ = $1; }
  | items NL                { $$ = $1; }
  | items entry term        { $$ = append($1, $2); }
  | items block             { $$ = append($1, $2); }
  | items include term      { $$ = append($1, $2); }
  | items error term        { $$ = $1; yyerrok; }
  | items '{' body '}'      {
                              dsl_error(ctx->diag, loc_of(ctx, @2),
                                        "'{' must be on the same line as the statement it opens");
                              ctx->n_errors++;
                              $$ = $1;
                            }
  ;

term: ';' | NL ;

/* A block's contents: the last entry needs no terminator before '}'. */
body:
    items                   { $$ = $1; }
  | items entry             { $$ = append($1, $2); }
  | items include           { $$ = append($1, $2); }
  | items error             { $$ = $1; }
  ;

entry:
    WORD args               { $$ = new_stmt(ctx, DSL_STMT_ENTRY, $1, @1, $2, @$); }
  ;

block:
    WORD args '{' body '}'  {
                              $$ = new_stmt(ctx, DSL_STMT_BLOCK, $1, @1, $2, @$);
                              $$->body = $4.head;
                              $$->open = loc_of(ctx, @3);
                              $$->close = loc_of(ctx, @5);
                            }
  ;

include:
    INCLUDE STRING          {
                              DslValueList a = { new_value(ctx, DSL_VAL_STRING, @2), NULL, 1 };
                              a.head->text = $2;
                              a.tail = a.head;
                              $$ = new_stmt(ctx, DSL_STMT_INCLUDE, "include", @1, a, @$);
                            }
  ;

args:
    %empty                  { $$.head = $$.tail = NULL; $$.n = 0; }
  | args value              {
                              $$ = $1;
                              if ($$.tail) $$.tail->next = $2; else $$.head = $2;
                              $$.tail = $2;
                              $$.n++;
                            }
  ;

value:
    WORD                    { $$ = new_value(ctx, DSL_VAL_WORD, @1); $$->text = $1; }
  | STRING                  { $$ = new_value(ctx, DSL_VAL_STRING, @1); $$->text = $1; }
  | NUMBER                  { $$ = $1; }
  | BOOL                    { $$ = new_value(ctx, DSL_VAL_BOOL, @1); $$->b = $1;
                              $$->text = $1 ? "true" : "false"; }
  ;

%%

static DslLoc loc_of(const DslScan *ctx, DSL_YYLTYPE l)
{
    return dsl_loc(ctx->src, l.first_line, l.first_column, l.last_line, l.last_column);
}

static DslValue *new_value(DslScan *ctx, DslValueKind kind, DSL_YYLTYPE l)
{
    DslValue *v = dsl_arena_alloc(ctx->arena, sizeof *v);
    v->kind = kind;
    v->loc = loc_of(ctx, l);
    return v;
}

static DslStmt *new_stmt(DslScan *ctx, DslStmtKind kind, const char *key, DSL_YYLTYPE key_loc,
                         DslValueList args, DSL_YYLTYPE whole)
{
    DslStmt *s = dsl_arena_alloc(ctx->arena, sizeof *s);
    s->kind = kind;
    s->key = key;
    s->key_loc = loc_of(ctx, key_loc);
    s->loc = loc_of(ctx, whole);
    s->args = args.head;
    s->n_args = args.n;
    return s;
}

static DslStmtList append(DslStmtList list, DslStmt *s)
{
    if (list.tail) list.tail->next = s;
    else list.head = s;
    list.tail = s;
    return list;
}

/* Bison's message, made specific where the scanner knows better: the
 * unclosed '{' at the end of the input, a '}' that closes nothing. */
void dsl_yyerror(DSL_YYLTYPE *loc, void *scanner, DslScan *ctx, const char *msg)
{
    (void)scanner;
    if (ctx->fatal) return;
    ctx->n_errors++;
    DslLoc l = loc_of(ctx, *loc);
    if (ctx->last_tok == 0 && ctx->depth > 0) {
        const char *key;
        DslLoc open = dsl_scan_unclosed(ctx, &key);
        dsl_error(ctx->diag, l, "'}' expected (to close '{' at line %d)", open.line);
    } else if (ctx->last_tok == '}' && ctx->last_unmatched) {
        dsl_error(ctx->diag, l, "'}' without a matching '{'");
    } else {
        const char *prefix = "syntax error, ";
        if (strncmp(msg, prefix, strlen(prefix)) == 0) msg += strlen(prefix);
        /* Where Bison lists nothing it expects, a statement began with a
           value; say what a statement looks like. */
        bool at_start = !strstr(msg, "expecting") &&
                        (strstr(msg, "number") || strstr(msg, "string") || strstr(msg, "true or false"));
        dsl_error(ctx->diag, l, "%s%s", msg, at_start ? " (a statement starts with a key name: key value ...)" : "");
    }
}
