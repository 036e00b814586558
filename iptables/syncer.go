package iptables

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Syncer (a layer.Layer) makes the kernel hold the planned ipsets and iptables rules of one
// node, and nothing it does not own:
//
//   - ipsets through netlink (no `ipset` exec): only the sets the plan names;
//     a set created by someone else under another name is never listed for
//     change, flushed or destroyed.
//   - chains through iptables-save / iptables-restore --noflush (atomic per
//     table), compared in Go: only the non-built-in chains the plan names and
//     the plan's rules in the built-in chains (PREROUTING, OUTPUT,
//     POSTROUTING, INPUT, FORWARD). Rules of others in the built-in chains,
//     and every other chain (a user's, Docker's), are left as they are.
//
// Cost per call, per family:
//
//   - Full: one netlink dump of all sets; entry adds/deletes for the
//     differences only, batched into few messages; one `iptables-save` of
//     the family's tables; when a table's chains or jumps differ, one
//     `iptables-restore` of the tables that differ and one more save to
//     learn iptables' canonical text. Three processes on a fresh node, one
//     when nothing changed; never one per rule (no `iptables -C`: a jump
//     saved in another spelling is compared word by word in Go).
//   - Partial: no dump, no exec; entry adds/deletes against the in-memory
//     mirror the last Full built.
//
// A Syncer is bound to the network namespace it was created in (its
// netlink socket) and to the one its caller's thread is in (the iptables
// binaries it runs). It is safe for concurrent use; calls are serialized.
type Syncer struct {
	mu     sync.Mutex
	log    *zap.Logger
	sets   *setSyncer
	closer func()
	// chains per family; created on first use.
	chains    map[string]*chainSyncer
	newRunner func(family string) (RuleRunner, error)
	// lastRules are the rulesets of the last successful chain sync; Partial
	// resyncs chains only when the plan's rules differ from them.
	lastRules []Ruleset
	// drift is what the Full under way found changed behind the proxy's
	// back.
	drift layer.Drift
	// cleared marks families the plan does not name whose chains a Full
	// found removed (clearFamilies).
	cleared map[string]bool

	// Reader, if set (before the first sync), is a second ipset socket for
	// the dump BeginFull's read makes beside the sync loop; without it
	// FullFrom dumps the sets itself.
	Reader SetKernel
	// chainsWritten says a chain sync ran while a read beside the loop
	// was under way (from BeginFull to the FullFrom or Full that ends it:
	// setSyncer.reading).
	chainsWritten bool

	// NFT, if set (before the first sync), lists and deletes nftables
	// tables: FinishTakeover deletes kube-proxy's (nftables.go). nftDone
	// says it has looked and found none left.
	NFT     NFTablesKernel
	nftDone bool

	// ARPVIPs is --strict-arp-vips (set before the first sync): SyncARP
	// keeps ARPTable, through NFT, in step with the VIPs (arp.go).
	ARPVIPs bool
	arp     arpMirror

	// OnRestoreFailure, if set (before the first sync), is called with the
	// family (FamilyIPv4, FamilyIPv6) each time a sync's iptables-restore
	// of that family fails: kube-proxy's
	// sync_proxy_rules_iptables_restore_failures_total.
	OnRestoreFailure func(family string)
}

// NewSyncer makes a Syncer over sets, the ipset netlink client, and
// runners, which opens one family's iptables binaries on its first use (so a
// host without ip6tables works as long as no inet6 Ruleset is planned).
// iptables/kernel gives the kernel's; unit tests give iptablestest's fakes. Close closes
// sets when it has a Close method.
func NewSyncer(sets SetKernel, runners func(family string) (RuleRunner, error), log *zap.Logger) *Syncer {
	a := newSyncer(sets, runners, log)
	if c, ok := sets.(interface{ Close() }); ok {
		a.closer = c.Close
	}
	return a
}

func newSyncer(k SetKernel, newRunner func(string) (RuleRunner, error), log *zap.Logger) *Syncer {
	if log == nil {
		log = zap.NewNop()
	}
	return &Syncer{log: log, sets: newSetSyncer(k, log), chains: map[string]*chainSyncer{}, newRunner: newRunner, cleared: map[string]bool{}}
}

// Close releases the netlink sockets.
func (a *Syncer) Close() {
	if a.closer != nil {
		a.closer()
	}
	if c, ok := a.NFT.(interface{ Close() }); ok {
		c.Close()
	}
}

func (a *Syncer) chainsFor(family string) (*chainSyncer, error) {
	if c := a.chains[family]; c != nil {
		return c, nil
	}
	r, err := a.newRunner(family)
	if err != nil {
		return nil, err
	}
	c := newChainSyncer(family, r)
	c.restoreFailed = a.OnRestoreFailure
	a.chains[family] = c
	return c, nil
}

// Full reads the kernel (one ipset dump, one iptables-save per table) and
// repairs everything that differs from the plan: missing or extra set
// entries, sets of the wrong type or size, flushed or edited chains,
// deleted, duplicated or reordered jump rules. It takes over what
// kube-proxy's IPVS mode left (leftovers.go). Order: sets first (rules refer
// to them), then chains, then kube-proxy's chains of families the plan does
// not name, then sets the proxy created or found and no longer plans.
// Every set and table is attempted; the Result's Failure joins what
// failed, and the error is always nil: no failure stops the sync.
func (a *Syncer) Full(d Desired) (*Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.full(d.Sets, d.Rules, func() error { return a.sets.full(d.Sets) }, nil), nil
}

// full is Full with the sets synced by setsFull and, for each family in
// saves, its iptables-save output as read (the others are saved now).
func (a *Syncer) full(sets []IPSet, rules []Ruleset, setsFull func() error, saves map[string]string) *Result {
	var errs []error
	if err := setsFull(); err != nil {
		errs = append(errs, err)
	}
	a.drift = nil
	a.drift.Merge(a.sets.drift)
	// With the planned rules unchanged since the last chain sync, every
	// rewrite repairs what others changed: name it, then count it.
	samePlan := a.lastRules != nil && equalRulesets(a.lastRules, rules)
	for fam, c := range a.chains {
		c.repairing = nil
		if samePlan {
			c.repairing = func(table string, chains []string) {
				a.drift.Add(DriftIPTablesTable, 1)
				a.log.Info("repairing iptables chains changed outside the proxy", zap.String("family", fam), zap.String("table", table), zap.Strings("chains", chains))
			}
		}
	}
	if err := a.syncChains(rules, saves); err != nil {
		errs = append(errs, err)
	}
	a.clearFamilies(rules)
	if err := a.sets.destroyStale(sets); err != nil {
		errs = append(errs, err)
	}
	res := result(PartSync, a.drift, errs...)
	a.log.Debug("iptables full sync", zap.Int("sets", len(sets)), zap.Int("rulesets", len(rules)),
		zap.Int("driftSetEntries", a.drift[DriftIPSetEntry]), zap.Int("driftSets", a.drift[DriftIPSet]), zap.Int("driftTables", a.drift[DriftIPTablesTable]), zap.Error(errors.Join(errs...)))
	return res
}

func (a *Syncer) syncChains(rules []Ruleset, saves map[string]string) error {
	a.chainsWritten = a.chainsWritten || a.sets.reading()
	var errs []error
	for _, rs := range rules {
		c, err := a.chainsFor(rs.Family)
		if err == nil {
			saved, ok := saves[rs.Family]
			if !ok {
				if saved, err = c.r.Save(); err != nil {
					err = fmt.Errorf("%s tables: %w", rs.Family, err)
				}
			}
			if err == nil {
				err = c.full(rs, saved)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s rules: %w", rs.Family, err))
		}
	}
	if len(errs) == 0 {
		a.lastRules = cloneRulesets(rules)
	} else {
		a.lastRules = nil
	}
	return errors.Join(errs...)
}

// Partial syncs from the mirror of the last Full, reading nothing: the
// entry differences between sets and the mirror (no dump, no exec), and a
// chain sync (as in Full) only when the planned rules differ from those
// last applied — they depend only on flags and node addresses, so this is
// rare. sets is the whole planned list (as planner.State.IPSets). A set
// whose Entries are the very slice the last sync applied costs nothing, so
// a caller must not modify a slice it passed in place (the planner never
// does: it patches a changed set into a new slice); any other set costs one
// in-memory comparison of its entries. A set the mirror lacks is created;
// sets no longer planned wait for the next Full (or that chain sync). It
// repairs nothing others changed: that is the periodic Full's. As Full,
// it reports failures in the Result, and its error is always nil.
func (a *Syncer) Partial(d Desired) (*Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sets, rules := d.Sets, d.Rules
	var errs []error
	if err := a.sets.partial(sets); err != nil {
		errs = append(errs, err)
	}
	if a.lastRules == nil || !equalRulesets(a.lastRules, rules) {
		if err := a.syncChains(rules, nil); err != nil {
			errs = append(errs, err)
		}
		if err := a.sets.destroyStale(sets); err != nil {
			errs = append(errs, err)
		}
	}
	return result(PartSync, nil, errs...), nil
}

// Cleanup removes what the proxy owns and nothing else: the non-built-in
// chains named in d.Rules (and any it created since start), every rule
// in a built-in chain that jumps to them or equals a planned one, and then
// the sets named in d.Sets and SwapSetName. Pass the plan of an empty
// cluster (every set and chain exists even then). A second Cleanup finds
// nothing and changes nothing. Failures are in the Result (PartCleanup);
// the error is always nil.
func (a *Syncer) Cleanup(d Desired) (*Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sets, rules := d.Sets, d.Rules
	var errs []error
	for _, rs := range rules {
		c, err := a.chainsFor(rs.Family)
		if err == nil {
			err = c.cleanup(rs)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s rules: %w", rs.Family, err))
		}
	}
	a.lastRules = nil
	names := make([]string, 0, len(sets))
	for _, s := range sets {
		names = append(names, s.Name)
	}
	if err := a.sets.cleanup(names); err != nil {
		errs = append(errs, err)
	}
	return result(PartCleanup, nil, errs...), nil
}

func cloneRulesets(in []Ruleset) []Ruleset {
	out := make([]Ruleset, len(in))
	for i, rs := range in {
		out[i] = Ruleset{Family: rs.Family, Tables: make([]Table, len(rs.Tables))}
		for j, t := range rs.Tables {
			out[i].Tables[j] = Table{Name: t.Name, Chains: make([]Chain, len(t.Chains))}
			for k, c := range t.Chains {
				rules := make([]Rule, len(c.Rules))
				for l, r := range c.Rules {
					rules[l] = slices.Clone(r)
				}
				out[i].Tables[j].Chains[k] = Chain{Name: c.Name, Builtin: c.Builtin, Rules: rules}
			}
		}
	}
	return out
}

func equalRulesets(a, b []Ruleset) bool {
	return slices.EqualFunc(a, b, func(x, y Ruleset) bool {
		return x.Family == y.Family && slices.EqualFunc(x.Tables, y.Tables, func(s, t Table) bool {
			return s.Name == t.Name && slices.EqualFunc(s.Chains, t.Chains, func(c, d Chain) bool {
				return c.Name == d.Name && c.Builtin == d.Builtin && slices.EqualFunc(c.Rules, d.Rules, func(r, q Rule) bool {
					return slices.Equal(r, q)
				})
			})
		})
	})
}
