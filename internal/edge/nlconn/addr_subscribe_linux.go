package nlconn

import (
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// AddrUpdate is one address added or removed: a line of `ip monitor address`.
type AddrUpdate struct {
	Addr
	// Added is true for RTM_NEWADDR, false for RTM_DELADDR.
	Added bool
}

// updateQueue is how many updates wait between the reader and the
// follower; the socket's receive buffer takes the bursts.
const updateQueue = 1024

// Subscribe follows the addresses of both families in network namespace
// ns (`ip monitor address`), with a receive buffer of rcvbuf bytes when
// not 0 (Subscribe). Each event is parsed as the dump's
// messages are (an AddrUpdate is a link index and a prefix, no
// netlink.AddrUpdate): every address a sync binds to kube-ipvs0 is one
// event for the address manager's watch. A message the parse cannot read
// ends the subscription (Subscribe): the follower then knows events
// may be lost.
func SubscribeAddrs(ns netns.NsHandle, rcvbuf int) (*Sub[AddrUpdate], error) {
	return Subscribe(ns, []uint{unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR}, rcvbuf, updateQueue,
		func(typ uint16, body []byte) (AddrUpdate, bool, error) {
			if typ != unix.RTM_NEWADDR && typ != unix.RTM_DELADDR {
				return AddrUpdate{}, false, nil
			}
			a, ok, err := parseAddr(body)
			return AddrUpdate{Addr: a, Added: typ == unix.RTM_NEWADDR}, ok, err
		})
}
