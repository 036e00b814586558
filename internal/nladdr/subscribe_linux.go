package nladdr

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

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
// ns (`ip monitor address`), with a receive buffer of rcvbuf bytes
// (forced when force) when not 0. Each event is parsed as the dump's
// messages are (an Update is a link index and a prefix, no
// netlink.AddrUpdate): every address a sync binds to kube-ipvs0 is one
// event for the address manager's watch. A failed read, an error message
// or a message the parse cannot read ends the subscription through its
// ErrorCallback: the follower then knows events may be lost.
func Subscribe(ns netns.NsHandle, rcvbuf int, force bool) (*nlwatch.Sub[Update], error) {
	s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR)
	if err != nil {
		return nil, err
	}
	if rcvbuf != 0 {
		if err := s.SetReceiveBufferSize(rcvbuf, force); err != nil {
			s.Close()
			return nil, err
		}
	}
	sub := nlwatch.New[Update](updateQueue)
	go func() {
		<-sub.Done
		s.Close()
	}()
	go func() {
		defer close(sub.Updates)
		for {
			msgs, from, err := s.Receive()
			if err != nil {
				sub.ErrorCallback(fmt.Errorf("receive: %w", err))
				return
			}
			if from.Pid != nl.PidKernel {
				continue
			}
			for _, m := range msgs {
				switch m.Header.Type {
				case unix.RTM_NEWADDR, unix.RTM_DELADDR:
				case unix.NLMSG_ERROR:
					if len(m.Data) >= 4 {
						if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
							sub.ErrorCallback(fmt.Errorf("error message: %w", unix.Errno(-errno)))
						}
					}
					continue
				default:
					continue
				}
				a, ok, err := parseAddr(m.Data)
				if err != nil {
					sub.ErrorCallback(err)
					continue
				}
				if ok {
					sub.Updates <- Update{Addr: a, Added: m.Header.Type == unix.RTM_NEWADDR}
				}
			}
		}
	}()
	return sub, nil
}
