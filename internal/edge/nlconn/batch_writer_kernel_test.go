//go:build kernel

package nlconn

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// addAddr encodes `ip addr add ADDR/32 dev INDEX`: RTM_NEWADDR with
// NLM_F_CREATE|NLM_F_EXCL, so an address already there is EEXIST.
func addAddr(b []byte, seq uint32, index int, a netip.Addr) []byte {
	m := Begin(b, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq)
	var ifa [unix.SizeofIfAddrmsg]byte
	ifa[0], ifa[1] = unix.AF_INET, 32
	ifa[4], ifa[5], ifa[6], ifa[7] = byte(index), byte(index>>8), byte(index>>16), byte(index>>24)
	m.Raw(ifa[:]...)
	m.Addr(unix.IFA_LOCAL, a)
	m.Addr(unix.IFA_ADDRESS, a)
	return m.End()
}

func addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(i%250 + 1)}) }

// outcomes runs Do for addresses from..to-1 on lo and counts its outcomes.
func outcomes(t *testing.T, w *Writer, index, from, to int) (ok, exists, lost int) {
	t.Helper()
	next := from
	w.Do(to-from, func(b []byte, i int, seq uint32) []byte {
		return addAddr(b, seq, index, addr(from+i))
	}, func(i int, err error) {
		if i != next-from {
			t.Errorf("outcome %d came after %d", i, next-from-1)
		}
		next = from + i + 1
		switch {
		case err == nil:
			ok++
		case errors.Is(err, unix.EEXIST):
			exists++
		case errors.Is(err, ErrNoAck) && errors.Is(err, unix.ENOBUFS):
			lost++
		default:
			t.Errorf("address %s: %v", addr(from+i), err)
		}
	})
	return ok, exists, lost
}

// TestKernelWriter: 700 address adds in batches on one socket, one of
// them already there: every outcome is its own and in order, and the
// kernel holds them all. Then a batch whose acknowledgements overflow the
// receive buffer (the writer made to send more than it holds): the
// acknowledged ones are reported as they were, the lost ones as ErrNoAck,
// without waiting for them; the kernel ran them all, and the next batch on
// the same socket reads its own acknowledgements only.
func TestKernelWriter(t *testing.T) {
	node := ktest.NewNode(t)
	node.Run(t, "ip", "addr", "add", addr(100).String()+"/32", "dev", "lo")
	var held int
	err := node.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		w, err := OpenWriter(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer w.Close()
		if w.max < minBatch || w.max > 1<<20 {
			t.Errorf("batch of at most %d requests", w.max)
		}
		if ok, exists, lost := outcomes(t, w, lo.Attrs().Index, 0, 700); ok != 699 || exists != 1 || lost != 0 {
			t.Errorf("700 adds: %d added, %d there, %d lost", ok, exists, lost)
		}

		if err := unix.SetsockoptInt(w.sock.GetFd(), unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<10); err != nil {
			return err
		}
		w.max = 1 << 20
		ok, exists, lost := outcomes(t, w, lo.Attrs().Index, 700, 950)
		if ok == 0 || lost == 0 || ok+lost != 250 || exists != 0 {
			t.Errorf("overflowing batch of 250: %d acknowledged, %d lost, %d there", ok, lost, exists)
		}
		w.max = minBatch
		if ok, exists, lost := outcomes(t, w, lo.Attrs().Index, 950, 960); ok != 10 || exists+lost != 0 {
			t.Errorf("next batch of 10: %d added, %d there, %d lost", ok, exists, lost)
		}
		as, err := netlink.AddrList(lo, unix.AF_INET)
		for _, a := range as {
			if a.IP[0] == 127 && a.IP[1] == 1 {
				held++
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if held != 960 {
		t.Errorf("lo holds %d of the 960 addresses", held)
	}
}
