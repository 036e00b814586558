package informers

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

var breakdownGOGC = flag.Int("informers.listgogc", 50, "BenchmarkMemoryBreakdown: GOGC while listing, planning and applying (50, as run sets it)")

var breakdownHeap = flag.String("informers.heapprofile", "", "BenchmarkMemoryBreakdown: write a heap profile of the live set after the full sync to this file (with -test.memprofilerate)")

// BenchmarkMemoryBreakdown is what each piece of the daemon's live heap
// costs after its first full sync, and the process's peak RSS up to there,
// natively, at 10,000 and 20,000 Services of one EndpointSlice of 10
// endpoints each (the daemon benchmark's objects, daemonbench shape):
//
//   - cache-MiB: the informer caches (the real Watcher, StripUnused, lists
//     decoded from protobuf as the daemon's client decodes them);
//
//   - plan-MiB: the incremental plan (planner.Incremental: every Service's
//     claims and the State), built as a full sync builds it;
//
//   - mirror-MiB: the appliers' mirrors after applier.Full of that state
//     (the IPVS reconciler's mirror and index, the address manager's view,
//     the ipset mirror), over kernels that keep nothing (nopTable, nopLink,
//     nopSets), so the figure is the proxy's alone;
//
//   - live-MiB: the three together (the heap after a forced GC, less the
//     same before the lists were encoded: the encodings, encoded-MiB, are
//     dropped once listed and are no piece's);
//
//   - peak-RSS-MiB: VmHWM from before the Watcher started (reset after the
//     lists were encoded and their garbage returned to the OS) to the end
//     of the full sync, at run's GOGC=50; start-RSS-MiB the RSS at that
//     reset (the test binary, its encoded lists), peak-listed-MiB and
//     peak-planned-MiB the peak once the caches were filled and once the
//     plan was built. The encoded lists (what the API server would send)
//     are dropped once listed.
//
//     go test -run '^$' -bench MemoryBreakdown -benchtime 1x ./informers/
func BenchmarkMemoryBreakdown(b *testing.B) {
	for _, services := range breakdownSizes(b) {
		for _, m := range listModes {
			b.Run(fmt.Sprintf("services=%d/%s", services, m.name), func(b *testing.B) {
				for b.Loop() {
					breakdown(b, services, 10, m)
				}
			})
		}
	}
}

var breakdownServices = flag.String("informers.breakdown", "3000,10000,20000", "BenchmarkMemoryBreakdown: the numbers of Services, comma-separated")

func breakdownSizes(tb testing.TB) []int {
	var out []int
	for _, f := range strings.Split(*breakdownServices, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			tb.Fatalf("-informers.breakdown: %v", err)
		}
		out = append(out, n)
	}
	return out
}

// listMode is how the Watcher's informers get their initial lists.
type listMode struct {
	name string
	// watchList: the API server streams them (memServer.watchList).
	watchList bool
	// pageSize is newWatcher's: below 0 client-go's own list.
	pageSize int64
}

var listModes = []listMode{
	// client-go's list, as before PagedList: the whole list held decoded.
	{name: "list-unpaged", pageSize: -1},
	// PagedList: the daemon's path against an API server without
	// watch-list (before 1.34, or its WatchList gate off).
	{name: "list-paged", pageSize: DefaultPageSize},
	// The daemon's path against kube-apiserver 1.34+: client-go's
	// WatchListClient (on by default since client-go 0.35).
	{name: "watchlist", watchList: true, pageSize: DefaultPageSize},
}

func breakdown(b *testing.B, services, endpoints int, m listMode) {
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	sh := memShapes[0]
	// The base of the live pieces is the heap before the encodings: they
	// are dropped once listed, so a base that held them would take their
	// size off the caches.
	base := liveHeap()
	srv := &memServer{lists: memEncode(b, services, endpoints, sh), watchList: m.watchList}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := srv.client()
	runtime.GC()
	debug.FreeOSMemory()
	hwmReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	b.ReportMetric(float64(liveHeap()-base)/(1<<20), "encoded-MiB")
	baseRSS, _ := vmHWM()
	debug.SetGCPercent(*breakdownGOGC)

	w := startWatcherOn(ctx, b, client, services, sh.nodes, StripUnused, m.pageSize)
	// The server's encodings are not the client's: drop them, as a real
	// client keeps nothing of a list once it has been decoded.
	srv.drop()
	hwmCache, _ := vmHWM()
	afterCache := liveHeap()
	b.ReportMetric(float64(srv.pages), "list-requests")

	o := planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Scheduler: "rr",
		MasqueradeBit: planner.DefaultMasqueradeBit}
	nodes, refusals := w.Nodes()
	inc := planner.NewIncremental(o, nodes, refusals)
	for _, k := range w.ServiceNames() {
		ports, eps, rs := w.Service(k)
		inc.Update(k, ports, eps, rs)
	}
	st := inc.State()
	hwmPlan, _ := vmHWM()
	afterPlan := liveHeap()

	mgr := addrmgr.NewManager(nopLink{}, guard.New(guard.Inputs{LocalAddrs: o.LocalAddrs, PodCIDRs: o.ClusterCIDRs}), nil)
	rules := iptables.NewSyncer(nopSets{}, func(string) (iptables.RuleRunner, error) { return iptablestest.NewFakeRunner(), nil }, nil)
	app := applier.New(ipvs.NewReconciler(nopTable{}, ipvs.Options{}), mgr, rules, nil)
	res, err := app.Full(&st, o.LocalAddrs)
	if err != nil {
		b.Fatal(err)
	}
	if err := res.Err(); err != nil {
		b.Fatal(err)
	}
	if res.IPVS.ServicesAdded != len(st.VirtualServers) {
		b.Fatalf("%d virtual servers added, %d planned", res.IPVS.ServicesAdded, len(st.VirtualServers))
	}
	afterApply := liveHeap()
	hwm, hwmErr := vmHWM()
	if *breakdownHeap != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", *breakdownHeap, services))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	runtime.KeepAlive(w)
	runtime.KeepAlive(inc)
	runtime.KeepAlive(app)

	mib := func(a, b uint64) float64 {
		if a < b {
			return 0
		}
		return float64(a-b) / (1 << 20)
	}
	b.ReportMetric(mib(afterCache, base), "cache-MiB")
	b.ReportMetric(mib(afterPlan, afterCache), "plan-MiB")
	b.ReportMetric(mib(afterApply, afterPlan), "mirror-MiB")
	b.ReportMetric(mib(afterApply, base), "live-MiB")
	if hwmErr == nil && hwmReset {
		b.ReportMetric(float64(baseRSS)/(1<<20), "start-RSS-MiB")
		b.ReportMetric(float64(hwmCache)/(1<<20), "peak-listed-MiB")
		b.ReportMetric(float64(hwmPlan)/(1<<20), "peak-planned-MiB")
		b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
	}
}

// nopTable is an IPVS table that accepts everything and holds nothing.
type nopTable struct{}

func (nopTable) Services() ([]ipvs.VirtualServer, error)               { return nil, nil }
func (nopTable) RealServers(ipvs.Key) ([]ipvs.RealServerStatus, error) { return nil, nil }
func (nopTable) AddService(ipvs.VirtualServer) error                   { return nil }
func (nopTable) UpdateService(ipvs.VirtualServer) error                { return nil }
func (nopTable) DelService(ipvs.Key) error                             { return nil }
func (nopTable) AddRealServer(ipvs.Key, ipvs.RealServer) error         { return nil }
func (nopTable) AddServices(vss []ipvs.VirtualServer, each func(int, error)) {
	for i := range vss {
		each(i, nil)
	}
}
func (nopTable) AddRealServers(_ ipvs.Key, rss []ipvs.RealServer, each func(int, error)) {
	for i := range rss {
		each(i, nil)
	}
}
func (nopTable) UpdateRealServer(ipvs.Key, ipvs.RealServer) error { return nil }
func (nopTable) DelRealServer(ipvs.Key, ipvs.RealServer) error    { return nil }

// nopLink is a kube-ipvs0 that accepts everything and holds nothing.
type nopLink struct{}

func (nopLink) Addrs() ([]netip.Prefix, error) { return nil, nil }
func (nopLink) AddAddr(netip.Prefix) error     { return nil }
func (nopLink) AddAddrs(ps []netip.Prefix, each func(int, error)) {
	for i := range ps {
		each(i, nil)
	}
}
func (nopLink) DelAddr(netip.Prefix) error { return nil }

// nopSets is an ipset kernel that accepts everything and holds nothing.
type nopSets struct{}

func (nopSets) ListAll() (map[string]*iptables.KernelSet, error) {
	return map[string]*iptables.KernelSet{}, nil
}
func (nopSets) Create(iptables.IPSet, uint32) error        { return nil }
func (nopSets) Destroy(string) error                       { return nil }
func (nopSets) Swap(string, string) error                  { return nil }
func (nopSets) Add(iptables.IPSet, []iptables.Entry) error { return nil }
func (nopSets) Del(iptables.IPSet, []iptables.Entry) error { return nil }

// BenchmarkIsServiceIP is one Watcher.IsServiceIP among 10,000 cached
// Services, for an address that is no Service's: "changed" the first
// question after a Service changed (one scan of the cache gathers the
// ClusterIPs), "cached" the next ones. A full sync asks about the API
// server's addresses and the resolvers, a few times; no index by ClusterIP
// is kept for it.
//
//	go test -run '^$' -bench IsServiceIP -benchmem ./informers/
func BenchmarkIsServiceIP(b *testing.B) {
	const services = 10000
	sh := memShapes[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatcher(ctx, b, memEncode(b, services, 1, sh), services, sh.nodes, StripUnused)
	a := netip.MustParseAddr("10.0.2.100")
	for _, changed := range []bool{true, false} {
		b.Run(map[bool]string{true: "changed", false: "cached"}[changed], func(b *testing.B) {
			for b.Loop() {
				if changed {
					w.mu.Lock()
					w.svcGen++
					w.svcVIPsOK = false
					w.mu.Unlock()
				}
				if w.IsServiceIP(a) {
					b.Fatal("not a Service IP")
				}
			}
		})
	}
}
