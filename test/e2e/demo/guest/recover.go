package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// breakNode does what kube-proxy's IPVS mode does for nginx-other on every
// node: node-b's address bound on kube-ipvs0 with a virtual server on it.
func (d *demo) breakNode() error {
	for _, c := range [][]string{
		{"ip", "addr", "add", nodeBIP + "/32", "dev", "kube-ipvs0"},
		{"ipvsadm", "-A", "-t", nodeBIP + ":80", "-s", "rr"},
		{"ipvsadm", "-a", "-t", nodeBIP + ":80", "-r", "10.244.1.7:8080", "-m"},
		{"ipvsadm", "-a", "-t", nodeBIP + ":80", "-r", "10.244.1.8:8080", "-m"},
	} {
		if _, err := d.sh(c[0], c[1:]...); err != nil {
			return err
		}
	}
	if _, err := d.sh("ip", "-4", "-br", "addr", "show", "dev", "kube-ipvs0"); err != nil {
		return err
	}
	out, err := d.node.Request(ktest.TCP, fmt.Sprintf("%s:%d", nodeBIP, kubelet))
	fmt.Printf("    node-a$ request tcp %s:%d\n", nodeBIP, kubelet)
	if err == nil {
		return fmt.Errorf("node-b still answers (%q): the breakage did not take", out)
	}
	fmt.Printf("      %s\n", d.named(err.Error()))
	say("node-a now treats node-b's address as its own: its kubelet, API server, etcd are unreachable from here")
	return nil
}

// recover runs `ipvs-proxy recover` in node-a and returns its exit code.
func (d *demo) recover(extra ...string) (int, error) {
	args := append([]string{"recover",
		"--kubeconfig", d.proxyKubeconfig,
		"--hostname-override", nodeA,
		"--state-dir", d.stateDir,
		"--cluster-cidr", podCIDR,
	}, extra...)
	fmt.Printf("    node-a# ipvs-proxy %s\n", strings.Join(args, " "))
	out, err := d.node.Exec(d.proxyBin, args...)
	// Exec's error carries stderr; print stdout as is.
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Printf("      %s\n", l)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if msg := stderrOf(err); msg != "" {
			fmt.Printf("      stderr: %s\n", msg)
		}
		say("$? = %d: %s", ee.ExitCode(), recoverStatus(ee.ExitCode()))
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	say("$? = 0: %s", recoverStatus(0))
	return 0, nil
}

// recoverStatus is what recover's exit status means (docs/flags.md#exit-status):
// 3 is an answer for scripts, not a failure.
func recoverStatus(code int) string {
	switch code {
	case 0:
		return "done: nothing bad on kube-ipvs0, or --apply removed it all"
	case 2:
		return "bad usage"
	case 3:
		return "bad addresses found, dry run: nothing changed (an answer for scripts, not a failure)"
	default:
		return "recover failed"
	}
}

// stderrOf extracts the stderr text ktest.NS.Exec appends to its error.
func stderrOf(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return strings.TrimSpace(s[i+2:])
	}
	return ""
}

func (d *demo) recoverDryRun() error {
	d.stopRelay()
	say("the relay to the API server is down: recover must work from the node and %s alone", filepath.Join(d.stateDir, "node-addresses.json"))
	code, err := d.recover()
	if err != nil {
		return err
	}
	if code == 0 {
		return errors.New("recover (dry run) found nothing")
	}
	out, err := d.node.Exec("ip", "-4", "-o", "addr", "show", "kube-ipvs0")
	if err != nil {
		return err
	}
	if !strings.Contains(out, nodeBIP+"/32") {
		return errors.New("the dry run removed node-b's address")
	}
	say("dry run: nothing changed yet")
	return nil
}

func (d *demo) recoverApply() error {
	code, err := d.recover("--apply")
	if err != nil {
		return err
	}
	out, err := d.node.Exec("ip", "-4", "-o", "addr", "show", "kube-ipvs0")
	if err != nil {
		return err
	}
	if strings.Contains(out, nodeBIP+"/32") {
		return fmt.Errorf("node-b's address is still on kube-ipvs0 (recover exit %d)", code)
	}
	ipvsOut, err := d.sh("ipvsadm", "-Ln", "-t", nodeBIP+":80")
	if err == nil {
		return fmt.Errorf("the virtual server on node-b's address is still there:\n%s", ipvsOut)
	}
	say("(ipvsadm: no such service: the virtual server went with the address)")
	return nil
}

func (d *demo) afterRecovery() error {
	if err := d.nodeBReachable(); err != nil {
		return err
	}
	for _, c := range []struct {
		who  string
		ns   *ktest.NS
		addr string
		want []string
	}{
		{"client-pod", d.clientPod.NS, mysqlVIP + ":3306", []string{"mysql-0", "mysql-1"}},
		{"client", d.client.NS, nodeAIP + ":30010", []string{"mysql-0", "mysql-1"}},
		{"client", d.client.NS, freeExtIP + ":80", []string{"nginx-0", "nginx-1"}},
	} {
		if err := ask(c.who, c.ns, c.addr, 2, c.want...); err != nil {
			return err
		}
	}
	d.startRelay()
	if err := d.startMonitor(); err != nil {
		return err
	}
	if err := d.startProxy(); err != nil {
		return err
	}
	// The restarted proxy adopts the kernel state; wait for its first sync
	// and check node-b is still reachable and the services still answer.
	err := waitFor(60*time.Second, func() error {
		if d.proxyExited() {
			return permanent{fmt.Errorf("ipvs-proxy run exited: %v", d.proxyErr)}
		}
		if len(d.grepProxyLog(1, "starting the first full sync")) < 1 {
			return errors.New("ipvs-proxy has not synced its caches")
		}
		body, err := d.httpGet("127.0.0.1:10249", "/metrics")
		if err != nil {
			return err
		}
		if !strings.Contains(body, `ipvs_proxy_syncs_total{mode="full"} `) || strings.Contains(body, `ipvs_proxy_syncs_total{mode="full"} 0`) {
			return errors.New("no full sync yet")
		}
		return nil
	})
	if err != nil {
		return err
	}
	say("ipvs-proxy run is back and has done its first full sync")
	if err := d.checkMonitor(); err != nil {
		return err
	}
	if err := d.nodeBReachable(); err != nil {
		return err
	}
	return ask("client", d.client.NS, nodeAIP+":30010", 2, "mysql-0", "mysql-1")
}
