// Package planner turns the cluster model and the node's options into the
// desired state of one node: IPVS virtual servers, kube-ipvs0 addresses,
// ipsets, iptables rules, and every refusal with its reason. It is pure: no
// kernel, no API server, no clock, no randomness; the same input always
// gives byte-for-byte the same State.
package planner

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// State is everything one node must hold. Every slice is sorted. Treat it
// as read-only: it is the planner's answer, compared against the kernel.
type State struct {
	// VirtualServers are sorted by ipvs.CompareKeys (address, port,
	// protocol), each one's RealServers by ipvs.CompareRealServers. No two
	// virtual servers share a RealServers slice.
	VirtualServers []ipvs.VirtualServer
	// Addresses are the /32 and /128 prefixes for kube-ipvs0, sorted; none is
	// protected by the node-IP guard.
	Addresses []netip.Prefix
	// IPSets are every set of iptables.SetSpecs for every planned family
	// (possibly empty), sorted by name, entries by iptables.CompareEntries.
	IPSets []iptables.IPSet
	// Rulesets holds one ruleset per family the node plans for: IPv4 first.
	Rulesets []iptables.Ruleset
	// Refusals are the conversion's and the planner's, sorted by service,
	// field, address, reason and message, without duplicates.
	Refusals []model.Refusal
}
