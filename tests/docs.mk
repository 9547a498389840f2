# tests/docs.mk: the documentation names only files the repository has
# (README.md and docs/*.md: paths in backquotes, link targets, .md names).

.PHONY: test-docs
TEST_TARGETS += test-docs

test-docs:
	tests/check_docs.sh
