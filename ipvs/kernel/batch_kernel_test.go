//go:build kernel

package kernel

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
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
		rss4 = append(rss4, ipvs.RealServer{Address: netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 1)}), Port: 8080, Weight: int32(1 + i%3)})
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
	weights := map[netip.AddrPort]int32{}
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

// BenchmarkKernelAddRealServers: 100 virtual servers × 10 real servers
// made one request at a time (moby/ipvs, as before batching) and with
// each virtual server's real servers in one AddRealServers, per virtual
// server with its real servers; the service adds are in both.
//
//	make test-kernel KERNEL_PKGS=./ipvs/kernel KERNEL_TEST_FLAGS='-test.run=NONE -test.bench=AddRealServers'
func BenchmarkKernelAddRealServers(b *testing.B) {
	node := ktest.NewNode(b)
	var vss []ipvs.VirtualServer
	for i := range 100 {
		vs := ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: netip.AddrFrom4([4]byte{10, 96, 0, byte(i + 1)}), Port: 80}, Scheduler: "rr"}
		for j := range 10 {
			vs.RealServers = append(vs.RealServers, ipvs.RealServer{Address: netip.AddrFrom4([4]byte{10, 244, byte(i), byte(j + 1)}), Port: 8080, Weight: 1})
		}
		vss = append(vss, vs)
	}
	for _, c := range []struct {
		name string
		add  func(k *Table, vs ipvs.VirtualServer) error
	}{
		{"one-by-one", func(k *Table, vs ipvs.VirtualServer) error {
			for _, rs := range vs.RealServers {
				if err := k.AddRealServer(vs.Key, rs); err != nil {
					return err
				}
			}
			return nil
		}},
		{"batched", func(k *Table, vs ipvs.VirtualServer) (err error) {
			k.AddRealServers(vs.Key, vs.RealServers, func(_ int, e error) { err = errors.Join(err, e) })
			return err
		}},
		{"services-only", func(*Table, ipvs.VirtualServer) error { return nil }},
	} {
		b.Run(c.name, func(b *testing.B) {
			err := node.Do(func() error {
				k, err := Open()
				if err != nil {
					return err
				}
				defer k.Close()
				for range b.N {
					for _, vs := range vss {
						if err := k.AddService(vs); err != nil {
							return err
						}
						if err := c.add(k, vs); err != nil {
							return err
						}
					}
					b.StopTimer()
					for _, vs := range vss {
						if err := k.DelService(vs.Key); err != nil {
							return err
						}
					}
					b.StartTimer()
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(vss)), "µs/virtual-server")
		})
	}
}

// TestKernelAddServices: 600 virtual servers in batches, both families,
// persistent ones, one already there: every outcome is its own and in
// order, and the dump reads back each as it was asked for.
func TestKernelAddServices(t *testing.T) {
	node := ktest.NewNode(t)
	node.Run(t, "ipvsadm", "-A", "-t", "10.96.0.5:80", "-s", "rr")
	var vss []ipvs.VirtualServer
	for i := range 300 {
		vss = append(vss,
			ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}), Port: 80}, Scheduler: "rr"},
			ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.UDP, Address: netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)}), Port: 53}, Scheduler: "sh",
				Flags: ipvs.FlagPersistent, PersistenceTimeout: uint32(60 + i)})
	}
	var dumped []ipvs.VirtualServer
	next := 0
	err := node.Do(func() error {
		k, err := Open()
		if err != nil {
			return err
		}
		defer k.Close()
		k.AddServices(vss, func(i int, err error) {
			if i != next {
				t.Errorf("outcome %d came after %d", i, next-1)
			}
			next = i + 1
			existing := vss[i].Address == netip.MustParseAddr("10.96.0.5")
			if existing != errors.Is(err, ipvs.ErrExists) || !existing && err != nil {
				t.Errorf("%s: %v", vss[i].Key, err)
			}
		})
		return k.dump.services(func(vs ipvs.VirtualServer) { dumped = append(dumped, vs) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != len(vss) || len(dumped) != len(vss) {
		t.Fatalf("%d outcomes and %d virtual servers dumped for %d", next, len(dumped), len(vss))
	}
	byKey := map[ipvs.Key]ipvs.VirtualServer{}
	for _, vs := range dumped {
		byKey[vs.Key] = vs
	}
	for _, want := range vss {
		if want.Address == netip.MustParseAddr("10.96.0.5") {
			continue
		}
		got := byKey[want.Key]
		if got.Scheduler != want.Scheduler || got.Flags != want.Flags || got.PersistenceTimeout != want.PersistenceTimeout {
			t.Errorf("%s: dumped %+v, want %+v", want.Key, got, want)
		}
	}
}
