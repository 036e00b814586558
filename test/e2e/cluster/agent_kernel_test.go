//go:build kernel

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// podGateway is the node-side address of every pod veth, the pods' default
// gateway (as ktest's pods and Calico's 169.254.1.1).
var podGateway = netip.MustParseAddr("169.254.1.1")

// probePeriod is the readiness probe's period (kubelet's periodSeconds,
// shortened: the tests wait on readiness).
const probePeriod = 500 * time.Millisecond

// agent plays kubelet on one node: it turns the Pods bound to the node
// (spec.nodeName, set by the test or the scheduler) into network
// namespaces joined to the node by a veth with an address from the node's
// podCIDR (hostNetwork Pods use the node's namespace and address), serves
// agnhost netexec's endpoints from them, writes their status (podIPs,
// hostIP, Ready from the HTTP readiness probe) and ends them gracefully:
// a Pod with deletionTimestamp keeps serving for its grace period, then
// its namespace goes and the Pod is removed.
type agent struct {
	t      *testing.T
	client kubernetes.Interface
	node   *bedNode
	cancel context.CancelFunc

	kubelet *cluster.KubeletServer
	// upstream: the agent runs containers as real processes (agnhost
	// itself), their logs in logDir, for the upstream e2e.test; otherwise
	// it serves netexec in-process (the re-created tests).
	upstream bool
	logDir   string
	// clusterDNS, once the bed's cluster DNS runs (startClusterDNS), is
	// the nameserver of the pods it starts after (their resolv.conf).
	clusterDNS netip.Addr

	mu   sync.Mutex
	next int
	pods map[types.UID]*podRun
}

// podRun is one Pod the agent runs.
type podRun struct {
	namespace, name string
	ns              *ktest.NS // the pod's namespace; the node's for hostNetwork
	own             bool      // ns is the pod's own (closed at the end)
	ip              netip.Addr
	stopServer      func()
	stopProbe       context.CancelFunc
	probeDone       chan struct{} // closed when the probe has returned
	terminating     bool
	// shutdown is closed when the pod starts terminating (SIGTERM): its
	// netexec servers with --delay-shutdown turn unready.
	shutdown chan struct{}
	// procs are its container processes (the upstream bed), or nil.
	procs *procs
	// recheck asks the probe loop to write the status again: a readiness
	// gate's condition changed (recheckGates).
	recheck chan struct{}
	// resolvConf is the pod's /etc/resolv.conf (writeResolvConf), or "".
	resolvConf string
	// gone is closed when the pod is removed (close): its preStop hooks
	// still running end.
	gone chan struct{}
	// initDone, when not nil, is closed once the pod's init containers
	// have run (runContainers): the pod is not Ready before.
	initDone chan struct{}
}

func startAgent(t *testing.T, client kubernetes.Interface, n *bedNode, upstream bool) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{t: t, client: client, node: n, cancel: cancel, next: 2, pods: map[types.UID]*podRun{},
		upstream: upstream, logDir: t.TempDir()}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + n.name
	}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.sync(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { a.sync(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.remove(p.UID)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// The kubelet API, in the VM's root namespace where qemu forwards the
	// host's port to it (the API server's exec comes that way).
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", cluster.GuestKubeletPort(n.index)))
	if err != nil {
		t.Fatalf("agent %s: kubelet API: %v", n.name, err)
	}
	if a.kubelet, err = cluster.ServeKubelet(l, n.name, cluster.NodeRuntime{Exec: a, Logs: a, Dial: a}, a.logf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.kubelet.Close()
		cancel()
		factory.Shutdown()
		a.mu.Lock()
		uids := make([]types.UID, 0, len(a.pods))
		for uid := range a.pods {
			uids = append(uids, uid)
		}
		a.mu.Unlock()
		for _, uid := range uids {
			a.remove(uid)
		}
	})
	return a
}

func (a *agent) logf(format string, args ...any) {
	a.t.Logf("agent %s: %s", a.node.name, fmt.Sprintf(format, args...))
}

// sync starts a new Pod, or begins the graceful end of a deleted one.
func (a *agent) sync(ctx context.Context, pod *corev1.Pod) {
	a.mu.Lock()
	run, ok := a.pods[pod.UID]
	a.mu.Unlock()
	if !ok {
		// A terminal pod (evicted: evict) is not started again.
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return
		}
		var err error
		if run, err = a.start(ctx, pod); err != nil {
			a.logf("pod %s/%s not started: %v", pod.Namespace, pod.Name, err)
			return
		}
		a.mu.Lock()
		a.pods[pod.UID] = run
		a.mu.Unlock()
	} else {
		run.recheckGates(pod)
	}
	if pod.DeletionTimestamp != nil && !run.terminating {
		run.terminating = true
		close(run.shutdown)
		grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
		a.logf("pod %s/%s terminating, serving for its grace period %v", pod.Namespace, pod.Name, grace)
		uid := pod.UID
		deadline := time.Now().Add(grace)
		go func() {
			// As kubelet: the preStop hooks first, within the grace
			// period, then SIGTERM.
			a.preStop(ctx, run, pod, deadline)
			var exited <-chan struct{}
			if run.procs != nil {
				run.procs.signal(syscall.SIGTERM)
				exited = run.procs.exited
			}
			select {
			case <-time.After(time.Until(deadline)):
			case <-exited: // every container exited on SIGTERM
			case <-ctx.Done():
				return
			}
			a.remove(uid)
			err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
				a.logf("pod %s/%s: final delete: %v", pod.Namespace, pod.Name, err)
			}
		}()
	}
}

// start makes the pod's namespace, runs its server and its readiness
// probe; the probe writes the status.
func (a *agent) start(ctx context.Context, pod *corev1.Pod) (*podRun, error) {
	run := &podRun{namespace: pod.Namespace, name: pod.Name, shutdown: make(chan struct{}), recheck: make(chan struct{}, 1),
		gone: make(chan struct{})}
	hostname := pod.Name
	if pod.Spec.HostNetwork {
		run.ns, run.ip, hostname = a.node.ns.NS, a.node.ip, a.node.name
	} else {
		a.mu.Lock()
		idx := a.next
		a.next++
		a.mu.Unlock()
		base := a.node.podCIDR.Addr().As4()
		base[3] = byte(idx)
		run.ip, run.own = netip.AddrFrom4(base), true
		ns, err := ktest.NewNamespace("pod")
		if err != nil {
			return nil, err
		}
		run.ns = ns
		if err := a.wire(ns, fmt.Sprintf("veth%d", idx), run.ip); err != nil {
			ns.Close()
			return nil, err
		}
	}
	var probe *corev1.Probe
	if a.upstream {
		var err error
		if run.resolvConf, err = a.writeResolvConf(pod); err != nil {
			run.close()
			return nil, err
		}
		p, err := a.runContainers(run, pod, hostname, a.logDir)
		if err != nil {
			run.close()
			return nil, err
		}
		run.procs = p
		run.addStop(p.kill)
	}
	for _, c := range pod.Spec.Containers {
		if !a.upstream && len(c.Args) > 0 && c.Args[0] == "netexec" {
			srv, err := cluster.ParseNetexec(hostname, c.Args)
			if err != nil {
				run.close()
				return nil, err
			}
			srv.Shutdown = run.shutdown
			if err := run.ns.Do(func() error { stop, err := srv.Listen(); run.addStop(stop); return err }); err != nil {
				run.close()
				return nil, err
			}
		}
		if c.ReadinessProbe != nil {
			probe = c.ReadinessProbe
		}
	}
	probeCtx, stop := context.WithCancel(ctx)
	run.stopProbe, run.probeDone = stop, make(chan struct{})
	go func() { defer close(run.probeDone); a.probe(probeCtx, run, probe) }()
	a.logf("pod %s/%s started at %s", pod.Namespace, pod.Name, run.ip)
	return run, nil
}

// probe writes the pod's status now and whenever its readiness probe
// changes result; with no probe the pod is Ready at once. An HTTP GET probe
// is made from the node, as kubelet's; an exec probe runs its command in
// the pod's namespace (the bed's containers have no filesystem of their
// own: `/bin/false` is the VM's).
func (a *agent) probe(ctx context.Context, run *podRun, p *corev1.Probe) {
	check := readinessCheck(a.node.ns.NS, run, p)
	st := cluster.PodStatus{PodIPs: []netip.Addr{run.ip}, HostIP: a.node.ip, Ready: check == nil}
	written := false
	initialized := func() bool {
		if run.initDone == nil {
			return true
		}
		select {
		case <-run.initDone:
			return true
		default:
			return false
		}
	}
	st.Ready = st.Ready && initialized()
	for {
		if check != nil || !st.Ready {
			ready := initialized() && (check == nil || check() == nil)
			if ready != st.Ready || !written {
				st.Ready = ready
				written = false
			}
		}
		if !written {
			if _, err := cluster.WritePodStatus(ctx, a.client, run.namespace, run.name, st); err != nil {
				if ctx.Err() != nil || apierrors.IsNotFound(err) {
					return
				}
				a.logf("%v", err)
			} else {
				written = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-run.recheck:
			written = false
		case <-time.After(probePeriod):
		}
	}
}

// readinessCheck is one try of the readiness probe p of run: nil when
// the pod has no probe (or one of a kind the bed does not run).
func readinessCheck(node *ktest.NS, run *podRun, p *corev1.Probe) func() error {
	switch {
	case p == nil:
		return nil
	case p.HTTPGet != nil:
		get := p.HTTPGet
		target := netip.AddrPortFrom(run.ip, uint16(get.Port.IntValue()))
		return func() error {
			return node.Do(func() error {
				code, _, err := cluster.HTTPGet(target, get.Path, netip.Addr{}, time.Second)
				if err == nil && (code < 200 || code >= 400) {
					err = fmt.Errorf("status %d", code)
				}
				return err
			})
		}
	case p.Exec != nil && len(p.Exec.Command) > 0:
		cmd := p.Exec.Command
		return func() error {
			_, err := run.ns.Exec(cmd[0], cmd[1:]...)
			return err
		}
	}
	return nil
}

// wire is the CNI's ADD: `ip link add VETH type veth peer eth0 netns POD`,
// the gateway on the node side, ADDR/32 on the pod side, a host route to
// the pod on the node and `default via 169.254.1.1` in the pod.
func (a *agent) wire(pod *ktest.NS, veth string, addr netip.Addr) error {
	nh, err := netlink.NewHandleAt(a.node.ns.Handle())
	if err != nil {
		return err
	}
	defer nh.Close()
	ph, err := netlink.NewHandleAt(pod.Handle())
	if err != nil {
		return err
	}
	defer ph.Close()
	peer := "p" + veth
	if err := nh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: veth}, PeerName: peer}); err != nil {
		return fmt.Errorf("ip link add %s type veth: %w", veth, err)
	}
	host, err := nh.LinkByName(veth)
	if err != nil {
		return err
	}
	p, err := nh.LinkByName(peer)
	if err != nil {
		return err
	}
	if err := nh.LinkSetNsFd(p, int(pod.Handle())); err != nil {
		return fmt.Errorf("ip link set %s netns %s: %w", peer, pod.Name, err)
	}
	if err := nh.AddrAdd(host, &netlink.Addr{IPNet: hostNet(podGateway)}); err != nil {
		return fmt.Errorf("ip addr add %s dev %s: %w", podGateway, veth, err)
	}
	if err := nh.LinkSetUp(host); err != nil {
		return err
	}
	if err := nh.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: hostNet(addr), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("ip route add %s dev %s: %w", addr, veth, err)
	}
	if p, err = ph.LinkByName(peer); err != nil {
		return err
	}
	if err := ph.LinkSetName(p, "eth0"); err != nil {
		return err
	}
	if err := ph.AddrAdd(p, &netlink.Addr{IPNet: hostNet(addr)}); err != nil {
		return fmt.Errorf("pod: ip addr add %s dev eth0: %w", addr, err)
	}
	if err := ph.LinkSetUp(p); err != nil {
		return err
	}
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: p.Attrs().Index, Dst: hostNet(podGateway), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("pod: ip route add %s dev eth0: %w", podGateway, err)
	}
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: p.Attrs().Index, Gw: podGateway.AsSlice()}); err != nil {
		return fmt.Errorf("pod: ip route add default via %s: %w", podGateway, err)
	}
	return nil
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// remove stops a pod's server and probe and deletes its namespace (the
// node-side veth goes with it).
func (a *agent) remove(uid types.UID) {
	a.mu.Lock()
	run, ok := a.pods[uid]
	delete(a.pods, uid)
	a.mu.Unlock()
	if ok {
		run.close()
	}
}

// evict is kubelet's eviction of a running pod (its node out of
// ephemeral storage, say): the pod's containers are killed and its sandbox
// goes, and its status becomes phase Failed, reason Evicted, not Ready.
// The Pod object stays, as an evicted pod's does.
func (a *agent) evict(ctx context.Context, namespace, name string) error {
	a.mu.Lock()
	var uid types.UID
	var run *podRun
	for u, r := range a.pods {
		if r.namespace == namespace && r.name == name {
			uid, run = u, r
		}
	}
	a.mu.Unlock()
	if run == nil {
		return fmt.Errorf("evict %s/%s: not run by %s's agent", namespace, name, a.node.name)
	}
	// The probe writes no more status once it has returned.
	run.stopProbe()
	<-run.probeDone
	if _, err := cluster.WritePodFailed(ctx, a.client, namespace, name, "Evicted",
		"The node was low on resource: ephemeral-storage."); err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	a.remove(uid)
	a.logf("pod %s/%s evicted", namespace, name)
	return nil
}

// addStop keeps one more server's stop: a pod may run several netexec
// containers.
func (r *podRun) addStop(stop func()) {
	if stop == nil {
		return
	}
	if prev := r.stopServer; prev != nil {
		r.stopServer = func() { prev(); stop() }
		return
	}
	r.stopServer = stop
}

func (r *podRun) close() {
	close(r.gone)
	if r.stopProbe != nil {
		r.stopProbe()
	}
	if r.stopServer != nil {
		r.stopServer()
	}
	if r.own {
		r.ns.Close()
	}
}

// Exec is the container runtime's exec for the kubelet API: cmd runs in
// the pod's network namespace (the node's for a hostNetwork pod) with the
// VM's filesystem, as an exec probe's command does; container is not
// looked at (a bed pod's containers share one namespace and filesystem);
// with cluster DNS it sees the pod's resolv.conf (inPod).
func (a *agent) Exec(ctx context.Context, namespace, pod, _ string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	ns, _, ok := a.podNS(namespace, pod)
	if !ok {
		return fmt.Errorf("%w: %s/%s is not on %s", cluster.ErrNoPod, namespace, pod, a.node.name)
	}
	if conf := a.podResolvConf(namespace, pod); conf != "" {
		cmd = append([]string{"unshare"}, inPod("", conf, cmd)...)
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	// Started on a thread inside the namespace: the process is born there.
	if err := ns.Do(c.Start); err != nil {
		return fmt.Errorf("exec %q in pod %s/%s: %w", cmd, namespace, pod, err)
	}
	return cluster.ExitStatus(c.Wait())
}

// podNS is where a test "execs into" a pod: its namespace (the node's for
// a hostNetwork pod).
func (a *agent) podNS(namespace, name string) (*ktest.NS, netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.pods {
		if r.namespace == namespace && r.name == name {
			return r.ns, r.ip, true
		}
	}
	return nil, netip.Addr{}, false
}

// DialPod is the node's network path to its pods for the API server's pod
// proxy (cluster.PodDialer): a TCP connection to addr made from the node's
// namespace, addr in the node's pod CIDR or the node's own IP (a
// hostNetwork pod's).
func (a *agent) DialPod(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if !a.node.podCIDR.Contains(addr.Addr()) && addr.Addr() != a.node.ip {
		return nil, fmt.Errorf("%w: %s is outside %s's pod CIDR %s and node IP %s", cluster.ErrNotNodePod, addr, a.node.name, a.node.podCIDR, a.node.ip)
	}
	var c net.Conn
	err := a.node.ns.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", addr, a.node.name, err)
	}
	return c, nil
}

// ContainerLog opens a container's output as runContainers writes it (the
// upstream bed; the re-created tests' pods have none).
func (a *agent) ContainerLog(namespace, pod, container string) (io.ReadCloser, error) {
	f, err := os.Open(containerLogPath(a.logDir, namespace, pod, container))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no container %s of pod %s/%s ran on %s", cluster.ErrNoPod, container, namespace, pod, a.node.name)
	}
	return f, err
}
