# tests/fp8.mk: FP8 numerics (issue 27): test_fp8 (cmocka: the codec's
# rules, each recipe's scales, the scaled GEMM) and the bit-for-bit check
# of planrt's encoder against ml_dtypes (tests/fp8/ref_check.py, about a
# million fp32 values per format and mode).
#
# ml_dtypes 0.7.0 (and numpy) go into a venv under build/ the first time
# (about 10 s and 100 MB); without PyPI the target fails and says so.
# `make SAN=1 test-fp8` runs both under AddressSanitizer and UBSan.
FP8_TEST_BIN := $(BUILD)/tests/test_fp8
FP8_ENCODE   := $(BUILD)/tests/fp8_encode
# One venv for the plain and the SAN=1 trees (build/san shares build's).
FP8_VENV     := $(patsubst %/san,%,$(BUILD))/venv-fp8
FP8_MLDTYPES := ml_dtypes==0.7.0

$(FP8_TEST_BIN) $(FP8_ENCODE): $(BUILD)/tests/%: $(BUILD)/obj-rt/tests/%.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(CMOCKA_LIBS) $(BLAS_LIBS) $(LDLIBS)

$(BUILD)/obj-rt/tests/fp8_encode.o: tests/fp8/fp8_encode.c
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(FP8_VENV)/.installed:
	@rm -rf $(FP8_VENV)
	@python3 -m venv $(FP8_VENV) || { echo "✗ test-fp8: python3 -m venv failed (install python3-venv: scripts/deps.sh)" >&2; exit 1; }
	@$(FP8_VENV)/bin/pip install --quiet $(FP8_MLDTYPES) || { \
	    echo "✗ test-fp8: could not install $(FP8_MLDTYPES) from PyPI into $(FP8_VENV);" >&2; \
	    echo "  the bit-for-bit check needs it (network, or a pip index: PIP_INDEX_URL)" >&2; exit 1; }
	@touch $@

.PHONY: test-fp8
TEST_TARGETS += test-fp8
test-fp8: $(FP8_TEST_BIN) $(FP8_ENCODE) $(FP8_VENV)/.installed
	$(FP8_TEST_BIN)
	$(FP8_VENV)/bin/python tests/fp8/ref_check.py $(FP8_ENCODE) $(BUILD)

# ---- the CUDA casts against the CPU's (runtime/cuda/ops_fp8.cu) -------------
# test_fp8_cuda links libplanrt_cuda.a and the renamed CPU ops
# (libplanrt_ref.a, runtime/ops.mk); without a GPU it stops at start with
# status 77, which proves the CUDA casts link. On a GPU machine run
# build/tests/test_fp8_cuda itself.
ifneq ($(NVCC),)
FP8_CUDA_BIN := $(BUILD)/tests/test_fp8_cuda

$(BUILD)/obj-cuda/tests/test_fp8_cuda.c.o: $(BUILD)/gen/prt_ops_ref.h

$(FP8_CUDA_BIN): $(BUILD)/obj-cuda/tests/test_fp8_cuda.c.o $(LIBPRT_CUDA) $(OPS_REF_LIB)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(OPS_REF_LIB) $(BLAS_LIBS) \
	    $(CUDA_LIBS) -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ $(LDLIBS)

.PHONY: test-fp8-cuda-link
TEST_TARGETS += test-fp8-cuda-link
test-fp8-cuda-link: $(FP8_CUDA_BIN)
	@$(FP8_CUDA_BIN) 2>&1 | tail -n 12; rc=$${PIPESTATUS[0]}; \
	 if [ $$rc = 77 ]; then echo "test-fp8-cuda-link: linked; no GPU here, CUDA checks skipped"; \
	 elif [ $$rc != 0 ]; then echo "test-fp8-cuda-link: failed (status $$rc)" >&2; exit 1; fi
endif

# ---- FP8 training in the generated CPU program ---------------------------------
# test-fp8-train (tests/fp8/train.sh): emit's FP8 refusals (blockwise tiles a
# TP split would cut; build --target cuda), then tiny's model 50 steps on
# one rank with each recipe, delayed included, every loss within 3e-3 of
# fp32's (about 40 s). The layouts under FP8 are test-invariance's fp8-* rows.
.PHONY: test-fp8-train
TEST_TARGETS += test-fp8-train
test-fp8-train: $(PLANC) $(LIBPRT) $(CG_DATA)
	MPIRUN="$(MPIRUN)" tests/fp8/train.sh $(PLANC) $(abspath $(BUILD))/fp8-train

# test-fp8-delayed (tests/fp8/delayed.sh): recipe delayed's amax histories
# in checkpoints — a resume at step 3 equals the uninterrupted 8 steps
# (losses, weights, histories byte for byte), dp 2 x tp 2 x pp 2's step-1
# histories are the one-rank run's within 1e-5, its checkpoint resumes on
# one rank, and checkpoints without the histories or with another
# amax_history are refused (about 25 s).
.PHONY: test-fp8-delayed
TEST_TARGETS += test-fp8-delayed
test-fp8-delayed: $(PLANC) $(LIBPRT) $(CG_DATA)
	MPIRUN="$(MPIRUN)" tests/fp8/delayed.sh $(PLANC) $(abspath $(BUILD))/fp8-delayed

# test-fp8-gpt2 (tests/fp8/gpt2.sh; not in `make test`: several minutes on
# two cores): GPT-2 small's shape (12 x 768, 12 heads, MLP 3072; vocabulary
# 256, the data's bytes; seq GPT2_SEQ 64, GPT2_STEPS 8, micro_batch 2, one
# rank) trains in fp32 and with each recipe the program runs, every step's
# loss within GPT2_MARGIN of fp32's (docs/validation.md has the figures).
.PHONY: test-fp8-gpt2
test-fp8-gpt2: $(PLANC) $(LIBPRT) $(CG_DATA)
	MPIRUN="$(MPIRUN)" tests/fp8/gpt2.sh $(PLANC) $(abspath $(BUILD))/fp8-gpt2
