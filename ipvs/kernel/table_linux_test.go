package kernel

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

func TestParseProcIPVS(t *testing.T) {
	var (
		vip    = netip.MustParseAddr("10.96.0.10")
		vip6   = netip.MustParseAddr("fd00::a")
		nodeIP = netip.MustParseAddr("192.168.1.10")
		ep1    = netip.MustParseAddr("10.244.1.5")
	)
	in := `IP Virtual Server version 1.2.1 (size=4096)
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
