//go:build kernel

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The checks below are the upstream helpers' assertions the later batches
// of re-created tests share (the checklist's H2-H9), on top of those of
// framework_kernel_test.go.

// errNotYet is a poll's "try again".
var errNotYet = errors.New("not yet")

// netserver is a podSpec for an agnhost netexec endpoint: HTTP and UDP on
// the given ports (0: agnhost's default HTTP 8080, no UDP), ready when
// its HTTP /healthz answers.
func netserver(name, node string, labels map[string]string, httpPort, udpPort int) podSpec {
	if httpPort == 0 {
		httpPort = 8080
	}
	args := []string{fmt.Sprintf("--http-port=%d", httpPort)}
	if udpPort != 0 {
		args = append(args, fmt.Sprintf("--udp-port=%d", udpPort))
	}
	return podSpec{name: name, node: node, labels: labels, netexec: args, readyPort: httpPort}
}

// runPods runs one netexec pod per node named, NAME-0, NAME-1, ..., and
// returns them and their names.
func (b *bed) runPods(t *testing.T, ns, name string, labels map[string]string, httpPort, udpPort int, nodes ...string) ([]pod, []string) {
	t.Helper()
	var pods []pod
	var names []string
	for i, node := range nodes {
		p := b.runPod(t, ns, netserver(fmt.Sprintf("%s-%d", name, i), node, labels, httpPort, udpPort))
		pods = append(pods, p)
		names = append(names, p.name)
	}
	return pods, names
}

// tcpPort is a Service port PORT/TCP to TARGET.
func tcpPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

// udpPort is a Service port PORT/UDP to TARGET.
func udpPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolUDP}
}

// updateService reads the Service, applies change and writes it back,
// retrying on conflicts; it returns the Service as the API server stored it.
func (b *bed) updateService(t *testing.T, ns, name string, change func(*corev1.Service)) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	var out *corev1.Service
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := b.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(s)
		out, err = b.client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("update service %s/%s: %v", ns, name, err)
	}
	return out
}

// deleteService deletes the Service and waits until it is gone.
func (b *bed) deleteService(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := b.client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service "+ns+"/"+name+" gone", time.Minute, func() error {
		_, err := b.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// deletePodNow deletes the pod with a zero grace period (kubelet killing
// a container whose process exits on SIGTERM, as agnhost's netexec without
// --delay-shutdown) and waits until the object is gone.
func (b *bed) deletePodNow(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod "+ns+"/"+name+" gone", time.Minute, func() error {
		_, err := b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// customSlice writes an EndpointSlice for the selector-less Service svc,
// as a user or another controller would: one port, ready endpoints.
func (b *bed) customSlice(t *testing.T, ns, name, svc string, port discoveryv1.EndpointPort, ips ...netip.Addr) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "e2e-custom"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{port},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := b.client.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// answeredOnlyBy waits (respondingTimeout) until from's GET addr/hostname
// is answered by want, then requires five more answers, all by want: H8
// made strict, so a stale or wrongly merged real server fails it.
func answeredOnlyBy(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s answered by %s", what, addr, want), respondingTimeout, func() error {
		got, err := hostnameOverHTTP(from, addr, 5*time.Second)
		if err == nil && got != want {
			return fmt.Errorf("answered by %q", got)
		}
		return err
	})
	for i := 0; i < 5; i++ {
		if got, err := hostnameOverHTTP(from, addr, 5*time.Second); err != nil || got != want {
			t.Errorf("%s -> %s try %d: %q, %v; want %s", what, addr, i, got, err, want)
		}
	}
}

// reachesAll is H2/H3 with a wait: the request must first succeed within
// respondingTimeout (the proxy's lag), then every name in want must answer
// within n²+30 tries and no stranger.
func reachesAll(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, want []string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s answers", what, addr), respondingTimeout, func() error {
		_, err := hostnameOverHTTP(from, addr, 5*time.Second)
		return err
	})
	dialUntilAll(t, fmt.Sprintf("%s -> %s", what, addr), want, len(want)*len(want)+30, func() (string, error) {
		return hostnameOverHTTP(from, addr, 5*time.Second)
	})
}

// reachesAllUDP is reachesAll over UDP (`echo hostName | nc -u`).
func reachesAllUDP(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, want []string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s/UDP answers", what, addr), respondingTimeout, func() error {
		_, err := hostnameOverUDP(from, addr, time.Second)
		return err
	})
	dialUntilAll(t, fmt.Sprintf("%s -> %s/UDP", what, addr), want, len(want)*len(want)+30, func() (string, error) {
		return hostnameOverUDP(from, addr, time.Second)
	})
}

// goesDown waits (timeout) until from's request to addr fails (H7's
// verifyServeHostnameServiceDown, `curl --connect-timeout 2`).
func goesDown(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, timeout time.Duration) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s no longer answers", what, addr), timeout, func() error {
		if got, err := hostnameOverHTTP(from, addr, 2*time.Second); err == nil {
			return fmt.Errorf("answered by %q", got)
		}
		return nil
	})
}

// goesDownUDP is goesDown over UDP: no datagram back within a second.
func goesDownUDP(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, timeout time.Duration) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s/UDP no longer answers", what, addr), timeout, func() error {
		if got, err := hostnameOverUDP(from, addr, time.Second); err == nil {
			return fmt.Errorf("answered by %q", got)
		}
		return nil
	})
}

// neverAnswers requires tries requests from from to addr, one a second,
// to all fail (H3's DialFromNode(..., 10, 10, ∅), `curl --connect-timeout 5`).
func neverAnswers(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, tries int) {
	t.Helper()
	for i := 0; i < tries; i++ {
		if got, err := hostnameOverHTTP(from, addr, 5*time.Second); err == nil {
			t.Errorf("%s -> %s try %d: answered by %q; want no answer", what, addr, i, got)
		}
		time.Sleep(time.Second)
	}
}

// checkAffinity is H9 from a pod: a batch of 16 requests, repeated until
// (respondingTimeout) all 16 were answered by one host (hold) or by at
// least two (!hold).
func checkAffinity(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, hold bool) {
	t.Helper()
	want := "one host"
	if !hold {
		want = "at least two hosts"
	}
	eventually(t, fmt.Sprintf("%s -> %s: 16 requests answered by %s", what, addr, want), respondingTimeout, func() error {
		seen := map[string]int{}
		for i := 0; i < 16; i++ {
			got, err := hostnameOverHTTP(from, addr, 2*time.Second)
			if err != nil {
				return err
			}
			seen[got]++
		}
		if hold != (len(seen) == 1) {
			return fmt.Errorf("answered by %v", seen)
		}
		return nil
	})
}

// refused is `agnhost connect --timeout=3s ADDR` from ns: nil when the
// connection is actively refused (RST or ICMP port unreachable), an error
// naming what happened otherwise (accepted, timed out, ...).
func refused(ns *ktest.NS, addr netip.AddrPort) error {
	return ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr.String(), 3*time.Second)
		if err == nil {
			c.Close()
			return fmt.Errorf("connect %s: accepted", addr)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return fmt.Errorf("connect %s: %w, want REFUSED", addr, err)
	})
}

// udpLoop is conntrack.go's client, `while true; do echo hostname | nc -u
// -w 1 -p PORT ADDR PORT; done`: one socket bound to a fixed source port
// in the client's namespace, one datagram a second to target, every answer
// kept in order. Like nc in that loop it tries again when it cannot even
// connect: a client in a node's own namespace, which has no default route,
// gets ENETUNREACH for a ClusterIP until the node's proxy has bound it to
// kube-ipvs0 (SN-93 failed so in CI, just after the Service was
// created).
type udpLoop struct {
	mu  sync.Mutex
	log []string
	// dialErrs counts the failed connects, lastDialErr the last one's
	// error.
	dialErrs    int
	lastDialErr error
	stop        chan struct{}
	done        chan struct{}
}

// startUDPLoop starts the client; it stops at the end of the test.
func startUDPLoop(t *testing.T, ns *ktest.NS, local uint16, target netip.AddrPort) *udpLoop {
	t.Helper()
	l := &udpLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		var conn *net.UDPConn
		defer func() {
			if conn != nil {
				conn.Close()
			}
		}()
		buf := make([]byte, 1500)
		for {
			if conn == nil {
				if err := ns.Do(func() error {
					var err error
					conn, err = net.DialUDP("udp", &net.UDPAddr{Port: int(local)}, net.UDPAddrFromAddrPort(target))
					return err
				}); err != nil {
					conn = nil
					l.mu.Lock()
					l.dialErrs++
					l.lastDialErr = fmt.Errorf("udp client :%d -> %s: %w", local, target, err)
					l.mu.Unlock()
				}
			}
			if conn != nil {
				_ = conn.SetDeadline(time.Now().Add(time.Second))
				if _, err := conn.Write([]byte("hostname\n")); err == nil {
					if n, err := conn.Read(buf); err == nil {
						l.mu.Lock()
						l.log = append(l.log, strings.TrimSpace(string(buf[:n])))
						l.mu.Unlock()
					}
				}
			}
			select {
			case <-l.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(l.stop); <-l.done })
	return l
}

// count is how many answers the client has had.
func (l *udpLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.log)
}

// waitFor waits (timeout) until the client's log, from entry from on,
// holds name; it returns the log's length then.
func (l *udpLoop) waitFor(t *testing.T, name string, from int, timeout time.Duration) int {
	t.Helper()
	var n int
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		n = len(l.log)
		for _, got := range l.log[min(from, n):] {
			if got == name {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		l.mu.Lock()
		tail := l.log[max(0, len(l.log)-10):]
		dialErrs, lastDialErr := l.dialErrs, l.lastDialErr
		l.mu.Unlock()
		t.Fatalf("the UDP client never heard %s within %v (its last answers: %q; failed connects: %d, the last: %v)", name, timeout, tail, dialErrs, lastDialErr)
	}
	t.Logf("the UDP client heard %s", name)
	return n
}
