// Command ociimage assembles the release image as one OCI image index over
// one image per platform, in an OCI image layout, without a container
// engine or a registry, and checks such a layout. `make release` runs both
// (scripts/release.sh):
//
//	go run ./tools/ociimage build -layout dist/oci -tag v0.1.0 \
//	    -platform amd64=ROOTFS.tar,BINARY -platform arm64=ROOTFS.tar,BINARY
//	go run ./tools/ociimage check -layout dist/oci -tag v0.1.0
//
// Each image has two layers: the Debian root file system (a tar that
// scripts/release-rootfs.sh built) and the binary, at
// /usr/local/bin/ipvs-proxy and, as a symbolic link, /usr/local/bin/kube-proxy,
// under which name it takes kube-proxy's command line. Layers and JSON are
// written deterministically: the same inputs give the same digests.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// platformFlag collects -platform ARCH=ROOTFS,BINARY.
type platformFlag []Input

func (p *platformFlag) String() string { return fmt.Sprint(*p) }

func (p *platformFlag) Set(s string) error {
	arch, files, ok := strings.Cut(s, "=")
	rootfs, bin, ok2 := strings.Cut(files, ",")
	if !ok || !ok2 || arch == "" || rootfs == "" || bin == "" {
		return fmt.Errorf("-platform %q: want ARCH=ROOTFS.tar,BINARY", s)
	}
	*p = append(*p, Input{Arch: arch, RootFS: rootfs, Binary: bin})
	return nil
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: ociimage build|check [flags]")
	}
	fs := flag.NewFlagSet("ociimage "+args[0], flag.ContinueOnError)
	layout := fs.String("layout", "", "the OCI image layout directory")
	tag := fs.String("tag", "", "the image's tag (org.opencontainers.image.ref.name)")
	switch args[0] {
	case "build":
		var plats platformFlag
		fs.Var(&plats, "platform", "ARCH=ROOTFS.tar,BINARY, once per architecture")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *layout == "" || *tag == "" || len(plats) == 0 {
			return fmt.Errorf("build needs -layout, -tag and at least one -platform")
		}
		created, err := sourceDateEpoch()
		if err != nil {
			return err
		}
		return Build(*layout, *tag, created, plats)
	case "check":
		archs := fs.String("archs", "amd64,arm64", "the architectures the index must hold")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *layout == "" || *tag == "" {
			return fmt.Errorf("check needs -layout and -tag")
		}
		imgs, err := Check(*layout, *tag, strings.Split(*archs, ","))
		for _, img := range imgs {
			fmt.Printf("%s linux/%s %s: %d files\n", *tag, img.Arch, img.Manifest, len(img.Files))
		}
		return err
	}
	return fmt.Errorf("unknown command %q: want build or check", args[0])
}

// sourceDateEpoch is the images' creation time: $SOURCE_DATE_EPOCH, as
// reproducible builds set it, or the Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}
