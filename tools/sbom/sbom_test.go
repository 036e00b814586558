package main

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestDocument builds the SBOM of this test binary (it carries build
// information like the release binary) and a package list: every module
// and package is in it with a purl, and every SPDX ID is unique.
func TestDocument(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in the test binary")
	}
	licences := map[string]string{}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		licences[m.Path+" "+m.Version] = "MIT"
	}
	dir := t.TempDir()
	pkgs := filepath.Join(dir, "packages")
	if err := os.WriteFile(pkgs, []byte("iptables 1.8.9-2 arm64\nlibc6 2.36-9+deb12u10 arm64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc, err := Document("v1.2.3", "2025-01-01T00:00:00Z", licences, []Input{{Arch: "arm64", Binary: self, Packages: pkgs}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	names := map[string]bool{}
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("SPDX ID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		names[p.Name+" "+p.VersionInfo] = true
	}
	for _, want := range []string{"iptables 1.8.9-2", "libc6 2.36-9+deb12u10", "ipvs-proxy image linux/arm64 v1.2.3"} {
		if !names[want] {
			t.Errorf("no package %q in the SBOM", want)
		}
	}
	if len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("%d relationships for %d packages", len(doc.Relationships), len(doc.Packages))
	}
}

// TestModuleMissingFromNotice: a module NOTICE does not list (NOTICE out
// of date) stops the SBOM rather than shipping it without a licence.
func TestModuleMissingFromNotice(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pkgs := filepath.Join(t.TempDir(), "packages")
	if err := os.WriteFile(pkgs, []byte("iptables 1.8.9-2 amd64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Document("v1.2.3", "2025-01-01T00:00:00Z", map[string]string{}, []Input{{Arch: "amd64", Binary: self, Packages: pkgs}})
	if bi, _ := debug.ReadBuildInfo(); len(bi.Deps) == 0 {
		t.Skip("the test binary links no module")
	}
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "is not in NOTICE") {
		t.Errorf("Document without licences = %v, want ErrInput naming the module", err)
	}
}

// TestReadNotice reads the repository's NOTICE: every module line gives
// a licence.
func TestReadNotice(t *testing.T) {
	m, err := readNotice(filepath.Join("..", "..", "NOTICE"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) < 10 {
		t.Fatalf("NOTICE lists %d modules: %v", len(m), m)
	}
	for mod, lic := range m {
		if lic == "" || strings.Contains(lic, "v0.") {
			t.Errorf("%s: licence %q", mod, lic)
		}
	}
}
