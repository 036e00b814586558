package planner

import (
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// realServers are the endpoints that may be real servers: eps itself
// when the guard refuses none (guard.CheckEndpoint: cloud platform
// addresses, the service CIDRs, a node's or the API server's address at a
// protected node port) and none is one of the Service's own VIPs; a copy
// without the refused ones, each refused once, otherwise. The Service's
// other endpoints stay served.
func (p *portPlanner) realServers(eps []model.Endpoint) []model.Endpoint {
	var out []model.Endpoint
	for j := range eps {
		e := &eps[j]
		v := p.e.guard.CheckEndpoint(p.sp.Name.NamespacedName, e.Address, e.Port)
		switch {
		case v.Protected:
		case p.ownVIP(e.Address):
			v = guard.Verdict{Protected: true, Reason: model.ReasonServiceIP, Detail: "a VIP of this Service itself is never its real server"}
		case e.VIP && p.otherVIP(e.Address):
			v = guard.Verdict{Protected: true, Reason: model.ReasonServiceIP, Detail: "the externalIP or LoadBalancer IP of a Service: a Service VIP is never a real server"}
		}
		if !v.Protected {
			if out != nil {
				out = append(out, *e)
			}
			continue
		}
		if out == nil {
			out = slices.Clip(slices.Clone(eps[:j]))
		}
		p.refuse(model.FieldEndpoint, ipvsAddrPort(ipvs.Key{Address: e.Address, Port: e.Port}), v.Reason, v.Detail+"; endpoint not used, the others stay served")
	}
	if out == nil {
		return eps
	}
	return out
}

// otherVIP reports whether a, another Service's externalIP or
// LoadBalancer IP, is a VIP on this node: one the guard lets through and
// --ipvs-exclude-cidrs leaves to the proxy. One the guard protects (a
// node's address as k3s' servicelb writes it, a pod's) is not bound and
// no VIP, so a hostNetwork or pod endpoint there stays served. a is
// guarded: a change of its protection plans the Service again (Reguard).
func (p *portPlanner) otherVIP(a netip.Addr) bool {
	p.guarded = append(p.guarded, guard.Key(a))
	return !p.e.guard.Check(a).Protected && !containsAny(p.e.o.ExcludeCIDRs, a)
}

// ownVIP reports whether a is a ClusterIP, externalIP or LoadBalancer IP
// of the port's Service.
func (p *portPlanner) ownVIP(a netip.Addr) bool {
	a = guard.Key(a)
	for _, as := range [][]netip.Addr{p.sp.ClusterIPs, p.sp.ExternalIPs, p.sp.LoadBalancerIPs} {
		for _, v := range as {
			if guard.Key(v) == a {
				return true
			}
		}
	}
	return false
}

// famEndpoints are one service port's endpoints of one family, categorised.
type famEndpoints struct {
	done bool
	// mode is the topology the cluster list was narrowed by.
	mode topoMode
	// cluster serves Cluster traffic policy, local serves Local policy.
	cluster, local []ipvs.RealServer
	// loop are the endpoints on this node among cluster and local: hairpin.
	loop []ipvs.RealServer
}

// endpoints categorises the port's endpoints of family f as
// kube-proxy's CategorizeEndpoints does: Cluster policy uses the ready
// endpoints (narrowed by topology hints when they apply), or if none is
// ready the serving and terminating ones; Local policy uses this node's
// ready endpoints, or if none, this node's serving and terminating ones.
// Non-serving endpoints are never used.
func (p *portPlanner) endpoints(f int) *famEndpoints {
	fe := &p.fam[f]
	if fe.done {
		return fe
	}
	fe.done = true
	eps := p.eps
	v := epView{fam: f, node: p.e.o.NodeName, zone: p.e.zone}
	mode, localReady, localST := v.survey(eps, p.sp.TrafficDistribution)
	fe.mode = mode
	rs := func(e *model.Endpoint) ipvs.RealServer {
		return ipvs.RealServer{Address: e.Address.WithZone(""), Port: e.Port, Weight: ipvs.DefaultWeight}
	}
	// Ready endpoints the topology admits; if none, serving terminating
	// ones (kube-proxy's fallback).
	fe.cluster = make([]ipvs.RealServer, 0, len(eps))
	for _, terminating := range []bool{false, true} {
		for j := range eps {
			e := &eps[j]
			if v.usable(e) && (e.Ready || terminating && e.Serving && e.Terminating) && v.admits(mode, e) {
				fe.cluster = append(fe.cluster, rs(e))
				if v.local(e) {
					fe.loop = append(fe.loop, rs(e))
				}
			}
		}
		if len(fe.cluster) > 0 {
			break
		}
	}
	// This node's ready endpoints, whatever the topology; if none, its
	// serving terminating ones.
	if localReady || localST {
		for j := range eps {
			e := &eps[j]
			if !v.usable(e) || !v.local(e) {
				continue
			}
			if localReady && e.Ready || !localReady && !e.Ready && e.Serving && e.Terminating {
				fe.local = append(fe.local, rs(e))
				fe.loop = append(fe.loop, rs(e))
			}
		}
	}
	// Every claim of the port in the family shares these lists, and so
	// does the IPVS mirror once it programmed them (ipvs.Reconciler.Full):
	// read-only, each the size of its endpoints.
	fe.cluster = exact(sortRS(fe.cluster))
	fe.local = exact(sortRS(fe.local))
	fe.loop = sortRS(fe.loop)
	return fe
}

// exact is rs in an array of its length; empty, it holds no array.
func exact(rs []ipvs.RealServer) []ipvs.RealServer {
	if len(rs) == 0 && rs != nil {
		return []ipvs.RealServer{}
	}
	if cap(rs) > len(rs) {
		return slices.Clone(rs)
	}
	return rs
}

// topoMode is which topology hints a port's endpoints are filtered by.
type topoMode int

const (
	topoNone topoMode = iota
	topoNode
	topoZone
)

// epView is one family's view of a port's endpoints from this node (node
// and zone as the planner knows them).
type epView struct {
	fam        int
	node, zone string
}

// usable: a valid address of the view's family and a port.
func (v epView) usable(e *model.Endpoint) bool {
	return e.Address.IsValid() && e.Port != 0 && !e.Address.Is4In6() && famOf(e.Address) == v.fam
}

// local: the endpoint is on this node.
func (v epView) local(e *model.Endpoint) bool { return v.node != "" && e.NodeName == v.node }

// survey decides the topology mode (hints apply when every ready endpoint
// carries them and some are for this node, with PreferSameNode, or this
// node's zone) and whether this node has a ready, or a serving terminating,
// endpoint.
func (v epView) survey(eps []model.Endpoint, td string) (mode topoMode, localReady, localST bool) {
	allZone, hasZone, allNode, hasNode, anyReady := true, false, true, false, false
	for j := range eps {
		e := &eps[j]
		if !v.usable(e) {
			continue
		}
		if !e.Ready {
			localST = localST || e.Serving && e.Terminating && v.local(e)
			continue
		}
		anyReady = true
		localReady = localReady || v.local(e)
		if len(e.ZoneHints) == 0 {
			allZone = false
		} else if v.zone != "" && slices.Contains(e.ZoneHints, v.zone) {
			hasZone = true
		}
		if len(e.NodeHints) == 0 {
			allNode = false
		} else if v.node != "" && slices.Contains(e.NodeHints, v.node) {
			hasNode = true
		}
	}
	switch {
	case !anyReady:
	case td == trafficDistributionPreferSameNode && allNode && hasNode:
		mode = topoNode
	case allZone && hasZone:
		mode = topoZone
	}
	return mode, localReady, localST
}

// admits: the topology mode lets e serve this node.
func (v epView) admits(mode topoMode, e *model.Endpoint) bool {
	switch mode {
	case topoNode:
		return slices.Contains(e.NodeHints, v.node)
	case topoZone:
		return slices.Contains(e.ZoneHints, v.zone)
	}
	return true
}

func sortRS(rs []ipvs.RealServer) []ipvs.RealServer {
	slices.SortFunc(rs, ipvs.CompareRealServers)
	return slices.CompactFunc(rs, func(a, b ipvs.RealServer) bool { return ipvs.CompareRealServers(a, b) == 0 })
}
