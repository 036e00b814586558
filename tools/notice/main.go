// Command notice writes the repository's NOTICE: the Go modules linked into
// the ipvs-proxy binary on every platform `make release` builds, each with
// the licence its own LICENSE file in the module cache declares. Run it from
// the repository root after changing go.mod:
//
//	go run ./tools/notice
//
// TestNoticeIsCurrent fails while NOTICE differs from what it would write.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "notice:", err)
		os.Exit(1)
	}
}

func run() error {
	mods, err := linkedModules(".", mainPackage, platforms)
	if err != nil {
		return err
	}
	text, err := render(mods)
	if err != nil {
		return err
	}
	return os.WriteFile(noticeFile, []byte(text), 0o644)
}
