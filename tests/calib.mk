# tests/calib.mk: planc calibrate and the calibrated cost model (issue 15).
#
# test-calib: the cost model reproduces a profile's own points and keeps
# the analytic model without one (tests/test_calib.c); then `planc
# calibrate --quick` on 2 ranks writes a file that `planc fmt` prints
# unchanged and that `planc check` reads (a plan including it), and bad
# profile keys are refused with exit 2. No timing comparison here: that is
# validate-calib's.
# validate-calib: the predicted-vs-measured benchmark on this machine
# (scripts/validate-calib.sh), after calibrating once (cached in
# $(BUILD)/calib/measured.plan; `make calib-clean` forgets it).
CALIB_FILE := $(BUILD)/calib/measured.plan

$(BUILD)/bin/test_calib: tests/test_calib.c $(PLANNER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-calib validate-calib calib-clean
TEST_TARGETS     += test-calib
VALIDATE_TARGETS += validate-calib

test-calib: $(BUILD)/bin/test_calib $(PLANC) $(BUILD)/bin/planrt-calib
	$(BUILD)/bin/test_calib
	@set -e; d=$(BUILD)/calib-test; rm -rf $$d; mkdir -p $$d; \
	timeout 300 $(PLANC) calibrate --ranks 2 --quick --name quick2 -o $$d/quick.plan > $$d/progress.txt; \
	grep -q "^cluster quick2 {" $$d/quick.plan; grep -q "^        gemm fwd " $$d/quick.plan; \
	grep -q "^        all-reduce " $$d/quick.plan; \
	$(PLANC) fmt $$d/quick.plan > $$d/fmt.plan; cmp $$d/quick.plan $$d/fmt.plan; \
	{ echo 'include "quick.plan"'; sed -e '/^include/d' -e 's/dp 2; tp 2; pp 2;/dp 2; tp 1; pp 1;/' \
	    examples/tiny.plan; } > $$d/tiny-quick.plan; \
	$(PLANC) check $$d/tiny-quick.plan > $$d/check.txt; grep -q "quick2" $$d/check.txt; \
	sed 's/^\(        gemm fwd [0-9]* [0-9]* [0-9]*\) .*/\1 5 GB/' $$d/quick.plan > $$d/bad.plan; \
	sed -e 's/quick.plan/bad.plan/' $$d/tiny-quick.plan > $$d/tiny-bad.plan; \
	rc=0; $(PLANC) check $$d/tiny-bad.plan > /dev/null 2> $$d/bad.txt || rc=$$?; \
	[ $$rc = 2 ] && grep -q "gemm' needs a time" $$d/bad.txt; \
	echo "✓ planc calibrate --quick: $$(grep -c '^        gemm ' $$d/quick.plan) GEMM points, fmt keeps it, check reads it, a bad point exits 2"

$(CALIB_FILE): | $(PLANC) $(BUILD)/bin/planrt-calib
	@mkdir -p $(@D)
	$(PLANC) calibrate --ranks 2 -o $@

validate-calib: $(PLANC) $(LIBPRT) $(BUILD)/bin/planrt-calib $(CALIB_FILE)
	MPIRUN="$(MPIRUN)" CALIB=$(CALIB_FILE) scripts/validate-calib.sh $(PLANC) $(abspath $(BUILD))/calib/validate

calib-clean:
	rm -f $(CALIB_FILE)
