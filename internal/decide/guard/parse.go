package guard

import (
	"net/netip"
	"strings"

	netutils "k8s.io/utils/net"
)

// ParseLenient reads an address the way that protects the most: it trims
// white space, drops a zone ("%eth0"), reads leading-zero IPv4 octets as
// decimal ("010.010.000.216" is 10.10.0.216, as the API server's own
// netutils.ParseIPSloppy and kube-proxy read them), and unmaps an
// IPv4-mapped IPv6 address ("::ffff:10.10.0.213" is 10.10.0.213).
// canonical is true when netip.ParseAddr reads s as it is, without a zone
// and not IPv4-mapped: an address written otherwise is still protected,
// and the refusal names the form it was written in. ok is false when s is
// no address at all (a host name).
func ParseLenient(s string) (a netip.Addr, canonical, ok bool) {
	if strict, err := netip.ParseAddr(s); err == nil && strict.Zone() == "" && !strict.Is4In6() {
		return strict, true, true
	}
	t := strings.TrimSpace(s)
	if i := strings.IndexByte(t, '%'); i >= 0 {
		t = t[:i]
	}
	ip := netutils.ParseIPSloppy(t)
	if ip == nil {
		return netip.Addr{}, false, false
	}
	a, ok = netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, false, false
	}
	return a.Unmap(), false, true
}

// UnmapPrefix turns an IPv4-mapped IPv6 prefix into the IPv4 prefix it
// covers (::ffff:192.0.2.0/120 is 192.0.2.0/24); other prefixes are
// returned as they are. ok is false for an IPv4-mapped prefix shorter
// than /96: it covers IPv6 addresses that are not IPv4-mapped, and no
// IPv4 prefix says the same.
func UnmapPrefix(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() || !p.Addr().Is4In6() {
		return p, true
	}
	if p.Bits() < 96 {
		return p, false
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), true
}
