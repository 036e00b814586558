package convert

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// NodeFromObject converts one Node: its name, labels (zone included), pod
// CIDRs and
// every address of status.addresses that reads as an IP, whatever its type
// (a Hostname, InternalDNS or ExternalDNS entry that is an IP literal is a
// node address too). Addresses are read leniently (guard.ParseLenient:
// trimmed, zone dropped, leading-zero octets as decimal, IPv4-mapped
// unmapped), because protecting too much is safe: an address not in
// canonical form is protected all the same and refused, with the Node as
// its subject (model.NodeSubject), naming the form it was written in. An InternalIP or
// ExternalIP entry that is no address at all is refused and protects
// nothing; a name in a Hostname or DNS entry is skipped. An entry written
// ADDR/LEN protects ADDR alone, never the prefix, and is refused for its
// form all the same.
func NodeFromObject(n *corev1.Node) (model.Node, []model.Refusal) {
	if n == nil {
		return model.Node{}, nil
	}
	r := &refuser{subject: model.NodeSubject(n.Name)}
	node := model.Node{Name: n.Name}
	if len(n.Labels) > 0 {
		node.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			node.Labels[k] = v
		}
	}
	for i, a := range n.Status.Addresses {
		field := fmt.Sprintf("status.addresses[%d]", i)
		ip, canonical, ok := guard.ParseLenient(a.Address)
		prefixed := false
		if !ok {
			// ADDR/LEN, as `ip addr` shows it: the node has ADDR, and
			// nothing says it has the rest of the prefix.
			if p, err := netip.ParsePrefix(strings.TrimSpace(a.Address)); err == nil {
				ip, ok, prefixed = p.Addr().Unmap(), true, true
			}
		}
		switch {
		case !ok && (a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalDNS || a.Type == corev1.NodeExternalDNS):
			continue
		case !ok:
			r.add(field, a.Address, model.ReasonInvalidAddress, "not an IP address; not protected as a node address")
			continue
		case prefixed:
			r.add(field, a.Address, model.ReasonInvalidAddress,
				"an address with a prefix length, not an IP address; protected as node address %s alone, never the whole prefix", ip)
		case !canonical:
			r.add(field, a.Address, model.ReasonInvalidAddress,
				"not an IP address in canonical form; protected as node address %s all the same", ip)
		}
		if !slices.Contains(node.Addresses, ip) {
			node.Addresses = append(node.Addresses, ip)
		}
	}
	node.PrimaryIPs = primaryIPs(n.Status.Addresses)
	node.PodCIDRs = podCIDRs(&n.Spec, r)
	return node, r.out
}

// podCIDRs are the node's spec.podCIDRs, or spec.podCIDR when only it is
// set, the first of each family; one that does not parse is refused (the
// Local policy's fallback then serves no pod of that family: see
// iptables.RulesConfig.NodePodCIDR).
func podCIDRs(spec *corev1.NodeSpec, r *refuser) []netip.Prefix {
	field, cidrs := "spec.podCIDRs", spec.PodCIDRs
	if len(cidrs) == 0 && spec.PodCIDR != "" {
		field, cidrs = "spec.podCIDR", []string{spec.PodCIDR}
	}
	var out []netip.Prefix
	var fams [2]bool
	for i, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Is4In6() {
			r.add(fmt.Sprintf("%s[%d]", field, i), c, model.ReasonInvalidAddress, "not a CIDR; no pod of this node is served by the Local policy's fallback in its family")
			continue
		}
		f := 0
		if p.Addr().Is6() {
			f = 1
		}
		if !fams[f] {
			fams[f] = true
			out = append(out, p.Masked())
		}
	}
	return out
}

// primaryIPs are the node IPs kube-proxy takes as the node's primary ones
// (k8s.io/component-helpers/node/util.GetNodeHostIPs): the InternalIPs,
// then the ExternalIPs, in order; the first of them, and the first of the
// other family after it.
func primaryIPs(as []corev1.NodeAddress) []netip.Addr {
	var out []netip.Addr
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range as {
			ip, _, ok := guard.ParseLenient(a.Address)
			if a.Type != typ || !ok {
				continue
			}
			if len(out) == 0 || (len(out) == 1 && ip.Is4() != out[0].Is4()) {
				out = append(out, ip)
			}
		}
	}
	return out
}
