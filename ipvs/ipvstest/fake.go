// Package ipvstest holds an in-memory IPVS table for other packages' unit
// tests. It never touches the kernel; the kernel's table is ipvs/kernel.
package ipvstest

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// FakeTable is an in-memory IPVS table for unit tests. It keeps state like
// the kernel does (adding twice fails with ErrExists, deleting what is not
// there with ErrNotFound), counts how many calls changed it, and prints
// itself in `ipvsadm -S -n` form. It is not a call recorder: tests assert
// on the resulting table.
type FakeTable struct {
	mu  sync.Mutex
	svc map[ipvs.Key]*fakeService
	// Mutations counts successful calls that changed the table.
	Mutations int
	// Dumps counts Services and RealServers calls.
	Dumps int
	// Fail, when set, is asked before every mutating call; a non-nil error
	// fails the call without changing anything. op is "AddService",
	// "UpdateService", "DelService", "AddRealServer", "UpdateRealServer" or
	// "DelRealServer".
	Fail func(op string, k ipvs.Key) error
}

type fakeService struct {
	vs    ipvs.VirtualServer // without real servers
	dests []ipvs.RealServerStatus
}

var _ ipvs.Table = (*FakeTable)(nil)

// NewFakeTable returns an empty table holding vss (with their real servers).
func NewFakeTable(vss ...ipvs.VirtualServer) *FakeTable {
	f := &FakeTable{svc: make(map[ipvs.Key]*fakeService)}
	for _, vs := range vss {
		s := &fakeService{vs: vs}
		s.vs.RealServers = nil
		for _, rs := range vs.RealServers {
			s.dests = append(s.dests, ipvs.RealServerStatus{RealServer: rs})
		}
		f.svc[vs.Key] = s
	}
	return f
}

// SetConnections sets the connection counters of one real server, as
// traffic would. It reports whether the real server exists.
func (f *FakeTable) SetConnections(k ipvs.Key, rs ipvs.RealServer, active, inactive int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.svc[k]
	if !ok {
		return false
	}
	i := s.find(rs)
	if i < 0 {
		return false
	}
	s.dests[i].ActiveConns, s.dests[i].InactiveConns = active, inactive
	return true
}

// String is the table in `ipvsadm -S -n` form.
func (f *FakeTable) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ipvs.Save(f.snapshot())
}

func (f *FakeTable) snapshot() []ipvs.VirtualServer {
	out := make([]ipvs.VirtualServer, 0, len(f.svc))
	for _, s := range f.svc {
		vs := s.vs
		// The kernel adds a real server at the head of its service's
		// list (list_add_rcu in __ip_vs_update_dest) and lists from the
		// head: the newest first.
		vs.RealServers = make([]ipvs.RealServer, 0, len(s.dests))
		for _, d := range slices.Backward(s.dests) {
			vs.RealServers = append(vs.RealServers, d.RealServer)
		}
		out = append(out, vs)
	}
	slices.SortFunc(out, func(a, b ipvs.VirtualServer) int { return ipvs.CompareKeys(a.Key, b.Key) })
	return out
}

func (s *fakeService) find(rs ipvs.RealServer) int {
	return slices.IndexFunc(s.dests, func(d ipvs.RealServerStatus) bool {
		return d.Address == rs.Address && d.Port == rs.Port
	})
}

func (f *FakeTable) fail(op string, k ipvs.Key) error {
	if f.Fail == nil {
		return nil
	}
	return f.Fail(op, k)
}

// Services implements Table.
func (f *FakeTable) Services() ([]ipvs.VirtualServer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Dumps++
	return f.snapshot(), nil
}

// EachService implements Walker over a snapshot of the table, as
// Services sees it, with one real-server buffer for all, cleared after
// each call as the kernel's is overwritten: a caller that keeps it sees
// its list emptied.
func (f *FakeTable) EachService(fn func(vs *ipvs.VirtualServer)) error {
	vss, _ := f.Services()
	var buf []ipvs.RealServer
	for i := range vss {
		vs := vss[i]
		buf = append(buf[:0], vs.RealServers...)
		vs.RealServers = buf
		fn(&vs)
		clear(buf)
	}
	return nil
}

// RealServers implements Table.
func (f *FakeTable) RealServers(k ipvs.Key) ([]ipvs.RealServerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Dumps++
	s, ok := f.svc[k]
	if !ok {
		return nil, fmt.Errorf("ipvsadm -L -n %s: %w", k, ipvs.ErrNotFound)
	}
	return slices.Clone(s.dests), nil
}

// AllRealServers implements CounterReader: one dump.
func (f *FakeTable) AllRealServers() (map[ipvs.Key][]ipvs.RealServerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Dumps++
	out := make(map[ipvs.Key][]ipvs.RealServerStatus, len(f.svc))
	for k, s := range f.svc {
		out[k] = slices.Clone(s.dests)
	}
	return out, nil
}

var _ ipvs.CounterReader = (*FakeTable)(nil)

// AddService implements Table.
func (f *FakeTable) AddService(vs ipvs.VirtualServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("AddService", vs.Key); err != nil {
		return err
	}
	if _, ok := f.svc[vs.Key]; ok {
		return fmt.Errorf("ipvsadm -A %s: %w", vs.Key, ipvs.ErrExists)
	}
	vs.RealServers = nil
	vs.Flags &^= ipvs.FlagHashed
	f.svc[vs.Key] = &fakeService{vs: vs}
	f.Mutations++
	return nil
}

// UpdateService implements Table.
func (f *FakeTable) UpdateService(vs ipvs.VirtualServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("UpdateService", vs.Key); err != nil {
		return err
	}
	s, ok := f.svc[vs.Key]
	if !ok {
		return fmt.Errorf("ipvsadm -E %s: %w", vs.Key, ipvs.ErrNotFound)
	}
	vs.RealServers = nil
	vs.Flags &^= ipvs.FlagHashed
	s.vs = vs
	f.Mutations++
	return nil
}

// DelService implements Table.
func (f *FakeTable) DelService(k ipvs.Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("DelService", k); err != nil {
		return err
	}
	if _, ok := f.svc[k]; !ok {
		return fmt.Errorf("ipvsadm -D %s: %w", k, ipvs.ErrNotFound)
	}
	delete(f.svc, k)
	f.Mutations++
	return nil
}

// AddRealServer implements Table.
func (f *FakeTable) AddRealServer(k ipvs.Key, rs ipvs.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("AddRealServer", k); err != nil {
		return err
	}
	s, ok := f.svc[k]
	if !ok {
		return fmt.Errorf("ipvsadm -a %s: %w", k, ipvs.ErrNotFound)
	}
	if s.find(rs) >= 0 {
		return fmt.Errorf("ipvsadm -a %s -r %s: %w", k, netip.AddrPortFrom(rs.Address, rs.Port), ipvs.ErrExists)
	}
	s.dests = append(s.dests, ipvs.RealServerStatus{RealServer: rs})
	f.Mutations++
	return nil
}

// AddServices implements Table with AddService for each.
func (f *FakeTable) AddServices(vss []ipvs.VirtualServer, each func(i int, err error)) {
	for i, vs := range vss {
		each(i, f.AddService(vs))
	}
}

// AddRealServers implements Table with AddRealServer for each.
func (f *FakeTable) AddRealServers(k ipvs.Key, rss []ipvs.RealServer, each func(i int, err error)) {
	for i, rs := range rss {
		each(i, f.AddRealServer(k, rs))
	}
}

// UpdateRealServer implements Table.
func (f *FakeTable) UpdateRealServer(k ipvs.Key, rs ipvs.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("UpdateRealServer", k); err != nil {
		return err
	}
	s, ok := f.svc[k]
	if !ok {
		return fmt.Errorf("ipvsadm -e %s: %w", k, ipvs.ErrNotFound)
	}
	i := s.find(rs)
	if i < 0 {
		return fmt.Errorf("ipvsadm -e %s -r %s: %w", k, netip.AddrPortFrom(rs.Address, rs.Port), ipvs.ErrNotFound)
	}
	s.dests[i].Weight = rs.Weight
	f.Mutations++
	return nil
}

// DelRealServer implements Table.
func (f *FakeTable) DelRealServer(k ipvs.Key, rs ipvs.RealServer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("DelRealServer", k); err != nil {
		return err
	}
	s, ok := f.svc[k]
	if !ok {
		return fmt.Errorf("ipvsadm -d %s: %w", k, ipvs.ErrNotFound)
	}
	i := s.find(rs)
	if i < 0 {
		return fmt.Errorf("ipvsadm -d %s -r %s: %w", k, netip.AddrPortFrom(rs.Address, rs.Port), ipvs.ErrNotFound)
	}
	s.dests = slices.Delete(s.dests, i, i+1)
	f.Mutations++
	return nil
}

// Has says whether the table holds the virtual server k.
func (f *FakeTable) Has(k ipvs.Key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.svc[k]
	return ok
}

// Len is the number of virtual servers in the table.
func (f *FakeTable) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.svc)
}
