// Package node runs the shipped DaemonSet on a real node: in the test VM, a
// kubelet built from k8s.io/kubernetes (v1.34.4, scripts/build-k8s.sh) with
// Debian's containerd, runc and CNI reference plugins registers itself with
// the host's test API server, where kube-controller-manager's DaemonSet,
// EndpointSlice and ServiceAccount controllers and kube-scheduler run in
// process (package cluster). The images come from OCI layout tarballs
// imported with `ctr images import`, never from a registry: the release
// image (tools/ociimage, as `make release` assembles it, amd64 only) and
// the test image of package node's testpod (the pod sandbox's pause
// process and an HTTP backend).
//
// TestNode (host) applies the replace-kube-proxy overlay next to kubeadm's
// kube-proxy objects, as an operator would, and boots the VM;
// TestNodeGuest (guest) starts the runtime and the kubelet and checks the
// DaemonSet's own pod: its init containers, hostNetwork, privileges,
// volumes, ServiceAccount token, and readiness after the first full sync,
// then serves a ClusterIP with real requests. `make test-node` runs it
// (mk/node.mk); docs/testing.md has what it shows and how long it takes.
//
// It owns what it creates on its own test API server and in the VM's
// throwaway root; it never talks to a registry or a real cluster.
package node
