package apiserver_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestInformersSeeObjects writes a Service, its EndpointSlice and a Node and
// waits until a SharedInformerFactory's caches hold exactly what was written,
// then changes the EndpointSlice and waits for the update event.
func TestInformersSeeObjects(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	client := kubernetes.NewForConfigOrDie(srv.Config())

	factory := informers.NewSharedInformerFactory(client, 0)
	svcInf := factory.Core().V1().Services()
	sliceInf := factory.Discovery().V1().EndpointSlices()
	nodeInf := factory.Core().V1().Nodes()
	// Informers start only if requested before Start: ask for all three.
	svcInf.Informer()
	nodeInf.Informer()
	updates := make(chan *discoveryv1.EndpointSlice, 10)
	if _, err := sliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { updates <- obj.(*discoveryv1.EndpointSlice) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}

	svc, slice, node := testObjects(unique("informer"))
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		s, err1 := svcInf.Lister().Services("default").Get(svc.Name)
		e, err2 := sliceInf.Lister().EndpointSlices("default").Get(slice.Name)
		n, err3 := nodeInf.Lister().Get(node.Name)
		if err := errors.Join(err1, err2, err3); err != nil {
			if apierrors.IsNotFound(err1) || apierrors.IsNotFound(err2) || apierrors.IsNotFound(err3) {
				return false, nil
			}
			return false, err
		}
		if s.Spec.ClusterIP != created.Spec.ClusterIP || s.Spec.Ports[0].Port != 80 {
			t.Fatalf("informer service = %+v, want clusterIP %s port 80", s.Spec, created.Spec.ClusterIP)
		}
		if got := e.Endpoints[0].Addresses[0]; got != "10.244.1.5" || e.Labels[discoveryv1.LabelServiceName] != svc.Name {
			t.Fatalf("informer slice = %+v", e)
		}
		if n.Status.Addresses[0].Address != "192.168.50.10" {
			t.Fatalf("informer node addresses = %v", n.Status.Addresses)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("informers did not see the objects: %v", err)
	}

	// A watch delivers changes too: add a second endpoint.
	got, err := client.DiscoveryV1().EndpointSlices("default").Get(ctx, slice.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Endpoints = append(got.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.2.7"}})
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e := <-updates:
			if len(e.Endpoints) == 2 && e.Endpoints[1].Addresses[0] == "10.244.2.7" {
				return
			}
		case <-ctx.Done():
			t.Fatal("no update event for the EndpointSlice")
		}
	}
}

// TestServiceAccountTokenLifetime: a ServiceAccount's token is valid for
// the hours a long benchmark holds it, as its expiry claim says, not for
// one hour (a side-by-side run at 20,000 services holds its tokens through
// kube-proxy's budget of an hour and more before ipvs-proxy uses them).
func TestServiceAccountTokenLifetime(t *testing.T) {
	srv := apiserver.Shared(t)
	cfg, err := srv.ServiceAccountConfig(ctxFor(t), "token-test", unique("proxy"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(cfg.BearerToken, ".")
	if len(parts) != 3 {
		t.Fatalf("token of %d parts, want a JWT's 3", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(time.Unix(claims.Exp, 0)); left < 6*time.Hour {
		t.Errorf("the token expires in %v, want 6 hours or more", left.Round(time.Second))
	}
}

// TestServiceAccountRBAC shows that RBAC is enforced: a ServiceAccount is
// forbidden to list Services until a ClusterRole allowing it is bound.
func TestServiceAccountRBAC(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())

	saName := unique("proxy")
	saCfg, err := srv.ServiceAccountConfig(ctx, "rbac-test", saName)
	if err != nil {
		t.Fatal(err)
	}
	// Through a kubeconfig file, as a process under test would load it.
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := srv.WriteKubeconfig(path, saCfg, ""); err != nil {
		t.Fatal(err)
	}
	fileCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(fileCfg)

	_, err = sa.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("list services without a binding: err = %v, want Forbidden", err)
	}

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-" + saName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-" + saName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "rbac-test", Name: saName}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC's authorizer reads bindings from an informer: poll briefly.
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := sa.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("list services after binding: %v", err)
	}
	// Still forbidden for what the role does not grant.
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list nodes: err = %v, want Forbidden", err)
	}
}

// TestKubeconfigAndGuestCertificate checks the admin kubeconfig file works
// and that the serving certificate is valid for the VM's view of the port.
func TestKubeconfigAndGuestCertificate(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	if _, err := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin kubeconfig: %v", err)
	}

	guest := filepath.Join(t.TempDir(), "guest.kubeconfig")
	if err := srv.WriteKubeconfig(guest, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	gcfg, err := clientcmd.BuildConfigFromFlags("", guest)
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://" + apiserver.GuestHostIP + ":"; gcfg.Host[:len(want)] != want {
		t.Fatalf("guest kubeconfig server = %s, want prefix %s", gcfg.Host, want)
	}
	// The host cannot dial 10.0.2.100, so verify the certificate offline.
	block, _ := pem.Decode(srv.CAData)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	servingPEM := readServingCert(t, srv)
	if _, err := servingPEM.Verify(x509.VerifyOptions{DNSName: apiserver.GuestHostIP, Roots: pool}); err != nil {
		t.Fatalf("serving certificate for %s: %v", apiserver.GuestHostIP, err)
	}
}

func readServingCert(t *testing.T, srv *apiserver.Server) *x509.Certificate {
	t.Helper()
	cert, err := srv.ServingCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// unique returns prefix with a random suffix, so that a test can run again
// (-count) against the package's one server.
func unique(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:6])
}

// testObjects returns a ClusterIP Service, an EndpointSlice with one ready
// endpoint for it, and a Node, all named after prefix.
func testObjects(prefix string) (*corev1.Service, *discoveryv1.EndpointSlice, *corev1.Node) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: prefix + "-svc"},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: prefix + "-svc-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(prefix + "-node"),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-node"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "192.168.50.10"},
		}},
	}
	return svc, slice, node
}
