//go:build kernel

package daemonbench

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/moby/ipvs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// criticalPollEvery is how often watchCritical looks at the kernel: one
// netlink request and one address dump of kube-ipvs0.
const criticalPollEvery = 20 * time.Millisecond

// watchCritical polls node's kernel, from ipvs-proxy's start on, until the
// API server's default/kubernetes Service is served: its virtual server
// has a real server and its ClusterIP is bound on kube-ipvs0 (the last
// step of a sync's safe order). It sends when it saw that, or why it
// stopped, once; stop ends it.
func watchCritical(ctx context.Context, client kubernetes.Interface, node *ktest.Node, p process, stop <-chan struct{}) <-chan pollResult {
	out := make(chan pollResult, 1)
	svc, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		out <- pollResult{err: err}
		return out
	}
	vip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || len(svc.Spec.Ports) == 0 {
		out <- pollResult{err: errors.New("default/kubernetes has no ClusterIP and port")}
		return out
	}
	vs := &ipvs.Service{AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP,
		Address: net.IP(vip.AsSlice()), Port: uint16(svc.Spec.Ports[0].Port)}
	go func() {
		h, err := ipvs.New(node.Path())
		if err != nil {
			out <- pollResult{err: err}
			return
		}
		defer h.Close()
		for {
			if dests, err := h.GetDestinations(vs); err == nil && len(dests) > 0 && bound(node, vip) {
				out <- pollResult{at: time.Now()}
				return
			}
			if !p.Alive() {
				out <- pollResult{err: errors.New("the proxy exited")}
				return
			}
			select {
			case <-stop:
				out <- pollResult{err: errors.New("not served")}
				return
			case <-time.After(criticalPollEvery):
			}
		}
	}()
	return out
}

// bound reports whether node's kube-ipvs0 holds a.
func bound(node *ktest.Node, a netip.Addr) bool {
	found := false
	_ = node.Do(func() error {
		dev, err := net.InterfaceByName("kube-ipvs0")
		if err != nil {
			return err
		}
		addrs, err := dev.Addrs()
		if err != nil {
			return err
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					found = true
				}
			}
		}
		return nil
	})
	return found
}
