# mk/conformance.mk: the multi-node bed of issue 17 (test/e2e/cluster) and
# the upstream [sig-network] tests re-created on it, each a subtest named
# after its `It`. Included by the top Makefile (`-include mk/*.mk`).
#
#   make conformance        every re-created test (one VM boot; fails while
#                           one fails: docs/conformance.md has the results)
#   make test-conformance   the same bed, less CONFORMANCE_CI_SKIP (the tests
#                           that fail for a known, documented reason); part
#                           of `make test`
#   make conformance CONFORMANCE_RUN='should_support_externalTrafficPolicy'
#                           (a -test.run pattern under TestClusterGuest:
#                           put alternatives in parentheses, '(A|B)', as go
#                           test splits a top-level '|' into whole patterns)
#
# The host test (TestClusterVM) starts the API server and Kubernetes'
# endpointslice, endpointslice-mirroring and serviceaccount controllers
# in-process, then boots the VM: three node namespaces on one LAN, each
# with its own `ipvs-proxy run` and node agent.

# Keep the including Makefile's default goal whatever the include order.
conformance_default_goal := $(.DEFAULT_GOAL)

GO                  ?= go
CONFORMANCE_RUN     ?=
# SN-61's client-node short-circuit: docs/conformance.md.
CONFORMANCE_CI_SKIP ?= TestClusterGuest/should_implement_NodePort_and_HealthCheckNodePort_correctly_when_ExternalTrafficPolicy_changes

.PHONY: conformance test-conformance
conformance: deps build
	cd test/e2e && CLUSTER=1 CLUSTER_RUN='$(CONFORMANCE_RUN)' IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -p 1 -count=1 -vet=off -v -timeout 40m -run '^TestClusterVM$$' ./cluster

test-conformance: deps build
	cd test/e2e && CLUSTER=1 CLUSTER_SKIP='$(CONFORMANCE_CI_SKIP)' IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -p 1 -count=1 -vet=off -v -timeout 40m -run '^TestClusterVM$$' ./cluster

TEST_TARGETS += test-conformance
OPT_IN += conformance(every-re-created-test-including-known-failures)

.DEFAULT_GOAL := $(conformance_default_goal)
