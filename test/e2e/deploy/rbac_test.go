package deploy_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

// grant is one verb on one resource: what an RBAC rule allows and what an
// API call needs.
type grant struct{ group, resource, verb string }

func (g grant) String() string {
	if g.group == "" {
		return g.verb + " " + g.resource
	}
	return g.verb + " " + g.resource + "." + g.group
}

// apiCall is one kind of request `ipvs-proxy run` makes, done the way the
// proxy does it (the informers' list and watch with kube-proxy's label
// selector; the Event recorder's create and its patch of a repeated Event).
type apiCall struct {
	needs grant
	do    func(ctx context.Context, c kubernetes.Interface, f *fixture) error
}

// fixture holds what the calls act on.
type fixture struct {
	// event is an Event in namespace default, made by the admin, that the
	// patch call patches as the recorder patches a repeated Event.
	event string
	// leaseNS is the proxy's namespace, where the events Lease lives;
	// lease is a Lease there, made by the admin, that the get and update
	// calls act on; admin reads it for the update.
	leaseNS string
	lease   string
	admin   kubernetes.Interface
}

// watchOnce opens a watch and closes it: a missing watch verb fails the
// request before any event arrives.
func watchOnce(open func() (interface{ Stop() }, error)) error {
	w, err := open()
	if err != nil {
		return err
	}
	w.Stop()
	return nil
}

// proxyCalls are every call `ipvs-proxy run` makes. A new call in the proxy
// needs a line here, and the ClusterRole in deploy/base/rbac.yaml must then
// grant it: TestClusterRoleIsExactlyTheProxysCalls compares the two.
var proxyCalls = []apiCall{
	{grant{"", "services", "list"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		_, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: informers.ProxySelector().String(), ResourceVersion: "0"})
		return err
	}},
	{grant{"", "services", "watch"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		return watchOnce(func() (interface{ Stop() }, error) {
			return c.CoreV1().Services("").Watch(ctx, metav1.ListOptions{LabelSelector: informers.ProxySelector().String(), AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](5)})
		})
	}},
	{grant{"discovery.k8s.io", "endpointslices", "list"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		_, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: informers.ProxySelector().String(), ResourceVersion: "0"})
		return err
	}},
	{grant{"discovery.k8s.io", "endpointslices", "watch"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		return watchOnce(func() (interface{ Stop() }, error) {
			return c.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{LabelSelector: informers.ProxySelector().String(), AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](5)})
		})
	}},
	{grant{"", "nodes", "list"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		_, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err
	}},
	{grant{"", "nodes", "watch"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		return watchOnce(func() (interface{ Stop() }, error) {
			return c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](5)})
		})
	}},
	{grant{"", "events", "create"}, func(ctx context.Context, c kubernetes.Interface, _ *fixture) error {
		_, err := c.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, testEvent("ipvs-proxy-e2e-call."), metav1.CreateOptions{})
		return err
	}},
	{grant{"", "events", "patch"}, func(ctx context.Context, c kubernetes.Interface, f *fixture) error {
		patch := fmt.Sprintf(`{"count":2,"lastTimestamp":%q}`, time.Now().UTC().Format(time.RFC3339))
		_, err := c.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, f.event, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}},
}

// leaseCalls are the calls of the election of the events reporter
// (client-go's leaderelection with a LeaseLock): get, create and update of
// a Lease in the proxy's own namespace. The Role in deploy/base/rbac.yaml
// must grant exactly them: TestRoleIsExactlyTheProxysLeaseCalls.
var leaseCalls = []apiCall{
	{grant{"coordination.k8s.io", "leases", "get"}, func(ctx context.Context, c kubernetes.Interface, f *fixture) error {
		_, err := c.CoordinationV1().Leases(f.leaseNS).Get(ctx, f.lease, metav1.GetOptions{})
		return err
	}},
	{grant{"coordination.k8s.io", "leases", "create"}, func(ctx context.Context, c kubernetes.Interface, f *fixture) error {
		_, err := c.CoordinationV1().Leases(f.leaseNS).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "ipvs-proxy-e2e-call-"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), LeaseDurationSeconds: ptr.To[int32](60)},
		}, metav1.CreateOptions{})
		return err
	}},
	{grant{"coordination.k8s.io", "leases", "update"}, func(ctx context.Context, c kubernetes.Interface, f *fixture) error {
		// A Lease update needs the current resourceVersion; the admin
		// reads it, so that the call needs the update grant alone.
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := f.admin.CoordinationV1().Leases(f.leaseNS).Get(ctx, f.lease, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = c.CoordinationV1().Leases(f.leaseNS).Update(ctx, l, metav1.UpdateOptions{})
			return err
		})
	}},
}

// forbiddenCalls are calls the proxy never makes; its ServiceAccount must
// be refused each of them.
var forbiddenCalls = []struct {
	name string
	do   func(ctx context.Context, c kubernetes.Interface) error
}{
	{"get services (the proxy reads its informer cache)", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		return err
	}},
	{"delete services", func(ctx context.Context, c kubernetes.Interface) error {
		return c.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, "kubernetes", metav1.DeleteOptions{})
	}},
	{"create services", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "forbidden"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}, metav1.CreateOptions{})
		return err
	}},
	{"patch nodes", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		return err
	}},
	{"update endpointslices", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "forbidden"}, AddressType: discoveryv1.AddressTypeIPv4,
		}, metav1.UpdateOptions{})
		return err
	}},
	{"list secrets", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		return err
	}},
	{"list pods", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		return err
	}},
	{"delete events", func(ctx context.Context, c kubernetes.Interface) error {
		return c.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}},
	{"create events.k8s.io events (the recorder writes core/v1 Events)", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, &eventsV1Event, metav1.CreateOptions{})
		return err
	}},
	{"get a kubelet's node Lease (kube-node-lease)", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "node-a", metav1.GetOptions{})
		return err
	}},
	{"create a Lease outside the proxy's namespace", func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoordinationV1().Leases(metav1.NamespaceDefault).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "ipvs-proxy-e2e-forbidden-"},
		}, metav1.CreateOptions{})
		return err
	}},
	{"delete Leases in the proxy's namespace", func(ctx context.Context, c kubernetes.Interface) error {
		return c.CoordinationV1().Leases("ipvs-proxy").Delete(ctx, events.LeaseName, metav1.DeleteOptions{})
	}},
}

func testEvent(generateName string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: generateName},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: metav1.NamespaceDefault, Name: "kubernetes"},
		Reason:         "E2ECall",
		Message:        "an Event written like the proxy's recorder writes one",
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: events.Component, Host: "node-a"},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
}

// newFixture creates, as the admin, what the calls act on; leaseNS is the
// proxy's namespace (created if missing).
func newFixture(ctx context.Context, t *testing.T, admin kubernetes.Interface, leaseNS string) *fixture {
	t.Helper()
	ev, err := admin.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, testEvent("ipvs-proxy-e2e-fixture."), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	lease, err := admin.CoordinationV1().Leases(leaseNS).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ipvs-proxy-e2e-fixture-"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), LeaseDurationSeconds: ptr.To[int32](60)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{event: ev.Name, leaseNS: leaseNS, lease: lease.Name, admin: admin}
}

// runCalls makes every call, cluster-wide and in the proxy's namespace,
// and returns the error of each, by grant.
func runCalls(ctx context.Context, c kubernetes.Interface, f *fixture) map[grant]error {
	errs := map[grant]error{}
	for _, call := range slices.Concat(proxyCalls, leaseCalls) {
		errs[call.needs] = call.do(ctx, c, f)
	}
	return errs
}

// clusterRole returns the base's ClusterRole.
func clusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	var role rbacv1.ClusterRole
	o := findKind(t, build(t, deploy.Base), "ClusterRole")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
		t.Fatal(err)
	}
	return &role
}

// role returns the base's Role (the proxy's own namespace).
func role(t *testing.T) *rbacv1.Role {
	t.Helper()
	var r rbacv1.Role
	o := findKind(t, build(t, deploy.Base), "Role")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// grants expands rules into single grants; wildcards and resource names
// are reported as errors, since the proxy's role should have neither.
func grants(rules []rbacv1.PolicyRule) ([]grant, error) {
	var out []grant
	var errs []error
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			errs = append(errs, fmt.Errorf("rule %v names resources or URLs", r))
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						errs = append(errs, fmt.Errorf("rule %v has a wildcard", r))
					}
					out = append(out, grant{g, res, v})
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

// TestClusterRoleIsExactlyTheProxysCalls: the base's ClusterRole grants
// every call the proxy makes and nothing else.
func TestClusterRoleIsExactlyTheProxysCalls(t *testing.T) {
	got, err := grants(clusterRole(t).Rules)
	if err != nil {
		t.Error(err)
	}
	var want []grant
	for _, c := range proxyCalls {
		want = append(want, c.needs)
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("the ClusterRole grants %s, which the proxy never does", g)
		}
	}
	for _, g := range want {
		if !slices.Contains(got, g) {
			t.Errorf("the ClusterRole does not grant %s, which the proxy does", g)
		}
	}
}

// TestRoleIsExactlyTheProxysLeaseCalls: the base's Role grants exactly
// the calls of the events election, in the proxy's namespace.
func TestRoleIsExactlyTheProxysLeaseCalls(t *testing.T) {
	got, err := grants(role(t).Rules)
	if err != nil {
		t.Error(err)
	}
	var want []grant
	for _, c := range leaseCalls {
		want = append(want, c.needs)
	}
	if !slices.Equal(slices.SortedFunc(slices.Values(got), compareGrants), slices.SortedFunc(slices.Values(want), compareGrants)) {
		t.Errorf("the Role grants %v, the election needs %v", got, want)
	}
}

func compareGrants(a, b grant) int { return strings.Compare(a.String(), b.String()) }

// TestProxyRunsUnderServiceAccount installs the base for real and runs the
// proxy's own API code with the ServiceAccount's bound token: the informers
// sync and see a new Service, EndpointSlice and Node through their watches,
// and the Event recorder creates a Warning Event and patches it when it
// repeats. Then every call in proxyCalls succeeds, and calls the proxy
// never makes are Forbidden.
func TestProxyRunsUnderServiceAccount(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	inst, err := deploy.Install(ctx, srv, deploy.Base)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	sa := kubernetes.NewForConfigOrDie(inst.Config)
	nodeName := unique("deploy-node")

	// The informers: list, then watch.
	w, err := informers.NewWatcher(sa, nodeName, nil, 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	w.Start(wctx)
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !w.WaitForCacheSync(syncCtx) {
		t.Fatalf("the proxy's informers did not sync as %s", inst.ServiceAccount)
	}
	w.TakeChanges()

	svc, slice, node := watchedObjects(unique("deploy-e2e"), nodeName)
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err = admin.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watches deliver the Service and its EndpointSlice (in either
	// order) and the Node.
	key := convert.ServiceName(svc)
	var sawService, sawNodes bool
	var ports, eps int
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c := w.TakeChanges()
		sawService = sawService || slices.Contains(c.Services, key)
		sawNodes = sawNodes || c.Nodes
		p, e, _ := w.Service(key)
		ports, eps = len(p), len(e)
		return sawService && sawNodes && ports == 1 && eps == 1, nil
	})
	if err != nil {
		t.Fatalf("the watches did not deliver the changes: service %s changed %v (%d ports, %d with endpoints), nodes changed %v", key, sawService, ports, eps, sawNodes)
	}

	// The Event recorder: create, then patch the repeat.
	sink, stopEvents := events.NewBroadcaster(sa, nodeName)
	t.Cleanup(stopEvents)
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID}
	sink(ref, "E2ERefusal", "externalIPs 192.0.2.10 refused (e2e): a test of the recorder")
	sink(ref, "E2ERefusal", "externalIPs 192.0.2.10 refused (e2e): a test of the recorder")
	var seen []corev1.Event
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := admin.CoreV1().Events(svc.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": svc.Name, "reason": "E2ERefusal"}.String(),
		})
		if err != nil {
			return false, err
		}
		seen = list.Items
		return len(seen) == 1 && seen[0].Count == 2, nil
	})
	if err != nil {
		t.Fatalf("want one Event with count 2 (created, then patched by the recorder), got %+v: %v", seen, err)
	}
	if s := seen[0].Source; s.Component != events.Component || s.Host != nodeName || seen[0].Type != corev1.EventTypeWarning {
		t.Errorf("Event source %+v type %s, want %s on %s, Warning", s, seen[0].Type, events.Component, nodeName)
	}

	// The events election, as run does it: this candidate takes the
	// Lease in the proxy's namespace.
	reporter := events.New(func(*corev1.ObjectReference, string, string) {}, nil, events.Options{QPS: 5, Burst: 100, Elected: true})
	ectx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	go func() {
		_ = reporter.Elect(ectx, events.Election{Client: sa, Namespace: inst.ServiceAccount.Namespace, Identity: nodeName,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, zap.NewNop())
	}()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return reporter.Leading(), nil
	})
	if err != nil {
		t.Fatalf("the events election as %s never led", inst.ServiceAccount)
	}
	lease, err := admin.CoordinationV1().Leases(inst.ServiceAccount.Namespace).Get(ctx, events.LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != nodeName {
		t.Errorf("Lease %s/%s: %+v (%v), want held by %s", inst.ServiceAccount.Namespace, events.LeaseName, lease, err, nodeName)
	}
	stopElection()

	// Every call, one by one, and what must stay forbidden.
	f := newFixture(ctx, t, admin, inst.ServiceAccount.Namespace)
	for g, err := range runCalls(ctx, sa, f) {
		if err != nil {
			t.Errorf("%s as %s: %v", g, inst.ServiceAccount, err)
		}
	}
	for _, fc := range forbiddenCalls {
		if err := fc.do(ctx, sa); !apierrors.IsForbidden(err) {
			t.Errorf("%s as %s: err = %v, want Forbidden", fc.name, inst.ServiceAccount, err)
		}
	}
}

// TestEveryGrantIsNeeded drops one grant at a time from the base's
// ClusterRole or Role, binds the rest (the Role's in the ServiceAccount's
// namespace, as the base does) to a fresh ServiceAccount, and requires that
// exactly the call needing the dropped grant is Forbidden: the roles have
// no rule the proxy could do without, and a missing rule fails a call.
func TestEveryGrantIsNeeded(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	clusterGrants, err := grants(clusterRole(t).Rules)
	if err != nil {
		t.Fatal(err)
	}
	nsGrants, err := grants(role(t).Rules)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "least-privilege"
	f := newFixture(ctx, t, admin, ns)
	run := unique("lp")
	rulesWithout := func(gs []grant, drop grant) []rbacv1.PolicyRule {
		var rules []rbacv1.PolicyRule
		for _, g := range gs {
			if g != drop {
				rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verb}})
			}
		}
		return rules
	}
	for i, drop := range slices.Concat(clusterGrants, nsGrants) {
		t.Run("without "+drop.String(), func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("%s-%d", run, i)
			cfg, err := srv.ServiceAccountConfig(ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			bindClusterRole(ctx, t, admin, "ipvs-proxy-e2e-"+name, rulesWithout(clusterGrants, drop), ns, name)
			bindRole(ctx, t, admin, "ipvs-proxy-e2e-"+name, rulesWithout(nsGrants, drop), ns, name)
			c := kubernetes.NewForConfigOrDie(cfg)

			// Wait for RBAC to see the binding: every other call succeeds.
			var errs map[grant]error
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				errs = runCalls(ctx, c, f)
				for g, err := range errs {
					if g != drop && err != nil {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("calls still failing with the binding in place: %v", errs)
			}
			if !apierrors.IsForbidden(errs[drop]) {
				t.Errorf("%s without that grant: err = %v, want Forbidden", drop, errs[drop])
			}
		})
	}
}

func bindClusterRole(ctx context.Context, t *testing.T, admin kubernetes.Interface, name string, rules []rbacv1.PolicyRule, ns, sa string) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func bindRole(ctx context.Context, t *testing.T, admin kubernetes.Interface, name string, rules []rbacv1.PolicyRule, ns, sa string) {
	t.Helper()
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// unique returns prefix with a random suffix, so that a test can run again
// (-count) against the package's one server.
func unique(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:6])
}

// watchedObjects are a Service the proxy watches (no service-proxy-name or
// headless label), its EndpointSlice and a Node with an address.
func watchedObjects(name, nodeName string) (*corev1.Service, *discoveryv1.EndpointSlice, *corev1.Node) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: svc.Name + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(nodeName),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "192.0.2.10"},
		}},
	}
	return svc, slice, node
}

// eventsV1Event is an events.k8s.io Event, which the proxy never writes.
var eventsV1Event = eventsv1.Event{
	ObjectMeta:          metav1.ObjectMeta{GenerateName: "ipvs-proxy-e2e-v1-"},
	EventTime:           metav1.NowMicro(),
	ReportingController: "ipvs-proxy.io/ipvs-proxy",
	ReportingInstance:   "node-a",
	Action:              "Refuse",
	Reason:              "E2ECall",
	Type:                corev1.EventTypeWarning,
	Regarding:           corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: metav1.NamespaceDefault, Name: "kubernetes"},
}
