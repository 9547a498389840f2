# planner/sema.mk: AST -> checked Plan (units, presets, defaults, checks).
PLANC_SRCS += planner/sema.c

# test-dsl-sema: cmocka tests of sema (units, presets, defaults, repeat,
# the checks and their exit classes, the examples' shapes).
SEMA_TEST := $(BUILD)/tests/test_dsl_sema

$(SEMA_TEST): tests/test_dsl_sema.c $(DSL_OBJS) $(BUILD)/obj/planner/sema.o
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(DSL_OBJS) $(BUILD)/obj/planner/sema.o -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-dsl-sema
TEST_TARGETS += test-dsl-sema

test-dsl-sema: $(SEMA_TEST)
	$(SEMA_TEST)
