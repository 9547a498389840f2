# scripts/install.mk: `make install` (PREFIX, DESTDIR as GNU's conventions
# name them): the user programs, the runtime's library and headers, its
# pkg-config file and planc(1). Laid out so the installed planc finds the
# installed runtime itself (`planc build`: BIN/../include, BIN/../lib).
#
#   make install                          into /usr/local
#   make install PREFIX=$HOME/.local      anywhere
#   make install DESTDIR=stage            staged (packaging): stage/usr/local/...

PREFIX      ?= /usr/local
DESTDIR     ?=
INSTALL_BIN := $(DESTDIR)$(PREFIX)/bin
INSTALL_LIB := $(DESTDIR)$(PREFIX)/lib
INSTALL_INC := $(DESTDIR)$(PREFIX)/include
INSTALL_PC  := $(DESTDIR)$(PREFIX)/lib/pkgconfig
INSTALL_MAN := $(DESTDIR)$(PREFIX)/share/man/man1

PLANC_MAN   := $(BUILD)/man/planc.1
PLANRT_PC   := $(BUILD)/pkgconfig/planrt.pc
PLANRT_CUDA_PC := $(BUILD)/pkgconfig/planrt-cuda.pc
PLANRT_VERSION := $(shell sed -n 's/^\#define PLANC_VERSION "\(.*\)"/\1/p' cli/planc.c)

# the programs a user runs: planc, the checkpoint tool, the collective
# benchmark, the calibration kernels planc calibrate starts (beside planc);
# their CUDA builds where nvcc built them
INSTALL_PROGS = $(PLANC) $(BUILD)/bin/planrt-ckpt $(BUILD)/bin/planrt-bench $(BUILD)/bin/planrt-calib \
                $(if $(NVCC),$(BUILD)/bin/planrt-bench-cuda $(BUILD)/bin/planrt-calib-cuda)
INSTALL_LIBS  = $(LIBPRT) $(if $(NVCC),$(LIBPRT_CUDA))
INSTALL_PCS   = $(PLANRT_PC) $(if $(NVCC),$(PLANRT_CUDA_PC))

.PHONY: install man

man: $(PLANC_MAN)

$(PLANC_MAN): $(PLANC) scripts/man.sh
	@mkdir -p $(@D)
	scripts/man.sh $(PLANC) > $@.tmp && mv $@.tmp $@

# prefix= is the installed prefix (not DESTDIR): pkg-config on the target
# machine resolves it. A program is compiled with mpicc (MPI's flags are
# its own); the archive needs OpenBLAS and libm after it.
$(PLANRT_PC): scripts/install.mk cli/planc.c
	@mkdir -p $(@D)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	    'Name: planrt' \
	    'Description: planc runtime (CPU: Open MPI + OpenBLAS); compile with mpicc' \
	    'Version: $(PLANRT_VERSION)' \
	    'Cflags: -I$${includedir}' \
	    'Libs: -L$${libdir} -lplanrt $(strip $(BLAS_LIBS)) -lm' > $@

$(PLANRT_CUDA_PC): scripts/install.mk cli/planc.c
	@mkdir -p $(@D)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	    'Name: planrt-cuda' \
	    'Description: planc runtime (CUDA: NCCL + cuBLAS, bf16); compile with nvcc and mpicc' \
	    'Version: $(PLANRT_VERSION)' \
	    'Cflags: -I$${includedir} -DPRT_CUDA -I$(CUDA_HOME)/include' \
	    'Libs: -L$${libdir} -lplanrt_cuda -L$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart -lm' > $@

# the .pc files depend on PREFIX: rewritten on every install
install: all $(PLANC_MAN)
	@rm -f $(PLANRT_PC) $(PLANRT_CUDA_PC) && $(MAKE) --no-print-directory $(INSTALL_PCS)
	install -d $(INSTALL_BIN) $(INSTALL_LIB) $(INSTALL_INC) $(INSTALL_PC) $(INSTALL_MAN)
	install -m 755 $(INSTALL_PROGS) $(INSTALL_BIN)/
	install -m 644 $(INSTALL_LIBS) $(INSTALL_LIB)/
	install -m 644 runtime/include/*.h $(INSTALL_INC)/
	install -m 644 $(INSTALL_PCS) $(INSTALL_PC)/
	install -m 644 $(PLANC_MAN) $(INSTALL_MAN)/
	@echo "installed planc, planrt and planc(1) under $(DESTDIR)$(PREFIX)"
