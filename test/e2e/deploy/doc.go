// Package deploy renders the kustomizations under the repository's deploy/
// directory with kustomize's own Go API (sigs.k8s.io/kustomize/api/krusty,
// the code behind `kubectl kustomize`) and applies them to the test API
// server of package apiserver with server-side apply, as
// `kubectl apply --server-side [--dry-run=server] -k DIR` would.
//
// It owns only what it applies to that test server. It never reads a
// kubeconfig of its own, never talks to a real cluster, and never writes
// into deploy/.
//
// Its tests prove the manifests against the real kube-apiserver:
//
//   - every overlay passes server-side apply with dry-run=All and strict
//     field validation, without a warning;
//   - the ServiceAccount of the base, with its own bound token and only the
//     ClusterRole and Role the base ships, can make every API call
//     `ipvs-proxy run` makes (the proxy's own informers, Event recorder and
//     events Lease election do them), while each verb either role grants is
//     needed by at least one call and verbs the proxy never uses are
//     Forbidden.
//
// Other e2e packages use Install to put the base on their server and run the
// real proxy with the ServiceAccount's credentials.
package deploy
