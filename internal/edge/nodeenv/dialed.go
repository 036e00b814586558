package nodeenv

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"slices"
)

// DialedAddrs are the addresses of the host a client dials: host is a URL
// or host[:port], as rest.Config.Host holds it. A literal IP is returned
// as it is (unmapped); a name is resolved within ctx (nothing when the
// resolver does not answer). guard.APIServer decides which of them are
// the API server.
func DialedAddrs(ctx context.Context, host string) []netip.Addr {
	h := host
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		h = u.Hostname()
	} else if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{a.WithZone("").Unmap()}
	}
	if h == "" {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, a := range ips {
		out = append(out, a.WithZone("").Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
