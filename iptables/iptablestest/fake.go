// Package iptablestest holds in-memory ipsets and an in-memory
// iptables-save/restore for other packages' unit tests. It never touches the
// kernel; the kernel's are iptables/kernel.
package iptablestest

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// FakeSets is a SetKernel for unit tests: a stateful, dumpable ipset table
// in memory, with the kernel's rules for what the syncer uses: names are unique, entries must fit the set, a hash
// set holds at most maxelem entries, a set referenced by a rule cannot be
// destroyed, and swap exchanges two sets of one type and family under their
// names (the references stay with the name, as rules hold a set by index).
type FakeSets struct {
	Sets map[string]*iptables.KernelSet
	// refs counts references by rules that are not in a FakeRunner (set
	// by hand in tests).
	Refs map[string]int
	// tables, when set, are the iptables of each family whose rules
	// reference sets by --match-set, as the kernel counts them.
	Tables []*FakeRunner
	// ops counts calls per kind ("list", "create", "add", ...).
	Ops map[string]int
	// reject makes Add fail for entries of this set whose text is listed.
	Reject map[string]bool
	// index caches each set's entries as a map for Add, valid while the
	// slice (first element and length) is the one it was built from: tests
	// edit Entries directly.
	index map[*iptables.KernelSet]*entryIndex
}

type entryIndex struct {
	first *iptables.Entry
	n     int
	has   map[iptables.Entry]bool
}

// members is ks's entry index, rebuilt when the slice changed.
func (f *FakeSets) members(ks *iptables.KernelSet) map[iptables.Entry]bool {
	var first *iptables.Entry
	if len(ks.Entries) > 0 {
		first = &ks.Entries[0]
	}
	if ix := f.index[ks]; ix != nil && ix.first == first && ix.n == len(ks.Entries) {
		return ix.has
	}
	has := make(map[iptables.Entry]bool, len(ks.Entries))
	for _, e := range ks.Entries {
		has[e] = true
	}
	if f.index == nil {
		f.index = map[*iptables.KernelSet]*entryIndex{}
	}
	f.index[ks] = &entryIndex{first: first, n: len(ks.Entries), has: has}
	return has
}

// NewFakeSets returns an empty FakeSets.
func NewFakeSets() *FakeSets {
	return &FakeSets{Sets: map[string]*iptables.KernelSet{}, Refs: map[string]int{}, Ops: map[string]int{}, Reject: map[string]bool{}}
}

// references counts what holds the set: hand-set refs and rules.
func (f *FakeSets) References(name string) int {
	n := f.Refs[name]
	for _, t := range f.Tables {
		for _, chains := range t.Tables {
			for _, rules := range chains {
				for _, r := range rules {
					if strings.Contains(r, "--match-set "+name+" ") {
						n++
					}
				}
			}
		}
	}
	return n
}

// ListAll lists each set's entries in an order of their hashes, as the
// kernel's hash sets do: a caller that needs them sorted pays for it here
// as it would on a node.
func (f *FakeSets) ListAll() (map[string]*iptables.KernelSet, error) {
	f.Ops["list"]++
	out := map[string]*iptables.KernelSet{}
	for n, s := range f.Sets {
		c := *s
		c.Entries = slices.Clone(s.Entries)
		hashOrder(c.Entries)
		c.References = uint32(f.References(n))
		out[n] = &c
	}
	return out, nil
}

func (f *FakeSets) Create(s iptables.IPSet, maxElem uint32) error {
	f.Ops["create"]++
	if f.Sets[s.Name] != nil {
		return fmt.Errorf("ipset create %s: %w", s.Name, iptables.ErrSetExists)
	}
	ks := &iptables.KernelSet{Name: s.Name, Type: s.Type, Family: s.Family, MaxElem: maxElem}
	if s.Type == iptables.TypeBitmapPort {
		ks.Family, ks.MaxElem, ks.PortFrom, ks.PortTo = "", 0, iptables.BitmapPortFrom, iptables.BitmapPortTo
	}
	f.Sets[s.Name] = ks
	return nil
}

// createExist is `ipset create NAME ... -exist` as kube-proxy runs it: an
// existing set must have exactly the requested maxelem, range and no
// extension (the kernel's same_set), and type and family.
func (f *FakeSets) CreateExist(name, typ, family string) error {
	ks := f.Sets[name]
	if ks == nil {
		return f.Create(iptables.IPSet{Name: name, Type: typ, Family: family}, iptables.KubeProxyMaxElem)
	}
	same := ks.Type == typ && ks.Timeout == 0 && ks.CadtFlags == 0 && ks.Netmask == 0
	if typ == iptables.TypeBitmapPort {
		same = same && ks.PortFrom == iptables.BitmapPortFrom && ks.PortTo == iptables.BitmapPortTo
	} else {
		same = same && ks.Family == family && ks.MaxElem == iptables.KubeProxyMaxElem
	}
	if !same {
		return fmt.Errorf("ipset create %s %s -exist: set with the same name already exists (%s): %w", name, typ, ks.CreateOptions(), iptables.ErrSetExists)
	}
	return nil
}

func (f *FakeSets) Destroy(name string) error {
	f.Ops["destroy"]++
	if f.Sets[name] == nil {
		return fmt.Errorf("ipset destroy %s: %w", name, iptables.ErrSetNotFound)
	}
	if f.References(name) > 0 {
		return fmt.Errorf("ipset destroy %s: %w", name, iptables.ErrSetReferenced)
	}
	delete(f.Sets, name)
	return nil
}

func (f *FakeSets) Swap(from, to string) error {
	f.Ops["swap"]++
	a, b := f.Sets[from], f.Sets[to]
	if a == nil || b == nil {
		return fmt.Errorf("ipset swap %s %s: %w", from, to, iptables.ErrSetNotFound)
	}
	if a.Type != b.Type || a.Family != b.Family {
		return fmt.Errorf("ipset swap %s %s: type mismatch: %w", from, to, iptables.ErrKernel)
	}
	a.Name, b.Name = to, from
	f.Sets[from], f.Sets[to] = b, a
	return nil
}

func (f *FakeSets) check(s iptables.IPSet, e iptables.Entry) (*iptables.KernelSet, error) {
	ks := f.Sets[s.Name]
	if ks == nil {
		return nil, fmt.Errorf("ipset %s: %w", s.Name, iptables.ErrSetNotFound)
	}
	if err := iptables.CheckEntry(iptables.IPSet{Type: ks.Type, Family: ks.Family}, e); err != nil {
		return nil, err
	}
	if f.Reject[s.Name+" "+string(iptables.AppendEntry(nil, ks.Type, e))] {
		return nil, fmt.Errorf("ipset add %s %s: %w", s.Name, string(iptables.AppendEntry(nil, ks.Type, e)), iptables.ErrKernel)
	}
	return ks, nil
}

// Add stops at the first bad entry, as the kernel does with a batch.
func (f *FakeSets) Add(s iptables.IPSet, entries []iptables.Entry) error {
	f.Ops["add"]++
	for _, e := range entries {
		ks, err := f.check(s, e)
		if err != nil {
			return err
		}
		e = iptables.Canonical(ks.Type, e)
		if has := f.members(ks); !has[e] {
			if ks.MaxElem != 0 && len(ks.Entries) >= int(ks.MaxElem) {
				return fmt.Errorf("ipset add %s %s: hash is full: %w", s.Name, string(iptables.AppendEntry(nil, ks.Type, e)), iptables.ErrKernel)
			}
			ks.Entries = append(ks.Entries, e)
			has[e] = true
			f.index[ks].first, f.index[ks].n = &ks.Entries[0], len(ks.Entries)
		}
	}
	return nil
}

// Del stops at the first bad entry too.
func (f *FakeSets) Del(s iptables.IPSet, entries []iptables.Entry) error {
	f.Ops["del"]++
	del := map[iptables.Entry]bool{}
	var ks *iptables.KernelSet
	var err error
	for _, e := range entries {
		var k *iptables.KernelSet
		if k, err = f.check(s, e); err != nil {
			break
		}
		ks = k
		del[iptables.Canonical(k.Type, e)] = true
	}
	if ks != nil {
		ks.Entries = slices.DeleteFunc(ks.Entries, func(x iptables.Entry) bool { return del[x] })
	}
	return err
}

// save renders the table like `ipset save` (sorted, without hashsize).
func (f *FakeSets) SaveText() string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(f.Sets)) {
		s := f.Sets[n]
		fmt.Fprintf(&b, "create %s %s %s\n", n, s.Type, s.Family)
		lines := make([]string, 0, len(s.Entries))
		for _, e := range s.Entries {
			lines = append(lines, "add "+n+" "+string(iptables.AppendEntry(nil, s.Type, e)))
		}
		slices.Sort(lines)
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// FakeRunner is a RuleRunner for unit tests: one family's iptables as
// tables of chains of rule texts, written by an iptables-restore --noflush
// parser that is as strict as the real one about what the syncer writes (a
// table's block, "*T" to "COMMIT", fails as a whole; the blocks before it
// stay committed).
type FakeRunner struct {
	Tables map[string]map[string][]string
	order  map[string][]string // chain creation order per table
	Execs  int
	// canon rewrites rule text as iptables would save it.
	Canon func(string) string
}

var builtinChains = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
}

// NewFakeRunner returns a FakeRunner with the built-in chains only.
func NewFakeRunner() *FakeRunner {
	f := &FakeRunner{Tables: map[string]map[string][]string{}, order: map[string][]string{}, Canon: func(s string) string { return s }}
	for t, chains := range builtinChains {
		f.Tables[t] = map[string][]string{}
		for _, c := range chains {
			f.Tables[t][c] = nil
		}
		f.order[t] = slices.Clone(chains)
	}
	return f
}

func (f *FakeRunner) Save() (string, error) {
	f.Execs++
	var b strings.Builder
	b.WriteString("# Generated by fake\n")
	for _, table := range slices.Sorted(maps.Keys(f.Tables)) {
		t := f.Tables[table]
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range f.order[table] {
			pol := "-"
			if iptables.IsBuiltinChain(c) {
				pol = "ACCEPT"
			}
			fmt.Fprintf(&b, ":%s %s [0:0]\n", c, pol)
		}
		for _, c := range f.order[table] {
			for _, r := range t[c] {
				fmt.Fprintf(&b, "-A %s %s\n", c, r)
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String(), nil
}

func (f *FakeRunner) Restore(input string) error {
	f.Execs++
	// Each table's block works on a copy, committed at its COMMIT.
	tables := map[string]map[string][]string{}
	order := map[string][]string{}
	var t map[string][]string
	var tn string
	for i, line := range strings.Split(strings.TrimSpace(input), "\n") {
		fail := func(why string) error { return fmt.Errorf("line %d %q: %s: %w", i+1, line, why, iptables.ErrKernel) }
		switch {
		case strings.HasPrefix(line, "*"):
			tn = line[1:]
			t = map[string][]string{}
			for c, r := range f.Tables[tn] {
				t[c] = slices.Clone(r)
			}
			tables[tn], order[tn] = t, slices.Clone(f.order[tn])
		case line == "COMMIT":
			f.Tables[tn], f.order[tn] = t, order[tn]
			t = nil
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if _, ok := t[name]; !ok {
				order[tn] = append(order[tn], name)
			}
			t[name] = nil
		case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, "-D "), strings.HasPrefix(line, "-I "):
			if why := f.changeRule(t, line); why != "" {
				return fail(why)
			}
		case strings.HasPrefix(line, "-X "):
			name := line[3:]
			if why := deleteChain(t, name); why != "" {
				return fail(why)
			}
			order[tn] = slices.DeleteFunc(order[tn], func(c string) bool { return c == name })
		default:
			return fail("unknown line")
		}
	}
	return nil
}

// changeRule applies one -A, -I 1 or -D line to table t; the reason it is
// refused, or "".
func (f *FakeRunner) changeRule(t map[string][]string, line string) string {
	op := line[:2]
	name, rest, _ := strings.Cut(line[3:], " ")
	rules, ok := t[name]
	if !ok {
		return "no chain"
	}
	if op == "-I" {
		pos, r, _ := strings.Cut(rest, " ")
		if pos != "1" {
			return "only -I 1"
		}
		rest = r
	}
	if tgt := iptables.RuleTarget(rest); tgt != "" && !iptables.IsBuiltinChain(tgt) && !slices.Contains([]string{"ACCEPT", "DROP", "RETURN", "REJECT", "MARK", "MASQUERADE"}, tgt) {
		if _, ok := t[tgt]; !ok && op != "-D" {
			return "no target chain"
		}
	}
	rest = f.Canon(rest)
	switch op {
	case "-A":
		t[name] = append(rules, rest)
	case "-I":
		t[name] = append([]string{rest}, rules...)
	case "-D":
		j := slices.Index(rules, rest)
		if j < 0 {
			return "no such rule"
		}
		t[name] = slices.Delete(rules, j, j+1)
	}
	return ""
}

// deleteChain applies -X name to table t, as iptables does: only an
// empty chain no rule jumps to; the reason it is refused, or "".
func deleteChain(t map[string][]string, name string) string {
	if _, ok := t[name]; !ok {
		return "no chain"
	}
	if len(t[name]) > 0 {
		return "chain not empty"
	}
	for c, rules := range t {
		for _, r := range rules {
			if iptables.RuleTarget(r) == name {
				return "chain referenced by " + c
			}
		}
	}
	delete(t, name)
	return ""
}

// set adds a chain with rules directly, as a user would.
func (f *FakeRunner) SetChain(table, chain string, rules ...string) {
	if _, ok := f.Tables[table][chain]; !ok {
		f.order[table] = append(f.order[table], chain)
	}
	f.Tables[table][chain] = rules
}

// dump is every table as iptables-save prints it, without counting as an
// exec.
func (f *FakeRunner) Dump() string {
	out, _ := f.Save()
	f.Execs--
	return out
}

// hashOrder puts entries in the order of a hash of each, the same in every
// run: a listing in no order a caller could rely on, and no order a sort
// finds already made.
func hashOrder(entries []iptables.Entry) {
	key := func(e iptables.Entry) uint64 {
		h := fnv.New64a()
		fmt.Fprint(h, e)
		return h.Sum64()
	}
	keys := make(map[iptables.Entry]uint64, len(entries))
	for _, e := range entries {
		keys[e] = key(e)
	}
	slices.SortFunc(entries, func(a, b iptables.Entry) int {
		if ka, kb := keys[a], keys[b]; ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		return iptables.CompareEntries(a, b)
	})
}
