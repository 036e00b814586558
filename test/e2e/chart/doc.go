// Package chart renders the Helm chart charts/ipvs-proxy with a real helm
// (built from its Go module by scripts/build-helm.sh; make test-chart) and
// proves it against the kustomizations of deploy/ and the real API server:
//
//   - `helm lint --strict` passes for every mode;
//   - for each mode, the chart renders the same DaemonSet, RBAC,
//     ServiceAccount and ConfigMaps as the kustomization of the same name
//     (deploy/base, deploy/overlays/*), and with monitoring.enabled the same
//     Service, ServiceMonitor and PrometheusRule as the monitoring component;
//     only the labels that mark objects (Helm's, part-of), the config file's comments and kustomize's
//     ConfigMap name hash may differ;
//   - every mode's objects pass server-side apply with dry-run=All and strict
//     field validation on the API server of package apiserver;
//   - wrong values (an unknown mode or distribution, a kube-proxy mode outside
//     kube-system) are refused by name.
//
// It owns nothing but the temporary files helm reads and the objects it
// applies to its test server. Without IPVS_PROXY_HELM (the helm binary)
// the tests that run helm skip (make test-chart builds helm and sets it);
// those that compare the chart's copies of deploy/'s config file and alerts
// with the originals always run.
package chart
