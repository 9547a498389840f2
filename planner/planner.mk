# planner/planner.mk: sema, model arithmetic, memory, cost, Program, simulation.
PLANC_SRCS += planner/report.c
