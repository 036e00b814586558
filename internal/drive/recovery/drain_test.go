package recovery

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap"
)

// Each family's addresses get the node's first usable address of that
// family; loopback and link-local ones are skipped, and a family the node
// has no address in is left out.
func TestRetireSources(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	got := retireSources(
		[]netip.Prefix{p("10.96.0.10/32"), p("10.96.0.11/32"), p("fd00:96::10/128")},
		[]netip.Addr{a("127.0.0.1"), a("169.254.1.1"), a("192.0.2.10"), a("192.0.2.11")})
	want := map[netip.Prefix]netip.Addr{p("10.96.0.10/32"): a("192.0.2.10"), p("10.96.0.11/32"): a("192.0.2.10")}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: source %s, want %s", k, got[k], v)
		}
	}
}

type fakeDrainer struct {
	retired map[netip.Prefix]netip.Addr
	open    []int // what each read says; the last repeats
	reads   int
	err     error
}

func (f *fakeDrainer) RetireSources(src map[netip.Prefix]netip.Addr) error {
	f.retired = src
	return f.err
}

func (f *fakeDrainer) OpenConnsFrom([]netip.Addr) (int, error) {
	n := f.open[min(f.reads, len(f.open)-1)]
	f.reads++
	return n, nil
}

// The wait ends as soon as no connection is open, or at the timeout with
// the count still open; sources are retired first, and a route that could
// not be changed is reported after the wait.
func TestDrainSources(t *testing.T) {
	node := &Node{Bound: []netip.Prefix{netip.MustParsePrefix("10.96.0.10/32")},
		LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}}
	f := &fakeDrainer{open: []int{2, 1, 0}}
	if n, err := drainSources(f, node, time.Minute, zap.NewNop()); n != 0 || err != nil || f.reads != 3 || len(f.retired) != 1 {
		t.Errorf("drained: %d open, %v, %d reads, retired %v; want 0, nil, 3, one", n, err, f.reads, f.retired)
	}
	f = &fakeDrainer{open: []int{1}}
	start := time.Now()
	if n, err := drainSources(f, node, 300*time.Millisecond, zap.NewNop()); n != 1 || err != nil || time.Since(start) < 300*time.Millisecond {
		t.Errorf("timed out: %d open, %v after %v; want 1, nil, at least 300ms", n, err, time.Since(start))
	}
	f = &fakeDrainer{open: []int{1, 0}, err: errors.New("no route")}
	if n, err := drainSources(f, node, time.Minute, zap.NewNop()); err == nil || n != 0 || f.reads != 2 {
		t.Errorf("retire failed: %d open, %v after %d reads; want 0, the error, after the wait's 2 reads", n, err, f.reads)
	}
	if n, err := drainSources(&fakeDrainer{open: []int{1}}, &Node{}, time.Minute, zap.NewNop()); n != 0 || err != nil {
		t.Errorf("nothing bound: %d, %v", n, err)
	}
}
