package ipvs

import (
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Exported for the external tests (package ipvs_test), which use
// ipvstest's table and so cannot live inside this package.

var (
	SameRealServers = sameRealServers
	SameService     = sameService
	DigestOf        = digestOf
	NewChangedSet   = newChangedSet
)

const (
	CreateBatch      = createBatch
	SmallRealServers = smallRealServers
)

type (
	GraceKey     = graceKey
	ServiceIndex = serviceIndex
)

// The reconciler's mirror, seen from the external tests.

func (r *Reconciler) Mirror() map[Key]*mirrorVS                       { return r.mirror }
func (r *Reconciler) Grace() map[graceKey]time.Time                   { return r.grace }
func (r *Reconciler) ByService() serviceIndex                         { return r.byService }
func (r *Reconciler) Reading() bool                                   { return r.reading() }
func (m *mirrorVS) Shared() bool                                      { return m.shared }
func (m *mirrorVS) VS() VirtualServer                                 { return m.vs }
func (m *mirrorVS) Service() model.ServicePortName                    { return m.service }
func (m *mirrorVS) Sum() Digest                                       { return m.sum }
func (m *mirrorVS) Summed() bool                                      { return m.summed }
func (m *mirrorVS) Digest() Digest                                    { return m.digest() }
func (m *mirrorVS) Programmed(d *VirtualServer) bool                  { return m.programmed(d) }
func (x serviceIndex) Move(k Key, was, service model.ServicePortName) { x.move(k, was, service) }
func (s changedSet) Has(n model.ServicePortName) bool                 { return s.has(n) }
