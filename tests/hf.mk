# tests/hf.mk: Hugging Face model directories out of planc and into it
# (issue 28). test-hf-roundtrip: tiny random directories of each
# architecture (tests/hf/hfdir.py, the standard library alone) start runs
# on several layouts with --steps 0 and come back bit for bit through
# --export-hf and planrt-ckpt export-hf, and a one-step run from each logs
# the loss tests/hf/reference.py computes with transformers' formulas in
# plain Python (Gemma 3 among them); the refusals are named. About 2 min 20 s
# on 2 cores.
.PHONY: test-hf-roundtrip
TEST_TARGETS += test-hf-roundtrip
test-hf-roundtrip: $(PLANC) $(LIBPRT) $(PLANRT_CKPT) test-hf-map
	@./scripts/make-data.sh
	timeout 600 tests/hf/roundtrip.sh $(BUILD)

# test-hf-map (tests/test_hf_map.c): the mappings of OLMo-2 (post norms, the
# whole-projection q/k norm) and Gemma 3 (Gemma3ForCausalLM, which test-hf's
# transformers 4.49 lacks): a checkpoint written as the program writes one,
# exported (the config's fields, Gemma 3's window pattern both as
# sliding_window_pattern and layer_types, the names, the per-head permutation
# of the q/k norm gains), read back bit for bit by --init-from's reader, the
# refusals named. OLMo-2's export stays in $(BUILD)/tests/hf-map.tmp/olmo2-hf
# for test-hf (transformers loads it).
.PHONY: test-hf-map
TEST_TARGETS += test-hf-map
$(BUILD)/tests/test_hf_map: $(BUILD)/obj-rt/tests/test_hf_map.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(CMOCKA_LIBS) $(LDLIBS) -lm
test-hf-map: $(BUILD)/tests/test_hf_map
	@rm -rf $(BUILD)/tests/hf-map.tmp && mkdir -p $(BUILD)/tests/hf-map.tmp
	HF_MAP_DIR=$(BUILD)/tests/hf-map.tmp timeout 120 $(BUILD)/tests/test_hf_map

# tests/hf.mk: `make test-hf` (issue 28, item 4): planc's runs checked by the
# real transformers library for a tiny model of each of eight architectures
# (llama mistral qwen2 gemma gemma2 mixtral gpt2 olmo2), trained on 4 CPU ranks (dp 2 x
# tp 2, ZeRO-1; Mixtral ep 2): planc's forward against transformers', the
# exported directory loaded strictly (any missing or unexpected key is an
# error), the reverse from save_pretrained (tests/hf/run.sh says each check).
#
# scripts/hf-env.sh installs Debian's python3-torch (1.13.1) and, in a venv
# under build/, transformers 4.49.0 with its pinned dependencies
# (tests/hf/requirements.txt): 46 s and 770 MB the first time (606 MiB of
# Debian packages, a 163 MB venv), nothing and no network after. Without
# PyPI or Debian's mirror the target fails and says so.
# `make test-hf HF_ARCHS="llama gpt2"` runs some of the architectures.
HF_VENV  := $(patsubst %/san,%,$(BUILD))/venv-hf
HF_ARCHS ?= llama mistral qwen2 gemma gemma2 mixtral gpt2 olmo2
HF_CKPT  := $(PLANRT_CKPT)

.PHONY: test-hf hf-env
TEST_TARGETS += test-hf
hf-env:
	@scripts/hf-env.sh $(HF_VENV)

test-hf: $(PLANC) $(LIBPRT) $(HF_CKPT) $(BUILD)/tests/test_hf_map hf-env
	MPIRUN="$(MPIRUN)" tests/hf/run.sh $(PLANC) $(HF_CKPT) $(HF_VENV) $(abspath $(BUILD))/hf $(HF_ARCHS)
