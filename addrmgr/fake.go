package addrmgr

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// FakeLink is an in-memory kube-ipvs0 for unit tests: it holds addresses
// as the kernel does and prints them as `ip -o addr show dev kube-ipvs0`
// would list them (one prefix per line). Not a call recorder.
type FakeLink struct {
	mu    sync.Mutex
	addrs map[netip.Prefix]bool
	// Dumps counts Addrs calls; Mutations counts successful changes.
	Dumps, Mutations int
	// OnAdd, when set, sees every address just before it is added and may
	// fail the call.
	OnAdd func(netip.Prefix) error
}

var _ Link = (*FakeLink)(nil)

// NewFakeLink returns a device holding ps.
func NewFakeLink(ps ...netip.Prefix) *FakeLink {
	f := &FakeLink{addrs: map[netip.Prefix]bool{}}
	for _, p := range ps {
		f.addrs[p] = true
	}
	return f
}

// Put adds an address behind the manager's back, as an operator would.
func (f *FakeLink) Put(p netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[p] = true
}

// String lists the addresses, sorted, one per line.
func (f *FakeLink) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ps := make([]netip.Prefix, 0, len(f.addrs))
	for p := range f.addrs {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, comparePrefix)
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintln(&b, p)
	}
	return b.String()
}

// Addrs implements Link.
func (f *FakeLink) Addrs() ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Dumps++
	out := make([]netip.Prefix, 0, len(f.addrs))
	for p := range f.addrs {
		out = append(out, p)
	}
	return out, nil
}

// AddAddr implements Link.
func (f *FakeLink) AddAddr(p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.OnAdd != nil {
		if err := f.OnAdd(p); err != nil {
			return err
		}
	}
	if !f.addrs[p] {
		f.addrs[p] = true
		f.Mutations++
	}
	return nil
}

// DelAddr implements Link.
func (f *FakeLink) DelAddr(p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addrs[p] {
		delete(f.addrs, p)
		f.Mutations++
	}
	return nil
}
