package informers

import (
	"context"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestNodeAddressCacheRemembersDeleted: a Node that leaves the API is
// remembered, with when it was last seen, for the grace period, across a
// restart (Load), and then forgotten (issue 14, item 4: a deleted Node was
// forgotten at once, and a Service with its address as externalIP was
// bound on every node, so that its kubelet could never register it again).
func TestNodeAddressCacheRemembersDeleted(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a1, a2, a3 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	c := NewNodeAddressCache(dir, 24*time.Hour)
	c.now = clock
	if err := c.Set(map[string][]netip.Addr{"n1": {a1}, "n2": {a2}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if err := c.Set(map[string][]netip.Addr{"n1": {a1}}); err != nil { // n2 deleted
		t.Fatal(err)
	}
	deletedAt := now
	want := []model.Node{{Name: "n2", Addresses: []netip.Addr{a2}, LastSeen: deletedAt}}
	if got := c.Remembered(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Remembered = %+v, want %+v", got, want)
	}
	f, err := ReadNodeAddresses(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !f.LastSeen["n2"].Equal(deletedAt) || len(f.Nodes["n2"]) != 1 {
		t.Fatalf("file %+v: n2 not remembered", f)
	}
	if got := f.Protected(now.Add(23*time.Hour), 24*time.Hour); len(got) != 2 {
		t.Errorf("file protects %+v within the grace period, want n1 and n2", got)
	}
	if got := f.Protected(now.Add(24*time.Hour), 24*time.Hour); len(got) != 1 || got[0].Name != "n1" {
		t.Errorf("file protects %+v after the grace period, want n1", got)
	}

	// A restart: the new cache loads the file. n3 was added and n1
	// deleted while no proxy ran: n1 is deleted as of the first Set.
	now = now.Add(2 * time.Hour)
	c2 := NewNodeAddressCache(dir, 24*time.Hour)
	c2.now = clock
	if err := c2.Load(); err != nil {
		t.Fatal(err)
	}
	if got := c2.Protected(); len(got) != 2 || got[0].Name != "n1" || got[1].Name != "n2" || got[1].LastSeen.IsZero() {
		t.Fatalf("before the first Set the cache protects %+v, want n1 and n2 (deleted)", got)
	}
	if err := c2.Set(map[string][]netip.Addr{"n3": {a3}}); err != nil {
		t.Fatal(err)
	}
	got := c2.Remembered()
	if len(got) != 2 || got[0].Name != "n1" || !got[0].LastSeen.Equal(now) || got[1].Name != "n2" || !got[1].LastSeen.Equal(deletedAt) {
		t.Fatalf("after the restart Remembered = %+v", got)
	}
	// n2 comes back: in the API again, no longer remembered as deleted.
	if err := c2.Set(map[string][]netip.Addr{"n2": {a2}, "n3": {a3}}); err != nil {
		t.Fatal(err)
	}
	if got := c2.Remembered(); len(got) != 1 || got[0].Name != "n1" {
		t.Fatalf("n2 back: Remembered = %+v", got)
	}
	// Past the grace period: forgotten, also in the file.
	now = now.Add(25 * time.Hour)
	if got := c2.Remembered(); len(got) != 0 {
		t.Fatalf("past the grace period Remembered = %+v", got)
	}
	if err := c2.Set(map[string][]netip.Addr{"n2": {a2}, "n3": {a3}}); err != nil {
		t.Fatal(err)
	}
	if f, _ := ReadNodeAddresses(dir); len(f.Nodes) != 2 || len(f.LastSeen) != 0 {
		t.Errorf("file after the grace period: %+v", f)
	}
}

// TestWatcherRemembersNodesDeletedWhileDown: `run` reads the cache at
// start; a Node the earlier run knew and the API no longer lists is one of
// Nodes (for the guard) from the first sync on.
func TestWatcherRemembersNodesDeletedWhileDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	if err := NewNodeAddressCache(dir, time.Hour).Set(map[string][]netip.Addr{"a": {netip.MustParseAddr("192.168.0.1")},
		"gone": {netip.MustParseAddr("192.168.0.9")}}); err != nil {
		t.Fatal(err)
	}
	c := NewNodeAddressCache(dir, time.Hour)
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(fake.NewClientset(testNode("a", "192.168.0.1")), "a", c, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("no cache sync")
	}
	nodes, _ := w.Nodes()
	if len(nodes) != 2 || nodes[1].Name != "gone" || nodes[1].LastSeen.IsZero() || nodes[1].Addresses[0] != netip.MustParseAddr("192.168.0.9") {
		t.Fatalf("Nodes = %+v, want a and the deleted gone", nodes)
	}
	if f, _ := ReadNodeAddresses(dir); f.LastSeen["gone"].IsZero() {
		t.Errorf("file %+v: gone not recorded as deleted", f)
	}
}

// TestNodeAddressCacheAPIServers: the API server's endpoints are recorded
// and read back by the next run (its startup pass protects them before
// the API server answers).
func TestNodeAddressCacheAPIServers(t *testing.T) {
	dir := t.TempDir()
	c := NewNodeAddressCache(dir, time.Hour)
	if err := c.SetAPIServers([]netip.Addr{netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.10")}); err != nil {
		t.Fatal(err)
	}
	c2 := NewNodeAddressCache(dir, time.Hour)
	if err := c2.Load(); err != nil {
		t.Fatal(err)
	}
	if got := c2.APIServers(); len(got) != 2 || got[0] != netip.MustParseAddr("10.0.0.10") {
		t.Errorf("APIServers after Load = %v", got)
	}
}
