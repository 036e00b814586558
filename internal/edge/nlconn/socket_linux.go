package nlconn

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
)

// Open opens a socket of the netlink protocol (unix.NETLINK_ROUTE,
// unix.NETLINK_GENERIC) in the calling thread's network namespace, with
// nl.SocketTimeoutTv for sends and receives.
func OpenSocket(protocol int) (*nl.NetlinkSocket, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), protocol)
	if err != nil {
		return nil, fmt.Errorf("netlink socket (protocol %d): %w", protocol, err)
	}
	if err := errors.Join(s.SetSendTimeout(&nl.SocketTimeoutTv), s.SetReceiveTimeout(&nl.SocketTimeoutTv)); err != nil {
		s.Close()
		return nil, fmt.Errorf("netlink socket (protocol %d) timeouts: %w", protocol, err)
	}
	return s, nil
}
