package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/cpuset"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
)

// conntrackHashsizeFile is nf_conntrack's hash table size, which kube-proxy
// raises with nf_conntrack_max (to max/4) when it is smaller.
const conntrackHashsizeFile = "/sys/module/nf_conntrack/parameters/hashsize"

// ConntrackMax is nf_conntrack_max as kube-proxy computes it:
// --conntrack-max-per-core × cpus, at least --conntrack-min; 0 (leave it
// as it is) when --conntrack-max-per-core is 0.
func ConntrackMax(ct config.Conntrack, cpus int) int {
	if ct.MaxPerCore <= 0 {
		return 0
	}
	return max(int(ct.MaxPerCore)*cpus, int(ct.Min))
}

// ConntrackSysctls are the conntrack sysctls kube-proxy sets (under
// /proc/sys), for the --conntrack-* settings and the node's CPU count:
//
//	net/netfilter/nf_conntrack_max                      ConntrackMax
//	net/netfilter/nf_conntrack_tcp_timeout_established  --conntrack-tcp-timeout-established
//	net/netfilter/nf_conntrack_tcp_timeout_close_wait   --conntrack-tcp-timeout-close-wait
//	net/netfilter/nf_conntrack_tcp_be_liberal=1         --conntrack-tcp-be-liberal
//	net/netfilter/nf_conntrack_udp_timeout              --conntrack-udp-timeout
//	net/netfilter/nf_conntrack_udp_timeout_stream       --conntrack-udp-timeout-stream
//
// A setting of 0 (false) leaves the kernel's value.
func ConntrackSysctls(ct config.Conntrack, cpus int) []ipvs.Sysctl {
	var out []ipvs.Sysctl
	if m := ConntrackMax(ct, cpus); m > 0 {
		out = append(out, ipvs.Sysctl{Name: conntrackMaxSysctl, Value: m})
	}
	for _, s := range []struct {
		name string
		d    time.Duration
	}{
		{"nf_conntrack_tcp_timeout_established", ct.TCPEstablishedTimeout},
		{"nf_conntrack_tcp_timeout_close_wait", ct.TCPCloseWaitTimeout},
		{"nf_conntrack_udp_timeout", ct.UDPTimeout},
		{"nf_conntrack_udp_timeout_stream", ct.UDPStreamTimeout},
	} {
		if secs := int(s.d / time.Second); secs > 0 {
			out = append(out, ipvs.Sysctl{Name: "net/netfilter/" + s.name, Value: secs})
		}
	}
	if ct.TCPBeLiberal {
		out = append(out, ipvs.Sysctl{Name: "net/netfilter/nf_conntrack_tcp_be_liberal", Value: 1})
	}
	return out
}

// conntrackMaxSysctl is nf_conntrack_max under /proc/sys. The kernel makes
// it read-only (mode 0444) in every network namespace but the host's: the
// table is the host's, one for all namespaces.
const conntrackMaxSysctl = "net/netfilter/nf_conntrack_max"

// nodeCPUs is the node's online CPUs (/sys/devices/system/cpu/online), as
// kube-proxy counts them for nf_conntrack_max whatever the pod's cpuset
// (kubernetes#99225); runtime.NumCPU when that file cannot be read.
func nodeCPUs() int {
	if n, err := cpuset.NumCPU(); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// setConntrack sets conntrack's table size and timeouts as kube-proxy's
// setupConntrack does at every start (`sysctl -w net.netfilter.…`): each
// sysctl of ConntrackSysctls written when it differs, nf_conntrack_max
// first and then, once it holds the wanted value, hashsize raised to a
// quarter of it (hashsizeFile) when smaller. It returns the sysctls it
// changed.
//
// Where kube-proxy stops, this goes on with a log line and leaves the
// kernel's value: nf_conntrack_max read-only (a network namespace other
// than the host's, where kube-proxy exits unless --conntrack-max-per-core
// is 0; the hash table is then left too, as the kernel refuses it outside
// the host's namespace), or a write that fails.
func setConntrack(ct config.Conntrack, cpus int, procSys, hashsizeFile string, log *zap.Logger) []ipvs.Sysctl {
	var changed []ipvs.Sysctl
	for _, s := range ConntrackSysctls(ct, cpus) {
		if s.Name == conntrackMaxSysctl && readOnly(filepath.Join(procSys, s.Name)) {
			log.Info("nf_conntrack_max is read-only in this network namespace (only the host's sets it): left as it is, with nf_conntrack's hashsize; kube-proxy would exit here unless --conntrack-max-per-core=0",
				zap.Int("want", s.Value), zap.Int("cpus", cpus))
			continue
		}
		done, err := ipvskernel.WriteSysctls(procSys, []ipvs.Sysctl{s})
		if err != nil {
			log.Warn("cannot set a conntrack sysctl (--conntrack-*); the kernel's value stays", zap.Error(err))
			continue
		}
		changed = append(changed, done...)
		if s.Name != conntrackMaxSysctl {
			continue
		}
		if raised, err := raiseConntrackHashsize(hashsizeFile, s.Value); err != nil {
			log.Warn("cannot raise nf_conntrack's hash table size with nf_conntrack_max (as kube-proxy, it needs a writable /sys); lookups in a full table are slower", zap.Error(err))
		} else if raised {
			log.Info("set conntrack hashsize", zap.Int("value", s.Value/4))
		}
	}
	return changed
}

// readOnly reports whether file's mode lets no one write it, as the kernel
// marks the host-wide sysctls in other network namespaces.
func readOnly(file string) bool {
	fi, err := os.Stat(file)
	return err == nil && fi.Mode().Perm()&0o222 == 0
}

// raiseConntrackHashsize writes max/4 to the hashsize file when it holds
// less, as kube-proxy. It reports whether it wrote; a read-only /sys (a
// container without it mounted writable) is an error wrapping fs.ErrPermission
// or the like, for the caller to log.
func raiseConntrackHashsize(file string, max int) (bool, error) {
	if max <= 0 {
		return false, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", file, err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return false, fmt.Errorf("read %s: %w", file, err)
	}
	if cur >= max/4 {
		return false, nil
	}
	if err := os.WriteFile(file, []byte(strconv.Itoa(max/4)), 0o644); err != nil {
		return false, fmt.Errorf("write %d to %s: %w", max/4, file, err)
	}
	return true, nil
}

// ErrNoIPVS: the kernel has no IPVS (the ip_vs module is not loaded and
// cannot be loaded from the pod).
var ErrNoIPVS = errors.New("this kernel has no IPVS: load the ip_vs module (modprobe ip_vs on the node, or mount the host's /lib/modules into the pod so that it is loaded)")

// noIPVS tells a sysctl error of a missing net/ipv4/vs directory from
// others.
func noIPVS(root string, err error) bool {
	if !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	_, statErr := os.Stat(filepath.Join(root, "net/ipv4/vs"))
	return errors.Is(statErr, fs.ErrNotExist)
}
