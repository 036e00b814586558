package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// relayAddr is where ipvs-proxy finds the API server from inside node-a:
// a relay to the forwarded port (the node namespace has no route out).
// The serving certificate is valid for 127.0.0.1.
const relayAddr = "127.0.0.1:6443"

// relay forwards TCP connections accepted in one namespace to an address
// dialled from the VM's root namespace.
type relay struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func (d *demo) startRelay() error {
	var l net.Listener
	err := d.node.Do(func() error {
		var err error
		l, err = net.Listen("tcp", relayAddr)
		return err
	})
	if err != nil {
		return fmt.Errorf("relay: listen %s in node-a: %w", relayAddr, err)
	}
	r := &relay{l: l, conns: map[net.Conn]bool{}}
	d.relay = r
	d.t.Cleanup(r.stop)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.pipe(c, d.apiAddr)
			}()
		}
	}()
	return nil
}

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

func (r *relay) pipe(c net.Conn, target string) {
	defer c.Close()
	if !r.track(c, true) {
		return
	}
	defer r.track(c, false)
	u, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	if !r.track(u, true) {
		return
	}
	defer r.track(u, false)
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
}

// stop closes the listener and every relayed connection: the API server
// becomes unreachable from node-a.
func (r *relay) stop() {
	r.l.Close()
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	r.wg.Wait()
}
