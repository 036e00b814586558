package kernel

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// genlHeader is struct genlmsghdr as request data.
type genlHeader [4]byte

func (h genlHeader) Len() int          { return len(h) }
func (h genlHeader) Serialize() []byte { return h[:] }

// newDestRequest builds the IPVS_CMD_NEW_DEST request appendNewDest
// encodes with the netlink library's request and attribute builders, the
// way moby/ipvs builds its own: the reference the encoder is checked
// against.
func newDestRequest(family uint16, seq uint32, k ipvs.Key, rs ipvs.RealServer) []byte {
	req := nl.NewNetlinkRequest(int(family), unix.NLM_F_ACK)
	req.Seq = seq
	// struct genlmsghdr with its reserved bytes zero (nl.Genlmsg
	// serializes two bytes past its fields).
	req.AddData(genlHeader{ipvsCmdNewDest, 1, 0, 0})
	af := uint16(unix.AF_INET6)
	if k.Address.Is4() {
		af = unix.AF_INET
	}
	port := func(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }
	svc := nl.NewRtAttr(ipvsCmdAttrService|unix.NLA_F_NESTED, nil)
	svc.AddRtAttr(ipvsSvcAttrAF, nl.Uint16Attr(af))
	svc.AddRtAttr(ipvsSvcAttrProtocol, nl.Uint16Attr(protoNumber(k.Protocol)))
	svc.AddRtAttr(ipvsSvcAttrAddr, k.Address.AsSlice())
	svc.AddRtAttr(ipvsSvcAttrPort, port(k.Port))
	req.AddData(svc)
	dest := nl.NewRtAttr(ipvsCmdAttrDest|unix.NLA_F_NESTED, nil)
	dest.AddRtAttr(ipvsDestAttrAddr, rs.Address.AsSlice())
	dest.AddRtAttr(ipvsDestAttrPort, port(rs.Port))
	dest.AddRtAttr(ipvsDestAttrFwdMethod, nl.Uint32Attr(0))
	dest.AddRtAttr(ipvsDestAttrWeight, nl.Uint32Attr(uint32(rs.Weight)))
	dest.AddRtAttr(ipvsDestAttrUThresh, nl.Uint32Attr(0))
	dest.AddRtAttr(ipvsDestAttrLThresh, nl.Uint32Attr(0))
	req.AddData(dest)
	return req.Serialize()
}

func TestAppendNewDest(t *testing.T) {
	for _, c := range []struct {
		name string
		k    ipvs.Key
		rs   ipvs.RealServer
	}{
		{"tcp v4", ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 443},
			ipvs.RealServer{Address: netip.MustParseAddr("10.244.1.5"), Port: 8443, Weight: 1}},
		{"udp v6", ipvs.Key{Protocol: model.UDP, Address: netip.MustParseAddr("fd00::a"), Port: 53},
			ipvs.RealServer{Address: netip.MustParseAddr("fd00:244::5"), Port: 5353, Weight: 0}},
		{"sctp v4", ipvs.Key{Protocol: model.SCTP, Address: netip.MustParseAddr("192.0.2.1"), Port: 0xfffe},
			ipvs.RealServer{Address: netip.MustParseAddr("10.0.0.1"), Port: 1, Weight: 100}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := newDestRequest(0x1d, 7, c.k, c.rs)
			// Appended after another request, as a batch does.
			prev := appendNewDest(nil, 0x1d, 6, c.k, c.rs)
			got := appendNewDest(prev, 0x1d, 7, c.k, c.rs)[len(prev):]
			if !bytes.Equal(got, want) {
				t.Fatalf("request\n got % x\nwant % x", got, want)
			}
		})
	}
}

// newServiceRequest builds the IPVS_CMD_NEW_SERVICE request of vs with the
// library's builders, with the attributes moby/ipvs's fillService sends.
func newServiceRequest(family uint16, seq uint32, vs ipvs.VirtualServer) []byte {
	req := nl.NewNetlinkRequest(int(family), unix.NLM_F_ACK)
	req.Seq = seq
	req.AddData(genlHeader{ipvsCmdNewService, 1, 0, 0})
	s := toService(vs)
	svc := nl.NewRtAttr(ipvsCmdAttrService|unix.NLA_F_NESTED, nil)
	svc.AddRtAttr(ipvsSvcAttrAF, nl.Uint16Attr(s.AddressFamily))
	svc.AddRtAttr(ipvsSvcAttrProtocol, nl.Uint16Attr(s.Protocol))
	svc.AddRtAttr(ipvsSvcAttrAddr, vs.Address.AsSlice())
	svc.AddRtAttr(ipvsSvcAttrPort, binary.BigEndian.AppendUint16(nil, s.Port))
	svc.AddRtAttr(ipvsSvcAttrSchedName, nl.ZeroTerminated(s.SchedName))
	flags := nl.Uint32Attr(s.Flags)
	svc.AddRtAttr(ipvsSvcAttrFlags, append(flags, 0xff, 0xff, 0xff, 0xff))
	svc.AddRtAttr(ipvsSvcAttrTimeout, nl.Uint32Attr(s.Timeout))
	svc.AddRtAttr(ipvsSvcAttrNetmask, nl.Uint32Attr(s.Netmask))
	req.AddData(svc)
	return req.Serialize()
}

func TestAppendNewService(t *testing.T) {
	for _, vs := range []ipvs.VirtualServer{
		{Key: ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 443}, Scheduler: "rr"},
		{Key: ipvs.Key{Protocol: model.UDP, Address: netip.MustParseAddr("fd00::a"), Port: 53}, Scheduler: "sh",
			Flags: ipvs.FlagPersistent | ipvs.FlagHashed, PersistenceTimeout: 10800},
		{Key: ipvs.Key{Protocol: model.SCTP, Address: netip.MustParseAddr("192.0.2.1"), Port: 9}, Scheduler: "wlc"},
	} {
		t.Run(vs.Key.String(), func(t *testing.T) {
			want := newServiceRequest(0x1d, 9, vs)
			prev := appendNewDest(nil, 0x1d, 8, vs.Key, ipvs.RealServer{Address: netip.MustParseAddr("10.0.0.1"), Port: 1})
			got := appendNewService(prev, 0x1d, 9, vs)[len(prev):]
			if !bytes.Equal(got, want) {
				t.Fatalf("request\n got % x\nwant % x", got, want)
			}
		})
	}
}
