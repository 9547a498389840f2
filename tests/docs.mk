# tests/docs.mk: the documentation cannot drift (docs/README.md, "Docs that
# cannot drift"): README.md and docs/*.md name only files the repository
# has, their links' anchors resolve, their runnable blocks (```sh run```)
# run and print what they show, language.md documents exactly the keys
# planner/sema.c accepts, commands.md and --help every command and option,
# codegen.md and the generated program's --help every option it takes.
# Then each check is shown to fail: on pages under tests/docs/ and on
# copies of sema.c, language.md and cli/ with one thing added undocumented.

.PHONY: test-docs
TEST_TARGETS += test-docs

DOCS_DRIFT := $(BUILD)/docs-drift
# the runnable blocks say build/bin/planc, the default tree; a SAN=1 run
# (build/san) checks everything else and says it ran none
DOCS_RUN := $(if $(filter build,$(BUILD)),,--no-run)

# RUN: the command; MSG: what its failure must say
define docs_must_fail
	@if $(1) > $(DOCS_DRIFT)/out.txt 2>&1; then cat $(DOCS_DRIFT)/out.txt; \
	    echo "FAIL: test-docs passed $(2)"; exit 1; fi
	@grep -q -- '$(3)' $(DOCS_DRIFT)/out.txt || { cat $(DOCS_DRIFT)/out.txt; \
	    echo "FAIL: test-docs did not say '$(3)' $(2)"; exit 1; }
endef

test-docs: $(PLANC) $(BUILD)/bin/planc-validate
	PLANC=$(PLANC) DOCS_OPTS=$(DOCS_RUN) tests/check_docs.sh
	@rm -rf $(DOCS_DRIFT) && mkdir -p $(DOCS_DRIFT)
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py tests/docs/drift-output.md,on output the page does not show,does not show)
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py tests/docs/drift-exit.md,on a block that exits 2,exited 2)
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py tests/docs/drift-anchor.md,on a link to no heading,has no such heading)
	@sed 's/"kind" }/"kind", "undocumented_key" }/' planner/sema.c > $(DOCS_DRIFT)/sema.c
	@grep -q undocumented_key $(DOCS_DRIFT)/sema.c || { echo "FAIL: tests/docs.mk: sema.c's norm table moved"; exit 1; }
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py --no-run --sema=$(DOCS_DRIFT)/sema.c,on a key sema accepts undocumented,`undocumented_key`)
	@sed 's/"kind" }/"kind", "bias" }/' planner/sema.c > $(DOCS_DRIFT)/sema-bias.c
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py --no-run --sema=$(DOCS_DRIFT)/sema-bias.c,on a key documented in another block only,`bias`.*under `norm { }`)
	@{ cat docs/language.md; printf '\n| key | value |\n|---|---|\n| `no_such_key` | 1 |\n'; } > $(DOCS_DRIFT)/language.md
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py --no-run --language=$(DOCS_DRIFT)/language.md,on a documented key sema does not accept,`no_such_key`)
	@cp -r cli $(DOCS_DRIFT)/cli && sed -i 's/"--chunks"/"--chunks-per-stage"/' $(DOCS_DRIFT)/cli/cmd_trace.c
	@grep -q chunks-per-stage $(DOCS_DRIFT)/cli/cmd_trace.c || { echo "FAIL: tests/docs.mk: cmd_trace.c's --chunks moved"; exit 1; }
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py --no-run --cli=$(DOCS_DRIFT)/cli,on an option neither --help nor commands.md names,--chunks-per-stage)
	@sed 's/!strcmp(a, "--dry-run")/!strcmp(a, "--dry-run") || !strcmp(a, "--undocumented-flag")/' runtime/par/run.c > $(DOCS_DRIFT)/run.c
	@grep -q undocumented-flag $(DOCS_DRIFT)/run.c || { echo "FAIL: tests/docs.mk: run.c's --dry-run moved"; exit 1; }
	$(call docs_must_fail,PLANC=$(PLANC) python3 tests/check_docs.py --no-run --run=$(DOCS_DRIFT)/run.c,on a program option neither its --help nor codegen.md names,--undocumented-flag)
	@echo "test-docs: each check fails on its broken copy (output, exit, anchor, key both ways and per block, planc option, program option)"
