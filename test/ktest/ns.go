package ktest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// ErrGoexit is returned by NS.Do when fn called runtime.Goexit, which is
// what t.FailNow / t.Fatal do: call them after Do returns, not inside it.
var ErrGoexit = errors.New("ktest: fn exited its goroutine (t.Fatal inside Do? return an error instead)")

// NS is one named network namespace (`ip netns add NAME`), bind-mounted at
// /run/netns/NAME so that `ip netns exec`, moby/ipvs's ipvs.New(ns.Path())
// and netlink.NewHandleAt all reach it.
type NS struct {
	// Name is the namespace's name under /run/netns.
	Name string
	// handle is an open fd on the namespace.
	handle netns.NsHandle
	once   sync.Once
	closed bool
	// cleanups run (last first) before the namespace is deleted.
	mu       sync.Mutex
	cleanups []func()
}

// newNS creates a named network namespace with lo up and IPv6 DAD off, so
// addresses are usable at once (as if every address had `nodad`).
func newNS(prefix string) (*NS, error) {
	ns := &NS{Name: fmt.Sprintf("%s-%s", prefix, randHex(4))}
	err := onFreshThread(func() error {
		h, err := netns.NewNamed(ns.Name)
		if err != nil {
			return fmt.Errorf("create netns %s: %w", ns.Name, err)
		}
		ns.handle = h
		// This thread is in the new namespace now; it dies with the goroutine.
		for _, kv := range [][2]string{
			{"net/ipv6/conf/all/accept_dad", "0"},
			{"net/ipv6/conf/default/accept_dad", "0"},
		} {
			if err := writeSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		// SCTP's retransmission timeout starts at 3 s, as long as a whole
		// Request: one chunk lost while TCG lags would fail the request.
		// Start at 200 ms (min 100 ms, max 1 s) instead, when sctp is loaded.
		for _, kv := range [][2]string{
			{"net/sctp/rto_max", "1000"},
			{"net/sctp/rto_min", "100"},
			{"net/sctp/rto_initial", "200"},
		} {
			if err := writeSysctl(kv[0], kv[1]); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("netns %s: lo: %w", ns.Name, err)
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		if ns.handle.IsOpen() {
			ns.Close()
		}
		return nil, err
	}
	return ns, nil
}

// onFreshThread runs fn on a new goroutine locked to its OS thread and never
// unlocks it: the thread exits with the goroutine, so whatever namespace fn
// switched it to can never leak into other goroutines.
func onFreshThread(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		sent := false
		defer func() {
			if !sent {
				if r := recover(); r != nil {
					ch <- fmt.Errorf("ktest: panic in namespace: %v", r)
					return
				}
				ch <- ErrGoexit
			}
		}()
		runtime.LockOSThread()
		err := fn()
		sent = true
		ch <- err
	}()
	return <-ch
}

// Path is the namespace's bind mount, e.g. /run/netns/node-1a2b3c4d: pass it
// to ipvs.New, netns.GetFromPath or `ip netns exec`.
func (ns *NS) Path() string { return filepath.Join("/run/netns", ns.Name) }

// Handle is an open fd on the namespace, for netlink.NewHandleAt(ns.Handle()).
// It stays valid until Close.
func (ns *NS) Handle() netns.NsHandle { return ns.handle }

// Do runs fn on an OS thread locked inside the namespace. Sockets, netlink
// and moby/ipvs handles fn opens stay bound to the namespace after Do
// returns; commands fn execs run in it. Goroutines fn starts do NOT run in
// the namespace. fn must not call t.Fatal (return an error instead).
func (ns *NS) Do(fn func() error) error {
	return onFreshThread(func() error {
		if err := netns.Set(ns.handle); err != nil {
			return fmt.Errorf("enter netns %s: %w", ns.Name, err)
		}
		return fn()
	})
}

// Exec runs a command in the namespace and returns its stdout; on failure the
// error includes stderr.
func (ns *NS) Exec(name string, args ...string) (string, error) {
	return ns.ExecInput("", name, args...)
}

// ExecInput is Exec with stdin, for batch tools: `ipvsadm -R`,
// `iptables-restore`, `ipset restore`, `ip -batch -`. Under TCG every process
// costs a few hundred milliseconds, so one batch beats many commands.
func (ns *NS) ExecInput(stdin, name string, args ...string) (string, error) {
	var out, stderr bytes.Buffer
	err := ns.Do(func() error {
		cmd := exec.Command(name, args...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		return cmd.Run()
	})
	if err != nil {
		return out.String(), fmt.Errorf("in netns %s: %s %s: %w: %s", ns.Name, name,
			strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// Run is Exec that fails the test on error: node.Run(t, "ipvsadm", "-S", "-n").
func (ns *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := ns.Exec(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RunInput is ExecInput that fails the test on error:
// node.RunInput(t, rules, "ipvsadm", "-R").
func (ns *NS) RunInput(t testing.TB, stdin, name string, args ...string) string {
	t.Helper()
	out, err := ns.ExecInput(stdin, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Sysctl sets a sysctl inside the namespace: key as in /proc/sys, e.g.
// "net/ipv4/vs/conntrack" or "net.ipv4.vs.conntrack".
func (ns *NS) Sysctl(key, value string) error {
	return ns.Do(func() error { return writeSysctl(key, value) })
}

func writeSysctl(key, value string) error {
	p := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// Netlink returns a netlink handle bound to the namespace (usable from any
// goroutine); it is closed with the namespace.
func (ns *NS) Netlink(t testing.TB) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns.handle)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", ns.Name, err)
	}
	ns.onClose(h.Close)
	return h
}

func (ns *NS) onClose(f func()) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.cleanups = append(ns.cleanups, f)
}

// Close stops what runs in the namespace and deletes it (`ip netns del`).
// It is idempotent; the kernel frees the namespace asynchronously.
func (ns *NS) Close() {
	ns.once.Do(func() {
		ns.mu.Lock()
		cs := ns.cleanups
		ns.cleanups = nil
		ns.mu.Unlock()
		for i := len(cs) - 1; i >= 0; i-- {
			cs[i]()
		}
		_ = netns.DeleteNamed(ns.Name)
		ns.handle.Close()
		ns.closed = true
	})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
