//go:build kernel

package takeover

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// A proxied request that fails with its connection established says
// nothing by itself about who dropped it. evidence is what the test keeps
// about each such failure, taken the moment it is seen: the flow's
// segments in the node namespace (where both proxies NAT it), its IPVS
// connection entries, its conntrack entries, the sockets at both ends,
// and what changed in IPVS and nftables in the seconds before.

// witness holds the bed's recorders for the phase under way.
type witness struct {
	b    *bed
	cap  *capture
	ipvs atomic.Pointer[ipvsMonitor]
	nft  *lineMonitor
	// hiccup returns the watchdog's oversleeps over hiccupAfter during a
	// span (set by each phase's traffic).
	hiccup atomic.Pointer[func(span) time.Duration]

	mu        sync.Mutex
	explained int
}

func (w *witness) hiccups(s span) time.Duration {
	if f := w.hiccup.Load(); f != nil {
		return (*f)(s)
	}
	return 0
}

// startTraffic starts a phase's traffic (see startTraffic) with its
// failures explained: explainMax of them again.
func (b *bed) startTraffic() *traffic {
	w := b.witness
	w.mu.Lock()
	w.explained = 0
	w.mu.Unlock()
	tr := startTraffic(b.t, b.loopTargets(), b.streamTargets(), b.controlTargets(), interval, w.explain)
	f := tr.oversleptDuring
	w.hiccup.Store(&f)
	return tr
}

// startWitness starts the packet capture and the nftables monitor in the
// node namespace for the rest of the test.
func (b *bed) startWitness() *witness {
	w := &witness{b: b, cap: startCapture(b.t, b.node.NS)}
	w.nft = startLineMonitor(b.t, b.node.NS, "nft", "monitor")
	return w
}

// summary says how much the capture saw since from: a capture that saw
// nothing proves nothing.
func (w *witness) summary(from time.Time) string {
	_, total := w.cap.since(from, func(packet) bool { return false })
	nft := len(w.nft.between(from, time.Now()))
	return fmt.Sprintf("packet capture (node namespace, every interface): %d TCP segments in the phase; nft monitor: %d lines\n", total, nft)
}

// ipvsLinger is how long before a failed request the capture is searched
// for an older connection of the same client port: IPVS keeps a closed
// TCP connection for its TIME_WAIT timeout, 2 min by default.
const ipvsLinger = 3 * time.Minute

// explainMax bounds the failures explained per phase: each costs a
// conntrack process, which a starved VM can ill afford when everything
// fails at once.
const explainMax = 8

// explain returns the evidence about one failed request and the capture's
// verdict on it (flowVerdict), or "" when the error
// names no local TCP endpoint (a UDP or SCTP request, a dial that sent no
// SYN) or explainMax failures were explained already. One runs at a time.
func (w *witness) explain(tg target, s span, err error) (string, verdict) {
	local, deadline, ok := failedEndpoint(err, s)
	if !ok {
		return "", verdict{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.explained >= explainMax {
		return "", verdict{}
	}
	w.explained++
	var sb strings.Builder
	fmt.Fprintf(&sb, "evidence for %s %s–%s from %s to %s: %v\n", tg.name, s.from.Format("15:04:05.000"), s.to.Format("15:04:05.000"), local, tg.addr, err)
	// The kernel's view now, while the entries of the flow still exist.
	port := fmt.Sprintf("%04X", local.Port())
	var conns []byte
	cerr := w.b.node.Do(func() error {
		var err error
		conns, err = os.ReadFile("/proc/thread-self/net/ip_vs_conn")
		return err
	})
	fmt.Fprintf(&sb, "  /proc/net/ip_vs_conn (%v), the flow's entries and the templates:\n", cerr)
	for _, l := range strings.Split(string(conns), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && (f[2] == port || f[2] == "0000") {
			fmt.Fprintf(&sb, "    %s\n", l)
		}
	}
	p := fmt.Sprint(local.Port())
	out, cerr := w.b.node.Exec("conntrack", "-L", "-p", "tcp", "--orig-port-src", p)
	fmt.Fprintf(&sb, "  conntrack -L -p tcp --orig-port-src %s (%v):\n%s", p, cerr, indent(out))
	// Let the segments after the timeout arrive (a late answer, a reset).
	time.Sleep(time.Second)
	segs, total := w.cap.since(s.from.Add(-time.Second), func(packet) bool { return true })
	// Drops since the request began, to the reads just made: those that
	// may have cost the flow a segment.
	drops := w.cap.dropsBetween(s.from.Add(-time.Second), time.Now().Add(dropEvery))
	remote, _ := netip.ParseAddrPort(tg.addr)
	// The SYNs of the minutes before, for a connection of the same client
	// port that IPVS may still hold (see replyMatch).
	earlier, _ := w.cap.since(s.from.Add(-ipvsLinger), func(p packet) bool {
		return p.at.Before(s.from.Add(-time.Second)) && p.flags&(tcpSYN|tcpACK) == tcpSYN
	})
	v := flowVerdict(segs, earlier, local, remote, deadline)
	if drops > 0 {
		v = verdict{why: fmt.Sprintf("the capture dropped %d segments: no verdict (%s)", drops, v.why)}
	}
	fmt.Fprintf(&sb, "  verdict: %s; excused: %v\n", v.why, v.excused())
	fmt.Fprintf(&sb, "  the test process' oversleeps over %v during the request (watchdog): %v in total\n", hiccupAfter, w.hiccups(s))
	// What the client's and the pods' own kernels dropped or rejected
	// (cumulative since the bed started).
	counters := func(name string, ns *ktest.NS) {
		d, err := tcpDrops(ns)
		if err != nil {
			d = err.Error()
		}
		fmt.Fprintf(&sb, "  TCP drop counters of %s: %s\n", name, d)
	}
	counters("the client "+tg.from.Name, tg.from)
	for _, p := range []*ktest.Pod{w.b.pods.a, w.b.pods.b, w.b.pods.c} {
		counters(p.Name, p.NS)
	}
	f := findFlow(segs, local, remote)
	var mine []packet
	for _, pk := range segs {
		if pk.involves(local) || f.syn && (f.fromClient(pk) || f.toClient(pk)) {
			mine = append(mine, pk)
		}
	}
	fmt.Fprintf(&sb, "  node namespace segments with the client's endpoint or of its flow, from 1 s before the request (%d of %d TCP segments captured):\n", len(mine), total)
	// The first and the last: the flow before the failure and what became
	// of the failed request's segments.
	for i, pk := range mine {
		if i == 20 && len(mine) > 40 {
			fmt.Fprintf(&sb, "    ... %d more\n", len(mine)-40)
		}
		if i < 20 || i >= len(mine)-20 {
			fmt.Fprintf(&sb, "    %s\n", pk)
		}
	}
	if m := w.ipvs.Load(); m != nil {
		ev := m.between(s.from.Add(-5*time.Second), s.to)
		fmt.Fprintf(&sb, "  IPVS changes in the 5 s before and during the request: %d\n", len(ev))
		for _, e := range firstN(ev, 20) {
			fmt.Fprintf(&sb, "    %s\n", e)
		}
	}
	nft := w.nft.between(s.from.Add(-5*time.Second), s.to)
	fmt.Fprintf(&sb, "  nftables changes (nft monitor) in the 5 s before and during the request: %d\n", len(nft))
	for _, e := range firstN(nft, 10) {
		fmt.Fprintf(&sb, "    %s\n", e)
	}
	return sb.String(), v
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (none)\n"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}

// failedEndpoint is the local endpoint of a failed TCP request and the
// client's deadline: a loop's requestError (a dial's too), or a stream's
// net error, whose deadline ended its span s.
func failedEndpoint(err error, s span) (netip.AddrPort, time.Time, bool) {
	var re *requestError
	if errors.As(err, &re) {
		return re.local, re.deadline, re.local.Port() != 0
	}
	local, ok := tcpSource(err)
	return local, s.to, ok
}

// tcpSource is the local address of a TCP request's error ("read tcp
// 10.244.0.4:43210->10.96.77.254:80: i/o timeout").
func tcpSource(err error) (netip.AddrPort, bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Source == nil {
		return netip.AddrPort{}, false
	}
	a, ok := op.Source.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := a.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// lineMonitor runs a command in a namespace and keeps its output lines
// with the time each was read.
type lineMonitor struct {
	mu    sync.Mutex
	lines []string
	times []time.Time
}

func startLineMonitor(t *testing.T, ns *ktest.NS, name string, args ...string) *lineMonitor {
	t.Helper()
	m := &lineMonitor{}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			m.mu.Lock()
			m.lines = append(m.lines, sc.Text())
			m.times = append(m.times, time.Now())
			m.mu.Unlock()
		}
	}()
	return m
}

// between returns the lines read from from to to, each with its time.
func (m *lineMonitor) between(from, to time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for i, at := range m.times {
		if !at.Before(from) && !at.After(to) {
			out = append(out, at.Format("15:04:05.000")+" "+m.lines[i])
		}
	}
	return out
}
