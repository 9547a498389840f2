# tests/fd.mk: the generated program's gradients against finite differences
# of its own loss (issue 29: norm_position post and sandwich, pre-norm and
# post-norm gains, LayerNorm biases, dropout, Gemma's 1 + w, OLMo-2's q/k norm of the
# projection, Gemma 3's local RoPE base and its whole block with the q/k norms by
# 1 + w), one element of largest
# gradient per tensor (tests/fd/program_fd.py). 189 s on 2 cores (2026-12-07).
.PHONY: test-program-fd
TEST_TARGETS += test-program-fd
# Under SAN=1 (all nine took 512 s there on 2026-12-07, against 189 s
# without) four models that between them run every op the nine do —
# LayerNorm with dropout and sandwich norms, MLA with YaRN's mscale pair,
# Gemma 3's block, OLMo-2's post-norms and q/k norm — as the invariance
# matrix's INV_SAN_CASES: `make test` has run all nine without the sanitizers.
FD_SAN_CASES := fd-sandwich-ln-drop fd-mla-yarnms fd-gemma3 fd-olmo2
test-program-fd: $(PLANC) $(LIBPRT)
	MPIRUN="$(MPIRUN)" tests/fd/run.sh $(PLANC) $(abspath $(BUILD))/fd $(if $(filter 1,$(SAN)),$(FD_SAN_CASES))
