//go:build kernel

package takeover

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// ipvsEntry is one line of /proc/net/ip_vs: a virtual server ("TCP
// 10.96.0.10:80") or a real server of one ("TCP 10.96.0.10:80 ->
// 10.244.0.1:8080"), and its attributes (scheduler and flags; forwarding
// method and weight).
type ipvsEntry struct{ key, attrs string }

// readIPVS reads /proc/net/ip_vs of the calling thread's network namespace
// (/proc/thread-self/net: /proc/net would be the main thread's) in the
// kernel's own text, independent of any netlink code: every virtual and
// real server with its attributes, as two reads in a row agree.
//
// One read is not a snapshot: the kernel produces the file a page per
// read(2) and resumes the next page by position, so a server deleted
// before that position while the file is read (the proxy removing
// kube-proxy's link-local NodePorts) shifts the rest, and one server
// still in the table is skipped. A monitor trusting one read saw TCP
// 203.0.113.10:80 "deleted and added again" within 100 ms while the proxy
// had not touched it (its sync counted only the 7 link-local deletions).
func readIPVS() (map[string]string, error) {
	prev, err := readIPVSOnce()
	if err != nil {
		return nil, err
	}
	for range 50 {
		cur, err := readIPVSOnce()
		if err != nil {
			return nil, err
		}
		if maps.Equal(prev, cur) {
			return cur, nil
		}
		prev = cur
	}
	return nil, fmt.Errorf("/proc/net/ip_vs changed at each of 50 reads in a row")
}

// readIPVSOnce is one pass over /proc/net/ip_vs (several read(2)s).
func readIPVSOnce() (map[string]string, error) {
	f, err := os.Open("/proc/thread-self/net/ip_vs")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	vs := ""
	for n := 0; sc.Scan(); n++ {
		line := sc.Text()
		if n < 3 {
			continue // version and the two header lines
		}
		fs := strings.Fields(line)
		switch {
		case len(fs) >= 5 && fs[0] == "->":
			out[vs+" -> "+procAddr(fs[1])] = fs[2] + " " + fs[3]
		case len(fs) >= 3:
			vs = fs[0] + " " + procAddr(fs[1])
			out[vs] = strings.Join(fs[2:], " ")
		default:
			return nil, fmt.Errorf("/proc/net/ip_vs: unexpected line %q", line)
		}
	}
	return out, sc.Err()
}

// procAddr turns the kernel's hex "0A600001:0050" or
// "[2001:0db8:...:0001]:0050" into "10.96.0.1:80" / "[2001:db8::1]:80";
// anything else (FWM marks) is kept.
func procAddr(s string) string {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s
	}
	host, ph := s[:i], s[i+1:]
	port, err := strconv.ParseUint(ph, 16, 16)
	if err != nil {
		return s
	}
	var a netip.Addr
	if strings.HasPrefix(host, "[") {
		a, err = netip.ParseAddr(strings.Trim(host, "[]"))
	} else {
		var b []byte
		if b, err = hex.DecodeString(host); err == nil && len(b) == 4 {
			a = netip.AddrFrom4([4]byte(b))
		} else if err == nil {
			err = fmt.Errorf("%d bytes", len(b))
		}
	}
	if err != nil {
		return s
	}
	return netip.AddrPortFrom(a, uint16(port)).String()
}

// ipvsMonitor polls the IPVS table every interval and records every
// change between two polls: entries added, deleted and edited.
type ipvsMonitor struct {
	mu      sync.Mutex
	events  []string
	times   []time.Time // of each event
	deleted map[string]bool
	readd   []string
	polls   int
	err     error
	stop    chan struct{}
	done    chan struct{}
}

func startIPVSMonitor(t *testing.T, ns *ktest.NS, every time.Duration) *ipvsMonitor {
	t.Helper()
	m := &ipvsMonitor{deleted: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	first := make(chan error, 1)
	go func() {
		defer close(m.done)
		err := ns.Do(func() error {
			prev, err := readIPVS()
			first <- err
			if err != nil {
				return err
			}
			for {
				select {
				case <-m.stop:
					return nil
				case <-time.After(every):
				}
				cur, err := readIPVS()
				if err != nil {
					return err
				}
				m.diff(prev, cur)
				prev = cur
			}
		})
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
	}()
	if err := <-first; err != nil {
		t.Fatalf("IPVS monitor: %v", err)
	}
	return m
}

func (m *ipvsMonitor) diff(prev, cur map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.polls++
	now := time.Now()
	at := now.Format("15:04:05.000")
	defer func() {
		for len(m.times) < len(m.events) {
			m.times = append(m.times, now)
		}
	}()
	for _, k := range slices.Sorted(maps.Keys(cur)) {
		old, had := prev[k]
		switch {
		case !had:
			if m.deleted[k] {
				m.readd = append(m.readd, k)
			}
			m.events = append(m.events, fmt.Sprintf("%s add %s %s", at, k, cur[k]))
		case old != cur[k]:
			m.events = append(m.events, fmt.Sprintf("%s edit %s: %s -> %s", at, k, old, cur[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(prev)) {
		if _, ok := cur[k]; !ok {
			m.deleted[k] = true
			m.events = append(m.events, fmt.Sprintf("%s del %s %s", at, k, prev[k]))
		}
	}
}

// between returns the changes seen from from to to.
func (m *ipvsMonitor) between(from, to time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for i, at := range m.times {
		if !at.Before(from) && !at.After(to) {
			out = append(out, m.events[i])
		}
	}
	return out
}

// end stops the polling and returns the changes seen, the entries deleted
// and later added again, and how many polls ran.
func (m *ipvsMonitor) end() (events, readded []string, polls int, err error) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events, m.readd, m.polls, m.err
}

// addrMonitor is `ip -n NODE monitor address dev kube-ipvs0`: every
// address added to or deleted from kube-ipvs0, as netlink reports it.
type addrMonitor struct {
	cmd *exec.Cmd
	out *strings.Builder
	mu  *sync.Mutex
}

type lockedBuilder struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedBuilder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func startAddrMonitor(t *testing.T, ns *ktest.NS) *addrMonitor {
	t.Helper()
	m := &addrMonitor{out: &strings.Builder{}, mu: &sync.Mutex{}}
	m.cmd = exec.Command("ip", "-n", ns.Name, "-o", "monitor", "address", "dev", "kube-ipvs0")
	m.cmd.Stdout = lockedBuilder{m.mu, m.out}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.cmd.Process.Kill(); _ = m.cmd.Wait() })
	return m
}

// end stops the monitor and returns the events (one line each) and the
// addresses deleted and added again.
func (m *addrMonitor) end() (events, readded []string) {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	deleted := map[string]bool{}
	for _, l := range strings.Split(m.out.String(), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		events = append(events, strings.Join(strings.Fields(l), " "))
		fs := strings.Fields(l)
		addr := ""
		for i, f := range fs {
			if (f == "inet" || f == "inet6") && i+1 < len(fs) {
				addr = fs[i+1]
			}
		}
		if strings.HasPrefix(l, "Deleted") {
			deleted[addr] = true
		} else if deleted[addr] {
			readded = append(readded, addr)
		}
	}
	return events, readded
}

// conntrackStats sums the node namespace's conntrack statistics over its
// CPUs (/proc/net/stat/nf_conntrack: one header line, then one line of
// hexadecimal counters per CPU), by column name: "insert_failed" and
// "drop" count packets whose new conntrack entry clashed with one in the
// table, "clashres" clashes resolved. nil when the file cannot be read.
func (b *bed) conntrackStats() map[string]uint64 {
	out, err := b.node.Exec("cat", "/proc/net/stat/nf_conntrack")
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return nil
	}
	names := strings.Fields(lines[0])
	sums := map[string]uint64{}
	for _, l := range lines[1:] {
		for i, f := range strings.Fields(l) {
			if v, err := strconv.ParseUint(f, 16, 64); err == nil && i < len(names) {
				sums[names[i]] += v
			}
		}
	}
	return sums
}

// conntrackDelta renders what grew between two conntrackStats of the
// clash counters.
func conntrackDelta(before, after map[string]uint64) string {
	if before == nil || after == nil {
		return "conntrack statistics unreadable"
	}
	var parts []string
	for _, k := range []string{"insert_failed", "drop", "clashres"} {
		parts = append(parts, fmt.Sprintf("%s +%d", k, after[k]-before[k]))
	}
	return "node conntrack: " + strings.Join(parts, ", ")
}
