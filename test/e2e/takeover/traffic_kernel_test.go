//go:build kernel

package takeover

import (
	"bufio"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// listenEcho starts, in pod p, a TCP backend on streamPort that keeps each
// connection open and answers every line with "NAME LINE": the far end of
// the long-lived connections a takeover must not reset.
func listenEcho(t *testing.T, p *ktest.Pod) {
	t.Helper()
	var ln net.Listener
	if err := p.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", streamPort))
		return err
	}); err != nil {
		t.Fatalf("pod %s: echo listener: %v", p.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewScanner(c)
				for r.Scan() {
					if _, err := fmt.Fprintf(c, "%s %s\n", p.Name, r.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// target is one address a request loop or a stream exercises.
type target struct {
	name  string
	from  *ktest.NS
	proto ktest.Proto
	addr  string
	// want is the set of backends allowed to answer ("pod-a", "pod-b").
	want []string
}

// counter counts one target's requests.
type counter struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
}

func (c *counter) fail(msg string) {
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) < 5 {
		c.errs = append(c.errs, time.Now().Format("15:04:05.000")+" "+msg)
	}
}

// traffic runs the request loops and holds the long-lived connections
// until stop.
type traffic struct {
	loops   map[string]*counter
	streams map[string]*counter
	stop    chan struct{}
	wg      sync.WaitGroup
}

func answeredBy(out string, want []string) bool {
	name, _, _ := strings.Cut(out, " ")
	for _, w := range want {
		if name == w {
			return true
		}
	}
	return false
}

// startTraffic starts one request loop per loop target (a new connection,
// or datagram, per request, one every interval) and one long-lived
// connection per stream target sending a line every interval.
func startTraffic(t *testing.T, loops, streams []target, interval time.Duration) *traffic {
	t.Helper()
	tr := &traffic{loops: map[string]*counter{}, streams: map[string]*counter{}, stop: make(chan struct{})}
	for _, tg := range loops {
		c := &counter{}
		tr.loops[tg.name] = c
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				out, err := tg.from.Request(tg.proto, tg.addr)
				switch {
				case err != nil:
					c.fail(err.Error())
				case !answeredBy(out, tg.want):
					c.fail(fmt.Sprintf("%s answered %q, want one of %v", tg.addr, out, tg.want))
				default:
					c.ok.Add(1)
				}
				time.Sleep(interval)
			}
		}()
	}
	for _, tg := range streams {
		var conn net.Conn
		if err := tg.from.Do(func() error {
			var err error
			conn, err = net.DialTimeout("tcp", tg.addr, 5*time.Second)
			return err
		}); err != nil {
			t.Fatalf("stream %s: dial %s: %v", tg.name, tg.addr, err)
		}
		c := &counter{}
		tr.streams[tg.name] = c
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			defer conn.Close()
			r := bufio.NewReader(conn)
			backend := ""
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := fmt.Fprintf(conn, "ping %d\n", i); err != nil {
					c.fail(fmt.Sprintf("write: %v", err))
					return
				}
				line, err := r.ReadString('\n')
				if err != nil {
					// A reset or a timeout ends the connection: counted once.
					c.fail(fmt.Sprintf("read after %d answers: %v", c.ok.Load(), err))
					return
				}
				name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
				if backend == "" {
					backend = name
				}
				if name != backend || rest != fmt.Sprintf("ping %d", i) {
					c.fail(fmt.Sprintf("answer %q from %s, want %q from %s", line, name, fmt.Sprintf("ping %d", i), backend))
					return
				}
				c.ok.Add(1)
				time.Sleep(interval)
			}
		}()
	}
	return tr
}

// snapshot is the counts so far: requests served and failed, and a line
// per target.
func (tr *traffic) snapshot() (ok, failed int64, report string) {
	var b strings.Builder
	for _, set := range []struct {
		kind string
		m    map[string]*counter
	}{{"loop", tr.loops}, {"stream", tr.streams}} {
		for _, name := range slices.Sorted(maps.Keys(set.m)) {
			c := set.m[name]
			o, f := c.ok.Load(), c.failed.Load()
			ok += o
			failed += f
			fmt.Fprintf(&b, "  %s %-28s ok %5d failed %d", set.kind, name, o, f)
			c.mu.Lock()
			if len(c.errs) > 0 {
				fmt.Fprintf(&b, ": %s", strings.Join(c.errs, "; "))
			}
			c.mu.Unlock()
			b.WriteString("\n")
		}
	}
	return ok, failed, b.String()
}

// end stops every loop and closes the streams.
func (tr *traffic) end() {
	close(tr.stop)
	tr.wg.Wait()
}
