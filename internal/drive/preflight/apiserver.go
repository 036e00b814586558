package preflight

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Sentinel errors of CheckCredentials, checked with errors.Is.
var (
	// ErrCredentialsRefused is an API server that answered and refused
	// the credentials (Unauthorized) or a list the proxy makes (Forbidden).
	ErrCredentialsRefused = errors.New("the API server refuses the credentials")
	// ErrUnreachable is an API server that did not answer in time: nothing
	// is known of the credentials.
	ErrUnreachable = errors.New("the API server did not answer")
)

// CheckCredentials makes the first request of each list the proxy keeps
// (Services, EndpointSlices, Nodes; one item each) within ctx. A refusal
// wraps ErrCredentialsRefused and names the list; any other error
// (timeout, connection refused, TLS) wraps ErrUnreachable.
func CheckCredentials(ctx context.Context, client kubernetes.Interface) error {
	one := metav1.ListOptions{Limit: 1}
	for _, l := range []struct {
		what string
		list func() error
	}{
		{"Services", func() error { _, err := client.CoreV1().Services("").List(ctx, one); return err }},
		{"EndpointSlices", func() error {
			_, err := client.DiscoveryV1().EndpointSlices("").List(ctx, one)
			return err
		}},
		{"Nodes", func() error { _, err := client.CoreV1().Nodes().List(ctx, one); return err }},
	} {
		err := l.list()
		switch {
		case err == nil:
		case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
			return fmt.Errorf("%w: list %s: %v", ErrCredentialsRefused, l.what, err)
		default:
			return fmt.Errorf("%w: list %s: %v", ErrUnreachable, l.what, err)
		}
	}
	return nil
}
