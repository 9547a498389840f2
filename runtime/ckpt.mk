# runtime/ckpt.mk: checkpoints in libplanrt (safetensors files per rank, the
# index, reading any slice back, consolidation), the planrt-ckpt tool and
# the tests. The sources use no MPI and no device: the same objects go into
# both libraries.
PRT_CKPT_SRCS := runtime/ckpt/json.c runtime/ckpt/safetensors.c runtime/ckpt/ckpt.c runtime/ckpt/hf.c
PRT_SRCS      += $(PRT_CKPT_SRCS)
PRT_CUDA_SRCS += $(PRT_CKPT_SRCS)

PLANRT_CKPT := $(BUILD)/bin/planrt-ckpt
ALL_TARGETS += $(PLANRT_CKPT)

$(PLANRT_CKPT): $(BUILD)/obj-rt/runtime/ckpt/planrt_ckpt.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(LDLIBS)

$(BUILD)/tests/test_ckpt: $(BUILD)/obj-rt/tests/test_ckpt.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(CMOCKA_LIBS) $(LDLIBS)

# test_ckpt runs in one process, twice: CRC-32C by the lookup tables, then
# by the CPU's crc32 instruction where there is one (several simulated ranks writing pieces) in
# a scratch directory; then the tool consolidates a checkpoint the test left
# and Python reads the result (runtime/ckpt/check_consolidated.py: its own
# reader, and the safetensors package's when it is installed).
.PHONY: test-ckpt
TEST_TARGETS += test-ckpt
test-ckpt: $(BUILD)/tests/test_ckpt $(PLANRT_CKPT)
	@rm -rf $(BUILD)/tests/ckpt.tmp && mkdir -p $(BUILD)/tests/ckpt.tmp
	CKPT_TEST_DIR=$(BUILD)/tests/ckpt.tmp PLANRT_CRC_TABLE=1 timeout 300 $(BUILD)/tests/test_ckpt
	CKPT_TEST_DIR=$(BUILD)/tests/ckpt.tmp timeout 300 $(BUILD)/tests/test_ckpt
	$(PLANRT_CKPT) verify $(BUILD)/tests/ckpt.tmp/keep
	$(PLANRT_CKPT) consolidate $(BUILD)/tests/ckpt.tmp/keep $(BUILD)/tests/ckpt.tmp/model.safetensors
	python3 runtime/ckpt/check_consolidated.py $(BUILD)/tests/ckpt.tmp/model.safetensors \
	    $(BUILD)/tests/ckpt.tmp/keep/expected.bin
	@rc=0; $(PLANRT_CKPT) verify $(BUILD)/tests/ckpt.tmp/keep-corrupt 2>$(BUILD)/tests/ckpt.tmp/err || rc=$$?; \
	 if [ $$rc = 1 ] && grep -q "checksum mismatch" $(BUILD)/tests/ckpt.tmp/err; then \
	     echo "✓ planrt-ckpt verify refuses a corrupt checkpoint:"; sed 's/^/    /' $(BUILD)/tests/ckpt.tmp/err; \
	 else echo "✗ planrt-ckpt verify on a corrupt checkpoint: exit $$rc"; cat $(BUILD)/tests/ckpt.tmp/err; exit 1; fi
