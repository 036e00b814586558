//go:build kernel

package nlconn

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelSubscribe: each message of the subscribed group reaches
// decode with its type, what decode keeps (an address added, not one
// removed) reaches the follower, and a decode error ends the subscription
// with that error, so the follower knows events may be lost.
func TestKernelSubscribe(t *testing.T) {
	node := ktest.NewNode(t)
	node.Run(t, "ip", "link", "add", "sub0", "type", "dummy")
	errBad := errors.New("a message decode cannot read")
	var bad atomic.Bool
	var sub *Sub[uint16]
	if err := node.Do(func() error {
		ns, err := netns.Get()
		if err != nil {
			return err
		}
		defer ns.Close()
		sub, err = Subscribe(ns, []uint{unix.RTNLGRP_IPV4_IFADDR}, 0, 4, func(typ uint16, body []byte) (uint16, bool, error) {
			if bad.Load() {
				return 0, false, errBad
			}
			return typ, typ == unix.RTM_NEWADDR, nil
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := make(chan uint16, 8)
	ended := make(chan error, 1)
	go func() { ended <- sub.Run(context.Background(), func(typ uint16) { got <- typ }) }()

	node.Run(t, "ip", "addr", "add", "10.0.0.1/32", "dev", "sub0")
	select {
	case typ := <-got:
		if typ != unix.RTM_NEWADDR {
			t.Fatalf("type %d, want RTM_NEWADDR", typ)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event 10 s after ip addr add")
	}
	node.Run(t, "ip", "addr", "del", "10.0.0.1/32", "dev", "sub0")
	bad.Store(true)
	node.Run(t, "ip", "addr", "add", "10.0.0.2/32", "dev", "sub0")
	select {
	case err := <-ended:
		if !errors.Is(err, errBad) {
			t.Fatalf("the subscription ended with %v, want the decode error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not end 10 s after decode failed")
	}
	if len(got) != 0 {
		t.Errorf("%d more events reached the follower: the removal (decode: not kept) or the failed one", len(got))
	}
}
