package nodeenv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// procNet is the socket tables of the calling thread's network namespace
// (`ss -ltun` reads the same).
const procNet = "/proc/thread-self/net"

// socket states in /proc/net/{tcp,udp}: TCP_LISTEN, and TCP_CLOSE, which
// an unconnected (server) UDP socket shows.
const (
	stateListen = 0x0A
	stateClose  = 0x07
)

// ReadListeners reads the sockets the node serves on (`ss -ltun` and the
// SCTP endpoints): TCP listeners, unconnected bound UDP sockets, SCTP
// endpoints, both families, from the socket tables of the calling
// thread's network namespace. Sorted by protocol, port and address,
// unique. A table that does not exist (no IPv6, no SCTP module) is
// skipped.
func ReadListeners() ([]model.Listener, error) {
	var out []model.Listener
	for _, t := range []struct {
		file  string
		proto model.Protocol
		state uint64
	}{{"tcp", model.TCP, stateListen}, {"tcp6", model.TCP, stateListen}, {"udp", model.UDP, stateClose}, {"udp6", model.UDP, stateClose}} {
		data, err := os.ReadFile(filepath.Join(procNet, t.file))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read sockets: %w", err)
		}
		out = append(out, ParseSocketTable(data, t.proto, t.state)...)
	}
	data, err := os.ReadFile(filepath.Join(procNet, "sctp", "eps"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read SCTP endpoints: %w", err)
	}
	out = append(out, ParseSCTPEndpoints(data)...)
	slices.SortFunc(out, model.CompareListeners)
	return slices.Compact(out), nil
}

// ParseSocketTable reads a /proc/net/tcp-style table (tcp, tcp6, udp,
// udp6) and returns the sockets in state as proto listeners. The local
// address is hex, in the kernel's byte order: each 32-bit word is little
// endian on the machines the proxy runs on ("0100007F:0016" is
// 127.0.0.1:22).
func ParseSocketTable(data []byte, proto model.Protocol, state uint64) []model.Listener {
	var out []model.Listener
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		if st, err := strconv.ParseUint(f[3], 16, 8); err != nil || st != state {
			continue
		}
		hexAddr, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			continue
		}
		raw, err := hex.DecodeString(hexAddr)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			continue
		}
		for i := 0; i < len(raw); i += 4 {
			binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
		}
		a, _ := netip.AddrFromSlice(raw)
		out = append(out, model.Listener{Protocol: proto, Addr: a.Unmap(), Port: uint16(port)})
	}
	return out
}

// ParseSCTPEndpoints reads /proc/net/sctp/eps: one endpoint per line, its
// local port in the sixth column and its local addresses from the ninth
// on.
func ParseSCTPEndpoints(data []byte) []model.Listener {
	var out []model.Listener
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 {
			continue
		}
		port, err := strconv.ParseUint(f[5], 10, 16)
		if err != nil {
			continue
		}
		for _, s := range f[8:] {
			if a, err := netip.ParseAddr(s); err == nil {
				out = append(out, model.Listener{Protocol: model.SCTP, Addr: a.Unmap(), Port: uint16(port)})
			}
		}
	}
	return out
}
