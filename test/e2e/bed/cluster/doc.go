// Package cluster is the multi-node test bed: Kubernetes'
// own controllers in-process beside the test API server
// (test/e2e/bed/apiserver), and, in the test VM, three node namespaces on one
// LAN bridge, each running the real `ipvs-proxy run` and a node agent that
// plays kubelet for the Pods bound to its node.
//
//   - controllers.go: kube-controller-manager's endpointslice,
//     endpointslice-mirroring and serviceaccount controllers, from
//     k8s.io/kubernetes v1.34.4, so EndpointSlices and their conditions
//     (ready, serving, terminating) are written by Kubernetes itself.
//   - scheduler.go: kube-scheduler (default profile), so Pods created
//     without spec.nodeName are bound, as the upstream e2e tests expect.
//   - servicecidrs.go: the servicecidr controller (extra ServiceCIDRs
//     turn Ready, so cluster IPs come from more than one range).
//   - node.go: the Node object a bed node registers, as kubelet would.
//   - workloads.go: the deployment, replicaset, replication and root CA
//     publisher controllers the upstream e2e.test needs (its run only).
//   - gc.go: the garbage collector (a deleted Service's EndpointSlices,
//     a deleted ReplicaSet's Pods), for the upstream e2e.test.
//   - daemonset.go: the DaemonSet controller (a pod per node, rolling
//     updates within maxUnavailable), for the upstream e2e.test.
//   - dns.go: the cluster DNS of the upstream bed (CoreDNS from
//     tools/coredns behind kube-system/kube-dns) and the resolv.conf
//     kubelet gives a pod.
//   - kubelet.go, tunnel.go: the kubelet API a node agent serves (exec,
//     kubelet's own streaming code) and the API server's way to it (its
//     egress selector's HTTP CONNECT to a qemu host forward).
//   - container.go, podstatus.go, netexec.go, request.go and the rest:
//     what a node agent needs to run a Pod's containers and report them.
//
// The suites of test/e2e/cluster build the nodes on it in the VM.
//
// It owns the namespaces, links and processes it creates and the API
// objects of the test namespaces; it never touches the VM's root
// namespace beyond what test/ktest does, the agents' kubelet ports
// (10250-10252, for qemu's host forwards) and, for the upstream run, the
// /agnhost and /rootfs links in the VM's root filesystem (and, with
// cluster DNS, a /usr/local/bin/nslookup link to busybox when the VM has
// none).
package cluster
