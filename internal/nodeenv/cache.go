package nodeenv

import (
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
)

// Cache reads the node's Env before every sync of `run`, caching the
// addresses: with 10,000 service addresses on kube-ipvs0 an address dump
// is most of a partial sync's own work, and the node's addresses rarely
// change. A partial sync reads them again only after Changed says an
// address of another link came or went, and only while someone follows
// them (Changed(false) was called, not yet Changed(true)); a full sync
// always reads them. The gateways are read every time. Safe for concurrent
// use.
type Cache struct {
	// readAddrs and readGateways are the dumps (netlink; fakes in tests).
	readAddrs    func() ([]netip.Addr, []netip.Prefix, error)
	readGateways func() ([]netip.Addr, error)

	mu sync.Mutex
	// gen counts Changed calls: a dump overtaken by one is not cached.
	gen      uint64
	followed bool
	cached   bool
	addrs    []netip.Addr
	prefixes []netip.Prefix
}

// NewCache reads through h (NewHandle's); nothing is cached until
// Changed(false).
func NewCache(h *netlink.Handle) *Cache {
	return &Cache{readAddrs: func() ([]netip.Addr, []netip.Prefix, error) { return ReadAddrs(h) },
		readGateways: func() ([]netip.Addr, error) { return ReadGateways(h) }}
}

// Changed tells the cache that the node's addresses may have changed;
// lost says that changes may go unreported until the next Changed(false).
// addrmgr.KernelLink.OtherLinks calls it.
func (e *Cache) Changed(lost bool) {
	e.mu.Lock()
	e.gen++
	e.followed = !lost
	e.cached = false
	e.mu.Unlock()
}

// Read returns the node's addresses and default gateways; full reads the
// addresses from the kernel even if they are cached.
func (e *Cache) Read(full bool) (Env, error) {
	var env Env
	e.mu.Lock()
	hit := !full && e.cached && e.followed
	gen := e.gen
	if hit {
		env.LocalAddrs, env.LocalPrefixes = e.addrs, e.prefixes
	}
	e.mu.Unlock()
	if !hit {
		var err error
		if env.LocalAddrs, env.LocalPrefixes, err = e.readAddrs(); err != nil {
			return env, err
		}
		e.mu.Lock()
		// A change reported during the dump may be missing from it: cache
		// only what no report has overtaken.
		if e.gen == gen && e.followed {
			e.addrs, e.prefixes, e.cached = env.LocalAddrs, env.LocalPrefixes, true
		}
		e.mu.Unlock()
	}
	gws, err := e.readGateways()
	if err != nil {
		return env, err
	}
	env.Gateways = gws
	return env, nil
}
