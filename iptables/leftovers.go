package iptables

import (
	"maps"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// What kube-proxy's IPVS mode leaves on a node that the plan does not use,
// and how it goes. The proxy plans the same chain names as kube-proxy
// 1.34 except one, so taking a node over is mostly adoption: a chain of a
// planned name is rewritten by the proxy's own iptables-restore, a set of a
// planned name is adopted or swapped (ipsets.go). What remains:
//
//   - KUBE-IPVS-OUT-FILTER (filter) and its jump from OUTPUT: kube-proxy's
//     "no node access" rules for load balancers with source ranges, which
//     the proxy does not plan; removed.
//   - every kube-proxy chain of a family the node does not plan (its
//     ip6tables rules on a node planned IPv4 only; kube-proxy runs both
//     families wherever the kernel has IPv6), with their jumps; removed.
//   - kube-proxy's sets of such a family (KUBE-6-*); destroyed once no rule
//     holds them (setSyncer.leftovers).
//
// Removal happens on a full sync only, after the planned sets and chains
// are written: a planned family's leftovers go in the same
// iptables-restore that writes the proxy's chains. A chain that a chain of
// someone else jumps to is left alone, with the chains it jumps to.

// KubeProxyChains are the chains kube-proxy 1.34's IPVS mode creates in
// each table (pkg/proxy/ipvs/proxier.go: iptablesChains); the jumps to them
// from built-in chains are those of its iptablesJumpChain.
var KubeProxyChains = map[string][]string{
	"nat":    {ChainServices, ChainPostrouting, ChainNodePort, ChainLoadBalancer, ChainMarkMasq},
	"filter": {ChainForward, ChainNodePort, ChainProxyFirewall, ChainSourceRangesFirewall, ChainIPVSFilter, ChainIPVSOutFilter},
}

// What kube-proxy's iptables mode (pkg/proxy/iptables/proxier.go, 1.34)
// leaves: one chain per service, endpoint and external path, named by
// prefix, and a few fixed chains whose names the proxy does not plan. Its
// KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ (nat) and KUBE-FORWARD,
// KUBE-PROXY-FIREWALL (filter) are names the proxy plans: rewritten by the
// same iptables-restore that removes these, so the jump from KUBE-SERVICES
// to a service's DNAT chains and the proxy's rules for its IPVS virtual
// servers change places at once. The VIPs are bound after that restore
// (the applier's safe order), so until they are a ClusterIP is not served:
// docs/migration.md says so and how to avoid it. Its
// KUBE-PROXY-CANARY in mangle, an empty chain nothing jumps to, stays.
var (
	kubeProxyIPTablesPrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-EXT-", "KUBE-FW-"}
	kubeProxyIPTablesChains   = map[string][]string{
		"nat":    {"KUBE-NODEPORTS", "KUBE-PROXY-CANARY"},
		"filter": {ChainServices, "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-PROXY-CANARY"},
	}
)

// kubeProxyIPTablesJumps are the jumps of kube-proxy's iptables mode from
// a built-in chain the proxy does not plan to a chain whose name it plans:
// by built-in chain, the targets.
var kubeProxyIPTablesJumps = map[string]map[string][]string{
	"filter": {"OUTPUT": {ChainProxyFirewall}},
}

// isKubeProxyIPTablesChain reports whether name in table is a chain of
// kube-proxy's iptables mode the proxy does not plan.
func isKubeProxyIPTablesChain(table, name string) bool {
	return slices.Contains(kubeProxyIPTablesChains[table], name) ||
		(table == "nat" && slices.ContainsFunc(kubeProxyIPTablesPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }))
}

// removable are the chains of table to remove now, sorted: those the proxy
// created and no longer plans (c.owned), and kube-proxy's it does not plan
// that exist (of its IPVS and iptables modes), less any a chain of
// someone else (not built-in, not ours,
// not removable) jumps to, directly or through another removable one.
func (c *chainSyncer) removable(table string, saved savedTable, ours map[string]bool) []string {
	cand := map[string]bool{}
	for key := range c.owned {
		t, name, _ := strings.Cut(key, "/")
		if t == table && !ours[name] {
			cand[name] = true
		}
	}
	for _, name := range KubeProxyChains[table] {
		if _, exists := saved[name]; exists && !ours[name] {
			cand[name] = true
		}
	}
	for name := range saved {
		if !ours[name] && isKubeProxyIPTablesChain(table, name) {
			cand[name] = true
		}
	}
	for held := true; held; {
		held = false
		for name, rules := range saved {
			if IsBuiltinChain(name) || ours[name] || cand[name] {
				continue
			}
			for _, r := range rules {
				if tgt := RuleTarget(r); cand[tgt] {
					delete(cand, tgt)
					held = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(cand))
}

// clearFamilies removes the chains of the families rules does not plan (see
// the file comment), with one iptables-save of the family until a pass finds
// nothing to remove; from then on a family costs nothing until it is
// planned and dropped again. A family whose iptables binaries are missing
// has nothing to clear. Failures are logged, not returned: what is left is
// kube-proxy's, unused, and retried at the next full sync.
func (a *Syncer) clearFamilies(rules []Ruleset) {
	planned := map[string]bool{}
	for _, rs := range rules {
		planned[rs.Family] = true
		delete(a.cleared, rs.Family)
	}
	for _, fam := range []string{FamilyIPv4, FamilyIPv6} {
		if planned[fam] || a.cleared[fam] {
			continue
		}
		c, err := a.chainsFor(fam)
		if err != nil {
			a.log.Debug("no iptables for a family the node does not plan; nothing to clear", zap.String("family", fam), zap.Error(err))
			a.cleared[fam] = true
			continue
		}
		wrote, err := c.sync([]Table{{Name: "nat"}, {Name: "filter"}})
		if err != nil {
			a.log.Warn("removing kube-proxy's chains of a family the node does not plan failed; retrying at the next full sync",
				zap.String("family", fam), zap.Error(err))
			wrote = true
		}
		if wrote {
			a.log.Info("removed iptables chains of a family the node does not plan", zap.String("family", fam))
		} else {
			a.cleared[fam] = true
		}
	}
}
