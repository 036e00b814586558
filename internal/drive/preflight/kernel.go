package preflight

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// ErrNoIPVS is a kernel that cannot run IPVS: ip_vs, or the default
// scheduler's module, is neither loaded, built in, nor a module to load.
var ErrNoIPVS = errors.New("the kernel has no IPVS")

// Kernel is what the IPVS check reads of a node: Root is the node's
// filesystem (os.DirFS("/") in run, a fstest.MapFS in tests).
type Kernel struct {
	Root fs.FS
}

// CheckIPVS returns nil when ip_vs and ip_vs_<scheduler> can be used:
// loaded (/proc/modules; /proc/net/ip_vs for ip_vs), built into the
// kernel (modules.builtin) or a module that modprobe finds (modules.dep),
// as kube-proxy's IPVS mode checks them before it starts.
func (k Kernel) CheckIPVS(scheduler string) error {
	loaded, err := k.moduleNames("proc/modules", func(line string) string {
		name, _, _ := strings.Cut(line, " ")
		return name
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read /proc/modules: %w", err)
	}
	if _, err := fs.Stat(k.Root, "proc/net/ip_vs"); err == nil {
		loaded["ip_vs"] = true
	}
	rel, err := fs.ReadFile(k.Root, "proc/sys/kernel/osrelease")
	if err != nil {
		return fmt.Errorf("kernel release (/proc/sys/kernel/osrelease): %w", err)
	}
	release := strings.TrimSpace(string(rel))
	dir := path.Join("lib/modules", release)
	available := map[string]bool{}
	for _, f := range []string{"modules.builtin", "modules.dep"} {
		names, err := k.moduleNames(path.Join(dir, f), moduleOfPath)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("read /%s/%s: %w", dir, f, err)
		}
		for n := range names {
			available[n] = true
		}
	}
	var missing []string
	for _, m := range []string{"ip_vs", "ip_vs_" + scheduler} {
		if !loaded[m] && !available[m] {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s neither loaded (/proc/modules) nor built in or a module of kernel %s (/%s/modules.builtin, modules.dep; is /lib/modules mounted?)",
		ErrNoIPVS, strings.Join(missing, " and "), release, dir)
}

// moduleNames reads one module name per line of file.
func (k Kernel) moduleNames(file string, name func(line string) string) (map[string]bool, error) {
	out := map[string]bool{}
	f, err := k.Root.Open(file)
	if err != nil {
		return out, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n := name(sc.Text()); n != "" {
			out[n] = true
		}
	}
	return out, sc.Err()
}

// moduleOfPath is the module a line of modules.builtin or modules.dep
// names: "kernel/net/netfilter/ipvs/ip_vs_rr.ko.zst: kernel/..." is
// ip_vs_rr. The kernel treats - and _ alike in module names.
func moduleOfPath(line string) string {
	p, _, _ := strings.Cut(line, ":")
	base := path.Base(strings.TrimSpace(p))
	base, _, ok := strings.Cut(base, ".ko")
	if !ok {
		return ""
	}
	return strings.ReplaceAll(base, "-", "_")
}
