package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

// kubeProxyDaemonSet reads the DaemonSet of a distribution's test data
// (deploy.TestData(file), the last document of kind DaemonSet) into namespace.
func kubeProxyDaemonSet(t *testing.T, file, namespace string) *appsv1.DaemonSet {
	t.Helper()
	raw, err := deploy.TestData(file)
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		if !strings.Contains(doc, "\nkind: DaemonSet\n") {
			continue
		}
		ds = &appsv1.DaemonSet{}
		if err := yaml.UnmarshalStrict([]byte(doc), ds); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if ds == nil {
		t.Fatalf("%s has no DaemonSet", file)
	}
	ds.Namespace = namespace
	return ds
}

// createIn creates namespace and ds in it on the shared API server.
func createIn(ctx context.Context, t *testing.T, c kubernetes.Interface, ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ds.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	got, err := c.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// affinityPatch reads a patch file of the migrate-node-by-node overlay as
// JSON, as kubectl --patch-file sends it.
func affinityPatch(t *testing.T, name string) []byte {
	t.Helper()
	dir, err := deploy.Dir()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, deploy.MigrateNodeByNode, name))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return js
}

// excluded is the expression the patches add: kube-proxy stays off the
// nodes labelled for ipvs-proxy.
var excluded = corev1.NodeSelectorRequirement{Key: "ipvs-proxy.io/service-proxy", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"ipvs-proxy"}}

// terms are the required node affinity terms of ds.
func terms(ds *appsv1.DaemonSet) []corev1.NodeSelectorTerm {
	a := ds.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

// TestAffinityPatchMerges patches each distribution's kube-proxy DaemonSet
// on the real API server as docs/distributions.md says, and requires that
// every term it had keeps every expression and gains the exclusion of the
// labelled nodes (terms are ORed: a term without it would let kube-proxy
// back onto a migrated node). The strategic merge patch on EKS' DaemonSet
// is shown to drop its Fargate, hybrid and architecture exclusions: that is
// why EKS takes the JSON patch.
func TestAffinityPatchMerges(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	for _, tc := range []struct {
		name, file, patch string
		typ               types.PatchType
	}{
		// kubeadm's (and kubespray's, which deploys kubeadm's): no affinity.
		{"kubeadm", "kubeadm-v1.34-kube-proxy.yaml", "kube-proxy-affinity-patch.yaml", types.StrategicMergePatchType},
		{"eks", "eks-v1.34-kube-proxy.yaml", "kube-proxy-affinity-append.yaml", types.JSONPatchType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := createIn(ctx, t, c, kubeProxyDaemonSet(t, tc.file, "ways-affinity-"+tc.name))
			before := terms(ds)
			got, err := c.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, tc.typ, affinityPatch(t, tc.patch), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("kubectl patch --type=%s --patch-file %s: %v", tc.typ, tc.patch, err)
			}
			after := terms(got)
			if len(after) != max(len(before), 1) {
				t.Fatalf("%d terms after the patch, %d before: %+v", len(after), len(before), after)
			}
			for i, term := range after {
				want := []corev1.NodeSelectorRequirement{excluded}
				if i < len(before) {
					want = append(slices.Clone(before[i].MatchExpressions), excluded)
				}
				if !equalJSON(t, term.MatchExpressions, want) {
					t.Errorf("term %d after the patch: %+v, want %+v", i, term.MatchExpressions, want)
				}
			}
		})
	}
	t.Run("strategic patch on eks drops its exclusions", func(t *testing.T) {
		ds := createIn(ctx, t, c, kubeProxyDaemonSet(t, "eks-v1.34-kube-proxy.yaml", "ways-affinity-eks-strategic"))
		got, err := c.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, types.StrategicMergePatchType, affinityPatch(t, "kube-proxy-affinity-patch.yaml"), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after := terms(got); len(after) != 1 || len(after[0].MatchExpressions) != 1 {
			t.Errorf("the strategic patch kept EKS' expressions (%+v): the append patch would be unneeded", after)
		}
	})
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// TestRollbackRestoresKubeProxy: the way back of docs/migration.md on the
// real API server. kube-proxy's DaemonSet is saved as the guide saves it
// (`kubectl get -o json`), deleted (as the migration deletes it), and
// created again from the saved copy. The copy as printed carries a
// resourceVersion, uid and status, and the API server refuses to create it
// as it is; `kubectl create -f` (cli-runtime's Helper.Create) clears the
// resourceVersion before it posts, and that is accepted, with the same pod
// template and a new uid. make test-migration-doc runs the guide's own
// kubectl commands on the bed.
func TestRollbackRestoresKubeProxy(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	orig := createIn(ctx, t, c, kubeProxyDaemonSet(t, "kubeadm-v1.34-kube-proxy.yaml", "ways-rollback"))
	path := "/apis/apps/v1/namespaces/" + orig.Namespace + "/daemonsets"
	saved, err := c.AppsV1().RESTClient().Get().AbsPath(path, orig.Name).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AppsV1().DaemonSets(orig.Namespace).Delete(ctx, orig.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = c.AppsV1().RESTClient().Post().AbsPath(path).Body(saved).Do(ctx).Error()
	if err == nil || !strings.Contains(err.Error(), "resourceVersion should not be set") {
		t.Fatalf("creating the copy as kubectl get -o json printed it: %v, want the API server to refuse its resourceVersion", err)
	}
	t.Logf("the copy as printed, refused as expected: %v", err)

	var obj map[string]any
	if err := json.Unmarshal(saved, &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj["metadata"].(map[string]any), "resourceVersion")
	clean, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var restored appsv1.DaemonSet
	if err := c.AppsV1().RESTClient().Post().AbsPath(path).Body(clean).Do(ctx).Into(&restored); err != nil {
		t.Fatalf("the copy without its resourceVersion (kubectl create -f kube-proxy-daemonset.json): %v", err)
	}
	if !equalJSON(t, restored.Spec.Template, orig.Spec.Template) || restored.UID == orig.UID {
		t.Errorf("restored DaemonSet differs in its pod template, or is the same object:\n%+v\nwant\n%+v", restored.Spec.Template, orig.Spec.Template)
	}
}

// TestEKSOverlay: the eks overlay runs `run` with the add-on's command line
// and mounts what it reads (ConfigMap kube-proxy-config at
// /var/lib/kube-proxy-config, ConfigMap kube-proxy with the kubeconfig at
// /var/lib/kube-proxy), as the add-on's DaemonSet mounts them; the API
// server accepts the DaemonSet (server-side dry run).
func TestEKSOverlay(t *testing.T) {
	objs := build(t, deploy.EKS)
	ds := daemonSetIn(t, objs, "ipvs-proxy")
	eks := kubeProxyDaemonSet(t, "eks-v1.34-kube-proxy.yaml", "kube-system")
	mounts := func(spec corev1.PodSpec, container int) map[string]string { // mount path -> ConfigMap
		cms := map[string]string{}
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil {
				cms[v.Name] = v.ConfigMap.Name
			}
		}
		out := map[string]string{}
		for _, m := range spec.Containers[container].VolumeMounts {
			if cm, ok := cms[m.Name]; ok {
				out[strings.TrimSuffix(m.MountPath, "/")] = cm
			}
		}
		return out
	}
	pod := ds.Spec.Template.Spec
	if got, want := mounts(pod, 0), mounts(eks.Spec.Template.Spec, 0); !equalJSON(t, got, want) {
		t.Errorf("ConfigMaps mounted %v, the add-on's DaemonSet mounts %v", got, want)
	}
	want := flagValue(eks.Spec.Template.Spec.Containers[0].Command, "config")
	if got := flagValue(pod.Containers[0].Command, "config"); got != want || want != "/var/lib/kube-proxy-config/config" {
		t.Errorf("--config=%s, the add-on's is %s", got, want)
	}
	srv := apiserver.Shared(t)
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctxFor(t), objs, true); err != nil {
		t.Fatalf("server-side dry run of %s: %v", deploy.EKS, err)
	}
}
