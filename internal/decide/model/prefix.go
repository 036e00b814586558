package model

import "net/netip"

// ComparePrefix orders prefixes by address, then length: the order of
// kube-ipvs0's addresses in the plan, the address manager and recovery.
func ComparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
