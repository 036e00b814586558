# The daemon at scale (test/e2e/daemonbench): `ipvs-proxy run` in the test
# VM against the host's in-process API server holding DAEMONBENCH_SERVICES
# Services × DAEMONBENCH_ENDPOINTS endpoints; first full sync and network
# programming latency against the kernel floor, and peak RSS. Included by
# the Makefile (`-include mk/*.mk`); NOT part of `make test` (the host test
# skips unless DAEMONBENCH=1). Figures: docs/benchmarks.md.
#
#   make bench-daemon                                  10,000 × 10, 100 changes
#   make bench-daemon DAEMONBENCH_SERVICES=2000 DAEMONBENCH_CHANGES=20

# Keep the including Makefile's default goal whatever the include order.
daemonbench_default_goal := $(.DEFAULT_GOAL)

GO                    ?= go
DAEMONBENCH_SERVICES  ?= 10000
DAEMONBENCH_ENDPOINTS ?= 10
DAEMONBENCH_CHANGES   ?= 100
DAEMONBENCH_WORKERS   ?= 16
# VM memory in MiB and the guest's -test.timeout.
DAEMONBENCH_MEM       ?= 4096
DAEMONBENCH_TIMEOUT   ?= 80m

.PHONY: bench-daemon
bench-daemon:
	bash scripts/install-deps.sh
	cd test/e2e && DAEMONBENCH=1 DAEMONBENCH_SERVICES=$(DAEMONBENCH_SERVICES) \
		DAEMONBENCH_ENDPOINTS=$(DAEMONBENCH_ENDPOINTS) DAEMONBENCH_CHANGES=$(DAEMONBENCH_CHANGES) \
		DAEMONBENCH_WORKERS=$(DAEMONBENCH_WORKERS) DAEMONBENCH_MEM=$(DAEMONBENCH_MEM) \
		DAEMONBENCH_TIMEOUT=$(DAEMONBENCH_TIMEOUT) DAEMONBENCH_HEAP_PROFILE=$(DAEMONBENCH_HEAP_PROFILE) DAEMONBENCH_CPU_PROFILE=$(DAEMONBENCH_CPU_PROFILE) \
		DAEMONBENCH_FIRSTCPU_PROFILE=$(DAEMONBENCH_FIRSTCPU_PROFILE) DAEMONBENCH_FIRSTCPU_SECONDS=$(DAEMONBENCH_FIRSTCPU_SECONDS) \
		$(GO) test -p 2 -vet=off -count=1 -v -timeout 150m -run '^TestDaemonBench$$' ./daemonbench

.DEFAULT_GOAL := $(daemonbench_default_goal)

# TestDaemonBench skips in `make test-e2e` (it needs DAEMONBENCH=1): minutes at 10,000 services.
OPT_IN += bench-daemon(10,000-service-benchmark)
