# mk/takeover.mk: kube-proxy in the test bed, and the takeover and rollback
# test of issue 13 (test/e2e/takeover). Included by the top Makefile
# (`-include mk/*.mk`).
#
#   make kube-proxy      build kube-proxy v1.34.4 once into .cache/kube-proxy
#                        (scripts/build-kube-proxy.sh; a no-op when present)
#   make test-takeover   kube-proxy programs a node of the test VM under
#                        traffic, ipvs-proxy takes it over, kube-proxy takes
#                        it back (opt-in: see below)
#
# The cold kube-proxy build is ~10 min of CPU on 2 cores, once per machine
# (GOCACHE and .cache/kube-proxy keep it); docs/testing.md has the figures.

# Keep the including Makefile's default goal whatever the include order.
takeover_default_goal := $(.DEFAULT_GOAL)

GO                 ?= go
KUBE_PROXY_VERSION ?= v1.34.4
KUBE_PROXY_BIN     := $(CURDIR)/.cache/kube-proxy/kube-proxy-$(KUBE_PROXY_VERSION)
TAKEOVER_FLAGS     ?=

.PHONY: kube-proxy test-takeover
kube-proxy:
	GO='$(GO)' KUBE_PROXY_VERSION=$(KUBE_PROXY_VERSION) bash scripts/build-kube-proxy.sh

test-takeover: deps build kube-proxy
	cd test/e2e && TAKEOVER=1 KUBE_PROXY_BIN=$(KUBE_PROXY_BIN) IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -count=1 -vet=off -v -timeout 50m -run '^TestTakeover$$' $(TAKEOVER_FLAGS) ./takeover

# Not in `make test` for now (4.5 min warm, kube-proxy built once): in 7
# runs on 2026-11-25 it failed 3 times on one request of ~10,000 timing
# out with its connection established (once in the takeover on a starved
# VM, once under kube-proxy in the rollback about 2.5 s after kube-proxy's
# first sync, once not recorded), not explained yet; see docs/testing.md.
OPT_IN += test-takeover(one-unexplained-request-timeout-in-3-of-7-runs)

.DEFAULT_GOAL := $(takeover_default_goal)
