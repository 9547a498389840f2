# runtime/par.mk: parallel execution in libplanrt (ZeRO on the flat
# buffers, pipeline slots and transfers, the executable's command line, data
# and log). The same C sources build into both libraries.
PRT_PAR_SRCS  := runtime/par/model.c runtime/par/pipe.c runtime/par/run.c runtime/par/save.c \
                 runtime/par/mem.c runtime/par/moe_ep.c runtime/par/cp.c \
                 runtime/par/fp8_state.c runtime/par/moe_bias.c
# cp.c's per-block compute: cp_cpu.c (OpenBLAS) here, runtime/cuda/ops_cp.cu there
PRT_SRCS      += $(PRT_PAR_SRCS) runtime/par/cp_cpu.c
PRT_CUDA_SRCS += $(PRT_PAR_SRCS)

# test-mem (issue 14): every generated program's --mem-report (planrt's
# allocator, by kind) against `planc check` over a layout matrix, measured
# RSS per rank against the prediction on a 25.5M-parameter model, and
# ZeRO's savings on dp 4 (tests/mem/run.sh says what each check holds).
.PHONY: test-mem
TEST_TARGETS += test-mem
test-mem: $(PLANC) $(LIBPRT) $(if $(NVCC),$(LIBPRT_CUDA)) $(CG_DATA)
	MPIRUN="$(MPIRUN_RDV)" PRT_CUDA_LIB="$(if $(NVCC),$(LIBPRT_CUDA))" MEM_RSS=$(if $(filter 1,$(SAN)),0,1) \
	    tests/mem/run.sh $(PLANC) $(abspath $(BUILD))/mem

# test-resilience: checkpoints, exact and cross-layout resume, refusals of
# bad checkpoints, a killed or hung rank, an injected NaN, the consolidated
# model (tests/resilience/run.sh says what each check holds).
.PHONY: test-resilience
TEST_TARGETS += test-resilience
test-resilience: $(PLANC) $(LIBPRT) $(BUILD)/tests/inv_compare $(CG_DATA)
	MPIRUN="$(MPIRUN_RDV)" tests/resilience/run.sh $(PLANC) $(abspath $(BUILD))/resilience \
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
	timeout 120 $(MPIRUN_RDV) -np 2 $(BUILD)/tests/test_par_vocab $(BUILD)/par-vocab

# test-moe-ep (issue 17): a MoE layer expert-parallel over 1, 2 and 4 ranks
# (the rows sent by prt_all_to_all_v to the ranks holding their experts)
# against the one-rank layer: outputs, input, expert and router gradients.
MOE_EP_RANKS := 1 2 4
$(BUILD)/tests/test_moe_ep: $(BUILD)/obj-rt/tests/test_moe_ep.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)

.PHONY: test-moe-ep
TEST_TARGETS += test-moe-ep
test-moe-ep: $(BUILD)/tests/test_moe_ep
	@set -e; for mode in buffered rendezvous; do for np in $(MOE_EP_RANKS); do \
	    PLANRT_P2P=$$mode timeout 300 $(MPIRUN) -x PLANRT_P2P -np $$np $(BUILD)/tests/test_moe_ep; \
	done; done

# test-p2p-deadlock (issue 24): NCCL's point-to-point rules on the CPU.
# Under PLANRT_P2P=rendezvous the old pipeline order (each rank sends, then
# receives, ungrouped) is reported as a deadlock on both ranks, not hung,
# and the same exchanges grouped complete (tests/p2p_deadlock.sh).
$(BUILD)/tests/test_p2p_deadlock: $(BUILD)/obj-rt/tests/test_p2p_deadlock.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)

.PHONY: test-p2p-deadlock
TEST_TARGETS += test-p2p-deadlock
test-p2p-deadlock: $(BUILD)/tests/test_p2p_deadlock
	MPIRUN="$(MPIRUN)" tests/p2p_deadlock.sh $(BUILD)/tests/test_p2p_deadlock

# test-invariance-buffered: the invariance matrix again under MPI's own
# point-to-point rules (PLANRT_P2P=buffered, planc's default on the CPU);
# test-invariance runs it under NCCL's (MPIRUN_RDV). Under SAN=1 (7 min a
# matrix there) one layout of each kind: the sanitizers look at the code,
# which the whole matrix under rendezvous has run already.
INV_BUFFERED_CASES := $(if $(filter 1,$(SAN)),pp2-1f1b pp2-interleaved pp4-zbh1 dp2-zero3 tp2 \
                        dp2-tp2-pp2 moe-ep2 tied-pp2,$(CASES))
.PHONY: test-invariance-buffered
TEST_TARGETS += test-invariance-buffered
test-invariance-buffered: $(PLANC) $(LIBPRT) $(BUILD)/tests/inv_compare $(CG_DATA)
	PLANRT_P2P=buffered MPIRUN="$(MPIRUN) -x PLANRT_P2P" tests/invariance/run.sh $(PLANC) \
	    $(abspath $(BUILD))/invariance-buffered $(BUILD)/tests/inv_compare $(INV_BUFFERED_CASES)

# test-cp-attention (issue 26): context-parallel attention in every form
# planrt runs (ring, all_gather, all_to_all) on 1, 2 and 4 CP ranks against
# the whole-sequence attention (outputs and every gradient), its buffers
# against prt_par.h's contract, and the refusals (tests/test_cp_attention.c).
CP_ATTN_RANKS := 1 2 3 4
$(BUILD)/tests/test_cp_attention: $(BUILD)/obj-rt/tests/test_cp_attention.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)

# test_cp_attention_oop: the same test with cp.c and cp_cpu.c built as the
# CUDA build orders its work (PRT_CP_OUT_OF_PLACE: the all-to-alls unpack
# out of place into a receive buffer), so the orchestration the CUDA build
# runs is held to the same answers and buffer counts without a GPU. Its
# objects come first, so the archive's cp.o and cp_cpu.o are not linked.
CP_OOP_OBJS := $(addprefix $(BUILD)/obj-cpoop/,tests/test_cp_attention.o runtime/par/cp.o runtime/par/cp_cpu.o)
$(BUILD)/obj-cpoop/%.o: %.c
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(BLAS_CFLAGS) -DPRT_CP_OUT_OF_PLACE -c $< -o $@

$(BUILD)/tests/test_cp_attention_oop: $(CP_OOP_OBJS) $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $(CP_OOP_OBJS) -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)

.PHONY: test-cp-attention
TEST_TARGETS += test-cp-attention
test-cp-attention: $(BUILD)/tests/test_cp_attention $(BUILD)/tests/test_cp_attention_oop
	@set -e; for mode in buffered rendezvous; do for np in $(CP_ATTN_RANKS); do \
	    PLANRT_P2P=$$mode timeout 300 $(MPIRUN) -x PLANRT_P2P -np $$np $(BUILD)/tests/test_cp_attention; \
	done; done
	@set -e; for np in $(CP_ATTN_RANKS); do \
	    PLANRT_P2P=rendezvous timeout 300 $(MPIRUN) -x PLANRT_P2P -np $$np $(BUILD)/tests/test_cp_attention_oop; \
	done

# test-cp-cuda-link: the CUDA build of context-parallel attention against
# the CPU reference (tests/test_cp_cuda.c; tests/gpu/check-cp.sh runs it on
# a GPU). Without a GPU it stops at start with status 77, which proves it
# links against libplanrt_cuda.a.
ifneq ($(NVCC),)
CP_CUDA_BIN := $(BUILD)/tests/test_cp_cuda
$(CP_CUDA_BIN): $(BUILD)/obj-cuda/tests/test_cp_cuda.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ $(LDLIBS)

.PHONY: test-cp-cuda-link
TEST_TARGETS += test-cp-cuda-link
test-cp-cuda-link: $(CP_CUDA_BIN)
	@$(CP_CUDA_BIN) 2>&1 | tail -n 3; rc=$${PIPESTATUS[0]}; \
	 if [ $$rc = 77 ]; then echo "test-cp-cuda-link: linked; no GPU here, CUDA checks skipped"; \
	 elif [ $$rc != 0 ]; then echo "test-cp-cuda-link: failed (status $$rc)" >&2; exit 1; fi
endif

# test-cp-ckpt: checkpoints across context parallelism (issue 26): a dp 2 x
# cp 2 checkpoint resumes exactly on its layout and within the invariance
# tolerances on one rank, a one-rank checkpoint on dp 2 x cp 2
# (tests/cp/ckpt.sh says what each check holds).
.PHONY: test-cp-ckpt
TEST_TARGETS += test-cp-ckpt
test-cp-ckpt: $(PLANC) $(LIBPRT) $(BUILD)/tests/inv_compare $(CG_DATA)
	MPIRUN="$(MPIRUN_RDV)" tests/cp/ckpt.sh $(PLANC) $(abspath $(BUILD))/cp-ckpt $(BUILD)/tests/inv_compare
