//go:build kernel

package kernel

import (
	"net/netip"
	"slices"
	"testing"

	mobyipvs "github.com/moby/ipvs"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// fromMoby is how Services converted moby/ipvs's GetServices before the
// streamed dump: the reference the dump is checked against.
func fromMoby(s *mobyipvs.Service) (ipvs.VirtualServer, bool) {
	proto, ok := protoFromNumber(s.Protocol)
	addr, ok2 := netip.AddrFromSlice(s.Address)
	if s.FWMark != 0 || !ok || !ok2 {
		return ipvs.VirtualServer{}, false
	}
	vs := ipvs.VirtualServer{Key: ipvs.Key{Protocol: proto, Address: addr.Unmap(), Port: s.Port},
		Scheduler: s.SchedName, Flags: ipvs.Flags(s.Flags) &^ ipvs.FlagHashed}
	if vs.Flags&ipvs.FlagPersistent != 0 {
		vs.PersistenceTimeout = s.Timeout
	}
	return vs, true
}

// TestKernelDumpMatchesMoby: the streamed dump parses every virtual server
// as moby/ipvs's GetServices did, on a table ipvsadm made: both families,
// TCP, UDP and SCTP, persistent ones, a one-packet one, and a
// firewall-mark one, which neither reports.
func TestKernelDumpMatchesMoby(t *testing.T) {
	node := ktest.NewNode(t)
	for _, args := range [][]string{
		{"-A", "-t", "10.96.0.10:80", "-s", "rr"},
		{"-A", "-u", "10.96.0.11:53", "-s", "sh", "-p", "10800"},
		{"-A", "--sctp-service", "10.96.0.12:9", "-s", "wrr"},
		{"-A", "-u", "[fd00::a]:5353", "-s", "rr", "-o"},
		{"-A", "-t", "[fd00::b]:443", "-s", "lc", "-p", "60"},
		{"-A", "-f", "7", "-s", "rr"},
		{"-a", "-t", "10.96.0.10:80", "-r", "10.244.0.5:8080", "-m", "-w", "1"},
	} {
		node.Run(t, "ipvsadm", args...)
	}
	var dumped, moby []ipvs.VirtualServer
	err := node.Do(func() error {
		k, err := Open()
		if err != nil {
			return err
		}
		defer k.Close()
		if err := k.dump.services(func(vs ipvs.VirtualServer) { dumped = append(dumped, vs) }); err != nil {
			return err
		}
		svcs, err := k.h.GetServices()
		if err != nil {
			return err
		}
		for _, s := range svcs {
			if vs, ok := fromMoby(s); ok {
				moby = append(moby, vs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	byKey := func(a, b ipvs.VirtualServer) int { return ipvs.CompareKeys(a.Key, b.Key) }
	slices.SortFunc(dumped, byKey)
	slices.SortFunc(moby, byKey)
	same := func(a, b ipvs.VirtualServer) bool {
		return a.Key == b.Key && a.Scheduler == b.Scheduler && a.Flags == b.Flags && a.PersistenceTimeout == b.PersistenceTimeout
	}
	if len(dumped) != 5 || !slices.EqualFunc(dumped, moby, same) {
		t.Errorf("streamed dump:\n%+v\nmoby/ipvs:\n%+v", dumped, moby)
	}
}
