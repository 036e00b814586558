# mk/fleet.mk: the mixed fleet and the seed's disaster
# across real nodes, on the multi-node bed of
# test/e2e/cluster. Included by the top Makefile (`-include mk/*.mk`).
#
#   make test-fleet   the bed with ipvs-proxy on every node; a Service whose
#                     externalIP is node-b's address is refused; node-a is
#                     handed back to kube-proxy v1.34 (IPVS mode); cross-node
#                     ClusterIP and NodePort traffic between the two kinds of
#                     node; then the same Service under kube-proxy on node-a
#                     and `ipvs-proxy recover --apply` with the API server
#                     unreachable. One VM boot; docs/testing.md has the time.
#
# Part of `make test` (1 to 5 minutes in the VM, with the kube-proxy that
# `make kube-proxy` builds once for the takeover test: KUBE_PROXY_BIN,
# mk/takeover.mk).

# Keep the including Makefile's default goal whatever the include order.
fleet_default_goal := $(.DEFAULT_GOAL)

GO ?= go

.PHONY: test-fleet
test-fleet: deps build kube-proxy
	cd test/e2e && FLEET=1 KUBE_PROXY_BIN=$(KUBE_PROXY_BIN) IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -p 1 -count=1 -vet=off -v -timeout 40m -run '^TestFleetVM$$' ./cluster

TEST_TARGETS += test-fleet

.DEFAULT_GOAL := $(fleet_default_goal)
