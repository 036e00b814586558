package nlconn

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Subscribe subscribes to groups of route netlink in network namespace ns
// (netns.None(): the calling thread's) and sends what decode makes of
// each message (its type and its body) when decode says ok; up to queue
// wait for the follower. rcvbuf, when not 0, is the socket's receive
// buffer, forced past net.core.rmem_max (SO_RCVBUFFORCE) so that bursts
// are not lost; without CAP_NET_ADMIN the socket keeps the default size.
// A failed read, an error message from the kernel or a decode error is
// reported through the subscription's ErrorCallback, which ends it: the
// follower then knows events may be lost. Closing the subscription's Done
// closes the socket.
func Subscribe[T any](ns netns.NsHandle, groups []uint, rcvbuf, queue int, decode func(typ uint16, body []byte) (T, bool, error)) (*Sub[T], error) {
	s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, groups...)
	if err != nil {
		return nil, err
	}
	if rcvbuf != 0 {
		// Only the size is lost when it fails: the subscription works.
		_ = s.SetReceiveBufferSize(rcvbuf, true)
	}
	sub := New[T](queue)
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
				if m.Header.Type == unix.NLMSG_ERROR {
					if len(m.Data) >= 4 {
						if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
							sub.ErrorCallback(fmt.Errorf("error message: %w", unix.Errno(-errno)))
						}
					}
					continue
				}
				v, ok, err := decode(m.Header.Type, m.Data)
				if err != nil {
					sub.ErrorCallback(err)
					continue
				}
				if ok {
					sub.Updates <- v
				}
			}
		}
	}()
	return sub, nil
}
