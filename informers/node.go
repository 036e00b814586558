package informers

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

// NodeFromObject converts one Node: its name, labels (zone included) and
// every address of status.addresses that reads as an IP, whatever its type
// (a Hostname, InternalDNS or ExternalDNS entry that is an IP literal is a
// node address too). Addresses are read leniently (guard.ParseLenient:
// trimmed, zone dropped, leading-zero octets as decimal, IPv4-mapped
// unmapped), because protecting too much is safe: an address not in
// canonical form is protected all the same and refused, with the Node as
// its subject (model.NodeSubject), naming the form it was written in. An InternalIP or
// ExternalIP entry that is no address at all is refused and protects
// nothing; a name in a Hostname or DNS entry is skipped.
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
		switch {
		case !ok && (a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalDNS || a.Type == corev1.NodeExternalDNS):
			continue
		case !ok:
			r.add(field, a.Address, model.ReasonInvalidAddress, "not an IP address; not protected as a node address")
			continue
		case !canonical:
			r.add(field, a.Address, model.ReasonInvalidAddress,
				"not an IP address in canonical form; protected as node address %s all the same", ip)
		}
		if !slices.Contains(node.Addresses, ip) {
			node.Addresses = append(node.Addresses, ip)
		}
	}
	node.PrimaryIPs = primaryIPs(n.Status.Addresses)
	return node, r.out
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
