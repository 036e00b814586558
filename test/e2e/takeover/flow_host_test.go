package takeover

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// capturedSegment is one captured TCP segment as the replay tests write
// it: at is in units after the capture's base time.
type capturedSegment struct {
	at       int
	ifName   string
	out      bool
	src, dst string
	flags    uint8
	seq, ack uint32
	payload  int
}

// replay turns captured segments into packets, at base plus their times
// in unit.
func replay(base time.Time, unit time.Duration, segs []capturedSegment) []packet {
	out := make([]packet, 0, len(segs))
	for _, s := range segs {
		out = append(out, s.packet(base, unit))
	}
	return out
}

func (s capturedSegment) packet(base time.Time, unit time.Duration) packet {
	return packet{at: base.Add(time.Duration(s.at) * unit), ifName: s.ifName, out: s.out,
		src: netip.MustParseAddrPort(s.src), dst: netip.MustParseAddrPort(s.dst),
		flags: s.flags, seq: s.seq, ack: s.ack, payload: s.payload}
}

// The segments of a ClusterIP request from the client pod (10.244.0.4) to
// pod-b through 10.96.26.104:80, as the node namespace captured them in a
// takeover run on a starved VM (2026-11-25 22:42:59): veth4 is the
// client's side, veth2 the backend's.
func capturedFlow(t *testing.T) (segs []packet, client netip.AddrPort) {
	t.Helper()
	base := time.Date(2026, 11, 25, 22, 42, 59, 0, time.UTC)
	cl, vip, be := "10.244.0.4:44178", "10.96.26.104:80", "10.244.0.2:8080"
	segs = replay(base, time.Millisecond, []capturedSegment{
		{928, "veth4", false, cl, vip, tcpSYN, 2203451986, 0, 0},
		{928, "veth2", true, cl, be, tcpSYN, 2203451986, 0, 0},
		{928, "veth2", false, be, cl, tcpSYN | tcpACK, 3167404236, 2203451987, 0},
		{928, "veth4", true, vip, cl, tcpSYN | tcpACK, 3167404236, 2203451987, 0},
		{929, "veth4", false, cl, vip, tcpACK, 2203451987, 3167404237, 0},
		{929, "veth2", true, cl, be, tcpACK, 2203451987, 3167404237, 0},
		{1618, "veth2", false, be, cl, tcpACK | 8, 3167404237, 2203451987, 17},
		{1618, "veth4", true, vip, cl, tcpACK | 8, 3167404237, 2203451987, 17},
		{1619, "veth4", false, cl, vip, tcpACK, 2203451987, 3167404254, 0},
		{1619, "veth2", true, cl, be, tcpACK, 2203451987, 3167404254, 0},
	})
	return segs, netip.MustParseAddrPort(cl)
}

func TestFlowVerdict(t *testing.T) {
	segs, client := capturedFlow(t)
	vip := netip.MustParseAddrPort("10.96.26.104:80")
	answer := segs[6].at
	without := func(i int) []packet {
		out := append([]packet{}, segs[:i]...)
		return append(out, segs[i+1:]...)
	}
	for _, tc := range []struct {
		name     string
		segs     []packet
		deadline time.Time
		blame    blame
		why      string
	}{
		{"the answer reached the node after the deadline: the backend was late", segs, answer.Add(-time.Millisecond), blameBed, "after the client's deadline"},
		{"the answer forwarded before the deadline: the client did not read it", segs, answer.Add(time.Second), blameBed, "the client did not read it"},
		{"the answer received and not forwarded: the node dropped it", without(7), answer.Add(time.Second), blameProxies, "dropped in the node namespace"},
		{"the client's handshake ACK not forwarded: the node dropped it", without(5), answer.Add(time.Second), blameProxies, "dropped in the node namespace"},
		{"the SYN-ACK not forwarded: the node dropped it", without(3), answer.Add(time.Second), blameProxies, "dropped in the node namespace"},
		{"no answer at all, the handshake forwarded: the backend was late", segs[:6], answer.Add(time.Second), blameBed, "sent no answer"},
		{"no answer, the handshake ACK not captured on the backend's side", append(segs[:5:5], segs[6:]...)[:5], answer.Add(time.Second), blameProxies, "dropped in the node namespace"},
		{"nothing captured", nil, answer, blameProxies, "SYN not captured"},
		{"the client's own segments only sent: the node is the client", fromNode(segs), answer.Add(time.Second), blameProxies, "the node itself"},
	} {
		v := flowVerdict(tc.segs, nil, client, vip, tc.deadline)
		if v.blame != tc.blame || !strings.Contains(v.why, tc.why) {
			t.Errorf("%s: flowVerdict = %+v, want blame %v and %q", tc.name, v, tc.blame, tc.why)
		}
	}
}

// fromNode is segs as a flow from the node itself would show: its
// segments sent, never received.
func fromNode(segs []packet) []packet {
	var out []packet
	for _, p := range segs {
		if p.src.Port() == 44178 {
			p.out = true
		}
		out = append(out, p)
	}
	return out
}

// TestFlowVerdictIPVSReplyMatchOlderConnection is the failure of the
// local `.ci/run` of 2026-11-26 16:21:40, in the rollback under
// kube-proxy: the ClientIP-affinity loop dialled 10.96.118.68:80 from port
// 50802, and IPVS sent the SYN to pod-a (conntrack moving it to port 23010
// on the backend's side). pod-a's SYN-ACKs left the node from
// 10.96.233.254:80: IPVS's table still held a closed connection of the
// same client port to that address through pod-a (`CLOSE`, 9 s left, in
// /proc/net/ip_vs_conn), whose SYN had been captured before the verdict's
// window. The client reset every stray SYN-ACK and its dial timed out.
// With the earlier SYNs the verdict is IPVS's reply matching; without
// them, the run's own "no verdict". The window's segments are the run's;
// the older connection's two are made up (its SYN was not printed).
func TestFlowVerdictIPVSReplyMatchOlderConnection(t *testing.T) {
	base := time.Date(2026, 11, 26, 16, 21, 40, 0, time.UTC)
	cl, vip, other, be := "10.244.0.4:50802", "10.96.118.68:80", "10.96.233.254:80", "10.244.0.2:8080"
	segs := replay(base, time.Microsecond, []capturedSegment{
		{715968, "veth4", false, cl, vip, tcpSYN, 176108992, 0, 0},
		{716007, "veth2", true, "10.244.0.4:23010", be, tcpSYN, 176108992, 0, 0},
		{716030, "veth2", false, be, "10.244.0.4:23010", tcpSYN | tcpACK, 1001661279, 176108993, 0},
		{716051, "veth4", true, other, cl, tcpSYN | tcpACK, 1001661279, 176108993, 0},
		{716073, "veth4", false, cl, other, tcpRST, 176108993, 0, 0},
		{716102, "veth2", true, "10.244.0.4:58834", be, tcpRST, 176108993, 0, 0},
		{1699152, "veth4", false, cl, vip, tcpSYN, 176108992, 0, 0},
		{1699172, "veth2", true, "10.244.0.4:23010", be, tcpSYN, 176108992, 0, 0},
		{1699184, "veth2", false, be, "10.244.0.4:23010", tcpSYN | tcpACK, 1001661279, 176108993, 0},
		{1699198, "veth4", true, other, cl, tcpSYN | tcpACK, 1001661279, 176108993, 0},
	})
	earlier := replay(base.Add(-time.Minute), time.Microsecond, []capturedSegment{
		{100, "veth4", false, cl, other, tcpSYN, 918273645, 0, 0},
		{130, "veth2", true, "10.244.0.4:58834", be, tcpSYN, 918273645, 0, 0},
	})
	deadline := base.Add(3650 * time.Millisecond)
	client, remote := netip.MustParseAddrPort(cl), netip.MustParseAddrPort(vip)
	if v := flowVerdict(segs, earlier, client, remote, deadline); v.blame != blameIPVSReplyMatch || !strings.Contains(v.why, "from 10.96.233.254:80, not from 10.96.118.68:80") {
		t.Errorf("with the earlier SYNs: flowVerdict = %+v, want blameIPVSReplyMatch naming both addresses", v)
	}
	if v := flowVerdict(segs, nil, client, remote, deadline); v.excused() || !strings.Contains(v.why, "no connection of the client's port to 10.96.233.254:80") {
		t.Errorf("without them: flowVerdict = %+v, want the run's own verdict (no verdict, counted)", v)
	}
	// An older connection of the port to that address through another
	// backend is no excuse.
	elsewhere := slices.Clone(earlier)
	elsewhere[1].dst = netip.MustParseAddrPort("10.244.0.3:8080")
	if v := flowVerdict(segs, elsewhere, client, remote, deadline); v.excused() {
		t.Errorf("an older connection through another backend: flowVerdict = %+v, want it counted", v)
	}
}

// TestFlowVerdictIPVSReplyMatch is the failure of a rollback run under
// kube-proxy (2026-11-25 23:27:40, cycle 3 of TAKEOVER_CYCLES=3): the
// client pod's request A from port 38208 to 10.96.176.26:80 went to pod-b;
// 263 ms later, while A waited for its answer, request B of another loop
// took the same source port to 10.96.68.4:80 and IPVS sent it to pod-b
// too (conntrack moved B's port to 48161 on the backend's side, its reply
// tuple being A's). pod-b's answer to A then left the node from
// 10.96.68.4:80: IPVS found B's connection for it. The client's socket of
// A never saw an answer; B's reset the strays.
func TestFlowVerdictIPVSReplyMatch(t *testing.T) {
	base := time.Date(2026, 11, 25, 23, 27, 40, 0, time.UTC)
	cl, vipA, vipB, be := "10.244.0.4:38208", "10.96.176.26:80", "10.96.68.4:80", "10.244.0.2:8080"
	segs := replay(base, time.Microsecond, []capturedSegment{
		{275526, "veth4", false, cl, vipA, tcpSYN, 1440453278, 0, 0},
		{275547, "veth2", true, cl, be, tcpSYN, 1440453278, 0, 0},
		{275562, "veth2", false, be, cl, tcpSYN | tcpACK, 2051248634, 1440453279, 0},
		{275577, "veth4", true, vipA, cl, tcpSYN | tcpACK, 2051248634, 1440453279, 0},
		{275594, "veth4", false, cl, vipA, tcpACK, 1440453279, 2051248635, 0},
		{275608, "veth2", true, cl, be, tcpACK, 1440453279, 2051248635, 0},
		// B, same client port, another Service, the same real server.
		{538512, "veth4", false, cl, vipB, tcpSYN, 307649706, 0, 0},
		{538600, "veth2", true, "10.244.0.4:48161", be, tcpSYN, 307649706, 0, 0},
		{538605, "veth2", false, be, "10.244.0.4:48161", tcpSYN | tcpACK, 3391302365, 307649707, 0},
		{538615, "veth4", true, vipB, cl, tcpSYN | tcpACK, 3391302365, 307649707, 0},
		// A's answer, forwarded from B's address.
		{538761, "veth2", false, be, cl, tcpACK | 8, 2051248635, 1440453279, 17},
		{538789, "veth4", true, vipB, cl, tcpACK | 8, 2051248635, 1440453279, 17},
		{538814, "veth4", false, cl, vipB, tcpACK, 307649707, 3391302366, 0},
	})
	v := flowVerdict(segs, nil, netip.MustParseAddrPort(cl), netip.MustParseAddrPort(vipA), base.Add(3231*time.Millisecond))
	if v.blame != blameIPVSReplyMatch || !strings.Contains(v.why, "from 10.96.68.4:80, not from 10.96.176.26:80") {
		t.Errorf("flowVerdict = %+v, want blameIPVSReplyMatch naming both addresses", v)
	}
}

// dialFlow is the dial the first version of TestKernelDialReplyMatch made
// time out in the VM (2026-11-26 02:30:09, the node's capture as it logged
// it; pod-b's segments delayed 300 ms by netem, B started 50 ms after A,
// no nat rule: the current version holds pod-b's SYN-ACKs until B's SYN
// is through instead, and lets conntrack move B's port): the client pod's
// port 40312 dials A to 10.96.170.131:80, and B from the same port to
// 10.96.26.104:80, both sent by IPVS to pod-b (10.244.0.1:8080). pod-b's SYN-ACK to A leaves the
// node from 10.96.26.104:80; the client's socket B resets it (an
// unacceptable ACK in SYN-SENT), B connects on its second SYN, and A's
// retransmitted SYN finds the backend's tuple taken by B: A times out.
func dialFlow() (segs []packet, client, remote netip.AddrPort, deadline time.Time) {
	base := time.Date(2026, 11, 26, 2, 30, 9, 0, time.UTC)
	cl, vipA, vipB, be := "10.244.0.2:40312", "10.96.170.131:80", "10.96.26.104:80", "10.244.0.1:8080"
	segs = replay(base, time.Microsecond, []capturedSegment{
		{638702, "veth2", false, cl, vipA, tcpSYN, 103999236, 0, 0},
		{677722, "veth2", false, cl, vipB, tcpSYN, 1858136593, 0, 0},
		{960300, "veth1", true, cl, be, tcpSYN, 103999236, 0, 0},
		{960365, "veth1", true, cl, be, tcpSYN, 1858136593, 0, 0},
		{1256460, "veth1", false, be, cl, tcpSYN | tcpACK, 997233535, 103999237, 0},
		{1256544, "veth2", true, vipB, cl, tcpSYN | tcpACK, 997233535, 103999237, 0},
		{1256558, "veth2", false, cl, vipB, tcpRST, 103999237, 0, 0},
		{1256569, "veth1", true, cl, be, tcpRST, 103999237, 0, 0},
		{1265130, "veth1", false, be, cl, tcpACK, 997233536, 103999237, 0},
		{1265212, "veth2", true, vipB, cl, tcpACK, 997233536, 103999237, 0},
		{1265244, "veth2", false, cl, vipB, tcpRST, 103999237, 0, 0},
		{1265272, "veth1", true, cl, be, tcpRST, 103999237, 0, 0},
		{1275629, "veth2", false, cl, vipB, tcpSYN, 1858136593, 0, 0},
		{1275714, "veth1", true, cl, be, tcpSYN, 1858136593, 0, 0},
		{1591689, "veth1", false, be, cl, tcpSYN | tcpACK, 1002310310, 1858136594, 0},
		{1591765, "veth2", true, vipB, cl, tcpSYN | tcpACK, 1002310310, 1858136594, 0},
		{1591785, "veth2", false, cl, vipB, tcpACK, 1858136594, 1002310311, 0},
		{1591803, "veth1", true, cl, be, tcpACK, 1858136594, 1002310311, 0},
		{1604505, "veth2", false, cl, vipB, tcpFIN | tcpACK, 1858136594, 1002310311, 0},
		{1604570, "veth1", true, cl, be, tcpFIN | tcpACK, 1858136594, 1002310311, 0},
		{1669391, "veth2", false, cl, vipA, tcpSYN, 103999236, 0, 0},
		{1669482, "veth1", true, cl, be, tcpSYN, 103999236, 0, 0},
		{1911539, "veth1", false, be, cl, 8 | tcpACK, 1002310311, 1858136595, 17},
		{1911617, "veth2", true, vipB, cl, 8 | tcpACK, 1002310311, 1858136595, 17},
		{1915776, "veth2", false, cl, vipB, tcpRST, 1858136595, 0, 0},
		{1915884, "veth1", true, cl, be, tcpRST, 1858136595, 0, 0},
		{1915917, "veth1", false, be, cl, tcpFIN | tcpACK, 1002310328, 1858136595, 0},
		{1922686, "veth2", true, vipB, cl, tcpFIN | tcpACK, 1002310328, 1858136595, 0},
		{1922798, "veth2", false, cl, vipB, tcpRST, 1858136595, 0, 0},
		{1922812, "veth1", true, cl, be, tcpRST, 1858136595, 0, 0},
		{1970374, "veth1", false, be, cl, tcpACK, 1002310329, 1858136595, 0},
		{1970429, "veth2", true, vipB, cl, tcpACK, 1002310329, 1858136595, 0},
		{1970444, "veth2", false, cl, vipB, tcpRST, 1858136595, 0, 0},
		{1970458, "veth1", true, cl, be, tcpRST, 1858136595, 0, 0},
	})
	return segs, netip.MustParseAddrPort(cl), netip.MustParseAddrPort(vipA), base.Add(3100 * time.Millisecond)
}

// TestFlowVerdictDial judges dial timeouts (a SYN, no handshake) on the
// capture of TestKernelDialReplyMatch and variants of it: IPVS's reply
// matching excused only when the capture shows the other connection; a
// SYN dropped in the node, or unanswered, counted.
func TestFlowVerdictDial(t *testing.T) {
	segs, client, remote, deadline := dialFlow()
	keep := func(drop func(packet) bool) []packet {
		var out []packet
		for _, p := range segs {
			if !drop(p) {
				out = append(out, p)
			}
		}
		return out
	}
	web := netip.MustParseAddrPort("10.96.26.104:80")
	const synA, synB = 103999236, 1858136593
	for _, tc := range []struct {
		name  string
		segs  []packet
		blame blame
		why   string
	}{
		{"the SYN-ACK forwarded from the other dial's Service: IPVS's reply matching", segs, blameIPVSReplyMatch,
			"the backend's SYN-ACK to 10.244.0.2:40312 from 10.96.26.104:80, not from 10.96.170.131:80, after the client's connection from the same port to 10.96.26.104:80 went to the same backend 10.244.0.1:8080"},
		{"the same without the other dial's SYNs in the capture: no proof", keep(func(p packet) bool { return p.seq == synB && p.flags == tcpSYN }), blameProxies,
			"no connection of the client's port to 10.96.26.104:80 through the same backend was captured"},
		{"the other dial sent to another backend: no proof", otherBackend(segs), blameProxies,
			"no connection of the client's port"},
		{"the SYNs not forwarded: dropped in the node", keep(func(p packet) bool { return p.seq == synA && p.out }), blameProxies,
			"dropped in the node namespace"},
		{"the retransmitted SYN not forwarded: dropped in the node", keep(func(p packet) bool { return p.seq == synA && p.out && p.at.After(deadline.Add(-2*time.Second)) }), blameProxies,
			"[S] seq 103999236 ack 0 len 0 and forwarded no copy: dropped in the node namespace"},
		{"the SYNs forwarded, no SYN-ACK", keep(func(p packet) bool { return p.seq != synA }), blameProxies,
			"forwarded the client's 2 SYNs to 10.244.0.1:8080 and received no SYN-ACK before the client's deadline"},
		{"only the client's SYN captured, not received by the node", keep(func(p packet) bool { return p.dst == remote && !p.out }), blameProxies,
			"SYN not captured"},
	} {
		v := flowVerdict(tc.segs, nil, client, remote, deadline)
		if v.blame != tc.blame || !strings.Contains(v.why, tc.why) {
			t.Errorf("%s: flowVerdict = %+v, want blame %v and %q", tc.name, v, tc.blame, tc.why)
		}
	}
	// The SYN-ACK forwarded from the dialled address: the handshake and
	// the answer are judged as for a request (TestFlowVerdict).
	var fixed []packet
	for _, p := range segs {
		if p.src == web && p.dst == client && p.seq == 997233535 {
			p.src = remote
		}
		fixed = append(fixed, p)
	}
	if v := flowVerdict(fixed, nil, client, remote, deadline); v.blame != blameProxies || !strings.Contains(v.why, "the client's handshake never reached the backend") {
		t.Errorf("SYN-ACKs forwarded from the dialled address, never acknowledged: flowVerdict = %+v, want the failure counted", v)
	}
}

// otherBackend is segs with the other dial's SYNs forwarded to another pod.
func otherBackend(segs []packet) []packet {
	out := slices.Clone(segs)
	for i, p := range out {
		if p.seq == 1858136593 && p.out && p.flags == tcpSYN {
			out[i].dst = netip.MustParseAddrPort("10.244.0.9:8080")
		}
	}
	return out
}

// TestFlowVerdictBridgePort: the rollback's failed LoadBalancer request of
// 2026-11-26 10:23:23 (make test-takeover, under kube-proxy after the
// hand-back). The LAN client's segments are captured on its bridge port
// cveth1 and again on the bridge eth0: one arrival, whose forwarded copy
// the port's capture claims, so the bridge's must not read as a drop. The
// same client port then dialled the externalIP 203.0.113.10:80, whose
// connection went to the same backend pod-a (its masqueraded SYN to
// 10.244.0.1:8080 and pod-a's SYN-ACK are not in the run's printed
// excerpt, which keeps the failed flow's segments only; conntrack showed
// that flow's reply from 10.244.0.1:8080 to 169.254.1.1:52206), and
// pod-a's answer to the LoadBalancer connection left from 203.0.113.10:80:
// IPVS's reply matching. Before the bridge-port pairing the verdict was
// "forwarded no copy: dropped in the node namespace", not excused.
func TestFlowVerdictBridgePort(t *testing.T) {
	base := time.Date(2026, 11, 26, 10, 23, 23, 0, time.UTC)
	cl, lb, eip := "198.51.100.11:49702", "203.0.113.20:80", "203.0.113.10:80"
	a1, a2, be := "169.254.1.1:56153", "169.254.1.1:52206", "10.244.0.1:8080"
	const ack, psh, fin = tcpACK, 8, 1
	segs := replay(base, time.Microsecond, []capturedSegment{
		{187759, "cveth1", false, cl, lb, tcpSYN, 935115865, 0, 0},
		{187792, "eth0", false, cl, lb, tcpSYN, 935115865, 0, 0},
		{187806, "veth1", true, a1, be, tcpSYN, 935115865, 0, 0},
		{187817, "veth1", false, be, a1, tcpSYN | ack, 330962314, 935115866, 0},
		{187827, "eth0", true, lb, cl, tcpSYN | ack, 330962314, 935115866, 0},
		{187839, "cveth1", true, lb, cl, tcpSYN | ack, 330962314, 935115866, 0},
		{187849, "cveth1", false, cl, lb, ack, 935115866, 330962315, 0},
		{187858, "eth0", false, cl, lb, ack, 935115866, 330962315, 0},
		{187869, "veth1", true, a1, be, ack, 935115866, 330962315, 0},
		{274475, "cveth1", false, cl, eip, tcpSYN, 3054524355, 0, 0},
		{274485, "eth0", false, cl, eip, tcpSYN, 3054524355, 0, 0},
		{274495, "veth1", true, a2, be, tcpSYN, 3054524355, 0, 0},                 // inferred (conntrack)
		{274505, "veth1", false, be, a2, tcpSYN | ack, 3049702376, 3054524356, 0}, // inferred
		{274516, "eth0", true, eip, cl, tcpSYN | ack, 3049702376, 3054524356, 0},
		{274527, "cveth1", true, eip, cl, tcpSYN | ack, 3049702376, 3054524356, 0},
		{277892, "veth1", false, be, a1, psh | ack, 330962315, 935115866, 18},
		{277903, "eth0", true, eip, cl, psh | ack, 330962315, 935115866, 18},
		{277915, "cveth1", true, eip, cl, psh | ack, 330962315, 935115866, 18},
		{278118, "veth1", false, be, a1, fin | ack, 330962333, 935115866, 0},
		{278130, "eth0", true, eip, cl, fin | ack, 330962333, 935115866, 0},
		{278141, "cveth1", true, eip, cl, fin | ack, 330962333, 935115866, 0},
	})
	deadline := base.Add(3193 * time.Millisecond)
	v := flowVerdict(segs, nil, netip.MustParseAddrPort(cl), netip.MustParseAddrPort(lb), deadline)
	if v.blame != blameIPVSReplyMatch || !strings.Contains(v.why, "from 203.0.113.10:80, not from 203.0.113.20:80") {
		t.Errorf("flowVerdict = %+v, want IPVS's reply matching: the answer from 203.0.113.10:80", v)
	}
	// Without the other connection's SYN to pod-a, no proof: it counts.
	var alone []packet
	for _, p := range segs {
		if p.seq != 3054524355 || p.flags != tcpSYN || !p.out {
			alone = append(alone, p)
		}
	}
	if v := flowVerdict(alone, nil, netip.MustParseAddrPort(cl), netip.MustParseAddrPort(lb), deadline); v.excused() {
		t.Errorf("without the other connection's forwarded SYN: flowVerdict = %+v, want not excused", v)
	}
}
