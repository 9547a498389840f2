# planner/sema.mk: AST -> checked Plan (units, presets, defaults, checks).
PLANC_SRCS += planner/sema.c

# test-dsl-sema: cmocka tests of sema (units, presets, defaults, repeat,
# the checks and their exit classes, the examples' shapes).
SEMA_TEST := $(BUILD)/tests/test_dsl_sema

# sema asks planner/layout.c's rules (which read model.c's head dim) and
# planner/presets.c's device table and planner/fp8.c's FP8 rule; the tests count models with model.c
SEMA_OBJS := $(BUILD)/obj/planner/sema.o $(BUILD)/obj/planner/layout.o $(BUILD)/obj/planner/presets.o \
             $(BUILD)/obj/planner/stacks.o $(BUILD)/obj/planner/fp8.o \
             $(BUILD)/obj/planner/model.o

$(SEMA_TEST): tests/test_dsl_sema.c $(DSL_OBJS) $(SEMA_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(DSL_OBJS) $(SEMA_OBJS) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-dsl-sema
TEST_TARGETS += test-dsl-sema

test-dsl-sema: $(SEMA_TEST)
	$(SEMA_TEST)
