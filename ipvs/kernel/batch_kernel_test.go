//go:build kernel

package kernel

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelAddRealServers: a batch of 700 real servers (three sendmsgs)
// to one virtual server, one of them already there, and a batch to a
// virtual server that does not exist: every real server's outcome is its
// own, in order, and the kernel holds every one that succeeded at its
// weight.
func TestKernelAddRealServers(t *testing.T) {
	node := ktest.NewNode(t)
	node.Run(t, "ipvsadm", "-A", "-t", "10.96.0.10:80", "-s", "rr")
	node.Run(t, "ipvsadm", "-a", "-t", "10.96.0.10:80", "-r", "10.244.0.3:8080", "-m", "-w", "1")
	node.Run(t, "ipvsadm", "-A", "-u", "[fd00::a]:53", "-s", "rr")

	v4 := ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 80}
	v6 := ipvs.Key{Protocol: model.UDP, Address: netip.MustParseAddr("fd00::a"), Port: 53}
	missing := ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.11"), Port: 80}
	var rss4 []ipvs.RealServer
	for i := range 700 {
		rss4 = append(rss4, ipvs.RealServer{Address: netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 1)}), Port: 8080, Weight: 1 + i%3})
	}
	rss6 := []ipvs.RealServer{
		{Address: netip.MustParseAddr("fd00:244::5"), Port: 5353, Weight: 2},
		{Address: netip.MustParseAddr("fd00:244::6"), Port: 5353, Weight: 0},
	}
	type outcome struct {
		i   int
		err error
	}
	var got4, got6, gotMissing []outcome
	var listed4, listed6 []ipvs.RealServerStatus
	err := node.Do(func() error {
		k, err := Open()
		if err != nil {
			return err
		}
		defer k.Close()
		k.AddRealServers(v4, rss4, func(i int, err error) { got4 = append(got4, outcome{i, err}) })
		k.AddRealServers(v6, rss6, func(i int, err error) { got6 = append(got6, outcome{i, err}) })
		k.AddRealServers(missing, rss6, func(i int, err error) { gotMissing = append(gotMissing, outcome{i, err}) })
		if listed4, err = k.RealServers(v4); err != nil {
			return err
		}
		listed6, err = k.RealServers(v6)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got4) != len(rss4) {
		t.Fatalf("%d outcomes for %d real servers", len(got4), len(rss4))
	}
	for j, o := range got4 {
		existing := rss4[j].Address == netip.MustParseAddr("10.244.0.3")
		if o.i != j || existing != errors.Is(o.err, ipvs.ErrExists) || !existing && o.err != nil {
			t.Errorf("outcome %d: %d %v", j, o.i, o.err)
		}
	}
	for j, o := range got6 {
		if o.i != j || o.err != nil {
			t.Errorf("IPv6 outcome %d: %d %v", j, o.i, o.err)
		}
	}
	if len(gotMissing) != 2 || !errors.Is(gotMissing[0].err, ipvs.ErrNotFound) || !errors.Is(gotMissing[1].err, ipvs.ErrNotFound) {
		t.Errorf("to a missing virtual server: %v", gotMissing)
	}
	weights := map[netip.AddrPort]int{}
	for _, rs := range append(listed4, listed6...) {
		weights[netip.AddrPortFrom(rs.Address, rs.Port)] = rs.Weight
	}
	if len(listed4) != 700 || len(listed6) != 2 {
		t.Fatalf("kernel holds %d and %d real servers, want 700 and 2", len(listed4), len(listed6))
	}
	for _, rs := range append(rss4, rss6...) {
		want := rs.Weight
		if rs.Address == netip.MustParseAddr("10.244.0.3") {
			want = 1 // ipvsadm's, kept
		}
		if w, ok := weights[netip.AddrPortFrom(rs.Address, rs.Port)]; !ok || w != want {
			t.Errorf("%s: weight %d (held %v), want %d", rs.Address, w, ok, want)
		}
	}
}

// TestKernelAddRealServersAcksLost: a batch whose acknowledgements
// overflow the receive buffer (the writer made to send more than it holds)
// reports the acknowledged ones as they were, the lost ones as errNoAck
// and does not wait for them; the kernel ran them all, and the next batch
// on the same socket reads its own acknowledgements only.
func TestKernelAddRealServersAcksLost(t *testing.T) {
	node := ktest.NewNode(t)
	node.Run(t, "ipvsadm", "-A", "-t", "10.96.0.10:80", "-s", "rr")
	k4 := ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 80}
	rs := func(i int) ipvs.RealServer {
		return ipvs.RealServer{Address: netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 1)}), Port: 8080, Weight: 1}
	}
	var first, next []ipvs.RealServer
	for i := range 250 {
		first = append(first, rs(i))
	}
	for i := 250; i < 255; i++ {
		next = append(next, rs(i))
	}
	var acked, lost, other, nextOK int
	var listed []ipvs.RealServerStatus
	err := node.Do(func() error {
		k, err := Open()
		if err != nil {
			return err
		}
		defer k.Close()
		if err := unix.SetsockoptInt(k.batch.sock.GetFd(), unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<10); err != nil {
			return err
		}
		k.batch.max = 1 << 20
		k.AddRealServers(k4, first, func(i int, err error) {
			switch {
			case err == nil:
				acked++
			case errors.Is(err, errNoAck) && errors.Is(err, unix.ENOBUFS):
				lost++
			default:
				other++
				t.Errorf("real server %d: %v", i, err)
			}
		})
		k.AddRealServers(k4, next, func(i int, err error) {
			if err != nil {
				t.Errorf("next batch, real server %d: %v", i, err)
				return
			}
			nextOK++
		})
		listed, err = k.RealServers(k4)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if acked == 0 || lost == 0 || acked+lost != len(first) || nextOK != len(next) {
		t.Errorf("acknowledged %d, lost %d, other %d of %d; next batch %d of %d", acked, lost, other, len(first), nextOK, len(next))
	}
	if len(listed) != len(first)+len(next) {
		t.Errorf("kernel holds %d real servers, want %d", len(listed), len(first)+len(next))
	}
}
