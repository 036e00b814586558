package guard

import (
	"net/netip"
	"slices"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := []netip.Addr{}
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestAPIServerAddrs(t *testing.T) {
	services := func(ss ...string) func(netip.Addr) bool {
		set := addrs(ss...)
		return func(a netip.Addr) bool { return slices.Contains(set, a) }
	}
	for _, tc := range []struct {
		name string
		in   APIServer
		want []netip.Addr
	}{
		{"in-cluster, Services unknown: the dialed ClusterIP is not the API server",
			APIServer{Dialed: addrs("10.96.0.1"), InCluster: true}, nil},
		{"in-cluster, Services known: 10.96.0.1 is a Service IP, the endpoints are the API server",
			APIServer{Dialed: addrs("10.96.0.1"), InCluster: true, Endpoints: addrs("192.0.2.10", "192.0.2.11"), IsServiceIP: services("10.96.0.1")},
			addrs("192.0.2.10", "192.0.2.11")},
		{"in-cluster with KUBERNETES_SERVICE_HOST overridden to a real address",
			APIServer{Dialed: addrs("192.0.2.9"), InCluster: true, IsServiceIP: services("10.96.0.1")}, addrs("192.0.2.9")},
		{"kubeconfig, Services unknown: protected",
			APIServer{Dialed: addrs("192.0.2.9", "::ffff:192.0.2.8")}, addrs("192.0.2.8", "192.0.2.9")},
		{"kubeconfig dialing a Service IP",
			APIServer{Dialed: addrs("10.96.0.1"), IsServiceIP: services("10.96.0.1")}, nil},
		{"an endpoint inside the service CIDR is never the API server",
			APIServer{Endpoints: addrs("10.96.0.1", "192.0.2.10", "192.0.2.10"), IsServiceIP: services("10.96.0.1")}, addrs("192.0.2.10")},
		{"zones and invalid addresses", APIServer{Endpoints: []netip.Addr{{}, netip.MustParseAddr("fe80::1%eth0")}}, addrs("fe80::1")},
	} {
		if got := tc.in.Addrs(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Addrs() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
