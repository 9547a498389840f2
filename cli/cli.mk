# cli/cli.mk: the planc driver.
PLANC_SRCS += cli/planc.c
