# cli/cli.mk: the planc driver and its subcommands.
PLANC_SRCS += cli/planc.c cli/load.c cli/cmd_search.c cli/cmd_trace.c cli/cmd_emit.c cli/cmd_calibrate.c
