//go:build !kernel

package cluster_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestCoreDNS: the bed's CoreDNS (CLUSTER_COREDNS_BIN, `make coredns`)
// with the bed's Corefile, on loopback against the test API server,
// answers a Service's and kube-dns' names with their ClusterIPs and
// refuses a name outside the cluster (it forwards nothing). It skips
// unless CLUSTER_COREDNS_BIN is set (`make test-coredns`): `make test`
// does not build CoreDNS.
func TestCoreDNS(t *testing.T) {
	bin := os.Getenv("CLUSTER_COREDNS_BIN")
	if bin == "" {
		t.Skip("CLUSTER_COREDNS_BIN is not set: `make test-coredns` builds CoreDNS (tools/coredns) and runs this")
	}
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(srv.Config())
	const ns = "coredns"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(cluster.DNSNamespace).Create(ctx, cluster.DNSServiceObject(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	dir := t.TempDir()
	kc, corefile := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "Corefile")
	if err := srv.WriteKubeconfig(kc, srv.Config(), srv.URL); err != nil {
		t.Fatal(err)
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	dns, ready := netip.AddrPortFrom(loopback, freePort(t)), netip.AddrPortFrom(loopback, freePort(t))
	if err := os.WriteFile(corefile, []byte(cluster.Corefile(kc, dns, ready)), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-conf", corefile)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("CoreDNS log:\n%s", log.String())
		}
	}()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + ready.String() + "/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("CoreDNS not ready at %s/ready: %v", ready, err)
	}

	// CoreDNS' ready plugin may answer 200 before the kubernetes plugin
	// has registered with it: the first answer is what counts.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dns.String())
	}}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := r.LookupHost(ctx, "kube-dns.kube-system.svc.cluster.local.")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("CoreDNS at %s does not answer: %v", dns, err)
	}
	t.Logf("CoreDNS answers at %s after %v", dns, time.Since(start).Round(time.Millisecond))
	for name, want := range map[string]string{
		"web." + ns + ".svc.cluster.local.":       web.Spec.ClusterIP,
		"kube-dns.kube-system.svc.cluster.local.": cluster.DNSAddr.String(),
	} {
		got, err := r.LookupHost(ctx, name)
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s: %v, %v; want [%s]", name, got, err, want)
		}
	}
	if got, err := r.LookupHost(ctx, "example.com."); err == nil {
		t.Errorf("example.com.: %v; want an error (the bed's CoreDNS forwards nothing)", got)
	}
}

// freePort is a port of 127.0.0.1 free (for TCP) a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}
