# kube-proxy and ipvs-proxy side by side (test/e2e/daemonbench,
# TestVsKubeProxy): one API server, the same objects, for each size one VM
# boot in which kube-proxy v1.34 (IPVS mode) and then `ipvs-proxy run` each
# program a fresh node namespace: first full sync until the kernel is
# complete, one change p50/p99 beside the bare-informer floor, peak RSS,
# CPU idle and over the changes. NOT part of `make test`. Figures:
# docs/benchmarks.md.
#
#   make bench-vs-kube-proxy                               1,000 and 3,000 services
#   make bench-vs-kube-proxy BENCHVS_SIZES=10000,20000 BENCHVS_BUDGET=30m
#   make bench-vs-kube-proxy BENCHVS_SIZES=1000 BENCHVS_PROXIES=ipvs-proxy BENCHVS_BREAKDOWN=1
#       ours alone (a development run: no side-by-side line), its one
#       change stage by stage from its debug log

benchvs_default_goal := $(.DEFAULT_GOAL)

GO             ?= go
BENCHVS_SIZES  ?= 1000,3000
BENCHVS_CHANGES ?= 50
# kube-proxy's (and ours') first-sync budget: past it the run says so and
# reports the budget as a lower bound.
BENCHVS_BUDGET ?= 15m
# The wait for one change. A proxy over its first-sync budget gets one
# change, and past this its latency is reported as a lower bound.
BENCHVS_CHANGE_BUDGET ?= 10m
# No change is begun once the changes have taken this long (empty: none):
# kube-proxy's changes at 10,000 services each wait out a sync of minutes.
BENCHVS_CHANGES_WALL ?=
BENCHVS_IDLE   ?= 60s
BENCHVS_MEM    ?= 4096
# Which proxies run (kube-proxy, ipvs-proxy; both by default), and whether
# ipvs-proxy logs at debug level for the stage-by-stage breakdown.
BENCHVS_PROXIES ?= kube-proxy,ipvs-proxy
BENCHVS_BREAKDOWN ?=
# A directory: ipvs-proxy traces its collections (in the report) and its
# heap profiles after the first sync and at the end are saved there.
BENCHVS_MEMORY ?=
# GOGC for ipvs-proxy (its own default when empty).
BENCHVS_GOGC ?=
# ipvs-proxy's --service-stats: true or false (its default when empty).
BENCHVS_SERVICE_STATS ?=

.PHONY: bench-vs-kube-proxy
bench-vs-kube-proxy: deps kube-proxy
	cd test/e2e && BENCHVS=1 BENCHVS_SIZES=$(BENCHVS_SIZES) BENCHVS_CHANGES=$(BENCHVS_CHANGES) \
		BENCHVS_BUDGET=$(BENCHVS_BUDGET) BENCHVS_CHANGE_BUDGET=$(BENCHVS_CHANGE_BUDGET) BENCHVS_CHANGES_WALL=$(BENCHVS_CHANGES_WALL) BENCHVS_IDLE=$(BENCHVS_IDLE) DAEMONBENCH_MEM=$(BENCHVS_MEM) \
		BENCHVS_PROXIES=$(BENCHVS_PROXIES) BENCHVS_BREAKDOWN=$(BENCHVS_BREAKDOWN) BENCHVS_MEMORY=$(BENCHVS_MEMORY) BENCHVS_GOGC=$(BENCHVS_GOGC) BENCHVS_SERVICE_STATS=$(BENCHVS_SERVICE_STATS) \
		KUBE_PROXY_BIN=$(KUBE_PROXY_BIN) \
		$(GO) test -p 2 -vet=off -count=1 -v -timeout 600m -run '^TestVsKubeProxy$$' ./daemonbench

# Named by `make test` among what it leaves out.
OPT_IN += bench-vs-kube-proxy(side-by-side-benchmark)

.DEFAULT_GOAL := $(benchvs_default_goal)
