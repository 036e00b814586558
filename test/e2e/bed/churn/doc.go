// Package churn is the bed of the chaos test and the daemon soak: one node
// namespace in the test VM with a steady Service's pods, a client pod and a
// client on the LAN, the API server of the host relayed into it (NewBed);
// a churner of Services, EndpointSlices and Nodes through the API
// (Cluster); and the real `ipvs-proxy run` with the comparison of the
// node's kernel (IPVS, kube-ipvs0, ipsets, iptables) with what
// `ipvs-proxy plan` prints for the same objects (Env.Converge).
//
// It reads its inputs from the guest's environment: VMTEST_API_ADDR,
// CHAOS_KUBECONFIG_GUEST, CHAOS_KUBECONFIG_PROXY and CHAOS_PROXY_BIN. It
// owns the namespaces, processes and API objects it creates.
package churn
