package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
)

// explainDir holds explain's goldens: NAME.golden (text) and NAME.json
// (-o json) of each case below, over the scenarios of testdata/plan.
var explainDir = filepath.Join("..", "..", "testdata", "explain")

// explainCases are explain's golden scenarios: the plan scenario, its
// flags variant ("" the default one) and the Service.
var explainCases = []struct {
	name, scenario, variant, service string
}{
	{"clusterip-nodeport", "wordpress-mysql", "", "default/wordpress-mysql"},
	{"local-elsewhere", "local-policies", "", "default/local-none"},
	{"terminating", "terminating", "", "default/rolling"},
	{"refused-externalip", "nginx-externalip", "refuse", "default/nginx-service"},
	{"refused-endpoint", "guard-round3", "", "tenant/hostile-eps"},
	{"topology", "topology", "", "default/hinted"},
}

func TestExplainGolden(t *testing.T) {
	for _, c := range explainCases {
		path := filepath.Join(planDir, c.scenario+".yaml")
		var flags []string
		for _, v := range readVariants(t, path) {
			if v.name == c.variant && !v.failed {
				flags = v.args
			}
		}
		if flags == nil {
			t.Fatalf("%s declares no flags[%s]", path, c.variant)
		}
		for _, out := range []struct{ format, ext string }{{"text", ".golden"}, {"json", ".json"}} {
			t.Run(c.name+"/"+out.format, func(t *testing.T) {
				args := append([]string{"explain", c.service, "-f", path, "-o", out.format}, flags...)
				var stdout, stderr bytes.Buffer
				if code := Main(args, strings.NewReader(""), &stdout, &stderr); code != exitOK || stderr.Len() > 0 {
					t.Fatalf("exit %d; stderr: %s", code, stderr.String())
				}
				golden := filepath.Join(explainDir, c.name+out.ext)
				if *update {
					if err := os.WriteFile(golden, stdout.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./cmd/ipvs-proxy -run TestExplainGolden -update)", err)
				}
				if got := stdout.String(); got != string(want) {
					t.Errorf("explain %s differs from %s (-update rewrites it):\n%s", strings.Join(args, " "), golden, lineDiff(string(want), got))
				}
			})
		}
	}
}

// TestExplainFromAPIServer: the same scenario listed from an API server
// (client-go's fake clientset, holding the scenario's objects and another
// Service's EndpointSlice that must not be read) explains as from files.
func TestExplainFromAPIServer(t *testing.T) {
	path := filepath.Join(planDir, "wordpress-mysql.yaml")
	flags := readVariants(t, path)[0].args
	objs, err := manifest.ReadFiles(append([]string{path}, flags[1]), nil)
	if err != nil {
		t.Fatal(err)
	}
	var all []runtime.Object
	for _, o := range objs.Services {
		all = append(all, o)
	}
	for _, o := range objs.Nodes {
		all = append(all, o)
	}
	for _, o := range objs.EndpointSlices {
		all = append(all, o)
	}
	all = append(all, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "other"}}, AddressType: discoveryv1.AddressTypeIPv4})
	client := fake.NewClientset(all...)
	var listed []string
	client.PrependReactor("list", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		listed = append(listed, a.(k8stesting.ListAction).GetListRestrictions().Labels.String())
		return false, nil, nil
	})
	defer func(old func(string, string, time.Duration) (kubernetes.Interface, error)) { explainClient = old }(explainClient)
	explainClient = func(string, string, time.Duration) (kubernetes.Interface, error) { return client, nil }

	args := append([]string{"explain", "default/wordpress-mysql", "--kubeconfig", "kc", "--kernel=false"}, flags[2:]...)
	var stdout, stderr bytes.Buffer
	if code := Main(args, strings.NewReader(""), &stdout, &stderr); code != exitOK || stderr.Len() > 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr.String())
	}
	want, err := os.ReadFile(filepath.Join(explainDir, "clusterip-nodeport.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != string(want) {
		t.Errorf("explain from the API server differs from the file's:\n%s", lineDiff(string(want), stdout.String()))
	}
	if w := []string{"kubernetes.io/service-name=wordpress-mysql", "kubernetes.io/service-name=kubernetes"}; !slices.Equal(listed, w) {
		t.Errorf("EndpointSlices listed by %q, want %q", listed, w)
	}
}

// TestExplainBadInput: a Service the input lacks, a malformed name, both
// sources or none are usage errors (exit 2) with one line naming them.
func TestExplainBadInput(t *testing.T) {
	scenario := filepath.Join(planDir, "node-ports.yaml")
	common := filepath.Join(planDir, "common", "nodes.yaml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tenant/nope", "-f", scenario, "-f", common, "--node-ip", "10.10.0.211"}, "no Service tenant/nope in the input"},
		{[]string{"np", "-f", scenario, "--node-ip", "10.10.0.211"}, `"np" is not NAMESPACE/NAME`},
		{[]string{"tenant/np", "--node-ip", "10.10.0.211"}, "-f FILE or --kubeconfig FILE is required"},
		{[]string{"tenant/np", "-f", scenario, "--kubeconfig", "kc", "--node-ip", "10.10.0.211"}, "two sources"},
		{[]string{"tenant/np", "-f", scenario}, "--node-ip is required"},
		{[]string{"-f", scenario, "--node-ip", "10.10.0.211"}, "accepts 1 arg(s)"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"explain"}, c.args...), strings.NewReader(""), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("explain %s: exit %d, stderr %q; want exit %d and one line with %q", strings.Join(c.args, " "), code, stderr.String(), exitUsage, c.want)
		}
	}
}
