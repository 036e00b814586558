package addrmgr_test

// FuzzGuard builds a guard from an arbitrary configuration and checks an
// arbitrary address against it: whatever the input, Check must not panic,
// must agree with itself (reason, detail and allowed; twice; with a zone;
// for a guard built from the same configuration in another order) and must
// never allow an address the configuration protects or a never-a-VIP class.
// (FuzzGuardCheck in guard_test.go fuzzes the address alone.)
//
// Run with `go test -run '^$' -fuzz '^FuzzGuard$' ./addrmgr/` or `make reliability`.

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
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

func guardConfig(s *bytesIn) addrmgr.GuardConfig {
	cfg := addrmgr.GuardConfig{
		LocalAddrs: s.addrs(), LocalPrefixes: s.prefixes(), APIServers: s.addrs(), Gateways: s.addrs(),
		ProtectedCIDRs: s.prefixes(), PodCIDRs: s.prefixes(), NodeAddrs: map[netip.Addr]string{},
	}
	for i, a := range s.addrs() {
		cfg.NodeAddrs[a] = []string{"n1", "n2", "n3"}[i%3]
	}
	return cfg
}

func reversedCfg(c addrmgr.GuardConfig) addrmgr.GuardConfig {
	rev := func(in []netip.Addr) []netip.Addr { out := slices.Clone(in); slices.Reverse(out); return out }
	revP := func(in []netip.Prefix) []netip.Prefix { out := slices.Clone(in); slices.Reverse(out); return out }
	return addrmgr.GuardConfig{LocalAddrs: rev(c.LocalAddrs), LocalPrefixes: revP(c.LocalPrefixes), NodeAddrs: c.NodeAddrs,
		APIServers: rev(c.APIServers), Gateways: rev(c.Gateways), ProtectedCIDRs: revP(c.ProtectedCIDRs), PodCIDRs: revP(c.PodCIDRs)}
}

func FuzzGuard(f *testing.F) {
	f.Add([]byte{3, 0, 1, 1, 3, 0, 6, 2, 0, 7, 1, 0, 6, 1, 0, 12, 1, 0, 4, 20, 2, 0, 5, 0, 0, 1, 0, 6, 0, 1})
	f.Add([]byte{1, 1, 10, 0, 0, 1, 2, 2, 32, 1, 1, 10, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 5, 3, 0, 6, 0, 19})
	f.Add([]byte("node addresses are protected; 169.254.169.254 never a VIP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &bytesIn{b: data}
		cfg := guardConfig(s)
		g, g2 := addrmgr.NewGuard(cfg), addrmgr.NewGuard(reversedCfg(cfg))
		candidates := append(s.addrs(), s.addr())
		for _, list := range [][]netip.Addr{cfg.LocalAddrs, cfg.APIServers, cfg.Gateways} {
			candidates = append(candidates, list...)
		}
		for a := range cfg.NodeAddrs {
			candidates = append(candidates, a)
		}
		for _, p := range slices.Concat(cfg.LocalPrefixes, cfg.ProtectedCIDRs, cfg.PodCIDRs) {
			candidates = append(candidates, p.Addr())
			if p.IsValid() {
				candidates = append(candidates, p.Masked().Addr())
			}
		}
		for _, a := range candidates {
			reason, detail, ok := g.Check(a)
			if ok != (reason == "") || ok != (detail == "") {
				t.Fatalf("Check(%v) = %q %q %v: reason and allowed disagree", a, reason, detail, ok)
			}
			r2, d2, ok2 := g2.Check(a)
			// The detail too: two prefixes that share their first address
			// (10.0.0.0/8 and 10.0.0.0/16) once made it depend on the flag
			// order (seed overlapping-prefixes).
			if r2 != reason || d2 != detail || ok2 != ok {
				t.Fatalf("Check(%v) depends on configuration order: %q/%v vs %q/%v", a, reason, ok, r2, ok2)
			}
			if r3, _, ok3 := g.Check(a.WithZone("kube-ipvs0")); a.Is6() && (r3 != reason || ok3 != ok) {
				t.Fatalf("Check(%v) depends on the zone: %q vs %q", a, reason, r3)
			}
			if !ok {
				continue
			}
			// Allowed: then nothing in the configuration protects it.
			u := a.WithZone("")
			switch {
			case !u.IsGlobalUnicast(), u.Is4In6(), u == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
				t.Fatalf("never-a-VIP address %v allowed", a)
			case slices.ContainsFunc(slices.Concat(cfg.LocalAddrs, cfg.APIServers, cfg.Gateways), func(b netip.Addr) bool { return b.IsValid() && b.WithZone("") == u }):
				t.Fatalf("configured address %v allowed", a)
			case slices.ContainsFunc(slices.Concat(cfg.ProtectedCIDRs, cfg.PodCIDRs), func(p netip.Prefix) bool { return p.IsValid() && p.Masked().Contains(u) }):
				t.Fatalf("address %v inside a protected prefix allowed", a)
			case slices.ContainsFunc(cfg.LocalPrefixes, func(p netip.Prefix) bool { return p.IsValid() && p.Addr().WithZone("") == u }):
				t.Fatalf("local address %v allowed", a)
			}
			for b := range cfg.NodeAddrs {
				if b.IsValid() && b.WithZone("") == u {
					t.Fatalf("node address %v allowed", a)
				}
			}
			if _, isNode := g.IsNodeAddress(a); isNode {
				t.Fatalf("IsNodeAddress(%v) but allowed", a)
			}
			if g.IsLocal(a) {
				t.Fatalf("IsLocal(%v) but allowed", a)
			}
		}
		// The zero configuration still refuses every never-a-VIP class.
		zero := addrmgr.NewGuard(addrmgr.GuardConfig{})
		for _, a := range candidates {
			reason, _, ok := zero.Check(a)
			if !ok && !addrmgr.NeverVIP(reason) {
				t.Fatalf("zero guard refused %v as %q, not a never-a-VIP class", a, reason)
			}
		}
	})
}
