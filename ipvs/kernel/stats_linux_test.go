package kernel

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// statsMessage is serviceMessage's TCP service with the counters the
// kernel sends: IPVS_SVC_ATTR_STATS (connections and packets 32-bit) and,
// with wide, IPVS_SVC_ATTR_STATS64 too, holding other values.
func statsMessage(wide bool) []byte {
	svc := nl.NewRtAttr(ipvsCmdAttrService|unix.NLA_F_NESTED, nil)
	svc.AddRtAttr(ipvsSvcAttrAF, nl.Uint16Attr(unix.AF_INET))
	svc.AddRtAttr(ipvsSvcAttrProtocol, nl.Uint16Attr(unix.IPPROTO_TCP))
	svc.AddRtAttr(ipvsSvcAttrAddr, append(netip.MustParseAddr("10.96.0.10").AsSlice(), make([]byte, 12)...))
	svc.AddRtAttr(ipvsSvcAttrPort, []byte{0, 80})
	svc.AddRtAttr(ipvsSvcAttrSchedName, nl.ZeroTerminated("rr"))
	s32 := nl.NewRtAttr(ipvsSvcAttrStats|unix.NLA_F_NESTED, nil)
	s32.AddRtAttr(ipvsStatsConns, nl.Uint32Attr(7))
	s32.AddRtAttr(ipvsStatsInPkts, nl.Uint32Attr(70))
	s32.AddRtAttr(ipvsStatsOutPkts, nl.Uint32Attr(60))
	s32.AddRtAttr(ipvsStatsInBytes, nl.Uint64Attr(7000))
	s32.AddRtAttr(ipvsStatsOutBytes, nl.Uint64Attr(6000))
	s32.AddRtAttr(6, nl.Uint32Attr(1)) // IPVS_STATS_ATTR_CPS: a rate, not kept
	svc.AddChild(s32)
	if wide {
		s64 := nl.NewRtAttr(ipvsSvcAttrStats64|unix.NLA_F_NESTED, nil)
		s64.AddRtAttr(ipvsStatsConns, nl.Uint64Attr(1<<33))
		s64.AddRtAttr(ipvsStatsInPkts, nl.Uint64Attr(1<<34))
		s64.AddRtAttr(ipvsStatsOutPkts, nl.Uint64Attr(3))
		s64.AddRtAttr(ipvsStatsInBytes, nl.Uint64Attr(1<<40))
		s64.AddRtAttr(ipvsStatsOutBytes, nl.Uint64Attr(5))
		svc.AddChild(s64)
	}
	return append((&nl.Genlmsg{Command: 1, Version: 1}).Serialize(), svc.Serialize()...)
}

// The counters come from the dump message the full sync's read parses
// anyway; the 64-bit ones win where the kernel sends both.
func TestParseServiceCounters(t *testing.T) {
	for _, c := range []struct {
		name string
		wide bool
		want ipvs.Counters
	}{
		{"32-bit only", false, ipvs.Counters{Connections: 7, InPackets: 70, OutPackets: 60, InBytes: 7000, OutBytes: 6000}},
		{"64-bit beside 32-bit", true, ipvs.Counters{Connections: 1 << 33, InPackets: 1 << 34, OutPackets: 3, InBytes: 1 << 40, OutBytes: 5}},
	} {
		vs, got, ok, err := parseService(statsMessage(c.wide))
		if err != nil || !ok || vs.Port != 80 {
			t.Fatalf("%s: %+v ok %v err %v", c.name, vs, ok, err)
		}
		if got != c.want {
			t.Errorf("%s: counters %+v, want %+v", c.name, got, c.want)
		}
	}
}

// A listing's real servers come with their connections, in the same
// order, and the virtual server with the counters its dump carried.
func TestWalkProcListingConns(t *testing.T) {
	const in = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A60000A:0050 rr
  -> 0AF40105:1F90      Masq    1      3          4
  -> 0AF40106:1F90      Masq    1      0          2
`
	k := ipvs.Key{Protocol: "tcp", Address: netip.MustParseAddr("10.96.0.10"), Port: 80}
	dumped := []dumpedVS{dumpedOf(ipvs.VirtualServer{Key: k, Scheduler: "rr"}, ipvs.Counters{Connections: 9})}
	var got []ipvs.Conns
	var counters ipvs.Counters
	err := walkProcListing(strings.NewReader(in), dumped, func(vs *ipvs.VirtualServer, c *ipvs.Counters, conns []ipvs.Conns) {
		counters, got = *c, append(got, conns...)
		if len(vs.RealServers) != len(conns) {
			t.Errorf("%d real servers, %d conns", len(vs.RealServers), len(conns))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []ipvs.Conns{{Active: 3, Inactive: 4}, {Active: 0, Inactive: 2}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("conns %v, want %v", got, want)
	}
	if counters.Connections != 9 {
		t.Errorf("counters %+v, want the dump's", counters)
	}
}
