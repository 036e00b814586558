package kernel

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// serviceMessage is one message of an IPVS_CMD_GET_SERVICE dump as the
// kernel sends it (ip_vs_genl_fill_service): the generic netlink header,
// then the service's attributes nested in IPVS_CMD_ATTR_SERVICE.
func serviceMessage(af uint16, proto uint16, addr netip.Addr, port uint16, fwmark uint32, sched string, flags, timeout uint32) []byte {
	svc := nl.NewRtAttr(ipvsCmdAttrService|unix.NLA_F_NESTED, nil)
	svc.AddRtAttr(ipvsSvcAttrAF, nl.Uint16Attr(af))
	if fwmark != 0 {
		svc.AddRtAttr(ipvsSvcAttrFWMark, nl.Uint32Attr(fwmark))
	} else {
		svc.AddRtAttr(ipvsSvcAttrProtocol, nl.Uint16Attr(proto))
		a := addr.As16()
		if addr.Is4() {
			a = [16]byte{}
			v4 := addr.As4()
			copy(a[:], v4[:])
		}
		svc.AddRtAttr(ipvsSvcAttrAddr, a[:])
		p := make([]byte, 2)
		binary.BigEndian.PutUint16(p, port)
		svc.AddRtAttr(ipvsSvcAttrPort, p)
	}
	svc.AddRtAttr(ipvsSvcAttrSchedName, nl.ZeroTerminated(sched))
	fl := make([]byte, 8)
	nl.NativeEndian().PutUint32(fl, flags)
	nl.NativeEndian().PutUint32(fl[4:], ^uint32(0))
	svc.AddRtAttr(ipvsSvcAttrFlags, fl)
	svc.AddRtAttr(ipvsSvcAttrTimeout, nl.Uint32Attr(timeout))
	svc.AddRtAttr(9, nl.Uint32Attr(0xffffffff)) // IPVS_SVC_ATTR_NETMASK
	stats := nl.NewRtAttr(10|unix.NLA_F_NESTED, nil)
	stats.AddRtAttr(1, nl.Uint32Attr(7)) // IPVS_STATS_ATTR_CONNS
	svc.AddChild(stats)
	hdr := (&nl.Genlmsg{Command: 1, Version: 1}).Serialize()
	return append(hdr, svc.Serialize()...)
}

func TestParseServiceMessage(t *testing.T) {
	const persistent, hashed = uint32(ipvs.FlagPersistent), uint32(ipvs.FlagHashed)
	for _, c := range []struct {
		name string
		msg  []byte
		want ipvs.VirtualServer
		ok   bool
	}{
		{"tcp v4", serviceMessage(unix.AF_INET, unix.IPPROTO_TCP, netip.MustParseAddr("10.96.0.10"), 53, 0, "rr", hashed, 0),
			ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 53}, Scheduler: "rr"}, true},
		{"udp v6 persistent", serviceMessage(unix.AF_INET6, unix.IPPROTO_UDP, netip.MustParseAddr("fd00::a"), 5353, 0, "sh", persistent|hashed, 10800),
			ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.UDP, Address: netip.MustParseAddr("fd00::a"), Port: 5353}, Scheduler: "sh",
				Flags: ipvs.FlagPersistent, PersistenceTimeout: 10800}, true},
		{"sctp, timeout without persistence", serviceMessage(unix.AF_INET, unix.IPPROTO_SCTP, netip.MustParseAddr("10.96.0.12"), 9, 0, "rr", 0, 300),
			ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.SCTP, Address: netip.MustParseAddr("10.96.0.12"), Port: 9}, Scheduler: "rr"}, true},
		{"firewall mark", serviceMessage(unix.AF_INET, 0, netip.Addr{}, 0, 7, "rr", 0, 0), ipvs.VirtualServer{}, false},
		{"icmp", serviceMessage(unix.AF_INET, unix.IPPROTO_ICMP, netip.MustParseAddr("10.96.0.13"), 0, 0, "rr", 0, 0), ipvs.VirtualServer{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, ok, err := parseServiceMessage(c.msg)
			if err != nil || ok != c.ok {
				t.Fatalf("ok %v, err %v; want ok %v", ok, err, c.ok)
			}
			if ok && (vs.Key != c.want.Key || vs.Scheduler != c.want.Scheduler || vs.Flags != c.want.Flags || vs.PersistenceTimeout != c.want.PersistenceTimeout) {
				t.Errorf("parsed %+v, want %+v", vs, c.want)
			}
		})
	}
}

func TestParseServiceMessageMalformed(t *testing.T) {
	good := serviceMessage(unix.AF_INET, unix.IPPROTO_TCP, netip.MustParseAddr("10.96.0.10"), 53, 0, "rr", 0, 0)
	noService := (&nl.Genlmsg{Command: 1, Version: 1}).Serialize()
	shortPort := func() []byte {
		svc := nl.NewRtAttr(ipvsCmdAttrService, nil)
		svc.AddRtAttr(ipvsSvcAttrAF, nl.Uint16Attr(unix.AF_INET))
		svc.AddRtAttr(ipvsSvcAttrPort, []byte{1})
		return append((&nl.Genlmsg{Command: 1, Version: 1}).Serialize(), svc.Serialize()...)
	}()
	for name, msg := range map[string][]byte{
		"short header": good[:2], "no service attribute": noService, "one-byte port": shortPort,
	} {
		if _, _, err := parseServiceMessage(msg); !errors.Is(err, errServiceMessage) {
			t.Errorf("%s: err %v, want errServiceMessage", name, err)
		}
	}
}
