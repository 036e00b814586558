package takeover

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The segments of a ClusterIP request from the client pod (10.244.0.4) to
// pod-b through 10.96.26.104:80, as the node namespace captured them in a
// takeover run on a starved VM (2026-11-25 22:42:59): veth4 is the
// client's side, veth2 the backend's.
func capturedFlow(t *testing.T) (segs []packet, client netip.AddrPort) {
	t.Helper()
	base := time.Date(2026, 11, 25, 22, 42, 59, 0, time.UTC)
	cl, vip, be := "10.244.0.4:44178", "10.96.26.104:80", "10.244.0.2:8080"
	for _, s := range []struct {
		ms       int
		ifName   string
		out      bool
		src, dst string
		flags    uint8
		seq, ack uint32
		payload  int
	}{
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
	} {
		segs = append(segs, packet{at: base.Add(time.Duration(s.ms) * time.Millisecond), ifName: s.ifName, out: s.out,
			src: netip.MustParseAddrPort(s.src), dst: netip.MustParseAddrPort(s.dst), flags: s.flags, seq: s.seq, ack: s.ack, payload: s.payload})
	}
	return segs, netip.MustParseAddrPort(cl)
}

func TestFlowVerdict(t *testing.T) {
	segs, client := capturedFlow(t)
	answer := segs[6].at
	without := func(i int) []packet {
		out := append([]packet{}, segs[:i]...)
		return append(out, segs[i+1:]...)
	}
	for _, tc := range []struct {
		name     string
		segs     []packet
		deadline time.Time
		bed      bool
		why      string
	}{
		{"the answer reached the node after the deadline: the backend was late", segs, answer.Add(-time.Millisecond), true, "after the client's deadline"},
		{"the answer forwarded before the deadline: the client did not read it", segs, answer.Add(time.Second), true, "the client did not read it"},
		{"the answer received and not forwarded: the node dropped it", without(7), answer.Add(time.Second), false, "dropped in the node namespace"},
		{"the client's handshake ACK not forwarded: the node dropped it", without(5), answer.Add(time.Second), false, "dropped in the node namespace"},
		{"the SYN-ACK not forwarded: the node dropped it", without(3), answer.Add(time.Second), false, "dropped in the node namespace"},
		{"no answer at all, the handshake forwarded: the backend was late", segs[:6], answer.Add(time.Second), true, "sent no answer"},
		{"no answer, the handshake ACK not captured on the backend's side", append(segs[:5:5], segs[6:]...)[:5], answer.Add(time.Second), false, "dropped in the node namespace"},
		{"nothing captured", nil, answer, false, "no segment"},
	} {
		v := flowVerdict(tc.segs, client, tc.deadline)
		if v.bed != tc.bed || !strings.Contains(v.why, tc.why) {
			t.Errorf("%s: flowVerdict = %+v, want bed %v and %q", tc.name, v, tc.bed, tc.why)
		}
	}
}
