// Package prometheus proves ipvs-proxy's metrics and the optional
// monitoring component of deploy/ (deploy/components/monitoring) with the
// real programs an operator runs: Debian's Prometheus and the
// prometheus-operator CRDs on the real kube-apiserver.
//
//   - TestMonitoringComponentAgainstCRDs (host, part of `make test-e2e`):
//     the CustomResourceDefinitions of ServiceMonitor and PrometheusRule
//     from prometheus-operator's release (its Go module, fetched through the
//     Go module proxy at the version of OperatorVersion) are installed on
//     the test API server; the component, rendered with the base, is
//     applied with strict field validation and no warning; broken copies
//     are refused; the Service, ServiceMonitor and DaemonSet refer to each
//     other.
//   - TestPrometheusVM (host, `make test-prometheus`) and
//     TestPrometheusGuest (build tag kernel, in the test VM): the real
//     `ipvs-proxy run` in a node namespace is scraped by Debian's
//     `prometheus` as job="kube-proxy", with kubernetes-mixin's kube-proxy
//     alerts (testdata/kube-proxy-alerts.yaml) and the component's
//     PrometheusRule loaded as rule files, while Services and
//     EndpointSlices change; every query of kubernetes-mixin's kube-proxy
//     dashboard (testdata/kube-proxy-dashboard.yaml) evaluates non-empty
//     through Prometheus' HTTP API, KubeProxyDown and
//     KubeProxyInstanceUnreachable are inactive, and every rule evaluates
//     without error.
//
// It owns only what it starts: its API server, the VM, and in the VM the
// node namespace, the proxy and Prometheus (listening on the node
// namespace's loopback only).
package prometheus
