# planner/planner.mk: sema, model arithmetic, memory, cost, Program, simulation.
PLANNER_SRCS := planner/model.c planner/comm.c planner/layout.c planner/memory.c \
                planner/cost.c planner/lower.c planner/simulate.c planner/presets.c \
                planner/report.c
PLANNER_OBJS := $(PLANNER_SRCS:%.c=$(BUILD)/obj/%.o)
# (planner/sema.c, the front end's AST -> Plan, is added by planner/sema.mk)
PLANC_SRCS += $(PLANNER_SRCS)

TEST_TARGETS     += test-planner
BENCH_TARGETS    += bench-planner
VALIDATE_TARGETS += validate-planner

.PHONY: test-planner bench-planner validate-planner

$(BUILD)/bin/test_planner: tests/test_planner.c $(PLANNER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(CMOCKA_LIBS) $(LDLIBS)

$(BUILD)/bin/planc-validate: planner/validate.c $(PLANNER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

test-planner: $(BUILD)/bin/test_planner
	$(BUILD)/bin/test_planner

validate-planner: $(BUILD)/bin/planc-validate
	$(BUILD)/bin/planc-validate

bench-planner: $(BUILD)/bin/planc-validate
	$(BUILD)/bin/planc-validate --bench
