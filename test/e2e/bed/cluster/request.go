package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// HTTPGet is `curl --interface LOCAL --max-time TIMEOUT http://ADDR/PATH`
// done on the calling thread (call it inside ktest's NS.Do, so the socket is
// made in that namespace): one connection, one GET, the body returned for
// any status. local may be the zero Addr (the kernel picks the source).
func HTTPGet(addr netip.AddrPort, path string, local netip.Addr, timeout time.Duration) (status int, body string, err error) {
	d := net.Dialer{Timeout: timeout}
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	conn, err := d.Dial("tcp", addr.String())
	if err != nil {
		return 0, "", fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr); err != nil {
		return 0, "", fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("GET http://%s%s: %w", addr, path, err)
	}
	return resp.StatusCode, string(b), nil
}

// UDPRequest is `echo MSG | nc -u -w TIMEOUT ADDR PORT` done on the calling
// thread (inside ktest's NS.Do): one datagram out, the first one back.
func UDPRequest(addr netip.AddrPort, msg string, timeout time.Duration) (string, error) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return "", fmt.Errorf("udp %s: %w", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(msg)); err != nil {
		return "", fmt.Errorf("udp %s: %w", addr, err)
	}
	buf := make([]byte, 65535)
	size, err := conn.Read(buf)
	if err != nil {
		return "", fmt.Errorf("udp %s: %w", addr, err)
	}
	return string(buf[:size]), nil
}
