// Package events proves, against a real kube-apiserver (package apiserver,
// in-process), that refusal Events scale with the cluster and not with
// nodes × Services: many in-process proxy reporters (internal/events, the
// code `ipvs-proxy run` uses, one per simulated node, each with its own
// Event recorder and its own candidacy for the events Lease) plan one
// hostile Service, and the Events on it are counted; and that a Node
// claiming a Service's ClusterIP gets one Warning Event for the cluster.
//
// It owns only the objects it creates on its test server.
package events
