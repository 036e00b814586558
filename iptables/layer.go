package iptables

import (
	"errors"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Desired is what the syncer is asked to make the kernel hold, as a
// layer.Layer: the planned ipsets and each family's rules
// (planner.State.IPSets, Rulesets).
type Desired struct {
	Sets  []IPSet
	Rules []Ruleset
}

var _ layer.Layer[Desired, *Readback, *Result] = (*Syncer)(nil)

// Part is what a Failure of the syncer is about: the ipsets and rules as a
// whole, a sync's (PartSync) or a cleanup's (PartCleanup). Its error names
// the family, table, chain or set itself.
type Part string

// The syncer's Parts.
const (
	PartSync    Part = "iptables and ipsets"
	PartCleanup Part = "iptables and ipsets cleanup"
)

func (p Part) String() string { return string(p) }

// Failure is what a sync of the syncer could not do.
type Failure = layer.Failure[Part]

// Result is what one sync of the syncer could not do (one Failure, whose
// error joins every set, table and family that failed) and, in a Full,
// what it found changed by others: DriftIPSetEntry, DriftIPSet,
// DriftIPTablesTable.
type Result struct {
	layer.Result[Part]
}

// The kinds of the syncer's Drift.
const (
	// DriftIPSetEntry counts ipset entries added or deleted by others.
	DriftIPSetEntry layer.Kind = "ipset_entry"
	// DriftIPSet counts the proxy's ipsets destroyed, or replaced by a set
	// of another type, by others.
	DriftIPSet layer.Kind = "ipset"
	// DriftIPTablesTable counts tables whose chains or jump rules were
	// edited by others (iptables -F, -D, -I ...) while the planned rules
	// stayed the same.
	DriftIPTablesTable layer.Kind = "iptables_table"
	// DriftARPTable counts elements of ARPTable's set added or deleted by
	// others, and rebuilds of the table they changed otherwise.
	DriftARPTable layer.Kind = "arp_table"
)

// result is the Result of a sync of part that failed with errs (none for
// success) and found drift.
func result(part Part, drift layer.Drift, errs ...error) *Result {
	res := &Result{}
	res.Drift = drift
	if err := errors.Join(errs...); err != nil {
		res.Fail(part, err)
	}
	return res
}
