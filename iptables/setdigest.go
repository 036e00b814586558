package iptables

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/digest"
)

// setDigest is one of the mirror's sets as a full sync's read compares the
// kernel's with it (listCompared): its shape, and its entries as a count
// and a digest (internal/digest), so that the read keeps no entry of a set
// that holds what the mirror says. Before, the read's sorted copies of the
// sets were held until the loop compared them, and the comparison was a
// walk of every entry (see BenchmarkReadbackFullSyncScale).
type setDigest struct {
	// shape is the mirror's set without its entries (mirrorSet.matches).
	shape mirrorSet
	n     int
	sum   digest.Set
}

// SetWalker is a SetKernel whose listing can be walked entry by entry,
// and one set listed by name: a full sync's read then keeps the entries of
// the sets that differ from the mirror only, instead of every entry until
// it has compared them (listCompared). The kernel's Sets is one.
type SetWalker interface {
	// WalkAll is ListAll with each entry handed to keep as it is parsed,
	// and kept in its set only when keep says so. ks holds the set's name
	// and type when keep sees it.
	WalkAll(keep func(ks *KernelSet, e Entry) bool) (map[string]*KernelSet, error)
	// List is `ipset list NAME`: one set with its entries;
	// ErrSetNotFound when there is none.
	List(name string) (*KernelSet, error)
}

// entriesDigest is the digest of es, each taken in typ's canonical form
// (Canonical), in any order.
func entriesDigest(typ string, es []Entry) digest.Set {
	var d digest.Set
	for i := range es {
		addEntry(&d, typ, es[i])
	}
	return d
}

// addEntry adds e, in typ's canonical form, to d.
func addEntry(d *digest.Set, typ string, e Entry) {
	e = Canonical(typ, e)
	ipHi, ipLo := digest.Addr(e.IP)
	netHi, netLo := digest.Addr(e.Net.Addr())
	d.Add(digest.Mix(digest.Mix(ipHi, ipLo), digest.Mix(netHi, netLo)),
		digest.Mix(digest.String(string(e.Protocol)), uint64(e.Port)<<16|uint64(uint8(e.Net.Bits()+1))))
}

// digests are the mirror's sets as a read compares them.
func (s *setSyncer) digests() map[string]setDigest {
	out := make(map[string]setDigest, len(s.mirror))
	for name, m := range s.mirror {
		out[name] = setDigest{shape: mirrorSet{spec: m.spec, maxElem: m.maxElem}, n: len(m.entries), sum: m.digest()}
	}
	return out
}

// digest is m's entries' digest, computed again only after they changed.
func (m *mirrorSet) digest() digest.Set {
	if !m.summed {
		m.sum, m.summed = entriesDigest(m.spec.Type, m.entries), true
	}
	return m.sum
}

// listCompared is `ipset save` compared with snap, the mirror's sets when
// the read began: a set of the mirror's shape holding the mirror's entries
// comes without them and marked unchanged (the full sync takes the
// mirror's: every entry changed since the read began is a write the set
// syncer records); every other set comes with its entries normalized
// (the kernel lists a hash set in its hash order, and a full sync's
// comparison needs them sorted). A full sync's read runs it beside the
// loop (BeginFull).
func listCompared(k SetKernel, snap map[string]setDigest) (map[string]*KernelSet, error) {
	w, ok := k.(SetWalker)
	if !ok {
		w = listAllWalker{k}
	}
	// What the walk found of each mirrored set: its entries' count and
	// digest, not the entries.
	type found struct {
		n   int
		sum digest.Set
	}
	walked := map[string]*found{}
	have, err := w.WalkAll(func(ks *KernelSet, e Entry) bool {
		if _, mirrored := snap[ks.Name]; !mirrored {
			return true
		}
		f := walked[ks.Name]
		if f == nil {
			f = &found{}
			walked[ks.Name] = f
		}
		f.n++
		addEntry(&f.sum, ks.Type, e)
		return false
	})
	if err != nil {
		return nil, err
	}
	for name, ks := range have {
		sd, mirrored := snap[name]
		if !mirrored {
			ks.Entries = normalize(ks.Type, ks.Entries)
			continue
		}
		f := walked[name]
		if f == nil {
			f = &found{}
		}
		if f.n == sd.n && f.sum == sd.sum && sd.shape.matches(ks) {
			ks.unchanged = true
			continue
		}
		// It differs (someone else's change, or a partial sync's meanwhile):
		// its entries are read again.
		whole, err := w.List(name)
		if errors.Is(err, ErrSetNotFound) {
			delete(have, name) // destroyed since
			continue
		}
		if err != nil {
			return nil, err
		}
		whole.Entries = normalize(whole.Type, whole.Entries)
		have[name] = whole
	}
	return have, nil
}

// listAllWalker is a SetKernel walked through its ListAll: every entry
// listed at once, those not kept dropped after.
type listAllWalker struct{ k SetKernel }

func (l listAllWalker) WalkAll(keep func(*KernelSet, Entry) bool) (map[string]*KernelSet, error) {
	have, err := l.k.ListAll()
	if err != nil {
		return nil, err
	}
	for _, ks := range have {
		ks.Entries = slices.DeleteFunc(ks.Entries, func(e Entry) bool { return !keep(ks, e) })
	}
	return have, nil
}

func (l listAllWalker) List(name string) (*KernelSet, error) {
	have, err := l.k.ListAll()
	if err != nil {
		return nil, err
	}
	if ks := have[name]; ks != nil {
		return ks, nil
	}
	return nil, fmt.Errorf("ipset list %s: %w", name, ErrSetNotFound)
}
