package iptables

import "github.com/ipvs-proxy/ipvs-proxy/internal/digest"

// setDigest is one of the mirror's sets as a full sync's read compares the
// kernel's with it (listCompared): its shape, and its entries as a count
// and a digest (internal/digest), so that the read keeps no entry of a set
// that holds what the mirror says. At 10,000 services × 10 endpoints with
// four on the node, the read's sorted copies of the sets were 4 MB held
// until the loop compared them, and the comparison a walk of every entry.
type setDigest struct {
	// shape is the mirror's set without its entries (mirrorSet.matches).
	shape mirrorSet
	n     int
	sum   digest.Set
}

// entriesDigest is the digest of es, each taken in typ's canonical form
// (Canonical), in any order.
func entriesDigest(typ string, es []Entry) digest.Set {
	var d digest.Set
	for i := range es {
		e := Canonical(typ, es[i])
		ipHi, ipLo := digest.Addr(e.IP)
		netHi, netLo := digest.Addr(e.Net.Addr())
		d.Add(digest.Mix(digest.Mix(ipHi, ipLo), digest.Mix(netHi, netLo)),
			digest.Mix(digest.String(string(e.Protocol)), uint64(e.Port)<<16|uint64(uint8(e.Net.Bits()+1))))
	}
	return d
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
	have, err := k.ListAll()
	if err != nil {
		return nil, err
	}
	for name, ks := range have {
		if sd, ok := snap[name]; ok && len(ks.Entries) == sd.n && sd.shape.matches(ks) && entriesDigest(ks.Type, ks.Entries) == sd.sum {
			ks.Entries, ks.unchanged = nil, true
			continue
		}
		ks.Entries = normalize(ks.Type, ks.Entries)
	}
	return have, nil
}
