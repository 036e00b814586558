//go:build linux

package nodeenv

import (
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
)

// Cache reads the node's Env before every sync of `run`, caching the
// addresses: with 10,000 service addresses on kube-ipvs0 an address dump
// is most of a partial sync's own work, and the node's addresses rarely
// change. A partial sync reads them again only after Changed says an
// address of another link came or went, and only while someone follows
// them (Changed(false) was called, not yet Changed(true)); a full sync
// always reads them, and the resolvers and the listening sockets too (a
// partial sync uses the last ones). The routes are read every time. Safe
// for concurrent use.
type Cache struct {
	// readAddrs, readRoutes and readResolvers are the dumps (netlink and
	// files; fakes in tests).
	readAddrs     func() ([]netip.Addr, []netip.Prefix, []netip.Addr, error)
	readRoutes    func() (gateways, nextHops []netip.Addr, err error)
	readResolvers func() ([]netip.Addr, error)
	readListeners func() ([]guard.Listener, error)

	mu sync.Mutex
	// gen counts Changed calls: a dump overtaken by one is not cached.
	gen       uint64
	followed  bool
	cached    bool
	addrs     []netip.Addr
	prefixes  []netip.Prefix
	linkLocal []netip.Addr
	// resolvers and listeners are the last read; read is true once they
	// were.
	resolvers []netip.Addr
	listeners []guard.Listener
	read      bool
}

// NewCache reads through h (NewHandle's); nothing is cached until
// Changed(false).
func NewCache(h *netlink.Handle) *Cache {
	return &Cache{readAddrs: func() ([]netip.Addr, []netip.Prefix, []netip.Addr, error) { return ReadAddrs(h) },
		readRoutes:    func() ([]netip.Addr, []netip.Addr, error) { return ReadRoutes(h) },
		readResolvers: func() ([]netip.Addr, error) { return ReadResolvers(ResolvConfs...) },
		readListeners: ReadListeners}
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

// Read returns the node's Env; full reads the addresses and the resolvers
// again even if they are cached.
func (e *Cache) Read(full bool) (Env, error) {
	var env Env
	e.mu.Lock()
	hit := !full && e.cached && e.followed
	gen := e.gen
	if hit {
		env.LocalAddrs, env.LocalPrefixes, env.LinkLocalAddrs = e.addrs, e.prefixes, e.linkLocal
	}
	e.mu.Unlock()
	if !hit {
		var err error
		if env.LocalAddrs, env.LocalPrefixes, env.LinkLocalAddrs, err = e.readAddrs(); err != nil {
			return env, err
		}
		e.mu.Lock()
		// A change reported during the dump may be missing from it: cache
		// only what no report has overtaken.
		if e.gen == gen && e.followed {
			e.addrs, e.prefixes, e.linkLocal, e.cached = env.LocalAddrs, env.LocalPrefixes, env.LinkLocalAddrs, true
		}
		e.mu.Unlock()
	}
	var err error
	if env.Gateways, env.NextHops, err = e.readRoutes(); err != nil {
		return env, err
	}
	e.mu.Lock()
	read := e.read
	env.Resolvers, env.Listeners = e.resolvers, e.listeners
	e.mu.Unlock()
	if full || !read {
		if env.Resolvers, err = e.readResolvers(); err != nil {
			return env, err
		}
		if env.Listeners, err = e.readListeners(); err != nil {
			return env, err
		}
		e.mu.Lock()
		e.resolvers, e.listeners, e.read = env.Resolvers, env.Listeners, true
		e.mu.Unlock()
	}
	return env, nil
}
