// Package daemon is the end-to-end test of `ipvs-proxy run`: the
// real binary programs a node network namespace in the test VM's kernel from
// a real API server on the host, with the ServiceAccount and RBAC that
// deploy/base ships.
//
// Two halves, one VM boot:
//
//   - TestDaemon (host, no build tag) starts the API server
//     (apiserver.Shared), installs deploy/base for its ServiceAccount, writes
//     two kubeconfigs — the admin's as the guest sees the server
//     (https://10.0.2.100:PORT) for the test, the ServiceAccount's on
//     https://127.0.0.1:PORT for the proxy — builds ipvs-proxy and this
//     package's kernel test binary, and boots the VM with the API server's
//     port forwarded;
//   - TestDaemonGuest (build tag kernel, in the VM) creates a ktest node
//     with two pods and a client, relays 127.0.0.1:PORT in the node
//     namespace to 10.0.2.100:PORT (the node namespace has no route to the
//     host), runs `ipvs-proxy run` there, and through the API checks:
//     ClusterIP and NodePort traffic from the client reaches the pods; the
//     node's own IP as an externalIP gives a Warning Event and is not bound
//     on kube-ipvs0; endpoint changes reach the kernel (network-programming
//     latency measured from the API write to the first request answered by
//     the new backend); /healthz, /livez and /metrics answer; with the API
//     server cut off (relay closed, watches broken) the kernel stays
//     untouched and traffic keeps flowing, and a change made meanwhile is
//     applied once it is back; SIGTERM leaves the kernel as it is.
//
// Run:
//
//	cd test/e2e && go test -count=1 -v -run TestDaemon ./daemon
//
// The latencies are logged between DAEMON-REPORT-BEGIN and
// DAEMON-REPORT-END. Nothing outside the VM and the host's loopback API
// server is touched.
package daemon
