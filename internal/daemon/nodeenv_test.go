package daemon

import (
	"net/netip"
	"sync"
	"testing"
)

// TestNodeEnvCache: the cached addresses are used only while followed and
// unchanged, a full read always dumps, and a change reported during a dump
// keeps the result out of the cache. The netlink side is covered by the
// daemon's e2e tests in the VM; here the dumps are counted.
func TestNodeEnvCache(t *testing.T) {
	var mu sync.Mutex
	dumps := 0
	during := func() {}
	e := &NodeEnv{readGateways: func() ([]netip.Addr, error) { return nil, nil }}
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
