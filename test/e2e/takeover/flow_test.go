package takeover

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A proxied request that times out with its connection established has
// three suspects: the node namespace (the proxies' IPVS, conntrack and
// rules) dropped a segment; the backend did not answer in time; the client
// did not read the answer it was sent. The backend and the client are this
// test's own goroutines, which a loaded host starves under TCG. The node
// namespace's packet capture (capture, in the kernel half) tells them
// apart, and so does flowVerdict, a pure function tested on the host.

// packet is one TCP segment a capture saw: `tcpdump -i any -nn tcp` of the
// node namespace, reduced to what tells where a flow stopped.
type packet struct {
	at       time.Time
	ifName   string
	out      bool // sent by the namespace (PACKET_OUTGOING), else received
	src, dst netip.AddrPort
	flags    uint8
	seq, ack uint32
	payload  int
}

func (p packet) String() string {
	dir := "<"
	if p.out {
		dir = ">"
	}
	var fl []string
	for i, n := range []string{"F", "S", "R", "P", ".", "U"} {
		if p.flags&(1<<i) != 0 {
			fl = append(fl, n)
		}
	}
	return fmt.Sprintf("%s %-8s %s %s > %s [%s] seq %d ack %d len %d", p.at.Format("15:04:05.000000"), p.ifName, dir,
		p.src, p.dst, strings.Join(fl, ""), p.seq, p.ack, p.payload)
}

// involves tells whether the segment belongs to a flow with endpoint a
// (either direction, before or after the proxies' NAT).
func (p packet) involves(a netip.AddrPort) bool { return p.src == a || p.dst == a }

// parseTCP reads the IP and TCP headers of a network-layer packet.
func parseTCP(b []byte, proto uint16) (packet, bool) {
	var p packet
	var src, dst netip.Addr
	var l4 []byte
	total := 0
	switch proto {
	case unix.ETH_P_IP:
		if len(b) < 20 || b[9] != unix.IPPROTO_TCP {
			return p, false
		}
		ihl := int(b[0]&0x0f) * 4
		total = int(binary.BigEndian.Uint16(b[2:4])) - ihl
		src, dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		if len(b) < ihl {
			return p, false
		}
		l4 = b[ihl:]
	case unix.ETH_P_IPV6:
		if len(b) < 40 || b[6] != unix.IPPROTO_TCP {
			return p, false
		}
		total = int(binary.BigEndian.Uint16(b[4:6]))
		src, dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:]
	default:
		return p, false
	}
	if len(l4) < 20 {
		return p, false
	}
	p.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:2]))
	p.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:4]))
	p.seq, p.ack = binary.BigEndian.Uint32(l4[4:8]), binary.BigEndian.Uint32(l4[8:12])
	p.flags = l4[13]
	p.payload = total - int(l4[12]>>4)*4
	return p, true
}

// segKey identifies one segment across the node namespace: NAT rewrites
// addresses and ports, never sequence numbers.
type segKey struct {
	seq, ack uint32
	flags    uint8
	payload  int
}

func (p packet) key() segKey { return segKey{p.seq, p.ack, p.flags, p.payload} }

// forwardWithin is how long after the node received a segment its
// forwarded copy may appear in the capture.
const forwardWithin = time.Second

// verdict says who failed a request.
type verdict struct {
	// bed is true when the capture shows that the node forwarded every
	// segment of the flow and the backend or the client (this test's own
	// goroutines) was late: not the proxy's doing.
	bed bool
	why string
}

// flowVerdict judges one failed TCP request from the segments the node
// namespace captured around it (segs, in capture order, for the client
// endpoint client; the copies of the flow on the backend's side are found
// by their sequence numbers) and the client's deadline:
//
//   - a segment the node received before the deadline with no forwarded
//     copy within forwardWithin: dropped in the node, the proxies' side;
//   - else, no answer (a segment with data towards the client) received by
//     the node before the deadline although the backend got the client's
//     handshake: the backend was late (the bed);
//   - else, the answer forwarded to the client before the deadline: the
//     client did not read it (the bed);
//   - anything else (nothing captured, the handshake never forwarded): not
//     the bed's, the failure counts.
func flowVerdict(segs []packet, client netip.AddrPort, deadline time.Time) verdict {
	toClient := map[segKey]bool{}
	for _, p := range segs {
		if p.involves(client) {
			toClient[p.key()] = p.dst == client
		}
	}
	if len(toClient) == 0 {
		return verdict{why: "no segment of the flow captured"}
	}
	var flow []packet
	for _, p := range segs {
		if _, ok := toClient[p.key()]; ok {
			flow = append(flow, p)
		}
	}
	for i, p := range flow {
		if p.out || !p.at.Before(deadline) {
			continue
		}
		forwarded := false
		for _, q := range flow[i+1:] {
			if q.out && q.ifName != p.ifName && q.key() == p.key() && q.at.Sub(p.at) <= forwardWithin {
				forwarded = true
				break
			}
		}
		if !forwarded {
			return verdict{why: fmt.Sprintf("the node received %s and forwarded no copy: dropped in the node namespace", p)}
		}
	}
	handshake := false // the client's ACK of the SYN-ACK, forwarded
	for _, p := range flow {
		k := p.key()
		if p.at.Before(deadline) && !toClient[k] && p.out && k.flags&tcpSYN == 0 && k.flags&tcpACK != 0 {
			handshake = true
		}
	}
	for _, p := range flow {
		k := p.key()
		if toClient[k] && k.payload > 0 && !p.out {
			switch {
			case !p.at.Before(deadline):
				return verdict{bed: handshake, why: fmt.Sprintf("the backend's answer reached the node at %s, after the client's deadline %s", p.at.Format("15:04:05.000"), deadline.Format("15:04:05.000"))}
			default:
				return verdict{bed: true, why: fmt.Sprintf("the node forwarded the backend's answer at %s, before the client's deadline %s: the client did not read it", p.at.Format("15:04:05.000"), deadline.Format("15:04:05.000"))}
			}
		}
	}
	if handshake {
		return verdict{bed: true, why: "the backend got the client's handshake and sent no answer before the client's deadline"}
	}
	return verdict{why: "the client's handshake never reached the backend"}
}

// TCP flags in packet.flags.
const (
	tcpFIN = 1 << 0
	tcpSYN = 1 << 1
	tcpRST = 1 << 2
	tcpACK = 1 << 4
)
