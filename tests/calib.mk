# tests/calib.mk: planc calibrate and the calibrated cost model (issue 15).
#
# test-calib: the cost model reproduces a profile's own points and keeps
# the analytic model without one, per dtype and per group size, and a
# synthetic GPU measurement goes through the profile writer, fmt and sema
# unchanged (tests/test_calib.c); then `planc calibrate --quick` on 2 ranks
# (the target it picks by itself: cpu without a GPU) writes a file that
# `planc fmt` prints unchanged and that `planc check` reads (a plan
# including it), bad profile keys are refused with exit 2, and where
# planrt-calib-cuda is built but no GPU is usable, `--target cuda` is exit 1
# with the probe's "no CUDA device: ..." (with a GPU, tests/gpu/check-calib.sh
# runs it for real). No timing comparison here: that is validate-calib's.
# validate-calib: the predicted-vs-measured benchmark on this machine
# (scripts/validate-calib.sh), after calibrating once (cached in
# $(BUILD)/calib/measured.plan; `make calib-clean` forgets it).
CALIB_FILE := $(BUILD)/calib/measured.plan

# the profile's writer (cli/calib_profile.c) and the front end read a
# synthetic GPU measurement back
$(BUILD)/bin/test_calib: tests/test_calib.c $(PLANNER_OBJS) $(BUILD)/obj/cli/calib_profile.o $(DSL_OBJS) \
                         $(BUILD)/obj/planner/sema.o
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-calib validate-calib calib-clean
TEST_TARGETS     += test-calib
VALIDATE_TARGETS += validate-calib

test-calib: $(BUILD)/bin/test_calib $(PLANC) $(BUILD)/bin/planrt-calib $(PLANRT_CALIB_CUDA)
	$(BUILD)/bin/test_calib
	@set -e; d=$(BUILD)/calib-test; rm -rf $$d; mkdir -p $$d; \
	tgt=; if [ "$(HAVE_GPU)" = 1 ]; then tgt="--target cpu"; fi; \
	timeout 300 $(PLANC) calibrate $$tgt --ranks 2 --quick --name quick2 -o $$d/quick.plan > $$d/progress.txt; \
	grep -q "^cluster quick2 {" $$d/quick.plan; grep -q "^        gemm fwd " $$d/quick.plan; \
	grep -q "^        all-reduce 2 " $$d/quick.plan; \
	if [ "$(HAVE_GPU)" = 0 ]; then grep -q "target cpu" $$d/progress.txt; \
	    grep -q "^        gemm_dtype fp32$$" $$d/quick.plan; fi; \
	$(PLANC) fmt $$d/quick.plan > $$d/fmt.plan; cmp $$d/quick.plan $$d/fmt.plan; \
	{ echo 'include "quick.plan"'; sed -e '/^include/d' -e 's/dp 2; tp 2; pp 2;/dp 2; tp 1; pp 1;/' \
	    examples/tiny.plan; } > $$d/tiny-quick.plan; \
	$(PLANC) check $$d/tiny-quick.plan > $$d/check.txt; grep -q "quick2" $$d/check.txt; \
	sed 's/^\(        gemm fwd [0-9]* [0-9]* [0-9]*\) .*/\1 5 GB/' $$d/quick.plan > $$d/bad.plan; \
	sed -e 's/quick.plan/bad.plan/' $$d/tiny-quick.plan > $$d/tiny-bad.plan; \
	rc=0; $(PLANC) check $$d/tiny-bad.plan > /dev/null 2> $$d/bad.txt || rc=$$?; \
	[ $$rc = 2 ] && grep -q "gemm' needs a time" $$d/bad.txt; \
	sed 's/^        p2p 2 /        p2p 3 /' $$d/quick.plan > $$d/bad.plan; \
	rc=0; $(PLANC) check $$d/tiny-bad.plan > /dev/null 2> $$d/bad.txt || rc=$$?; \
	[ $$rc = 2 ] && grep -q "'p2p' group size must be 2" $$d/bad.txt; \
	echo "✓ planc calibrate --quick: $$(grep -c '^        gemm ' $$d/quick.plan) GEMM points, fmt keeps it, check reads it, a bad point and a bad group size exit 2"; \
	if [ -n "$(PLANRT_CALIB_CUDA)" ] && [ "$(HAVE_GPU)" = 0 ]; then \
	    rc=0; $(PLANC) calibrate --target cuda --quick -o $$d/cuda.plan > /dev/null 2> $$d/cuda.txt || rc=$$?; \
	    [ $$rc = 1 ] && grep -q "no CUDA device: " $$d/cuda.txt && [ ! -e $$d/cuda.plan ] || \
	        { echo "✗ calibrate --target cuda without a GPU: exit $$rc"; cat $$d/cuda.txt; exit 1; }; \
	    echo "✓ planrt-calib-cuda links; without a GPU calibrate picks cpu and --target cuda exits 1:"; \
	    head -1 $$d/cuda.txt | sed 's/^/    /'; fi

$(CALIB_FILE): | $(PLANC) $(BUILD)/bin/planrt-calib
	@mkdir -p $(@D)
	$(PLANC) calibrate --target cpu --ranks 2 -o $@

validate-calib: $(PLANC) $(LIBPRT) $(BUILD)/bin/planrt-calib $(CALIB_FILE)
	MPIRUN="$(MPIRUN)" CALIB=$(CALIB_FILE) scripts/validate-calib.sh $(PLANC) $(abspath $(BUILD))/calib/validate

calib-clean:
	rm -f $(CALIB_FILE)
