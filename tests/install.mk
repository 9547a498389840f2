# tests/install.mk: `make install DESTDIR=$(mktemp -d)` installs planc, the
# runtime, its headers, pkg-config file and man page, and they work from
# there (tests/install.sh).

.PHONY: test-install
TEST_TARGETS += test-install

test-install: all
	@stage=$$(mktemp -d) && trap 'rm -rf "$$stage"' EXIT && \
	    $(MAKE) --no-print-directory -s install DESTDIR=$$stage PREFIX=/usr/local > /dev/null && \
	    NVCC_BUILT=$(if $(NVCC),1,0) tests/install.sh $$stage /usr/local
