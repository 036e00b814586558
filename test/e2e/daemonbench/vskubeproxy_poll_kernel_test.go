//go:build kernel

package daemonbench

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/moby/ipvs"
)

// vsPollEvery is the interval of the change loop's IPVS_CMD_GET_DEST poll
// for its first second; after it the interval is 1 % of the time since
// the poll started, so that a change that takes seconds (kube-proxy's) is
// still timed to 1 % and the poll does not load the VM while it waits.
const vsPollEvery = 5 * time.Millisecond

// pollResult is when the poll saw the change, or why it stopped.
type pollResult struct {
	at  time.Time
	err error
}

// pollDest asks the kernel for vs's real servers (every vsPollEvery, see
// there) until ip is one of them with a weight, p exits, or stop is
// closed. With missingOK a failed request (vs not there yet) is polled
// again.
func pollDest(h *ipvs.Handle, vs *ipvs.Service, ip netip.Addr, p process, stop <-chan struct{}, missingOK bool) pollResult {
	start := time.Now()
	for {
		dests, err := h.GetDestinations(vs)
		if err != nil && !missingOK {
			return pollResult{err: fmt.Errorf("GET_DEST: %w", err)}
		}
		if slices.ContainsFunc(dests, func(d *ipvs.Destination) bool {
			a, _ := netip.AddrFromSlice(d.Address)
			return a.Unmap() == ip && d.Weight > 0
		}) {
			return pollResult{at: time.Now()}
		}
		if !p.Alive() {
			return pollResult{err: errors.New("the proxy exited")}
		}
		select {
		case <-stop:
			return pollResult{err: errors.New("not there")}
		case <-time.After(max(vsPollEvery, time.Since(start)/100)):
		}
	}
}
