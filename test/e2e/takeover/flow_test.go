package takeover

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
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

// blame is who a verdict puts a failed request on.
type blame int

const (
	// blameProxies: a segment dropped in the node namespace, or no verdict
	// possible. The failure counts.
	blameProxies blame = iota
	// blameBed: every segment crossed the node and the test's own backend
	// or client was late. The failure is excused.
	blameBed
	// blameIPVSReplyMatch: the backend's answer left the node under another
	// Service's address. IPVS matches a reply to its connection by client
	// and real server address and port only, without the virtual address:
	// two connections of one client port to two Services with a common
	// endpoint are one to it, and the newer one takes the older one's
	// replies. Both proxies program IPVS alike; the failure is excused.
	blameIPVSReplyMatch
)

// verdict says who failed a request, and why.
type verdict struct {
	blame blame
	why   string
}

// excused tells whether the failure is not the proxies' doing.
func (v verdict) excused() bool { return v.blame != blameProxies }

// flowVerdict judges one failed TCP request from client to remote (the
// address it dialled) from the segments the node namespace captured
// around it (segs, in capture order) and the client's deadline. The
// flow's segments are those in the sequence spaces of its SYN and SYN-ACK
// (NAT rewrites addresses and ports, never sequence numbers), on either
// side of the node.
//
//   - a segment the node received before the deadline with no forwarded
//     copy within forwardWithin: dropped in the node, the proxies' side;
//   - the backend's answer forwarded to the client from an address other
//     than remote: blameIPVSReplyMatch;
//   - no answer received by the node before the deadline although the
//     backend got the client's handshake: the backend was late (the bed);
//   - the answer forwarded to the client before the deadline: the client
//     did not read it (the bed);
//   - anything else (nothing captured, the handshake never forwarded): no
//     verdict, the failure counts.
func flowVerdict(segs []packet, client, remote netip.AddrPort, deadline time.Time) verdict {
	var cISN, sISN uint32
	var haveSYN, haveSYNACK bool
	for _, p := range segs {
		switch {
		case !haveSYN && p.src == client && p.dst == remote && p.flags&(tcpSYN|tcpACK) == tcpSYN:
			cISN, haveSYN = p.seq, true
		case haveSYN && !haveSYNACK && p.flags&(tcpSYN|tcpACK) == tcpSYN|tcpACK && p.ack == cISN+1:
			sISN, haveSYNACK = p.seq, true
		}
	}
	if !haveSYN || !haveSYNACK {
		return verdict{why: "the flow's SYN and SYN-ACK not both captured: no verdict"}
	}
	if !slices.ContainsFunc(segs, func(p packet) bool { return p.src == client && !p.out }) {
		// The node's own flows are never forwarded.
		return verdict{why: "the client is the node itself: no verdict"}
	}
	// near tells whether sequence number n is in the space starting at isn.
	near := func(n, isn uint32) bool { return n-isn < 1<<24 }
	fromClient := func(p packet) bool { return near(p.seq, cISN) && (p.flags&tcpACK == 0 || near(p.ack, sISN)) }
	toClient := func(p packet) bool { return near(p.seq, sISN) && near(p.ack, cISN) }
	var flow []packet
	for _, p := range segs {
		if fromClient(p) || toClient(p) {
			flow = append(flow, p)
		}
	}
	copies := func(i int) []packet {
		var out []packet
		p := flow[i]
		for _, q := range flow[i+1:] {
			if q.out && q.ifName != p.ifName && q.key() == p.key() && q.at.Sub(p.at) <= forwardWithin {
				out = append(out, q)
			}
		}
		return out
	}
	for i, p := range flow {
		if !p.out && p.at.Before(deadline) && len(copies(i)) == 0 {
			return verdict{why: fmt.Sprintf("the node received %s and forwarded no copy: dropped in the node namespace", p)}
		}
	}
	handshake := false // the client's ACK of the SYN-ACK, forwarded
	for _, p := range flow {
		if p.at.Before(deadline) && fromClient(p) && p.out && p.flags&tcpSYN == 0 && p.flags&tcpACK != 0 {
			handshake = true
		}
	}
	at := func(t time.Time) string { return t.Format("15:04:05.000") }
	for i, p := range flow {
		if p.out || !toClient(p) || p.payload == 0 {
			continue
		}
		for _, q := range copies(i) {
			if q.dst == client && q.src != remote {
				return verdict{blame: blameIPVSReplyMatch, why: fmt.Sprintf(
					"the node forwarded the backend's answer to %s from %s, not from %s: IPVS matched it to another connection of the same client port and real server", client, q.src, remote)}
			}
		}
		if !p.at.Before(deadline) {
			if handshake {
				return verdict{blame: blameBed, why: fmt.Sprintf("the backend's answer reached the node at %s, after the client's deadline %s", at(p.at), at(deadline))}
			}
			return verdict{why: "the backend answered late and its handshake was not seen forwarded: no verdict"}
		}
		return verdict{blame: blameBed, why: fmt.Sprintf("the node forwarded the backend's answer at %s, before the client's deadline %s: the client did not read it", at(p.at), at(deadline))}
	}
	if handshake {
		return verdict{blame: blameBed, why: "the backend got the client's handshake and sent no answer before the client's deadline"}
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
