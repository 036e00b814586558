package iptables

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// setKernel is the kernel's ipset table, as the set syncer needs it. The
// netlink implementation is netlinkSets; unit tests use a stateful fake.
type setKernel interface {
	// ListAll is `ipset save`: every set and its entries.
	ListAll() (map[string]*kernelSet, error)
	// Create is `ipset create`.
	Create(s IPSet) error
	// Destroy is `ipset destroy`.
	Destroy(name string) error
	// Add is `ipset add -exist` for each entry.
	Add(s IPSet, entries []Entry) error
	// Del is `ipset del -exist` for each entry.
	Del(s IPSet, entries []Entry) error
}

// mirrorSet is what the proxy believes one of its sets holds.
type mirrorSet struct {
	spec    IPSet // Entries unused
	entries []Entry
}

// setSyncer keeps the proxy's ipsets equal to the plan with per-entry diffs.
// Its mirror holds exactly the sets it owns: those the plan names. A full
// sync reads the kernel once (one dump of all sets) and corrects the mirror;
// a partial sync diffs the plan against the mirror alone.
type setSyncer struct {
	k      setKernel
	log    *zap.Logger
	mirror map[string]*mirrorSet
	// fallbacks counts batches the kernel refused and that were retried
	// entry by entry.
	fallbacks int
	// drift is what the last full found changed by others since the
	// mirror was last written (SetEntries and Sets).
	drift Drift
}

func newSetSyncer(k setKernel, log *zap.Logger) *setSyncer {
	return &setSyncer{k: k, log: log, mirror: map[string]*mirrorSet{}}
}

// full makes every planned set exist with exactly its planned entries, after
// one dump. Sets the plan does not name are not touched here (see
// destroyStale). Errors are per set; the other sets are still synced.
func (s *setSyncer) full(want []IPSet) error {
	s.drift = Drift{}
	have, err := s.k.ListAll()
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range want {
		w.Entries = normalize(w.Type, w.Entries)
		ks := have[w.Name]
		if prev := s.mirror[w.Name]; prev != nil {
			switch {
			case ks == nil || !compatible(ks, prev.spec):
				s.drift.Sets++
				s.log.Info("repairing ipset destroyed or replaced outside the proxy", zap.String("set", w.Name))
			default:
				missing, extra, _ := diffSet(w.Type, normalize(w.Type, ks.Entries), prev.entries)
				if n := len(missing) + len(extra); n > 0 {
					s.drift.SetEntries += n
					s.log.Info("repairing ipset entries changed outside the proxy", zap.String("set", w.Name),
						zap.Int("deleted", len(missing)), zap.Int("added", len(extra)))
				}
			}
		}
		if ks != nil && !compatible(ks, w) {
			if err := s.k.Destroy(w.Name); err != nil {
				errs = append(errs, fmt.Errorf("replace %s (%s %s) by %s %s: %w: %w", w.Name, ks.Type, ks.Family, w.Type, w.Family, ErrSetMismatch, err))
				continue
			}
			ks = nil
		}
		var cur []Entry
		if ks == nil {
			if err := s.k.Create(w); err != nil {
				errs = append(errs, err)
				continue
			}
		} else {
			cur = normalize(w.Type, ks.Entries)
		}
		s.mirror[w.Name] = &mirrorSet{spec: w, entries: cur}
		if err := s.apply(w); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// partial applies the entry differences between the plan and the mirror,
// with no dump. A planned set missing from the mirror is created. Sets whose
// type changed, and sets no longer planned, wait for the next full sync.
func (s *setSyncer) partial(want []IPSet) error {
	var errs []error
	for _, w := range want {
		m := s.mirror[w.Name]
		if m == nil {
			if err := s.k.Create(w); err != nil && !errors.Is(err, ErrSetExists) {
				errs = append(errs, err)
				continue
			} else if err != nil {
				// Someone else created it: its content is unknown without a
				// dump, so resync it entry by entry at the next full sync, and
				// add what we need now.
				errs = append(errs, fmt.Errorf("ipset %s appeared outside the proxy: %w", w.Name, err))
			}
			m = &mirrorSet{spec: w}
			s.mirror[w.Name] = m
		} else if m.spec.Type != w.Type || m.spec.Family != w.Family {
			errs = append(errs, fmt.Errorf("ipset %s: type change to %s %s needs a full sync: %w", w.Name, w.Type, w.Family, ErrSetMismatch))
			continue
		}
		if err := s.apply(w); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// apply adds and deletes the difference between the mirror and w, in
// batches, and records in the mirror what the kernel accepted.
func (s *setSyncer) apply(w IPSet) error {
	m := s.mirror[w.Name]
	add, del, norm := diffSet(w.Type, m.entries, w.Entries)
	w.Entries = norm
	if len(add) == 0 && len(del) == 0 {
		return nil
	}
	var errs []error
	failedAdd, failedDel := map[Entry]bool{}, map[Entry]bool{}
	if len(del) > 0 {
		if err := s.k.Del(w, del); err != nil {
			errs = append(errs, s.oneByOne(w, del, s.k.Del, failedDel)...)
		}
	}
	if len(add) > 0 {
		if err := s.k.Add(w, add); err != nil {
			errs = append(errs, s.oneByOne(w, add, s.k.Add, failedAdd)...)
		}
	}
	next := w.Entries
	if len(failedAdd) > 0 || len(failedDel) > 0 {
		next = slices.DeleteFunc(slices.Clone(next), func(e Entry) bool { return failedAdd[e] })
		for e := range failedDel {
			next = append(next, e)
		}
		slices.SortFunc(next, CompareEntries)
	}
	m.spec = IPSet{Name: w.Name, Type: w.Type, Family: w.Family, Comment: w.Comment}
	m.entries = next
	return errors.Join(errs...)
}

// oneByOne retries a failed batch entry by entry (the operations are
// idempotent) so that one bad entry costs only itself.
func (s *setSyncer) oneByOne(w IPSet, entries []Entry, op func(IPSet, []Entry) error, failed map[Entry]bool) []error {
	s.fallbacks++
	s.log.Warn("ipset batch refused, retrying entry by entry", zap.String("set", w.Name), zap.Int("entries", len(entries)))
	var errs []error
	for _, e := range entries {
		if err := op(w, []Entry{e}); err != nil {
			failed[e] = true
			errs = append(errs, err)
		}
	}
	return errs
}

// destroyStale destroys the sets in the mirror that want no longer names,
// i.e. sets the proxy created and no longer plans. A set still referenced
// stays in the mirror and is retried at the next full sync.
func (s *setSyncer) destroyStale(want []IPSet) error {
	planned := map[string]bool{}
	for _, w := range want {
		planned[w.Name] = true
	}
	var errs []error
	for name := range s.mirror {
		if planned[name] {
			continue
		}
		if err := s.k.Destroy(name); err != nil && !errors.Is(err, ErrSetNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(s.mirror, name)
	}
	return errors.Join(errs...)
}

// cleanup destroys the named sets that exist, and nothing else.
func (s *setSyncer) cleanup(names []string) error {
	have, err := s.k.ListAll()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if have[n] == nil {
			continue
		}
		if err := s.k.Destroy(n); err != nil && !errors.Is(err, ErrSetNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(s.mirror, n)
	}
	return errors.Join(errs...)
}

// compatible reports whether the kernel set can be kept for the planned one.
func compatible(ks *kernelSet, w IPSet) bool {
	if ks.Type != w.Type {
		return false
	}
	if w.Type == "bitmap:port" {
		return ks.PortFrom == BitmapPortFrom && ks.PortTo == BitmapPortTo
	}
	return ks.Family == w.Family && (ks.MaxElem == 0 || ks.MaxElem >= MaxElem)
}
