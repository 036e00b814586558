package nodeenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// ResolvConfs are the files the node's DNS servers are read from: the
// resolver configuration, and systemd-resolved's list of its upstream
// servers (/etc/resolv.conf then names only 127.0.0.53). In deploy/base's
// pod (dnsPolicy: Default) /etc/resolv.conf is the node's, as the kubelet
// copies it.
var ResolvConfs = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// ReadResolvers returns the `nameserver` addresses of the files that
// exist, sorted and unique, zones dropped and IPv4-mapped ones unmapped
// (`grep ^nameserver /etc/resolv.conf`). A missing file is no error.
func ReadResolvers(paths ...string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read resolvers: %w", err)
		}
		out = append(out, ParseResolvConf(data)...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// ParseResolvConf returns the addresses of the `nameserver` lines of a
// resolv.conf, in order; other lines and values that are no address are
// skipped.
func ParseResolvConf(data []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil {
			out = append(out, a.WithZone("").Unmap())
		}
	}
	return out
}
