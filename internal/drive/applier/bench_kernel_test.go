//go:build kernel

package applier

// Benchmarks of the kernel appliers against the kernel's own floor, in the
// same run: the same planner.State loaded by `ipvsadm -R`, `ip -batch` and
// `ipset restore`. Every load from empty runs in a fresh ktest node
// namespace (the kernel keeps deleted real servers in a per-namespace trash
// list that slows later adds).
//
//	go test -c -tags kernel -o /tmp/applier.test ./internal/drive/applier/
//	go run ./test/vmtest/cmd/vmrun -- /tmp/applier.test -test.run '^$' \
//	    -test.bench KernelSync -test.benchtime 1x [-applier.services 10000 -applier.endpoints 5]

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

var (
	benchServices  = flag.Int("applier.services", 10000, "services in BenchmarkKernelSync")
	benchEndpoints = flag.Int("applier.endpoints", 5, "endpoints per service in BenchmarkKernelSync")
	benchPartials  = flag.Int("applier.partials", 20, "partial syncs timed per repetition")
)

func benchOptions() planner.Options {
	return planner.Options{
		NodeName: "node-0", LocalAddrs: []netip.Addr{ktest.NodeIPv4}, Scheduler: "rr",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}, MasqueradeBit: planner.DefaultMasqueradeBit,
	}
}

// timeIn runs f in a fresh node namespace (prepare first, untimed) and
// returns how long f took; the namespace is deleted before it returns.
// With a stack, prepare opens it and f gets it.
func timeIn(b *testing.B, prepare func() error, f func(*stack) error) time.Duration {
	b.Helper()
	node := ktest.NewNode(b)
	defer node.Close()
	var d time.Duration
	err := node.Do(func() error {
		var s *stack
		if prepare != nil {
			if err := prepare(); err != nil {
				return err
			}
		} else {
			var err error
			if s, err = openStack(); err != nil {
				return err
			}
			defer s.close()
		}
		start := time.Now()
		err := f(s)
		d = time.Since(start)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func execStdin(in []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func addrBatch(ps []netip.Prefix) []byte {
	var buf bytes.Buffer
	for _, p := range ps {
		fmt.Fprintf(&buf, "address add %s dev %s\n", p, addrmgr.Device)
	}
	return buf.Bytes()
}

// stack is the whole proxy stack of one namespace.
type stack struct {
	app   *Applier
	rec   *ipvs.Reconciler
	mgr   *addrmgr.Manager
	rules *iptables.Syncer
	close func()
}

// openStack opens the whole proxy stack in the calling thread's namespace;
// close it before the namespace is deleted, or its sockets keep it alive.
func openStack() (*stack, error) {
	t, err := ipvskernel.Open()
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle()
	if err != nil {
		t.Close()
		return nil, err
	}
	rules, err := iptableskernel.NewSyncer(nil)
	if err != nil {
		t.Close()
		h.Close()
		return nil, err
	}
	ctx, stopWatch := context.WithCancel(context.Background())
	s := &stack{rules: rules, close: func() { stopWatch(); t.Close(); h.Close(); rules.Close() }}
	link, err := addrkernel.EnsureDevice(h)
	if err != nil {
		s.close()
		return nil, err
	}
	s.rec = ipvs.NewReconciler(t, ipvs.Options{})
	s.mgr = addrmgr.NewManager(link, guard.New(guard.Inputs{LocalAddrs: []netip.Addr{ktest.NodeIPv4}}), nil)
	// As the daemon: the manager follows kube-ipvs0 between dumps.
	if err := s.mgr.Watch(ctx, nil); err != nil {
		s.close()
		return nil, err
	}
	s.app = New(s.rec, s.mgr, rules, nil)
	return s, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkKernelSync measures, per repetition and each from empty in a
// fresh namespace: the IPVS reconciler's Full vs `ipvsadm -R` of the same
// table, the address manager's binds vs `ip -batch`, the ipset layer's Full
// vs `ipset restore`, the whole applier's Full vs the sum of the three
// floors; then, after that Full, the mean of -applier.partials partial syncs
// of one changed endpoint. It reports every time in ms and the ratios.
func BenchmarkKernelSync(b *testing.B) {
	opts := benchOptions()
	st := planner.Plan(benchCluster(*benchServices, *benchEndpoints, -1, ktest.NodeIPv4), opts)
	st2 := planner.Plan(benchCluster(*benchServices, *benchEndpoints, *benchServices/2, ktest.NodeIPv4), opts)
	changed := types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("svc-%05d", *benchServices/2)}
	nodeAddrs := []netip.Addr{ktest.NodeIPv4}
	rs, entries := 0, 0
	for _, vs := range st.VirtualServers {
		rs += len(vs.RealServers)
	}
	for _, s := range st.IPSets {
		entries += len(s.Entries)
	}
	b.Logf("%d services × %d endpoints: %d virtual servers, %d real servers, %d addresses, %d ipset entries",
		*benchServices, *benchEndpoints, len(st.VirtualServers), rs, len(st.Addresses), entries)
	ipvsIn := []byte(ipvs.Save(st.VirtualServers))
	addrIn := addrBatch(st.Addresses)
	setIn := iptables.AppendSave(nil, st.IPSets)
	mkDevice := func() error {
		return execStdin(nil, "ip", "link", "add", addrmgr.Device, "type", "dummy")
	}
	none := func() error { return nil }

	var sum struct{ ipvs, ipvsadm, addr, ipBatch, sets, restore, full, partial time.Duration }
	// Progress on stderr as each figure is measured (b.Log prints only at
	// the end, and a TCG run of this size takes many minutes).
	progress := func(what string, d time.Duration) time.Duration {
		fmt.Fprintf(os.Stderr, "BenchmarkKernelSync: %-22s %v\n", what, d.Round(time.Millisecond))
		return d
	}
	b.ResetTimer()
	for range b.N {
		sum.ipvs += progress("ipvs reconciler Full", timeIn(b, nil, func(s *stack) error {
			res, err := s.rec.Full(ipvs.Desired{VirtualServers: st.VirtualServers, Own: ipvs.Ownership{NodeAddrs: nodeAddrs}})
			if err == nil {
				err = res.Err()
			}
			return err
		}))
		sum.ipvsadm += progress("ipvsadm -R", timeIn(b, none, func(*stack) error { return execStdin(ipvsIn, "ipvsadm", "-R") }))

		sum.addr += progress("addrmgr Bind", timeIn(b, nil, func(s *stack) error {
			if _, err := s.mgr.Dump(); err != nil {
				return err
			}
			return s.mgr.Bind(st.Addresses, nil).Err()
		}))
		sum.ipBatch += progress("ip -batch", timeIn(b, mkDevice, func(*stack) error { return execStdin(addrIn, "ip", "-batch", "-") }))

		sum.sets += progress("ipset netlink Full", timeIn(b, nil, func(s *stack) error {
			res, err := s.rules.Full(iptables.Desired{Sets: st.IPSets})
			if err == nil {
				err = res.Err()
			}
			return err
		}))
		sum.restore += progress("ipset restore", timeIn(b, none, func(*stack) error { return execStdin(setIn, "ipset", "restore") }))

		// The whole applier, then partial syncs in the same namespace.
		node := ktest.NewNode(b)
		err := node.Do(func() error {
			s, err := openStack()
			if err != nil {
				return err
			}
			defer s.close()
			app := s.app
			start := time.Now()
			res, err := app.Full(&st, nodeAddrs)
			if err == nil {
				err = res.Err()
			}
			sum.full += progress("applier Full", time.Since(start))
			if err != nil {
				return err
			}
			start = time.Now()
			var took Timings
			dumped := 0
			for i := range *benchPartials {
				want := &st2
				if i%2 == 1 {
					want = &st
				}
				res, err := app.Partial(want, changed)
				if err == nil {
					err = res.Err()
				}
				if err != nil {
					return err
				}
				if res.IPVS.Changes() == 0 {
					return fmt.Errorf("partial sync %d changed nothing", i)
				}
				if res.AddressesDumped {
					dumped++
				}
				took.Add(res.Took)
			}
			sum.partial += progress("applier Partial (mean)", time.Since(start)/time.Duration(*benchPartials))
			n := time.Duration(*benchPartials)
			fmt.Fprintf(os.Stderr, "BenchmarkKernelSync: partial phases (mean): dump %v, journal %v, unbind %v, ipvs %v, rules %v, bind %v; kube-ipvs0 dumped in %d of %d\n",
				took.Dump/n, took.Journal/n, took.Unbind/n, took.IPVS/n, took.Rules/n, took.Bind/n, dumped, *benchPartials)
			return nil
		})
		node.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	floor := sum.ipvsadm + sum.ipBatch + sum.restore
	for _, m := range []struct {
		v    float64
		unit string
	}{
		{ms(sum.ipvs) / n, "ipvs-ms"}, {ms(sum.ipvsadm) / n, "ipvsadm-R-ms"},
		{float64(sum.ipvs) / float64(sum.ipvsadm), "ipvs/ipvsadm-R"},
		{ms(sum.addr) / n, "addr-ms"}, {ms(sum.ipBatch) / n, "ip-batch-ms"},
		{float64(sum.addr) / float64(sum.ipBatch), "addr/ip-batch"},
		{ms(sum.sets) / n, "ipset-ms"}, {ms(sum.restore) / n, "ipset-restore-ms"},
		{float64(sum.sets) / float64(sum.restore), "ipset/restore"},
		{ms(sum.full) / n, "full-ms"}, {ms(floor) / n, "floor-ms"},
		{float64(sum.full) / float64(floor), "full/floor"},
		{ms(sum.partial) / n, "partial-ms"},
		{100 * float64(sum.partial) / float64(sum.full), "partial-%-of-full"},
	} {
		b.ReportMetric(m.v, m.unit)
	}
}

// TestKernelBenchContent checks on a small cluster that the benchmark's two
// sides load the same kernel state, so the timings compare like with like.
func TestKernelBenchContent(t *testing.T) {
	opts := benchOptions()
	st := planner.Plan(benchCluster(200, 3, -1, ktest.NodeIPv4), opts)
	var ours, floor [3][]string
	capture := func(node *ktest.Node) [3][]string {
		b := &kbed{t: t, node: node}
		return [3][]string{b.ipvsadmSave(), b.kubeIPVS0(), b.ipsetSave()}
	}
	node := ktest.NewNode(t)
	if err := node.Do(func() error {
		s, err := openStack()
		if err != nil {
			return err
		}
		defer s.close()
		res, err := s.app.Full(&st, []netip.Addr{ktest.NodeIPv4})
		if err == nil {
			err = res.Err()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ours = capture(node)
	node2 := ktest.NewNode(t)
	if err := node2.Do(func() error {
		return errorsJoin(
			execStdin([]byte(ipvs.Save(st.VirtualServers)), "ipvsadm", "-R"),
			execStdin(nil, "ip", "link", "add", addrmgr.Device, "type", "dummy"),
			execStdin(addrBatch(st.Addresses), "ip", "-batch", "-"),
			execStdin(iptables.AppendSave(nil, st.IPSets), "ipset", "restore"),
		)
	}); err != nil {
		t.Fatal(err)
	}
	floor = capture(node2)
	for i, what := range []string{"ipvsadm -S -n", "kube-ipvs0", "ipset save"} {
		if err := diff(what+" (ours vs the floor tools)", ours[i], floor[i]); err != nil {
			t.Error(err)
		}
	}
	if len(ours[0]) < 250 || len(ours[1]) != 200 {
		t.Errorf("benchmark state too small: %d ipvsadm lines, %d addresses", len(ours[0]), len(ours[1]))
	}
}

func errorsJoin(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
