package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// procSample is a listing of three virtual servers and a firewall-mark
// one, as the kernel prints it (trailing spaces and all).
const procSample = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A60000A:0050 rr 
  -> 0AF40105:1F90      Masq    1      2          3         
  -> 0AF40206:1F90      Masq    0      0          1         
UDP  [fd00:0000:0000:0000:0000:0000:0000:000a]:0035 rr persistent 10800 FFFFFFFF
  -> [fd00:0244:0000:0000:0000:0000:0000:0005]:0035      Masq    1      0          0         
FWM  00000001 rr 
  -> 0AF40105:1F90      Masq    1      0          0         
TCP  C0A8010A:7530 rr 
`

func TestParseProcIPVS(t *testing.T) {
	var (
		vip    = netip.MustParseAddr("10.96.0.10")
		vip6   = netip.MustParseAddr("fd00::a")
		nodeIP = netip.MustParseAddr("192.168.1.10")
		ep1    = netip.MustParseAddr("10.244.1.5")
	)
	in := procSample
	got, err := parseProcIPVS(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	k := ipvs.Key{Protocol: model.TCP, Address: vip, Port: 80}
	if rs := got[k]; len(rs) != 2 || rs[0].Address != ep1 || rs[0].Port != 8080 || rs[0].Weight != 1 || rs[0].ActiveConns != 2 || rs[0].InactiveConns != 3 || rs[1].Weight != 0 {
		t.Errorf("tcp: %+v", rs)
	}
	k6 := ipvs.Key{Protocol: model.UDP, Address: vip6, Port: 53}
	if rs := got[k6]; len(rs) != 1 || rs[0].Address != netip.MustParseAddr("fd00:244::5") || rs[0].Port != 53 {
		t.Errorf("udp6: %+v", rs)
	}
	if rs, ok := got[ipvs.Key{Protocol: model.TCP, Address: nodeIP, Port: 30000}]; !ok || len(rs) != 0 {
		t.Errorf("empty service: %v %v", rs, ok)
	}
	if len(got) != 3 {
		t.Errorf("got %d services, want 3 (FWM skipped)", len(got))
	}
	if _, err := parseProcIPVS(strings.NewReader("TCP  zz:0050 rr\n")); err == nil {
		t.Error("bad address accepted")
	}
}

// walkSample walks in over the dumped virtual servers keys, and returns
// what the walk gave (copied) and which keys it left unlisted.
func walkSample(in string, keys ...ipvs.Key) (map[ipvs.Key][]ipvs.RealServer, []ipvs.Key, int, error) {
	dumped := make([]dumpedVS, len(keys))
	for i, k := range keys {
		dumped[i] = dumpedOf(ipvs.VirtualServer{Key: k, Scheduler: "rr"}, ipvs.Counters{})
	}
	got := make(map[ipvs.Key][]ipvs.RealServer)
	calls := 0
	slices.SortFunc(dumped, func(a, b dumpedVS) int { return ipvs.CompareKeys(a.key, b.key) })
	err := walkProcListing(strings.NewReader(in), dumped, func(vs *ipvs.VirtualServer, _ *ipvs.Counters, _ []ipvs.Conns) {
		calls++
		if vs.Scheduler != "rr" {
			panic("the dump's attributes were not given")
		}
		got[vs.Key] = slices.Clone(vs.RealServers)
	})
	var unlisted []ipvs.Key
	for _, d := range dumped {
		if !d.listed {
			unlisted = append(unlisted, d.key)
		}
	}
	return got, unlisted, calls, err
}

// The listing EachService streams: each dumped virtual server once, with
// the same real servers at their weights, without counters; a record
// listed twice given at its first listing; one the dump lacks skipped,
// one the listing lacks left to the fallback.
func TestWalkProcListing(t *testing.T) {
	// The sample, then its first record listed again (a resumed read).
	in := procSample + `TCP  0A60000A:0050 rr 
  -> 0AF40105:1F90      Masq    7      2          3         
`
	k := ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 80}
	empty := ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("192.168.1.10"), Port: 30000}
	k6 := ipvs.Key{Protocol: model.UDP, Address: netip.MustParseAddr("fd00::a"), Port: 53}
	unlistedKey := ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.99"), Port: 80}
	got, unlisted, calls, err := walkSample(in, k, k6, unlistedKey) // empty: not dumped
	if err != nil {
		t.Fatal(err)
	}
	want := []ipvs.RealServer{{Address: netip.MustParseAddr("10.244.1.5"), Port: 8080, Weight: 1}, {Address: netip.MustParseAddr("10.244.2.6"), Port: 8080, Weight: 0}}
	if !slices.Equal(got[k], want) {
		t.Errorf("tcp: %+v, want %+v (the first listing)", got[k], want)
	}
	if rs := got[k6]; len(rs) != 1 || rs[0].Address != netip.MustParseAddr("fd00:244::5") || rs[0].Port != 53 {
		t.Errorf("udp6: %+v", rs)
	}
	if _, ok := got[empty]; ok {
		t.Error("a virtual server the dump lacks was given")
	}
	if calls != 2 || !slices.Equal(unlisted, []ipvs.Key{unlistedKey}) {
		t.Errorf("%d calls, unlisted %v: want 2 (FWM and the undumped skipped, the repeated one once) and %v", calls, unlisted, unlistedKey)
	}
	if got, _, _, err := walkSample(procSample, empty); err != nil || len(got) != 1 || len(got[empty]) != 0 {
		t.Errorf("empty service: %v %v", got, err)
	}
	for _, bad := range []string{"TCP  zz:0050 rr\n", "TCP  0A60000A:0050 rr\n  -> 0AF40105:1F90 Masq x 0 0\n", "TCP  0A60000A:00500 rr\n"} {
		_, unlisted, _, err := walkSample(bad, k)
		if !errors.Is(err, errProcLine) {
			t.Errorf("%q: %v, want a malformed line", bad, err)
		}
		if !slices.Equal(unlisted, []ipvs.Key{k}) {
			t.Errorf("%q: the virtual server read when the line failed is listed: unlisted %v", bad, unlisted)
		}
	}
}

// procText is the listing of n virtual servers of m real servers each.
func procText(n, m int) string {
	var b strings.Builder
	b.WriteString("IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "TCP  0A60%04X:0050 rr \n", i)
		for j := 0; j < m; j++ {
			fmt.Fprintf(&b, "  -> 0AF4%02X%02X:1F90      Masq    1      0          0         \n", j, i%256)
		}
	}
	return b.String()
}

// BenchmarkParseProc: the listing of 10,000 virtual servers × 10 real
// servers as a full sync walks it (listing) and as the graceful
// termination queue does (counters).
//
//	go test -run '^$' -bench ParseProc -benchmem ./ipvs/kernel/
func BenchmarkParseProc(b *testing.B) {
	text := procText(10000, 10)
	b.Run("listing", func(b *testing.B) {
		dumped := make([]dumpedVS, 10000)
		for i := range dumped {
			k := ipvs.Key{Protocol: model.TCP, Address: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80}
			dumped[i].key = k
		}
		b.ReportAllocs()
		for b.Loop() {
			for i := range dumped {
				dumped[i].listed = false
			}
			n := 0
			if err := walkProcListing(strings.NewReader(text), dumped, func(vs *ipvs.VirtualServer, _ *ipvs.Counters, _ []ipvs.Conns) { n += len(vs.RealServers) }); err != nil || n != 100000 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("counters", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseProcIPVS(strings.NewReader(text)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
