// Command sbom writes the release's software bill of materials as one SPDX
// 2.3 JSON document: for each architecture, the Go modules linked into the
// binary (read from the binary's own build information, with the licences
// NOTICE lists) and the Debian packages of the image's root file system
// (the list scripts/release-rootfs.sh writes). `make release` runs it:
//
//	go run ./tools/sbom -version v0.1.0 -notice NOTICE -o dist/sbom.spdx.json \
//	    -arch amd64=BINARY,PACKAGES -arch arm64=BINARY,PACKAGES
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// archFlag collects -arch ARCH=BINARY,PACKAGES.
type archFlag []Input

func (a *archFlag) String() string { return fmt.Sprint(*a) }

func (a *archFlag) Set(s string) error {
	arch, files, ok := strings.Cut(s, "=")
	bin, pkgs, ok2 := strings.Cut(files, ",")
	if !ok || !ok2 || arch == "" || bin == "" || pkgs == "" {
		return fmt.Errorf("-arch %q: want ARCH=BINARY,PACKAGES", s)
	}
	*a = append(*a, Input{Arch: arch, Binary: bin, Packages: pkgs})
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	version := fs.String("version", "", "the release version (v0.1.0)")
	notice := fs.String("notice", "NOTICE", "the NOTICE file naming each module's licence")
	out := fs.String("o", "", "the SPDX JSON file to write")
	created := fs.String("created", "1970-01-01T00:00:00Z", "the document's creation time (RFC 3339)")
	var archs archFlag
	fs.Var(&archs, "arch", "ARCH=BINARY,PACKAGES, once per architecture")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *out == "" || len(archs) == 0 {
		return fmt.Errorf("need -version, -o and at least one -arch")
	}
	licences, err := readNotice(*notice)
	if err != nil {
		return err
	}
	doc, err := Document(*version, *created, licences, archs)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}
