# planner/planner.mk: model arithmetic, memory, cost table, schedules, Program,
# simulation, evaluation (the call graph: planner/evaluate.c).
PLANNER_SRCS := planner/model.c planner/comm.c planner/layout.c planner/memory.c \
                planner/cost.c planner/schedule.c planner/lower.c planner/p2p_order.c planner/simulate.c \
                planner/evaluate.c planner/presets.c planner/report.c planner/stacks.c planner/fp8.c planner/fp8_cost.c
PLANNER_OBJS := $(PLANNER_SRCS:%.c=$(BUILD)/obj/%.o)
# (planner/sema.c, the front end's AST -> Plan, is added by planner/sema.mk)
PLANC_SRCS += $(PLANNER_SRCS)

TEST_TARGETS     += test-planner test-commmodel test-published test-validate-rows test-fp8-planner
BENCH_TARGETS    += bench-planner
VALIDATE_TARGETS += validate-planner

.PHONY: test-planner test-commmodel test-published test-validate-rows bench-planner validate-planner \
        test-fp8-planner

# the collective model against NCCL's tuner and nccl-tests, the pod tier
# (its search case needs the search)
$(BUILD)/bin/test_commmodel: tests/test_commmodel.c $(PLANNER_OBJS) $(BUILD)/obj/planner/search.o
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

test-commmodel: $(BUILD)/bin/test_commmodel
	$(BUILD)/bin/test_commmodel

$(BUILD)/bin/test_planner: tests/test_planner.c $(PLANNER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

# FP8 training in the planner (issue 27): the unit tests, then `planc
# check` of an fp8 plan and `planc emit` writing its program, the FP8 linears
# (attention and MLP, not the LM head) marked as the planner says
$(BUILD)/bin/test_fp8_planner: tests/test_fp8_planner.c $(PLANNER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

test-fp8-planner: $(BUILD)/bin/test_fp8_planner $(PLANC)
	$(BUILD)/bin/test_fp8_planner
	@$(PLANC) check tests/fp8/tiny-fp8.plan > $(BUILD)/fp8-check.txt
	@grep -q '^fp8: tensorwise' $(BUILD)/fp8-check.txt && grep -q 'FP8 casts' $(BUILD)/fp8-check.txt || \
	    { echo "FAIL: planc check prints no fp8 line or cast time"; exit 1; }
	@$(PLANC) emit tests/fp8/tiny-fp8.plan -o $(BUILD)/fp8.cu 2> $(BUILD)/fp8-emit.err && \
	    grep -q 'static const bool FP8_LINEAR\[N_LAYERS\] = { false, true, true, true, true, false, false };' $(BUILD)/fp8.cu || \
	    { cat $(BUILD)/fp8-emit.err; echo "FAIL: planc emit wrote no FP8 program (FP8_LINEAR: the planner's linears)"; exit 1; }
	@echo "planc check prints the fp8 plan; planc emit writes its FP8 program"

# the validation rows are .plan files: the front end (dsl, sema) reads them,
# and search fills the fields a source does not state
$(BUILD)/bin/planc-validate: planner/validate.c $(PLANNER_OBJS) $(DSL_OBJS) $(BUILD)/obj/planner/sema.o \
                             $(BUILD)/obj/planner/search.o $(BUILD)/obj/planner/published.o
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

# the `# published:` line of a validation row: both forms, and the
# diagnostics of a missing, second or malformed one
$(BUILD)/bin/test_published: tests/test_published.c $(BUILD)/obj/planner/published.o $(DSL_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

test-published: $(BUILD)/bin/test_published
	$(BUILD)/bin/test_published

# the unit tests, then `planc check --json` on every example and validation
# row must print one JSON object that python's json.tool accepts, with exit
# status 0 or 1 (a row's `auto` fields take check's defaults, which may not fit)
test-planner: $(BUILD)/bin/test_planner $(PLANC)
	$(BUILD)/bin/test_planner
	@set -e; n=0; for f in examples/*.plan validation/*.plan validation/other/*.plan; do \
	    rc=0; $(PLANC) check --json $$f > $(BUILD)/check.json 2>/dev/null || rc=$$?; \
	    if [ $$rc -gt 1 ]; then echo "FAIL: planc check $$f exited $$rc"; exit 1; fi; \
	    python3 -m json.tool $(BUILD)/check.json > /dev/null || { echo "FAIL: $$f: bad JSON"; exit 1; }; \
	    n=$$((n+1)); done; echo "planc check --json: $$n examples and rows give valid JSON"
	@# the 1T row of Narayanan et al. 2021 under the interleaved schedule fits in 80 GB, as
	@# Megatron trained it (the pipeline frees an output once sent: memory.c's buffers)
	@sed 's/schedule 1f1b/schedule interleaved; chunks 2/' validation/narayanan2021-gpt-1008b.plan \
	    > $(BUILD)/gpt-1008b-interleaved.plan
	@$(PLANC) check $(BUILD)/gpt-1008b-interleaved.plan > $(BUILD)/gpt-1008b-interleaved.txt || \
	    { echo "FAIL: the 1T row (validation/narayanan2021-gpt-1008b.plan) interleaved does not fit"; exit 1; }
	@echo "planc check: the 1T row interleaved (chunks 2) fits in 80 GB"

validate-planner: $(BUILD)/bin/planc-validate
	$(BUILD)/bin/planc-validate validation/*.plan --other validation/other/*.plan

# every validation row loads, states its figure and runs on a preset's
# cited figures (no kernel rate, link efficiency or measured collective
# written in a row: planc-validate refuses one, exit 1), and a row that
# sets one is refused, naming it
test-validate-rows: $(BUILD)/bin/planc-validate
	$(BUILD)/bin/planc-validate validation/*.plan --other validation/other/*.plan > $(BUILD)/validate-rows.txt
	@for f in tests/validate/fitted-*.plan; do \
	    if $(BUILD)/bin/planc-validate $$f > /dev/null 2> $(BUILD)/validate-fitted.err; then \
	        echo "$$f: a fitted row was accepted"; exit 1; fi; \
	    grep -q "error: .*\(overrides a kernel figure\|sets an efficiency\)" $(BUILD)/validate-fitted.err || \
	        { cat $(BUILD)/validate-fitted.err; exit 1; }; done
	@echo "validate rows: $$(ls validation/*.plan validation/other/*.plan | wc -l) rows on preset figures; $$(ls tests/validate/fitted-*.plan | wc -l) fitted rows refused"

bench-planner: $(BUILD)/bin/planc-validate
	$(BUILD)/bin/planc-validate --bench
