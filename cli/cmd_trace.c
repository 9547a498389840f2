/* cmd_trace.c: planc trace (being written; see the issue). */
#include <stdio.h>
#include "cli/commands.h"

int planc_cmd_trace(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "planc: 'trace' is not implemented yet\n");
    return 2;
}
