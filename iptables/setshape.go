package iptables

import (
	"fmt"
	"math/bits"
	"strings"
)

// What `ipset create` fixes for the life of a set, and how the proxy decides
// whether a set found in the kernel can be kept. The rule is kube-proxy
// 1.34's own create arguments (pkg/proxy/ipvs/ipset: `ipset create NAME
// TYPE family F hashsize 1024 maxelem 65536`, `range 0-65535` for
// bitmap:port, no timeout, no comment or counters extension), because its
// `ipset create -exist` fails on a set of the same name whose maxelem,
// timeout, extensions or range differ (the kernel's same_set): a set of any
// other shape stops kube-proxy's syncs after a rollback.

// KubeProxyMaxElem is the maxelem kube-proxy 1.34 creates every hash set with.
const KubeProxyMaxElem = 65536

// MaxElemFor is the maxelem a hash set planned to hold n entries is created
// with: kube-proxy's 65536 while n fits, else the smallest power of two that
// holds n (KUBE-LOOP-BACK at 10,000 services × 10 endpoints on one node is
// 100,000 entries: 131072). maxelem only caps a set; it reserves no memory.
func MaxElemFor(n int) uint32 {
	if n <= KubeProxyMaxElem {
		return KubeProxyMaxElem
	}
	if n > 1<<31 {
		return 1 << 31
	}
	return 1 << bits.Len32(uint32(n-1))
}

// MaxElemHolds reports whether a hash set of maxelem have is kept for n
// planned entries, so that a kernel read-back may differ from the plan's
// MaxElemFor(n) only where the proxy keeps it: it must hold them, and while kube-proxy's
// 65536 holds them it must be exactly 65536, so that kube-proxy can take the
// node back. Above 65536 any size that holds the plan is kept, so a set
// that grew is not swapped again each time it shrinks a little. 0 (a kernel
// that does not report it) is kept.
func MaxElemHolds(have uint32, n int) bool {
	switch {
	case have == 0:
		return true
	case n <= KubeProxyMaxElem:
		return have == KubeProxyMaxElem
	}
	return int64(have) >= int64(n)
}

// setMismatch names the create options in which a kernel set differs from
// the set the plan needs. Zero means the set is kept as it is.
type setMismatch uint8

const (
	mismatchType setMismatch = 1 << iota
	mismatchFamily
	// mismatchMaxElem: too small for the plan, or not kube-proxy's 65536
	// although 65536 holds the plan.
	mismatchMaxElem
	// mismatchRange: a bitmap:port set whose range is not 0-65535.
	mismatchRange
	// mismatchExtensions: a timeout, counters, comment, skbinfo, forceadd
	// or netmask, none of which the proxy or kube-proxy creates.
	mismatchExtensions
)

var mismatchNames = [...]string{"type", "family", "maxelem", "range", "extensions"}

// String lists the differing options: "maxelem", "type and family".
func (m setMismatch) String() string {
	var names []string
	for i, n := range mismatchNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, " and ")
}

// differ is String with its verb: "maxelem differs", "type and family
// differ".
func (m setMismatch) differ() string {
	if m&(m-1) == 0 {
		return m.String() + " differs"
	}
	return m.String() + " differ"
}

// swappable reports whether `ipset swap` can put a set of the planned shape
// in place of the kernel's: the kernel swaps sets of the same type features
// and family only (ip_set_swap: IPSET_ERR_TYPE_MISMATCH otherwise).
func (m setMismatch) swappable() bool { return m&(mismatchType|mismatchFamily) == 0 }

// mismatch compares the kernel set ks with the planned set w of n entries.
func mismatch(ks *KernelSet, w *IPSet, n int) setMismatch {
	var m setMismatch
	if ks.Type != w.Type {
		m |= mismatchType
	}
	switch {
	case w.Type == TypeBitmapPort:
		if m == 0 && (ks.PortFrom != BitmapPortFrom || ks.PortTo != BitmapPortTo) {
			m |= mismatchRange
		}
	case ks.Type != TypeBitmapPort && ks.Family != w.Family:
		m |= mismatchFamily
	case m == 0 && !MaxElemHolds(ks.MaxElem, n):
		m |= mismatchMaxElem
	}
	if ks.Timeout != 0 || ks.CadtFlags != 0 || ks.Netmask != 0 {
		m |= mismatchExtensions
	}
	return m
}

// CreateOptions renders the kernel set's type and create options as `ipset save`
// prints them, for messages: "hash:ip,port family inet maxelem 65536",
// "bitmap:port range 0-65535", "hash:ip family inet6 maxelem 65536
// timeout 60 comment".
func (ks *KernelSet) CreateOptions() string {
	b := []byte(ks.Type)
	if ks.Type == TypeBitmapPort {
		b = fmt.Appendf(b, " range %d-%d", ks.PortFrom, ks.PortTo)
	} else {
		b = fmt.Appendf(b, " family %s maxelem %d", ks.Family, ks.MaxElem)
	}
	if ks.Netmask != 0 {
		b = fmt.Appendf(b, " netmask %d", ks.Netmask)
	}
	if ks.Timeout != 0 {
		b = fmt.Appendf(b, " timeout %d", ks.Timeout)
	}
	for _, f := range []struct {
		flag uint32
		name string
	}{
		{FlagWithCounters, "counters"},
		{FlagWithComment, "comment"},
		{FlagWithSKBInfo, "skbinfo"},
		{FlagWithForceAdd, "forceadd"},
	} {
		if ks.CadtFlags&f.flag != 0 {
			b = append(b, ' ')
			b = append(b, f.name...)
		}
	}
	return string(b)
}

// plannedOptions renders the type and create options of the planned set w.
func plannedOptions(w *IPSet) string {
	ks := KernelSet{Type: w.Type, Family: w.Family, PortFrom: BitmapPortFrom, PortTo: BitmapPortTo, MaxElem: MaxElemFor(len(w.Entries))}
	return ks.CreateOptions()
}
