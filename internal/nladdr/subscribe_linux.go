package nladdr

import (
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/nlsub"
	"github.com/ipvs-proxy/ipvs-proxy/internal/nlwatch"
)

// Update is one address added or removed: a line of `ip monitor address`.
type Update struct {
	Addr
	// Added is true for RTM_NEWADDR, false for RTM_DELADDR.
	Added bool
}

// updateQueue is how many updates wait between the reader and the
// follower; the socket's receive buffer takes the bursts.
const updateQueue = 1024

// Subscribe follows the addresses of both families in network namespace
// ns (`ip monitor address`), with a receive buffer of rcvbuf bytes when
// not 0 (nlsub.Subscribe). Each event is parsed as the dump's
// messages are (an Update is a link index and a prefix, no
// netlink.AddrUpdate): every address a sync binds to kube-ipvs0 is one
// event for the address manager's watch. A message the parse cannot read
// ends the subscription (internal/nlsub): the follower then knows events
// may be lost.
func Subscribe(ns netns.NsHandle, rcvbuf int) (*nlwatch.Sub[Update], error) {
	return nlsub.Subscribe(ns, []uint{unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR}, rcvbuf, updateQueue,
		func(typ uint16, body []byte) (Update, bool, error) {
			if typ != unix.RTM_NEWADDR && typ != unix.RTM_DELADDR {
				return Update{}, false, nil
			}
			a, ok, err := parseAddr(body)
			return Update{Addr: a, Added: typ == unix.RTM_NEWADDR}, ok, err
		})
}
