// Package planinput writes what the API server holds as the input of
// `ipvs-proxy plan -f`: every Service, EndpointSlice and Node in one List.
// It only reads from the API server; it never writes to it.
package planinput

import (
	"context"
	"encoding/json"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Write lists every Service, EndpointSlice and Node and writes them to path
// as one v1 List, each item with its apiVersion and kind set.
func Write(ctx context.Context, client kubernetes.Interface, path string) error {
	var items []any
	svcs, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range svcs.Items {
		o := svcs.Items[i]
		o.APIVersion, o.Kind = "v1", "Service"
		items = append(items, o)
	}
	eps, err := client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range eps.Items {
		o := eps.Items[i]
		o.APIVersion, o.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		items = append(items, o)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range nodes.Items {
		o := nodes.Items[i]
		o.APIVersion, o.Kind = "v1", "Node"
		items = append(items, o)
	}
	b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
