package guard_test

// FuzzGuard builds a guard from an arbitrary configuration and checks an
// arbitrary address against it: whatever the input, Check must not panic,
// must agree with itself (protected, reason and detail; twice; with a zone;
// for a guard built from the same configuration in another order) and must
// never allow an address the configuration protects or a never-a-VIP class.
// (FuzzGuardCheck in guard_test.go fuzzes the address alone.)
//
// Run with `go test -run '^$' -fuzz '^FuzzGuard$' ./internal/decide/guard/` or `make reliability`.

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// guardAddrs mixes node-like, VIP-like and never-a-VIP addresses of both
// families, an IPv4-mapped one and the invalid zero Addr.
var guardAddrs = []netip.Addr{
	{}, mustAddr("10.0.0.1"), mustAddr("10.0.0.255"), mustAddr("10.96.0.1"), mustAddr("10.244.3.4"), mustAddr("192.0.2.1"),
	mustAddr("198.51.100.1"), mustAddr("127.0.0.1"), mustAddr("0.0.0.0"), mustAddr("255.255.255.255"), mustAddr("169.254.169.254"),
	mustAddr("224.0.0.251"), mustAddr("2001:db8::1"), mustAddr("fd00:96::1"), mustAddr("fe80::1"), mustAddr("::1"), mustAddr("::"),
	mustAddr("ff02::1"), mustAddr("::ffff:10.0.0.1"), mustAddr("fe80::1%eth0"), mustAddr("2001:db8::1%eth1"),
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

type bytesIn struct {
	b []byte
	i int
}

func (s *bytesIn) n(mod int) int {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return int(s.b[s.i-1]) % mod
}

// addr picks a pooled address or reads a raw 4- or 16-byte one.
func (s *bytesIn) addr() netip.Addr {
	switch s.n(4) {
	case 1:
		if s.i+4 <= len(s.b) {
			a, _ := netip.AddrFromSlice(s.b[s.i : s.i+4])
			s.i += 4
			return a
		}
	case 2:
		if s.i+16 <= len(s.b) {
			a, _ := netip.AddrFromSlice(s.b[s.i : s.i+16])
			s.i += 16
			return a
		}
	}
	return guardAddrs[s.n(len(guardAddrs))]
}

func (s *bytesIn) addrs() []netip.Addr {
	var out []netip.Addr
	for k := s.n(4); k > 0; k-- {
		out = append(out, s.addr())
	}
	return out
}

func (s *bytesIn) prefixes() []netip.Prefix {
	var out []netip.Prefix
	for k := s.n(3); k > 0; k-- {
		a := s.addr()
		out = append(out, netip.PrefixFrom(a, s.n(a.BitLen()+3)-1))
	}
	return out
}

// consistent reports whether a verdict's fields agree: a protected one has
// a reason and a detail, a warning too (and is not protected), any other
// neither; only a protected one is never a VIP.
func consistent(v guard.Verdict) bool {
	switch {
	case v.Protected:
		return !v.Warn && v.Reason != "" && v.Detail != ""
	case v.Warn:
		return !v.NeverVIP && v.Reason != "" && v.Detail != ""
	}
	return !v.NeverVIP && v.Reason == "" && v.Detail == ""
}

func guardInputs(s *bytesIn) guard.Inputs {
	in := guard.Inputs{
		LocalAddrs: s.addrs(), LocalPrefixes: s.prefixes(), APIServers: s.addrs(), Gateways: s.addrs(),
		ProtectedCIDRs: s.prefixes(), PodCIDRs: s.prefixes(),
		NextHops: s.addrs(), Resolvers: s.addrs(), StrictARP: s.n(2) == 1,
	}
	for i, a := range s.addrs() {
		in.Nodes = append(in.Nodes, model.Node{Name: []string{"n1", "n2", "n3"}[i%3], Addresses: []netip.Addr{a}})
	}
	return in
}

func reversed(c guard.Inputs) guard.Inputs {
	rev := func(in []netip.Addr) []netip.Addr { out := slices.Clone(in); slices.Reverse(out); return out }
	revP := func(in []netip.Prefix) []netip.Prefix { out := slices.Clone(in); slices.Reverse(out); return out }
	nodes := slices.Clone(c.Nodes)
	slices.Reverse(nodes)
	return guard.Inputs{LocalAddrs: rev(c.LocalAddrs), LocalPrefixes: revP(c.LocalPrefixes), Nodes: nodes,
		APIServers: rev(c.APIServers), Gateways: rev(c.Gateways), ProtectedCIDRs: revP(c.ProtectedCIDRs), PodCIDRs: revP(c.PodCIDRs),
		NextHops: rev(c.NextHops), Resolvers: rev(c.Resolvers), StrictARP: c.StrictARP}
}

// same reports whether a configured address b stands for the candidate u
// (zone dropped, IPv4-mapped unmapped: the guard protects the address b
// reads as).
func same(b, u netip.Addr) bool { return b.IsValid() && b.WithZone("").Unmap() == u }

// covers reports whether a configured prefix p protects u: p, masked,
// contains u, or p is IPv4-mapped and its IPv4 prefix does, or p is an
// IPv4-mapped prefix shorter than /96 and u is IPv4.
func covers(p netip.Prefix, u netip.Addr) bool {
	if !p.IsValid() {
		return false
	}
	p = netip.PrefixFrom(p.Addr().WithZone(""), p.Bits())
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return u.Is4() || p.Masked().Contains(u)
		}
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked().Contains(u)
	}
	return p.Masked().Contains(u)
}

// unmapped is a local prefix as the guard reads it (zone dropped, IPv4-mapped
// unmapped), ok false when it means nothing to the infrastructure checks.
func unmapped(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return p, false
	}
	return guard.UnmapPrefix(netip.PrefixFrom(p.Addr().WithZone(""), p.Bits()))
}

// infrastructure reports whether u is the network or broadcast address of
// a local subnet, or the other end of a /31 or /127.
func infrastructure(p netip.Prefix, u netip.Addr) bool {
	p, ok := unmapped(p)
	if !ok || !p.Contains(u) {
		return false
	}
	bits, width := p.Bits(), p.Addr().BitLen()
	switch {
	case bits == width-1:
		return u != p.Addr()
	case bits < width-1 && u == p.Masked().Addr():
		return true
	case bits < width-1 && u.Is4():
		b := u.As4()
		hostBits := ^uint32(0) >> bits
		return binary.BigEndian.Uint32(b[:])&hostBits == hostBits // the broadcast address
	}
	return false
}

// onLink reports whether u is inside a local IPv4 subnet wider than a host.
func onLink(p netip.Prefix, u netip.Addr) bool {
	p, ok := unmapped(p)
	return ok && p.Addr().Is4() && p.Bits() < 32 && p.Contains(u)
}

func FuzzGuard(f *testing.F) {
	f.Add([]byte{3, 0, 1, 1, 3, 0, 6, 2, 0, 7, 1, 0, 6, 1, 0, 12, 1, 0, 4, 20, 2, 0, 5, 0, 0, 1, 0, 6, 0, 1})
	f.Add([]byte{1, 1, 10, 0, 0, 1, 2, 2, 32, 1, 1, 10, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 5, 3, 0, 6, 0, 19})
	f.Add([]byte("node addresses are protected; 169.254.169.254 never a VIP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &bytesIn{b: data}
		in := guardInputs(s)
		g, g2 := guard.New(in), guard.New(reversed(in))
		candidates := append(s.addrs(), s.addr())
		for _, list := range [][]netip.Addr{in.LocalAddrs, in.APIServers, in.Gateways, in.NextHops, in.Resolvers} {
			candidates = append(candidates, list...)
		}
		for _, n := range in.Nodes {
			for _, a := range n.Addresses {
				candidates = append(candidates, a, a.Unmap())
			}
		}
		for _, p := range slices.Concat(in.LocalPrefixes, in.ProtectedCIDRs, in.PodCIDRs) {
			candidates = append(candidates, p.Addr(), p.Addr().Unmap())
			if p.IsValid() {
				candidates = append(candidates, p.Masked().Addr())
			}
		}
		for _, a := range candidates {
			v := g.Check(a)
			if !consistent(v) {
				t.Fatalf("Check(%v) = %+v: protected, warning, reason and detail disagree", a, v)
			}
			// The detail too: two prefixes that share their first address
			// (10.0.0.0/8 and 10.0.0.0/16) once made it depend on the flag
			// order (seed overlapping-prefixes).
			if v2 := g2.Check(a); v2 != v {
				t.Fatalf("Check(%v) depends on the order of the inputs: %+v vs %+v", a, v, v2)
			}
			if v3 := g.Check(a.WithZone("kube-ipvs0")); a.Is6() && (v3.Reason != v.Reason || v3.Protected != v.Protected) {
				t.Fatalf("Check(%v) depends on the zone: %q vs %q", a, v.Reason, v3.Reason)
			}
			if v.Protected {
				continue
			}
			// Allowed: then nothing in the inputs protects it.
			u := a.WithZone("")
			switch {
			case v.Node != "" || v.Local || v.NeverVIP || (v.Reason != "" && v.Reason != model.ReasonOnLinkSubnet):
				t.Fatalf("Check(%v) = %+v: an allowed address with a node, local or a reason", a, v)
			case !u.IsGlobalUnicast(), u.Is4In6(), u == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
				t.Fatalf("never-a-VIP address %v allowed", a)
			case slices.ContainsFunc(slices.Concat(in.LocalAddrs, in.APIServers, in.Gateways, in.NextHops, in.Resolvers), func(b netip.Addr) bool { return same(b, u) }):
				t.Fatalf("configured address %v allowed", a)
			case slices.ContainsFunc(slices.Concat(in.ProtectedCIDRs, in.PodCIDRs), func(p netip.Prefix) bool { return covers(p, u) }):
				t.Fatalf("address %v inside a protected prefix allowed", a)
			case slices.ContainsFunc(in.LocalPrefixes, func(p netip.Prefix) bool { return p.IsValid() && same(p.Addr(), u) }):
				t.Fatalf("local address %v allowed", a)
			case slices.ContainsFunc(in.LocalPrefixes, func(p netip.Prefix) bool { return infrastructure(p, u) }):
				t.Fatalf("network, broadcast or peer address %v of a local subnet allowed", a)
			case !in.StrictARP && !v.Warn && slices.ContainsFunc(in.LocalPrefixes, func(p netip.Prefix) bool { return onLink(p, u) }):
				t.Fatalf("%v inside a local subnet with strict ARP off allowed without a warning", a)
			}
			for _, n := range in.Nodes {
				if slices.ContainsFunc(n.Addresses, func(b netip.Addr) bool { return same(b, u) }) {
					t.Fatalf("node address %v allowed", a)
				}
			}
		}
		// The zero inputs still refuse every never-a-VIP class and the
		// built-in cloud platform addresses, and only those.
		zero := guard.New(guard.Inputs{})
		platform := guard.PlatformAddrs()
		for _, a := range append(candidates, platform...) {
			v := zero.Check(a)
			r, _ := guard.Special(a)
			if r == "" && slices.Contains(platform, guard.Key(a)) {
				r = model.ReasonCloudPlatform
			}
			if v.Protected != (r != "") || v.Reason != r || (v.Protected && !v.NeverVIP) {
				t.Fatalf("zero guard: Check(%v) = %+v, Special says %q", a, v, r)
			}
		}
	})
}
