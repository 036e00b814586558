package ipvs

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Conntrack deletes the conntrack flows of a removed UDP or SCTP real
// server, so that clients of the virtual server are balanced again at once
// instead of sticking to the gone backend until the flow times out.
type Conntrack interface {
	// DeleteFlows is `conntrack -D -p PROTO --orig-dst VIP --orig-port-dst PORT
	// --reply-src ENDPOINT`; it returns the number of flows deleted (those
	// deleted before an error too).
	DeleteFlows(proto model.Protocol, vip netip.Addr, port uint16, endpoint netip.Addr) (int, error)
}
