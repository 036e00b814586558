//go:build linux

package nodeenv

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
)

// routeWatchRcvBuf is the receive buffer asked for the route subscription
// (SO_RCVBUFFORCE, falling back to the default): every address a full
// sync binds to kube-ipvs0 adds a route to the local table, one event
// each, which the watch reads and drops.
const routeWatchRcvBuf = 8 << 20

// routeWatchQueue is how many main-table events wait between the reader
// and the handler, which only sets a flag: the socket's buffer above takes
// the bursts.
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
	sub, err := subscribeMainTable()
	if err != nil {
		return err
	}
	e.RoutesChanged(false) // followed from now on
	go nlconn.Follow(ctx, sub, subscribeMainTable,
		func(mainTableEvent) { e.RoutesChanged(false) },
		func(err error) {
			e.RoutesChanged(true)
			log.Warn("route watch lost; every sync reads the routes until it is made again", zap.Error(fmt.Errorf("%w: %w", ErrRouteWatchLost, err)))
		},
		func() {
			e.RoutesChanged(false)
			log.Info("route watch made again")
		})
	return nil
}

// mainTableEvent is a route of the main table added, changed or removed:
// the watch needs no more than that one was.
type mainTableEvent struct{}

// subscribeMainTable subscribes to the route events of both families in
// the calling thread's network namespace (`ip monitor route`, with a
// receive buffer of routeWatchRcvBuf) and sends one mainTableEvent for
// each event of the main table. Every other event is dropped by its
// header, unparsed: each address bound to kube-ipvs0 adds a route to the
// local table, 10,000 events in a first sync at 10,000 Services, and
// netlink.RouteSubscribe parsed each into a netlink.Route before the
// handler dropped it (a large share of the first sync's binds: see `make
// bench-daemon DAEMONBENCH_FIRSTCPU_PROFILE=FILE`).
func subscribeMainTable() (*nlconn.Sub[mainTableEvent], error) {
	s, err := nlconn.Subscribe(netns.None(), []uint{unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE}, routeWatchRcvBuf, routeWatchQueue,
		func(typ uint16, body []byte) (mainTableEvent, bool, error) {
			return mainTableEvent{}, (typ == unix.RTM_NEWROUTE || typ == unix.RTM_DELROUTE) && isMainTable(body), nil
		})
	if err != nil {
		return nil, fmt.Errorf("ip monitor route: %w", err)
	}
	return s, nil
}

// isMainTable reports whether an RTM_NEWROUTE or RTM_DELROUTE message (its
// struct rtmsg first) is of the main table, the one ReadRoutes reads. The
// kernel puts a table below 256 in rtm_table itself; a larger one there is
// RT_TABLE_COMPAT, with the table in RTA_TABLE.
func isMainTable(rtmsg []byte) bool {
	return len(rtmsg) >= unix.SizeofRtMsg && rtmsg[4] == unix.RT_TABLE_MAIN
}
