# cli/cli.mk: the planc driver and its subcommands.
PLANC_SRCS += cli/planc.c cli/load.c cli/cmd_search.c cli/cmd_trace.c cli/cmd_emit.c cli/cmd_import.c cli/cmd_export.c
# planc export's mapping of a Plan onto the frameworks (planner/export.h)
PLANC_SRCS += planner/export.c
