package iptables

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Sentinel errors of the kernel layer; check them with errors.Is.
var (
	// ErrSetNotFound: the kernel has no set of that name (ENOENT).
	ErrSetNotFound = errors.New("ipset not found")
	// ErrSetExists: a set of that name already exists (EEXIST).
	ErrSetExists = errors.New("ipset already exists")
	// ErrSetReferenced: the set is in use by an iptables rule and cannot be
	// destroyed.
	ErrSetReferenced = errors.New("ipset is referenced by a rule")
	// ErrSetMismatch: a set of that name exists with another type or family.
	ErrSetMismatch = errors.New("ipset exists with another type or family")
	// ErrInvalidEntry: an entry does not fit its set's type or family.
	ErrInvalidEntry = errors.New("invalid ipset entry")
	// ErrKernel: any other error the kernel or an iptables binary returned.
	ErrKernel = errors.New("kernel refused")
	// ErrNotOwned: the name is not one the proxy plans, so it is left alone.
	ErrNotOwned = errors.New("not owned by the proxy")
)

// Canonical drops the fields a set type does not store, so that planned and
// dumped entries compare equal: hash:ip keeps IP; hash:ip,port IP, Protocol,
// Port; hash:ip,port,ip a full-length Net; hash:ip,port,net a masked Net;
// bitmap:port only Port.
func Canonical(typ string, e Entry) Entry {
	if e.IP.IsValid() {
		e.IP = e.IP.Unmap()
	}
	switch typ {
	case "bitmap:port":
		return Entry{Port: e.Port}
	case "hash:ip":
		return Entry{IP: e.IP}
	case "hash:ip,port":
		return Entry{IP: e.IP, Protocol: e.Protocol, Port: e.Port}
	case "hash:ip,port,ip":
		if e.Net.IsValid() {
			a := e.Net.Addr().Unmap()
			e.Net = netip.PrefixFrom(a, a.BitLen())
		}
		return e
	case "hash:ip,port,net":
		if e.Net.IsValid() {
			e.Net = netip.PrefixFrom(e.Net.Addr().Unmap(), e.Net.Bits()).Masked()
		}
		return e
	}
	return e
}

// normalize returns the set's entries canonical, sorted and without
// duplicates. It copies only when the input is not already in that form.
func normalize(typ string, in []Entry) []Entry {
	ok := true
	for i := range in {
		if Canonical(typ, in[i]) != in[i] || i > 0 && CompareEntries(in[i-1], in[i]) >= 0 {
			ok = false
			break
		}
	}
	if ok {
		return in
	}
	out := make([]Entry, len(in))
	for i := range in {
		out[i] = Canonical(typ, in[i])
	}
	slices.SortFunc(out, CompareEntries)
	return slices.CompactFunc(out, func(a, b Entry) bool { return a == b })
}

// diffEntries merges two normalized lists: entries only in want are added,
// entries only in have are deleted.
func diffEntries(have, want []Entry) (add, del []Entry) {
	i, j := 0, 0
	for i < len(have) && j < len(want) {
		if have[i] == want[j] {
			i++
			j++
			continue
		}
		switch c := CompareEntries(have[i], want[j]); {
		case c == 0:
			i++
			j++
		case c < 0:
			del = append(del, have[i])
			i++
		default:
			add = append(add, want[j])
			j++
		}
	}
	del = append(del, have[i:]...)
	add = append(add, want[j:]...)
	return add, del
}

// diffSet is diffEntries for a want list that is usually, but not surely,
// normalized (the planner sorts its slices). have must be normalized. It
// returns want normalized too. The common case costs one equality check per
// entry: an entry equal to one of have's is canonical and, have being
// sorted, in order; only the others are checked, and the first one out of
// order or not canonical makes it normalize want and start over.
func diffSet(typ string, have, want []Entry) (add, del, norm []Entry) {
	i, j := 0, 0
	prevAdded := false
	// ok checks want[j], about to be added, against the entry before it.
	ok := func() bool {
		return Canonical(typ, want[j]) == want[j] && (j == 0 || CompareEntries(want[j-1], want[j]) < 0)
	}
	if len(have) == 0 {
		// A set filled from nothing (a first sync) adds want itself,
		// not a copy of it grown entry by entry.
		for ; j < len(want); j++ {
			if !ok() {
				goto slow
			}
		}
		return slices.Clip(want), nil, want
	}
	for i < len(have) && j < len(want) {
		if have[i] == want[j] {
			if prevAdded && CompareEntries(want[j-1], want[j]) >= 0 {
				goto slow
			}
			prevAdded = false
			i++
			j++
			continue
		}
		if !ok() {
			goto slow
		}
		if c := CompareEntries(have[i], want[j]); c < 0 {
			del = append(del, have[i])
			i++
		} else {
			add = append(add, want[j])
			prevAdded = true
			j++
		}
	}
	for ; j < len(want); j++ {
		if !ok() {
			goto slow
		}
		add = append(add, want[j])
	}
	del = append(del, have[i:]...)
	return add, del, want
slow:
	norm = normalize(typ, want)
	add, del = diffEntries(have, norm)
	return add, del, norm
}

// formatEntry renders an entry as `ipset save` prints it (AppendEntry).
func formatEntry(typ string, e Entry) string { return string(AppendEntry(nil, typ, e)) }

// CheckEntry is what the kernel checks before it adds an entry to a set of
// s's type and family: the fields the type stores are there (an address of
// the set's family; a TCP, UDP or SCTP port; a second address), so that a
// fake refuses what `ipset add` refuses, with ErrInvalidEntry.
func CheckEntry(s IPSet, e Entry) error {
	switch s.Type {
	case TypeBitmapPort:
		return nil
	case TypeHashIP, TypeHashIPPort, TypeHashIPPortIP, TypeHashIPPortNet:
	default:
		return fmt.Errorf("%w: set type %q", ErrInvalidEntry, s.Type)
	}
	if !e.IP.IsValid() {
		return fmt.Errorf("%w: no address", ErrInvalidEntry)
	}
	if (s.Family == FamilyIPv6) != (e.IP.Is6() && !e.IP.Is4In6()) {
		return fmt.Errorf("%w: %s in a %s set", ErrInvalidEntry, e.IP, s.Family)
	}
	if s.Type == TypeHashIP {
		return nil
	}
	if !e.Protocol.Known() {
		return fmt.Errorf("%w: protocol %q", ErrInvalidEntry, e.Protocol)
	}
	if (s.Type == TypeHashIPPortIP || s.Type == TypeHashIPPortNet) && !e.Net.IsValid() {
		return fmt.Errorf("%w: no second address", ErrInvalidEntry)
	}
	return nil
}
