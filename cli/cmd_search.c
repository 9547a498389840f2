/* cmd_search.c: planc search (being written; see the issue). */
#include <stdio.h>
#include "cli/commands.h"

int planc_cmd_search(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "planc: 'search' is not implemented yet\n");
    return 2;
}
