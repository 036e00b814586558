// Package node runs the shipped DaemonSet on a real node: in the test VM, a
// kubelet built from k8s.io/kubernetes (v1.34.4, scripts/build-k8s.sh) with
// Debian's containerd, runc and CNI reference plugins registers itself with
// the host's test API server, where kube-controller-manager's DaemonSet,
// EndpointSlice and ServiceAccount controllers and kube-scheduler run in
// process (package cluster). The images come from OCI layout tarballs
// imported with `ctr images import`, never from a registry: the release
// image (tools/ociimage, as `make release` assembles it, amd64 only),
// kube-proxy's (make kube-proxy's binary), agnhost's (built from
// k8s.io/kubernetes, its netexec the backend pod) and package node's
// testpod (the pod sandbox's pause process).
//
// TestNode (host) is the control plane of each scenario and boots the VM
// once per scenario; the guest halves (TestInstallGuest, TestMigrateGuest,
// TestSwapGuest, TestHelmGuest) start the runtime and the kubelet, check
// the DaemonSet's own pod (init containers, hostNetwork, readiness after
// the first full sync, its log through the API server) and count the
// requests of a client on the node through a ClusterIP and a NodePort
// while kube-proxy is replaced, by the overlay or `helm install`, or its
// image swapped. `make test-node` runs it (mk/node.mk); docs/testing.md
// has what it shows and how long it takes.
//
// It owns what it creates on its own test API server and in the VM's
// throwaway root; it never talks to a registry or a real cluster.
package node
