# tests/gpu.mk: the GPU checks of tests/gpu/ — `make gpu-bundle` and
# test-gpu-dry.
#
# A GPU machine is lent now and then for minutes, maybe without Open MPI,
# OpenBLAS, Jansson, flex or bison. So everything its checks run is built
# here, into one ignored folder, $(GPU_BUNDLE) (build/gpu-bundle), that the
# machine gets beside the working tree: planc, the CUDA test programs
# (test_ops_cuda with OpenBLAS linked statically and gzipped, test_comm_cuda, test_cp_cuda, test_fp8_cuda,
# planrt-bench-cuda, planrt-calib-cuda), the CUDA programs of the train, mem
# and calib checks (`planc build --target cuda`), the CPU losses the train
# check compares with (computed here), the data, the shared libraries a bare
# machine may lack (lib/: Jansson, cudart, libgfortran; mpi/: Open MPI's
# libraries and the plugins of a single rank) and the mpirun of
# tests/gpu/mpirun.sh. Every program finds lib/ through its rpath
# ($ORIGIN/../lib); cuBLAS and NCCL (hundreds of MiB) are the machine's.
# tests/gpu/bundle.sh does the work and prints the bundle's size.
# There: `tests/gpu/run.sh --out $OUT` (docs/gpu.md).
GPU_BUNDLE := $(BUILD)/gpu-bundle
GB_LINK    := $(BUILD)/gpu-link
GB_RPATH   := -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,$(CUDA_HOME)/lib64
BLAS_STATIC := $(shell pkg-config --variable=libdir openblas 2>/dev/null)/libopenblas.a

.PHONY: gpu-bundle test-gpu-dry

TEST_TARGETS += test-gpu-dry
ifneq ($(NVCC),)
# The bundle's own links of the programs: those of the module fragments with
# the bundle's rpath (PLANC_OBJS is complete only when recipes run).
$(GB_LINK)/planc: $(PLANC)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(PLANC_OBJS) -o $@ $(LDLIBS) $(GB_RPATH)

$(GB_LINK)/planrt-calib-cuda: $(BUILD)/obj-cuda/runtime/bench/calib.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) $(GB_RPATH) -lstdc++ $(LDLIBS)

$(GB_LINK)/planrt-bench-cuda: $(BUILD)/obj-cuda/runtime/comm/planrt_bench.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) $(GB_RPATH) -lstdc++ $(LDLIBS)

$(GB_LINK)/test_comm_cuda: $(BUILD)/obj-cuda/tests/test_comm.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) $(GB_RPATH) -lstdc++ $(LDLIBS)

# OpenBLAS (the CPU reference's cblas_sgemm) linked in: its shared library is
# 36 MiB, this program gzipped about 7.
$(GB_LINK)/test_ops_cuda: $(BUILD)/obj-cuda/tests/test_ops_cuda.c.o $(BUILD)/obj-cuda/tests/test_ops_gpt.c.o \
                          $(LIBPRT_CUDA) $(OPS_REF_LIB)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(LIBPRT_CUDA) $(OPS_REF_LIB) $(BLAS_STATIC) -lgfortran \
	    $(CUDA_LIBS) $(GB_RPATH) -lstdc++ $(LDLIBS)

$(GB_LINK)/test_cp_cuda: $(BUILD)/obj-cuda/tests/test_cp_cuda.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) $(GB_RPATH) -lstdc++ $(LDLIBS)

# the FP8 casts and GEMM against the CPU build's (check-fp8), OpenBLAS linked
# in as test_ops_cuda's (the CPU reference's prt_fp8_gemm)
$(GB_LINK)/test_fp8_cuda: $(BUILD)/obj-cuda/tests/test_fp8_cuda.c.o $(LIBPRT_CUDA) $(OPS_REF_LIB)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(OPS_REF_LIB) $(BLAS_STATIC) -lgfortran \
	    $(CUDA_LIBS) $(GB_RPATH) -lstdc++ $(LDLIBS)

GB_PROGS := $(addprefix $(GB_LINK)/,planc planrt-calib-cuda planrt-bench-cuda test_comm_cuda test_ops_cuda \
                                     test_cp_cuda test_fp8_cuda)

gpu-bundle: $(GB_PROGS) $(PLANC) $(LIBPRT) $(LIBPRT_CUDA) $(CG_DATA)
	@GPU_BUNDLE=$(GPU_BUNDLE) MPIRUN="$(MPIRUN)" NVCC_BIN=$(NVCC) tests/gpu/bundle.sh $(GB_LINK) $(PLANC) $(BUILD)/gpu-bundle-work

# test-gpu-dry: the plan of a GPU run (tests/gpu/run.sh --dry) keeps the
# 480 s deadline, and every file it lists is in a freshly built bundle.
test-gpu-dry: gpu-bundle
	@tests/gpu/run.sh --dry --bundle $(GPU_BUNDLE) > $(BUILD)/gpu-dry.txt || \
	    { cat $(BUILD)/gpu-dry.txt; echo "test-gpu-dry: run.sh --dry failed" >&2; exit 1; }
	@cat $(BUILD)/gpu-dry.txt
	@n=$$(sed -n 's/^total deadline \([0-9]*\) s$$/\1/p' $(BUILD)/gpu-dry.txt); \
	 if [ -z "$$n" ] || [ "$$n" -gt 480 ]; then \
	     echo "test-gpu-dry: want a last line 'total deadline N s' with N <= 480, got '$$n'" >&2; exit 1; fi; \
	 if grep -q MISSING $(BUILD)/gpu-dry.txt; then echo "test-gpu-dry: files missing from the bundle" >&2; exit 1; fi; \
	 echo "test-gpu-dry: the run's plan fits $$n s <= 480 s; every file it reads is in $(GPU_BUNDLE)"
else
gpu-bundle:
	@echo "gpu-bundle: needs nvcc (the CUDA programs are built here)" >&2; exit 1

test-gpu-dry:
	@tests/gpu/run.sh --dry --bundle $(GPU_BUNDLE) > $(BUILD)/gpu-dry.txt; rc=$$?; cat $(BUILD)/gpu-dry.txt; \
	 n=$$(sed -n 's/^total deadline \([0-9]*\) s$$/\1/p' $(BUILD)/gpu-dry.txt); \
	 if [ $$rc != 0 ] || [ -z "$$n" ] || [ "$$n" -gt 480 ]; then echo "test-gpu-dry: failed" >&2; exit 1; fi; \
	 echo "test-gpu-dry: the run's plan fits $$n s <= 480 s (no nvcc: the bundle's files not checked)"
endif
