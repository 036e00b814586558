package planner

import (
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// famEndpoints are one service port's endpoints of one family, categorised.
type famEndpoints struct {
	done bool
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
	sp := p.sp
	eps := p.eps
	node := p.e.o.NodeName
	ok := func(e *model.Endpoint) bool {
		if !e.Address.IsValid() || e.Port == 0 || e.Address.Is4In6() {
			return false
		}
		return famOf(e.Address) == f
	}
	isLocal := func(e *model.Endpoint) bool { return node != "" && e.NodeName == node }

	// Topology: hints apply when every ready endpoint carries them and some
	// are for this node (PreferSameNode) or this node's zone.
	const (
		topoNone = iota
		topoNode
		topoZone
	)
	allZone, hasZone, allNode, hasNode, anyReady := true, false, true, false, false
	localReady, localST := false, false
	for j := range eps {
		e := &eps[j]
		if !ok(e) {
			continue
		}
		if e.Ready {
			anyReady = true
			if isLocal(e) {
				localReady = true
			}
			if len(e.ZoneHints) == 0 {
				allZone = false
			} else if p.e.zone != "" && slices.Contains(e.ZoneHints, p.e.zone) {
				hasZone = true
			}
			if len(e.NodeHints) == 0 {
				allNode = false
			} else if node != "" && slices.Contains(e.NodeHints, node) {
				hasNode = true
			}
		} else if e.Serving && e.Terminating && isLocal(e) {
			localST = true
		}
	}
	mode := topoNone
	if anyReady {
		switch {
		case sp.TrafficDistribution == trafficDistributionPreferSameNode && allNode && hasNode:
			mode = topoNode
		case allZone && hasZone:
			mode = topoZone
		}
	}
	avail := func(e *model.Endpoint) bool {
		switch mode {
		case topoNode:
			return slices.Contains(e.NodeHints, node)
		case topoZone:
			return slices.Contains(e.ZoneHints, p.e.zone)
		}
		return true
	}
	rs := func(e *model.Endpoint) ipvs.RealServer {
		return ipvs.RealServer{Address: e.Address.WithZone(""), Port: e.Port, Weight: ipvs.DefaultWeight}
	}
	fe.cluster = make([]ipvs.RealServer, 0, len(eps))
	for j := range eps {
		e := &eps[j]
		if ok(e) && e.Ready && avail(e) {
			fe.cluster = append(fe.cluster, rs(e))
			if isLocal(e) {
				fe.loop = append(fe.loop, rs(e))
			}
		}
	}
	if len(fe.cluster) == 0 {
		for j := range eps {
			e := &eps[j]
			if ok(e) && !e.Ready && e.Serving && e.Terminating && avail(e) {
				fe.cluster = append(fe.cluster, rs(e))
				if isLocal(e) {
					fe.loop = append(fe.loop, rs(e))
				}
			}
		}
	}
	if localReady || localST {
		for j := range eps {
			e := &eps[j]
			if !ok(e) || !isLocal(e) {
				continue
			}
			if localReady && e.Ready || !localReady && !e.Ready && e.Serving && e.Terminating {
				fe.local = append(fe.local, rs(e))
				fe.loop = append(fe.loop, rs(e))
			}
		}
	}
	fe.cluster = sortRS(fe.cluster)
	fe.local = sortRS(fe.local)
	fe.loop = sortRS(fe.loop)
	return fe
}

func sortRS(rs []ipvs.RealServer) []ipvs.RealServer {
	slices.SortFunc(rs, ipvs.CompareRealServers)
	return slices.CompactFunc(rs, func(a, b ipvs.RealServer) bool { return ipvs.CompareRealServers(a, b) == 0 })
}
