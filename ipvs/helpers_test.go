package ipvs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
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

// changed is what Partial takes for the names tests write: "namespace/name"
// for every port of a Service, "namespace/name:port" for one port.
func changed(names ...string) ipvs.Changed {
	out := ipvs.Changed{}
	for _, c := range names {
		out = append(out, portName(c))
	}
	return out
}
