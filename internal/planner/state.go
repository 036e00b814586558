// Package planner turns the cluster model and the node's options into the
// desired state of one node: IPVS virtual servers, kube-ipvs0 addresses,
// ipsets, iptables rules, and every refusal with its reason. It is pure: no
// kernel, no API server, no clock, no randomness; the same input always
// gives byte-for-byte the same State.
package planner

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// State is everything one node must hold. Every slice is sorted.
type State struct {
	VirtualServers []ipvs.VirtualServer
	// Addresses are the /32 and /128 prefixes for kube-ipvs0.
	Addresses []netip.Prefix
	IPSets    []iptables.IPSet
	// Rulesets holds one ruleset per family the node plans for.
	Rulesets []iptables.Ruleset
	Refusals []model.Refusal
}
