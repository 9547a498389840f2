# cli/cli.mk: the planc driver and its subcommands.
PLANC_SRCS += cli/planc.c cli/load.c cli/cmd_search.c cli/cmd_trace.c cli/cmd_emit.c cli/cmd_import.c cli/cmd_export.c cli/cmd_calibrate.c
# planc calibrate's measurement file -> cluster block (tests/test_calib.c runs it through sema)
PLANC_SRCS += cli/calib_profile.c
# planc export's mapping of a Plan onto the frameworks (planner/export.h)
PLANC_SRCS += planner/export.c

# test-bridges: planc import (each architecture's published parameter count,
# Mixtral refused, broken configs) and planc export (a matrix of layouts
# parsed back with tomllib and json; the Megatron line flag by flag).
.PHONY: test-bridges
TEST_TARGETS += test-bridges
test-bridges: $(PLANC)
	timeout 600 python3 tests/test_bridges.py $(PLANC)

# bench-json: the runtime's checkpoint-header parser beside Jansson
# (docs/bridges.md, "Why the runtime keeps its own JSON parser").
.PHONY: bench-json
BENCH_TARGETS += bench-json
$(BUILD)/bin/bench_ckpt_json: tests/bench_ckpt_json.c runtime/ckpt/json.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Iruntime/ckpt $(CFLAGS) $^ -o $@ $(LDLIBS)
bench-json: $(BUILD)/bin/bench_ckpt_json
	$(BUILD)/bin/bench_ckpt_json
