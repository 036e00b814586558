package ktest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Relay listens on listen (say 127.0.0.1:6443) inside the namespace and
// pipes every connection to target, dialed from the test's own namespace
// (the VM's, which reaches the host's forwarded API server port): how a
// proxy running in a node namespace without a route to the host talks to
// the API server. It stops at the end of the test, or when stop is called:
// the listener and every relayed connection close, and the API server is
// unreachable from the namespace until Relay is called again.
func (ns *NS) Relay(t testing.TB, listen, target string) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		t.Fatalf("relay %s -> %s: %v", listen, target, err)
	}
	r := &relay{ln: ln, conns: map[net.Conn]bool{}}
	t.Cleanup(r.stop)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.pipe(c, target)
			}()
		}
	}()
	return r.stop
}

// relay is one Relay's listener and the connections it holds open.
type relay struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool // nil once stopped
}

// track adds (on) or removes c; false once the relay is stopped.
func (r *relay) track(c net.Conn, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	if on {
		r.conns[c] = true
	} else {
		delete(r.conns, c)
	}
	return true
}

// pipe copies c to a new connection to target and back, half-closing each
// direction when its source ends.
func (r *relay) pipe(c net.Conn, target string) {
	defer c.Close()
	if !r.track(c, true) {
		return
	}
	defer r.track(c, false)
	u, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	if !r.track(u, true) {
		return
	}
	defer r.track(u, false)
	go func() {
		_, _ = io.Copy(u, c)
		if tc, ok := u.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, u)
}

// stop closes the listener and every relayed connection and waits for the
// relay's goroutines; a second call does nothing.
func (r *relay) stop() {
	r.ln.Close()
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	r.wg.Wait()
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
