package vmtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KernelRootEnv names the environment variable that overrides where the
// unpacked kernel lives (the directory holding boot/ and lib/modules/).
const KernelRootEnv = "VMTEST_KERNEL_ROOT"

// cacheSubdir is where scripts/install-deps.sh unpacks linux-image-amd64,
// relative to the repository root.
const cacheSubdir = ".cache/vm/root"

// Kernel is an unpacked Debian kernel package: `dpkg-deb -x linux-image-*.deb ROOT`
// followed by `depmod -b ROOT VERSION`.
type Kernel struct {
	// Version is the module directory name, e.g. "6.1.0-56-amd64".
	Version string
	// Image is ROOT/boot/vmlinux-VERSION when present (the decompressed ELF,
	// booted through its PVH entry: TCG is slow to decompress an xz
	// bzImage at every boot), else ROOT/boot/vmlinuz-VERSION.
	Image string
	// Modules is ROOT/lib/modules/VERSION, holding modules.dep.
	Modules string
}

// FindKernelRoot returns $VMTEST_KERNEL_ROOT if set, else the first
// .cache/vm/root found walking up from the working directory.
func FindKernelRoot() (string, error) {
	if r := os.Getenv(KernelRootEnv); r != "" {
		return filepath.Abs(r)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		cand := filepath.Join(dir, cacheSubdir)
		if st, err := os.Stat(filepath.Join(cand, "boot")); err == nil && st.IsDir() {
			return cand, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no %s above the working directory and %s unset; run `make deps` (scripts/install-deps.sh)",
				ErrNoKernel, cacheSubdir, KernelRootEnv)
		}
		dir = parent
	}
}

// LoadKernel finds the single kernel image and its depmod'ed module tree under root.
func LoadKernel(root string) (Kernel, error) {
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return Kernel{}, fmt.Errorf("%w: want exactly one boot/vmlinuz-* under %s, found %d; run `make deps`",
			ErrNoKernel, root, len(images))
	}
	k := Kernel{Image: images[0], Version: strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")}
	if elf := filepath.Join(root, "boot", "vmlinux-"+k.Version); fileExists(elf) {
		k.Image = elf
	}
	k.Modules = filepath.Join(root, "lib", "modules", k.Version)
	if _, err := os.Stat(filepath.Join(k.Modules, "modules.dep")); err != nil {
		return Kernel{}, fmt.Errorf("%w: %s has no modules.dep (run `depmod -b %s %s` or `make deps`)",
			ErrNoKernel, k.Modules, root, k.Version)
	}
	return k, nil
}

// moduleDeps parses modules.dep into module name -> (path, dependency names).
type moduleDep struct {
	path string // relative to the modules directory
	deps []string
}

func readModulesDep(modulesDir string) (map[string]moduleDep, error) {
	f, err := os.Open(filepath.Join(modulesDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]moduleDep{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		mod, deps, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		md := moduleDep{path: mod}
		for _, d := range strings.Fields(deps) {
			md.deps = append(md.deps, moduleName(d))
		}
		out[moduleName(mod)] = md
	}
	return out, sc.Err()
}

// readBuiltin returns the names listed in modules.builtin (compiled into the image).
func readBuiltin(modulesDir string) map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(modulesDir, "modules.builtin"))
	if err != nil {
		return out
	}
	for _, l := range strings.Fields(string(b)) {
		out[moduleName(l)] = true
	}
	return out
}

// moduleName turns "kernel/fs/9p/9p.ko(.xz)" into "9p".
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return base
}

// loadOrder returns the module files (relative paths) to insmod, dependencies
// first, so that every one of want is loaded.
func loadOrder(deps map[string]moduleDep, builtin map[string]bool, want []string) ([]string, error) {
	var order []string
	seen := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		if seen[name] {
			return nil
		}
		seen[name] = true
		md, ok := deps[name]
		if !ok {
			if builtin[name] {
				return nil
			}
			return fmt.Errorf("%w: module %q not in modules.dep", ErrNoKernel, name)
		}
		for _, d := range md.deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		order = append(order, md.path)
		return nil
	}
	for _, w := range want {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	if len(order) == 0 {
		return nil, errors.New("no modules to load")
	}
	return order, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
