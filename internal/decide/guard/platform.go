package guard

import (
	"net/netip"
	"slices"
)

// platformAddrs are the cloud platforms' own service addresses outside the
// link-local ranges (169.254.169.254, fe80::a9fe:a9fe and the rest of
// 169.254.0.0/16 and fe80::/10 are refused as link-local already), from
// each provider's documentation, listed in docs/security.md. A node and its
// pods reach them for instance metadata (credentials among them), the
// platform's agent channel and time: bound on kube-ipvs0, or made a real
// server, they would be served by a tenant's pod.
var platformAddrs = map[netip.Addr]string{
	netip.MustParseAddr("168.63.129.16"):      "Azure's WireServer (also the source of Azure load balancer health probes)",
	netip.MustParseAddr("100.100.100.200"):    "Alibaba Cloud's instance metadata service",
	netip.MustParseAddr("fd00:ec2::254"):      "the AWS instance metadata service over IPv6",
	netip.MustParseAddr("fd00:ec2::123"):      "the Amazon Time Sync Service over IPv6",
	netip.MustParseAddr("fd20:ce::254"):       "the Google Cloud metadata server over IPv6",
	netip.MustParseAddr("fd00:c1::a9fe:a9fe"): "the Oracle Cloud instance metadata service over IPv6",
}

// PlatformAddrs are the built-in cloud platform addresses, sorted.
func PlatformAddrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(platformAddrs))
	for a := range platformAddrs {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// platform says whose address a is when it is a cloud platform address,
// built in or inside --protected-platform-cidrs (extra), "" otherwise.
func platform(a netip.Addr, extra []netip.Prefix) string {
	if what, ok := platformAddrs[a]; ok {
		return what
	}
	for _, p := range extra {
		if p.Contains(a) {
			return "a cloud platform address (--protected-platform-cidrs " + p.String() + ")"
		}
	}
	return ""
}
