package iptables

import (
	"fmt"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Readback is what a full sync reads of the ipsets and the tables, read
// beside the sync loop (Syncer.BeginFull): the ipset dump and each
// family's iptables-save.
type Readback struct {
	// sets is the dump; nil when the Syncer has no Reader (FullFrom then
	// dumps itself).
	sets map[string]*KernelSet
	// saves are the families' iptables-save outputs.
	saves map[string]string
}

// BeginFull starts a full sync whose reads run on another goroutine: it
// returns the read, to run once there (it uses the Reader and the
// families' iptables-save only). Partial syncs may run meanwhile; FullFrom
// then takes what the read returned. From now on the Syncer records what
// it writes: the entries and sets partial syncs change keep the mirror's
// view in FullFrom, and a chain sync makes the saves stale (the chains are
// saved again by FullFrom).
func (a *Syncer) BeginFull() func() (*Readback, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sets.beginRead()
	a.chainsWritten = false
	runners := map[string]RuleRunner{}
	for fam, c := range a.chains {
		runners[fam] = c.r
	}
	reader := a.Reader
	var snap map[string]setDigest
	if reader != nil {
		snap = a.sets.digests()
	}
	return func() (*Readback, error) {
		rb := &Readback{saves: map[string]string{}}
		if reader != nil {
			// Compared and sorted here: the comparison is most of
			// FullFrom's at scale, and stays off the loop.
			have, err := listCompared(reader, snap)
			if err != nil {
				return nil, fmt.Errorf("ipset save: %w", err)
			}
			rb.sets = have
		}
		for fam, r := range runners {
			out, err := r.Save()
			if err != nil {
				return nil, fmt.Errorf("%s iptables-save: %w", fam, err)
			}
			rb.saves[fam] = out
		}
		return rb, nil
	}
}

// FullFrom is Full with the ipsets and tables as rb, the read BeginFull
// returned, found them. layer.ErrNoRead: a Full ran since BeginFull. It
// syncs in one step, so turn is never called: the applier gives waiting
// changes their turn before and after it.
func (a *Syncer) FullFrom(d Desired, rb *Readback, _ layer.Turn[Desired]) (*Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.sets.reading() {
		return nil, fmt.Errorf("iptables syncer: FullFrom without BeginFull: %w", layer.ErrNoRead)
	}
	sets, rules := d.Sets, d.Rules
	saves := rb.saves
	if a.chainsWritten {
		saves = nil
	}
	since, sinceSets := a.sets.endRead()
	setsFull := func() error {
		if rb.sets == nil {
			return a.sets.full(sets)
		}
		return a.sets.fullFrom(sets, rb.sets, since, sinceSets)
	}
	return a.full(sets, rules, setsFull, saves), nil
}

// beginRead starts recording what the set syncer writes.
func (s *setSyncer) beginRead() {
	s.since, s.sinceSets = map[string]map[Entry]bool{}, map[string]bool{}
}

// reading reports whether a read beside the loop is under way.
func (s *setSyncer) reading() bool { return s.since != nil }

// endRead stops the recording and returns it.
func (s *setSyncer) endRead() (map[string]map[Entry]bool, map[string]bool) {
	since, sets := s.since, s.sinceSets
	s.since, s.sinceSets = nil, nil
	return since, sets
}

// wrote records entries added to or deleted from set name, while a read
// is under way.
func (s *setSyncer) wrote(name string, lists ...[]Entry) {
	if s.since == nil {
		return
	}
	rec := s.since[name]
	if rec == nil {
		rec = map[Entry]bool{}
		s.since[name] = rec
	}
	for _, l := range lists {
		for _, e := range l {
			rec[e] = true
		}
	}
}

// wroteSet records that set name was created, replaced or destroyed,
// while a read is under way.
func (s *setSyncer) wroteSet(name string) {
	if s.sinceSets != nil {
		s.sinceSets[name] = true
	}
}

// asMirrored is ks with the entries written since the dump as the mirror
// has them: present when the mirror holds them, absent otherwise;
// normalized.
func (s *setSyncer) asMirrored(ks *KernelSet, written map[Entry]bool) *KernelSet {
	m := s.mirror[ks.Name]
	out := *ks
	out.Entries = slices.DeleteFunc(slices.Clone(normalize(ks.Type, ks.Entries)), func(e Entry) bool { return written[e] })
	added := false
	for e := range written {
		if m == nil {
			break
		}
		if _, ok := slices.BinarySearchFunc(m.entries, e, CompareEntries); ok {
			out.Entries = append(out.Entries, e)
			added = true
		}
	}
	if added {
		out.Entries = normalize(ks.Type, out.Entries)
	}
	return &out
}
