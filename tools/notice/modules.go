package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

const (
	// mainPackage is the binary whose linked modules NOTICE lists.
	mainPackage = "./cmd/ipvs-proxy"
	// noticeFile is written relative to the repository root.
	noticeFile = "NOTICE"
)

// platforms are the GOOS/GOARCH pairs `make release` builds (mk/release.mk).
var platforms = []platform{{"linux", "amd64"}, {"linux", "arm64"}}

type platform struct{ os, arch string }

// module is one Go module linked into the binary.
type module struct {
	Path    string
	Version string
	// Dir is the module's directory in the module cache.
	Dir string
}

// ErrGoList is wrapped by errors of linkedModules.
var ErrGoList = errors.New("go list")

// linkedModules returns the modules (not the main one) providing a package
// that pkg links on any of plats, sorted by path, as `go list -deps`
// resolves them from go.mod in dir.
func linkedModules(dir, pkg string, plats []platform) ([]module, error) {
	seen := map[string]module{}
	for _, p := range plats {
		cmd := exec.Command("go", "list", "-deps",
			"-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}} {{.Dir}}{{end}}{{end}}", pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.os, "GOARCH="+p.arch)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%w -deps %s for %s/%s: %w: %s", ErrGoList, pkg, p.os, p.arch, err, strings.TrimSpace(stderr.String()))
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			if len(f) != 3 {
				continue // a standard library package: no module
			}
			seen[f[0]] = module{Path: f[0], Version: f[1], Dir: f[2]}
		}
	}
	mods := make([]module, 0, len(seen))
	for _, m := range seen {
		mods = append(mods, m)
	}
	slices.SortFunc(mods, func(a, b module) int { return cmp.Compare(a.Path, b.Path) })
	return mods, nil
}
