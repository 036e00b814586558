package nlconn

import (
	"encoding/binary"
	"net/netip"
)

// Sizes of the netlink headers (struct nlmsghdr, struct nlattr) and their
// alignment.
const (
	headerLen = 16
	attrLen   = 4
	align     = 4
)

// Message appends one request to a batch's buffer: Begin writes its
// netlink header, the caller appends its family header and attributes,
// End sets its length.
type Message struct {
	b     []byte
	start int
}

// Begin starts a request of type typ (the generic netlink family, or an
// RTM_ type) with flags, NLM_F_REQUEST and NLM_F_ACK set, and sequence
// number seq at the end of b.
func Begin(b []byte, typ, flags uint16, seq uint32) Message {
	start := len(b)
	b = binary.NativeEndian.AppendUint32(b, 0) // nlmsg_len, set by End
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags|flagRequest|flagAck)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // nlmsg_pid: the kernel fills in the sender
	return Message{b: b, start: start}
}

// NLM_F_REQUEST and NLM_F_ACK (linux/netlink.h).
const (
	flagRequest = 0x1
	flagAck     = 0x4
)

// End sets the request's length and returns the buffer.
func (m Message) End() []byte {
	binary.NativeEndian.PutUint32(m.b[m.start:], uint32(len(m.b)-m.start))
	return m.b
}

// Raw appends bytes as they are: a family header (struct genlmsghdr,
// struct ifaddrmsg), already padded to four bytes.
func (m *Message) Raw(v ...byte) { m.b = append(m.b, v...) }

// Attr appends one attribute, padded to four bytes.
func (m *Message) Attr(typ uint16, v []byte) {
	m.b = binary.NativeEndian.AppendUint16(m.b, uint16(attrLen+len(v)))
	m.b = binary.NativeEndian.AppendUint16(m.b, typ)
	m.b = append(m.b, v...)
	for len(m.b)%align != 0 {
		m.b = append(m.b, 0)
	}
}

// Uint16 appends a 16-bit attribute in host byte order.
func (m *Message) Uint16(typ, v uint16) {
	var a [2]byte
	binary.NativeEndian.PutUint16(a[:], v)
	m.Attr(typ, a[:])
}

// Uint32 appends a 32-bit attribute in host byte order.
func (m *Message) Uint32(typ uint16, v uint32) {
	var a [4]byte
	binary.NativeEndian.PutUint32(a[:], v)
	m.Attr(typ, a[:])
}

// Port appends a port in network byte order.
func (m *Message) Port(typ, port uint16) {
	var a [2]byte
	binary.BigEndian.PutUint16(a[:], port)
	m.Attr(typ, a[:])
}

// Addr appends an address: 4 bytes for IPv4, 16 for IPv6.
func (m *Message) Addr(typ uint16, addr netip.Addr) {
	if addr.Is4() {
		a := addr.As4()
		m.Attr(typ, a[:])
		return
	}
	a := addr.As16()
	m.Attr(typ, a[:])
}

// Nest starts a nested attribute of type typ (NLA_F_NESTED is the
// caller's); EndNest closes it.
func (m *Message) Nest(typ uint16) int {
	at := len(m.b)
	m.Attr(typ, nil)
	return at
}

// EndNest sets the length of the nested attribute Nest started at at to
// everything appended since.
func (m *Message) EndNest(at int) {
	binary.NativeEndian.PutUint16(m.b[at:], uint16(len(m.b)-at))
}
