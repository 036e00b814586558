//go:build kernel

package applier

import (
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// TestKernelListsRealServersNewestFirst: the kernel lists a virtual
// server's real servers newest first (list_add_rcu at the head of the
// service's list), the order ipvstest.FakeTable copies and the one a mirror
// entry adopted from a dump has (ipvs shareRS, sameRealServers).
func TestKernelListsRealServersNewestFirst(t *testing.T) {
	b := newKBed(t)
	p := b.open(ipvs.Options{})
	st := b.plan(testCluster())
	b.full(p, st)
	kernel, err := p.table.Services()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[ipvs.Key][]ipvs.RealServer{}
	for _, vs := range kernel {
		listed[vs.Key] = vs.RealServers
	}
	checked := 0
	for _, d := range st.VirtualServers {
		got, ok := listed[d.Key]
		if !ok || len(d.RealServers) < 2 {
			continue
		}
		want := slices.Clone(d.RealServers)
		slices.Reverse(want)
		if !slices.Equal(got, want) {
			t.Errorf("%v: the kernel lists %v, want the plan's %v reversed", d.Key, got, d.RealServers)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no virtual server with two real servers to check")
	}
	t.Logf("%d virtual servers list their real servers newest first", checked)
}
