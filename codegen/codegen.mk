# codegen/codegen.mk: the code generator (Plan -> one .cu program), its
# template, its tests (test-codegen, test-invariance) and bench-train.
#
# codegen/program.in is the fixed text of generated programs (layers, slots,
# op dispatcher, main); it is turned into a C string in $(BUILD)/gen.
PLANC_SRCS     += codegen/emit.c codegen/compile.c
PLANC_GEN_SRCS += $(BUILD)/gen/cg_program.gen.c

CG_MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
CG_MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null)
CG_DEFS       := -DCG_SOURCE_DIR='"$(CURDIR)"' -DCG_CUDA_HOME='"$(CUDA_HOME)"' \
                 -DCG_BLAS_LIBS='"$(strip $(BLAS_LIBS))"' -DCG_MPI_CFLAGS='"$(strip $(CG_MPI_CFLAGS))"' \
                 -DCG_MPI_LIBS='"$(strip $(CG_MPI_LIBS))"'
$(BUILD)/obj/codegen/compile.o $(BUILD)/obj/cli/cmd_emit.o: CPPFLAGS += $(CG_DEFS)

$(BUILD)/gen/cg_program.gen.c: codegen/program.in
	@mkdir -p $(@D)
	{ echo '/* generated from codegen/program.in by codegen/codegen.mk */'; \
	  echo 'const char cg_program_template[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	  echo ';'; } > $@
