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
	PLANC_DS_PYTHON=$(DS_VALIDATOR)/bin/python PLANC_TT_SRC=$(TT_VALIDATOR) \
	    timeout 600 python3 tests/test_bridges.py $(PLANC)

# bridges-validators: DeepSpeed 0.17.0 (the version `export --to deepspeed`
# targets) in a virtual environment over Debian's python3-torch 1.13.1, so
# test-bridges also checks every ds_config with DeepSpeed's own
# DeepSpeedConfig and WarmupCosineLR (tests/bridges/validate_deepspeed.py).
# Optional: test-bridges says when it is absent. --no-deps keeps pip from
# pulling a PyPI torch; the pins are DeepSpeed 0.17.0's runtime imports.
DS_VALIDATOR := $(BUILD)/validators/ds
DS_PINS := deepspeed==0.17.0 packaging==26.4 hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 \
           annotated-types==0.8.0 typing-extensions==4.16.0 typing-inspection==0.4.5 psutil py-cpuinfo==9.0.0 \
           tqdm==4.70.1 msgpack==1.2.4 einops==0.8.2 ninja==1.13.2 tyro==1.0.17 docstring-parser==0.18.0 \
           typeguard==4.6.1
# torchtitan 0.2.2's wheel, unpacked: tests/bridges/validate_torchtitan.py
# imports its torchtitan.config alone (ConfigManager) with the venv's Python
TT_VALIDATOR := $(BUILD)/validators/torchtitan-0.2.2
.PHONY: bridges-validators
bridges-validators:
	./scripts/deps.sh hf
	/usr/bin/python3 -m venv --system-site-packages $(DS_VALIDATOR)
	DS_BUILD_OPS=0 $(DS_VALIDATOR)/bin/pip install --no-build-isolation --no-deps $(DS_PINS)
	rm -rf $(TT_VALIDATOR) && mkdir -p $(TT_VALIDATOR)
	$(DS_VALIDATOR)/bin/pip download --no-deps torchtitan==0.2.2 -d $(TT_VALIDATOR)
	cd $(TT_VALIDATOR) && $(abspath $(DS_VALIDATOR))/bin/python -m zipfile -e torchtitan-0.2.2-py3-none-any.whl .

# bench-json: the runtime's checkpoint-header parser beside Jansson
# (docs/bridges.md, "Why the runtime keeps its own JSON parser").
.PHONY: bench-json
BENCH_TARGETS += bench-json
$(BUILD)/bin/bench_ckpt_json: tests/bench_ckpt_json.c runtime/ckpt/json.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Iruntime/ckpt $(CFLAGS) $^ -o $@ $(LDLIBS)
bench-json: $(BUILD)/bin/bench_ckpt_json
	$(BUILD)/bin/bench_ckpt_json
