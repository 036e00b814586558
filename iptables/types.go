// Package iptables owns the proxy's fixed iptables chains and the ipsets they
// match. The rule set is constant in size: per-service data lives in ipsets,
// programmed entry by entry. It plans the rules (Rules), renders them
// (`iptables-restore`, `ipset save` text) and syncs them (Syncer, over the
// SetKernel and RuleRunner interfaces); the kernel side, the ipset netlink
// client and the iptables binaries, is iptables/kernel. It never touches
// chains or sets whose names it did not create.
package iptables

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// IPSet is one ipset and its entries, as `ipset create` / `ipset add` make it.
type IPSet struct {
	Name string
	// Type is the ipset type: "hash:ip", "hash:ip,port", "hash:ip,port,ip",
	// "hash:ip,port,net", "bitmap:port".
	Type string
	// Family is "inet" or "inet6" (ignored for bitmap:port).
	Family  string
	Comment string
	Entries []Entry
}

// Entry is one ipset member. Which fields are used depends on the set type:
// hash:ip uses IP; hash:ip,port IP, Protocol and Port; hash:ip,port,ip and
// hash:ip,port,net add Net (a /32 or /128 for an address); bitmap:port uses Port.
type Entry struct {
	IP       netip.Addr
	Protocol model.Protocol
	Port     uint16
	Net      netip.Prefix
}

// Rule is one iptables rule spec, its words as iptables takes them, e.g.
// []string{"-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "ACCEPT"}.
type Rule []string

// Chain is one chain and its rules in order. For a built-in chain
// (PREROUTING, OUTPUT, ...) the rules are only the proxy's jump rules.
type Chain struct {
	Name    string
	Builtin bool
	Rules   []Rule
}

// Table is one iptables table ("nat", "filter") and the proxy's chains in it.
type Table struct {
	Name   string
	Chains []Chain
}

// Ruleset is the proxy's whole iptables state for one family.
type Ruleset struct {
	// Family is "inet" (iptables) or "inet6" (ip6tables).
	Family string
	Tables []Table
}
