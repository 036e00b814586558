package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// planEqualsKernel dumps the API server's Services, EndpointSlices and
// Nodes as one List (as `kubectl get svc,endpointslices,nodes -A -o json`
// would), runs `ipvs-proxy plan` over it for node-a, and compares its
// `# ipvs` and `# kube-ipvs0` sections with what the kernel holds.
func (d *demo) planEqualsKernel() error {
	path := filepath.Join(filepath.Dir(d.stateDir), "cluster.json")
	if err := d.dumpCluster(path); err != nil {
		return err
	}
	args := []string{"plan", "-f", path, "--node-name", nodeA,
		"--node-ip", nodeAIP + ",2001:db8:100::1", "--cluster-cidr", podCIDR}
	fmt.Printf("    $ kubectl get svc,endpointslices,nodes -A -o json > cluster.json\n")
	fmt.Printf("    $ ipvs-proxy plan -f cluster.json %s\n", strings.Join(args[3:], " "))
	out, err := exec.Command(d.proxyBin, args...).Output()
	if err != nil {
		return fmt.Errorf("ipvs-proxy plan: %w", err)
	}
	sections := planSections(string(out))
	for _, l := range sections["refused"] {
		say("  # refused: %s", l)
	}

	kernelIPVS, err := d.node.Exec("ipvsadm", "-S", "-n")
	if err != nil {
		return err
	}
	if err := sameLines("# ipvs", sections["ipvs"], lines(kernelIPVS)); err != nil {
		return err
	}
	addrs, err := d.node.Exec("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		return err
	}
	var bound []string
	for _, l := range lines(addrs) {
		// "23: kube-ipvs0    inet 10.96.0.1/32 scope global ..."
		f := strings.Fields(l)
		if len(f) >= 4 && (f[2] == "inet" || f[2] == "inet6") {
			bound = append(bound, f[3])
		}
	}
	if err := sameLines("# kube-ipvs0", sections["kube-ipvs0"], bound); err != nil {
		return err
	}
	say("plan's # ipvs (%d lines) = ipvsadm -S -n; plan's # kube-ipvs0 (%d addresses) = ip addr show kube-ipvs0",
		len(sections["ipvs"]), len(sections["kube-ipvs0"]))
	return nil
}

func (d *demo) dumpCluster(path string) error {
	list := struct {
		metav1.TypeMeta
		Items []runtime.Object `json:"items"`
	}{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	svcs, err := d.kube.CoreV1().Services("").List(d.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		s.APIVersion, s.Kind = "v1", "Service"
		list.Items = append(list.Items, s)
	}
	eps, err := d.kube.DiscoveryV1().EndpointSlices("").List(d.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range eps.Items {
		s := &eps.Items[i]
		s.APIVersion, s.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		list.Items = append(list.Items, s)
	}
	nodes, err := d.kube.CoreV1().Nodes().List(d.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		n.APIVersion, n.Kind = "v1", "Node"
		list.Items = append(list.Items, n)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// planSections splits plan's text output into its "# name" sections.
func planSections(out string) map[string][]string {
	secs := map[string][]string{}
	cur := ""
	for _, l := range lines(out) {
		if name, ok := strings.CutPrefix(l, "# "); ok && !strings.Contains(name, " ") {
			cur = name
			continue
		}
		secs[cur] = append(secs[cur], l)
	}
	return secs
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, " \r"); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// sameLines compares two line sets regardless of order (ipvsadm prints
// virtual servers in hash order; each -a line names its virtual server).
func sameLines(what string, plan, kernel []string) error {
	p, k := slices.Clone(plan), slices.Clone(kernel)
	slices.Sort(p)
	slices.Sort(k)
	if slices.Equal(p, k) {
		return nil
	}
	var diff []string
	for _, l := range p {
		if !slices.Contains(k, l) {
			diff = append(diff, "plan only:   "+l)
		}
	}
	for _, l := range k {
		if !slices.Contains(p, l) {
			diff = append(diff, "kernel only: "+l)
		}
	}
	return fmt.Errorf("%s differs between plan and the kernel:\n      %s", what, strings.Join(diff, "\n      "))
}
