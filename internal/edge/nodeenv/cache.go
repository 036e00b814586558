//go:build linux

package nodeenv

import (
	"net/netip"
	"sync"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Cache reads the node's Env before every sync of `run`, caching the
// addresses and the routes: with thousands of service addresses on
// kube-ipvs0 an address dump is most of a partial sync's own work, and the
// two route dumps (`ip route show table main`, each family) a large share
// of the time from a change's arrival to its IPVS write (see `make
// bench-daemon`), and
// the node's addresses and routes rarely change. A partial sync reads the
// addresses again only after Changed says an address of another link came
// or went, the routes only after RoutesChanged says a route of the main
// table did, and each only while someone follows them (Changed(false),
// RoutesChanged(false) was called, not yet with true); a full sync always
// reads them, and the resolvers and the listening sockets too (a partial
// sync uses the last ones). Safe for concurrent use.
type Cache struct {
	// readAddrs, readRoutes and readResolvers are the dumps (netlink and
	// files; fakes in tests).
	readAddrs     func() ([]netip.Addr, []netip.Prefix, []netip.Addr, error)
	readRoutes    func() (gateways, nextHops []netip.Addr, err error)
	readResolvers func() ([]netip.Addr, error)
	readListeners func() ([]model.Listener, error)

	mu sync.Mutex
	// gen counts Changed calls: a dump overtaken by one is not cached.
	gen       uint64
	followed  bool
	cached    bool
	addrs     []netip.Addr
	prefixes  []netip.Prefix
	linkLocal []netip.Addr
	// routeGen, routesFollowed and routesCached are gen, followed and
	// cached for the routes: gateways and nextHops.
	routeGen                     uint64
	routesFollowed, routesCached bool
	gateways, nextHops           []netip.Addr
	// resolvers and listeners are the last read; read is true once they
	// were.
	resolvers []netip.Addr
	listeners []model.Listener
	read      bool
}

// NewCache reads through h (NewHandle's); nothing is cached until
// Changed(false).
func NewCache(h *Handle) *Cache {
	return &Cache{readAddrs: func() ([]netip.Addr, []netip.Prefix, []netip.Addr, error) { return ReadAddrs(h) },
		readRoutes:    func() ([]netip.Addr, []netip.Addr, error) { return ReadRoutes(h.nl) },
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

// RoutesChanged tells the cache that the main routing table may have
// changed; lost says that changes may go unreported until the next
// RoutesChanged(false). WatchRoutes calls it.
func (e *Cache) RoutesChanged(lost bool) {
	e.mu.Lock()
	e.routeGen++
	e.routesFollowed = !lost
	e.routesCached = false
	e.mu.Unlock()
}

// Read returns the node's Env; full reads the addresses, the routes and
// the resolvers again even if they are cached.
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
	if env.Gateways, env.NextHops, err = e.routes(full); err != nil {
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

// routes are the gateways and next hops: cached unless full, or dumped
// (and cached, when no report overtook the dump and they are followed).
func (e *Cache) routes(full bool) (gateways, nextHops []netip.Addr, err error) {
	e.mu.Lock()
	hit := !full && e.routesCached && e.routesFollowed
	gen := e.routeGen
	gateways, nextHops = e.gateways, e.nextHops
	e.mu.Unlock()
	if hit {
		return gateways, nextHops, nil
	}
	if gateways, nextHops, err = e.readRoutes(); err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	if e.routeGen == gen && e.routesFollowed {
		e.gateways, e.nextHops, e.routesCached = gateways, nextHops, true
	}
	e.mu.Unlock()
	return gateways, nextHops, nil
}
