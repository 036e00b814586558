//go:build linux

package nodeenv

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/nlwatch"
)

// routeWatchRcvBuf is the receive buffer asked for the route subscription
// (SO_RCVBUFFORCE, falling back to the default): every address a full
// sync binds to kube-ipvs0 adds a route to the local table, one event
// each, which the watch reads and drops.
const routeWatchRcvBuf = 8 << 20

// routeWatchQueue is how many route updates wait between the library's
// reader and the handler, which only sets a flag: the socket's buffer
// above takes the bursts. A netlink.RouteUpdate is 384 B, so a queue of
// 1,024 kept 393 KB of the heap for good (0.7 MB in the side-by-side
// run's sampled heap profile at 10,000 services).
const routeWatchQueue = 64

// ErrRouteWatchLost is reported (logged) when the route subscription
// failed: until it is made again every sync reads the routes.
var ErrRouteWatchLost = errors.New("route watch lost")

// WatchRoutes follows the main routing table of the calling thread's
// network namespace for the cache (`ip monitor route`, both families):
// from its start each event of a route in the main table (table 254)
// reports RoutesChanged(false); events of other tables (the local table's
// route of each kube-ipvs0 address) are dropped. A lost subscription
// (ENOBUFS when events come faster than they are read, or any error)
// reports RoutesChanged(true), is logged, and is made again with backoff
// until ctx ends. It returns the first subscription's error: then nothing
// is followed and every sync reads the routes, as before.
func (e *Cache) WatchRoutes(ctx context.Context, log *zap.Logger) error {
	var w routeWatch
	sub, err := w.subscribe()
	if err != nil {
		return err
	}
	e.RoutesChanged(false) // followed from now on
	go nlwatch.Follow(ctx, sub, w.subscribe,
		func(u netlink.RouteUpdate) {
			if isMainTable(u.Route) {
				e.RoutesChanged(false)
			}
		},
		func(err error) {
			e.RoutesChanged(true)
			log.Warn("route watch lost; every sync reads the routes until it is made again", zap.Error(fmt.Errorf("%w: %v", ErrRouteWatchLost, err)))
		},
		func() {
			e.RoutesChanged(false)
			log.Info("route watch made again")
		})
	return nil
}

// routeWatch makes the route subscriptions of one WatchRoutes.
type routeWatch struct {
	// noForceRcvBuf: the forced receive buffer failed once (no
	// CAP_NET_ADMIN), and the library leaks that socket: not asked again.
	noForceRcvBuf bool
}

func (w *routeWatch) subscribe() (*nlwatch.Sub[netlink.RouteUpdate], error) {
	var s *nlwatch.Sub[netlink.RouteUpdate]
	try := func(opts netlink.RouteSubscribeOptions) error {
		s = nlwatch.New[netlink.RouteUpdate](routeWatchQueue)
		opts.ErrorCallback = s.ErrorCallback
		err := netlink.RouteSubscribeWithOptions(s.Updates, s.Done, opts)
		if err != nil {
			close(s.Done)
		}
		return err
	}
	if !w.noForceRcvBuf {
		if err := try(netlink.RouteSubscribeOptions{ReceiveBufferSize: routeWatchRcvBuf, ReceiveBufferForceSize: true}); err == nil {
			return s, nil
		}
		w.noForceRcvBuf = true
	}
	if err := try(netlink.RouteSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("ip monitor route: %w", err)
	}
	return s, nil
}

// isMainTable reports whether r is a route of the main table, the one
// ReadRoutes reads.
func isMainTable(r netlink.Route) bool { return r.Table == unix.RT_TABLE_MAIN }
