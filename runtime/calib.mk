# runtime/calib.mk: planrt-calib, the measuring program `planc calibrate`
# runs under mpirun (runtime/bench/calib.c), built from planrt's kernels
# and collectives.
PLANRT_CALIB := $(BUILD)/bin/planrt-calib
ALL_TARGETS  += $(PLANRT_CALIB)

$(PLANRT_CALIB): $(BUILD)/obj-rt/runtime/bench/calib.o $(LIBPRT)
	@mkdir -p $(@D)
	$(MPICC) $(LDFLAGS) $< -o $@ $(LIBPRT) $(BLAS_LIBS) $(LDLIBS)
