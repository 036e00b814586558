package iptables

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
)

// FakeSets is a SetKernel for unit tests: a stateful, dumpable ipset table
// in memory, with the kernel's rules for what the syncer uses: names are unique, entries must fit the set, a hash
// set holds at most maxelem entries, a set referenced by a rule cannot be
// destroyed, and swap exchanges two sets of one type and family under their
// names (the references stay with the name, as rules hold a set by index).
type FakeSets struct {
	sets map[string]*KernelSet
	// refs counts references by rules that are not in a FakeRunner (set
	// by hand in tests).
	refs map[string]int
	// tables, when set, are the iptables of each family whose rules
	// reference sets by --match-set, as the kernel counts them.
	tables []*FakeRunner
	// ops counts calls per kind ("list", "create", "add", ...).
	ops map[string]int
	// reject makes Add fail for entries of this set whose text is listed.
	reject map[string]bool
	// index caches each set's entries as a map for Add, valid while the
	// slice (first element and length) is the one it was built from: tests
	// edit Entries directly.
	index map[*KernelSet]*entryIndex
}

type entryIndex struct {
	first *Entry
	n     int
	has   map[Entry]bool
}

// members is ks's entry index, rebuilt when the slice changed.
func (f *FakeSets) members(ks *KernelSet) map[Entry]bool {
	var first *Entry
	if len(ks.Entries) > 0 {
		first = &ks.Entries[0]
	}
	if ix := f.index[ks]; ix != nil && ix.first == first && ix.n == len(ks.Entries) {
		return ix.has
	}
	has := make(map[Entry]bool, len(ks.Entries))
	for _, e := range ks.Entries {
		has[e] = true
	}
	if f.index == nil {
		f.index = map[*KernelSet]*entryIndex{}
	}
	f.index[ks] = &entryIndex{first: first, n: len(ks.Entries), has: has}
	return has
}

// NewFakeSets returns an empty FakeSets.
func NewFakeSets() *FakeSets {
	return &FakeSets{sets: map[string]*KernelSet{}, refs: map[string]int{}, ops: map[string]int{}, reject: map[string]bool{}}
}

// references counts what holds the set: hand-set refs and rules.
func (f *FakeSets) references(name string) int {
	n := f.refs[name]
	for _, t := range f.tables {
		for _, chains := range t.tables {
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
func (f *FakeSets) ListAll() (map[string]*KernelSet, error) {
	f.ops["list"]++
	out := map[string]*KernelSet{}
	for n, s := range f.sets {
		c := *s
		c.Entries = slices.Clone(s.Entries)
		hashOrder(c.Entries)
		c.References = uint32(f.references(n))
		out[n] = &c
	}
	return out, nil
}

func (f *FakeSets) Create(s IPSet, maxElem uint32) error {
	f.ops["create"]++
	if f.sets[s.Name] != nil {
		return fmt.Errorf("ipset create %s: %w", s.Name, ErrSetExists)
	}
	ks := &KernelSet{Name: s.Name, Type: s.Type, Family: s.Family, MaxElem: maxElem}
	if s.Type == TypeBitmapPort {
		ks.Family, ks.MaxElem, ks.PortFrom, ks.PortTo = "", 0, BitmapPortFrom, BitmapPortTo
	}
	f.sets[s.Name] = ks
	return nil
}

// createExist is `ipset create NAME ... -exist` as kube-proxy runs it: an
// existing set must have exactly the requested maxelem, range and no
// extension (the kernel's same_set), and type and family.
func (f *FakeSets) createExist(name, typ, family string) error {
	ks := f.sets[name]
	if ks == nil {
		return f.Create(IPSet{Name: name, Type: typ, Family: family}, KubeProxyMaxElem)
	}
	same := ks.Type == typ && ks.Timeout == 0 && ks.CadtFlags == 0 && ks.Netmask == 0
	if typ == TypeBitmapPort {
		same = same && ks.PortFrom == BitmapPortFrom && ks.PortTo == BitmapPortTo
	} else {
		same = same && ks.Family == family && ks.MaxElem == KubeProxyMaxElem
	}
	if !same {
		return fmt.Errorf("ipset create %s %s -exist: set with the same name already exists (%s): %w", name, typ, ks.options(), ErrSetExists)
	}
	return nil
}

func (f *FakeSets) Destroy(name string) error {
	f.ops["destroy"]++
	if f.sets[name] == nil {
		return fmt.Errorf("ipset destroy %s: %w", name, ErrSetNotFound)
	}
	if f.references(name) > 0 {
		return fmt.Errorf("ipset destroy %s: %w", name, ErrSetReferenced)
	}
	delete(f.sets, name)
	return nil
}

func (f *FakeSets) Swap(from, to string) error {
	f.ops["swap"]++
	a, b := f.sets[from], f.sets[to]
	if a == nil || b == nil {
		return fmt.Errorf("ipset swap %s %s: %w", from, to, ErrSetNotFound)
	}
	if a.Type != b.Type || a.Family != b.Family {
		return fmt.Errorf("ipset swap %s %s: type mismatch: %w", from, to, ErrKernel)
	}
	a.Name, b.Name = to, from
	f.sets[from], f.sets[to] = b, a
	return nil
}

func (f *FakeSets) check(s IPSet, e Entry) (*KernelSet, error) {
	ks := f.sets[s.Name]
	if ks == nil {
		return nil, fmt.Errorf("ipset %s: %w", s.Name, ErrSetNotFound)
	}
	if err := CheckEntry(IPSet{Type: ks.Type, Family: ks.Family}, e); err != nil {
		return nil, err
	}
	if f.reject[s.Name+" "+formatEntry(ks.Type, e)] {
		return nil, fmt.Errorf("ipset add %s %s: %w", s.Name, formatEntry(ks.Type, e), ErrKernel)
	}
	return ks, nil
}

// Add stops at the first bad entry, as the kernel does with a batch.
func (f *FakeSets) Add(s IPSet, entries []Entry) error {
	f.ops["add"]++
	for _, e := range entries {
		ks, err := f.check(s, e)
		if err != nil {
			return err
		}
		e = Canonical(ks.Type, e)
		if has := f.members(ks); !has[e] {
			if ks.MaxElem != 0 && len(ks.Entries) >= int(ks.MaxElem) {
				return fmt.Errorf("ipset add %s %s: hash is full: %w", s.Name, formatEntry(ks.Type, e), ErrKernel)
			}
			ks.Entries = append(ks.Entries, e)
			has[e] = true
			f.index[ks].first, f.index[ks].n = &ks.Entries[0], len(ks.Entries)
		}
	}
	return nil
}

// Del stops at the first bad entry too.
func (f *FakeSets) Del(s IPSet, entries []Entry) error {
	f.ops["del"]++
	del := map[Entry]bool{}
	var ks *KernelSet
	var err error
	for _, e := range entries {
		var k *KernelSet
		if k, err = f.check(s, e); err != nil {
			break
		}
		ks = k
		del[Canonical(k.Type, e)] = true
	}
	if ks != nil {
		ks.Entries = slices.DeleteFunc(ks.Entries, func(x Entry) bool { return del[x] })
	}
	return err
}

// save renders the table like `ipset save` (sorted, without hashsize).
func (f *FakeSets) save() string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(f.sets)) {
		s := f.sets[n]
		fmt.Fprintf(&b, "create %s %s %s\n", n, s.Type, s.Family)
		lines := make([]string, 0, len(s.Entries))
		for _, e := range s.Entries {
			lines = append(lines, "add "+n+" "+formatEntry(s.Type, e))
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
	tables map[string]map[string][]string
	order  map[string][]string // chain creation order per table
	execs  int
	// canon rewrites rule text as iptables would save it.
	canon func(string) string
}

var builtinChains = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
}

// NewFakeRunner returns a FakeRunner with the built-in chains only.
func NewFakeRunner() *FakeRunner {
	f := &FakeRunner{tables: map[string]map[string][]string{}, order: map[string][]string{}, canon: func(s string) string { return s }}
	for t, chains := range builtinChains {
		f.tables[t] = map[string][]string{}
		for _, c := range chains {
			f.tables[t][c] = nil
		}
		f.order[t] = slices.Clone(chains)
	}
	return f
}

func (f *FakeRunner) Save() (string, error) {
	f.execs++
	var b strings.Builder
	b.WriteString("# Generated by fake\n")
	for _, table := range slices.Sorted(maps.Keys(f.tables)) {
		t := f.tables[table]
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range f.order[table] {
			pol := "-"
			if isBuiltin(c) {
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
	f.execs++
	// Each table's block works on a copy, committed at its COMMIT.
	tables := map[string]map[string][]string{}
	order := map[string][]string{}
	var t map[string][]string
	var tn string
	for i, line := range strings.Split(strings.TrimSpace(input), "\n") {
		fail := func(why string) error { return fmt.Errorf("line %d %q: %s: %w", i+1, line, why, ErrKernel) }
		switch {
		case strings.HasPrefix(line, "*"):
			tn = line[1:]
			t = map[string][]string{}
			for c, r := range f.tables[tn] {
				t[c] = slices.Clone(r)
			}
			tables[tn], order[tn] = t, slices.Clone(f.order[tn])
		case line == "COMMIT":
			f.tables[tn], f.order[tn] = t, order[tn]
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
	if tgt := ruleTarget(rest); tgt != "" && !isBuiltin(tgt) && !slices.Contains([]string{"ACCEPT", "DROP", "RETURN", "REJECT", "MARK", "MASQUERADE"}, tgt) {
		if _, ok := t[tgt]; !ok && op != "-D" {
			return "no target chain"
		}
	}
	rest = f.canon(rest)
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
			if ruleTarget(r) == name {
				return "chain referenced by " + c
			}
		}
	}
	delete(t, name)
	return ""
}

// set adds a chain with rules directly, as a user would.
func (f *FakeRunner) set(table, chain string, rules ...string) {
	if _, ok := f.tables[table][chain]; !ok {
		f.order[table] = append(f.order[table], chain)
	}
	f.tables[table][chain] = rules
}

// dump is every table as iptables-save prints it, without counting as an
// exec.
func (f *FakeRunner) dump() string {
	out, _ := f.Save()
	f.execs--
	return out
}

// hashOrder puts entries in the order of a hash of each, the same in every
// run: a listing in no order a caller could rely on, and no order a sort
// finds already made.
func hashOrder(entries []Entry) {
	key := func(e Entry) uint64 {
		h := fnv.New64a()
		fmt.Fprint(h, e)
		return h.Sum64()
	}
	keys := make(map[Entry]uint64, len(entries))
	for _, e := range entries {
		keys[e] = key(e)
	}
	slices.SortFunc(entries, func(a, b Entry) int {
		if ka, kb := keys[a], keys[b]; ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		return CompareEntries(a, b)
	})
}
