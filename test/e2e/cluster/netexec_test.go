package cluster_test

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

func TestParseNetexec(t *testing.T) {
	n, err := cluster.ParseNetexec("p", []string{"netexec", "--http-port=8083", "--udp-port=8081"})
	if err != nil || !reflect.DeepEqual(n, cluster.Netexec{Hostname: "p", HTTPPort: 8083, UDPPort: 8081}) {
		t.Errorf("got %+v, %v", n, err)
	}
	n, err = cluster.ParseNetexec("p", []string{"netexec"})
	if err != nil || !reflect.DeepEqual(n, cluster.Netexec{Hostname: "p", HTTPPort: 8080}) {
		t.Errorf("defaults: got %+v, %v", n, err)
	}
	n, err = cluster.ParseNetexec("p", []string{"netexec", "--udp-port=8081", "--udp-listen-addresses=192.168.50.11,10.244.1.2"})
	want := cluster.Netexec{Hostname: "p", HTTPPort: 8080, UDPPort: 8081,
		UDPListenAddrs: []netip.Addr{netip.MustParseAddr("192.168.50.11"), netip.MustParseAddr("10.244.1.2")}}
	if err != nil || !reflect.DeepEqual(n, want) {
		t.Errorf("udp-listen-addresses: got %+v, %v", n, err)
	}
	n, err = cluster.ParseNetexec("p", []string{"netexec", "--http-port=80", "--delay-shutdown=300"})
	if err != nil || !reflect.DeepEqual(n, cluster.Netexec{Hostname: "p", HTTPPort: 80, DelayShutdown: 300}) {
		t.Errorf("delay-shutdown: got %+v, %v", n, err)
	}
	for _, args := range [][]string{nil, {"serve-hostname"}, {"netexec", "--sctp-port=8082"}, {"netexec", "--udp-listen-addresses=$(HOST_IP)"}} {
		if _, err := cluster.ParseNetexec("p", args); !errors.Is(err, cluster.ErrArgs) {
			t.Errorf("%q: got %v, want ErrArgs", args, err)
		}
	}
}

// TestNetexec: the server's answers over loopback, through the requests
// the re-created tests send.
func TestNetexec(t *testing.T) {
	n := cluster.Netexec{Hostname: "netserver-0", HTTPPort: 18083, UDPPort: 18081}
	stop, err := n.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	lo := netip.MustParseAddr("127.0.0.1")
	httpAddr, udpAddr := netip.AddrPortFrom(lo, 18083), netip.AddrPortFrom(lo, 18081)
	for path, want := range map[string]string{"/hostname": "netserver-0", "/hostName": "netserver-0", "/echo?msg=42": "42", "/healthz": "ok"} {
		if code, body, err := cluster.HTTPGet(httpAddr, path, netip.Addr{}, 5*time.Second); err != nil || code != 200 || body != want {
			t.Errorf("GET %s: %d %q %v, want 200 %q", path, code, body, err, want)
		}
	}
	if _, body, err := cluster.HTTPGet(httpAddr, "/clientip", lo, 5*time.Second); err != nil || !strings.HasPrefix(body, "127.0.0.1:") {
		t.Errorf("GET /clientip: %q %v", body, err)
	}
	for msg, want := range map[string]string{"hostname": "netserver-0", "hostName\n": "netserver-0", "echo hello": "hello"} {
		if got, err := cluster.UDPRequest(udpAddr, msg, 5*time.Second); err != nil || got != want {
			t.Errorf("udp %q: %q %v, want %q", msg, got, err, want)
		}
	}
	if got, err := cluster.UDPRequest(udpAddr, "clientip", 5*time.Second); err != nil || !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("udp clientip: %q %v", got, err)
	}
}

// TestNetexecUDPListenAddresses: with --udp-listen-addresses the UDP port
// is bound to those addresses only.
func TestNetexecUDPListenAddresses(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	n := cluster.Netexec{Hostname: "netserver-0", UDPPort: 18082, UDPListenAddrs: []netip.Addr{lo}}
	stop, err := n.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if got, err := cluster.UDPRequest(netip.AddrPortFrom(lo, 18082), "hostname", 5*time.Second); err != nil || got != "netserver-0" {
		t.Errorf("udp 127.0.0.1: %q %v", got, err)
	}
	if got, err := cluster.UDPRequest(netip.MustParseAddrPort("127.0.0.2:18082"), "hostname", time.Second); err == nil {
		t.Errorf("udp 127.0.0.2 (not a listen address) answered %q", got)
	}
}

// TestNetexecDelayShutdown: with --delay-shutdown, /readyz turns 503 once
// Shutdown is closed while /hostname still answers; without it, /readyz
// stays 200.
func TestNetexecDelayShutdown(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	shutdown := make(chan struct{})
	for port, delay := range map[uint16]int{18084: 300, 18085: 0} {
		n := cluster.Netexec{Hostname: "webserver", HTTPPort: int(port), DelayShutdown: delay, Shutdown: shutdown}
		stop, err := n.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	get := func(port uint16, path string) int {
		code, _, err := cluster.HTTPGet(netip.AddrPortFrom(lo, port), path, netip.Addr{}, 5*time.Second)
		if err != nil {
			t.Fatalf("GET :%d%s: %v", port, path, err)
		}
		return code
	}
	if c := get(18084, "/readyz"); c != 200 {
		t.Errorf("/readyz before the shutdown: %d, want 200", c)
	}
	close(shutdown)
	if c := get(18084, "/readyz"); c != 503 {
		t.Errorf("/readyz while shutting down: %d, want 503", c)
	}
	if c := get(18084, "/hostname"); c != 200 {
		t.Errorf("/hostname while shutting down: %d, want 200", c)
	}
	if c := get(18085, "/readyz"); c != 200 {
		t.Errorf("/readyz without --delay-shutdown, after the shutdown: %d, want 200", c)
	}
}
