# tests/hf.mk: Hugging Face model directories out of planc and into it
# (issue 28). test-hf-roundtrip: tiny random directories of each
# architecture (tests/hf/hfdir.py, the standard library alone) start runs
# on several layouts with --steps 0 and come back bit for bit through
# --export-hf and planrt-ckpt export-hf, and a one-step run from each logs
# the loss tests/hf/reference.py computes with transformers' formulas in
# plain Python; the refusals are named. About 50 s on 2 cores.
.PHONY: test-hf-roundtrip
TEST_TARGETS += test-hf-roundtrip
test-hf-roundtrip: $(PLANC) $(LIBPRT) $(PLANRT_CKPT)
	@./scripts/make-data.sh
	timeout 600 tests/hf/roundtrip.sh $(BUILD)
