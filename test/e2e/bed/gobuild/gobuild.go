// Package gobuild builds what the end-to-end tests run in the VM: the
// proxy's binary from the main module and a package's guest test binary
// (its *_kernel_test.go files, under the kernel build tag). Both are static
// (CGO_ENABLED=0), as the guest runs them from the host's root over 9p. It
// never starts what it builds.
package gobuild

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Run runs the go command with args in dir, with cgo off, and returns an
// error holding its output when it fails.
func Run(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v in %s: %w\n%s", args, dir, err, out)
	}
	return nil
}

// Root is the main module's root, seen from the test/e2e package whose
// test runs (the go test working directory).
func Root(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..", "..")
}

// Proxy builds ./cmd/ipvs-proxy of the main module into dir and returns
// the binary's path; extra are flags for go build (such as "-p", "2").
func Proxy(t testing.TB, dir string, extra ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "ipvs-proxy")
	args := append(append([]string{"build"}, extra...), "-o", bin, "./cmd/ipvs-proxy")
	if err := Run(Root(t), args...); err != nil {
		t.Fatal(err)
	}
	if err := NoTemplateExecution(bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// templateExec is a function the linker keeps only when a text/template
// is executed somewhere in the program.
const templateExec = "text/template.(*state).evalCall"

// NoTemplateExecution fails when the binary at path executes a
// text/template: a template calls methods by name through reflection, so
// the linker then keeps every exported method of every type converted to
// an interface (all of client-go's typed clients and their generic
// instantiations): a cobra version template did, for a far larger binary
// and resident memory before the first API object (cmd/ipvs-proxy/root.go;
// docs/benchmarks.md gives the binary's size and RSS).
func NoTemplateExecution(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("symbols of %s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name == templateExec {
			return fmt.Errorf("%s links %s: a text/template is executed, which keeps every exported method in the binary (see gobuild.NoTemplateExecution)", path, templateExec)
		}
	}
	return nil
}

// GuestTest builds the test binary of the package in the working
// directory with the kernel tag, as dir/name.test, and returns its path.
func GuestTest(t testing.TB, dir, name string, extra ...string) string {
	t.Helper()
	bin := filepath.Join(dir, name+".test")
	args := append(append([]string{"test", "-c", "-tags", "kernel"}, extra...), "-o", bin, ".")
	if err := Run(".", args...); err != nil {
		t.Fatal(err)
	}
	return bin
}
