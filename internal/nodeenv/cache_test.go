package nodeenv

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
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
		readResolvers: func() ([]netip.Addr, error) { return nil, nil }}
	e.readAddrs = func() ([]netip.Addr, []netip.Prefix, error) {
		mu.Lock()
		dumps++
		mu.Unlock()
		during()
		return []netip.Addr{netip.MustParseAddr("192.168.0.1")}, nil, nil
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
