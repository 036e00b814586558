# Reliability suites (issue 7): fuzz, soak, chaos. Included by the Makefile
# (`-include mk/*.mk`). docs/reliability.md has the figures and the commands.
#
#   make reliability            every suite, bounded (a few minutes)
#   make fuzz FUZZTIME=10m      each fuzz target for FUZZTIME
#   make fuzz-short             each fuzz target for 5s (part of `make test`)
#
# `go test` runs each target's seed corpus (testdata/fuzz/FuzzX in its
# package) as a plain test anyway; these targets mutate it. Crashers are
# written to that testdata/fuzz directory: commit them with the fix.

GO             ?= go
FUZZTIME       ?= 30s
FUZZSHORTTIME  ?= 5s
FUZZPARALLEL   ?= 2

# package:target pairs, one fuzz run each (go test -fuzz takes one target).
FUZZ_TARGETS := \
	./informers:FuzzConvertFields \
	./informers:FuzzConvertObjects \
	./addrmgr:FuzzGuard \
	./addrmgr:FuzzGuardCheck \
	./internal/planner:FuzzPlan

.PHONY: reliability fuzz fuzz-short

reliability: fuzz

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) $$pkg; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORTTIME)
