package main

// relayAddr is where ipvs-proxy finds the API server from inside node-a:
// a relay to the forwarded port (the node namespace has no route out).
// The serving certificate is valid for 127.0.0.1.
const relayAddr = "127.0.0.1:6443"

// startRelay relays relayAddr in node-a to the API server (ktest's
// NS.Relay); d.stopRelay makes the API server unreachable from node-a.
func (d *demo) startRelay() {
	d.stopRelay = d.node.Relay(d.t, relayAddr, d.apiAddr)
}
