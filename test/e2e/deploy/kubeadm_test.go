package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

// Nodes of the image test: the first keeps its netfilter rules in nf_tables
// (written by iptables-nft), the second in the legacy tables.
const (
	nftNode    = "nft-node"
	legacyNode = "legacy-node"
)

// containerFS answers where a path inside a container is on the node: the
// source of the longest mount whose target holds it ("" when no mount does:
// the path is in the image).
type containerFS []deploy.Mount

func (fs containerFS) resolve(p string) string {
	best := -1
	for i, m := range fs {
		if (p == m.Target || strings.HasPrefix(p, strings.TrimSuffix(m.Target, "/")+"/")) &&
			(best < 0 || len(m.Target) > len(fs[best].Target)) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return filepath.Join(fs[best].Source, strings.TrimPrefix(p, fs[best].Target))
}

// daemonSetIn returns the DaemonSet named name among objs.
func daemonSetIn(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" && o.GetName() == name {
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			return &ds
		}
	}
	t.Fatalf("no DaemonSet %s in %q", name, kinds(objs))
	return nil
}

// flagValue is the value of --name=VALUE in argv.
func flagValue(argv []string, name string) string {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestKubeadmOverlay puts kubeadm v1.34's kube-proxy objects on the real API
// server (testdata/kubeadm-v1.34-kube-proxy.yaml, the control-plane endpoint
// being the server), applies the replace-kube-proxy overlay for real, and
// resolves the pod the DaemonSet controller would create on a node as the
// kubelet would (ConfigMap files, the ServiceAccount token volume, env):
//
//   - the overlay creates nothing of kubeadm's and starts `ipvs-proxy run`
//     with kube-proxy's own command line (--config, --hostname-override) and
//     kube-proxy's ConfigMap at the same path;
//   - every path that command line, config.conf and kubeconfig.conf name is
//     in a mounted volume: --config, clientConnection.kubeconfig, the
//     kubeconfig's certificate-authority and tokenFile;
//   - the kubeconfig built from those very files (kubeadm's endpoint, the
//     pod's token) makes every API call the proxy makes, and runs the events
//     election in kube-system; SubjectAccessReviews agree for the
//     ServiceAccount kube-system/kube-proxy, and the overlay's Role reaches
//     no other Lease there.
//
// `ipvs-proxy run` itself, from the image, with these files, is the VM test
// TestImage (make test-image).
func TestKubeadmOverlay(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	if err := deploy.InstallKubeadm(ctx, srv, srv.URL); err != nil {
		t.Fatal(err)
	}
	kubeadmObjs, err := deploy.KubeadmObjects(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	objs := build(t, deploy.ReplaceKubeProxy)
	for _, o := range objs {
		for _, k := range kubeadmObjs {
			if o.GetKind() == k.GetKind() && o.GetNamespace() == k.GetNamespace() && o.GetName() == k.GetName() {
				t.Errorf("the overlay renders kubeadm's %s %s/%s; it must leave kubeadm's objects alone", o.GetKind(), o.GetNamespace(), o.GetName())
			}
		}
	}
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := a.Apply(ctx, objs, false)
	if err != nil {
		t.Fatal(err)
	}
	if w := a.Warnings(); len(w) > 0 {
		t.Errorf("warnings: %q", w)
	}

	dir := t.TempDir()
	resolve := func(ds *appsv1.DaemonSet, sub string) *deploy.PodRun {
		t.Helper()
		if err := deploy.PublishRootCA(ctx, srv, ds.Namespace); err != nil {
			t.Fatal(err)
		}
		pod, err := deploy.AdmittedPod(ctx, admin, ds, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		run, err := deploy.ResolvePod(ctx, admin, pod, "node-a", filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	ours := resolve(daemonSetIn(t, stored, "ipvs-proxy"), "ipvs-proxy").Containers[0]
	theirs := resolve(daemonSetIn(t, kubeadmObjs, "kube-proxy"), "kube-proxy").Containers[0]

	// kube-proxy's command line, after the binary.
	if got, want := ours.Argv[2:], theirs.Argv[1:]; !slices.Equal(got, want) {
		t.Errorf("ipvs-proxy run %q, kubeadm's kube-proxy %q", got, want)
	}
	if got := flagValue(ours.Argv, "hostname-override"); got != "node-a" {
		t.Errorf("--hostname-override=%q, want the node's name", got)
	}
	fs, kfs := containerFS(ours.Mounts), containerFS(theirs.Mounts)
	read := func(what, p string) []byte {
		t.Helper()
		host := fs.resolve(p)
		if host == "" {
			t.Fatalf("%s %s is in no volume the container mounts (%+v)", what, p, ours.Mounts)
		}
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatalf("%s %s: %v", what, p, err)
		}
		return b
	}
	configPath := flagValue(ours.Argv, "config")
	conf := read("--config", configPath)
	if kconf, err := os.ReadFile(kfs.resolve(configPath)); err != nil || string(kconf) != string(conf) {
		t.Errorf("%s differs from kube-proxy's (%v)", configPath, err)
	}
	var kpc struct {
		ClientConnection struct{ Kubeconfig string } `json:"clientConnection"`
		Mode             string                      `json:"mode"`
	}
	if err := yaml.Unmarshal(conf, &kpc); err != nil {
		t.Fatal(err)
	}
	if kpc.Mode != "ipvs" || kpc.ClientConnection.Kubeconfig == "" {
		t.Fatalf("config.conf: mode %q, clientConnection.kubeconfig %q; want kubeadm's IPVS file", kpc.Mode, kpc.ClientConnection.Kubeconfig)
	}
	kc, err := clientcmd.Load(read("clientConnection.kubeconfig", kpc.ClientConnection.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range kc.Clusters {
		read("cluster "+name+" certificate-authority", c.CertificateAuthority)
		c.CertificateAuthority = fs.resolve(c.CertificateAuthority)
		if c.Server != srv.URL {
			t.Errorf("kubeconfig.conf server %s, want kubeadm's endpoint %s", c.Server, srv.URL)
		}
	}
	for name, u := range kc.AuthInfos {
		read("user "+name+" tokenFile", u.TokenFile)
		u.TokenFile = fs.resolve(u.TokenFile)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	proxy := kubernetes.NewForConfigOrDie(cfg)

	// Every call the proxy makes, with the pod's own files.
	f := &fixture{admin: admin}
	ev, err := admin.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, testEvent("ipvs-proxy-e2e-kubeadm."), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.event = ev.Name
	for _, call := range proxyCalls {
		if err := call.do(ctx, proxy, f); err != nil {
			t.Errorf("%s with kubeadm's kubeconfig.conf and the pod's token: %v", call.needs, err)
		}
	}
	// The events election, in the pod's namespace, under the same files.
	reporter := events.New(func(*corev1.ObjectReference, string, string) {}, nil, events.Options{QPS: 5, Burst: 100, Elected: true})
	ectx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	go func() {
		_ = reporter.Elect(ectx, events.Election{Client: proxy, Namespace: metav1.NamespaceSystem, Identity: "node-a",
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, zap.NewNop())
	}()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return reporter.Leading(), nil
	}); err != nil {
		t.Errorf("the events election in kube-system as kube-proxy never led")
	}
	stopElection()

	// SubjectAccessReviews for the ServiceAccount: what run needs is
	// allowed, the control plane's Leases are not.
	sa := "system:serviceaccount:kube-system:kube-proxy"
	review := func(ns, name string, g grant) bool {
		t.Helper()
		r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Name: name, Group: g.group, Resource: g.resource, Verb: g.verb}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, c := range proxyCalls {
		if !review("", "", c.needs) {
			t.Errorf("SubjectAccessReview: %s may not %s", sa, c.needs)
		}
	}
	for _, c := range leaseCalls {
		name := events.LeaseName
		if c.needs.verb == "create" {
			name = ""
		}
		if !review(metav1.NamespaceSystem, name, c.needs) {
			t.Errorf("SubjectAccessReview: %s may not %s %s in kube-system", sa, c.needs, events.LeaseName)
		}
		if name != "" && review(metav1.NamespaceSystem, "kube-scheduler", c.needs) {
			t.Errorf("SubjectAccessReview: %s may %s kube-scheduler in kube-system; the Role names %s only", sa, c.needs, events.LeaseName)
		}
	}
}
