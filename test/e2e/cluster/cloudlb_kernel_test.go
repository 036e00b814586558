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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// cloudLB is the cloud of the upstream bed's LoadBalancer Services (the
// re-created tests play it themselves: fakeLB): upstream's specs create a
// Service of type LoadBalancer, wait for status.loadBalancer.ingress and
// send requests to it from e2e.test, in the runner. Like a cloud's service
// controller it gives each such Service an ingress address (192.168.60.128
// and up); like its L3 load balancer it routes that address from the
// runner over the nodes whose health check passes (an ECMP route hashing
// on ports, so each connection goes to one node): the Service's health
// check node port under externalTrafficPolicy Local, the proxy's own
// /healthz (10256) under Cluster (cluster.LBHealthPort), checked every
// cloudLBPeriod, every node when none passes (cluster.LBTargets).
type cloudLB struct {
	b      *bed
	t      *testing.T
	lister corelisters.ServiceLister
	pool   *cluster.LBPool
	// via is the route each Service's ingress has now, by node address.
	via map[types.NamespacedName][]netip.Addr
}

// cloudLBPeriod is how often the cloud checks the nodes' health and the
// Services (a cloud's health checks run every few seconds; shorter here,
// which only makes it follow the proxy sooner).
const cloudLBPeriod = 500 * time.Millisecond

// cloudLBCheckTimeout bounds one health check request.
const cloudLBCheckTimeout = time.Second

// startCloudLB runs the cloud until the returned stop is called; stop
// removes its routes (the ingress stays in the Services' status).
func (b *bed) startCloudLB(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(b.client, 0)
	c := &cloudLB{b: b, t: t, lister: factory.Core().V1().Services().Lister(),
		pool: cluster.NewLBPool(lbAddr(128), lbAddr(254)), via: map[types.NamespacedName][]netip.Addr{}}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	b.runner.Run(t, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait.UntilWithContext(ctx, c.sync, cloudLBPeriod)
	}()
	return func() {
		cancel()
		<-done
		factory.Shutdown()
		for _, svc := range c.pool.Assigned() {
			c.forget(svc)
		}
		_, _ = b.runner.Exec("sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=0")
	}
}

// sync is one round: Services gone (or no longer LoadBalancers) lose their
// address and route; the others get an address, their route over the
// healthy nodes, and then their ingress status.
func (c *cloudLB) sync(ctx context.Context) {
	svcs, err := c.lister.List(labels.Everything())
	if err != nil {
		c.t.Logf("cloud LB: list Services: %v", err)
		return
	}
	want := map[types.NamespacedName]*corev1.Service{}
	for _, s := range svcs {
		if cluster.CloudManages(s) {
			want[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
		}
	}
	for _, svc := range c.pool.Assigned() {
		if want[svc] == nil {
			c.forget(svc)
		}
	}
	for svc, s := range want {
		ip, err := c.pool.Assign(svc)
		if err != nil {
			c.t.Logf("cloud LB: %v", err)
			continue
		}
		c.route(svc, ip, cluster.LBTargets(c.nodeIPs(), c.passing(s)))
		if len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP != ip.String() {
			if err := c.publish(ctx, svc, ip); err != nil && ctx.Err() == nil {
				c.t.Logf("cloud LB: %v", err)
			}
		}
	}
}

func (c *cloudLB) nodeIPs() []netip.Addr {
	out := make([]netip.Addr, 0, len(c.b.nodes))
	for _, n := range c.b.nodes {
		out = append(out, n.ip)
	}
	return out
}

// passing is the health check of svc on every node, from the runner:
// GET http://NODE:PORT/healthz answered 200.
func (c *cloudLB) passing(svc *corev1.Service) map[netip.Addr]bool {
	port := cluster.LBHealthPort(svc)
	out := map[netip.Addr]bool{}
	for _, ip := range c.nodeIPs() {
		_ = c.b.runner.Do(func() error {
			code, _, err := cluster.HTTPGet(netip.AddrPortFrom(ip, port), "/healthz", netip.Addr{}, cloudLBCheckTimeout)
			out[ip] = err == nil && code == 200
			return nil
		})
	}
	return out
}

// route is `ip route replace IP/32 nexthop via NODE ...` in the runner,
// when the nodes changed.
func (c *cloudLB) route(svc types.NamespacedName, ip netip.Addr, via []netip.Addr) {
	if old, ok := c.via[svc]; ok && slices.Equal(old, via) {
		return
	}
	args := []string{"route", "replace", netip.PrefixFrom(ip, 32).String()}
	for _, n := range via {
		args = append(args, "nexthop", "via", n.String())
	}
	if out, err := c.b.runner.Exec("ip", args...); err != nil {
		c.t.Logf("cloud LB: %s %s: ip %s: %v: %s", svc, ip, strings.Join(args, " "), err, out)
		return
	}
	c.via[svc] = via
	c.t.Logf("cloud LB: %s %s via %s", svc, ip, c.nodeNames(via))
}

// nodeNames names the nodes of addrs, for the log.
func (c *cloudLB) nodeNames(addrs []netip.Addr) string {
	var names []string
	for _, n := range c.b.nodes {
		if slices.Contains(addrs, n.ip) {
			names = append(names, n.name)
		}
	}
	return fmt.Sprint(names)
}

// publish writes ip as svc's only ingress (ipMode VIP: the nodes take
// the address themselves).
func (c *cloudLB) publish(ctx context.Context, svc types.NamespacedName, ip netip.Addr) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		s, err := c.b.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if in := s.Status.LoadBalancer.Ingress; len(in) == 1 && in[0].IP == ip.String() {
			return nil // the lister was behind
		}
		mode := corev1.LoadBalancerIPModeVIP
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String(), IPMode: &mode}}
		_, err = c.b.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("ingress %s for %s: %w", ip, svc, err)
	}
	c.t.Logf("cloud LB: %s has ingress %s", svc, ip)
	return nil
}

// forget releases svc's address and deletes its route.
func (c *cloudLB) forget(svc types.NamespacedName) {
	ip, ok := c.pool.Release(svc)
	if !ok {
		return
	}
	delete(c.via, svc)
	route := netip.PrefixFrom(ip, 32).String()
	if out, err := c.b.runner.Exec("ip", "route", "del", route); err != nil {
		c.t.Logf("cloud LB: %s: ip route del %s: %v: %s", svc, route, err, out)
	}
}
