package recovery

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Process is another service proxy found running on the node: it would
// re-add what recover removes.
type Process struct {
	PID int `json:"pid"`
	// Name is the proxy's name: "kube-proxy", or "ipvs-proxy" for another
	// `ipvs-proxy run`.
	Name string `json:"name"`
	// Cmdline is its command line, arguments joined by spaces.
	Cmdline string `json:"cmdline"`
}

// proxyNames are the programs that program kube-ipvs0 (the executable's
// base name or /proc/PID/comm, which the kernel cuts to 15 bytes).
var proxyNames = []string{"kube-proxy", "ipvs-proxy"}

// ProcEntry is what MatchProxy reads of one process: /proc/PID/comm and
// /proc/PID/cmdline (NUL-separated).
type ProcEntry struct {
	PID     int
	Comm    string
	Cmdline []byte
}

// MatchProxy reports whether a process is a service proxy that manages
// kube-ipvs0: kube-proxy in any mode, or `ipvs-proxy run` (other
// ipvs-proxy subcommands — this recover among them — do not count). Pure.
func MatchProxy(e ProcEntry) (Process, bool) {
	args := strings.Split(strings.TrimRight(string(e.Cmdline), "\x00"), "\x00")
	if len(e.Cmdline) == 0 {
		args = nil // kernel threads and zombies have no command line
	}
	var base string
	if len(args) > 0 {
		base = filepath.Base(args[0])
	}
	comm := strings.TrimSpace(e.Comm)
	for _, name := range proxyNames {
		if base != name && comm != name {
			continue
		}
		if name == "ipvs-proxy" && !slices.Contains(args[min(1, len(args)):], "run") {
			return Process{}, false
		}
		return Process{PID: e.PID, Name: name, Cmdline: strings.Join(args, " ")}, true
	}
	return Process{}, false
}

// FindProxies scans procRoot (normally "/proc") for other service proxies,
// sorted by PID; it skips the calling process and processes that vanish
// while it reads. It skips a proxy in another network namespace than the
// calling thread's (/proc/PID/ns/net against procRoot/thread-self/ns/net:
// a thread of a Go program can be in another namespace than its process'
// leader, which /proc/self shows): that one programs another kube-ipvs0,
// IPVS table and rule set. When either link cannot be read (no
// permission), the proxy is kept: better a refusal too many than a
// cleanup under a running proxy.
func FindProxies(procRoot string) ([]Process, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	ownNet, _ := os.Readlink(filepath.Join(procRoot, "thread-self", "ns", "net"))
	var out []Process
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join(procRoot, ent.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		p, ok := MatchProxy(ProcEntry{PID: pid, Comm: string(bytes.TrimSpace(comm)), Cmdline: cmdline})
		if !ok {
			continue
		}
		if net, err := os.Readlink(filepath.Join(dir, "ns", "net")); err == nil && ownNet != "" && net != ownNet {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Process) int { return a.PID - b.PID })
	return out, nil
}
