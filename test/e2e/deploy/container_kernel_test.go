//go:build kernel

package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// kernelPaths are host paths that are the VM's own on every node: the
// modules of the one kernel. Every other hostPath volume of a pod gets a
// directory of its node (nodeHost.root), as each node has its own disk.
var kernelPaths = map[string]bool{"/lib/modules": true}

// bundle is an OCI runtime bundle as `umoci unpack` writes it: rootfs/ and
// config.json, whose process.env the image's config gave (PATH).
type bundle struct {
	rootfs string
	env    []string
}

func readBundle(t *testing.T, dir string) bundle {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process struct{ Env []string } `json:"process"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("%s/config.json: %v", dir, err)
	}
	return bundle{rootfs: filepath.Join(dir, "rootfs"), env: spec.Process.Env}
}

// nodeHost is one node of the test: a ktest node namespace and a directory
// standing in for its disk.
type nodeHost struct {
	node *ktest.Node
	root string
}

// container is a container started by start: its process and its output.
type container struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// script is what a container runtime does for one container, in shell:
// a fresh writable layer over the image (overlayfs, upper on a tmpfs), the
// host's /dev, a /proc, the node's /sys, every volume bind-mounted (hostPath
// types created as the kubelet creates them, read-only mounts remounted
// read-only), then chroot with the image's environment and the pod's.
// It runs in a private mount namespace in the node's network namespace, so
// every mount goes when the container's process exits.
func script(b bundle, c deploy.Container, h nodeHost) string {
	var s strings.Builder
	s.WriteString(`set -eu
c=$(mktemp -d)
mount -t tmpfs ctr "$c"
mkdir "$c/upper" "$c/work" "$c/root"
r="$c/root"
mount -t overlay ctr -o lowerdir=` + b.rootfs + `,upperdir="$c/upper",workdir="$c/work" "$r"
mount --rbind /dev "$r/dev"
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
`)
	for _, m := range c.Mounts {
		src := m.Source
		if m.HostPath && !kernelPaths[src] {
			src = filepath.Join(h.root, src)
		}
		switch m.HostPathType {
		case corev1.HostPathDirectoryOrCreate:
			fmt.Fprintf(&s, "mkdir -p %s\n", shq(src))
		case corev1.HostPathFileOrCreate:
			fmt.Fprintf(&s, "mkdir -p %s && touch %s\n", shq(filepath.Dir(src)), shq(src))
		}
		// The target resolved inside the root file system, as a runtime
		// resolves it: /var/run is a symlink to /run in Debian, which
		// outside the chroot would be the VM's own /run.
		fmt.Fprintf(&s, "t=\"$r$(chroot \"$r\" /usr/bin/readlink -m %s)\"\n", shq(m.Target))
		fmt.Fprintf(&s, "if [ -d %s ]; then mkdir -p \"$t\"; else mkdir -p \"$(dirname \"$t\")\" && touch \"$t\"; fi\n", shq(src))
		// rbind, as runtimes bind volumes: /lib/modules/VER is itself a
		// mount in the VM.
		fmt.Fprintf(&s, "mount --rbind %s \"$t\"\n", shq(src))
		if m.ReadOnly {
			s.WriteString("mount -o remount,bind,ro \"$t\"\n")
		}
	}
	s.WriteString(`exec chroot "$r" /usr/bin/env -i`)
	for _, e := range append(append([]string(nil), b.env...), c.Env...) {
		s.WriteString(" " + shq(e))
	}
	for _, a := range c.Argv {
		s.WriteString(" " + shq(a))
	}
	s.WriteString("\n")
	return s.String()
}

// start starts container c of a pod on node h from image b, its output in a
// log file; the process is killed when the test ends if still running.
func start(t *testing.T, b bundle, c deploy.Container, h nodeHost) *container {
	t.Helper()
	ct := &container{name: h.node.Name + "/" + c.Name, log: filepath.Join(t.TempDir(), c.Name+".log"), done: make(chan error, 1)}
	f, err := os.Create(ct.log)
	if err != nil {
		t.Fatal(err)
	}
	ct.cmd = exec.Command("ip", "netns", "exec", h.node.Name, "unshare", "--mount", "--propagation", "private",
		"sh", "-c", script(b, c, h))
	ct.cmd.Stdout, ct.cmd.Stderr = f, f
	if err := ct.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ct.done <- ct.cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		select {
		case err := <-ct.done:
			ct.done <- err
		default:
			_ = ct.cmd.Process.Kill()
		}
	})
	return ct
}

// output is what the container printed so far.
func (ct *container) output() string {
	b, _ := os.ReadFile(ct.log)
	return string(b)
}

// wait waits for the container to exit and returns its error (nil: exit 0).
func (ct *container) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-ct.done:
		ct.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("container %s still running after %v:\n%s", ct.name, timeout, ct.output())
		return nil
	}
}

// running reports whether the container's process has not exited.
func (ct *container) running() bool {
	select {
	case err := <-ct.done:
		ct.done <- err
		return false
	default:
		return true
	}
}

// runInit runs a pod's init containers in order, each to exit 0, as the
// kubelet does before it starts the pod's containers.
func runInit(t *testing.T, b bundle, pod *deploy.PodRun, h nodeHost) {
	t.Helper()
	for _, c := range pod.InitContainers {
		ct := start(t, b, c, h)
		if err := ct.wait(t, 3*time.Minute); err != nil {
			t.Fatalf("init container %s: %v\n%s", ct.name, err, ct.output())
		}
		t.Logf("init container %s: exit 0: %s", ct.name, strings.TrimSpace(ct.output()))
	}
}
