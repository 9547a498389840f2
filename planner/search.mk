# planner/search.mk: `planc search` (planner/search.c), its tests and benchmark.
PLANC_SRCS += planner/search.c

SEARCH_DEPS := $(BUILD)/obj/planner/search.o $(PLANNER_OBJS)

$(BUILD)/bin/test_search_bench: tests/test_search_bench.c $(SEARCH_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

.PHONY: bench-search
BENCH_TARGETS += bench-search

bench-search: $(BUILD)/bin/test_search_bench
	$(BUILD)/bin/test_search_bench

# test-search: pruned search == brute force over a table of small cases,
# estimates vs exact figures layout by layout, results re-checked,
# constraints, nothing-fits; then the command line (argv[1] = planc).
$(BUILD)/bin/test_search: tests/test_search.c $(SEARCH_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-search
TEST_TARGETS += test-search

test-search: $(BUILD)/bin/test_search $(PLANC)
	$(BUILD)/bin/test_search $(PLANC)

# test-cp-planner: context parallelism (issue 26) in the planner: each CP
# form's memory against the contract of runtime/include/prt_par.h worked
# by hand, cp 1 unchanged, the ring's exposed time, the CP group's tier,
# the search on a 128K and a 2K plan
$(BUILD)/bin/test_cp_planner: tests/test_cp_planner.c $(SEARCH_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-cp-planner
TEST_TARGETS += test-cp-planner

test-cp-planner: $(BUILD)/bin/test_cp_planner $(PLANC)
	$(BUILD)/bin/test_cp_planner
	@$(PLANC) check examples/llama3-8b-128k.plan > $(BUILD)/cp-128k.txt || \
	    { echo "FAIL: examples/llama3-8b-128k.plan does not fit"; exit 1; }
	@grep -q "CP attention comm" $(BUILD)/cp-128k.txt && grep -q "CP group: 8 GPUs" $(BUILD)/cp-128k.txt || \
	    { echo "FAIL: check's report of the 128K example lacks the CP group or the CP row"; exit 1; }
	@echo "planc check: examples/llama3-8b-128k.plan fits, with its CP group and CP attention row"
	@$(PLANC) trace examples/llama3-8b-128k.plan -o $(BUILD)/cp-128k.json > /dev/null
	@python3 -c "import json,sys; d=json.load(open('$(BUILD)/cp-128k.json')); \
	    n=sum(e.get('cat')=='CP_COLL' for e in d['traceEvents']); \
	    sys.exit(0 if n == 32 else 'FAIL: %d CP_COLL segments in the trace, want 32 (16 forwards, 16 backwards)' % n)"
	@echo "planc trace: the 128K example's CP transfers drawn, one segment per pass"
	@grep -v "tp 2; cp 8" examples/llama3-8b-128k.plan > $(BUILD)/cp-128k-free.plan
	@$(PLANC) search $(BUILD)/cp-128k-free.plan --json --top 3 --write $(BUILD)/cp-128k-best.plan > $(BUILD)/cp-128k.json
	@python3 -c "import json,sys; d=json.load(open('$(BUILD)/cp-128k.json')); r=d['results']; \
	    ok = r and all(x['layout']['cp'] > 1 for x in r) and 'no layout without CP fits' in d['cp_note']; \
	    sys.exit(0 if ok else 'FAIL: search --json of the 128K plan: %s' % d.get('cp_note'))"
	@grep -q "^    cp 8" $(BUILD)/cp-128k-best.plan && grep -q "^    cp_comm ring" $(BUILD)/cp-128k-best.plan && \
	    $(PLANC) check $(BUILD)/cp-128k-best.plan > /dev/null || \
	    { echo "FAIL: search --write of the 128K plan lacks cp / cp_comm or does not check"; exit 1; }
	@echo "planc search: the 128K plan with tp and cp free ranks CP layouts only (--json, --write, check)"
