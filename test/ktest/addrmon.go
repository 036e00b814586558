package ktest

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// AddrMonitor records every address added to one link of a namespace
// while it runs: `ip -o monitor address dev LINK`, RTM_NEWADDR only. A
// kernel test starts it before the proxy runs and checks, at the end, that
// no protected address was ever bound, even for a moment.
type AddrMonitor struct {
	mu    sync.Mutex
	seen  []netip.Prefix
	done  chan struct{}
	ended chan struct{}
}

// MonitorAddrs subscribes to the namespace's address changes and records
// those adding an address to the link of index.
func (ns *NS) MonitorAddrs(t testing.TB, index int) *AddrMonitor {
	t.Helper()
	m := &AddrMonitor{done: make(chan struct{}), ended: make(chan struct{})}
	ch := make(chan netlink.AddrUpdate, 1<<14)
	if err := netlink.AddrSubscribeAt(ns.Handle(), ch, m.done); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.ended)
		for u := range ch {
			if !u.NewAddr || u.LinkIndex != index {
				continue
			}
			ip, _ := netip.AddrFromSlice(u.LinkAddress.IP)
			ones, _ := u.LinkAddress.Mask.Size()
			m.mu.Lock()
			m.seen = append(m.seen, netip.PrefixFrom(ip.Unmap(), ones))
			m.mu.Unlock()
		}
	}()
	return m
}

// Stop ends the subscription and returns every address it saw added, in
// order.
func (m *AddrMonitor) Stop() []netip.Prefix {
	close(m.done)
	select {
	case <-m.ended:
	case <-time.After(2 * time.Second):
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.seen)
}
