# runtime/runtime.mk: the parts of libplanrt that both halves share.
# runtime/comm.mk (collectives) and runtime/ops.mk (compute) add the rest.
PRT_SRCS      += runtime/core.c
PRT_CUDA_SRCS += runtime/core.c
