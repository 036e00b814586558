package ktest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// protocolsFile is the file ipset reads a protocol's name from.
const protocolsFile = "/etc/protocols"

// IPSetSave is `ipset save [SET]` in the namespace, byte for byte, run with
// /etc/protocols read from memory. ipset names the protocol of every
// entry it prints ("tcp:80") with getprotobynumber, which opens and scans
// /etc/protocols each time, and in the test VM that file is on the host's
// root over 9p: 3.6 ms an entry on a quiet host and many times that under
// load, which made `ipset save` most of a kernel-against-plan comparison
// (21 of 29 s at 200 Services). The command runs in a mount namespace of
// its own where a copy of the file on a tmpfs is bound over it; nothing
// outside that command sees either mount.
func (ns *NS) IPSetSave(set ...string) (string, error) {
	protocols, err := os.ReadFile(protocolsFile)
	if err != nil {
		return "", fmt.Errorf("ipset save: %w", err)
	}
	var out, stderr bytes.Buffer
	err = ns.Do(func() error {
		// The thread is Do's own and ends with it: the mount namespace
		// unshared here goes with it.
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare the mount namespace: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make / private: %w", err)
		}
		dir := os.TempDir()
		if err := unix.Mount("ktest-protocols", dir, "tmpfs", 0, "size=1m"); err != nil {
			return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
		}
		copied := filepath.Join(dir, "protocols")
		if err := os.WriteFile(copied, protocols, 0o644); err != nil {
			return err
		}
		if err := unix.Mount(copied, protocolsFile, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", copied, protocolsFile, err)
		}
		cmd := exec.Command("ipset", append([]string{"save"}, set...)...)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		return cmd.Run()
	})
	if err != nil {
		return out.String(), fmt.Errorf("in netns %s: ipset save: %w: %s", ns.Name, err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}
