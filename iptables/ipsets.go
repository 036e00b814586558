package iptables

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/digest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// SetKernel is the kernel's ipset table, as the set syncer needs it. The
// netlink implementation is iptables/kernel.Sets; unit tests use iptablestest.FakeSets.
type SetKernel interface {
	// ListAll is `ipset save`: every set and its entries.
	ListAll() (map[string]*KernelSet, error)
	// Create is `ipset create` with kube-proxy's arguments and, for a hash
	// set, maxelem maxElem.
	Create(s IPSet, maxElem uint32) error
	// Destroy is `ipset destroy`.
	Destroy(name string) error
	// Swap is `ipset swap FROM TO`.
	Swap(from, to string) error
	// Add is `ipset add -exist` for each entry.
	Add(s IPSet, entries []Entry) error
	// Del is `ipset del -exist` for each entry.
	Del(s IPSet, entries []Entry) error
}

// SwapSetName is the set a replacement is built in before `ipset swap` puts
// it in place. The proxy owns it: one left by a crash is destroyed before
// the next replacement, at the next full sync, and by cleanup.
const SwapSetName = "IPVS-PROXY-SWAP"

// mirrorSet is what the proxy believes one of its sets is and holds.
type mirrorSet struct {
	spec IPSet // Entries unused
	// maxElem is the hash set's maxelem, as created or adopted (0 for
	// bitmap:port).
	maxElem uint32
	entries []Entry
	// planned is the caller's entry slice the last apply made the set
	// equal to, with nothing refused (nil otherwise): the same slice given
	// again is the same entries (apply).
	planned []Entry
	// sum is entries' digest while summed (setdigest.go); entries are
	// only ever set anew, which clears it.
	sum    digest.Set
	summed bool
}

// matches reports whether the kernel's set is still the one the mirror
// describes: not destroyed, or replaced by a set of another shape.
func (m *mirrorSet) matches(ks *KernelSet) bool {
	if ks == nil || ks.Type != m.spec.Type || ks.Timeout != 0 || ks.CadtFlags != 0 || ks.Netmask != 0 {
		return false
	}
	if ks.Type == TypeBitmapPort {
		return ks.PortFrom == BitmapPortFrom && ks.PortTo == BitmapPortTo
	}
	return ks.Family == m.spec.Family && ks.MaxElem == m.maxElem
}

// setSyncer keeps the proxy's ipsets equal to the plan with per-entry diffs.
// Its mirror holds exactly the sets it owns: those the plan names. A full
// sync reads the kernel once (one dump of all sets) and corrects the mirror;
// a partial sync diffs the plan against the mirror alone.
//
// A set found in the kernel, kube-proxy's included, is adopted in place
// when it has the planned shape (see mismatch): its entries are diffed,
// never flushed. One of another maxelem, range or extensions is replaced
// through `ipset swap`; one of another type or family, which swap cannot
// change, is destroyed and created again if no rule holds it, and is an
// error of that set alone otherwise.
type setSyncer struct {
	k      SetKernel
	log    *zap.Logger
	mirror map[string]*mirrorSet
	// leftovers are the sets the last full sync found under a name the
	// proxy uses in some family but does not plan now (kube-proxy's
	// KUBE-6-* sets on a node planned IPv4 only): destroyed by
	// destroyStale once no rule holds them.
	leftovers []string
	// fallbacks counts batches the kernel refused and that were retried
	// entry by entry.
	fallbacks int
	// swaps counts sets replaced through `ipset swap`.
	swaps int
	// drift is what the last full found changed by others since the
	// mirror was last written (SetEntries and Sets).
	drift layer.Drift
	// since, while a dump read beside the sync loop is under way
	// (beginRead), are the entries written per set since it began, and
	// sinceSets the sets created, replaced or destroyed: for them the
	// dump may be older than the mirror (readback.go).
	since     map[string]map[Entry]bool
	sinceSets map[string]bool
}

func newSetSyncer(k SetKernel, log *zap.Logger) *setSyncer {
	return &setSyncer{k: k, log: log, mirror: map[string]*mirrorSet{}}
}

// full makes every planned set exist in the planned shape with exactly its
// planned entries, after one dump. Sets the plan does not name are not
// touched here (see destroyStale). Errors are per set; the other sets are
// still synced.
func (s *setSyncer) full(want []IPSet) error {
	s.endRead()
	have, err := listCompared(s.k, s.digests())
	if err != nil {
		return err
	}
	return s.fullFrom(want, have, nil, nil)
}

// fullFrom is full over have, the sets as dumped (listCompared), except what was written
// after the dump began: the entries in since and the sets in sinceSets,
// for which the mirror is kept (readback.go).
func (s *setSyncer) fullFrom(want []IPSet, have map[string]*KernelSet, since map[string]map[Entry]bool, sinceSets map[string]bool) error {
	s.drift = nil
	var errs []error
	if have[SwapSetName] != nil {
		// Left by a crash between create and destroy.
		if err := s.k.Destroy(SwapSetName); err != nil && !errors.Is(err, ErrSetNotFound) {
			errs = append(errs, err)
		}
	}
	s.leftovers = leftoverSets(have, want)
	for _, w := range want {
		if sinceSets[w.Name] {
			// Created, replaced or destroyed since the dump: the mirror
			// is newer. Its repair waits for the next full sync.
			if s.mirror[w.Name] != nil {
				if err := s.apply(w); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		w.Entries = normalize(w.Type, w.Entries)
		ks := have[w.Name]
		if ks != nil && ks.unchanged {
			// The kernel held the mirror's entries when the read began,
			// and every entry written since is the mirror's: the mirror
			// is the kernel's (listCompared). A set destroyed or replaced
			// since is in sinceSets, above.
			var err error
			switch {
			case s.mirror[w.Name] == nil:
				err = fmt.Errorf("ipset %s: read as the mirror had it, and no longer mirrored", w.Name)
			case mismatch(ks, &w, len(w.Entries)) == 0:
				err = s.apply(w)
			default:
				// The plan needs another shape (a maxelem grown or
				// shrunk): replaced or created again from the plan's
				// entries, which needs none of the kernel's.
				err = s.ensure(&w, ks)
			}
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if written := since[w.Name]; ks != nil && len(written) > 0 {
			ks = s.asMirrored(ks, written)
		}
		if prev := s.mirror[w.Name]; prev != nil {
			switch {
			case !prev.matches(ks):
				s.drift.Add(DriftIPSet, 1)
				s.log.Info("repairing ipset destroyed or replaced outside the proxy", zap.String("set", w.Name))
			default:
				missing, extra, _ := diffSet(w.Type, ks.Entries, prev.entries)
				if n := len(missing) + len(extra); n > 0 {
					s.drift.Add(DriftIPSetEntry, n)
					s.log.Info("repairing ipset entries changed outside the proxy", zap.String("set", w.Name),
						zap.Int("deleted", len(missing)), zap.Int("added", len(extra)))
				}
			}
		}
		if err := s.ensure(&w, ks); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensure makes the kernel's set w.Name (ks, nil when missing) one of w's
// shape holding w's entries: adopted in place, replaced, or created.
func (s *setSyncer) ensure(w *IPSet, ks *KernelSet) error {
	if ks != nil {
		m := mismatch(ks, w, len(w.Entries))
		switch {
		case m == 0:
			s.mirror[w.Name] = &mirrorSet{spec: specOf(w), maxElem: ks.MaxElem, entries: normalize(w.Type, ks.Entries)}
			return s.apply(*w)
		case m.swappable():
			return s.replace(w, m)
		}
		if err := s.k.Destroy(w.Name); err != nil {
			return fmt.Errorf("ipset %s: the kernel's is %s, the plan needs %s: %s, which ipset swap cannot change, and destroying it failed: %w: %w",
				w.Name, ks.CreateOptions(), plannedOptions(w), m.differ(), ErrSetMismatch, err)
		}
		s.log.Info("replaced ipset of another type or family", zap.String("set", w.Name),
			zap.String("was", ks.CreateOptions()), zap.String("now", plannedOptions(w)))
	}
	maxElem := MaxElemFor(len(w.Entries))
	if err := s.k.Create(*w, maxElem); err != nil {
		return err
	}
	s.mirror[w.Name] = &mirrorSet{spec: specOf(w), maxElem: hashMaxElem(w.Type, maxElem)}
	return s.apply(*w)
}

// replace puts a set of w's shape, already holding w's entries, in place of
// the kernel's set w.Name, with no window: it is created as SwapSetName,
// filled, exchanged with `ipset swap` (rules hold the set by index, so they
// match the new contents from that instant), and the old set, now under
// SwapSetName, is destroyed. w.Entries must be normalized.
func (s *setSyncer) replace(w *IPSet, why setMismatch) error {
	maxElem := MaxElemFor(len(w.Entries))
	s.log.Info("replacing ipset through ipset swap", zap.String("set", w.Name), zap.Stringer("differs", why),
		zap.String("now", plannedOptions(w)), zap.Int("entries", len(w.Entries)))
	fail := func(err error) error {
		return fmt.Errorf("replace ipset %s (%s) through %s: %w", w.Name, why.differ(), SwapSetName, err)
	}
	if err := s.k.Destroy(SwapSetName); err != nil && !errors.Is(err, ErrSetNotFound) {
		return fail(err)
	}
	tmp := IPSet{Name: SwapSetName, Type: w.Type, Family: w.Family}
	if err := s.k.Create(tmp, maxElem); err != nil {
		return fail(err)
	}
	var errs []error
	failed := map[Entry]bool{}
	if len(w.Entries) > 0 {
		if err := s.k.Add(tmp, w.Entries); err != nil {
			errs = append(errs, s.oneByOne(tmp, w.Entries, s.k.Add, failed)...)
		}
	}
	if err := s.k.Swap(SwapSetName, w.Name); err != nil {
		if derr := s.k.Destroy(SwapSetName); derr != nil {
			err = errors.Join(err, derr)
		}
		return fail(errors.Join(append(errs, err)...))
	}
	s.swaps++
	entries := w.Entries
	if len(failed) > 0 {
		entries = slices.DeleteFunc(slices.Clone(entries), func(e Entry) bool { return failed[e] })
	}
	s.mirror[w.Name] = &mirrorSet{spec: specOf(w), maxElem: hashMaxElem(w.Type, maxElem), entries: entries}
	if err := s.k.Destroy(SwapSetName); err != nil {
		errs = append(errs, fmt.Errorf("destroy the set swapped out: %w", err))
	}
	if len(errs) > 0 {
		return fail(errors.Join(errs...))
	}
	return nil
}

// partial applies the entry differences between the plan and the mirror,
// with no dump. A planned set missing from the mirror is created. A hash
// set the plan outgrows is replaced through `ipset swap` by one with a
// larger maxelem (the mirror knows its maxelem). Sets whose type changed,
// and sets no longer planned, wait for the next full sync.
func (s *setSyncer) partial(want []IPSet) error {
	var errs []error
	for _, w := range want {
		m := s.mirror[w.Name]
		switch {
		case m == nil:
			maxElem := MaxElemFor(len(w.Entries))
			if err := s.k.Create(w, maxElem); err != nil && !errors.Is(err, ErrSetExists) {
				errs = append(errs, err)
				continue
			} else if err != nil {
				// Someone else created it: its content is unknown without a
				// dump, so resync it entry by entry at the next full sync, and
				// add what we need now.
				errs = append(errs, fmt.Errorf("ipset %s appeared outside the proxy: %w", w.Name, err))
			}
			s.mirror[w.Name] = &mirrorSet{spec: specOf(&w), maxElem: hashMaxElem(w.Type, maxElem)}
			s.wroteSet(w.Name)
		case m.spec.Type != w.Type || m.spec.Family != w.Family:
			errs = append(errs, fmt.Errorf("ipset %s: type change to %s %s needs a full sync: %w", w.Name, w.Type, w.Family, ErrSetMismatch))
			continue
		case m.maxElem != 0 && len(w.Entries) > int(m.maxElem):
			if w.Entries = normalize(w.Type, w.Entries); len(w.Entries) > int(m.maxElem) {
				s.wroteSet(w.Name)
				if err := s.replace(&w, mismatchMaxElem); err != nil {
					errs = append(errs, err)
				}
				continue
			}
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
	given := w.Entries
	if sameSlice(m.planned, given) && m.spec.Comment == w.Comment {
		// The planner patches a changed set into a new slice and hands an
		// unchanged one on as it was: no diff of every entry.
		return nil
	}
	m.planned = nil
	add, del, norm := diffSet(w.Type, m.entries, w.Entries)
	w.Entries = norm
	if len(add) == 0 && len(del) == 0 {
		m.planned = given
		return nil
	}
	s.wrote(w.Name, add, del)
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
	m.spec = specOf(&w)
	m.entries, m.summed = next, false
	if len(errs) == 0 {
		m.planned = given
	}
	return errors.Join(errs...)
}

// sameSlice reports whether a and b are the same slice: the same first
// element and length, and not nil.
func sameSlice(a, b []Entry) bool {
	return a != nil && b != nil && len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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
// i.e. sets the proxy created or adopted and no longer plans, and then the
// leftovers the last full sync found. A set of the mirror still referenced
// stays in the mirror and is retried at the next full sync; a leftover a
// rule still holds (a chain the proxy does not own) is left alone.
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
		s.wroteSet(name)
		if err := s.k.Destroy(name); err != nil && !errors.Is(err, ErrSetNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(s.mirror, name)
	}
	for _, name := range s.leftovers {
		if planned[name] || s.mirror[name] != nil {
			continue
		}
		switch err := s.k.Destroy(name); {
		case err == nil:
			s.log.Info("destroyed ipset the plan does not use", zap.String("set", name))
		case errors.Is(err, ErrSetReferenced):
			s.log.Debug("ipset the plan does not use is still referenced; left alone", zap.String("set", name))
		case !errors.Is(err, ErrSetNotFound):
			errs = append(errs, err)
		}
	}
	s.leftovers = nil
	return errors.Join(errs...)
}

// cleanup destroys the named sets that exist, and SwapSetName, and nothing
// else.
func (s *setSyncer) cleanup(names []string) error {
	have, err := s.k.ListAll()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range append(slices.Clone(names), SwapSetName) {
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

// leftoverSets are the sets of have named as one of SetSpecs in some family
// that want does not name, sorted.
func leftoverSets(have map[string]*KernelSet, want []IPSet) []string {
	planned := make(map[string]bool, len(want))
	for _, w := range want {
		planned[w.Name] = true
	}
	var out []string
	for _, fam := range []string{FamilyIPv4, FamilyIPv6} {
		for _, spec := range SetSpecs {
			if n := SetName(spec.Name, fam); have[n] != nil && !planned[n] {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

func specOf(w *IPSet) IPSet {
	return IPSet{Name: w.Name, Type: w.Type, Family: w.Family, Comment: w.Comment}
}

func hashMaxElem(typ string, maxElem uint32) uint32 {
	if typ == TypeBitmapPort {
		return 0
	}
	return maxElem
}
