//go:build kernel

package recovery

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestCleanupDrainsNodeConnections is the way out's cleanup with kube-proxy
// serving (a DNAT in nat OUTPUT stands for its iptables-mode rule): a
// connection the node opened to a ClusterIP while kube-ipvs0 held it has
// the ClusterIP as its source. With the drain, a connection opened once
// the drain started takes the node's address, the old one keeps working
// until its client closes it, and kube-ipvs0 goes then, before the drain's
// timeout; without it (the control) the old connection breaks when
// kube-ipvs0 goes.
func TestCleanupDrainsNodeConnections(t *testing.T) {
	for _, c := range []struct {
		name  string
		drain time.Duration
	}{{"drain", 20 * time.Second}, {"no-drain", -1}} {
		t.Run(c.name, func(t *testing.T) {
			a := ktest.NewNode(t)
			pod := a.AddPod(t, "pod-a", "10.244.0.2")
			// A LAN client gives the node its address (ktest.NodeIPv4),
			// the source the drain gives new connections.
			a.AddClient(t, "client", "198.51.100.20")
			// An echo: every line back.
			serveTCP(t, pod.NS, 9000, func(c net.Conn) { _, _ = io.Copy(c, c) })
			a.RunInput(t, fmt.Sprintf("link add kube-ipvs0 type dummy\naddr add %s/32 dev kube-ipvs0\n", clusterVIP), "ip", "-batch", "-")
			a.Run(t, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", clusterVIP, "-p", "tcp", "--dport", "80",
				"-j", "DNAT", "--to-destination", "10.244.0.2:9000")

			old := dial(t, a)
			defer old.Close()
			if src := localAddr(old); src.String() != clusterVIP {
				t.Fatalf("a connection to %s while kube-ipvs0 holds it has source %s, want %s itself", clusterVIP, src, clusterVIP)
			}
			roundTrip(t, old, "before")

			type result struct {
				res *CleanupResult
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				var r result
				r.err = a.Do(func() error {
					var err error
					r.res, err = Cleanup(CleanupOptions{KubeProxyMode: "iptables", Drain: c.drain})
					return err
				})
				done <- r
			}()

			if c.drain < 0 {
				r := <-done
				if r.err != nil || !r.res.DeviceDeleted {
					t.Fatalf("cleanup: %+v, %v", r.res, r.err)
				}
				old.SetDeadline(time.Now().Add(3 * time.Second))
				if _, err := old.Write([]byte("after\n")); err == nil {
					if line, err := bufio.NewReader(old).ReadString('\n'); err == nil {
						t.Fatalf("without the drain the connection from %s still answered %q: the test cannot tell the drain's effect", clusterVIP, line)
					}
				}
				return
			}

			// The drain has started once the local route names the node's
			// address as source.
			want := "local " + clusterVIP + " dev kube-ipvs0 proto kernel scope host src " + ktest.NodeIPv4.String()
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(a.Run(t, "ip", "route", "show", "table", "local"), want); {
				if time.Now().After(deadline) {
					t.Fatalf("local route of %s never got %q:\n%s", clusterVIP, want, a.Run(t, "ip", "route", "show", "table", "local"))
				}
				time.Sleep(50 * time.Millisecond)
			}
			fresh := dial(t, a)
			if src := localAddr(fresh); src != ktest.NodeIPv4 {
				t.Errorf("a connection opened during the drain has source %s, want the node's %s", src, ktest.NodeIPv4)
			}
			roundTrip(t, fresh, "fresh")
			fresh.Close()
			roundTrip(t, old, "during the drain")
			select {
			case r := <-done:
				t.Fatalf("cleanup ended while a connection from %s was open: %+v, %v", clusterVIP, r.res, r.err)
			default:
			}
			old.Close()
			r := <-done
			took := time.Since(start)
			if r.err != nil || !r.res.DeviceDeleted || r.res.StillOpen != 0 {
				t.Fatalf("cleanup: %+v, %v", r.res, r.err)
			}
			if took >= c.drain {
				t.Errorf("cleanup took %v: it waited out the drain (%v) after the connection closed", took, c.drain)
			}
			t.Logf("cleanup took %v with one connection from %s open until the test closed it", took.Round(time.Millisecond), clusterVIP)
		})
	}
}

// dial opens a TCP connection from node a to clusterVIP:80.
func dial(t *testing.T, a *ktest.Node) net.Conn {
	t.Helper()
	var c net.Conn
	if err := a.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", clusterVIP+":80", 3*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func localAddr(c net.Conn) netip.Addr {
	return c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
}

// roundTrip sends a line on c and wants it back within 3 s.
func roundTrip(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(what + "\n")); err != nil {
		t.Fatalf("%s: write from %s: %v", what, localAddr(c), err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != what+"\n" {
		t.Fatalf("%s: echo through %s from %s: %q, %v", what, clusterVIP, localAddr(c), line, err)
	}
}
