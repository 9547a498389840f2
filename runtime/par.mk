# runtime/par.mk: parallel execution in libplanrt (ZeRO on the flat
# buffers, pipeline slots and transfers, the executable's command line, data
# and log). The same C sources build into both libraries.
PRT_PAR_SRCS  := runtime/par/model.c runtime/par/pipe.c runtime/par/run.c runtime/par/save.c
PRT_SRCS      += $(PRT_PAR_SRCS)
PRT_CUDA_SRCS += $(PRT_PAR_SRCS)
