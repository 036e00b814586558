package guard

import (
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// APIServerService is the default/kubernetes Service: its endpoints are
// the API server's own addresses at its own port, by design.
var APIServerService = types.NamespacedName{Namespace: "default", Name: "kubernetes"}

// CheckEndpoint is the guard's verdict on a real server a:port of Service
// svc (an EndpointSlice endpoint): protected, and not to be used, when a
// is a cloud platform address or inside a service CIDR (an endpoint may
// not be a Service VIP: traffic would loop through the proxy or reach
// what the VIP's own Service serves, masqueraded as the node), or when it
// is a node's or the API server's address at a protected node port
// (--protected-node-ports): a tenant's NodePort would hand out the node's
// own sshd, etcd or kubelet, masqueraded as the node. The
// default/kubernetes Service and the namespaces of
// --node-endpoint-namespaces may have such endpoints. The never-a-VIP
// classes are refused by the conversion first (Special).
func (g *Guard) CheckEndpoint(svc types.NamespacedName, a netip.Addr, port uint16) Verdict {
	a = Key(a)
	if what := platform(a, g.platform); what != "" {
		return Verdict{Protected: true, Reason: model.ReasonCloudPlatform, Detail: what + ": a cloud platform address is never a real server"}
	}
	for _, p := range g.services {
		if p.Contains(a) {
			return Verdict{Protected: true, Reason: model.ReasonServiceIP, Detail: "inside the service CIDR " + p.String() + " (--service-cidrs): a Service VIP is never a real server"}
		}
	}
	if svc == APIServerService {
		return Verdict{}
	}
	if _, ok := slices.BinarySearch(g.endpointNS, svc.Namespace); ok {
		return Verdict{}
	}
	node, isNode := g.nodes[a]
	_, api := g.apiServers[a]
	_, local := g.local[a]
	if !isNode && !api && !local {
		return Verdict{}
	}
	for _, r := range g.ports {
		if r.First <= port && port <= r.Last {
			whose := "the API server's address"
			switch {
			case isNode:
				whose = "the address of node " + node.String()
			case local:
				whose = "an address of this node"
			}
			return Verdict{Protected: true, Reason: model.ReasonNodeServicePort, Node: node.name, Local: local,
				Detail: fmt.Sprintf("%s at port %d, in --protected-node-ports (%s): only default/kubernetes and --node-endpoint-namespaces may have such a real server", whose, port, r)}
		}
	}
	return Verdict{}
}
