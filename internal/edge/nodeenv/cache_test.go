package nodeenv

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestCache: the cached addresses are used only while followed and
// unchanged, a full read always dumps, and a change reported during a dump
// keeps the result out of the cache. The netlink side is covered by the
// daemon's e2e tests in the VM; here the dumps are counted.
func TestCache(t *testing.T) {
	var mu sync.Mutex
	dumps := 0
	during := func() {}
	e := &Cache{readRoutes: func() ([]netip.Addr, []netip.Addr, error) { return nil, nil, nil },
		readResolvers: func() ([]netip.Addr, error) { return nil, nil },
		readListeners: func() ([]model.Listener, error) { return nil, nil }}
	e.readAddrs = func() ([]netip.Addr, []netip.Prefix, []netip.Addr, error) {
		mu.Lock()
		dumps++
		mu.Unlock()
		during()
		return []netip.Addr{netip.MustParseAddr("192.168.0.1")}, nil, nil, nil
	}
	read := func(full bool, want int) {
		t.Helper()
		if _, err := e.Read(full); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if dumps != want {
			t.Fatalf("after Read(full=%v): %d dumps, want %d", full, dumps, want)
		}
	}
	read(false, 1) // not followed: no cache
	read(false, 2)
	e.Changed(false) // followed from now on
	read(false, 3)
	read(false, 3) // cached
	read(true, 4)  // a full sync dumps
	read(false, 4)
	e.Changed(false) // an address of another link changed
	read(false, 5)
	read(false, 5)
	e.Changed(true) // events lost: every read dumps
	read(false, 6)
	read(false, 7)
	e.Changed(false)
	during = func() { e.Changed(false) } // a change while dumping
	read(false, 8)
	during = func() {}
	read(false, 9) // the overtaken dump was not cached
	read(false, 9)
}

// TestRouteCache: the routes are cached as the addresses are, under
// RoutesChanged: only while followed and unchanged, never by a full read,
// never from a dump a change overtook; and the cached ones are returned.
func TestRouteCache(t *testing.T) {
	dumps := 0
	during := func() {}
	gw := netip.MustParseAddr("192.168.0.254")
	e := &Cache{readAddrs: func() ([]netip.Addr, []netip.Prefix, []netip.Addr, error) { return nil, nil, nil, nil },
		readResolvers: func() ([]netip.Addr, error) { return nil, nil },
		readListeners: func() ([]model.Listener, error) { return nil, nil }}
	e.readRoutes = func() ([]netip.Addr, []netip.Addr, error) {
		dumps++
		during()
		return []netip.Addr{gw}, nil, nil
	}
	read := func(full bool, want int) {
		t.Helper()
		env, err := e.Read(full)
		if err != nil {
			t.Fatal(err)
		}
		if dumps != want {
			t.Fatalf("after Read(full=%v): %d route dumps, want %d", full, dumps, want)
		}
		if !slices.Equal(env.Gateways, []netip.Addr{gw}) {
			t.Fatalf("gateways %v, want %v", env.Gateways, gw)
		}
	}
	read(false, 1) // not followed: no cache
	read(false, 2)
	e.RoutesChanged(false) // followed from now on
	read(false, 3)
	read(false, 3) // cached
	read(true, 4)  // a full sync dumps
	read(false, 4)
	e.Changed(false) // an address changed: not a route
	read(false, 4)
	e.RoutesChanged(false) // a route of the main table changed
	read(false, 5)
	read(false, 5)
	e.RoutesChanged(true) // events lost: every read dumps
	read(false, 6)
	read(false, 7)
	e.RoutesChanged(false)
	during = func() { e.RoutesChanged(false) } // a change while dumping
	read(false, 8)
	during = func() {}
	read(false, 9) // the overtaken dump was not cached
	read(false, 9)
}

func TestDialedAddrs(t *testing.T) {
	ctx := context.Background()
	for in, want := range map[string]string{
		"https://10.0.2.100:6443":        "10.0.2.100",
		"https://[fd00::1]:6443":         "fd00::1",
		"https://[::ffff:10.0.0.3]:6443": "10.0.0.3",
		"10.0.0.1:443":                   "10.0.0.1",
		"10.0.0.2":                       "10.0.0.2",
		"":                               "",
	} {
		got := DialedAddrs(ctx, in)
		s := ""
		if len(got) > 0 {
			s = got[0].String()
		}
		if s != want {
			t.Errorf("DialedAddrs(%q) = %v, want %s", in, got, want)
		}
	}
	for _, a := range DialedAddrs(ctx, "https://localhost:6443") {
		if !a.IsLoopback() {
			t.Errorf("localhost resolved to %v", a)
		}
	}
}

func TestReadResolvers(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "resolv.conf")
	resolved := filepath.Join(dir, "resolved.conf")
	if err := os.WriteFile(etc, []byte("# generated\nnameserver 127.0.0.53\noptions edns0\nsearch example.org\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolved, []byte("nameserver 192.0.2.53\nnameserver fe80::53%eth0\nnameserver not-an-ip\nnameserver 192.0.2.53\n  nameserver ::ffff:192.0.2.54\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResolvers(etc, resolved, filepath.Join(dir, "missing"))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("127.0.0.53"), netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("192.0.2.54"), netip.MustParseAddr("fe80::53")}
	if !slices.Equal(got, want) {
		t.Errorf("ReadResolvers = %v, want %v", got, want)
	}
}

func TestParseSocketTable(t *testing.T) {
	tcp := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2717 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 016433C6:0016 026433C6:D2F0 01 00000000:00000000 02:000A3F80 00000000     0        0 3 4 0000000000000000 20 4 30 10 -1
`)
	tcp6 := []byte(`  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0
   1: B80D0120000000000000000001000000:01BB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF0000016433C6:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 6 1 0000000000000000 100 0 0 10 0
`)
	var got []string
	for _, l := range append(ParseSocketTable(tcp, model.TCP, 0x0A), ParseSocketTable(tcp6, model.TCP, 0x0A)...) {
		got = append(got, l.String())
	}
	want := []string{"tcp 0.0.0.0:22", "tcp 127.0.0.1:10007", "tcp [::]:8080", "tcp [2001:db8::1]:443", "tcp 198.51.100.1:80"}
	if !slices.Equal(got, want) {
		t.Errorf("ParseSocketTable = %v, want %v", got, want)
	}
	eps := []byte(` ENDPT     SOCK   STY SST HBKT LPORT   UID INODE LADDRS
ffff8880 ffff8880 2   10  29   3868        0 123 198.51.100.1 2001:db8::1
`)
	if got := ParseSCTPEndpoints(eps); len(got) != 2 || got[0].String() != "sctp 198.51.100.1:3868" || got[1].String() != "sctp [2001:db8::1]:3868" {
		t.Errorf("ParseSCTPEndpoints = %v", got)
	}
}
