package ktest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Relay listens on listen (say 127.0.0.1:6443) inside the namespace and
// pipes every connection to target, dialed from the test's own namespace
// (the VM's, which reaches the host's forwarded API server port): how a
// proxy running in a node namespace without a route to the host talks to
// the API server. It stops at the end of the test.
func (ns *NS) Relay(t testing.TB, listen, target string) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		t.Fatalf("relay %s -> %s: %v", listen, target, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go pipe(c, target)
		}
	}()
}

// pipe copies c to a new connection to target and back, half-closing each
// direction when its source ends.
func pipe(c net.Conn, target string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	go func() {
		_, _ = io.Copy(u, c)
		if tc, ok := u.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, u)
}

// HTTPGet fetches http://addr/path from inside the namespace (the socket is
// created on the namespace's thread) and returns the status code and body.
// timeout bounds the whole exchange.
func (ns *NS) HTTPGet(addr, path string, timeout time.Duration) (code int, body string, err error) {
	err = ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return err
	})
	return code, body, err
}
