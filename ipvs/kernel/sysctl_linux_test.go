package kernel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

func TestWriteSysctls(t *testing.T) {
	root := t.TempDir()
	for name, v := range map[string]string{"net/ipv4/ip_forward": "0\n", "net/ipv4/vs/conntrack": "1\n"} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	changed, err := WriteSysctls(root, []ipvs.Sysctl{{Name: "net/ipv4/ip_forward", Value: 1}, {Name: "net/ipv4/vs/conntrack", Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0].Name != "net/ipv4/ip_forward" {
		t.Errorf("changed %v", changed)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "net/ipv4/ip_forward")); string(got) != "1" {
		t.Errorf("ip_forward = %q", got)
	}
	if _, err := WriteSysctls(root, []ipvs.Sysctl{{Name: "net/ipv4/vs/missing", Value: 1}}); err == nil {
		t.Error("missing sysctl: no error")
	}
}
