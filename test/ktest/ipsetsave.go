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

// protocolsFile is the file ipset reads a protocol's name from, and
// nsswitchFile the one that says where glibc looks it up.
const (
	protocolsFile = "/etc/protocols"
	nsswitchFile  = "/etc/nsswitch.conf"
)

// filesOnly is nsswitch.conf with protocols looked up in protocolsFile
// alone (Debian's says "db files": a stat of the db file, missing, first).
func filesOnly(conf []byte) []byte {
	var b bytes.Buffer
	found := false
	for l := range strings.Lines(string(conf)) {
		if strings.HasPrefix(l, "protocols:") {
			l, found = "protocols: files\n", true
		}
		b.WriteString(l)
	}
	if !found {
		if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteString("\n")
		}
		b.WriteString("protocols: files\n")
	}
	return b.Bytes()
}

// IPSetSave is `ipset save [SET]` in the namespace, byte for byte, run with
// /etc/protocols and /etc/nsswitch.conf read from memory. ipset names the
// protocol of every entry it prints ("tcp:80") with getprotobynumber,
// which stats nsswitch.conf (and Debian's "db" source's missing file) and
// opens and scans /etc/protocols each time, and in the test VM those files
// are on the host's root over 9p, which makes a save of thousands of
// entries take minutes under TCG; with both files in memory (and
// protocols looked up in files only) it takes seconds. The command runs in a
// mount namespace of its own where copies of the files on a tmpfs are
// bound over them; nothing outside that command sees the mounts.
func (ns *NS) IPSetSave(set ...string) (string, error) {
	protocols, err := os.ReadFile(protocolsFile)
	if err != nil {
		return "", fmt.Errorf("ipset save: %w", err)
	}
	nsswitch, err := os.ReadFile(nsswitchFile)
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
		for file, content := range map[string][]byte{protocolsFile: protocols, nsswitchFile: filesOnly(nsswitch)} {
			copied := filepath.Join(dir, filepath.Base(file))
			if err := os.WriteFile(copied, content, 0o644); err != nil {
				return err
			}
			if err := unix.Mount(copied, file, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s over %s: %w", copied, file, err)
			}
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
