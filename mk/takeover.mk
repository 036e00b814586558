# mk/takeover.mk: kube-proxy in the test bed, and the takeover and rollback
# test of issue 13 (test/e2e/takeover). Included by the top Makefile
# (`-include mk/*.mk`).
#
#   make kube-proxy      build kube-proxy v1.34.4 once into .cache/kube-proxy
#                        (scripts/build-kube-proxy.sh; a no-op when present)
#   make test-takeover   kube-proxy programs a node of the test VM under
#                        traffic, ipvs-proxy takes it over, kube-proxy takes
#                        it back (opt-in: see below)
#   make test-takeover TAKEOVER_CYCLES=N
#                        the takeover and the rollback N times in one boot
#                        (to chase a rare failure)
#
# The cold kube-proxy build is ~10 min of CPU on 2 cores, once per machine
# (GOCACHE and .cache/kube-proxy keep it); docs/testing.md has the figures.

# Keep the including Makefile's default goal whatever the include order.
takeover_default_goal := $(.DEFAULT_GOAL)

GO                 ?= go
KUBE_PROXY_VERSION ?= v1.34.4
KUBE_PROXY_BIN     := $(CURDIR)/.cache/kube-proxy/kube-proxy-$(KUBE_PROXY_VERSION)
TAKEOVER_FLAGS     ?=
TAKEOVER_CYCLES    ?=

.PHONY: kube-proxy test-takeover
kube-proxy:
	GO='$(GO)' KUBE_PROXY_VERSION=$(KUBE_PROXY_VERSION) bash scripts/build-kube-proxy.sh

test-takeover: deps build kube-proxy
	cd test/e2e && TAKEOVER=1 TAKEOVER_CYCLES=$(TAKEOVER_CYCLES) KUBE_PROXY_BIN=$(KUBE_PROXY_BIN) IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -count=1 -vet=off -v -timeout 50m -run '^TestTakeover$$' $(TAKEOVER_FLAGS) ./takeover

# Not in `make test` yet (4.5 min warm idle, 7.2 min at load ~4). Read
# timeouts are now judged from a packet capture (docs/testing.md; the rare
# one was IPVS's reply matching); but the run of 2026-11-26 00:00 failed on
# a ClientIP-affinity ClusterIP dial timeout under kube-proxy before its
# first IPVS step, which the capture does not judge yet (no endpoint in a
# dial error). Green: 3 cycles 23:05, 1 cycle 23:41; red: 00:00.
OPT_IN += test-takeover(a-dial-timeout-under-kube-proxy-not-yet-judged)

.DEFAULT_GOAL := $(takeover_default_goal)
