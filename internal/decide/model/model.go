// Package model is the proxy's own plain description of the cluster: service
// ports, their endpoints and the nodes, already validated and converted from
// the Kubernetes API objects. It holds data only; it never talks to the API
// server or to the kernel.
package model

import (
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Protocol is a transport protocol as IPVS and ipset name it.
type Protocol string

// The protocols a service port may use.
const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

// Protocols are the protocols a service port may use, in this order.
var Protocols = [...]Protocol{TCP, UDP, SCTP}

// Known reports whether p is one of Protocols: the protocols IPVS and the
// ipsets serve.
func (p Protocol) Known() bool { return slices.Contains(Protocols[:], p) }

// ServicePortName identifies one port of one Service: the Service's
// namespace and name, and the port's name (empty for a single unnamed
// port). It is kube-proxy's proxy.ServicePortName without the protocol (a
// Service's port names are unique). The zero value names no service. It
// is carried as it is from the informers to the kernel layers' failures
// and back; only the text edges (logs, Events, `plan`) format it.
type ServicePortName struct {
	types.NamespacedName
	Port string
}

// IsZero reports whether n names no service port.
func (n ServicePortName) IsZero() bool { return n == ServicePortName{} }

// String renders the name as "namespace/name:port", or "namespace/name"
// when the port has no name (as kube-proxy's), or "" for the zero value.
func (n ServicePortName) String() string {
	if n.IsZero() {
		return ""
	}
	if n.Port == "" {
		return n.NamespacedName.String()
	}
	return n.NamespacedName.String() + ":" + n.Port
}

// ServicePort is one port of one Service, with every address it is reachable on.
// Addresses that failed validation are not here: they became Refusals.
type ServicePort struct {
	Name     ServicePortName
	Protocol Protocol
	Port     uint16
	// NodePort is 0 when the service has none.
	NodePort uint16
	// Created is the Service's metadata.creationTimestamp (zero when
	// unset): when Services claim the same address, port and protocol the
	// oldest wins, the same on every node and after every restart.
	Created time.Time

	ClusterIPs      []netip.Addr
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// OthersLoadBalancerIPs are the ExternalIPs that are another
	// Service's LoadBalancer IP: refused on every port unless the guard
	// protects the address (a node's, as k3s' servicelb writes it), which
	// then decides as for any externalIP. Nil for almost every Service.
	OthersLoadBalancerIPs []netip.Addr
	// LoadBalancerSourceRanges restricts who may reach the LoadBalancer IPs:
	// a LoadBalancer IP admits only the ranges of its own family. Empty
	// means everyone, unless LoadBalancerFirewall is set.
	LoadBalancerSourceRanges []netip.Prefix
	// LoadBalancerFirewall is set when the Service asks for source ranges
	// (the field or the legacy annotation), whether or not any was usable:
	// with no usable range of its family a LoadBalancer IP admits no
	// source at all (fail closed).
	LoadBalancerFirewall bool

	// ExternalPolicyLocal is externalTrafficPolicy: Local.
	ExternalPolicyLocal bool
	// InternalPolicyLocal is internalTrafficPolicy: Local.
	InternalPolicyLocal bool
	// HealthCheckNodePort is 0 when the service has none.
	HealthCheckNodePort uint16

	// AffinityTimeout is the ClientIP session affinity timeout in seconds;
	// 0 means no session affinity.
	AffinityTimeout uint32
	// Scheduler is the per-service IPVS scheduler (annotation
	// ipvs-proxy.io/scheduler); empty means the proxy's default.
	Scheduler string
	// SchedulerFlags is the annotation ipvs-proxy.io/scheduler-flags as
	// written (a comma-separated list, e.g. "mh-port"); empty means the
	// scheduler's defaults (ipvs.SchedulerFlags).
	SchedulerFlags string
	// TrafficDistribution is spec.trafficDistribution ("" when unset).
	TrafficDistribution string
}

// Endpoint is one backend address and port for one ServicePort.
type Endpoint struct {
	Address     netip.Addr
	Port        uint16
	NodeName    string
	Zone        string
	Ready       bool
	Serving     bool
	Terminating bool
	// VIP is true when Address is a Service's LoadBalancer IP or
	// externalIP: no real server unless the guard protects the address
	// (a VIP it refuses is no VIP).
	VIP bool
	// ZoneHints and NodeHints are the EndpointSlice topology hints.
	ZoneHints []string
	NodeHints []string
}

// Node is what the proxy needs of a Node object.
type Node struct {
	Name string
	// Addresses are every address in status.addresses.
	Addresses []netip.Addr
	// PrimaryIPs are kube-proxy's node IPs (component-helpers'
	// GetNodeHostIPs): the first InternalIP, else ExternalIP, and the first
	// of the other family after it. --nodeport-addresses primary serves
	// NodePorts on these only.
	PrimaryIPs []netip.Addr
	// PodCIDRs are spec.podCIDRs (spec.podCIDR when only it is set): the
	// node's own pod ranges, at most one per family.
	PodCIDRs []netip.Prefix
	Labels   map[string]string
	// LastSeen is zero for a Node in the API. For a Node deleted from the
	// API whose addresses are still protected (the node address cache's
	// grace period), it is when the Node was last seen.
	LastSeen time.Time
}

// Reason is a machine-readable refusal code; it is the Event reason and a
// metric label.
type Reason string

// Refusal codes. Every refusal names one of them.
const (
	ReasonNodeIP           Reason = "NodeIP"
	ReasonLocalAddress     Reason = "LocalAddress"
	ReasonAPIServer        Reason = "APIServer"
	ReasonGateway          Reason = "Gateway"
	ReasonProtectedCIDR    Reason = "ProtectedCIDR"
	ReasonLoopback         Reason = "Loopback"
	ReasonUnspecified      Reason = "Unspecified"
	ReasonMulticast        Reason = "Multicast"
	ReasonBroadcast        Reason = "Broadcast"
	ReasonLinkLocal        Reason = "LinkLocal"
	ReasonIPv4Mapped       Reason = "IPv4MappedIPv6"
	ReasonPodCIDR          Reason = "PodCIDR"
	ReasonInvalidAddress   Reason = "InvalidAddress"
	ReasonInvalidPort      Reason = "InvalidPort"
	ReasonInvalidProtocol  Reason = "InvalidProtocol"
	ReasonUnknownScheduler Reason = "UnknownScheduler"
	// ReasonInvalidSchedulerFlags: a scheduler flag the Service's
	// scheduler does not read (ipvs-proxy.io/scheduler-flags).
	ReasonInvalidSchedulerFlags Reason = "InvalidSchedulerFlags"
	ReasonInvalidField          Reason = "InvalidField"
	ReasonDuplicateVirtual      Reason = "DuplicateVirtualServer"
	ReasonExcludedCIDR          Reason = "ExcludedCIDR"
	ReasonInvalidEndpoint       Reason = "InvalidEndpoint"
	ReasonUnsupportedFamily     Reason = "UnsupportedFamily"
	// ReasonServiceFamily: an externalIP or load balancer IP of a family
	// the Service has no cluster IP in (spec.ipFamilies).
	ReasonServiceFamily      Reason = "ServiceFamily"
	ReasonInvalidSourceRange Reason = "InvalidSourceRange"
	// The node's infrastructure (docs/rules.md): the network address of one
	// of its subnets, the other end of a /31 or /127 link, a DNS server.
	ReasonNetworkAddress Reason = "NetworkAddress"
	ReasonPeer           Reason = "PointToPointPeer"
	ReasonResolver       Reason = "Resolver"
	// ReasonOnLinkSubnet warns about a VIP that is bound: it is inside a
	// subnet on a link of this node while strict ARP is off.
	ReasonOnLinkSubnet Reason = "OnLinkSubnet"
	// ReasonNodeServicePort: a port the node itself serves, on a node
	// address served at L4.
	ReasonNodeServicePort Reason = "NodeServicePort"
	// ReasonTooManyVirtualServers: a Service's external addresses times
	// its ports (or its source ranges) over
	// --max-virtual-servers-per-service; the excess is not served.
	ReasonTooManyVirtualServers Reason = "TooManyVirtualServers"
	// ReasonServiceIP: an address the API server allocates to Services
	// (inside --service-cidrs, or a Service's ClusterIP) claimed by a Node,
	// or a Service VIP given as an endpoint.
	ReasonServiceIP Reason = "ServiceIP"
	// ReasonCloudPlatform: a cloud platform's own service address
	// (metadata, WireServer, time), never a VIP nor a real server.
	ReasonCloudPlatform Reason = "CloudPlatform"
	// ReasonTooManyRealServers: a Service's ports × endpoints × addresses
	// over --max-real-servers-per-service; the excess is not served.
	ReasonTooManyRealServers Reason = "TooManyRealServers"
	// ReasonAddressConflict: an externalIP or LoadBalancer IP that is
	// another Service's ClusterIP (CVE-2020-8554).
	ReasonAddressConflict Reason = "AddressConflict"
)

// FieldEndpoint is the refusal field of an endpoint refused as a real
// server (a Service VIP, a cloud platform address, a node's service port).
const FieldEndpoint = "endpoints.addresses"

// Refusal records one thing the proxy would not do, and why.
type Refusal struct {
	// Subject is the object refused: a Service, or a Node for an address
	// of its status that is not one.
	Subject Subject
	// Field is the API field path, e.g. "spec.externalIPs".
	Field string
	// Address is the offending value as written in the object (raw: the
	// text layouts quote it, see Word).
	Address string
	Reason  Reason
	// Message says why, and what was done instead.
	Message string
}

// String renders the refusal in the `plan` text layout, always one line:
// "SUBJECT FIELD ADDRESS REASON: MESSAGE", the first four as Word (an
// empty or odd value Go-quoted), the message as Line.
func (r Refusal) String() string {
	return Word(r.Subject.String()) + " " + Word(r.Field) + " " + Word(r.Address) + " " + Word(string(r.Reason)) + ": " + Line(r.Message)
}

// Cluster is the converted view of every Service, EndpointSlice and Node the
// proxy watches, plus what the conversion refused.
type Cluster struct {
	// Services is sorted by Name.
	Services []ServicePort
	// Endpoints maps a service port to its endpoints, in a stable order.
	Endpoints map[ServicePortName][]Endpoint
	// Nodes is sorted by Name.
	Nodes []Node
	// Refusals are what the conversion could not use, sorted.
	Refusals []Refusal
}
