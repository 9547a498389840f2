# tests/fuzz.mk: fuzzing the front end (libFuzzer) and replaying what it
# found (tests/fuzz/).
#
#   make fuzz [FUZZ_TIME=60]   build the three libFuzzer targets with clang
#                              (-fsanitize=fuzzer,address,undefined) and run
#                              each for FUZZ_TIME seconds; a crash, leak or an
#                              input slower than 1 s (fuzz_plan: 20 s) fails, its input is left
#                              in $(BUILD)/fuzz/artifacts/
#   make test-fuzz-regress     (part of `make test`, gcc only) replay the kept
#                              inputs tests/fuzz/regress/ and the seed corpus
#                              through the targets, and the kept inputs
#                              through `planc check` and `planc fmt`
#
# The targets: fuzz_check (scanner + parser + sema), fuzz_fmt (parse ->
# format -> parse gives an equal tree, and format is idempotent) and
# fuzz_plan (all of `planc check`: sema, then the planner's report, text
# and JSON, of every plan sema accepts).

FUZZ_CC    ?= clang
FUZZ_TIME  ?= 60
FUZZ_DIR   := $(BUILD)/fuzz
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_FLAGS := -g -O1 -std=gnu11 $(WARN) $(FUZZ_SAN) -fsanitize=fuzzer-no-link
# the front end, sema and the planner (planner/planner.mk's PLANNER_SRCS:
# fuzz_plan runs all of `planc check`)
FUZZ_SRCS  := dsl/arena.c dsl/diag.c dsl/ast.c dsl/parse.c dsl/format.c planner/sema.c \
              $(PLANNER_SRCS)
FUZZ_OBJS  := $(FUZZ_SRCS:%.c=$(FUZZ_DIR)/obj/%.o) \
              $(FUZZ_DIR)/obj/gen/parser.gen.o $(FUZZ_DIR)/obj/gen/lexer.gen.o
FUZZ_BINS  := $(FUZZ_DIR)/fuzz_check $(FUZZ_DIR)/fuzz_fmt $(FUZZ_DIR)/fuzz_plan

$(FUZZ_DIR)/obj/%.o: %.c | $(DSL_GEN)/parser.gen.h $(DSL_GEN)/lexer.gen.h
	@mkdir -p $(@D)
	$(FUZZ_CC) -I. -I$(BUILD)/gen $(FUZZ_FLAGS) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/gen/%.gen.o: $(DSL_GEN)/%.gen.c | $(DSL_GEN)/parser.gen.h $(DSL_GEN)/lexer.gen.h
	@mkdir -p $(@D)
	$(FUZZ_CC) -I. -I$(BUILD)/gen $(FUZZ_FLAGS) -Wno-unused-function -Wno-sign-compare \
	    -Wno-unused-but-set-variable -Wno-unreachable-code -c $< -o $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS)
	$(FUZZ_CC) -I. -I$(BUILD)/gen -g -O1 -std=gnu11 $(WARN) $(FUZZ_SAN) -fsanitize=fuzzer $^ -o $@ -lm

# The replay programs: the same targets with an ordinary main, built like
# every test (so SAN=1 sanitizes them too).
FUZZ_REPLAY := $(BUILD)/tests/fuzz_check_replay $(BUILD)/tests/fuzz_fmt_replay $(BUILD)/tests/fuzz_plan_replay

$(BUILD)/tests/fuzz_%_replay: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(DSL_OBJS) $(SEMA_OBJS) \
                              | $(DSL_GEN)/parser.gen.h $(DSL_GEN)/lexer.gen.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)
# fuzz_plan runs the planner too (SEMA_OBJS are among PLANNER_OBJS but sema.o)
$(BUILD)/tests/fuzz_plan_replay: tests/fuzz/fuzz_plan.c tests/fuzz/replay.c $(DSL_OBJS) \
                                 $(BUILD)/obj/planner/sema.o $(PLANNER_OBJS) \
                                 | $(DSL_GEN)/parser.gen.h $(DSL_GEN)/lexer.gen.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

# seeds: the examples (most include their cluster, which the targets do not
# follow), the published rows (whole files: fuzz_plan's way into the planner)
FUZZ_SEEDS := examples/*.plan examples/clusters/*.plan validation/*.plan validation/other/*.plan \
              tests/bad/*.plan tests/fuzz/regress

.PHONY: fuzz fuzz-build test-fuzz-regress
TEST_TARGETS += test-fuzz-regress

.SECONDARY: $(FUZZ_OBJS)

fuzz-build: $(FUZZ_BINS)

fuzz: $(FUZZ_BINS)
	tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_TIME) $(FUZZ_SEEDS)

test-fuzz-regress: $(FUZZ_REPLAY) $(PLANC)
	$(BUILD)/tests/fuzz_check_replay $(FUZZ_SEEDS)
	$(BUILD)/tests/fuzz_fmt_replay $(FUZZ_SEEDS)
	$(BUILD)/tests/fuzz_plan_replay $(FUZZ_SEEDS)
	tests/fuzz/regress.sh $(PLANC)

# ---- hostile input (tests/hostile/) ------------------------------------------------
# test-hostile: hostile names and strings through check and fmt, resource
# limits (timed; 2 s per input, 6 s under SAN=1), and hostile paths through
# emit, build and the generated program, plus its command line and data.
HOSTILE_LIMIT_S := $(if $(filter 1,$(SAN)),6,2)

.PHONY: test-hostile
TEST_TARGETS += test-hostile

test-hostile: $(PLANC) $(LIBPRT)
	tests/hostile/frontend.sh $(PLANC)
	LIMIT_S=$(HOSTILE_LIMIT_S) tests/hostile/limits.sh $(PLANC)
	MPIRUN="$(MPIRUN_RDV)" tests/hostile/codegen.sh $(PLANC)
