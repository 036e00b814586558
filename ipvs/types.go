// Package ipvs owns the node's IPVS table as the proxy wants it: the
// desired-state types the planner fills (Key, VirtualServer, RealServer,
// schedulers and flags), their `ipvsadm -S -n` rendering, and Reconciler,
// which makes a Table hold them — Full from one dump, Partial from its
// mirror, graceful termination of removed real servers — and records in its
// ownership journal (--state-dir/ipvs-owned, the one file it writes) what
// kernel state cannot show to be the proxy's. It decides; the kernel side
// (moby/ipvs, conntrack) is ipvs/kernel. It deletes only virtual servers it
// owns — those on addresses bound on kube-ipvs0, NodePort servers on node
// addresses, what the journal records — and never touches foreign ones
// (keepalived, kube-vip) or excluded CIDRs.
package ipvs

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Flags are IPVS virtual server flags (ip_vs.h IP_VS_SVC_F_*).
type Flags uint32

// Virtual server flags.
const (
	// FlagPersistent is IP_VS_SVC_F_PERSISTENT: ipvsadm -p.
	FlagPersistent Flags = 0x1
	// FlagHashed is IP_VS_SVC_F_HASHED, set by the kernel on every service.
	FlagHashed Flags = 0x2
	// FlagSchedSH1 is IP_VS_SVC_F_SCHED1: ipvsadm -b sh-fallback / mh-fallback.
	FlagSchedSH1 Flags = 0x8
	// FlagSchedSH2 is IP_VS_SVC_F_SCHED2: ipvsadm -b sh-port / mh-port.
	FlagSchedSH2 Flags = 0x10
)

// Key identifies a virtual server: ipvsadm's "-t 10.96.0.10:80".
type Key struct {
	Protocol model.Protocol
	Address  netip.Addr
	Port     uint16
}

// VirtualServer is one IPVS virtual service and its real servers, as
// `ipvsadm -A` and `ipvsadm -a` would create them.
type VirtualServer struct {
	Key
	// Scheduler is ipvsadm -s (rr, wrr, lc, sh, mh, ...).
	Scheduler string
	Flags     Flags
	// PersistenceTimeout is ipvsadm -p SECONDS; 0 when not persistent.
	PersistenceTimeout uint32
	// Service is the service port that asked for this server; zero for one
	// no Service asks for (adopted, or read from the kernel).
	Service model.ServicePortName
	// Kind is which of Service's fields asked for the address: what the
	// per-Service statistics are labelled with (StatsOptions).
	Kind        model.AddressKind
	RealServers []RealServer
}

// RealServer is one backend of a virtual server: ipvsadm -a -r ADDR:PORT -m -w WEIGHT.
// Forwarding is always masquerading (-m).
type RealServer struct {
	Address netip.Addr
	Port    uint16
	Weight  int32
}
