//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The upstream framework's timeouts (test/e2e/framework/service/const.go)
// the re-created tests keep.
const (
	kubeProxyEndpointLagTimeout = 30 * time.Second
	respondingTimeout           = 2 * time.Minute
	podStartTimeout             = 2 * time.Minute
)

// agnhost is the image the upstream tests run; the agent serves its
// netexec from the container's args.
const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.56"

// testNamespace creates a namespace for one test and waits for its
// default ServiceAccount (the serviceaccount controller's, on the host).
func (b *bed) testNamespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s: no default ServiceAccount: %v", name, err)
	}
	return name
}

// podSpec is what a test asks of one pod.
type podSpec struct {
	name, node  string
	labels      map[string]string
	hostNetwork bool
	// netexec are agnhost netexec's args after "netexec"; nil is a pause pod.
	netexec []string
	// readyPort, when set, is the netexec HTTP port probed at /healthz.
	readyPort int
	// grace is terminationGracePeriodSeconds; 0 leaves the API default (30).
	grace int64
	// ports are the container's declared ports (named targetPorts).
	ports []corev1.ContainerPort
}

// pod is a running pod as a test sees it: where to "exec" and its address.
type pod struct {
	name string
	ns   *ktest.NS
	ip   netip.Addr
}

// runPod creates the Pod bound to its node and waits until the node agent
// reports it Ready.
func (b *bed) runPod(t *testing.T, namespace string, s podSpec) pod {
	t.Helper()
	c := corev1.Container{Name: "c", Image: agnhost, Ports: s.ports}
	if s.netexec != nil {
		c.Args = append([]string{"netexec"}, s.netexec...)
	} else {
		c.Image = "registry.k8s.io/pause:3.10"
	}
	if s.readyPort != 0 {
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromInt(s.readyPort)}}}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: s.labels},
		Spec: corev1.PodSpec{NodeName: s.node, HostNetwork: s.hostNetwork, Containers: []corev1.Container{c}}}
	if s.grace != 0 {
		p.Spec.TerminationGracePeriodSeconds = &s.grace
	}
	return b.runPodObject(t, namespace, p)
}

// runPodObject creates the Pod (bound to its node) and waits until the
// node agent reports it Ready.
func (b *bed) runPodObject(t *testing.T, namespace string, p *corev1.Pod) pod {
	t.Helper()
	return b.startPodObject(t, namespace, p, true)
}

// startPodObject creates the Pod (bound to its node) and waits until the
// node agent reports it running with its address, and Ready if ready.
func (b *bed) startPodObject(t *testing.T, namespace string, p *corev1.Pod, ready bool) pod {
	t.Helper()
	ctx := context.Background()
	name, node := p.Name, p.Spec.NodeName
	if _, err := b.client.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, podStartTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := b.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !ready {
			return got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "", nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod %s/%s on %s not running (Ready: %v): %v", namespace, name, node, ready, err)
	}
	ns, ip, ok := b.node(t, node).agent.podNS(namespace, name)
	if !ok {
		t.Fatalf("pod %s/%s running but not run by %s's agent", namespace, name, node)
	}
	return pod{name: name, ns: ns, ip: ip}
}

// deleteAndWaitTerminating deletes the pod (its grace period applies: the node
// agent keeps it serving) and waits until the endpointslice controller
// marks its endpoint serving and terminating.
func (b *bed) deleteAndWaitTerminating(t *testing.T, namespace, name string, ip netip.Addr) {
	t.Helper()
	ctx := context.Background()
	if err := b.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, name+"'s endpoint serving and terminating", time.Minute, func() error {
		list, err := b.client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				c := e.Conditions
				if len(e.Addresses) > 0 && e.Addresses[0] == ip.String() &&
					ptr.Deref(c.Serving, false) && ptr.Deref(c.Terminating, false) && !ptr.Deref(c.Ready, false) {
					return nil
				}
			}
		}
		return fmt.Errorf("no serving, terminating, not ready endpoint %s", ip)
	})
}

// createService creates svc in namespace and returns it as the API server
// completed it (ClusterIP, node ports, health check node port).
func (b *bed) createService(t *testing.T, namespace string, svc *corev1.Service) *corev1.Service {
	t.Helper()
	got, err := b.client.CoreV1().Services(namespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// hostnameOverHTTP is one H3/H8 try: GET http://addr/hostName from ns.
func hostnameOverHTTP(ns *ktest.NS, addr netip.AddrPort, timeout time.Duration) (string, error) {
	var body string
	err := ns.Do(func() error {
		code, b, err := cluster.HTTPGet(addr, "/hostName", netip.Addr{}, timeout)
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		body = b
		return err
	})
	return strings.TrimSpace(body), err
}

// hostnameOverUDP is one H3 UDP try: `echo hostName | nc -w 1 -u ip port`.
func hostnameOverUDP(ns *ktest.NS, addr netip.AddrPort, timeout time.Duration) (string, error) {
	var out string
	err := ns.Do(func() error {
		var err error
		out, err = cluster.UDPRequest(addr, "hostName", timeout)
		return err
	})
	return strings.TrimSpace(out), err
}

// clientIP is `curl [--interface LOCAL] http://addr/clientip`: the address
// the server saw the request come from.
func clientIP(ns *ktest.NS, addr netip.AddrPort, local netip.Addr, timeout time.Duration) (netip.Addr, error) {
	var body string
	err := ns.Do(func() error {
		code, b, err := cluster.HTTPGet(addr, "/clientip", local, timeout)
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		body = b
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(body))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("clientip answer %q: %w", body, err)
	}
	return ap.Addr().Unmap(), nil
}

// dialUntilAll is H3's DialFromNode: up to maxTries single requests, one
// per period, until the responders are exactly want; it fails on a
// responder not in want (H2's rule: a stranger is a wrong endpoint).
func dialUntilAll(t *testing.T, what string, want []string, maxTries int, try func() (string, error)) {
	t.Helper()
	seen := map[string]bool{}
	var lastErr error
	start := time.Now()
	for i := 0; i < maxTries; i++ {
		got, err := try()
		if err != nil {
			lastErr = err
		} else if !slices.Contains(want, got) {
			t.Fatalf("%s: answered by %q, not one of %v", what, got, want)
		} else {
			seen[got] = true
		}
		if len(seen) == len(want) {
			t.Logf("%s: all of %v answered in %d tries, %v", what, want, i+1, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s: after %d tries saw %v of %v (last error %v)", what, maxTries, seen, want, lastErr)
}

// eventually polls cond every second until it returns nil or timeout
// passes: the upstream tests' wait.PollImmediate on a whole round of
// checks.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	took := harness.WaitFor(t, what, timeout, time.Second, cond)
	t.Logf("%s: after %v", what, took.Round(time.Millisecond))
}
