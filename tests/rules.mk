# tests/rules.mk: test-rules, the one rule of a valid layout (planner/layout.c)
# held against `check`, `search` and `emit` on random layouts of models with
# awkward vocabularies and widths, each rule with its message, the padded
# vocabulary, the keys of sema this part reads (vocab_multiple, device sms
# and flops_fp32, the SP-at-tp-1 warning), one buffer formula, one device
# table. It links the whole compiler (planner, sema, codegen) but not main.
# Then tests/rules_cli.sh: GPT-2 at tp 1/2/4/8 through `planc check` and
# `planc emit`.
$(BUILD)/tests/test_rules: $(BUILD)/obj/tests/test_rules.o $(PLANC)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(filter-out $(BUILD)/obj/cli/planc.o,$(PLANC_OBJS)) -o $@ \
	    $(CMOCKA_LIBS) $(LDLIBS)

.PHONY: test-rules
TEST_TARGETS += test-rules
test-rules: $(BUILD)/tests/test_rules $(PLANC)
	$(BUILD)/tests/test_rules
	tests/rules_cli.sh $(PLANC)
