// Package cluster tests the proxy on the multi-node bed of
// test/e2e/bed/cluster: in the test VM, three node namespaces on one LAN
// bridge, each running the real `ipvs-proxy run` (harness.StartProxy) and a
// node agent that plays kubelet for the Pods bound to its node, against the
// test API server with Kubernetes' own controllers on the host.
//
// Its guest half (build tag kernel) builds the nodes, the LAN and the
// agents, and runs the re-created upstream `[sig-network]` tests named after
// their `It`, the fleet of ipvs-proxy and kube-proxy nodes, the node-IP
// hijack and its offline recovery, and (with CLUSTER_UPSTREAM_DIR) the
// upstream e2e.test itself. Its host tests check the bed's controllers,
// scheduler, DNS and agent pieces against the real API server.
package cluster
