# tests/fd.mk: the generated program's gradients against finite differences
# of its own loss (issue 29: norm_position post and sandwich, pre-norm and
# post-norm gains, LayerNorm biases, dropout, Gemma's 1 + w, OLMo-2's q/k norm of the
# projection, Gemma 3's local RoPE base and its whole block with the q/k norms by
# 1 + w), one element of largest
# gradient per tensor (tests/fd/program_fd.py). About 2 minutes on 2 cores.
.PHONY: test-program-fd
TEST_TARGETS += test-program-fd
test-program-fd: $(PLANC) $(LIBPRT)
	MPIRUN="$(MPIRUN)" tests/fd/run.sh $(PLANC) $(abspath $(BUILD))/fd
