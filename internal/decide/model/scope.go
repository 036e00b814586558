package model

// Scope says whether a refusal depends on the node that made it, and so
// which proxy reports it as an Event: one per cluster, or each node its own.
type Scope uint8

const (
	// ScopeNode: the refusal may differ from node to node, because it
	// depends on this node's own interfaces, routes, subnets or address
	// families. Each node reports its own.
	ScopeNode Scope = iota
	// ScopeCluster: every node makes the same refusal from the same API
	// objects and the same DaemonSet-wide flags (a malformed field, a cap,
	// an unknown scheduler, a never-a-VIP address, another Node's address,
	// a source range that fails closed...). One reporter per cluster
	// reports it.
	ScopeCluster
)

// reasonScopes is the scope of every reason code. A code missing here is
// ScopeNode: reported by every node, never lost.
var reasonScopes = map[Reason]Scope{
	// Made by the conversion, which reads nothing of the node.
	ReasonInvalidAddress:        ScopeCluster,
	ReasonInvalidPort:           ScopeCluster,
	ReasonInvalidProtocol:       ScopeCluster,
	ReasonInvalidField:          ScopeCluster,
	ReasonInvalidEndpoint:       ScopeCluster,
	ReasonInvalidSourceRange:    ScopeCluster,
	ReasonTooManyVirtualServers: ScopeCluster,
	ReasonTooManyRealServers:    ScopeCluster,
	// The scheduler list is the proxy's own, the same on every node.
	ReasonUnknownScheduler:      ScopeCluster,
	ReasonInvalidSchedulerFlags: ScopeCluster,
	// Never a VIP on any node.
	ReasonLoopback:    ScopeCluster,
	ReasonUnspecified: ScopeCluster,
	ReasonMulticast:   ScopeCluster,
	ReasonLinkLocal:   ScopeCluster,
	ReasonIPv4Mapped:  ScopeCluster,
	// The built-in cloud platform addresses and --protected-platform-cidrs;
	// --service-cidrs and the Services' ClusterIPs, against a Node's claim
	// or an endpoint.
	ReasonCloudPlatform: ScopeCluster,
	ReasonServiceIP:     ScopeCluster,
	// From the DaemonSet's flags (--cluster-cidr, --protected-cidrs,
	// --ipvs-exclude-cidrs) and the API server every node talks to.
	ReasonPodCIDR:       ScopeCluster,
	ReasonProtectedCIDR: ScopeCluster,
	ReasonExcludedCIDR:  ScopeCluster,
	ReasonAPIServer:     ScopeCluster,
	// Every node knows every Node's addresses; the node that owns the
	// address serves it at L4 (default mode), the others do not: the
	// reporter's Event says which it is.
	ReasonNodeIP: ScopeCluster,
	// Decided among the Services alone.
	ReasonDuplicateVirtual: ScopeCluster,
	ReasonServiceFamily:    ScopeCluster,
	ReasonAddressConflict:  ScopeCluster,
	// This node's own interfaces, gateways, subnets, links, resolvers and
	// families.
	ReasonLocalAddress:      ScopeNode,
	ReasonGateway:           ScopeNode,
	ReasonBroadcast:         ScopeNode,
	ReasonUnsupportedFamily: ScopeNode,
	ReasonNetworkAddress:    ScopeNode,
	ReasonPeer:              ScopeNode,
	ReasonResolver:          ScopeNode,
	ReasonOnLinkSubnet:      ScopeNode,
	// The ports this node listens on (its socket table) decide it.
	ReasonNodeServicePort: ScopeNode,
}

// Scope is the reason's scope (see Scope).
func (r Reason) Scope() Scope {
	return reasonScopes[r]
}
