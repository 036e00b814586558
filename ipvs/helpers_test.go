package ipvs

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func mkfile(root, name, content string) error {
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

func readfile(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// portName reads "namespace/name[:port]" as tests write service ports.
func portName(s string) model.ServicePortName {
	if s == "" {
		return model.ServicePortName{}
	}
	svc, port, _ := strings.Cut(s, ":")
	ns, name, _ := strings.Cut(svc, "/")
	return model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port}
}

// changed is Partial's predicate for the services written as tests write
// them: "namespace/name" for every port of a Service, "namespace/name:port"
// for one port.
func changed(names ...string) func(model.ServicePortName) bool {
	return func(n model.ServicePortName) bool {
		for _, c := range names {
			if p := portName(c); p == n || p.Port == "" && p.NamespacedName == n.NamespacedName {
				return true
			}
		}
		return false
	}
}
