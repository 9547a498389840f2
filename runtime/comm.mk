# runtime/comm.mk: the communication half of libplanrt (context, groups,
# collectives, planc's own ring/tree algorithms), its tests and planrt-bench.
COMM_GENERIC := runtime/comm/context.c runtime/comm/sched.c runtime/comm/algos.c \
                runtime/comm/coll.c runtime/comm/reduce_cpu.c runtime/comm/counts.c
PRT_SRCS     += $(COMM_GENERIC) runtime/comm/native_mpi.c runtime/comm/stream_mpi.c
PRT_CUDA_SRCS += $(COMM_GENERIC) runtime/cuda/comm_nccl.c runtime/cuda/comm_kernels.cu

# ---- tests -----------------------------------------------------------------
# test_comm runs under real mpirun on each rank count below; one launch
# covers every operation x type x reduction x algorithm x mode x count.
# No PLANRT_TIMEOUT_S here: with it, blocking native calls would take the
# non-blocking path, and the plain MPI calls would go untested; `timeout`
# ends a hung run instead.
COMM_TEST_RANKS := 1 2 3 4 5 8

$(BUILD)/tests/test_comm: $(BUILD)/obj-rt/tests/test_comm.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(LDLIBS)

.PHONY: test-comm
TEST_TARGETS += test-comm
# Each rank count runs under both point-to-point modes (PLANRT_P2P: MPI's
# buffered sends, and NCCL's rules, which test_comm checks differently).
test-comm: $(BUILD)/tests/test_comm
	@set -e; for mode in buffered rendezvous; do for np in $(COMM_TEST_RANKS); do \
	    echo "-- test_comm on $$np ranks, PLANRT_P2P=$$mode"; \
	    PLANRT_P2P=$$mode timeout 300 $(MPIRUN) -x PLANRT_P2P -np $$np $(BUILD)/tests/test_comm; \
	done; done

# The same test program linked against the CUDA library (NCCL + cudart +
# MPI).  With a GPU it runs on one rank per GPU; without one it must stop at
# start with a clear message and exit status 77, which is what is checked.
ifneq ($(NVCC),)
$(BUILD)/obj-cuda/tests/test_comm.c.o: CPPFLAGS += -I$(CUDA_HOME)/include
$(BUILD)/tests/test_comm_cuda: $(BUILD)/obj-cuda/tests/test_comm.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ $(LDLIBS)

TEST_TARGETS += test-comm-cuda
.PHONY: test-comm-cuda
test-comm-cuda: $(BUILD)/tests/test_comm_cuda
	@if [ "$(HAVE_GPU)" = 1 ]; then \
	    np=$$(nvidia-smi -L | wc -l); echo "-- test_comm_cuda on $$np ranks (one per GPU)"; \
	    timeout 600 $(MPIRUN) -np $$np $(BUILD)/tests/test_comm_cuda; \
	else \
	    rc=0; out=$$($(MPIRUN) -np 1 $(BUILD)/tests/test_comm_cuda 2>&1) || rc=$$?; \
	    if [ $$rc = 77 ] && grep -q "no CUDA device" <<<"$$out"; then \
	        echo "✓ test_comm_cuda links (NCCL, cudart, MPI) and stops cleanly without a GPU:"; \
	        grep "no CUDA device" <<<"$$out" | head -1 | sed 's/^/    /'; \
	    else echo "✗ test_comm_cuda: expected exit 77 and 'no CUDA device', got $$rc:"; \
	        echo "$$out" | head -20; exit 1; fi; \
	fi
endif

# ---- benchmark ---------------------------------------------------------------
# planrt-bench (nccl-tests format).  `make bench` runs all-reduce on 4 ranks
# for every algorithm, sizes interleaved, and prints each one's busbw at
# 64 MiB relative to raw MPI_Allreduce (goals: native >= 0.95, ring >= 0.8).
PLANRT_BENCH := $(BUILD)/bin/planrt-bench
ALL_TARGETS  += $(PLANRT_BENCH)

$(PLANRT_BENCH): $(BUILD)/obj-rt/runtime/comm/planrt_bench.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(LDLIBS)

# The same benchmark over NCCL, for tests/gpu/check-comm.sh.
ifneq ($(NVCC),)
ALL_TARGETS += $(BUILD)/bin/planrt-bench-cuda
$(BUILD)/bin/planrt-bench-cuda: $(BUILD)/obj-cuda/runtime/comm/planrt_bench.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ $(LDLIBS)
endif

.PHONY: bench-comm
BENCH_TARGETS += bench-comm
bench-comm: $(PLANRT_BENCH)
	@mkdir -p $(BUILD)/bench
	set -o pipefail; $(MPIRUN) -np 4 $(PLANRT_BENCH) -c allreduce -b 1K -e 64M -f 4 \
	    -n 10 -w 2 -a mpi-raw,native,ring,tree | tee $(BUILD)/bench/comm-allreduce.txt
	@echo "==== 64 MiB all-reduce on 4 ranks, busbw relative to raw MPI_Allreduce" \
	      "(goals: native >= 0.95, ring >= 0.8; 4 ranks share 2 cores here, so noisy):"
	@grep "relative to mpi-raw" $(BUILD)/bench/comm-allreduce.txt | sed 's/.*mpi-raw: /    /'
