# runtime/par.mk: parallel execution in libplanrt (ZeRO on the flat
# buffers, pipeline slots and transfers, the executable's command line, data
# and log). The same C sources build into both libraries.
PRT_PAR_SRCS  := runtime/par/model.c runtime/par/pipe.c runtime/par/run.c runtime/par/save.c \
                 runtime/par/mem.c
PRT_SRCS      += $(PRT_PAR_SRCS)
PRT_CUDA_SRCS += $(PRT_PAR_SRCS)

# test-mem (issue 14): every generated program's --mem-report (planrt's
# allocator, by kind) against `planc check` over a layout matrix, measured
# RSS per rank against the prediction on a 25.5M-parameter model, and
# ZeRO's savings on dp 4 (tests/mem/run.sh says what each check holds).
.PHONY: test-mem
TEST_TARGETS += test-mem
test-mem: $(PLANC) $(LIBPRT) $(if $(NVCC),$(LIBPRT_CUDA)) $(CG_DATA)
	MPIRUN="$(MPIRUN)" PRT_CUDA_LIB="$(if $(NVCC),$(LIBPRT_CUDA))" MEM_RSS=$(if $(filter 1,$(SAN)),0,1) \
	    tests/mem/run.sh $(PLANC) $(abspath $(BUILD))/mem

# test-resilience: checkpoints, exact and cross-layout resume, refusals of
# bad checkpoints, a killed or hung rank, an injected NaN, the consolidated
# model (tests/resilience/run.sh says what each check holds).
.PHONY: test-resilience
TEST_TARGETS += test-resilience
test-resilience: $(PLANC) $(LIBPRT) $(BUILD)/tests/inv_compare $(CG_DATA)
	MPIRUN="$(MPIRUN)" tests/resilience/run.sh $(PLANC) $(abspath $(BUILD))/resilience \
	    $(BUILD)/tests/inv_compare

# test-par-vocab: a padded vocabulary in the parameter table on 2 TP ranks:
# initial values, padding rows 0 through AdamW, checkpoints of the logical
# rows loaded into another padding (tests/test_par_vocab.c).
$(BUILD)/tests/test_par_vocab: $(BUILD)/obj-rt/tests/test_par_vocab.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)

.PHONY: test-par-vocab
TEST_TARGETS += test-par-vocab
test-par-vocab: $(BUILD)/tests/test_par_vocab
	rm -rf $(BUILD)/par-vocab && mkdir -p $(BUILD)/par-vocab
	timeout 120 $(MPIRUN) -np 2 $(BUILD)/tests/test_par_vocab $(BUILD)/par-vocab
