# runtime/ops.mk: the compute half of libplanrt (layers, AdamW, init, data),
# its tests and its benchmark.
PRT_OPS_CPU := runtime/ops/mem.c runtime/ops/layers.c runtime/ops/linear.c runtime/ops/dropout.c \
               runtime/ops/attention.c runtime/ops/adamw.c runtime/ops/moe.c runtime/ops/fp8.c
PRT_OPS_BOTH := runtime/ops/init.c runtime/ops/data.c runtime/ops/errors.c runtime/ops/fp8_recipe.c \
                runtime/ops/mla.c
PRT_SRCS     += $(PRT_OPS_CPU) $(PRT_OPS_BOTH)
PRT_CUDA_SRCS += $(PRT_OPS_BOTH) runtime/ops/adamw.c

# ---- tests -----------------------------------------------------------------
OPS_TEST_BINS := $(BUILD)/tests/test_ops $(BUILD)/tests/test_ops_data $(BUILD)/tests/test_ops_train \
                 $(BUILD)/tests/test_ops_dropout $(BUILD)/tests/test_ops_moe
OPS_GPT_OBJ   := $(BUILD)/obj-rt/tests/test_ops_gpt.o

$(BUILD)/tests/test_ops $(BUILD)/tests/test_ops_data $(BUILD)/tests/test_ops_dropout $(BUILD)/tests/test_ops_moe: $(BUILD)/tests/%: $(BUILD)/obj-rt/tests/%.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(CMOCKA_LIBS) $(BLAS_LIBS) $(LDLIBS)

$(BUILD)/tests/test_ops_train $(BUILD)/tests/test_ops_bench: $(BUILD)/tests/%: $(BUILD)/obj-rt/tests/%.o $(OPS_GPT_OBJ) $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< $(OPS_GPT_OBJ) -o $@ $(LIBPRT) $(CMOCKA_LIBS) $(BLAS_LIBS) $(LDLIBS)

.PHONY: test-ops bench-ops
TEST_TARGETS  += test-ops
test-ops: $(OPS_TEST_BINS)
	@set -e; for t in $(OPS_TEST_BINS); do $$t; done

# test-fault: PLANRT_FAULT fails one call of one op in a generated CPU
# program (1 rank, and a 2-stage pipeline): the run must end within the
# step, non-zero, naming rank, layer and op (tests/fault/run.sh).
.PHONY: test-fault
TEST_TARGETS += test-fault
test-fault: $(PLANC) $(LIBPRT) $(CG_DATA)
	MPIRUN="$(MPIRUN_RDV)" tests/fault/run.sh $(PLANC) $(abspath $(BUILD))/fault

BENCH_TARGETS += bench-ops
bench-ops: $(BUILD)/tests/test_ops_bench
	$(BUILD)/tests/test_ops_bench 4

# ---- CUDA build ---------------------------------------------------------------
PRT_CUDA_SRCS += runtime/cuda/ops_mem.c runtime/cuda/ops_layers.cu runtime/cuda/ops_gemm.cu \
                 runtime/cuda/ops_adamw.cu runtime/cuda/ops_moe.cu runtime/cuda/ops_fp8.cu \
                 runtime/cuda/ops_cp.cu

# ---- CUDA check: CUDA ops vs CPU ops in one program ------------------------------
# libplanrt_ref.a is the CPU ops with every prt_ symbol renamed ref_prt_, and
# prt_ops_ref.h the header to match, so test_ops_cuda can call both builds.
# `make test` builds it and runs it; without a GPU it stops at start with a
# message and status 77, which proves the CUDA ops link. tests/gpu/run.sh
# runs it for real.
ifneq ($(NVCC),)
OPS_REF_OBJS := $(patsubst %.c,$(BUILD)/obj-rt/%.o,$(PRT_OPS_CPU) $(PRT_OPS_BOTH))
OPS_REF_LIB  := $(BUILD)/lib/libplanrt_ref.a
OPS_CUDA_BIN := $(BUILD)/tests/test_ops_cuda

$(BUILD)/gen/prt_ops_ref.h: runtime/include/prt_ops.h runtime/ops.mk
	@mkdir -p $(@D)
	sed -e 's/\bprt_/ref_prt_/g' -e 's/ref_prt_status/prt_status/g' -e 's/PRT_DATA_/REF_DATA_/g' -e 's/PRT_DROPOUT_/REF_DROPOUT_/g' -e 's/PRT_FP8_/REF_FP8_/g' -e 's/PRT_ROPE_/REF_ROPE_/g' -e 's/PRT_MOE_/REF_MOE_/g' \
	    -e 's/PRT_OPS_H/REF_OPS_H/g' -e 's/^#ifdef PRT_CUDA/#if 0/' -e 's/^#ifndef PRT_CUDA/#if 1/' $< > $@

$(OPS_REF_LIB): $(OPS_REF_OBJS)
	@mkdir -p $(@D) $(BUILD)/ops-ref
	nm --defined-only $^ | awk '$$3 ~ /^prt_/ { print $$3 " ref_" $$3 }' | sort -u > $(BUILD)/ops-ref/syms
	rm -f $@ $(BUILD)/ops-ref/*.o
	for o in $^; do objcopy --redefine-syms=$(BUILD)/ops-ref/syms $$o $(BUILD)/ops-ref/$$(basename $$o); done
	ar rcs $@ $(BUILD)/ops-ref/*.o

$(BUILD)/obj-cuda/tests/test_ops_cuda.c.o: $(BUILD)/gen/prt_ops_ref.h

$(OPS_CUDA_BIN): $(BUILD)/obj-cuda/tests/test_ops_cuda.c.o $(BUILD)/obj-cuda/tests/test_ops_gpt.c.o \
                 $(LIBPRT_CUDA) $(OPS_REF_LIB)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(LIBPRT_CUDA) $(OPS_REF_LIB) $(BLAS_LIBS) \
	    $(CUDA_LIBS) -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ $(LDLIBS)

.PHONY: test-ops-cuda-link
TEST_TARGETS += test-ops-cuda-link
test-ops-cuda-link: $(OPS_CUDA_BIN)
	@$(OPS_CUDA_BIN) 2>&1 | tail -n 3; rc=$${PIPESTATUS[0]}; \
	 if [ $$rc = 77 ]; then echo "test-ops-cuda-link: linked; no GPU here, CUDA checks skipped"; \
	 elif [ $$rc != 0 ]; then echo "test-ops-cuda-link: failed (status $$rc)" >&2; exit 1; fi
endif
