# runtime/trace.mk: measured traces in libplanrt (runtime/par/trace.c: the
# generated executable's --trace OUT.json) and their test.
PRT_TRACE_SRCS := runtime/par/trace.c
PRT_SRCS       += $(PRT_TRACE_SRCS)
PRT_CUDA_SRCS  += $(PRT_TRACE_SRCS)

# test-trace-measured: tests/trace_measured/run.sh builds tiny.plan's model
# under four layouts (pp 2 1F1B, dp 2 x pp 2 ZeRO-1, interleaved 2 chunks,
# dp 2 x pp 2 ZeRO-3 zb-h1), trains each 2 steps with --trace and holds the
# file to `planc trace`'s Program (check.py: every op of every stage once
# per rank, in order, no overlap on a tid), draws --compare and parses the
# SVG; check.py must refuse mutated traces, the executable bad options.
.PHONY: test-trace-measured
TEST_TARGETS += test-trace-measured
test-trace-measured: $(PLANC) $(LIBPRT) $(CG_DATA)
	MPIRUN="$(MPIRUN_RDV)" tests/trace_measured/run.sh $(PLANC) $(abspath $(BUILD))/tests/trace-measured
