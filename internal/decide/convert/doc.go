// Package convert turns API objects (Services, EndpointSlices, Nodes) into
// internal/decide/model, the proxy's own validated description of the cluster.
// Every field it cannot use becomes a model.Refusal naming the object, the
// field and the value; it never panics on a malformed object, and a bad
// field never affects another Service. It also answers the questions about
// addresses that the guard's trust order asks of a set of Services
// (ServiceIPs, LoadBalancerIPs, ExternalVIPs, APIServerAddrs).
//
// It is pure: the daemon converts what informers caches, `plan` what it
// reads from files (internal/manifest) and `recover` what it lists, all
// through the same functions. It never watches, caches, writes to the API
// server or touches the kernel.
package convert
