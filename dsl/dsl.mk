# dsl/dsl.mk: the front end (scanner, parser, AST, diagnostics, formatter).
# Flex and Bison write their output under $(BUILD)/gen/dsl/ only.

DSL_GEN := $(BUILD)/gen/dsl

PLANC_SRCS     += dsl/arena.c dsl/diag.c dsl/ast.c dsl/parse.c dsl/format.c
PLANC_GEN_SRCS += $(DSL_GEN)/parser.gen.c $(DSL_GEN)/lexer.gen.c

$(DSL_GEN)/parser.gen.c $(DSL_GEN)/parser.gen.h &: dsl/parser.y
	@mkdir -p $(@D)
	bison -Wall -Werror -o $(DSL_GEN)/parser.gen.c --header=$(DSL_GEN)/parser.gen.h $<

$(DSL_GEN)/lexer.gen.c $(DSL_GEN)/lexer.gen.h &: dsl/lexer.l
	@mkdir -p $(@D)
	flex -o $(DSL_GEN)/lexer.gen.c --header-file=$(DSL_GEN)/lexer.gen.h $<

# Everything that includes the generated headers waits for them.
$(DSL_GEN)/lexer.gen.o: $(DSL_GEN)/parser.gen.h
$(DSL_GEN)/parser.gen.o: $(DSL_GEN)/lexer.gen.h
$(BUILD)/obj/dsl/parse.o: $(DSL_GEN)/parser.gen.h $(DSL_GEN)/lexer.gen.h

# The front end's objects, for tests that link it without the driver.
DSL_OBJS := $(addprefix $(BUILD)/obj/dsl/,arena.o diag.o ast.o parse.o format.o) \
            $(DSL_GEN)/parser.gen.o $(DSL_GEN)/lexer.gen.o

# ---- tests ----------------------------------------------------------------
# test-dsl: cmocka unit tests of the scanner, parser and formatter, the
# malformed-input corpus tests/bad/ (exact first diagnostic and exit code),
# and the driver's front-end behaviour (help, usage, exit codes, examples).
# update-bad rewrites tests/bad/*.err from planc's output; review the diff.
DSL_TEST := $(BUILD)/tests/test_dsl

$(DSL_TEST): tests/test_dsl.c $(DSL_OBJS) | $(DSL_GEN)/parser.gen.h $(DSL_GEN)/lexer.gen.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(DSL_OBJS) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-dsl update-bad
TEST_TARGETS += test-dsl

test-dsl: $(DSL_TEST) $(PLANC)
	$(DSL_TEST)
	tests/run_bad.sh $(PLANC)
	tests/test_dsl_cli.sh $(PLANC)

update-bad: $(PLANC)
	tests/run_bad.sh $(PLANC) --update
