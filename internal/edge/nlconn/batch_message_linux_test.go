package nlconn

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// familyHeader is a request's family header as request data.
type familyHeader []byte

func (h familyHeader) Len() int          { return len(h) }
func (h familyHeader) Serialize() []byte { return h }

// TestMessage: a request encoded with Message is the one the netlink
// library's request and attribute builders make, appended after another
// request as a batch does: odd lengths padded, nested attributes sized,
// both families' addresses, ports in network byte order.
func TestMessage(t *testing.T) {
	ref := nl.NewNetlinkRequest(0x1d, unix.NLM_F_CREATE|unix.NLM_F_ACK)
	ref.Seq = 7
	ref.AddData(familyHeader{5, 1, 0, 0})
	nest := nl.NewRtAttr(unix.NLA_F_NESTED|1, nil)
	nest.AddRtAttr(1, nl.Uint16Attr(unix.AF_INET6))
	nest.AddRtAttr(3, netip.MustParseAddr("fd00::a").AsSlice())
	nest.AddRtAttr(4, binary.BigEndian.AppendUint16(nil, 443))
	ref.AddData(nest)
	ref.AddData(nl.NewRtAttr(2, netip.MustParseAddr("10.96.0.10").AsSlice()))
	ref.AddData(nl.NewRtAttr(6, nl.Uint32Attr(0xdeadbeef)))
	ref.AddData(nl.NewRtAttr(8, []byte("rr\x00")))
	want := ref.Serialize()

	encode := func(b []byte, seq uint32) []byte {
		m := Begin(b, 0x1d, unix.NLM_F_CREATE, seq)
		m.Raw(5, 1, 0, 0)
		at := m.Nest(unix.NLA_F_NESTED | 1)
		m.Uint16(1, unix.AF_INET6)
		m.Addr(3, netip.MustParseAddr("fd00::a"))
		m.Port(4, 443)
		m.EndNest(at)
		m.Addr(2, netip.MustParseAddr("10.96.0.10"))
		m.Uint32(6, 0xdeadbeef)
		m.Attr(8, []byte("rr\x00"))
		return m.End()
	}
	prev := encode(nil, 6)
	got := encode(prev, 7)[len(prev):]
	if !bytes.Equal(got, want) {
		t.Fatalf("request\n got % x\nwant % x", got, want)
	}
}
