package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// hits sends n TCP requests from ns and counts answers by backend name.
func hits(ns *ktest.NS, addr string, n int) (map[string]int, []string, error) {
	counts := map[string]int{}
	var answers []string
	for range n {
		out, err := ns.Request(ktest.TCP, addr)
		if err != nil {
			return counts, answers, err
		}
		answers = append(answers, out)
		name, _, _ := strings.Cut(out, " ")
		counts[name]++
	}
	return counts, answers, nil
}

// ask sends n requests from ns (named who) to addr, prints the answers and
// checks they came from exactly the backends in want.
func ask(who string, ns *ktest.NS, addr string, n int, want ...string) error {
	counts, answers, err := hits(ns, addr, n)
	fmt.Printf("    %s$ request tcp %s  x%d\n", who, addr, n)
	for _, a := range answers {
		fmt.Printf("      %s\n", a)
	}
	if err != nil {
		return err
	}
	var got []string
	for name := range counts {
		got = append(got, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s answered by %v, want %v", addr, got, want)
	}
	return nil
}

func (d *demo) requestsClusterIP() error {
	if err := ask("client-pod", d.clientPod.NS, mysqlVIP+":3306", 4, "mysql-0", "mysql-1"); err != nil {
		return err
	}
	for _, port := range []string{"2181", "2888", "3888"} {
		if err := ask("client-pod", d.clientPod.NS, zkVIP+":"+port, 1, "zookeeper1-0"); err != nil {
			return err
		}
	}
	say("the backends see client-pod's own address: traffic from a pod is not masqueraded")
	return nil
}

func (d *demo) requestsAffinity() error {
	counts, _, err := hits(d.clientPod.NS, stickVIP+":80", 6)
	fmt.Printf("    client-pod$ request tcp %s:80  x6   (sticky-web, ClientIP)  -> %v\n", stickVIP, counts)
	if err != nil {
		return err
	}
	if len(counts) != 1 {
		return fmt.Errorf("ClientIP affinity: answers from %d backends, want 1", len(counts))
	}
	counts, _, err = hits(d.clientPod.NS, nginxVIP+":80", 6)
	fmt.Printf("    client-pod$ request tcp %s:80  x6  (nginx-service, no affinity) -> %v\n", nginxVIP, counts)
	if err != nil {
		return err
	}
	if len(counts) != 2 {
		return fmt.Errorf("round robin: answers from %d backends, want 2", len(counts))
	}
	return nil
}

func (d *demo) requestsNodePort() error {
	if err := ask("client", d.client.NS, nodeAIP+":30010", 4, "mysql-0", "mysql-1"); err != nil {
		return err
	}
	say("each backend answers with the address it saw: %s, node-a's own address on its side of every pod veth,", ktest.PodGatewayV4)
	say("not the client's %s: traffic from outside the cluster to a Service with externalTrafficPolicy: Cluster", d.client.Addrs[0])
	say("is masqueraded (KUBE-MARK-MASQ, as kube-proxy does) so that replies go back through node-a;")
	say("externalTrafficPolicy: Local keeps the client's address and serves only from local endpoints")
	return nil
}

func (d *demo) requestsExternalIP() error {
	if err := ask("client", d.client.NS, nodeAIP+":80", 2, "nginx-0", "nginx-1"); err != nil {
		return err
	}
	return ask("client", d.client.NS, freeExtIP+":80", 2, "nginx-0", "nginx-1")
}

func (d *demo) nodeBReachable() error {
	out, err := d.node.Request(ktest.TCP, fmt.Sprintf("%s:%d", nodeBIP, kubelet))
	fmt.Printf("    node-a$ request tcp %s:%d\n", nodeBIP, kubelet)
	if err != nil {
		return err
	}
	fmt.Printf("      %s\n", out)
	if !strings.HasPrefix(out, "node-b-kubelet ") {
		return fmt.Errorf("answered by %q, not node-b", out)
	}
	return nil
}

// httpGet fetches path from addr inside node-a (the socket is made there).
func (d *demo) httpGet(addr, path string) (string, error) {
	var body []byte
	err := d.node.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
		body, err = io.ReadAll(c)
		return err
	})
	return string(body), err
}

// setMySQL1 marks mysql-1 in wordpress-mysql's EndpointSlice ready or
// terminating (not serving), stamping the trigger time as the EndpointSlice
// controller does, and returns when the kernel shows want for it.
func (d *demo) setMySQL1(ready bool, want string) (time.Duration, error) {
	api := d.kube.DiscoveryV1().EndpointSlices("default")
	s, err := api.Get(d.ctx, "wordpress-mysql-demo", metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for i := range s.Endpoints {
		if s.Endpoints[i].TargetRef.Name == "mysql-1" {
			s.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(!ready)}
		}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	start := time.Now()
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = start.UTC().Format(time.RFC3339Nano)
	if _, err := api.Update(d.ctx, s, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	err = waitFor(30*time.Second, func() error {
		out, err := d.node.Exec("ipvsadm", "-S", "-n")
		if err != nil {
			return err
		}
		if !strings.Contains(out, want+"\n") {
			return fmt.Errorf("the kernel lacks %q", want)
		}
		return nil
	})
	return time.Since(start), err
}

func (d *demo) changeEndpoints() error {
	say("kubectl: EndpointSlice wordpress-mysql-demo, mysql-1 -> ready=false serving=false terminating=true")
	took, err := d.setMySQL1(false, "-a -t "+mysqlVIP+":3306 -r 10.244.1.3:3306 -m -w 0")
	if err != nil {
		return err
	}
	say("in the kernel %.2fs later (API server -> watch -> plan -> partial apply, under TCG):", took.Seconds())
	if _, err := d.sh("ipvsadm", "-Ln", "-t", mysqlVIP+":3306"); err != nil {
		return err
	}
	say("mysql-1 is quiesced at weight 0 (TCP: existing connections finish, no new ones), not deleted")
	if err := ask("client-pod", d.clientPod.NS, mysqlVIP+":3306", 3, "mysql-0"); err != nil {
		return err
	}
	say("kubectl: mysql-1 -> ready=true again")
	took, err = d.setMySQL1(true, "-a -t "+mysqlVIP+":3306 -r 10.244.1.3:3306 -m -w 1")
	if err != nil {
		return err
	}
	say("weight 1 again %.2fs later", took.Seconds())
	return ask("client-pod", d.clientPod.NS, mysqlVIP+":3306", 2, "mysql-0", "mysql-1")
}
