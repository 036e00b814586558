package main

import (
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

func (d *demo) buildNode() error {
	d.node = ktest.NewNode(d.t)
	for _, b := range backends {
		p := d.node.AddPod(d.t, b.name, b.addr)
		for _, port := range b.ports {
			p.Listen(d.t, ktest.TCP, port)
		}
	}
	d.clientPod = d.node.AddPod(d.t, "client-pod", clientPodIP)
	d.client = d.node.AddClient(d.t, "client", clientIP)
	d.nodeB = d.node.AddClient(d.t, nodeB, nodeBIP)
	if err := d.listenNodeB(); err != nil {
		return err
	}
	say("node-a   eth0 %s (a bridge: the node's LAN), pods 10.244.1.x on veths, --cluster-cidr %s", nodeAIP, podCIDR)
	for _, b := range backends {
		ports := []string{"8080"}
		for _, p := range b.ports {
			ports = append(ports, fmt.Sprint(p))
		}
		say("  pod %-13s %-11s answers \"%s <peer address>\" on tcp %s", b.name, b.addr, b.name, strings.Join(ports, ","))
	}
	say("  pod %-13s %-11s sends requests to ClusterIPs", "client-pod", clientPodIP)
	say("client   %s on the LAN: NodePort and externalIP traffic", clientIP)
	say("node-b   %s on the LAN: another node, its kubelet port %d answers \"node-b-kubelet <peer>\"", nodeBIP, kubelet)
	return nil
}

// listenNodeB serves node-b's "kubelet": one line naming it and the peer.
func (d *demo) listenNodeB() error {
	var l net.Listener
	err := d.nodeB.Do(func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", kubelet))
		return err
	})
	if err != nil {
		return fmt.Errorf("node-b: listen :%d: %w", kubelet, err)
	}
	d.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			fmt.Fprintf(c, "node-b-kubelet %s\n", peer)
			c.Close()
		}
	}()
	return nil
}

func (d *demo) writeScenarios() error {
	ctx := d.ctx
	for _, n := range []*corev1.Node{node(nodeA, nodeAIP), node(nodeB, nodeBIP)} {
		if _, err := d.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		say("node/%s  InternalIP %s", n.Name, n.Status.Addresses[0].Address)
	}
	for _, s := range scenarios() {
		if s.svc.Namespace != "default" {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.svc.Namespace}}
			if _, err := d.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", ns.Name, err)
			}
		}
		svc, err := d.kube.CoreV1().Services(s.svc.Namespace).Create(ctx, s.svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create service %s/%s: %w", s.svc.Namespace, s.svc.Name, err)
		}
		if _, err := d.kube.DiscoveryV1().EndpointSlices(s.slice.Namespace).Create(ctx, s.slice, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create endpointslice %s/%s: %w", s.slice.Namespace, s.slice.Name, err)
		}
		s.svc = svc
		say("%s", s.seed)
		say("  service/%s", describe(s))
	}
	return nil
}
