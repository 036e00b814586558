package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestCriticalServices: --critical-services and the file's
// criticalServices give the Services served first; an entry that is not
// NAMESPACE/NAME is refused naming the flag and the entry.
func TestCriticalServices(t *testing.T) {
	c, err := parse(t, "--critical-services", "kube-system/coredns,infra/registry")
	if err != nil {
		t.Fatal(err)
	}
	names, err := ParseServiceNames(c.CriticalServices)
	want := []types.NamespacedName{{Namespace: "kube-system", Name: "coredns"}, {Namespace: "infra", Name: "registry"}}
	if err != nil || !slices.Equal(names, want) {
		t.Errorf("flag: %v, %v; want %v", names, err, want)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: ipvs-proxy.io/v1alpha1\nkind: ProxyConfiguration\ncriticalServices: [kube-system/coredns]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := parse(t, "--config", file); err != nil || !slices.Equal(c.CriticalServices, []string{"kube-system/coredns"}) {
		t.Errorf("file: %v, %v", c.CriticalServices, err)
	}
	for _, bad := range []string{"coredns", "kube-system/", "/coredns", "Kube-System/coredns", "a/b/c"} {
		_, err := parse(t, "--critical-services", bad)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--critical-services") || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
