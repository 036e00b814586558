// Package guard tests the node-IP guard against a real kube-apiserver
// (test/e2e/bed/apiserver, in-process).
//
//   - TestInClusterAPIServer (no VM): what the API server itself writes —
//     the kubernetes Service, its EndpointSlice — and what the proxy makes
//     of it, through the same informers, sync loop and planner `run` uses,
//     with the kernel replaced by a recorder.
//   - TestGuardVM (host) and TestGuardGuest (build tag kernel, in the test
//     VM): the real `ipvs-proxy run` in a node namespace under an address
//     monitor on kube-ipvs0, given every class of hostile Service and Node
//     of docs/security.md at once, at startup, while running and across a
//     restart; no protected address is ever bound.
package guard
