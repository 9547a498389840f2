# cli/cli.mk: the planc driver and its subcommands.
PLANC_SRCS += cli/planc.c cli/load.c cli/cmd_search.c cli/cmd_trace.c cli/cmd_emit.c cli/cmd_import.c cli/cmd_export.c
# planc export's mapping of a Plan onto the frameworks (planner/export.h)
PLANC_SRCS += planner/export.c

# test-bridges: planc import (each architecture's published parameter count,
# Mixtral refused, broken configs) and planc export (a matrix of layouts
# parsed back with tomllib and json; the Megatron line flag by flag).
.PHONY: test-bridges
TEST_TARGETS += test-bridges
test-bridges: $(PLANC)
	timeout 600 python3 tests/test_bridges.py $(PLANC)
