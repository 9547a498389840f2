/* cmd_emit.c: planc emit / planc build (being written; see the issue). */
#include <stdio.h>
#include "cli/commands.h"

int planc_cmd_emit(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "planc: 'emit' is not implemented yet\n");
    return 2;
}

int planc_cmd_build(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "planc: 'build' is not implemented yet\n");
    return 2;
}
