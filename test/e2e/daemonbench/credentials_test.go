package daemonbench

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// credentialsAccepted returns an error unless the API server accepts the
// credentials of kubeconfig for a proxy's first request, a list of
// Services: an expired token is Unauthorized, a missing role Forbidden.
// host, when set, replaces the kubeconfig's server: the harness in the VM
// reaches the API server at the guest address, the proxy in its node
// namespace through a relay.
//
// The side-by-side harness asks it of each contender just before starting
// it, so that a refused token fails the run at once instead of leaving a
// proxy to meet Unauthorized on every list until its budget is over (the
// 20,000-service run of 2026-12-02 03:02 waited out 70 minutes so).
func credentialsAccepted(ctx context.Context, kubeconfig, host string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	if host != "" {
		cfg.Host = host
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client of %s: %w", kubeconfig, err)
	}
	if _, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("list Services with the credentials of %s: %w", kubeconfig, err)
	}
	return nil
}
