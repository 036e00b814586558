package iptables

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// RuleRunner is one family's iptables binaries, as the chain syncer needs
// them. The exec implementation is iptables/kernel.Runner; unit tests use iptablestest.FakeRunner.
type RuleRunner interface {
	// Save is `iptables-save`: every table of the family, in one process.
	Save() (string, error)
	// Restore is `iptables-restore -w 5 --noflush` fed with input: per
	// table ("*TABLE" ... "COMMIT"), one atomic transaction that declares
	// (creating or flushing) and fills chains.
	Restore(input string) error
}

// savedTable is one table of iptables-save output: each chain's rules, as the
// text after "-A CHAIN ".
type savedTable map[string][]string

// quoteArg quotes one argument the way iptables-save does, so that
// iptables-restore reads it back as one word.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\"'\\") {
		return a
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(a) + `"`
}

// RuleText renders a rule spec as iptables-save and iptables-restore write
// it after "-A CHAIN ".
func RuleText(r Rule) string {
	q := make([]string, len(r))
	for i, a := range r {
		if i > 0 && r[i-1] == "--comment" {
			q[i] = string(saveQuote(nil, a)) // exactly as iptables-save prints it
		} else {
			q[i] = quoteArg(a)
		}
	}
	return strings.Join(q, " ")
}

// RuleTarget is the chain a saved rule (its text after "-A CHAIN ") jumps
// or goes to ("" for none).
func RuleTarget(text string) string { return ruleTargetSpec(strings.Fields(text)) }

// ruleTargetSpec is the chain a rule jumps or goes to ("" for none).
func ruleTargetSpec(r Rule) string {
	for i := 0; i+1 < len(r); i++ {
		if r[i] == "-j" || r[i] == "-g" || r[i] == "--jump" || r[i] == "--goto" {
			return r[i+1]
		}
	}
	return ""
}

// canon remembers, per chain, the rules we last wrote and the text
// iptables-save printed for them just after, since iptables canonicalizes
// (`--or-mark 0x4000` is saved as `--set-xmark 0x4000/0x4000`, `-p tcp
// --dport 80` as `-p tcp -m tcp --dport 80`).
type canon struct {
	want []string
	got  []string
}

// chainSyncer keeps one family's proxy chains and jump rules as planned.
type chainSyncer struct {
	family string
	r      RuleRunner
	// canon is keyed "table/chain".
	canon map[string]canon
	// owned holds "table/chain" of every chain the proxy has planned since
	// it started, so a chain dropped from the plan is still removed.
	owned map[string]bool
	// repairing, when set (a full sync whose planned rules did not change
	// since the last one), is told before each iptables-restore which
	// chains it rewrites: others changed them. It is called before the
	// write, so the log names a repair before anyone can see it done.
	repairing func(table string, chains []string)
	// restoreFailed, if set, is told once per sync whose iptables-restore
	// failed (Syncer.OnRestoreFailure).
	restoreFailed func(family string)
	// iptablesModeLeft says the last save read, outside a handover, held
	// chains of kube-proxy's iptables mode: kept serving until
	// Syncer.FinishTakeover removes them (leftovers.go).
	iptablesModeLeft bool
}

func newChainSyncer(family string, r RuleRunner) *chainSyncer {
	return &chainSyncer{family: family, r: r, canon: map[string]canon{}, owned: map[string]bool{}}
}

func renderRules(rules []Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = RuleText(r)
	}
	return out
}

// matches reports whether a chain's saved rules are what we want, either
// literally or as iptables canonicalized them after our last write.
func (c *chainSyncer) matches(key string, want, got []string) bool {
	if slices.Equal(want, got) {
		return true
	}
	k, ok := c.canon[key]
	return ok && slices.Equal(k.want, want) && slices.Equal(k.got, got)
}

// ourJumps are the rules in a built-in chain that jump to one of ours, or
// that are literally one of ours (texts).
func ourJumps(rules []string, ours map[string]bool, texts ...[]string) []string {
	var out []string
	for _, r := range rules {
		if ours[RuleTarget(r)] || slices.ContainsFunc(texts, func(t []string) bool { return slices.Contains(t, r) }) {
			out = append(out, r)
		}
	}
	return out
}

// full makes the tables of rs hold our chains exactly as planned and our
// jump rules at the head of the built-in chains, and removes the chains we
// created in tables rs no longer names (sync). Chains and rules of others
// are never written.
func (c *chainSyncer) full(rs Ruleset, saved string) error {
	tables := slices.Clone(rs.Tables)
	planned := map[string]bool{}
	for _, t := range rs.Tables {
		planned[t.Name] = true
	}
	stale := map[string]bool{}
	for key := range c.owned {
		table, _, _ := strings.Cut(key, "/")
		if !planned[table] {
			stale[table] = true
		}
	}
	for _, table := range slices.Sorted(maps.Keys(stale)) {
		tables = append(tables, Table{Name: table})
	}
	_, err := c.syncSaved(tables, saved, false)
	return err
}

// tableWrite is what one table needs written: the iptables-restore block
// and what it rewrites.
type tableWrite struct {
	t Table
	// script is the table's "*TABLE ... COMMIT" block.
	script string
	// rewritten are the planned chains the block writes; stale the chains
	// it removes; targets our chains and the stale ones (jumps to any of
	// them from a built-in chain are ours).
	rewritten map[string]bool
	stale     []string
	targets   map[string]bool
}

// sync makes each of tables hold its planned chains and jumps and removes
// the chains of removable, with one iptables-save of the family (every
// table in one process) and, when anything differs, one iptables-restore
// of the tables that differ and one more save to learn how iptables
// canonicalized what it wrote; wrote reports whether it ran a restore.
// Should the restore fail, each table is planned again from a fresh save
// and restored alone, so that one table's failure keeps only that table
// from its plan.
func (c *chainSyncer) sync(tables []Table, handover bool) (wrote bool, err error) {
	out, err := c.r.Save()
	if err != nil {
		return false, fmt.Errorf("%s tables: %w", c.family, err)
	}
	return c.syncSaved(tables, out, handover)
}

// syncSaved is sync with out, the family's iptables-save output, read
// already. Unless handover, kube-proxy's iptables-mode chains and its jumps
// to them in KUBE-SERVICES stay (plan).
func (c *chainSyncer) syncSaved(tables []Table, out string, handover bool) (wrote bool, err error) {
	saved := parseSaveAll(out)
	if !handover {
		c.iptablesModeLeft = slices.ContainsFunc(slices.Collect(maps.Keys(saved)), func(table string) bool {
			return iptablesModeIn(table, saved[table])
		})
	}
	var writes []*tableWrite
	for _, t := range tables {
		if w := c.plan(t, saved[t.Name], handover); w != nil {
			writes = append(writes, w)
		}
	}
	if len(writes) == 0 {
		return false, nil
	}
	if c.repairing != nil {
		for _, w := range writes {
			var names []string
			for _, ch := range w.t.Chains {
				if w.rewritten[ch.Name] {
					names = append(names, ch.Name)
				}
			}
			c.repairing(w.t.Name, append(names, w.stale...))
		}
	}
	var errs []error
	var script strings.Builder
	for _, w := range writes {
		script.WriteString(w.script)
	}
	if err := c.r.Restore(script.String()); err != nil {
		if c.restoreFailed != nil {
			c.restoreFailed(c.family)
		}
		if len(writes) == 1 {
			return true, fmt.Errorf("%s table %s: %w", c.family, writes[0].t.Name, err)
		}
		// iptables-restore commits table by table, so the tables before
		// the one that failed may be written. Each table again, alone and
		// from a fresh save: one table's failure keeps no other from its
		// plan, and none is written twice.
		var done []*tableWrite
		for _, w := range writes {
			out, err := c.r.Save()
			if err == nil {
				if again := c.plan(w.t, parseSaveAll(out)[w.t.Name], handover); again != nil {
					err = c.r.Restore(again.script)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s table %s: %w", c.family, w.t.Name, err))
				continue
			}
			done = append(done, w)
		}
		if writes = done; len(writes) == 0 {
			return true, errors.Join(errs...)
		}
	}
	for _, w := range writes {
		for _, n := range w.stale {
			delete(c.owned, w.t.Name+"/"+n)
			delete(c.canon, w.t.Name+"/"+n)
		}
	}
	// Learn how iptables canonicalized what we wrote.
	out, err = c.r.Save()
	if err != nil {
		return true, errors.Join(append(errs, fmt.Errorf("%s tables: %w", c.family, err))...)
	}
	saved = parseSaveAll(out)
	for _, w := range writes {
		c.learn(w, saved[w.t.Name])
	}
	return true, errors.Join(errs...)
}

// plan compares table t with its saved state and returns what to write, or
// nil when it holds its plan and nothing is to be removed. Only a handover
// removes kube-proxy's iptables-mode chains; before it, nat KUBE-SERVICES
// is left as it is while it jumps to them, so their DNAT stays in front
// (leftovers.go).
func (c *chainSyncer) plan(t Table, saved savedTable, handover bool) *tableWrite {
	ours := map[string]bool{}
	for _, ch := range t.Chains {
		if !ch.Builtin {
			ours[ch.Name] = true
		}
	}
	// stale: chains we created and no longer plan, and kube-proxy's
	// chains we do not plan; removed in the same transaction that writes
	// ours, so never before our rules are in place.
	stale := c.removable(t.Name, saved, ours, handover)
	targets := map[string]bool{}
	for n := range ours {
		targets[n] = true
	}
	for _, n := range stale {
		targets[n] = true
	}

	var sc restoreScript
	rewritten := map[string]bool{}
	for _, ch := range t.Chains {
		key := t.Name + "/" + ch.Name
		want := renderRules(ch.Rules)
		var rewrite bool
		switch {
		case ch.Builtin:
			rewrite = c.planJumps(&sc, key, ch, want, saved[ch.Name], targets)
		case !handover && holdsIPTablesMode(t.Name, ch.Name, saved):
			// kube-proxy's DNAT serves until the handover.
		default:
			rewrite = c.planChain(&sc, key, ch, want, saved)
		}
		if rewrite {
			rewritten[ch.Name] = true
		}
	}
	if len(stale) > 0 {
		sc.removeStale(stale, saved, rewritten)
	}
	if handover {
		sc.removeJumps(kubeProxyIPTablesJumps[t.Name], saved, rewritten, stale)
	}
	if sc.empty() {
		return nil
	}
	return &tableWrite{t: t, rewritten: rewritten, stale: stale, targets: targets, script: sc.text(t.Name)}
}

// restoreScript is one table's `iptables-restore --noflush` block: chain
// declarations, rule changes, and chain deletions last.
type restoreScript struct{ decl, body, tail []string }

func (sc *restoreScript) empty() bool { return len(sc.decl)+len(sc.body)+len(sc.tail) == 0 }

func (sc *restoreScript) text(table string) string {
	return "*" + table + "\n" + joinLines(sc.decl) + joinLines(sc.body) + joinLines(sc.tail) + "COMMIT\n"
}

// planJumps plans built-in chain ch's jumps to our chains (want) against
// the saved ones, and reports whether they are rewritten: deleted and
// inserted at the head, in order.
func (c *chainSyncer) planJumps(sc *restoreScript, key string, ch Chain, want, saved []string, targets map[string]bool) bool {
	got := ourJumps(saved, targets, want, c.canon[key].got)
	// A jump present twice (two proxies inserting at once, a crash between
	// a write and its record) is drift however the text compares: rewrite
	// the jumps.
	dup := len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got)
	if !dup && c.matches(key, want, got) {
		return false
	}
	if _, known := c.canon[key]; !known && !dup && sameWords(got, ch.Rules) {
		// First sync since start and only the quoting differs: the saved
		// jumps are the planned ones.
		c.canon[key] = canon{want: want, got: got}
		return false
	}
	for _, r := range got {
		sc.body = append(sc.body, "-D "+ch.Name+" "+r)
	}
	for i := len(want) - 1; i >= 0; i-- {
		sc.body = append(sc.body, "-I "+ch.Name+" 1 "+want[i])
	}
	return true
}

// planChain plans our chain ch (want) against the saved table, and reports
// whether it is rewritten: declared (which flushes it) and filled.
func (c *chainSyncer) planChain(sc *restoreScript, key string, ch Chain, want []string, saved savedTable) bool {
	got, exists := saved[ch.Name]
	if exists && c.matches(key, want, got) {
		c.owned[key] = true
		return false
	}
	sc.decl = append(sc.decl, ":"+ch.Name+" - [0:0]")
	for _, r := range want {
		sc.body = append(sc.body, "-A "+ch.Name+" "+r)
	}
	return true
}

// removeStale drops the jumps to stale chains from the built-in chains not
// already rewritten, then flushes and deletes the stale chains that exist.
func (sc *restoreScript) removeStale(stale []string, saved savedTable, rewritten map[string]bool) {
	staleSet := map[string]bool{}
	for _, n := range stale {
		staleSet[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(saved)) {
		if rewritten[name] || !IsBuiltinChain(name) {
			continue
		}
		for _, r := range ourJumps(saved[name], staleSet) {
			sc.body = append(sc.body, "-D "+name+" "+r)
		}
	}
	for _, n := range stale {
		if _, exists := saved[n]; exists {
			sc.decl = append(sc.decl, ":"+n+" - [0:0]")
			sc.tail = append(sc.tail, "-X "+n)
		}
	}
}

// removeJumps deletes from each built-in chain of jumps that is not
// rewritten the rules that jump to one of its targets, but not to a stale
// chain: removeStale deletes those.
func (sc *restoreScript) removeJumps(jumps map[string][]string, saved savedTable, rewritten map[string]bool, stale []string) {
	for _, name := range slices.Sorted(maps.Keys(jumps)) {
		if rewritten[name] {
			continue
		}
		targets := map[string]bool{}
		for _, tgt := range jumps[name] {
			targets[tgt] = !slices.Contains(stale, tgt)
		}
		for _, r := range ourJumps(saved[name], targets) {
			sc.body = append(sc.body, "-D "+name+" "+r)
		}
	}
}

// learn records the chains w wrote as ours, and the text iptables saved
// for the rewritten ones.
func (c *chainSyncer) learn(w *tableWrite, saved savedTable) {
	for _, ch := range w.t.Chains {
		key := w.t.Name + "/" + ch.Name
		if !ch.Builtin {
			c.owned[key] = true
		}
		if !w.rewritten[ch.Name] {
			continue
		}
		got := saved[ch.Name]
		if ch.Builtin {
			got = ourJumps(got, w.targets, renderRules(ch.Rules))
		}
		c.canon[key] = canon{want: renderRules(ch.Rules), got: got}
	}
}

// IsBuiltinChain says whether chain is one of the kernel's own (a hook), which
// a restore never creates or deletes.
func IsBuiltinChain(chain string) bool {
	switch chain {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// cleanup removes the chains rs names and every jump to them from the
// built-in chains, after one iptables-save of the family, in one
// iptables-restore per table, and nothing else. A table that holds none
// of them is not written.
func (c *chainSyncer) cleanup(rs Ruleset) error {
	out, err := c.r.Save()
	if err != nil {
		return fmt.Errorf("%s tables: %w", c.family, err)
	}
	all := parseSaveAll(out)
	var errs []error
	for _, t := range rs.Tables {
		saved := all[t.Name]
		ours := map[string]bool{}
		texts := map[string][]string{}
		for _, ch := range t.Chains {
			if !ch.Builtin {
				ours[ch.Name] = true
			} else {
				texts[ch.Name] = append(renderRules(ch.Rules), c.canon[t.Name+"/"+ch.Name].got...)
			}
		}
		for key := range c.owned {
			table, name, _ := strings.Cut(key, "/")
			if table == t.Name {
				ours[name] = true
			}
		}
		var decl, body, tail []string
		for _, name := range slices.Sorted(maps.Keys(saved)) {
			if !IsBuiltinChain(name) {
				continue
			}
			for _, r := range ourJumps(saved[name], ours, texts[name]) {
				body = append(body, "-D "+name+" "+r)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(ours)) {
			if _, exists := saved[name]; exists {
				decl = append(decl, ":"+name+" - [0:0]")
				tail = append(tail, "-X "+name)
			}
		}
		if len(decl)+len(body) > 0 {
			script := "*" + t.Name + "\n" + joinLines(decl) + joinLines(body) + joinLines(tail) + "COMMIT\n"
			if err := c.r.Restore(script); err != nil {
				errs = append(errs, fmt.Errorf("%s table %s: %w", c.family, t.Name, err))
				continue
			}
		}
		for name := range ours {
			delete(c.owned, t.Name+"/"+name)
		}
		for key := range c.canon {
			if strings.HasPrefix(key, t.Name+"/") {
				delete(c.canon, key)
			}
		}
	}
	return errors.Join(errs...)
}
