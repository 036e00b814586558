package iptables

import (
	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Exported for the external tests (package iptables_test), which use
// iptablestest's fakes and so cannot live inside this package.

var (
	Normalize        = normalize
	DiffEntries      = diffEntries
	DiffSet          = diffSet
	RenderRules      = renderRules
	FormatEntry      = formatEntry
	Mismatch         = mismatch
	NewSyncerForTest = newSyncer
)

var (
	ParseSaveAll = parseSaveAll
	SortSets     = sortSets
	SaveWords    = saveWords
	OurJumps     = ourJumps
	ListCompared = listCompared
)

// The syncer's internals, seen from the external tests.

// RuleRunners are the syncer's runners, by family, once created.
func (s *Syncer) RuleRunners() map[string]RuleRunner {
	m := make(map[string]RuleRunner, len(s.chains))
	for _, c := range s.chains {
		m[c.family] = c.r
	}
	return m
}

func (s *Syncer) SetFallbacks() int                               { return s.sets.fallbacks }
func (s *Syncer) SetSwaps() int                                   { return s.sets.swaps }
func (s *Syncer) SetKernel() SetKernel                            { return s.sets.k }
func (s *Syncer) SetDigests() map[string]setDigest                { return s.sets.digests() }
func (s *Syncer) MirrorEntries(set string) []Entry                { return s.sets.mirror[set].entries }
func (s *Syncer) NewRunner() func(string) (RuleRunner, error)     { return s.newRunner }
func (s *Syncer) SetNewRunner(f func(string) (RuleRunner, error)) { s.newRunner = f }
func (rb *Readback) Sets() map[string]*KernelSet                  { return rb.sets }
func (ks *KernelSet) Unchanged() bool                             { return ks.unchanged }

func (s *Syncer) SetLogger(log *zap.Logger) { s.log = log }

// LastDrift is what the last Full found changed by others: its Result's
// Drift, for the tests that sync through syncErr.
func (a *Syncer) LastDrift() layer.Drift {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.drift
}
