// Package guard tests the node-IP guard's inputs against a real
// kube-apiserver (test/e2e/apiserver, in-process, no VM): what the API
// server itself writes — the kubernetes Service, its EndpointSlice — and
// what the proxy makes of it, through the same informers, sync loop and
// planner `run` uses, with the kernel replaced by a recorder.
package guard
