# mk/coredns.mk: the bed's cluster DNS: CoreDNS with the
# kubernetes, bind, errors, log, health, ready and cache plugins and no forward
# (tools/coredns, its own module), built once into .cache/coredns by
# scripts/build-coredns.sh (a few minutes of CPU cold, nothing after).
# `make conformance-upstream` runs it in the VM behind kube-system/kube-dns
# (10.96.0.10); no target of `make test` needs it.
#
#   make coredns         build it (nothing when .cache has it)
#   make test-coredns    it answers Service names (TestCoreDNS, host only)

# Keep the including Makefile's default goal whatever the include order.
coredns_default_goal := $(.DEFAULT_GOAL)

GO              ?= go
COREDNS_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/coredns/coredns" { print $$3 }' tools/coredns/go.mod)
COREDNS_HASH    := $(shell cat tools/coredns/main.go tools/coredns/go.mod tools/coredns/go.sum | sha256sum | cut -c1-12)
COREDNS_BIN     := $(CURDIR)/.cache/coredns/coredns-$(COREDNS_VERSION)-$(COREDNS_HASH)

.PHONY: coredns test-coredns
coredns:
	GO='$(GO)' bash scripts/build-coredns.sh

# TestCoreDNS: that CoreDNS, with the bed's Corefile, on loopback against
# the test API server (host only, seconds once built).
test-coredns: coredns
	cd test/e2e && CLUSTER_COREDNS_BIN=$(COREDNS_BIN) $(GO) test -count=1 -v -run '^TestCoreDNS$$' ./cluster

OPT_IN += test-coredns(builds-CoreDNS-once)

.DEFAULT_GOAL := $(coredns_default_goal)
