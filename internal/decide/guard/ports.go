package guard

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// DefaultProtectedNodePorts is --protected-node-ports' default: the ports
// of the node's own services a Service must never capture on a node
// address — ssh, BGP, etcd, the API server, the kubelet (healthz, metrics
// API, read-only), the proxy's health port, the controller manager and the
// scheduler.
const DefaultProtectedNodePorts = "22,179,2379-2380,6443,10248-10250,10256,10257,10259"

// covers reports whether the listener l serves proto:a:port.
func covers(l model.Listener, proto model.Protocol, a netip.Addr, port uint16) bool {
	if l.Protocol != proto || l.Port != port {
		return false
	}
	la := Key(l.Addr)
	switch {
	case la == a:
		return true
	case la == netip.IPv6Unspecified():
		return true
	case la == netip.IPv4Unspecified():
		return a.Is4()
	}
	return false
}

// CheckPort is the guard's verdict on a node address a serving proto:port
// at L4 (a NodePort, or an externalIP or LoadBalancer IP that is this
// node's own address): protected when the port is one of the protected
// node ports (--protected-node-ports) or the node itself listens on it
// there (the kernel's socket table): an IPVS virtual server would take the
// node's own service (sshd, the API server, the kubelet) and hand it to a
// Service's pods.
func (g *Guard) CheckPort(proto model.Protocol, a netip.Addr, port uint16) Verdict {
	a = Key(a)
	for _, r := range g.ports {
		if r.First <= port && port <= r.Last {
			return Verdict{Protected: true, Reason: model.ReasonNodeServicePort,
				Detail: fmt.Sprintf("port %d of this node is in --protected-node-ports (%s)", port, r)}
		}
	}
	if i := slices.IndexFunc(g.listeners, func(l model.Listener) bool { return covers(l, proto, a, port) }); i >= 0 {
		return Verdict{Protected: true, Reason: model.ReasonNodeServicePort,
			Detail: "this node itself serves " + g.listeners[i].String()}
	}
	return Verdict{}
}
