package iptables

import (
	"errors"
	"fmt"
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
// KUBE-PROXY-FIREWALL (filter) are names the proxy plans.
//
// They go in two steps, so that a ClusterIP is served throughout. A full
// sync writes the proxy's chains but leaves nat KUBE-SERVICES as it is
// while it jumps to these chains: their DNAT, in PREROUTING and OUTPUT,
// stays in front of IPVS, which serves only addresses that are local, and
// the VIPs are bound last (the applier's safe order). Then
// Syncer.FinishTakeover, after the bind, rewrites KUBE-SERVICES and removes
// these chains and their jumps in one iptables-restore per family: new
// connections meet IPVS, established ones keep their conntrack DNAT.
var (
	kubeProxyIPTablesPrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-EXT-", "KUBE-FW-"}
	kubeProxyIPTablesChains   = map[string][]string{
		"nat":    {"KUBE-NODEPORTS", "KUBE-PROXY-CANARY"},
		"filter": {ChainServices, "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-PROXY-CANARY"},
		"mangle": {"KUBE-PROXY-CANARY"},
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

// iptablesModeIn reports whether saved, table of a save, holds a chain of
// kube-proxy's iptables mode.
func iptablesModeIn(table string, saved savedTable) bool {
	for name := range saved {
		if isKubeProxyIPTablesChain(table, name) {
			return true
		}
	}
	return false
}

// holdsIPTablesMode reports whether chain of table is nat KUBE-SERVICES
// jumping to a chain of kube-proxy's iptables mode: its DNAT, left in place
// until FinishTakeover.
func holdsIPTablesMode(table, chain string, saved savedTable) bool {
	return table == "nat" && chain == ChainServices && slices.ContainsFunc(saved[chain], func(r string) bool {
		return isKubeProxyIPTablesChain(table, RuleTarget(r))
	})
}

// FinishTakeover removes what kube-proxy's iptables and nftables modes
// left, by name, once the proxy's own state serves: the applier calls it
// after a full sync has bound the VIPs. For each family whose last chain
// sync found iptables-mode chains, one iptables-save and one
// iptables-restore rewrite nat KUBE-SERVICES without the jumps to
// kube-proxy's DNAT chains and delete those chains and their jumps
// (removable); a family without them costs nothing. After a failed chain
// sync it does nothing: the next full sync writes the proxy's chains
// first, then comes here again. Then kube-proxy's nftables tables go
// (finishNFTables).
func (a *Syncer) FinishTakeover() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, rs := range a.lastRules {
		c := a.chains[rs.Family]
		if c == nil || !c.iptablesModeLeft {
			continue
		}
		tables := slices.Clone(rs.Tables)
		if !slices.ContainsFunc(tables, func(t Table) bool { return t.Name == "mangle" }) {
			tables = append(tables, Table{Name: "mangle"})
		}
		c.repairing = nil // removing kube-proxy's chains repairs nothing of ours
		wrote, err := c.sync(tables, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s rules: remove kube-proxy's iptables-mode chains: %w", rs.Family, err))
			continue
		}
		c.iptablesModeLeft = false
		if wrote {
			a.log.Info("removed kube-proxy's iptables-mode chains after binding the VIPs: IPVS serves the node", zap.String("family", rs.Family))
		}
	}
	if a.lastRules != nil {
		if err := a.finishNFTables(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removable are the chains of table to remove now, sorted: those the proxy
// created and no longer plans (c.owned), and kube-proxy's it does not plan
// that exist (of its IPVS mode, and in a handover of its iptables mode),
// less any a chain of someone else (not built-in, not ours, not removable)
// jumps to, directly or through another removable one.
func (c *chainSyncer) removable(table string, saved savedTable, ours map[string]bool, handover bool) []string {
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
		if handover && !ours[name] && isKubeProxyIPTablesChain(table, name) {
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
		wrote, err := c.sync([]Table{{Name: "nat"}, {Name: "filter"}, {Name: "mangle"}}, true)
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

// IPTablesModeShared are the chains, by table, that kube-proxy's iptables
// mode writes under the same names as the proxy (pkg/proxy/iptables,
// 1.34): on the way out to that mode they are kube-proxy's, serving, and a
// cleanup leaves them and the jumps to them (WithoutChains).
var IPTablesModeShared = map[string][]string{
	"nat":    {ChainServices, ChainPostrouting, ChainMarkMasq},
	"filter": {ChainForward, ChainProxyFirewall},
}

// WithoutChains is rules less the chains of drop (by table) and the rules
// of built-in chains that jump to them: a plan to clean up around chains
// someone else now owns.
func WithoutChains(rules []Ruleset, drop map[string][]string) []Ruleset {
	out := cloneRulesets(rules)
	for i := range out {
		for j := range out[i].Tables {
			t := &out[i].Tables[j]
			gone := func(name string) bool { return slices.Contains(drop[t.Name], name) }
			t.Chains = slices.DeleteFunc(t.Chains, func(c Chain) bool { return !c.Builtin && gone(c.Name) })
			for k := range t.Chains {
				if c := &t.Chains[k]; c.Builtin {
					c.Rules = slices.DeleteFunc(c.Rules, func(r Rule) bool { return gone(ruleTargetSpec(r)) })
				}
			}
		}
	}
	return out
}
