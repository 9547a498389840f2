# codegen/codegen.mk: the code generator (Plan -> one .cu program), its
# template, its tests (test-codegen, test-invariance) and bench-train.
#
# codegen/program_template.c is the fixed text of generated programs (layers,
# slots, op dispatcher, main), itself a C file that compiles; it is turned
# into a C string in $(BUILD)/gen.
PLANC_SRCS     += codegen/emit.c codegen/compile.c codegen/launch.c
PLANC_GEN_SRCS += $(BUILD)/gen/cg_program.gen.c

CG_MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
CG_MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null)
CG_DEFS       := -DCG_SOURCE_DIR='"$(CURDIR)"' -DCG_CUDA_HOME='"$(CUDA_HOME)"' \
                 -DCG_BLAS_LIBS='"$(strip $(BLAS_LIBS))"' -DCG_MPI_CFLAGS='"$(strip $(CG_MPI_CFLAGS))"' \
                 -DCG_MPI_LIBS='"$(strip $(CG_MPI_LIBS))"'
$(BUILD)/obj/codegen/compile.o $(BUILD)/obj/cli/cmd_emit.o: CPPFLAGS += $(CG_DEFS)

$(BUILD)/gen/cg_program.gen.c: codegen/program_template.c
	@mkdir -p $(@D)
	{ echo '/* generated from codegen/program_template.c by codegen/codegen.mk */'; \
	  echo 'const char cg_program_template[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	  echo ';'; } > $@

# ---- data the demo, the tests and the benchmark train on (made here) -----
CG_DATA := examples/data/sample.txt
$(CG_DATA): scripts/make-data.sh
	@scripts/make-data.sh $@

# ---- tests -----------------------------------------------------------------
# test-codegen: determinism, the golden program, step functions == Program
# (loops expanded), one code path, the template compiles alone, train
# defaults, escaping, refusals, -Werror compiles (cmocka). test-invariance: the layout matrix of
# tests/invariance/cases.txt against the single-rank run.
# (PLANC_OBJS is complete only when recipes run, so the link names them there.)
$(BUILD)/tests/test_codegen: $(BUILD)/obj/tests/test_codegen.o $(PLANC)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(filter-out $(BUILD)/obj/cli/planc.o,$(PLANC_OBJS)) -o $@ \
	    $(CMOCKA_LIBS) $(LDLIBS)

$(BUILD)/tests/inv_compare: tests/invariance/compare.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $< -o $@ -lm

.PHONY: test-codegen test-invariance test-codegen-cuda bench-train update-codegen-golden
TEST_TARGETS += test-codegen test-invariance
CG_GOLDEN := tests/codegen/tiny.golden.cu
test-codegen: $(BUILD)/tests/test_codegen $(LIBPRT)
	$(BUILD)/tests/test_codegen examples/tiny.plan $(BUILD)/lib $(CG_GOLDEN)

# The golden program: `planc emit examples/tiny.plan`, which test-codegen
# compares byte for byte. After a change of the generator (or of what it
# predicts), rewrite it and review the diff.
update-codegen-golden: $(PLANC)
	@mkdir -p $(dir $(CG_GOLDEN))
	$(PLANC) emit examples/tiny.plan -o $(CG_GOLDEN)
	@git diff --stat -- $(CG_GOLDEN) 2>/dev/null || true

test-invariance: $(PLANC) $(LIBPRT) $(BUILD)/tests/inv_compare $(CG_DATA)
	MPIRUN="$(MPIRUN_RDV)" tests/invariance/run.sh $(PLANC) $(abspath $(BUILD))/invariance \
	    $(BUILD)/tests/inv_compare $(CASES)

# The CUDA program of tiny.plan compiles and links, without OpenBLAS (its
# GEMMs are cuBLAS's: ldd must not list libopenblas); started here on its 8
# ranks without a GPU, every rank must stop at start with a message, not crash.
ifneq ($(NVCC),)
TEST_TARGETS += test-codegen-cuda
test-codegen-cuda: $(PLANC) $(LIBPRT_CUDA) $(CG_DATA)
	@mkdir -p $(BUILD)/codegen
	$(PLANC) build examples/tiny.plan -o $(BUILD)/codegen/tiny_cuda --target cuda
	@if ldd $(BUILD)/codegen/tiny_cuda | grep -i openblas; then \
	     echo "test-codegen-cuda: the CUDA program links OpenBLAS, which it does not use" >&2; exit 1; fi; \
	 readelf -d $(BUILD)/codegen/tiny_cuda | grep -qi 'NEEDED.*libcublas' || \
	     { echo "test-codegen-cuda: the CUDA program does not link cuBLAS" >&2; exit 1; }; \
	 echo "test-codegen-cuda: linked without OpenBLAS (ldd: $$(ldd $(BUILD)/codegen/tiny_cuda | grep -c '=>') libraries, none libopenblas)"
	@$(MPIRUN) -np 8 $(BUILD)/codegen/tiny_cuda --steps 1 > $(BUILD)/codegen/tiny_cuda.log 2>&1; rc=$$?; \
	 grep -m 2 error $(BUILD)/codegen/tiny_cuda.log; \
	 if [ $$rc = 0 ]; then echo "test-codegen-cuda: compiled, linked and trained one step (GPUs present)"; \
	 elif [ $$rc -lt 128 ] && grep -q 'error: rank' $(BUILD)/codegen/tiny_cuda.log && \
	      ! grep -qi 'segmentation\|signal\|core dumped' $(BUILD)/codegen/tiny_cuda.log; then \
	     echo "test-codegen-cuda: compiled and linked; without a GPU every rank stops at start with a message (status $$rc)"; \
	 else cat $(BUILD)/codegen/tiny_cuda.log; echo "test-codegen-cuda: the CUDA program crashed (status $$rc)" >&2; exit 1; fi
	@# context parallelism (issue 26): a dp 2 x cp 2 program compiles for CUDA and lays out (--dry-run)
	tests/invariance/make-plan.sh $(BUILD)/codegen/cp2_cuda.plan 4 "dp 2; cp 2; zero 1; micro_batch 2; schedule 1f1b;"
	$(PLANC) build $(BUILD)/codegen/cp2_cuda.plan -o $(BUILD)/codegen/cp2_cuda --target cuda
	@$(MPIRUN) -np 4 $(BUILD)/codegen/cp2_cuda --dry-run > $(BUILD)/codegen/cp2_cuda.log 2>&1 && \
	 [ "$$(grep -c '"peak_bytes"' $(BUILD)/codegen/cp2_cuda.log)" = 4 ] && \
	 echo "test-codegen-cuda: the dp 2 x cp 2 program compiled, linked and laid out on 4 ranks (--dry-run)" || \
	 { cat $(BUILD)/codegen/cp2_cuda.log; echo "test-codegen-cuda: the cp 2 CUDA program failed" >&2; exit 1; }
endif

# ---- benchmark: DP scaling of a generated program, predicted vs measured ---
BENCH_TARGETS += bench-train
bench-train: $(PLANC) $(LIBPRT) $(CG_DATA)
	MPIRUN="$(MPIRUN)" scripts/bench-train.sh $(PLANC) $(abspath $(BUILD))/bench-train
