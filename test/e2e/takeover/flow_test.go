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

// A proxied request that times out, in its dial or with its connection
// established, has three suspects: the node namespace (the proxies' IPVS,
// conntrack and rules) dropped or misdirected a segment; the backend did
// not answer in time; the client did not read the answer it was sent.
// The backend and the client are this test's own goroutines, which a
// loaded host starves under TCG. The node namespace's packet capture
// (capture, in the kernel half) tells them apart, and so does
// flowVerdict, a pure function tested on the host.

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
	// blameIPVSReplyMatch: the backend's answer or SYN-ACK left the node
	// under the address of another Service, to which the capture shows a
	// connection of the same client port through the same backend. IPVS
	// matches a reply to its connection by client and real server address
	// and port only, without the virtual address: two connections of one
	// client port to two Services with a common endpoint are one to it,
	// and the newer one takes the older one's replies (a dial's SYN-ACKs
	// too, when the other connection came between its SYN and them). Both
	// proxies program IPVS alike; the failure is excused.
	blameIPVSReplyMatch
)

// verdict says who failed a request, and why.
type verdict struct {
	blame blame
	why   string
}

// excused tells whether the failure is not the proxies' doing.
func (v verdict) excused() bool { return v.blame != blameProxies }

// flow is one TCP connection's segments on both sides of the node: those
// in the sequence spaces of its SYN and, once the backend answered it, its
// SYN-ACK (NAT rewrites addresses and ports, never sequence numbers).
type flow struct {
	client, remote netip.AddrPort
	cISN, sISN     uint32
	syn, synACK    bool
	segs           []packet
	copyOf         map[int]int // received segment -> its forwarded copy (indexes in segs)
}

// findFlow finds the flow of the client's first SYN to remote in segs.
func findFlow(segs []packet, client, remote netip.AddrPort) flow {
	f := flow{client: client, remote: remote}
	for _, p := range segs {
		switch {
		case !f.syn && p.src == client && p.dst == remote && p.flags&(tcpSYN|tcpACK) == tcpSYN:
			f.cISN, f.syn = p.seq, true
		case f.syn && !f.synACK && p.flags&(tcpSYN|tcpACK) == tcpSYN|tcpACK && p.ack == f.cISN+1:
			f.sISN, f.synACK = p.seq, true
		}
	}
	if !f.syn {
		return f
	}
	for _, p := range segs {
		if f.fromClient(p) || f.toClient(p) {
			f.segs = append(f.segs, p)
		}
	}
	// Each segment the node sent is the copy of at most one it received:
	// a SYN and its retransmission have the same key.
	f.copyOf = map[int]int{}
	claimed := map[int]bool{}
	for i, p := range f.segs {
		if p.out {
			continue
		}
		for j := i + 1; j < len(f.segs); j++ {
			q := f.segs[j]
			if q.at.Sub(p.at) > forwardWithin {
				break
			}
			if q.out && !claimed[j] && q.ifName != p.ifName && q.key() == p.key() {
				f.copyOf[i], claimed[j] = j, true
				break
			}
		}
	}
	// A segment that came in through a bridge port is captured on the
	// port and again on the bridge (the LAN client's cveth1, then eth0):
	// one arrival, one forwarded copy, which the port's capture claimed.
	for i, p := range f.segs {
		if _, ok := f.copyOf[i]; ok || p.out {
			continue
		}
		for k := i - 1; k >= 0 && p.at.Sub(f.segs[k].at) <= forwardWithin; k-- {
			r := f.segs[k]
			if j, ok := f.copyOf[k]; ok && !r.out && r.ifName != p.ifName && r.key() == p.key() {
				f.copyOf[i] = j
				break
			}
		}
	}
	return f
}

// near tells whether sequence number n is in the space starting at isn.
func near(n, isn uint32) bool { return n-isn < 1<<24 }

func (f flow) fromClient(p packet) bool {
	if !near(p.seq, f.cISN) {
		return false
	}
	// The client's SYNs, and its RSTs without ACK, carry no ack number.
	return p.flags&tcpACK == 0 || f.synACK && near(p.ack, f.sISN)
}

func (f flow) toClient(p packet) bool {
	return f.synACK && near(p.seq, f.sISN) && near(p.ack, f.cISN)
}

// flowVerdict judges one failed TCP request from client to remote (the
// address it dialled) from the segments the node namespace captured
// around it (segs, in capture order) and the client's deadline (of the
// dial and the answer together). The flow's segments are those of
// findFlow, on either side of the node.
//
//   - a segment the node received before the deadline with no forwarded
//     copy within forwardWithin: dropped in the node, the proxies' side;
//   - the backend's SYN-ACK or answer forwarded to the client from an
//     address other than remote, and a SYN of the same client endpoint to
//     that address forwarded to the same backend captured before it:
//     blameIPVSReplyMatch (without that SYN the failure counts);
//   - the client's SYN forwarded and no SYN-ACK received by the node
//     before the deadline: the failure counts (a dial timeout, named);
//   - no answer received by the node before the deadline although the
//     backend got the client's handshake: the backend was late (the bed);
//   - the answer forwarded to the client before the deadline: the client
//     did not read it (the bed);
//   - anything else (nothing captured, the handshake never forwarded): no
//     verdict, the failure counts.
//
// earlier are segments captured before segs (the SYNs of the minutes
// before, for replyMatch; nil for none).
func flowVerdict(segs, earlier []packet, client, remote netip.AddrPort, deadline time.Time) verdict {
	f := findFlow(segs, client, remote)
	if !f.syn {
		return verdict{why: "the flow's SYN not captured: no verdict"}
	}
	if !slices.ContainsFunc(segs, func(p packet) bool { return p.src == client && !p.out }) {
		// The node's own flows are never forwarded.
		return verdict{why: "the client is the node itself: no verdict"}
	}
	at := func(t time.Time) string { return t.Format("15:04:05.000") }
	for i, p := range f.segs {
		if _, ok := f.copyOf[i]; !ok && !p.out && p.at.Before(deadline) {
			return verdict{why: fmt.Sprintf("the node received %s and forwarded no copy: dropped in the node namespace", p)}
		}
	}
	for i, p := range f.segs {
		j, ok := f.copyOf[i]
		if !ok || !f.toClient(p) || (p.payload == 0 && p.flags&tcpSYN == 0) {
			continue
		}
		if q := f.segs[j]; q.dst == client && q.src != remote {
			return f.replyMatch(slices.Concat(earlier, segs), p, q)
		}
	}
	if !f.synACK || !f.firstSYNACK().at.Before(deadline) {
		return f.unanswered(deadline)
	}
	handshake := false // the client's ACK of the SYN-ACK, forwarded
	for _, p := range f.segs {
		if p.at.Before(deadline) && f.fromClient(p) && p.out && p.flags&tcpSYN == 0 && p.flags&tcpACK != 0 {
			handshake = true
		}
	}
	for _, p := range f.segs {
		if p.out || !f.toClient(p) || p.payload == 0 {
			continue
		}
		if !p.at.Before(deadline) {
			if handshake {
				return verdict{blame: blameBed, why: fmt.Sprintf("the backend's answer reached the node at %s, after the client's deadline %s", at(p.at), at(deadline))}
			}
			return verdict{why: "the backend answered late and its handshake was not seen forwarded: no verdict"}
		}
		// Received before the deadline, so forwarded (see above).
		return verdict{blame: blameBed, why: fmt.Sprintf("the node forwarded the backend's answer at %s, before the client's deadline %s: the client did not read it", at(p.at), at(deadline))}
	}
	if handshake {
		return verdict{blame: blameBed, why: "the backend got the client's handshake and sent no answer before the client's deadline"}
	}
	return verdict{why: "the client's handshake never reached the backend"}
}

// firstSYNACK is the first SYN-ACK of the flow the node received.
func (f flow) firstSYNACK() packet {
	for _, p := range f.segs {
		if !p.out && p.flags&(tcpSYN|tcpACK) == tcpSYN|tcpACK {
			return p
		}
	}
	return packet{at: time.Unix(1<<40, 0)} // only seen sent: never before a deadline
}

// replyMatch judges a SYN-ACK or answer p of the backend that the node
// forwarded to the client as q, from another address than the one the
// client dialled. It is IPVS's reply matching only if the capture shows
// the other connection: a SYN of the same client endpoint to q's source,
// forwarded to the backend that sent p, before q. That connection may be
// minutes older and closed: IPVS keeps a closed connection in its table
// for its TIME_WAIT or CLOSE timeout, and matches replies to it too.
func (f flow) replyMatch(segs []packet, p, q packet) verdict {
	what := "answer"
	if p.flags&tcpSYN != 0 {
		what = "SYN-ACK"
	}
	var other flow
	for _, r := range segs {
		if r.at.After(q.at) {
			break
		}
		if !r.out && r.src == f.client && r.dst == q.src && r.flags&(tcpSYN|tcpACK) == tcpSYN {
			other = findFlow(segs, f.client, q.src)
			break
		}
	}
	if other.syn {
		for i, r := range other.segs {
			if j, ok := other.copyOf[i]; ok && r.flags&(tcpSYN|tcpACK) == tcpSYN && other.segs[j].dst == p.src && !other.segs[j].at.After(q.at) {
				return verdict{blame: blameIPVSReplyMatch, why: fmt.Sprintf(
					"the node forwarded the backend's %s to %s from %s, not from %s, after the client's connection from the same port to %s went to the same backend %s: IPVS matched it to that connection (same client port and real server)",
					what, f.client, q.src, f.remote, q.src, p.src)}
			}
		}
	}
	return verdict{why: fmt.Sprintf("the node forwarded the backend's %s to %s from %s, not from %s, and no connection of the client's port to %s through the same backend was captured: no verdict",
		what, f.client, q.src, f.remote, q.src)}
}

// unanswered judges a flow whose SYN-ACK the node did not receive before
// the deadline, every SYN it received having been forwarded (a dial
// timeout): it counts, and its reason names what the capture saw.
func (f flow) unanswered(deadline time.Time) verdict {
	var syns, sent int
	var to netip.AddrPort
	for i, p := range f.segs {
		if p.out || p.flags&(tcpSYN|tcpACK) != tcpSYN || !p.at.Before(deadline) {
			continue
		}
		syns++
		if j, ok := f.copyOf[i]; ok {
			sent++
			to = f.segs[j].dst
		}
	}
	switch {
	case syns == 0:
		return verdict{why: "the client's SYN did not reach the node before the deadline: no verdict"}
	case f.synACK:
		return verdict{why: fmt.Sprintf("the node forwarded the client's %d SYNs to %s; the backend's SYN-ACK reached the node at %s, after the client's deadline %s: no verdict",
			sent, to, f.firstSYNACK().at.Format("15:04:05.000"), deadline.Format("15:04:05.000"))}
	}
	return verdict{why: fmt.Sprintf("the node forwarded the client's %d SYNs to %s and received no SYN-ACK before the client's deadline %s: no verdict",
		sent, to, deadline.Format("15:04:05.000"))}
}

// TCP flags in packet.flags.
const (
	tcpFIN = 1 << 0
	tcpSYN = 1 << 1
	tcpRST = 1 << 2
	tcpACK = 1 << 4
)
