package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestDaemonSets: with kube-controller-manager's DaemonSet controller and
// kube-scheduler in-process, a DaemonSet over three nodes gets one pod on
// each, and a change of its template (upstream's SN-42/43 patch of the
// VERSION env) is rolled out with maxUnavailable 1: every pod replaced,
// one node at a time. A fake kubelet (fakeKubelet) makes the bound pods
// Ready and ends the deleted ones, and counts the nodes without an
// available pod at once. Nothing but the controller makes the pods.
func TestDaemonSets(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(srv.Config())
	const ns = "daemonsets"
	createNamespace(ctx, t, client, ns)
	// The DaemonSet's node selector keeps it off the nodes other tests of
	// the shared API server registered.
	const poolLabel = "daemonsets-test"
	nodes := []string{"ds-a", "ds-b", "ds-c"}
	for i, name := range nodes {
		n := cluster.NodeObject(name, fmt.Sprintf("192.0.2.%d", 21+i), fmt.Sprintf("10.251.%d.0/24", i), 0)
		n.Labels[poolLabel] = "yes"
		if _, err := cluster.RegisterNode(ctx, client, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	sched, err := cluster.StartScheduler(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()
	dsc, err := cluster.StartDaemonSets(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer dsc.Stop()
	kubelet := startFakeKubelet(ctx, t, client, ns)

	labels := map[string]string{"name": "rolling"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "rolling"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("10%"))}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{poolLabel: "yes"},
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/e2e-test-images/agnhost:2.56",
				Args: []string{"netexec", "--http-port=80"}}}}}}}
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	onEachNode := func(version string) {
		t.Helper()
		start := time.Now()
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := readyPodNodes(ctx, client, ns, version)
			if err != nil {
				return false, err
			}
			last = fmt.Sprint(got)
			return slices.Equal(got, nodes), nil
		}); err != nil {
			t.Fatalf("DaemonSet %s/%s: ready pods with VERSION=%q on %s, want one on each of %v: %v", ns, ds.Name, version, last, nodes, err)
		}
		t.Logf("a ready pod with VERSION=%q on each of %v after %v", version, nodes, time.Since(start).Round(time.Millisecond))
	}
	onEachNode("")

	patch := `{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"VERSION","value":"1"}]}]}}}}`
	if _, err := client.AppsV1().DaemonSets(ns).Patch(ctx, ds.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	onEachNode("1")
	replaced, most := kubelet.outages()
	t.Logf("rolling update: %v replaced, at most %d node(s) without an available pod at once", replaced, most)
	if slices.Sort(replaced); !slices.Equal(replaced, nodes) {
		t.Errorf("pods replaced on %v, want one on each of %v", replaced, nodes)
	}
	if most != 1 {
		t.Errorf("%d nodes were without an available pod at once, want 1 (maxUnavailable 10%% of 3 rounds up to 1)", most)
	}
}

// readyPodNodes lists the nodes of the Ready, not terminating pods in ns
// whose container's VERSION env is version ("" for none), sorted.
func readyPodNodes(ctx context.Context, client kubernetes.Interface, ns, version string) ([]string, error) {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		v := ""
		for _, e := range p.Spec.Containers[0].Env {
			if e.Name == "VERSION" {
				v = e.Value
			}
		}
		if p.DeletionTimestamp == nil && v == version && p.Spec.NodeName != "" && podReady(&p) {
			out = append(out, p.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// fakeKubelet plays the kubelet of every node for the pods of one
// namespace: a bound pod turns Ready after readyDelay, a deleted one is
// removed after termDelay (its grace period, shortened). It tracks the
// nodes without an available pod: from the deletion of a Ready pod to the
// Ready of the next pod on that node.
type fakeKubelet struct {
	mu       sync.Mutex
	pods     map[types.UID]podPhase
	next     byte
	down     map[string]bool // nodes without an available pod now
	most     int             // the most nodes down at once
	replaced []string        // nodes whose Ready pod was deleted
}

// podPhase is how far the fake kubelet has taken a pod.
type podPhase int

const (
	podStarted podPhase = iota + 1 // its Ready is written (or about to be)
	podEnding                      // its final delete is on its way
)

const (
	fakeReadyDelay = 200 * time.Millisecond
	fakeTermDelay  = 200 * time.Millisecond
)

func startFakeKubelet(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{pods: map[types.UID]podPhase{}, down: map[string]bool{}, next: 1}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	handle := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			k.sync(ctx, t, client, p)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	t.Cleanup(factory.Shutdown)
	return k
}

func (k *fakeKubelet) sync(ctx context.Context, t *testing.T, client kubernetes.Interface, p *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	node, uid, name := p.Spec.NodeName, p.UID, p.Name
	switch {
	case node == "" || k.pods[uid] == podEnding:
		return
	case p.DeletionTimestamp != nil:
		if podReady(p) && !k.down[node] {
			k.down[node] = true
			k.replaced = append(k.replaced, node)
			k.most = max(k.most, len(k.down))
		}
		k.pods[uid] = podEnding
		time.AfterFunc(fakeTermDelay, func() {
			err := client.CoreV1().Pods(p.Namespace).Delete(ctx, name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
				t.Errorf("fake kubelet: final delete of %s/%s: %v", p.Namespace, name, err)
			}
		})
	case k.pods[uid] == 0:
		k.pods[uid] = podStarted
		ip := netip.AddrFrom4([4]byte{10, 251, 9, k.next})
		k.next++
		time.AfterFunc(fakeReadyDelay, func() {
			_, err := cluster.WritePodStatus(ctx, client, p.Namespace, name, cluster.PodStatus{
				PodIPs: []netip.Addr{ip}, HostIP: netip.MustParseAddr("192.0.2.20"), Ready: true})
			if err != nil {
				if !apierrors.IsNotFound(err) && ctx.Err() == nil {
					t.Errorf("fake kubelet: %v", err)
				}
				return
			}
			k.mu.Lock()
			delete(k.down, node)
			k.mu.Unlock()
		})
	}
}

// outages returns the nodes whose Ready pod was deleted, in order, and
// the most nodes that were without an available pod at once.
func (k *fakeKubelet) outages() ([]string, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.replaced), k.most
}
