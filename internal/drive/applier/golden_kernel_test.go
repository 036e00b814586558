//go:build kernel

package applier

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/nodeplan"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// goldenDir holds `plan`'s golden scenarios (cmd/ipvs-proxy/plan_test.go):
// CASE.yaml declares "# flags[NAME]: ARGS" lines, CASE[.NAME].golden is
// what plan printed.
const goldenDir = "../../../testdata/plan"

var goldenFlags = regexp.MustCompile(`(?m)^# flags(?:\[([a-z0-9-]+)\])?:(.*)$`)

// goldenOptions parses the planning flags the scenarios use, with plan's
// defaults (--ipvs-scheduler rr, --masquerade-bit 14,
// --protected-node-ports guard.DefaultProtectedNodePorts), the extra -f files
// and the --node-cache file. Addresses and CIDRs are read as plan reads
// them (IPv4-mapped ones unmapped); --api-server-address is what the
// dialed host is, to be judged against the input (informers.APIServerAddrs).
func goldenOptions(args []string) (o planner.Options, files []string, nodeCache string, err error) {
	o = planner.Options{Scheduler: "rr", MasqueradeBit: planner.DefaultMasqueradeBit}
	o.ProtectedNodePorts, _ = model.ParsePortRanges(guard.DefaultProtectedNodePorts)
	addrs := func(v string, into *[]netip.Addr) error {
		for _, s := range strings.Split(v, ",") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return err
			}
			*into = append(*into, a.Unmap())
		}
		return nil
	}
	prefixes := func(v string, into *[]netip.Prefix) error {
		ps, err := config.ParseCIDRs(strings.Split(v, ","))
		*into = append(*into, ps...)
		return err
	}
	for i := 0; i < len(args); i++ {
		flag := args[i]
		if flag == "--masquerade-all" {
			o.MasqueradeAll = true
			continue
		}
		if flag == "--refuse-node-external-ips" {
			o.RefuseNodeExternalIPs = true
			continue
		}
		if flag == "--ipvs-strict-arp" {
			o.StrictARP = true
			continue
		}
		if i+1 >= len(args) {
			return o, nil, "", fmt.Errorf("%s needs a value", flag)
		}
		i++
		v := args[i]
		var err error
		switch flag {
		case "-f":
			files = append(files, filepath.Join(goldenDir, v))
		case "--node-cache":
			nodeCache = filepath.Join(goldenDir, v)
		case "--node-name":
			o.NodeName = v
		case "--node-ip":
			for _, f := range strings.Split(v, ",") {
				if p, perr := netip.ParsePrefix(f); perr == nil {
					o.LocalAddrs, o.LocalPrefixes = append(o.LocalAddrs, p.Addr()), append(o.LocalPrefixes, p)
				} else if err = addrs(f, &o.LocalAddrs); err != nil {
					break
				}
			}
		case "--next-hop":
			err = addrs(v, &o.NextHops)
		case "--resolver":
			err = addrs(v, &o.Resolvers)
		case "--protected-node-ports":
			o.ProtectedNodePorts, err = model.ParsePortRanges(v)
		case "--api-server-address":
			err = addrs(v, &o.APIServerAddrs)
		case "--gateway":
			err = addrs(v, &o.Gateways)
		case "--cluster-cidr":
			err = prefixes(v, &o.ClusterCIDRs)
		case "--nodeport-addresses":
			err = prefixes(v, &o.NodePortAddresses)
		case "--ipvs-exclude-cidrs":
			err = prefixes(v, &o.ExcludeCIDRs)
		case "--protected-cidrs":
			err = prefixes(v, &o.ProtectedCIDRs)
		case "--ipvs-scheduler":
			o.Scheduler = v
		case "--masquerade-bit":
			o.MasqueradeBit, err = strconv.Atoi(v)
		case "--max-virtual-servers-per-service":
			o.MaxVirtualServersPerService, err = strconv.Atoi(v)
		case "--max-real-servers-per-service":
			o.MaxRealServersPerService, err = strconv.Atoi(v)
		case "--service-cidrs":
			err = prefixes(v, &o.ServiceCIDRs)
		case "--protected-platform-cidrs":
			err = prefixes(v, &o.PlatformCIDRs)
		case "--node-endpoint-namespaces":
			o.NodeEndpointNamespaces = strings.Split(v, ",")
		default:
			return o, nil, "", fmt.Errorf("flag %s not understood by this test", flag)
		}
		if err != nil {
			return o, nil, "", fmt.Errorf("%s %s: %w", flag, v, err)
		}
	}
	return o, files, nodeCache, nil
}

// TestKernelGoldenScenarios applies every golden scenario of `plan` in a
// fresh node namespace and checks that `ipvsadm -S -n`, `ip -o addr show
// dev kube-ipvs0`, `ipset save` and `iptables-save` show exactly what plan
// printed (the plan is recomputed here and first compared byte for byte
// with the golden file).
func TestKernelGoldenScenarios(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join(goldenDir, "*.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no scenarios in %s: %v", goldenDir, err)
	}
	n := 0
	for _, path := range cases {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(filepath.Base(path), ".yaml")
		for _, m := range goldenFlags.FindAllStringSubmatch(string(src), -1) {
			args := strings.Fields(m[2])
			if strings.Contains(m[2], "-o json") {
				continue
			}
			name, golden := base, filepath.Join(goldenDir, base+".golden")
			if m[1] != "" {
				name, golden = base+"."+m[1], filepath.Join(goldenDir, base+"."+m[1]+".golden")
			}
			n++
			t.Run(name, func(t *testing.T) {
				opts, files, nodeCache, err := goldenOptions(args)
				if err != nil {
					t.Fatal(err)
				}
				objs, err := manifest.ReadFiles(append(files, path), nil)
				if err != nil {
					t.Fatal(err)
				}
				res, err := nodeplan.Plan(nodeplan.Input{Objects: objs, NodeCache: nodeCache, Grace: config.DefaultDeletedNodeGrace, Now: time.Now(), Options: opts})
				if err != nil {
					t.Fatal(err)
				}
				st := res.State
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatal(err)
				}
				if got := planner.AppendText(nil, st); !bytes.Equal(got, want) {
					t.Fatalf("plan of %s differs from %s: this test parses the flags differently", name, golden)
				}
				applyGolden(t, res.Cluster.Nodes, res.Options, &st)
			})
		}
	}
	if n < 20 {
		t.Errorf("only %d scenarios found", n)
	}
}

// applyGolden applies st in a fresh node namespace with the applier's guard
// built from the same options, and compares the kernel with the plan.
func applyGolden(t *testing.T, nodes []model.Node, opts planner.Options, st *planner.State) {
	b := &kbed{t: t, node: ktest.NewNode(t)}
	b.nodeAddrs = opts.LocalAddrs
	b.guard = guard.New(planner.GuardInputs(&opts, nodes))
	p := b.open(ipvs.Options{ExcludeCIDRs: opts.ExcludeCIDRs})
	res := b.full(p, st)
	b.checkPlan(st)
	if n := len(res.Bind.Refused); n != 0 {
		t.Errorf("the applier's guard refused %d planned addresses: %+v", n, res.Bind.Refused)
	}
	// A second full sync over the same state changes nothing.
	res = b.full(p, st)
	if n := res.IPVS.Changes() + res.Bind.Bound + res.Unbind.Unbound; n != 0 {
		t.Errorf("second full sync made %d changes", n)
	}
}
