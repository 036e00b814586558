package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// WriteSysctls writes each setting under root (normally /proc/sys) when its
// value differs: `sysctl -w net.ipv4.vs.conntrack=1`. The net/ settings are
// per network namespace and apply to the namespace of the calling thread;
// the ip_vs module must be loaded first (Open loads it). It returns
// the settings it changed.
func WriteSysctls(root string, settings []ipvs.Sysctl) ([]ipvs.Sysctl, error) {
	var changed []ipvs.Sysctl
	for _, s := range settings {
		p := filepath.Join(root, s.Name)
		cur, err := os.ReadFile(p)
		if err != nil {
			return changed, fmt.Errorf("sysctl %s: %w", s.Name, err)
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(cur))); err == nil && v == s.Value {
			continue
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(s.Value)), 0o644); err != nil {
			return changed, fmt.Errorf("sysctl -w %s=%d: %w", strings.ReplaceAll(s.Name, "/", "."), s.Value, err)
		}
		changed = append(changed, s)
	}
	return changed, nil
}
