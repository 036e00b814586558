package deploy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// build renders a kustomization or fails t.
func build(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := deploy.Build(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// kinds lists "Kind namespace/name" of objs, in order.
func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		name := o.GetName()
		if o.GetNamespace() != "" {
			name = o.GetNamespace() + "/" + name
		}
		out = append(out, o.GetKind()+" "+name)
	}
	return out
}

// TestManifestsServerSideDryRun applies every kustomization under deploy/
// with server-side apply, dry-run=All and strict field validation, as
// `kubectl apply --server-side --dry-run=server -k` would: the real
// kube-apiserver decodes, defaults, validates and admits every object. Any
// warning (a deprecated field, an unknown field) fails the test too.
func TestManifestsServerSideDryRun(t *testing.T) {
	srv := apiserver.Shared(t)
	// The overlays add a Role for the events Lease and the DaemonSet to
	// kubeadm's kube-proxy objects (see TestKubeadmOverlay).
	wantKinds := map[string][]string{
		deploy.Base:              {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "ConfigMap", "DaemonSet"},
		deploy.ReplaceKubeProxy:  {"Role", "RoleBinding", "DaemonSet"},
		deploy.MigrateNodeByNode: {"Role", "RoleBinding", "DaemonSet"},
	}
	for _, k := range deploy.Kustomizations {
		t.Run(k, func(t *testing.T) {
			ctx := ctxFor(t)
			objs := build(t, k)
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind())
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(wantKinds[k]))
			if !slices.Equal(got, want) {
				t.Fatalf("%s renders %q, want kinds %q", k, kinds(objs), want)
			}

			a, err := deploy.NewApplier(srv.Config())
			if err != nil {
				t.Fatal(err)
			}
			// A dry-run of a namespaced object needs its Namespace to exist
			// (NamespaceLifecycle admission): create the Namespaces for real.
			var nss []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					nss = append(nss, o)
				}
			}
			if _, err := a.Apply(ctx, nss, false); err != nil {
				t.Fatal(err)
			}
			answered, err := a.Apply(ctx, objs, true)
			if err != nil {
				t.Fatal(err)
			}
			if w := a.Warnings(); len(w) > 0 {
				t.Errorf("the server warned about %s: %q", k, w)
			}
			// The answers are the server's: defaulted by it.
			for _, o := range answered {
				if o.GetKind() != "DaemonSet" {
					continue
				}
				if v, _, _ := unstructured.NestedInt64(o.Object, "spec", "revisionHistoryLimit"); v == 0 {
					t.Errorf("dry-run DaemonSet %s was not defaulted by the server: %v", o.GetName(), o.Object["spec"])
				}
			}
		})
	}
}

// TestDryRunRejectsBrokenManifests proves the dry-run test can fail: copies
// of the base with one mistake each are refused by the server.
func TestDryRunRejectsBrokenManifests(t *testing.T) {
	srv := apiserver.Shared(t)
	tests := []struct {
		name  string
		path  []string // inside the DaemonSet
		value any
		want  string // in the error
	}{
		{"misspelt probe field (strict field validation)", []string{"spec", "template", "spec", "containers", "0", "livenessProbe", "httpGet", "paht"}, "/livez", "paht"},
		{"invalid hostPath type", []string{"spec", "template", "spec", "volumes", "1", "hostPath", "type"}, "DirectoryOrCreat", "DirectoryOrCreat"},
		{"maxUnavailable zero with maxSurge zero", []string{"spec", "updateStrategy", "rollingUpdate", "maxUnavailable"}, int64(0), "maxUnavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxFor(t)
			objs := build(t, deploy.Base)
			ds := findKind(t, objs, "DaemonSet")
			if err := setPath(ds.Object, tt.path, tt.value); err != nil {
				t.Fatal(err)
			}
			a, err := deploy.NewApplier(srv.Config())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Apply(ctx, []*unstructured.Unstructured{findKind(t, objs, "Namespace")}, false); err != nil {
				t.Fatal(err)
			}
			_, err = a.Apply(ctx, []*unstructured.Unstructured{ds}, true)
			if err == nil {
				t.Fatalf("the server accepted the DaemonSet with %s = %v", strings.Join(tt.path, "."), tt.value)
			}
			// The server refuses (kube-apiserver 1.34 answers 500 for a
			// field SSA cannot type, 4xx for the others); not a client error.
			if statusCode(err) == 0 {
				t.Errorf("err = %v, want the API server's refusal", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to name %q", err, tt.want)
			}
		})
	}
}

// statusCode is the HTTP status of an API error, 0 for other errors.
func statusCode(err error) int32 {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Code
	}
	return 0
}

// setPath sets a value inside nested maps and slices; numeric elements of
// path index slices.
func setPath(obj map[string]any, path []string, value any) error {
	var cur any = obj
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = value
				return nil
			}
			cur = c[p]
		case []any:
			var idx int
			for _, r := range p {
				idx = idx*10 + int(r-'0')
			}
			if idx >= len(c) {
				return &pathError{path}
			}
			cur = c[idx]
		default:
			return &pathError{path}
		}
	}
	return &pathError{path}
}

type pathError struct{ path []string }

func (e *pathError) Error() string { return "no such path " + strings.Join(e.path, ".") }

func findKind(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s in %q", kind, kinds(objs))
	return nil
}

// TestDaemonSetPodIsAdmitted creates, with dry-run, the Pod the DaemonSet
// controller would create on a node (there is no controller-manager here),
// so the pod-level admission plugins judge the template: Priority resolves
// system-node-critical (allowed outside kube-system), ServiceAccount finds
// the ServiceAccount and mounts its token, PodSecurity admits a privileged
// hostNetwork pod in the ipvs-proxy Namespace.
func TestDaemonSetPodIsAdmitted(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	inst, err := deploy.Install(ctx, srv, deploy.Base)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	for _, o := range inst.Objects {
		if o.GetKind() == "DaemonSet" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ds.Namespace,
			Name:      ds.Name + "-dryrun",
			Labels:    ds.Spec.Template.Labels,
		},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = "node-a"
	got, err := admin.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("the DaemonSet's pod is refused: %v", err)
	}
	pc, err := admin.SchedulingV1().PriorityClasses().Get(ctx, "system-node-critical", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Priority == nil || *got.Spec.Priority != pc.Value {
		t.Errorf("pod priority = %v, want system-node-critical's %d", got.Spec.Priority, pc.Value)
	}
	var token bool
	for _, v := range got.Spec.Volumes {
		if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
			token = true
		}
	}
	if !token {
		t.Errorf("ServiceAccount admission mounted no token volume: %v", got.Spec.Volumes)
	}
	if got.Spec.ServiceAccountName != inst.ServiceAccount.Name {
		t.Errorf("pod runs as %q, want %q", got.Spec.ServiceAccountName, inst.ServiceAccount.Name)
	}

	// The Priority admission check can fail: a class that does not exist.
	pod.Spec.PriorityClassName = "system-node-critikal"
	pod.Spec.Priority = nil
	if _, err := admin.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Errorf("a pod with priorityClassName system-node-critikal was admitted")
	}
}

// TestReferencesResolve checks what the server cannot: every name an object
// refers to is an object the same kustomization renders, or for the
// overlays one of kubeadm's kube-proxy objects (kustomize renames
// generated ConfigMaps with a hash suffix and must rewrite each reference),
// and every container runs the same image, so the recovery binary the init
// container installs is the binary the proxy runs.
func TestReferencesResolve(t *testing.T) {
	for _, k := range deploy.Kustomizations {
		t.Run(k, func(t *testing.T) {
			objs := build(t, k)
			have := map[string]bool{} // "Kind namespace/name"
			for _, kn := range kinds(objs) {
				have[kn] = true
			}
			// The overlays run as kubeadm's kube-proxy runs: its
			// ServiceAccount, its ConfigMap, its ClusterRoleBinding.
			var external []*unstructured.Unstructured
			if k != deploy.Base {
				var err error
				if external, err = deploy.KubeadmObjects(deploy.KubeadmEndpoint); err != nil {
					t.Fatal(err)
				}
				for _, kn := range kinds(external) {
					have[kn] = true
				}
				have["Namespace kube-system"] = true
			}
			need := func(what, kind, ns, name string) {
				t.Helper()
				key := kind + " " + name
				if ns != "" {
					key = kind + " " + ns + "/" + name
				}
				if !have[key] {
					t.Errorf("%s refers to %s, which %s does not render (it renders %q)", what, key, k, kinds(objs))
				}
			}
			for _, o := range objs {
				if ns := o.GetNamespace(); ns != "" {
					need(o.GetKind()+" "+o.GetName(), "Namespace", "", ns)
				}
			}

			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findKind(t, objs, "DaemonSet").Object, &ds); err != nil {
				t.Fatal(err)
			}
			pod := ds.Spec.Template.Spec
			need("serviceAccountName", "ServiceAccount", ds.Namespace, pod.ServiceAccountName)
			for _, v := range pod.Volumes {
				if v.ConfigMap != nil {
					need("volume "+v.Name, "ConfigMap", ds.Namespace, v.ConfigMap.Name)
				}
			}
			images := map[string]bool{}
			for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
				images[c.Image] = true
				for _, e := range c.EnvFrom {
					if e.ConfigMapRef != nil {
						need("container "+c.Name+" envFrom", "ConfigMap", ds.Namespace, e.ConfigMapRef.Name)
					}
				}
			}
			if len(images) != 1 {
				t.Errorf("containers run different images %v; the init container must install the binary the proxy runs", images)
			}

			var crb rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findKind(t, slices.Concat(objs, external), "ClusterRoleBinding").Object, &crb); err != nil {
				t.Fatal(err)
			}
			if crb.RoleRef.Name == "system:node-proxier" {
				have["ClusterRole system:node-proxier"] = true // bootstrap policy, in every cluster
			}
			need("ClusterRoleBinding roleRef", crb.RoleRef.Kind, "", crb.RoleRef.Name)
			for _, s := range crb.Subjects {
				need("ClusterRoleBinding subject", s.Kind, s.Namespace, s.Name)
				if s.Kind == rbacv1.ServiceAccountKind && (s.Namespace != ds.Namespace || s.Name != pod.ServiceAccountName) {
					t.Errorf("the ClusterRole is bound to %s/%s, the DaemonSet runs as %s/%s", s.Namespace, s.Name, ds.Namespace, pod.ServiceAccountName)
				}
			}

			// The Role for the events Lease lives in the DaemonSet's
			// namespace, where the proxy looks for the Lease.
			var rb rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findKind(t, objs, "RoleBinding").Object, &rb); err != nil {
				t.Fatal(err)
			}
			if rb.Namespace != ds.Namespace {
				t.Errorf("the RoleBinding is in namespace %q, the DaemonSet (and the events Lease) in %q", rb.Namespace, ds.Namespace)
			}
			need("RoleBinding roleRef", rb.RoleRef.Kind, rb.Namespace, rb.RoleRef.Name)
			for _, s := range rb.Subjects {
				need("RoleBinding subject", s.Kind, s.Namespace, s.Name)
				if s.Kind == rbacv1.ServiceAccountKind && (s.Namespace != ds.Namespace || s.Name != pod.ServiceAccountName) {
					t.Errorf("the Role is bound to %s/%s, the DaemonSet runs as %s/%s", s.Namespace, s.Name, ds.Namespace, pod.ServiceAccountName)
				}
			}
		})
	}
}

// TestMigrationLabelMatchesKubeProxyPatch: the label that moves a node to
// ipvs-proxy (the migrate-node-by-node overlay's nodeSelector) is the label
// kube-proxy-affinity-patch.yaml keeps kube-proxy away from, so a node runs
// exactly one of the two whether it is labelled or not.
func TestMigrationLabelMatchesKubeProxyPatch(t *testing.T) {
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findKind(t, build(t, deploy.MigrateNodeByNode), "DaemonSet").Object, &ds); err != nil {
		t.Fatal(err)
	}
	dir, err := deploy.Dir()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, deploy.MigrateNodeByNode, "kube-proxy-affinity-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var patch appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(raw, &patch); err != nil {
		t.Fatalf("kube-proxy-affinity-patch.yaml: %v", err)
	}
	aff := patch.Spec.Template.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("kube-proxy-affinity-patch.yaml has no required node affinity: %s", raw)
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 {
		t.Fatalf("want one term with one expression, got %+v", terms)
	}
	e := terms[0].MatchExpressions[0]
	value, ok := ds.Spec.Template.Spec.NodeSelector[e.Key]
	if !ok || e.Operator != corev1.NodeSelectorOpNotIn || !slices.Equal(e.Values, []string{value}) {
		t.Errorf("kube-proxy avoids %s %s %v; ipvs-proxy's nodeSelector is %v", e.Key, e.Operator, e.Values, ds.Spec.Template.Spec.NodeSelector)
	}
}

// TestDaemonSetShape checks, in every kustomization's rendered DaemonSet,
// the properties docs/manifests.md promises: the node's network namespace,
// critical priority, every taint tolerated, one node at a time, the probes,
// the host paths for the state directory and the recovery binary (installed
// by an init container), and privilege only where it is needed.
func TestDaemonSetShape(t *testing.T) {
	for _, k := range deploy.Kustomizations {
		t.Run(k, func(t *testing.T) {
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findKind(t, build(t, k), "DaemonSet").Object, &ds); err != nil {
				t.Fatal(err)
			}
			pod := ds.Spec.Template.Spec
			if !pod.HostNetwork {
				t.Error("hostNetwork is off: the proxy must program the node's own network namespace")
			}
			if pod.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q, want system-node-critical", pod.PriorityClassName)
			}
			if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
				return tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
			}) {
				t.Errorf("tolerations %+v do not tolerate every taint", pod.Tolerations)
			}
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
				ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "1" ||
				(ru.MaxSurge != nil && ru.MaxSurge.String() != "0") {
				t.Errorf("updateStrategy %+v, want RollingUpdate maxUnavailable 1 maxSurge 0", ds.Spec.UpdateStrategy)
			}

			hostPaths := map[string]string{} // volume name -> host path
			for _, v := range pod.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = v.HostPath.Path
				}
			}
			mounts := func(c corev1.Container) map[string]string { // host path -> mount path
				m := map[string]string{}
				for _, vm := range c.VolumeMounts {
					if hp, ok := hostPaths[vm.Name]; ok {
						m[hp] = vm.MountPath
					}
				}
				return m
			}

			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want the proxy alone", len(pod.Containers))
			}
			proxy := pod.Containers[0]
			probe := func(name string, p *corev1.Probe, path string) {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.IntValue() != 10256 {
					t.Errorf("%s probe %+v, want GET %s on port 10256", name, p, path)
				}
			}
			probe("liveness", proxy.LivenessProbe, "/livez")
			probe("readiness", proxy.ReadinessProbe, "/healthz")
			if got := mounts(proxy)["/var/lib/ipvs-proxy"]; got != "/var/lib/ipvs-proxy" {
				t.Errorf("the proxy mounts the host's state directory /var/lib/ipvs-proxy at %q, want the same path (the host's recover reads it)", got)
			}

			var installs bool
			for _, c := range pod.InitContainers {
				sc := c.SecurityContext
				if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Errorf("init container %s is not unprivileged with every capability dropped: %+v", c.Name, sc)
				}
				if m, ok := mounts(c)["/opt/ipvs-proxy/bin"]; ok && strings.Contains(strings.Join(c.Command, " "), m) {
					installs = true
				}
			}
			if !installs {
				t.Error("no init container writes the recovery binary to the host's /opt/ipvs-proxy/bin")
			}
		})
	}
}
