package daemonbench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// TestCredentialsAccepted: the harness's check before a contender starts
// passes credentials that may list Services and refuses, with the API
// server's reason, a token it does not accept (an expired one's answer)
// and one that may not list Services.
func TestCredentialsAccepted(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := srv.WriteKubeconfig(admin, srv.Config(), ""); err != nil {
		t.Fatal(err)
	}
	if err := credentialsAccepted(ctx, admin, ""); err != nil {
		t.Fatalf("admin credentials refused: %v", err)
	}
	// host in place of the kubeconfig's server, as the harness in the VM
	// asks it: a kubeconfig whose server answers nothing is still checked.
	elsewhere := filepath.Join(dir, "elsewhere.kubeconfig")
	if err := srv.WriteKubeconfig(elsewhere, srv.Config(), "https://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if err := credentialsAccepted(ctx, elsewhere, srv.URL); err != nil {
		t.Errorf("admin credentials with the server given: %v", err)
	}

	// A ServiceAccount no role is bound to: known, but may not list.
	sa, err := srv.ServiceAccountConfig(ctx, "credentials-test", "unbound")
	if err != nil {
		t.Fatal(err)
	}
	unbound := filepath.Join(dir, "unbound.kubeconfig")
	if err := srv.WriteKubeconfig(unbound, sa, ""); err != nil {
		t.Fatal(err)
	}
	if err := credentialsAccepted(ctx, unbound, ""); !apierrors.IsForbidden(err) {
		t.Errorf("a ServiceAccount without RBAC: %v, want Forbidden", err)
	}

	// The same token altered in its signature: what an expired token meets.
	sig := "AAAA"
	if strings.HasSuffix(sa.BearerToken, sig) {
		sig = "BBBB"
	}
	sa.BearerToken = sa.BearerToken[:len(sa.BearerToken)-len(sig)] + sig
	refused := filepath.Join(dir, "refused.kubeconfig")
	if err := srv.WriteKubeconfig(refused, sa, ""); err != nil {
		t.Fatal(err)
	}
	if err := credentialsAccepted(ctx, refused, ""); !apierrors.IsUnauthorized(err) {
		t.Errorf("a token the API server does not accept: %v, want Unauthorized", err)
	}
}
