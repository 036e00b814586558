// Package nodeenv reads what the node itself says that the node-IP guard
// protects: the addresses of its interfaces other than kube-ipvs0 (`ip -o
// addr show`), the gateways and next hops of its routes (`ip route show
// table main`), its DNS servers (/etc/resolv.conf), the sockets it serves
// on (`ss -ltun`, from /proc), and the addresses of the API server host
// the proxy dials (a name lookup). `run` (through Cache, before every
// sync) and `recover` read through it, so both see the node the same way.
// It is thin: it decides nothing (internal/decide/guard does) and changes
// nothing.
package nodeenv
