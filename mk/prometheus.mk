# mk/prometheus.mk: a real Prometheus against ipvs-proxy.
# Included by the top Makefile (`-include mk/*.mk`).
#
#   make test-prometheus   Debian's prometheus (scripts/install-prometheus.sh)
#                          scrapes `ipvs-proxy run` in the test VM as
#                          job="kube-proxy"; kubernetes-mixin's kube-proxy
#                          dashboard queries and alerts and the rules of
#                          deploy/components/monitoring are evaluated
#                          (test/e2e/prometheus). The component's check
#                          against prometheus-operator's CRDs needs no VM
#                          and runs in `make test-e2e` too.

# Keep the including Makefile's default goal whatever the include order.
prometheus_default_goal := $(.DEFAULT_GOAL)

GO               ?= go
PROMETHEUS_FLAGS ?=

.PHONY: test-prometheus prometheus-deps
prometheus-deps:
	bash scripts/install-prometheus.sh

test-prometheus: deps prometheus-deps
	cd test/e2e && PROMETHEUS_VM=1 $(GO) test -count=1 -vet=off -v -timeout 20m $(PROMETHEUS_FLAGS) ./prometheus

OPT_IN += test-prometheus(Prometheus-in-the-VM)

.DEFAULT_GOAL := $(prometheus_default_goal)
