// Package guard is the node-IP guard's pure deciding code: from what the
// proxy knows about the node and the cluster it answers which addresses
// must never be bound on kube-ipvs0, and why. It reads nothing by itself
// (no kernel, no API server, no files) and imports no kernel package; the
// daemon, the planner, `plan` and `recover` hand it their inputs.
package guard
