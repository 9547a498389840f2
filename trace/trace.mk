# trace/trace.mk: pictures of a step (SVG timeline, Chrome/Perfetto trace,
# reading measured traces) and of a layout search (scatter plot).
TRACE_SRCS := trace/timeline.c trace/svg.c trace/chrome.c trace/search_svg.c
TRACE_OBJS := $(TRACE_SRCS:%.c=$(BUILD)/obj/%.o)
PLANC_SRCS += $(TRACE_SRCS)

# ---- tests ----------------------------------------------------------------
# test-trace: cmocka tests (box counts per stage == the Program's op
# counts, drawn idle time == the simulator's bubble for gpipe, 1f1b,
# interleaved and zb-h1, Chrome trace round trip, the search plot, the
# summary bars == the simulator's per-stage books and check's figures, the
# TP segments of llama3-70b == check's exposed TP), then
# tests/trace/run.sh: every example drawn as SVG and JSON and checked with
# an XML and a JSON parser, --compare on a written trace, and the goldens
# of two small plans compared byte for byte. update-trace-golden rewrites
# the goldens; review the diff.
TRACE_TEST     := $(BUILD)/tests/test_trace
TRACE_TEST_DEP := $(TRACE_OBJS) $(PLANNER_OBJS) $(BUILD)/obj/planner/search.o \
                  $(BUILD)/obj/planner/sema.o $(DSL_OBJS)

$(TRACE_TEST): tests/test_trace.c $(TRACE_TEST_DEP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(TRACE_TEST_DEP) -o $@ $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-trace update-trace-golden pictures
TEST_TARGETS += test-trace

test-trace: $(TRACE_TEST) $(PLANC)
	@mkdir -p $(BUILD)/tests/trace-out
	TRACE_OUT=$(BUILD)/tests/trace-out $(TRACE_TEST)
	tests/trace/run.sh $(PLANC) $(BUILD)/tests/trace-out

update-trace-golden: $(PLANC)
	tests/trace/run.sh $(PLANC) $(BUILD)/tests/trace-out --update

# pictures: the timelines of docs/trace.md and the README (docs/img/trace-SCHEDULE.svg, committed),
# drawn by planc from examples/tiny.plan under each schedule, and the
# three-tier topology (docs/img/topology-pods.svg, examples/two-pods.plan).
pictures: $(PLANC)
	@mkdir -p docs/img
	set -e; for s in gpipe 1f1b zb-h1; do \
	    $(PLANC) trace examples/tiny.plan --schedule $$s -o docs/img/trace-$$s.svg; done
	$(PLANC) trace examples/tiny.plan --schedule interleaved --chunks 2 -o docs/img/trace-interleaved.svg
	$(PLANC) trace examples/two-pods.plan -o docs/img/topology-pods.svg
