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
