package guard

import (
	"maps"
	"net/netip"
	"slices"
)

// ChangedAddrs are the addresses whose Check g may answer differently
// from old, when the two guards differ only in what they protect address
// by address (node, local, API server, gateway, next hop, peer and
// resolver addresses, the broadcast and network addresses of the node's
// subnets). A Node added, deleted or renumbered anywhere in the cluster
// changes only these: the planner replans the services that name them and
// no others. ok is false when anything protected by prefix or by port
// differs (the pod, protected and on-link CIDRs, the protected ports, the
// listeners): any address may be answered differently then. The result is
// sorted and has no duplicates. O(what the two guards protect); neither
// guard is modified.
func (g *Guard) ChangedAddrs(old *Guard) (addrs []netip.Addr, ok bool) {
	if !slices.Equal(g.protected, old.protected) || !slices.Equal(g.pods, old.pods) ||
		!slices.Equal(g.onLink, old.onLink) || !slices.Equal(g.ports, old.ports) ||
		!slices.Equal(g.listeners, old.listeners) || !slices.Equal(g.services, old.services) ||
		!slices.Equal(g.platform, old.platform) || !slices.Equal(g.endpointNS, old.endpointNS) {
		return nil, false
	}
	for _, sets := range [][2]map[netip.Addr]struct{}{
		{g.local, old.local}, {g.broadcast, old.broadcast}, {g.network, old.network}, {g.peers, old.peers},
		{g.apiServers, old.apiServers}, {g.gateways, old.gateways}, {g.nextHops, old.nextHops}, {g.resolvers, old.resolvers},
	} {
		addrs = appendChanged(addrs, sets[0], sets[1], func(struct{}, struct{}) bool { return true })
	}
	// A node address that stays protected but changes hands, or whose
	// Node is deleted and remembered, changes the verdict's words.
	addrs = appendChanged(addrs, g.nodes, old.nodes, nodeRef.equal)
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs), true
}

// appendChanged appends to addrs the keys of a and b that are in one only
// or map to values that are not eq.
func appendChanged[V any](addrs []netip.Addr, a, b map[netip.Addr]V, eq func(V, V) bool) []netip.Addr {
	if maps.EqualFunc(a, b, eq) {
		return addrs
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !eq(v, w) {
			addrs = append(addrs, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			addrs = append(addrs, k)
		}
	}
	return addrs
}

// ChangedPodRanges are the Nodes' pod ranges (spec.podCIDRs) that g
// protects and old does not, or the other way round, or that changed
// Node: every address whose Check they may change is inside one of them.
// Sorted, without duplicates; ChangedAddrs does not look at them.
func (g *Guard) ChangedPodRanges(old *Guard) []netip.Prefix {
	if slices.Equal(g.nodePods, old.nodePods) {
		return nil
	}
	var out []netip.Prefix
	for _, pair := range [][2][]nodePods{{g.nodePods, old.nodePods}, {old.nodePods, g.nodePods}} {
		for _, np := range pair[0] {
			if _, found := slices.BinarySearchFunc(pair[1], np, compareNodePods); !found {
				out = append(out, np.p)
			}
		}
	}
	slices.SortFunc(out, comparePrefixes)
	return slices.Compact(out)
}
