package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startProxyAndConverge starts the relay and `ipvs-proxy run`, and waits
// until the kernel holds what the scenarios need.
func (d *demo) startProxyAndConverge() error {
	d.startRelay()
	if err := d.startProxy(); err != nil {
		return err
	}
	want := []string{
		"-A -t " + mysqlVIP + ":3306 -s rr",
		"-a -t " + mysqlVIP + ":3306 -r 10.244.1.2:3306 -m -w 1",
		"-a -t " + mysqlVIP + ":3306 -r 10.244.1.3:3306 -m -w 1",
		"-A -t " + nodeAIP + ":30010 -s rr",
		"-A -t " + zkVIP + ":2181 -s rr", "-A -t " + zkVIP + ":2888 -s rr", "-A -t " + zkVIP + ":3888 -s rr",
		"-A -t " + stickVIP + ":80 -s rr -p 600",
		"-A -t " + freeExtIP + ":80 -s rr",
		"-A -t " + nodeAIP + ":80 -s rr",
	}
	start := time.Now()
	err := waitFor(180*time.Second, func() error {
		if d.proxyExited() {
			return permanent{fmt.Errorf("ipvs-proxy run exited: %v", d.proxyErr)}
		}
		out, err := d.node.Exec("ipvsadm", "-S", "-n")
		if err != nil {
			return err
		}
		for _, w := range want {
			if !strings.Contains(out, w+"\n") && !strings.HasSuffix(out, w) {
				return fmt.Errorf("the kernel lacks %q", w)
			}
		}
		// Addresses are bound last, once their virtual servers exist.
		out, err = d.node.Exec("ip", "-4", "-o", "addr", "show", "dev", "kube-ipvs0")
		if err != nil {
			return err
		}
		for _, vip := range []string{mysqlVIP, zkVIP, stickVIP, nginxVIP, freeExtIP} {
			if !strings.Contains(out, "inet "+vip+"/32") {
				return fmt.Errorf("%s is not bound on kube-ipvs0 yet", vip)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	say("the kernel holds every scenario's virtual servers and VIPs %.1fs after start (qemu TCG: no KVM)", time.Since(start).Seconds())
	say("from the proxy's log (--log-format console --log-level debug):")
	for _, l := range d.grepProxyLog(8, "informer caches synced", "sync done", "sync applied", "sync failed", "refused to bind") {
		say("  %s", l)
	}
	return d.startMonitor()
}

// startMonitor records every address change on node-a (`ip -o monitor
// address`) until checkMonitor: a proxy that adopts and repairs must never
// flap a VIP.
func (d *demo) startMonitor() error {
	cmd := exec.Command("ip", "netns", "exec", d.node.Name, "ip", "-o", "monitor", "address")
	d.monitorOut = &syncBuffer{}
	cmd.Stdout = d.monitorOut
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ip monitor: %w", err)
	}
	d.monitor = cmd
	d.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return nil
}

// checkMonitor stops the monitor and fails on any change to kube-ipvs0.
func (d *demo) checkMonitor() error {
	if d.monitor == nil {
		return errors.New("no address monitor running")
	}
	time.Sleep(500 * time.Millisecond)
	d.monitor.Process.Kill()
	d.monitor.Wait()
	d.monitor = nil
	var changes []string
	for _, l := range strings.Split(d.monitorOut.String(), "\n") {
		if strings.Contains(l, "kube-ipvs0") {
			changes = append(changes, strings.Join(strings.Fields(l), " "))
		}
	}
	say("ip -o monitor address on node-a since it started: %d change(s) on kube-ipvs0", len(changes))
	for _, c := range changes {
		say("  %s", c)
	}
	if len(changes) > 0 {
		return errors.New("kube-ipvs0 flapped: addresses changed although no Service did")
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// permanent makes waitFor stop polling.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

// proxyArgs are the flags of `ipvs-proxy run` on node-a.
func (d *demo) proxyArgs() []string {
	return []string{"run",
		"--kubeconfig", d.proxyKubeconfig,
		"--hostname-override", nodeA,
		"--cluster-cidr", podCIDR,
		"--state-dir", d.stateDir,
		"--sync-period", "15s",
		"--healthz-bind-address", "127.0.0.1:10256",
		"--metrics-bind-address", "127.0.0.1:10249",
		"--log-format", "console",
		"--log-level", "debug",
	}
}

func (d *demo) startProxy() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{"netns", "exec", d.node.Name, d.proxyBin}, d.proxyArgs()...)
	say("node-a# ipvs-proxy %s", strings.Join(d.proxyArgs(), " "))
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start ipvs-proxy: %w", err)
	}
	d.proxy, d.proxyDone, d.proxyErr = cmd, make(chan struct{}), nil
	done := d.proxyDone
	go func() {
		err := cmd.Wait()
		logf.Close()
		d.proxyErr = err
		close(done)
	}()
	return nil
}

func (d *demo) proxyExited() bool {
	if d.proxyDone == nil {
		return true
	}
	select {
	case <-d.proxyDone:
		return true
	default:
		return false
	}
}

// stopProxy sends SIGTERM and waits for the exit; it returns the exit error.
func (d *demo) stopProxy() error {
	if d.proxy == nil || d.proxyExited() {
		return nil
	}
	d.proxy.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.proxyDone:
		return d.proxyErr
	case <-time.After(20 * time.Second):
		d.proxy.Process.Kill()
		<-d.proxyDone
		return errors.New("ipvs-proxy did not exit within 20s of SIGTERM")
	}
}

func (d *demo) tailProxyLog(n int) {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Printf("\n==> last %d lines of the ipvs-proxy log\n", len(lines))
	for _, l := range lines {
		fmt.Printf("    %s\n", l)
	}
}

// grepProxyLog prints the proxy's log lines that contain any of subs.
func (d *demo) grepProxyLog(max int, subs ...string) []string {
	f, err := os.Open(d.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, s := range subs {
			if strings.Contains(sc.Text(), s) {
				out = append(out, sc.Text())
				break
			}
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

func (d *demo) stopProxyKeepsDataPlane() error {
	if err := d.stopProxy(); err != nil {
		return fmt.Errorf("ipvs-proxy exit: %w", err)
	}
	for _, l := range d.grepProxyLog(2, "sync loop stopped") {
		say("log: %s", l)
	}
	out, err := d.node.Exec("ipvsadm", "-S", "-n")
	if err != nil {
		return err
	}
	say("ipvs-proxy exited; the kernel still holds %d virtual servers", strings.Count(out, "-A "))
	if err := ask("client", d.client.NS, nodeAIP+":30010", 2, "mysql-0", "mysql-1"); err != nil {
		return err
	}
	return d.checkMonitor()
}
