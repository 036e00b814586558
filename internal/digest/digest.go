// Package digest sums hashed elements into an order-independent 128-bit
// digest: what a full sync's read compares a kernel table with the
// proxy's mirror of it by, element by element as it reads, without
// keeping either list (the IPVS real servers of a virtual server, the
// entries of an ipset). It is pure arithmetic and touches nothing else.
package digest

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Set is the digest of a set of elements: two sums of independently mixed
// hashes, so that the order of adding does not matter. Two sets of
// distinct elements that differ have different digests but for a chance
// of about 2⁻¹²⁸; a set holding one element twice is not one Set tells
// apart from others (the kernel's tables never hold one twice).
type Set struct{ a, b uint64 }

// Add adds the element (x, y) to s.
func (s *Set) Add(x, y uint64) {
	h := Mix(x, y)
	s.a += fmix(h ^ 0x243f6a8885a308d3)
	s.b += fmix(h + 0x9e3779b97f4a7c15)
}

// Mix combines two words into one, the order mattering.
func Mix(x, y uint64) uint64 {
	return fmix(fmix(x) ^ bits.RotateLeft64(fmix(y^0x6a09e667f3bcc909), 31))
}

// Addr is a as two words: its 16 bytes, an IPv4 address told apart from
// the same address mapped into IPv6 (::ffff:a.b.c.d).
func Addr(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	hi, lo = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	if a.Is4() {
		hi ^= 1 << 63
	}
	if !a.IsValid() {
		hi ^= 1 << 62
	}
	return hi, lo
}

// String folds s into a word.
func String(s string) uint64 {
	w := uint64(len(s))
	for i := 0; i < len(s); i++ {
		w = bits.RotateLeft64(w, 8) ^ uint64(s[i])
		if i%8 == 7 {
			w = fmix(w)
		}
	}
	return fmix(w)
}

// fmix is MurmurHash3's 64-bit finalizer: every input bit flips about
// half the output bits.
func fmix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
