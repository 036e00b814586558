//go:build kernel

package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/vishvananda/netlink"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelExplain: the real applier programs the wordpress-mysql
// scenario in a fresh node namespace; explain --kernel there finds the
// kernel as planned (exit 0); with one real server deleted by hand
// (ipvsadm -d) it names the missing real server and exits 1.
func TestKernelExplain(t *testing.T) {
	path := filepath.Join(planDir, "wordpress-mysql.yaml")
	flags := readVariants(t, path)[0].args
	args := append([]string{"explain", "default/wordpress-mysql", "-f", path, "--kernel"}, flags...)

	// The plan, through explain's own flags and pipeline.
	var f explainFlags
	fs := pflag.NewFlagSet("explain", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(append([]string{"-f", path}, flags...)); err != nil {
		t.Fatal(err)
	}
	cmd := newExplainCommand()
	objs, err := f.readFiles(cmd, "explain")
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.plan(cmd, "explain", objs)
	if err != nil {
		t.Fatal(err)
	}

	node := ktest.NewNode(t)
	apply(t, node, res.Cluster.Nodes, res.Options, res.State)

	explainIn := func() (int, string) {
		var stdout, stderr bytes.Buffer
		code := -1
		if err := node.Do(func() error {
			code = Main(args, strings.NewReader(""), &stdout, &stderr)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return code, stdout.String() + stderr.String()
	}
	if code, out := explainIn(); code != exitOK || !strings.Contains(out, "kernel: matches the plan") {
		t.Fatalf("explain of the kernel the applier programmed: exit %d, want 0:\n%s", code, out)
	}
	node.Run(t, "ipvsadm", "-d", "-t", "10.254.67.85:3306", "-r", "10.0.3.2:3306")
	code, out := explainIn()
	if want := "virtual server -t 10.254.67.85:3306 lacks real server 10.0.3.2:3306"; code != exitFailure || !strings.Contains(out, want) {
		t.Fatalf("explain after ipvsadm -d: exit %d, want %d and %q:\n%s", code, exitFailure, want, out)
	}
	t.Logf("explain after ipvsadm -d, exit %d:\n%s", code, out)
}

// apply programs st in node with the real applier: one full sync.
func apply(t *testing.T, node *ktest.Node, nodes []model.Node, o planner.Options, st planner.State) {
	t.Helper()
	err := node.Do(func() error {
		table, err := ipvskernel.Open()
		if err != nil {
			return err
		}
		defer table.Close()
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		link, err := addrkernel.EnsureDevice(h)
		if err != nil {
			return err
		}
		rules, err := iptableskernel.NewSyncer(nil)
		if err != nil {
			return err
		}
		defer rules.Close()
		mgr := addrmgr.NewManager(link, guard.New(planner.GuardInputs(&o, nodes)), nil)
		app := applier.New(ipvs.NewReconciler(table, ipvs.Options{}), mgr, rules, nil)
		res, err := app.Full(&st, o.LocalAddrs)
		if err != nil {
			return err
		}
		return res.Err()
	})
	if err != nil {
		t.Fatalf("full sync: %v", err)
	}
}
