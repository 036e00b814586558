package model

// AddressKind is which field of a Service asked for a virtual server's
// address: its ClusterIPs, a node's address for its NodePort, its load
// balancer ingress or its externalIPs. The per-Service statistics are
// labelled by it (docs/operations.md).
type AddressKind uint8

// The address kinds; the zero value is no Service's (a virtual server
// adopted or read from the kernel).
const (
	KindNone AddressKind = iota
	KindClusterIP
	KindNodePort
	KindLoadBalancer
	KindExternalIP
)

// AddressKinds are the kinds a Service's virtual server has, in this order.
var AddressKinds = [...]AddressKind{KindClusterIP, KindNodePort, KindLoadBalancer, KindExternalIP}

// String is the kind as the metrics' kind label says it: cluster,
// node_port, load_balancer, external; "" for KindNone.
func (k AddressKind) String() string {
	switch k {
	case KindClusterIP:
		return "cluster"
	case KindNodePort:
		return "node_port"
	case KindLoadBalancer:
		return "load_balancer"
	case KindExternalIP:
		return "external"
	}
	return ""
}
