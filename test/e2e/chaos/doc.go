// Package chaos is the kill -9 and tampering test: the real
// `ipvs-proxy run` binary programs a node network namespace in the test VM
// from a real API server (package bed/apiserver, on the host), on the bed
// of package bed/churn, while a churner changes Services and
// EndpointSlices through the API. The proxy is killed
// with SIGKILL at random points (during its initial full sync, during
// partial syncs, between them) and restarted; after every restart the
// kernel must converge to exactly what `ipvs-proxy plan` prints for the same
// objects (IPVS, kube-ipvs0, ipsets, iptables) with nothing leaked, and
// traffic to a steady service must flow. Then the kernel is tampered with —
// a virtual server deleted, a rogue (protected) address added on
// kube-ipvs0, a chain flushed, an ipset entry deleted — and each must be
// repaired by the next full resync.
//
// Two halves, one package:
//
//   - TestChaos (host, no build tag) starts the API server, writes two
//     kubeconfigs (the guest's view, https://10.0.2.100:PORT, for the test;
//     https://127.0.0.1:PORT for the proxy), builds the ipvs-proxy binary
//     and this package's kernel test binary, and boots the VM with the API
//     server's port forwarded;
//   - TestChaosGuest (build tag kernel, in the VM) does the rest. The proxy
//     runs inside the node namespace, which has no route to the host: the
//     test relays 127.0.0.1:PORT in the node namespace to 10.0.2.100:PORT.
//
// Run:
//
//	cd test/e2e && go test -count=1 -v -run TestChaos ./chaos            # CHAOS_KILLS=3
//	cd test/e2e && CHAOS_KILLS=100 go test -count=1 -v -timeout 60m -run TestChaos ./chaos
//
// Environment: CHAOS_KILLS (default 3), CHAOS_SEED (default 1),
// CHAOS_SERVICES (churned services, default 20). The report is logged
// between CHAOS-REPORT-BEGIN and CHAOS-REPORT-END; docs/reliability.md
// keeps the latest figures. Nothing outside the VM and the host's loopback
// API server is touched.
package chaos
