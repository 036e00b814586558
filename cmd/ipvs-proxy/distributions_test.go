package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// distributions holds the kube-proxy command lines kops, k3s and RKE2
// write, each file with its source and version.
const distributions = "testdata/distributions"

// TestDistributionKubeProxyArgs: the kube-proxy command lines of kops
// (nodeup's static pod), k3s (its embedded kube-proxy's arguments) and
// RKE2 (its static pod) start `run` unchanged (checked up to the start, as
// TestKubeProxyCommandLines does), or are refused with a message naming
// the flag; and with the one change each distribution documents for IPVS
// mode (kops: spec.kubeProxy.proxyMode, k3s and RKE2:
// --kube-proxy-arg=proxy-mode=ipvs), they start.
func TestDistributionKubeProxyArgs(t *testing.T) {
	kops := podArgs(t, "kops-nodeup-kube-proxy.manifest", "/usr/local/bin/kube-proxy")
	k3s := argsFile(t, "k3s-kube-proxy.args")
	rke2 := podArgs(t, "rke2-kube-proxy.yaml", "kube-proxy")
	const iptablesRefused = `--proxy-mode: "iptables": ipvs-proxy programs IPVS only`
	for _, tc := range []struct {
		name string
		args []string
		// refused is what stderr must say when run refuses; "" when it
		// must start.
		refused string
	}{
		// No --proxy-mode: kube-proxy's default, iptables mode, which run
		// takes the node over from.
		{"kops", kops, ""},
		{"kops ipvs", append(slices.Clone(kops), "--proxy-mode=ipvs"), ""},
		{"k3s", k3s, iptablesRefused},
		{"k3s ipvs", kubeProxyArg(k3s, "proxy-mode=ipvs"), ""},
		{"rke2", rke2, iptablesRefused},
		{"rke2 ipvs", kubeProxyArg(rke2, "proxy-mode=ipvs"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(ArgsFor("/usr/local/bin/kube-proxy", tc.args), "--write-config-to="+filepath.Join(t.TempDir(), "out.yaml"))
			code := Main(args, nil, &stdout, &stderr)
			switch {
			case tc.refused == "" && code != exitOK:
				t.Fatalf("kube-proxy %s: exit %d: %s", strings.Join(tc.args, " "), code, stderr.String())
			case tc.refused != "" && (code != exitUsage || !strings.Contains(stderr.String(), tc.refused)):
				t.Fatalf("kube-proxy %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), code, stderr.String(), exitUsage, tc.refused)
			}
		})
	}
}

// podArgs reads a static pod of testdata/distributions and returns the
// arguments its first container passes program (what follows program in
// its command and args).
func podArgs(t *testing.T, name, program string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(distributions, name))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(raw, &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(pod.Spec.Containers) == 0 {
		t.Fatalf("%s: no container", name)
	}
	c := pod.Spec.Containers[0]
	line := slices.Concat(c.Command, c.Args)
	i := slices.Index(line, program)
	if i < 0 {
		t.Fatalf("%s: %s not in %q", name, program, line)
	}
	return line[i+1:]
}

// argsFile reads an arguments file of testdata/distributions: one a line,
// # comments.
func argsFile(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(distributions, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var args []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if l := strings.TrimSpace(s.Text()); l != "" && !strings.HasPrefix(l, "#") {
			args = append(args, l)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return args
}

// kubeProxyArg is args after k3s' and RKE2's --kube-proxy-arg=NAME=VALUE:
// NAME's value replaced (k3s' util.GetArgs), or added.
func kubeProxyArg(args []string, nameValue string) []string {
	name, _, _ := strings.Cut(nameValue, "=")
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") })
	return append(out, "--"+nameValue)
}
