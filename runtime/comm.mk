# runtime/comm.mk: the communication half of libplanrt (context, groups,
# collectives, planc's own ring/tree algorithms), its tests and planrt-bench.
COMM_GENERIC := runtime/comm/context.c runtime/comm/sched.c runtime/comm/algos.c \
                runtime/comm/coll.c runtime/comm/reduce_cpu.c
PRT_SRCS     += $(COMM_GENERIC) runtime/comm/native_mpi.c

# ---- tests -----------------------------------------------------------------
# test_comm runs under real mpirun on each rank count below; one launch
# covers every operation x type x reduction x algorithm x mode x count.
COMM_TEST_RANKS := 1 2 3 4 5 8

$(BUILD)/tests/test_comm: $(BUILD)/obj-rt/tests/test_comm.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(LDLIBS)

.PHONY: test-comm
TEST_TARGETS += test-comm
test-comm: $(BUILD)/tests/test_comm
	@set -e; for np in $(COMM_TEST_RANKS); do \
	    echo "-- test_comm on $$np ranks"; \
	    $(MPIRUN) -np $$np $(BUILD)/tests/test_comm; done

# ---- benchmark ---------------------------------------------------------------
# planrt-bench (nccl-tests format).  `make bench` runs all-reduce on 4 ranks
# for every algorithm, sizes interleaved, and prints each one's busbw at
# 64 MiB relative to raw MPI_Allreduce (goals: native >= 0.95, ring >= 0.8).
PLANRT_BENCH := $(BUILD)/bin/planrt-bench
ALL_TARGETS  += $(PLANRT_BENCH)

$(PLANRT_BENCH): $(BUILD)/obj-rt/runtime/comm/planrt_bench.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(LDLIBS)

$(BUILD)/obj-rt/runtime/comm/planrt_bench.o: CPPFLAGS += -Iruntime/comm

.PHONY: bench-comm
BENCH_TARGETS += bench-comm
bench-comm: $(PLANRT_BENCH)
	$(MPIRUN) -np 4 $(PLANRT_BENCH) -c allreduce -b 1K -e 64M -f 4 -n 10 -w 2 \
	    -a mpi-raw,native,ring,tree
