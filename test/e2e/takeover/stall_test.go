package takeover

import (
	"slices"
	"time"
)

// The traffic of the takeover and the rollback runs in the emulated VM,
// whose processes stop when the host is loaded; a request that times out
// then says nothing about the proxy. These pure pieces decide which
// failures a stall of the bed explains; they are tested on the host.

// span is one request's time, from its start to its answer or error.
type span struct{ from, to time.Time }

// overlaps tells whether s and o share an instant.
func (s span) overlaps(o span) bool { return s.from.Before(o.to) && o.from.Before(s.to) }

// stallAfter is how long a control request (or a 20 ms sleep of the
// watchdog) may take before its span counts as a stall of the bed. In the
// idle emulated VM a request to a pod takes a few milliseconds; a second
// means the guest's processes were not running (a starved host), not
// that a packet was dropped.
const stallAfter = time.Second

// duringStalls counts the failures whose span overlaps a stall.
func duringStalls(failures, stalls []span) int {
	n := 0
	for _, f := range failures {
		if slices.ContainsFunc(stalls, f.overlaps) {
			n++
		}
	}
	return n
}

// hiccupAfter is the smallest oversleep of the watchdog that is recorded
// for the evidence (see witness.hiccups): a sum of many under stallAfter
// can still make a request miss its deadline.
const hiccupAfter = 100 * time.Millisecond

// bedFailures counts the failures not during a stall whose capture put
// them on the bed (bed holds their spans; see flowVerdict).
func bedFailures(failures, stalls, bed []span) int {
	n := 0
	for _, f := range failures {
		if !slices.ContainsFunc(stalls, f.overlaps) && slices.Contains(bed, f) {
			n++
		}
	}
	return n
}
