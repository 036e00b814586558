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
// It also installs kubeadm v1.34's kube-proxy objects (KubeadmObjects,
// InstallKubeadm; the distributions' objects are in its testdata) and
// resolves a DaemonSet's pod as a kubelet would (ResolvePod). Other e2e
// packages use Install to put the base on their server and run the real
// proxy with the ServiceAccount's credentials.
package deploy
