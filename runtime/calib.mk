# runtime/calib.mk: planrt-calib, the measuring program `planc calibrate`
# runs under mpirun (runtime/bench/calib.c), built from planrt's kernels
# and collectives.
PLANRT_CALIB := $(BUILD)/bin/planrt-calib
ALL_TARGETS  += $(PLANRT_CALIB)

$(PLANRT_CALIB): $(BUILD)/obj-rt/runtime/bench/calib.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)

# The same source against the CUDA half of planrt (cuBLAS bf16, NCCL), where
# nvcc exists: `planc calibrate` runs it when `planrt-calib-cuda --probe`
# finds a usable CUDA device (or with --target cuda). Without a GPU it only
# links and answers the probe.
ifneq ($(NVCC),)
PLANRT_CALIB_CUDA := $(BUILD)/bin/planrt-calib-cuda
ALL_TARGETS       += $(PLANRT_CALIB_CUDA)

$(PLANRT_CALIB_CUDA): $(BUILD)/obj-cuda/runtime/bench/calib.c.o $(LIBPRT_CUDA)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT_CUDA) $(CUDA_LIBS) -Wl,-rpath,$(CUDA_HOME)/lib64 -lstdc++ $(LDLIBS)
endif
