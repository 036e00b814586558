# mk/conformance.mk: the multi-node bed (test/e2e/cluster) and
# the upstream [sig-network] tests re-created on it, each a subtest named
# after its `It`. Included by the top Makefile (`-include mk/*.mk`).
#
#   make conformance        every re-created test (one VM boot; fails while
#                           one fails: docs/conformance.md has the results)
#   make test-conformance   the same bed, less CONFORMANCE_CI_SKIP (the slow
#                           tests named below); part of `make test`
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
# Left out of `make test` (docs/conformance.md): the slow tests that are
# neither [Conformance] nor in the checklist's ten most likely to catch a bug. A -test.skip pattern: top-level '|'
# separates whole patterns, each split at '/' by level.
CONFORMANCE_CI_SKIP ?= TestClusterGuest/(should_fallback_to_terminating_endpoints_when_there_are_no_ready_endpoints_with_externall|should_be_able_to_up_and_down_services|should_implement_service.kubernetes.io|should_be_updated_after_adding_or_deleting_ports|should_be_able_to_update_service_type_to_NodePort|session_affinity_work_for_LoadBalancer|switch_session_affinity_for_LoadBalancer|should_be_able_to_create_LoadBalancer_Service_without_NodePort|for_a_LoadBalancer_service_on_the_same_nodes|should_route_traffic_to_an_endpoint_in_the_same_zone)|TestClusterGuest/Granular_Checks:_Services/(should_update_nodePort|should_function_for_service_endpoints_using_hostNetwork)

# Also left out of `make test`: the later batch's slow tests, none
# [Conformance] nor among the ten (SN-32, 33, 45, 63, 64, 113, 114).
CONFORMANCE_CI_SKIP_LATER ?= TestClusterGuest/(should_be_able_to_change_the_type_and_ports_of_a|should_only_target_nodes_with_endpoints|terminating_and_unready_endpoints_if_PublishNotReadyAddresses|should_recreate_its_iptables_rules|should_work_after_restarting_kube-proxy)

# And the checklist's rest, re-created later (SN-24, 46, 52, 55, 71, 95):
# SN-52 and SN-55 wait out a 125 s affinity timeout; none [Conformance]
# nor among the ten but SN-95, which the VM's kernel makes blind
# (docs/conformance.md).
CONFORMANCE_CI_SKIP_REST ?= TestClusterGuest/(should_create_Services_and_serve_on_different_Service_CIDRs|should_target_all_nodes_with_endpoints|should_have_session_affinity_timeout_work|should_distribute_endpoints_evenly|proxy_implementation_should_not_be_vulnerable_to_the_invalid_conntrack_state_bug)

.PHONY: conformance test-conformance
conformance: deps build
	cd test/e2e && CLUSTER=1 CLUSTER_RUN='$(CONFORMANCE_RUN)' IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -p 1 -count=1 -vet=off -v -timeout 40m -run '^TestClusterVM$$' ./cluster

test-conformance: deps build
	cd test/e2e && CLUSTER=1 CLUSTER_SKIP='$(CONFORMANCE_CI_SKIP)|$(CONFORMANCE_CI_SKIP_LATER)|$(CONFORMANCE_CI_SKIP_REST)' IPVS_PROXY_BIN=$(CURDIR)/$(BIN) \
		$(GO) test -p 1 -count=1 -vet=off -v -timeout 40m -run '^TestClusterVM$$' ./cluster

TEST_TARGETS += test-conformance
OPT_IN += conformance(every-re-created-test-including-known-failures)

# make conformance-names: upstream's own e2e.test, kubectl and agnhost,
# built once from k8s.io/kubernetes into .cache/upstream-e2e
# (scripts/build-upstream-e2e.sh: ~15 min of CPU cold), list the
# version's [sig-network] specs; every row of docs/conformance.md and every
# subtest name of the bed must be one of them (TestUpstreamNames).
UPSTREAM_E2E_VERSION ?= v1.34.4
UPSTREAM_SPECS       := $(CURDIR)/.cache/upstream-e2e/$(UPSTREAM_E2E_VERSION)/specs.txt

.PHONY: upstream-e2e conformance-names
upstream-e2e:
	GO='$(GO)' UPSTREAM_E2E_VERSION=$(UPSTREAM_E2E_VERSION) bash scripts/build-upstream-e2e.sh

conformance-names: upstream-e2e
	cd test/e2e && UPSTREAM_SPECS=$(UPSTREAM_SPECS) $(GO) test -count=1 -run '^TestUpstreamNames$$' ./cluster

OPT_IN += conformance-names(builds-upstream-e2e.test-about-15-min-of-CPU-cold)

# make conformance-upstream: upstream's own e2e.test (v1.34.4, unmodified)
# run in the bed's runner namespace against the three nodes, the agents
# running the pods' containers as real processes (agnhost itself) and
# serving exec through the API server (kube-scheduler in-process on the
# host, with the garbage collector and cluster DNS: CoreDNS from
# mk/coredns.mk behind kube-dns, the DaemonSet controller, and a cloud
# load balancer for LoadBalancer Services). UPSTREAM_FOCUS picks the specs (a
# ginkgo focus regexp); UPSTREAM_FOCUS_2, when set, more specs run at the
# same time in a second e2e.test (for specs that mostly wait: SN-42 and
# SN-43 take about 17 min each). Results
# are in docs/conformance.md. Opt-in: one VM boot plus the specs' time.
UPSTREAM_FOCUS   ?= \[sig-network\] Networking Granular Checks: Services should function for pod-Service: http
UPSTREAM_FOCUS_2 ?=
UPSTREAM_SKIP    ?=
UPSTREAM_E2E_DIR := $(CURDIR)/.cache/upstream-e2e/$(UPSTREAM_E2E_VERSION)

.PHONY: conformance-upstream
conformance-upstream: deps build upstream-e2e coredns
	cd test/e2e && CLUSTER=1 CLUSTER_RUN='(bed:|upstream_e2e.test)' IPVS_PROXY_BIN=$(CURDIR)/$(BIN) CLUSTER_COREDNS_BIN=$(COREDNS_BIN) \
		CLUSTER_UPSTREAM_DIR=$(UPSTREAM_E2E_DIR) CLUSTER_UPSTREAM_FOCUS='$(UPSTREAM_FOCUS)' CLUSTER_UPSTREAM_FOCUS_2='$(UPSTREAM_FOCUS_2)' CLUSTER_UPSTREAM_SKIP='$(UPSTREAM_SKIP)' \
		$(GO) test -p 1 -count=1 -vet=off -v -timeout 40m -run '^TestClusterVM$$' ./cluster

OPT_IN += conformance-upstream(upstream-e2e.test-on-the-bed)
.DEFAULT_GOAL := $(conformance_default_goal)
