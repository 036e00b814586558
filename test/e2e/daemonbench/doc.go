// Package daemonbench benchmarks `ipvs-proxy run` at scale: the real binary
// in a node network namespace of the test VM, watching a real API server on
// the host that holds DAEMONBENCH_SERVICES ClusterIP Services (default
// 10,000) with one EndpointSlice of DAEMONBENCH_ENDPOINTS endpoints each
// (default 10), against the kernel floor of the same content.
//
// Two halves, one VM boot, as in test/e2e/daemon:
//
//   - TestDaemonBench (host, no build tag) skips unless DAEMONBENCH=1. It
//     starts the API server, creates the Nodes, Services and EndpointSlices
//     with concurrent workers (DAEMONBENCH_WORKERS, default 16), installs
//     deploy/base for the proxy's ServiceAccount (after the creates: its
//     token lives an hour), writes the two kubeconfigs, builds ipvs-proxy
//     and this package's kernel test binary, and boots the VM with the API
//     server's port forwarded and DAEMONBENCH_MEM MiB (default 4096);
//   - TestDaemonBenchGuest (build tag kernel, in the VM) creates a ktest
//     node with four real pods (10.244.0.1-4, the only endpoints on this
//     node; the other endpoints are pod IPs of ten other nodes), relays the
//     API port into the node namespace, starts `ipvs-proxy run` there and
//     measures:
//     1. the first full sync: from the process start to its first
//     successful full sync, read from the proxy's JSON debug log (the
//     "sync done" record, polled every 200 ms, and its "took"; the
//     "sync applied" record gives the split into IPVS, rules and binds),
//     then checked against the kernel with `ipvsadm -S -n` and
//     `ip -o addr show dev kube-ipvs0`;
//     2. the kernel floor of exactly that content: what the proxy's
//     namespace holds (`ipvsadm -S -n`, the kube-ipvs0 addresses,
//     `ipset save`, `iptables-save`, `ip6tables-save`) replayed into a
//     fresh node namespace by `ipvsadm -R`, `ip -batch -` (`address add
//     ... dev kube-ipvs0`, dummy created untimed), `ipset restore` and
//     `iptables-restore` + `ip6tables-restore`, after the proxy's namespace was
//     emptied (`ipvsadm -C`, kube-ipvs0 deleted; the IPVS service hash is
//     global to all namespaces);
//     3. network programming latency over DAEMONBENCH_CHANGES single
//     EndpointSlice updates, each replacing one endpoint address of one
//     slice: from just before the API write to the first netlink poll
//     (IPVS_CMD_GET_DEST of that one virtual server, every 10 ms) that
//     shows the new real server; the proxy's own
//     ipvs_proxy_network_programming_duration_seconds histogram (trigger
//     annotation set to the same instant) is reported beside it;
//     4. the proxy's peak RSS: VmHWM of /proc/PID/status.
//
// The figures are printed between DAEMONBENCH-REPORT-BEGIN and
// DAEMONBENCH-REPORT-END. Run:
//
//	make bench-daemon                                    # 10,000 × 10, 100 changes
//	make bench-daemon DAEMONBENCH_SERVICES=2000
//	cd test/e2e && DAEMONBENCH=1 go test -count=1 -v -timeout 120m -run TestDaemonBench ./daemonbench
//
// TestVsKubeProxy and TestVsKubeProxyGuest (`make bench-vs-kube-proxy`,
// BENCHVS=1) run kube-proxy v1.34 in IPVS mode (package kubeproxy) and
// `ipvs-proxy run` side by side on the same objects: for each size in
// BENCHVS_SIZES one VM boot, each proxy in a fresh node namespace, its first
// sync until the kernel holds what the API asks for, one change p50/p99
// beside a bare informer in the same namespace (the floor), peak RSS and
// CPU; the figures between BENCHVS-REPORT-BEGIN and BENCHVS-REPORT-END.
//
// Nothing outside the VM and the host's loopback API server is touched.
package daemonbench
