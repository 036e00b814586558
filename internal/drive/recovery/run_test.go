package recovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// fakeNode is a stateful NodeKernel over addrmgrtest.FakeLink and
// ipvstest.FakeTable.
type fakeNode struct {
	local    []netip.Prefix
	gateways []netip.Addr
	link     *addrmgrtest.FakeLink
	table    *ipvstest.FakeTable
}

func (f *fakeNode) Read() (*Node, error) {
	bound, _ := f.link.Addrs()
	vs, _ := f.table.Services()
	return &Node{LocalPrefixes: f.local, Gateways: f.gateways, HasDevice: true, Bound: bound, HasIPVS: true, VirtualServers: vs}, nil
}
func (f *fakeNode) Link() addrmgr.Link { return f.link }
func (f *fakeNode) Table() ipvs.Table  { return f.table }

// newFakeNode is node A (198.51.100.1) with a legitimate VIP 10.96.0.10,
// node B's address 198.51.100.2 bound with a virtual server, a leftover
// VIP 10.96.0.99 without one, and a foreign (keepalived) virtual server
// on 203.0.113.5, not bound.
func newFakeNode() *fakeNode {
	return &fakeNode{
		local:    pfxs("198.51.100.1/24", "127.0.0.1/8"),
		gateways: []netip.Addr{netip.MustParseAddr("198.51.100.254")},
		link:     addrmgrtest.NewFakeLink(pfxs("10.96.0.10/32", "198.51.100.2/32", "10.96.0.99/32")...),
		table:    ipvstest.NewFakeTable(vss("tcp 10.96.0.10:80", "tcp 198.51.100.2:6443", "tcp 203.0.113.5:80")...),
	}
}

func clusterObjects() []runtime.Object {
	node := func(name, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	return []runtime.Object{node("a", "198.51.100.1"), node("b", "198.51.100.2"), svc}
}

func TestRecover(t *testing.T) {
	writeCache := func(t *testing.T) string {
		dir := t.TempDir()
		if err := informers.NewNodeAddressCache(dir, time.Hour).Set(map[string][]netip.Addr{
			"a": {netip.MustParseAddr("198.51.100.1")}, "b": {netip.MustParseAddr("198.51.100.2")}}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	unreachable := func() *fake.Clientset {
		c := fake.NewClientset()
		c.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("dial tcp 198.51.100.10:6443: i/o timeout")
		})
		return c
	}
	for _, tc := range []struct {
		name      string
		cache     bool
		client    func() *fake.Clientset
		stale     bool
		api       string
		want      string
		apiStatus string
	}{
		{name: "offline, no cache: node B unknown, nothing found", api: "", want: "", apiStatus: "not configured"},
		{name: "offline with the cache", cache: true, want: "198.51.100.2/32 NodeIP [tcp 198.51.100.2:6443]\n", apiStatus: "not configured"},
		{name: "offline with the cache and --stale", cache: true, stale: true,
			want: "10.96.0.99/32 NoVirtualServer []\n198.51.100.2/32 NodeIP [tcp 198.51.100.2:6443]\n", apiStatus: "not configured"},
		{name: "API unreachable, cache used", cache: true, client: unreachable,
			want: "198.51.100.2/32 NodeIP [tcp 198.51.100.2:6443]\n", apiStatus: "unreachable: list nodes: dial tcp"},
		{name: "API reachable, no cache", client: func() *fake.Clientset { return fake.NewClientset(clusterObjects()...) },
			want: "10.96.0.99/32 NotWanted []\n198.51.100.2/32 NodeIP [tcp 198.51.100.2:6443]\n", apiStatus: "reachable"},
		{name: "API server address from the kubeconfig is protected", api: "https://10.96.0.99:6443",
			want: "10.96.0.99/32 APIServer []\n", apiStatus: "not configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{NodeName: "a", ProcRoot: "-", Stale: tc.stale, APIServerHost: tc.api}
			if tc.cache {
				o.StateDir = writeCache(t)
			} else {
				o.StateDir = t.TempDir()
			}
			if tc.client != nil {
				o.Client = tc.client()
			}
			n := newFakeNode()
			rep, err := Recover(context.Background(), n, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(rep.Findings); got != tc.want {
				t.Errorf("findings:\n got %q\nwant %q", got, tc.want)
			}
			if !strings.HasPrefix(rep.APIServer, tc.apiStatus) {
				t.Errorf("APIServer = %q, want prefix %q", rep.APIServer, tc.apiStatus)
			}
			if rep.Applied || n.link.Mutations+n.table.Mutations != 0 {
				t.Fatalf("dry run changed the node: %s %s", n.link, n.table)
			}

			// Now for real: exactly the findings go.
			o.Apply = true
			rep, err = Recover(context.Background(), n, o)
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Result.Err(); rep.Applied && err != nil {
				t.Fatal(err)
			}
			bound := n.link.String()
			for _, f := range rep.Findings {
				if strings.Contains(bound, f.Address.String()) {
					t.Errorf("%s still bound", f.Address)
				}
			}
			for _, keep := range []string{"10.96.0.10/32"} {
				if !strings.Contains(bound, keep) {
					t.Errorf("legitimate VIP %s removed: %s", keep, bound)
				}
			}
			table := n.table.String()
			for _, keep := range []string{"10.96.0.10:80", "203.0.113.5:80"} {
				if !strings.Contains(table, keep) {
					t.Errorf("virtual server %s removed:\n%s", keep, table)
				}
			}
			rep, err = Recover(context.Background(), n, Options{NodeName: "a", ProcRoot: "-", StateDir: o.StateDir, Stale: tc.stale, APIServerHost: tc.api, Client: o.Client})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Findings) != 0 {
				t.Errorf("after apply, still found: %s", render(rep.Findings))
			}
		})
	}
}

func TestRecoverNamesProxies(t *testing.T) {
	root := t.TempDir()
	for pid, proc := range map[string][2]string{
		"100": {"kube-proxy", "/usr/local/bin/kube-proxy\x00--v=2\x00"},
		"200": {"ipvs-proxy", "/ipvs-proxy\x00run\x00"},
	} {
		dir := root + "/" + pid
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(dir+"/comm", []byte(proc[0]+"\n"), 0o644)
		_ = os.WriteFile(dir+"/cmdline", []byte(proc[1]), 0o644)
	}
	rep, err := Recover(context.Background(), newFakeNode(), Options{ProcRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.OtherProxies) != 2 {
		t.Fatalf("other proxies %+v", rep.OtherProxies)
	}
	w := strings.Join(rep.Warnings, "\n")
	if !strings.Contains(w, "kube-proxy (pid 100) is running and may add addresses back: stop it first") ||
		!strings.Contains(w, "ipvs-proxy run (pid 200) is running: it never binds a protected address") {
		t.Errorf("warnings:\n%s", w)
	}
}

// TestRecoverInCluster: `recover` in a pod (deploy/base) dials
// KUBERNETES_SERVICE_HOST, the kubernetes Service's ClusterIP 10.96.0.1.
// That VIP is not the API server, online or offline: it stays bound with
// its virtual server. The real API server, the default/kubernetes
// EndpointSlice's 198.51.100.10, bound by a tenant's externalIP, goes.
func TestRecoverInCluster(t *testing.T) {
	kubernetes := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	tenant := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "capture"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.77", ClusterIPs: []string{"10.96.0.77"},
			ExternalIPs: []string{"198.51.100.10"},
			Ports:       []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes",
		Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.10"}}}}
	newNode := func() *fakeNode {
		n := newFakeNode()
		n.link = addrmgrtest.NewFakeLink(pfxs("10.96.0.1/32", "10.96.0.10/32", "10.96.0.77/32", "198.51.100.10/32")...)
		n.table = ipvstest.NewFakeTable(vss("tcp 10.96.0.1:443", "tcp 10.96.0.10:80", "tcp 10.96.0.77:443", "tcp 198.51.100.10:443")...)
		return n
	}
	objs := append(clusterObjects(), kubernetes, tenant, slice)
	for _, tc := range []struct {
		name   string
		client kubernetesClient
		want   string
	}{
		{"online", func() *fake.Clientset { return fake.NewClientset(objs...) },
			"198.51.100.10/32 APIServer [tcp 198.51.100.10:443]\n"},
		{"offline: the in-cluster host is taken for a Service IP", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{NodeName: "a", ProcRoot: "-", StateDir: t.TempDir(),
				APIServerHost: "https://10.96.0.1:443", APIServerInCluster: true}
			if tc.client != nil {
				o.Client = tc.client()
			}
			rep, err := Recover(context.Background(), newNode(), o)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(rep.Findings); got != tc.want {
				t.Errorf("findings:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

type kubernetesClient func() *fake.Clientset

// TestRecoverDeletedNode: node b was deleted from the API two hours ago
// (the cache records when it was last seen). Within the grace period its
// address bound on kube-ipvs0 is found as NodeIP, offline and when the
// API server (which no longer lists b) answers; past it, it is an address
// like any other (issue 14, item 4).
func TestRecoverDeletedNode(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	file := fmt.Sprintf(`{"updated": %q, "nodes": {"a": ["198.51.100.1"], "b": ["198.51.100.2"]}, "lastSeen": {"b": %q}}`,
		now.Add(-2*time.Hour).Format(time.RFC3339), now.Add(-2*time.Hour).Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(dir, informers.NodeAddressFile), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	onlyA := func() *fake.Clientset {
		objs := clusterObjects()
		return fake.NewClientset(objs[0], objs[2]) // node a and the Service; b is gone
	}
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		client func() *fake.Clientset
		want   string
	}{
		{"offline, within the grace period", 24 * time.Hour, nil, "198.51.100.2/32 NodeIP [tcp 198.51.100.2:6443]\n"},
		{"offline, past the grace period", time.Hour, nil, ""},
		{"online, the API no longer lists b", 24 * time.Hour, onlyA, "10.96.0.99/32 NotWanted []\n198.51.100.2/32 NodeIP [tcp 198.51.100.2:6443]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{NodeName: "a", ProcRoot: "-", StateDir: dir, DeletedNodeGrace: tc.grace, Clock: clocktesting.NewFakePassiveClock(now)}
			if tc.client != nil {
				o.Client = tc.client()
			}
			rep, err := Recover(context.Background(), newFakeNode(), o)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(rep.Findings); got != tc.want {
				t.Errorf("findings:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestRecoverCachedAPIServer: offline, the API server's endpoints are
// those run last recorded in the cache (issue 14, items 2 and 12).
func TestRecoverCachedAPIServer(t *testing.T) {
	dir := t.TempDir()
	file := `{"updated": "2026-11-24T10:00:00Z", "nodes": {"a": ["198.51.100.1"]}, "apiServers": ["198.51.100.10"]}`
	if err := os.WriteFile(filepath.Join(dir, informers.NodeAddressFile), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	n := newFakeNode()
	n.link = addrmgrtest.NewFakeLink(pfxs("10.96.0.10/32", "198.51.100.10/32")...)
	rep, err := Recover(context.Background(), n, Options{NodeName: "a", ProcRoot: "-", StateDir: dir,
		APIServerHost: "https://10.96.0.1:443", APIServerInCluster: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(rep.Findings), "198.51.100.10/32 APIServer []\n"; got != want {
		t.Errorf("findings:\n got %q\nwant %q", got, want)
	}
}

// TestRecoverUntrustedCluster: an API server whose Nodes do not include
// this node (another cluster's kubeconfig) is not trusted: with Apply,
// Recover changes nothing and returns ErrUntrustedCluster unless Force;
// the deleted-node history says when the cache saw this node deleted
// (issue 14, item 11).
func TestRecoverUntrustedCluster(t *testing.T) {
	other := func() *fake.Clientset {
		return fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "y"}})
	}
	dir := t.TempDir()
	file := `{"updated": "2026-11-24T10:00:00Z", "nodes": {"a": ["198.51.100.1"], "b": ["198.51.100.2"]}, "lastSeen": {"a": "2026-11-24T09:00:00Z"}}`
	if err := os.WriteFile(filepath.Join(dir, informers.NodeAddressFile), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	n := newFakeNode()
	o := Options{NodeName: "a", ProcRoot: "-", StateDir: dir, Client: other(), Apply: true, DeletedNodeGrace: 24 * time.Hour,
		Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))}
	rep, err := Recover(context.Background(), n, o)
	if !errors.Is(err, ErrUntrustedCluster) {
		t.Fatalf("Recover = %v, want ErrUntrustedCluster", err)
	}
	if n.link.Mutations+n.table.Mutations != 0 || rep.Applied {
		t.Fatalf("an untrusted cluster changed the node: %s %s", n.link, n.table)
	}
	if !strings.Contains(rep.Untrusted, `lists 2 Nodes and not this node "a"`) ||
		!strings.Contains(rep.Untrusted, `records "a" as deleted from the API, last seen 2026-11-24T09:00:00Z`) {
		t.Errorf("Untrusted = %q", rep.Untrusted)
	}
	o.Force, o.Client = true, other()
	if rep, err = Recover(context.Background(), n, o); err != nil || !rep.Applied {
		t.Fatalf("--force: %v, applied %v", err, rep.Applied)
	}
}

// TestRecoverHonoursTheCap: recover plans with run's
// --max-virtual-servers-per-service. An externalIP past the default cap
// that run, given a higher cap, binds is not wanted with the default and
// wanted with the same cap as run's: recover --apply must be given it, or
// would take the address away until run's next sync.
func TestRecoverHonoursTheCap(t *testing.T) {
	objs := clusterObjects()
	svc := objs[2].(*corev1.Service).DeepCopy()
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP})
	for i := range 600 {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, fmt.Sprintf("100.64.%d.%d", i/250, i%250+1))
	}
	objs[2] = svc
	far := "100.64.2.51/32" // externalIPs[550]: 2 ports × 551 addresses > 1,000
	for _, tc := range []struct {
		max  int
		want string
	}{
		{0, far + " NotWanted [tcp 100.64.2.51:80]\n"},
		{2000, ""},
	} {
		n := &fakeNode{
			local: pfxs("198.51.100.1/24"),
			link:  addrmgrtest.NewFakeLink(pfxs("10.96.0.10/32", far)...),
			table: ipvstest.NewFakeTable(vss("tcp 10.96.0.10:80", "tcp 100.64.2.51:80")...),
		}
		rep, err := Recover(context.Background(), n, Options{NodeName: "a", ProcRoot: "-", StateDir: t.TempDir(),
			Client: fake.NewClientset(objs...), MaxVirtualServersPerService: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if got := render(rep.Findings); got != tc.want {
			t.Errorf("cap %d: findings %q, want %q", tc.max, got, tc.want)
		}
	}
}
