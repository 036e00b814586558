package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (d *demo) showIPVS() error {
	out, err := d.sh("ipvsadm", "-Ln")
	if err != nil {
		return err
	}
	if strings.Contains(out, nodeBIP) {
		return fmt.Errorf("a virtual server on node-b's address %s", nodeBIP)
	}
	return nil
}

func (d *demo) showKubeIPVS0() error {
	if _, err := d.sh("ip", "-br", "addr", "show", "dev", "kube-ipvs0"); err != nil {
		return err
	}
	say("kube-ipvs0 is a dummy device kept DOWN, as kube-proxy's: the kernel still treats its addresses as local,")
	say("so IPVS accepts packets for them, and no route ever sends traffic out through it")
	out, err := d.node.Exec("ip", "-4", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		return err
	}
	for _, vip := range []string{mysqlVIP, zkVIP, stickVIP, nginxVIP, freeExtIP} {
		if !strings.Contains(out, "inet "+vip+"/32") {
			return fmt.Errorf("%s is not bound on kube-ipvs0", vip)
		}
	}
	for _, a := range []string{nodeAIP, nodeBIP} {
		if strings.Contains(out, "inet "+a+"/") {
			return fmt.Errorf("the node address %s is bound on kube-ipvs0", a)
		}
	}
	say("%s (node-a) and %s (node-b) are not there: the guard refused them", nodeAIP, nodeBIP)
	return nil
}

func (d *demo) showEvents() error {
	want := map[string]bool{"default/nginx-service": false, "default/nginx-other": false}
	var evs []corev1.Event
	err := waitFor(30*time.Second, func() error {
		list, err := d.kube.CoreV1().Events("").List(d.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		evs = evs[:0]
		for _, e := range list.Items {
			if e.Source.Component != "ipvs-proxy" {
				continue
			}
			evs = append(evs, e)
			k := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
			if _, ok := want[k]; ok && e.Type == corev1.EventTypeWarning {
				want[k] = true
			}
		}
		for k, seen := range want {
			if !seen {
				return fmt.Errorf("no Warning Event on service %s", k)
			}
		}
		return nil
	})
	slices.SortFunc(evs, func(a, b corev1.Event) int { return strings.Compare(a.InvolvedObject.Name, b.InvolvedObject.Name) })
	fmt.Printf("    $ kubectl get events -A --field-selector source=ipvs-proxy\n")
	fmt.Printf("      %-8s %-8s %-8s %-28s %s\n", "TYPE", "REASON", "SOURCE", "OBJECT", "MESSAGE")
	for _, e := range evs {
		fmt.Printf("      %-8s %-8s %-8s %-28s %s\n", e.Type, e.Reason, e.Source.Host,
			strings.ToLower(e.InvolvedObject.Kind)+"/"+e.InvolvedObject.Name, e.Message)
	}
	return err
}

func (d *demo) showMetrics() error {
	body, err := d.httpGet("127.0.0.1:10249", "/metrics")
	if err != nil {
		return err
	}
	fmt.Printf("    node-a# curl -s 127.0.0.1:10249/metrics | grep ^ipvs_proxy_ | grep -v _bucket\n")
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "ipvs_proxy_") && !strings.Contains(l, "_bucket") {
			fmt.Printf("      %s\n", l)
			n++
		}
	}
	if n == 0 {
		return errors.New("no ipvs_proxy_ metrics")
	}
	hz, err := d.httpGet("127.0.0.1:10256", "/healthz")
	if err != nil {
		return err
	}
	status, _, _ := strings.Cut(hz, "\r\n")
	fmt.Printf("    node-a# curl -si 127.0.0.1:10256/healthz | head -1\n      %s\n", status)
	if !strings.Contains(status, " 200") {
		return fmt.Errorf("/healthz: %s", status)
	}
	return nil
}
