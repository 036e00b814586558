# mk/chart.mk: the Helm chart charts/ipvs-proxy. Included
# by the top Makefile (`-include mk/*.mk`).
#
#   make helm         helm HELM_VERSION built from its Go module into
#                     .cache/helm/VERSION/helm (scripts/build-helm.sh, once)
#   make test-chart   test/e2e/chart with that helm: `helm lint --strict`,
#                     the chart against the kustomizations of deploy/ (the
#                     same DaemonSet, RBAC, ConfigMaps for the same choices),
#                     server-side dry-run on the in-process API server, and
#                     wrong values refused by name
#
# helm's cold build (its own k8s.io/* versions) is minutes of CPU on CI's two
# cores, so test-chart is opt-in; make test-e2e runs test/e2e/chart's tests
# that need no helm (the chart's copies of deploy/'s config file and alerts
# are the same) and skips the others.

# Keep the including Makefile's default goal whatever the include order.
chart_default_goal := $(.DEFAULT_GOAL)

GO           ?= go
HELM_VERSION ?= v3.22.0
HELM_BIN     := $(CURDIR)/.cache/helm/$(HELM_VERSION)/helm

.PHONY: helm test-chart
helm:
	GO='$(GO)' HELM_VERSION=$(HELM_VERSION) bash scripts/build-helm.sh >/dev/null

test-chart: helm
	cd test/e2e && IPVS_PROXY_HELM=$(HELM_BIN) $(GO) test -count=1 -v -timeout 15m ./chart/

OPT_IN += test-chart(builds-helm-from-source-minutes-of-CPU-once)

.DEFAULT_GOAL := $(chart_default_goal)
