package guard

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Trust is what the API server allocates, and so what no Node can claim.
// The trust order of addresses puts the Services' ClusterIPs above a
// Node's own word: a kubelet writes its Node's status.addresses (and a
// compromised one writes what it likes), the API server alone allocates
// ClusterIPs, from the service CIDRs. A Node that claims 10.96.0.10 must
// not make every node refuse the cluster DNS.
type Trust struct {
	// ServiceCIDRs are the ranges ClusterIPs are allocated from
	// (--service-cidrs): no address inside is a node address or a pod's.
	ServiceCIDRs []netip.Prefix
	// ServiceIPs are the Services' ClusterIPs known now, sorted.
	ServiceIPs []netip.Addr
}

// Field paths of the Node refusals.
const (
	FieldNodeAddresses = "status.addresses"
	FieldNodePodCIDRs  = "spec.podCIDRs"
)

// Narrowest prefix lengths a Node's pod range may have: wider, it is junk
// that would take every VIP of its family with it (a node's range is a
// slice of the cluster CIDR, /24 or /64 by kube-controller-manager's
// default).
const (
	minPodBits4 = 8
	minPodBits6 = 32
)

// TrustNodes is nodes with what the trust order refuses of them taken out,
// and a refusal for each, its Node the subject: an address inside a
// service CIDR or equal to a Service's ClusterIP (ServiceIP), an address
// of a never-a-VIP class (unspecified, loopback, link-local, ...), which
// protects nothing; a pod range (spec.podCIDRs) that overlaps a service
// CIDR, holds a ClusterIP or is wider than a /8 (IPv4) or /32 (IPv6).
// Neither nodes nor their lists are modified; the result shares what it
// does not change.
func TrustNodes(nodes []model.Node, t Trust) ([]model.Node, []model.Refusal) {
	cidrs := validPrefixes(t.ServiceCIDRs)
	ips := t.ServiceIPs
	if !slices.IsSortedFunc(ips, netip.Addr.Compare) {
		ips = slices.Clone(ips)
		slices.SortFunc(ips, netip.Addr.Compare)
	}
	var refusals []model.Refusal
	out := nodes
	own := func(i int) *model.Node {
		if len(out) > 0 && &out[0] == &nodes[0] {
			out = slices.Clone(nodes)
		}
		return &out[i]
	}
	for i := range nodes {
		n := &nodes[i]
		refuse := func(field, value string, r model.Reason, msg string) {
			refusals = append(refusals, model.Refusal{Subject: model.NodeSubject(n.Name), Field: field, Address: value, Reason: r, Message: msg})
		}
		if kept, changed := keep(n.Addresses, func(a netip.Addr) bool {
			r, msg := untrustedAddr(a, cidrs, ips)
			if r != "" {
				refuse(FieldNodeAddresses, a.String(), r, msg)
			}
			return r == ""
		}); changed {
			own(i).Addresses = kept
		}
		if kept, changed := keep(n.PodCIDRs, func(p netip.Prefix) bool {
			msg := untrustedPods(p, cidrs, ips)
			if msg != "" {
				refuse(FieldNodePodCIDRs, p.String(), model.ReasonServiceIP, msg)
			}
			return msg == ""
		}); changed {
			own(i).PodCIDRs = kept
		}
	}
	slices.SortFunc(refusals, model.Refusal.Compare)
	return out, refusals
}

// keep is the elements of s ok keeps, and whether it dropped any; s
// itself when it did not.
func keep[T any](s []T, ok func(T) bool) ([]T, bool) {
	var kept []T
	changed := false
	for j, v := range s {
		if ok(v) {
			if changed {
				kept = append(kept, v)
			}
			continue
		}
		if !changed {
			kept, changed = slices.Clone(s[:j]), true
		}
	}
	if !changed {
		return s, false
	}
	return slices.Clip(kept), true
}

// untrustedAddr is why a Node address protects nothing, "" when it does.
func untrustedAddr(a netip.Addr, cidrs []netip.Prefix, ips []netip.Addr) (model.Reason, string) {
	if c := classOf(a); c != nil {
		return c.reason, c.what + ": never a node address; not protected, nothing unprogrammed"
	}
	k := Key(a)
	for _, p := range cidrs {
		if p.Contains(k) {
			return model.ReasonServiceIP, "inside the service CIDR " + p.String() + " (--service-cidrs): the API server allocates these to Services and no Node can claim one; not protected as a node address, the Services stay programmed"
		}
	}
	if _, ok := slices.BinarySearchFunc(ips, k, netip.Addr.Compare); ok {
		return model.ReasonServiceIP, "the ClusterIP of a Service: the API server allocated it and no Node can claim it; not protected as a node address, the Service stays programmed"
	}
	return "", ""
}

// untrustedPods is why a Node's pod range protects nothing, "" when it
// does.
func untrustedPods(p netip.Prefix, cidrs []netip.Prefix, ips []netip.Addr) string {
	p = p.Masked()
	if p.Addr().Is4() && p.Bits() < minPodBits4 || p.Addr().Is6() && p.Bits() < minPodBits6 {
		return "wider than a /" + strconv.Itoa(minPodBits4) + " (IPv4) or /" + strconv.Itoa(minPodBits6) + " (IPv6): not a node's pod range; not protected"
	}
	for _, c := range cidrs {
		if c.Overlaps(p) {
			return "overlaps the service CIDR " + c.String() + " (--service-cidrs); not protected as pod addresses, the Services stay programmed"
		}
	}
	i, _ := slices.BinarySearchFunc(ips, p.Addr(), netip.Addr.Compare)
	if i < len(ips) && p.Contains(ips[i]) {
		return "holds the ClusterIP " + ips[i].String() + " of a Service; not protected as pod addresses, the Services stay programmed"
	}
	return ""
}
