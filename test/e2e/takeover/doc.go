// Package takeover tests the way in and the way back: ipvs-proxy takes over a live
// node from kube-proxy's IPVS mode, and hands it back, under traffic.
//
// kube-proxy v1.34.4 (package kubeproxy; `make kube-proxy` builds it once
// into .cache/kube-proxy) programs a node namespace of the test VM from the
// host's in-process API server with a realistic mix: ClusterIP, NodePort
// TCP/UDP/SCTP, an externalIP, a LoadBalancer with
// loadBalancerSourceRanges (its status written by the test), an
// externalTrafficPolicy Local LoadBalancer with its healthCheckNodePort,
// internalTrafficPolicy Local, ClientIP affinity, a dual-stack Service, a
// terminating endpoint, and a few hundred ordinary Services (EndpointSlices
// written by the test).
//
// Two halves, one VM boot:
//
//   - TestTakeover (host, no build tag) starts the API server, installs
//     deploy/base for ipvs-proxy's ServiceAccount and gives kube-proxy
//     kubeadm's (kube-system/kube-proxy bound to system:node-proxier),
//     writes their kubeconfigs, builds ipvs-proxy and this package's
//     kernel test binary, and boots the VM with the API server's port
//     forwarded. It runs only with TAKEOVER=1, which `make test-takeover`
//     sets after building kube-proxy;
//   - TestTakeoverGuest (build tag kernel, in the VM) does the rest.
//
// A request that fails is judged from a packet capture of the node
// namespace (flowVerdict): a segment the node did not forward counts; the
// test's own backend or client being late, or IPVS matching a reply (an
// answer or a SYN-ACK) to another connection of the same client port and
// real server that the capture shows, is printed with its evidence and
// excused. The TCP loops dial with dialTCP, which keeps the source port of
// a dial that fails, so a dial timeout is judged the same way.
//
// Run:
//
//	make test-takeover
//	make test-takeover TAKEOVER_CYCLES=3   # three takeovers and rollbacks in one boot
//
// Nothing outside the VM and the host's loopback API server is touched.
package takeover
