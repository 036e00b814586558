package recovery

import (
	"errors"
	"net/netip"
	"time"

	"go.uber.org/zap"
)

// DefaultDrain is CleanupOptions.Drain's default: how long the way out
// waits for this node's own connections from kube-ipvs0's addresses.
const DefaultDrain = 10 * time.Second

// drainPoll is how often the wait reads the connection table.
const drainPoll = 200 * time.Millisecond

// retireSources picks, for each family of bound, the node's address that
// connections from this node to bound's addresses take from now on as
// their source: the first global unicast one of local (the node's other
// addresses) of that family. A family without one is left out.
func retireSources(bound []netip.Prefix, local []netip.Addr) map[netip.Prefix]netip.Addr {
	first := func(v4 bool) netip.Addr {
		for _, a := range local {
			if a.Is4() == v4 && a.IsGlobalUnicast() {
				return a
			}
		}
		return netip.Addr{}
	}
	src4, src6 := first(true), first(false)
	out := map[netip.Prefix]netip.Addr{}
	for _, p := range bound {
		src := src6
		if p.Addr().Is4() {
			src = src4
		}
		if src.IsValid() {
			out[p] = src
		}
	}
	return out
}

// drainer is what the wait needs of the kernel.
type drainer interface {
	// RetireSources gives each address's local route the node's address
	// as preferred source.
	RetireSources(src map[netip.Prefix]netip.Addr) error
	// OpenConnsFrom counts the connections in the connection table whose
	// original source is one of addrs and that are not closing.
	OpenConnsFrom(addrs []netip.Addr) (int, error)
}

// drainSources is the way out's step before kube-ipvs0 goes, while
// another proxy serves the Services: a connection this node opened to a
// Service address while kube-ipvs0 held it has that address as its source
// (the kernel takes a local destination's own address), and it breaks
// when the address goes. New connections are given a node address as
// their source, then those open are waited for, up to timeout. It returns
// how many were still open when the wait ended, and the routes it could not
// change.
func drainSources(k drainer, node *Node, timeout time.Duration, log *zap.Logger) (int, error) {
	if len(node.Bound) == 0 || timeout <= 0 {
		return 0, nil
	}
	// Waited for even when a route could not be changed: the others were.
	retireErr := k.RetireSources(retireSources(node.Bound, node.LocalAddrs()))
	addrs := make([]netip.Addr, len(node.Bound))
	for i, p := range node.Bound {
		addrs[i] = p.Addr()
	}
	start := time.Now()
	for {
		n, err := k.OpenConnsFrom(addrs)
		if err != nil {
			return 0, errors.Join(retireErr, err)
		}
		if n == 0 || time.Since(start) >= timeout {
			log.Info("drained this node's connections from kube-ipvs0's addresses",
				zap.Int("stillOpen", n), zap.Duration("took", time.Since(start)))
			return n, retireErr
		}
		time.Sleep(drainPoll)
	}
}
