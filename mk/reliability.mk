# Reliability suites: fuzz, soak, chaos. Included by the Makefile
# (`-include mk/*.mk`). docs/reliability.md has the figures and the commands.
#
#   make reliability            every suite, bounded (a few minutes)
#   make fuzz FUZZTIME=10m      each fuzz target for FUZZTIME
#   make fuzz-short             the guard and planner targets for a fixed number of
#                               executions each (part of `make test`)
#
# `go test` runs each target's seed corpus (testdata/fuzz/FuzzX in its
# package) as a plain test anyway; these targets mutate it. Crashers are
# written to that testdata/fuzz directory: commit them with the fix.

# Keep the including Makefile's default goal whatever the include order.
reliability_default_goal := $(.DEFAULT_GOAL)

GO             ?= go
FUZZTIME       ?= 30s
# The short run counts executions instead of seconds: Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure when a
# wall-clock -fuzztime ends while a worker is mid-call on a loaded machine
# (golang/go#75804, fixed in Go 1.27; it failed CI once on FuzzPlan with no
# crasher written). An `Nx` budget has no deadline to race. The counts are
# about 5 s each on an idle 2-vCPU machine.
FUZZSHORT_GUARD ?= 40000x
FUZZSHORT_PLAN  ?= 8000x
FUZZSHORT_INCREMENTAL ?= 3000x
FUZZSHORT_TEXT ?= 5000x
FUZZPARALLEL   ?= 2

# package:target pairs, one fuzz run each (go test -fuzz takes one target).
FUZZ_TARGETS := \
	./informers:FuzzConvertFields \
	./informers:FuzzConvertObjects \
	./internal/decide/guard:FuzzGuard \
	./internal/decide/guard:FuzzGuardCheck \
	./informers:FuzzPlanText \
	./internal/decide/planner:FuzzPlan \
	./internal/decide/planner:FuzzIncremental \
	./internal/decide/planner:FuzzPlanText

.PHONY: reliability fuzz fuzz-short

reliability: fuzz

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) $$pkg; \
	done

# The short run skips the informers targets: their instrumented build
# covers client-go and its fakes (minutes on a cold cache); their seed
# corpora still run in every `go test`.
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORT_GUARD) FUZZ_TARGETS=./internal/decide/guard:FuzzGuard
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORT_PLAN) FUZZ_TARGETS=./internal/decide/planner:FuzzPlan
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORT_INCREMENTAL) FUZZ_TARGETS=./internal/decide/planner:FuzzIncremental
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORT_TEXT) FUZZ_TARGETS=./internal/decide/planner:FuzzPlanText

# --- soak (test/e2e/soak, a kernel test in the VM) ---
# make soak                                     1,000 services, 60s of churn
# make soak SOAK_SERVICES=10000 SOAK_DURATION=10m
SOAK_SERVICES  ?= 1000
SOAK_DURATION  ?= 60s
SOAK_SEED      ?= 1
SOAK_FULL_EVERY ?= 10
RELIABILITY_DIR ?= $(CURDIR)/.cache/reliability
VMRUN          ?= $(GO) run ./test/vmtest/cmd/vmrun

.PHONY: soak
soak:
	bash scripts/install-deps.sh
	@mkdir -p $(RELIABILITY_DIR)
	cd test/e2e && $(GO) test -c -tags kernel -o $(RELIABILITY_DIR)/soak.test ./soak
	$(VMRUN) -fail-on-skip -timeout 90m -env SOAK_SERVICES=$(SOAK_SERVICES) -env SOAK_DURATION=$(SOAK_DURATION) -env SOAK_SEED=$(SOAK_SEED) \
		-env SOAK_FULL_EVERY=$(SOAK_FULL_EVERY) \
		-- $(RELIABILITY_DIR)/soak.test -test.v -test.timeout 85m

reliability: soak

# The short soak of `make test`: 200 services churned for 30 s with a full
# resync every second sync, the same invariants and traffic checks.
.PHONY: soak-short
soak-short:
	@$(MAKE) --no-print-directory soak SOAK_SERVICES=200 SOAK_DURATION=30s SOAK_FULL_EVERY=2
TEST_TARGETS += soak-short

# --- chaos (test/e2e/chaos: API server on the host, proxy in the VM) ---
# make chaos                    3 kills, then the four tampers
# make chaos CHAOS_KILLS=100    the long run
CHAOS_KILLS    ?= 3
CHAOS_SEED     ?= 1

.PHONY: chaos
chaos:
	bash scripts/install-deps.sh
	@mkdir -p $(RELIABILITY_DIR)
	$(GO) build -o $(RELIABILITY_DIR)/ipvs-proxy ./cmd/ipvs-proxy
	cd test/e2e && $(GO) test -c -tags kernel -o $(RELIABILITY_DIR)/chaos-guest.test ./chaos
	cd test/e2e && CHAOS_KILLS=$(CHAOS_KILLS) CHAOS_SEED=$(CHAOS_SEED) CHAOS_PROXY_BIN=$(RELIABILITY_DIR)/ipvs-proxy \
		CHAOS_GUEST_BIN=$(RELIABILITY_DIR)/chaos-guest.test $(GO) test -count=1 -v -timeout 300m -run '^TestChaos$$' ./chaos

reliability: chaos

# --- daemon soak (test/e2e/daemonsoak: `ipvs-proxy run` under API churn) ---
# make daemon-soak                                   1,000 services, 3 min
# make daemon-soak DSOAK_SERVICES=10000 DSOAK_DURATION=30m DSOAK_CHECK=15m
DSOAK_SERVICES  ?= 1000
DSOAK_ENDPOINTS ?= 10
DSOAK_DURATION  ?= 3m
DSOAK_CHECK     ?= 1m
DSOAK_SEED      ?= 1
# DSOAK_PROFILES=DIR: the proxy's heap profile at every check, saved there
DSOAK_PROFILES  ?=

.PHONY: daemon-soak
daemon-soak:
	bash scripts/install-deps.sh
	@mkdir -p $(RELIABILITY_DIR)
	$(GO) build -o $(RELIABILITY_DIR)/ipvs-proxy ./cmd/ipvs-proxy
	cd test/e2e && $(GO) test -c -tags kernel -o $(RELIABILITY_DIR)/daemonsoak-guest.test ./daemonsoak
	cd test/e2e && DSOAK=1 DSOAK_SERVICES=$(DSOAK_SERVICES) DSOAK_ENDPOINTS=$(DSOAK_ENDPOINTS) DSOAK_DURATION=$(DSOAK_DURATION) \
		DSOAK_CHECK=$(DSOAK_CHECK) DSOAK_SEED=$(DSOAK_SEED) DSOAK_PROFILES=$(DSOAK_PROFILES) CHAOS_PROXY_BIN=$(RELIABILITY_DIR)/ipvs-proxy \
		CHAOS_GUEST_BIN=$(RELIABILITY_DIR)/daemonsoak-guest.test $(GO) test -count=1 -v -timeout 300m -run '^TestDaemonSoak$$' ./daemonsoak

# `make test` runs the short fuzz (about 10 s of fuzzing plus the
# instrumented build of addrmgr and the planner).
TEST_TARGETS += fuzz-short

.DEFAULT_GOAL := $(reliability_default_goal)

# The long runs; `make test` has fuzz-short and soak-short, and the chaos
# test's three kills in test-e2e.
OPT_IN += fuzz(long-fuzzing) soak(1,000-service-soak) chaos(kill-loop) daemon-soak(run-under-churn)
