# planc: top-level Makefile.
#
# Each module adds its sources, tests and benchmarks in its own fragment
# (dsl/dsl.mk, planner/planner.mk, codegen/codegen.mk, runtime/*.mk,
# cli/cli.mk), included below, so the modules can grow without touching this
# file. Fragments append to these variables:
#
#   PLANC_SRCS      C sources linked into build/bin/planc (dsl, planner, codegen, cli)
#   PLANC_GEN_SRCS  generated C sources (Flex/Bison output under build/gen/)
#   PRT_SRCS        C sources of build/lib/libplanrt.a (CPU: Open MPI + OpenBLAS)
#   PRT_CUDA_SRCS   .cu/.c sources of build/lib/libplanrt_cuda.a (NCCL + cuBLAS)
#   TEST_TARGETS    phony targets that `make test` runs, in order
#   BENCH_TARGETS   phony targets that `make bench` runs
#   VALIDATE_TARGETS phony targets that `make validate` runs
#
# Everything generated goes under build/. Nothing needs a GPU; the CUDA
# library is built where nvcc exists.

.DEFAULT_GOAL := all
SHELL        := /bin/bash

BUILD        ?= build
CC           := gcc
MPICC        := mpicc
NVCC         ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME    ?= $(patsubst %/bin/nvcc,%,$(NVCC))
HAVE_GPU     := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)

# SAN=1 builds everything with AddressSanitizer and UBSan, in its own tree
# ($(BUILD)/san: build/san, or build/x/san with BUILD=build/x): planc, the
# runtime, the tests, and the programs the tests generate (mpicc takes the
# flags from OMPI_CFLAGS/OMPI_LDFLAGS, which planc build inherits). nvcc's
# host code takes no sanitizer, so the CUDA library is skipped. Leak reports
# for Open MPI's own allocations are suppressed (tests/san/lsan.supp; the
# slow unwinder, fast_unwind_on_malloc=0, reaches the libmpi frames above
# the plugins Open MPI unloads before the leak check); any report is fatal.
SAN          ?= 0
ifeq ($(SAN),1)
override BUILD := $(BUILD)/san
override NVCC  :=
SANFLAGS     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_MPI_LDIR := $(filter-out -l%,$(shell mpicc --showme:link 2>/dev/null))
export OMPI_CFLAGS   := $(SANFLAGS)
export OMPI_LDFLAGS  := $(SAN_MPI_LDIR) $(SANFLAGS)
export ASAN_OPTIONS  := detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:check_initialization_order=1
export LSAN_OPTIONS  := suppressions=$(CURDIR)/tests/san/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
endif

WARN         := -Wall -Wextra -Werror
CFLAGS       ?= -O2 -g
CFLAGS       += -std=gnu11 $(WARN) $(SANFLAGS) -MMD -MP
CPPFLAGS     += -I. -I$(BUILD)/gen -Iruntime/include
LDFLAGS      += $(SANFLAGS)
LDLIBS       += -lm

BLAS_CFLAGS  := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS    := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
CMOCKA_LIBS  := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)
# Jansson (libjansson-dev): planc import reads Hugging Face config.json with
# it. On LDLIBS, as the tests that link planc's objects need it too; the
# runtime (an archive) and the programs planc builds do not use it.
JSON_CFLAGS  := $(shell pkg-config --cflags jansson 2>/dev/null)
JSON_LIBS    := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
LDLIBS       += $(JSON_LIBS)

# sm_80 and sm_90 machine code, and compute_90 PTX that the driver compiles
# for a newer part at load (Blackwell: mxfp8's GEMMs run there alone)
NVCC_ARCH    := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
NVCCFLAGS    ?= -O2 -g -MMD -MP $(NVCC_ARCH) -Xcompiler -Wall,-Wextra,-Werror -Iruntime/include \
                $(shell $(MPICC) --showme:compile 2>/dev/null)
CUDA_LIBS    := -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart

# Open MPI refuses root and more ranks than cores unless told; tests and
# demos run as root on a 2-core machine. One BLAS thread per rank.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OPENBLAS_NUM_THREADS := 1
MPIRUN       := mpirun --oversubscribe --bind-to none
# The tests' multi-rank programs run under NCCL's point-to-point rules
# (PLANRT_P2P=rendezvous: sends end only when matched, no tags, a rank's
# operations in issue order; runtime/comm/stream_mpi.c), so a pipeline
# order that would hang on NCCL fails here, with each rank's pending
# operations printed; test-invariance-buffered runs the matrix again under
# MPI's own rules, planc's default on the CPU.
MPIRUN_RDV   := env PLANRT_P2P=rendezvous $(MPIRUN) -x PLANRT_P2P

PLANC        := $(BUILD)/bin/planc
LIBPRT       := $(BUILD)/lib/libplanrt.a
LIBPRT_CUDA  := $(BUILD)/lib/libplanrt_cuda.a

PLANC_SRCS       :=
PLANC_GEN_SRCS   :=
PRT_SRCS         :=
PRT_CUDA_SRCS    :=
TEST_TARGETS     :=
BENCH_TARGETS    :=
VALIDATE_TARGETS :=
ALL_TARGETS      := $(PLANC) $(LIBPRT)
ifneq ($(NVCC),)
ALL_TARGETS      += $(LIBPRT_CUDA)
endif

include $(sort $(wildcard */*.mk))

# ---- object files -------------------------------------------------------
# planc's objects (gcc, no MPI), the CPU runtime's (mpicc + OpenBLAS) and the
# CUDA runtime's (nvcc for .cu, mpicc for .c with PRT_CUDA defined) live in
# separate trees so one source can be built for several targets.
PLANC_OBJS    := $(PLANC_SRCS:%.c=$(BUILD)/obj/%.o) $(PLANC_GEN_SRCS:%.c=%.o)
PRT_OBJS      := $(PRT_SRCS:%.c=$(BUILD)/obj-rt/%.o)
PRT_CUDA_OBJS := $(patsubst %.cu,$(BUILD)/obj-cuda/%.o,$(PRT_CUDA_SRCS:%.c=$(BUILD)/obj-cuda/%.c.o))

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-unused-function -Wno-sign-compare -c $< -o $@

$(BUILD)/obj-rt/%.o: %.c
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) $(BLAS_CFLAGS) -c $< -o $@

$(BUILD)/obj-cuda/%.c.o: %.c
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -DPRT_CUDA -I$(CUDA_HOME)/include -c $< -o $@

$(BUILD)/obj-cuda/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -DPRT_CUDA -c $< -o $@

# ---- products -----------------------------------------------------------
.PHONY: all deps config test bench validate demo clean

all: config $(ALL_TARGETS)

$(PLANC): $(PLANC_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(LIBPRT): $(PRT_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBPRT_CUDA): $(PRT_CUDA_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Say what was found, as the build of a tool people run should.
config:
	@if [ -n "$(NVCC)" ]; then echo "✓ nvcc $$($(NVCC) --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'): CUDA target is built"; \
	 else echo "✗ no nvcc: CUDA target skipped"; fi
	@if [ "$(HAVE_GPU)" = 1 ]; then echo "✓ GPU: $$(nvidia-smi -L | head -1)"; \
	 else echo "✗ no GPU: CUDA target compiles only"; fi
	@command -v $(MPICC) >/dev/null || { echo "✗ mpicc missing: run scripts/deps.sh" >&2; exit 1; }
	@pkg-config --exists jansson || { echo "✗ jansson missing (libjansson-dev): run scripts/deps.sh" >&2; exit 1; }

deps:
	@./scripts/deps.sh

# `make test` installs what is missing, builds, then runs every module's tests.
test: deps
	@$(MAKE) --no-print-directory all
	@set -e; for t in $(TEST_TARGETS); do \
	    echo "==== $$t"; $(MAKE) --no-print-directory $$t; done
	@echo "==== all tests passed"

bench: deps
	@$(MAKE) --no-print-directory all
	@set -e; for t in $(BENCH_TARGETS); do \
	    echo "==== $$t"; $(MAKE) --no-print-directory $$t; done

validate: deps
	@$(MAKE) --no-print-directory all
	@set -e; for t in $(VALIDATE_TARGETS); do $(MAKE) --no-print-directory $$t; done

demo: deps
	@$(MAKE) --no-print-directory all
	@./scripts/demo.sh

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
