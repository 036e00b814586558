//go:build kernel

package applier

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// maglevDials is how many new connections each Service gets while one of
// its two real servers is quiesced: with mh-port hashing each one's source
// port, about half hash to the quiesced one, so without mh-fallback all of
// them landing on the other is a 1 in 2^maglevDials chance.
const maglevDials = 16

// maglevCluster is two dual-stack mh Services on the line servers: "maglev"
// with the scheduler's default flags, "maglev-port" with
// ipvs-proxy.io/scheduler-flags: mh-port (no fallback), the control that
// shows the bed reproduces the kernel's refusal.
func maglevCluster(podB bool) (model.Cluster, map[string][2]netip.Addr) {
	vips := map[string][2]netip.Addr{
		"maglev":      {addr("10.96.0.80"), addr("fd00:96::80")},
		"maglev-port": {addr("10.96.0.81"), addr("fd00:96::81")},
	}
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}, Nodes: testCluster().Nodes}
	for _, name := range []string{"maglev", "maglev-port"} {
		sp := port(name, "", model.TCP, 80)
		v := vips[name]
		sp.ClusterIPs = v[:]
		sp.Scheduler = "mh"
		if name == "maglev-port" {
			sp.SchedulerFlags = "mh-port"
		}
		backends := []netip.Addr{v4.podA, v6.podA}
		if podB {
			backends = append(backends, v4.podB, v6.podB)
		}
		c.Services = append(c.Services, sp)
		c.Endpoints[sp.Name] = eps(thisNode, linePort, backends...)
	}
	return c, vips
}

// lineOnce opens a new connection to a line server through to and returns
// the first word of its answer; a refused or unanswered connection is the
// error.
func lineOnce(from *ktest.NS, to string) (string, error) {
	var c net.Conn
	if err := from.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", to, ktest.RequestTimeout)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ktest.RequestTimeout))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	s, err := bufio.NewReader(c).ReadString('\n')
	name, _, _ := strings.Cut(s, " ")
	return name, err
}

// TestKernelMaglevQuiesced removes pod-b from two mh Services while a
// connection to it stays open, so the proxy quiesces it (weight 0) for
// graceful termination, then opens new connections from a LAN client. Under
// the default flags (mh-fallback,mh-port) every one is answered by pod-a;
// without mh-fallback the kernel refuses those hashed to pod-b ("no
// destination available", an ICMP port unreachable), which the mh-port
// control must show.
func TestKernelMaglevQuiesced(t *testing.T) {
	b := newKBed(t)
	p := b.open(ipvs.Options{GracefulPeriod: time.Hour})
	c, vips := maglevCluster(true)
	st := b.plan(c)
	if len(st.Refusals) != 0 {
		t.Fatalf("plan refused: %v", st.Refusals)
	}
	b.full(p, st)
	b.checkPlan(st)
	for i := range fams {
		if got := b.ipvsadmSave(); !containsAll(got, []string{
			"-A -t " + ap(vips["maglev"][i], 80) + " -s mh -b mh-fallback,mh-port",
			"-A -t " + ap(vips["maglev-port"][i], 80) + " -s mh -b mh-port",
		}) {
			t.Errorf("scheduler flags in the kernel, want mh-fallback,mh-port and mh-port:\n%s", strings.Join(got, "\n"))
		}
	}

	// One open connection to pod-b per virtual server keeps it quiesced.
	var quiesced []string
	for name, vip := range vips {
		for i := range fams {
			to := ap(vip[i], 80)
			held := false
			for range maglevDials {
				lc := dialLine(t, b.cliA.NS, "tcp", to)
				if n, err := lc.ask(); err == nil && n == "pod-b" {
					held = true
					break
				}
				lc.c.Close()
			}
			if !held {
				t.Fatalf("%s %s: no connection reached pod-b", name, to)
			}
			quiesced = append(quiesced, "-a -t "+to+" -r "+ap(fams[i].podB, linePort)+" -m -w 0")
		}
	}
	c, _ = maglevCluster(false)
	st = b.plan(c)
	b.partial(p, st, "default/maglev", "default/maglev-port")
	if got := b.ipvsadmSave(); !containsAll(got, quiesced) {
		t.Fatalf("pod-b not quiesced at weight 0 behind every VIP:\n%s", strings.Join(got, "\n"))
	}
	b.checkPlan(st, "-w 0")

	for i, f := range fams {
		t.Run(f.name, func(t *testing.T) {
			answered := func(name string) (map[string]int, []string) {
				names, failed := map[string]int{}, []string(nil)
				for range maglevDials {
					n, err := lineOnce(b.cliA.NS, ap(vips[name][i], 80))
					if err != nil {
						failed = append(failed, err.Error())
						continue
					}
					names[n]++
				}
				return names, failed
			}
			if names, failed := answered("maglev"); len(failed) != 0 || names["pod-a"] != maglevDials {
				t.Errorf("mh-fallback,mh-port: %d of %d new connections failed (%s), answers %v; want all answered by pod-a",
					len(failed), maglevDials, strings.Join(failed, "; "), names)
			}
			if names, failed := answered("maglev-port"); len(failed) == 0 {
				t.Errorf("mh-port alone: no new connection failed (answers %v): the bed does not reproduce the kernel's refusal of a quiesced mh real server", names)
			} else {
				t.Logf("mh-port alone, as expected: %d of %d new connections failed: %s", len(failed), maglevDials, failed[0])
			}
		})
	}
}
