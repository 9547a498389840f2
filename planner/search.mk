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
