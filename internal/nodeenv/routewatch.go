//go:build linux

package nodeenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// routeWatchRcvBuf is the receive buffer asked for the route subscription
// (SO_RCVBUFFORCE, falling back to the default): every address a full
// sync binds to kube-ipvs0 adds a route to the local table, one event
// each, which the watch reads and drops.
const routeWatchRcvBuf = 8 << 20

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
	sub, err := subscribeRoutes()
	if err != nil {
		return err
	}
	e.RoutesChanged(false) // followed from now on
	go func() {
		backoff := time.Second
		for {
			err := sub.run(ctx, e.RoutesChanged)
			if ctx.Err() != nil {
				return
			}
			e.RoutesChanged(true)
			log.Warn("route watch lost; every sync reads the routes until it is made again", zap.Error(fmt.Errorf("%w: %v", ErrRouteWatchLost, err)))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				if sub, err = subscribeRoutes(); err == nil {
					break
				}
				backoff = min(2*backoff, 30*time.Second)
			}
			backoff = time.Second
			e.RoutesChanged(false)
			log.Info("route watch made again")
		}
	}()
	return nil
}

// routeSub is one route subscription.
type routeSub struct {
	ch   chan netlink.RouteUpdate
	done chan struct{}
	errs chan error
}

func subscribeRoutes() (*routeSub, error) {
	var s *routeSub
	try := func(opts netlink.RouteSubscribeOptions) error {
		s = &routeSub{ch: make(chan netlink.RouteUpdate, 1024), done: make(chan struct{}), errs: make(chan error, 1)}
		opts.ErrorCallback = func(err error) {
			select {
			case s.errs <- err:
			default:
			}
		}
		err := netlink.RouteSubscribeWithOptions(s.ch, s.done, opts)
		if err != nil {
			close(s.done)
		}
		return err
	}
	if err := try(netlink.RouteSubscribeOptions{ReceiveBufferSize: routeWatchRcvBuf, ReceiveBufferForceSize: true}); err == nil {
		return s, nil
	}
	if err := try(netlink.RouteSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("ip monitor route: %w", err)
	}
	return s, nil
}

// run reports each main-table event to changed(false) until the
// subscription fails or ctx ends; it closes the subscription and returns
// why it ended.
func (s *routeSub) run(ctx context.Context, changed func(lost bool)) error {
	defer func() {
		close(s.done)
		// The library's reader ends once its socket is closed; let it.
		go func() {
			for range s.ch {
			}
		}()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.errs:
			return err
		case u, ok := <-s.ch:
			if !ok {
				select {
				case err := <-s.errs:
					return err
				default:
					return errors.New("subscription closed")
				}
			}
			if isMainTable(u.Route) {
				changed(false)
			}
		}
	}
}

// isMainTable reports whether r is a route of the main table, the one
// ReadRoutes reads.
func isMainTable(r netlink.Route) bool { return r.Table == unix.RT_TABLE_MAIN }
