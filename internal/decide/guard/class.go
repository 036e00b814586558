package guard

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// class is an address class that is never a service VIP, nor a backend.
type class struct {
	reason model.Reason
	// what names one address of the class ("loopback address").
	what string
	// vip says why such an address is no VIP (a refusal's detail).
	vip string
}

var (
	classInvalid     = class{model.ReasonInvalidAddress, "not an IP address", "not an IP address"}
	classMapped      = class{model.ReasonIPv4Mapped, "IPv4-mapped IPv6 address", "IPv4-mapped IPv6 addresses are never service VIPs"}
	classUnspecified = class{model.ReasonUnspecified, "unspecified address", "the unspecified address is never a service VIP"}
	classLoopback    = class{model.ReasonLoopback, "loopback address", "loopback addresses are never service VIPs"}
	classMulticast   = class{model.ReasonMulticast, "multicast address", "multicast addresses are never service VIPs"}
	classBroadcast   = class{model.ReasonBroadcast, "broadcast address", "the limited broadcast address is never a service VIP"}
	classLinkLocal   = class{model.ReasonLinkLocal, "link-local address",
		"link-local addresses (169.254.169.254 is the cloud metadata service) are never service VIPs"}
)

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// classOf is the never-a-VIP class of a (zone ignored), or nil: invalid,
// IPv4-mapped IPv6 (checked first: ::ffff:127.0.0.1 is refused as mapped),
// unspecified, loopback, multicast, the limited broadcast address,
// link-local.
func classOf(a netip.Addr) *class {
	if !a.IsValid() {
		return &classInvalid
	}
	// "::%eth0" is not netip's unspecified address, but is one.
	a = a.WithZone("")
	switch {
	case a.Is4In6():
		return &classMapped
	case a.IsUnspecified():
		return &classUnspecified
	case a.IsLoopback():
		return &classLoopback
	case a.IsMulticast():
		return &classMulticast
	case a == limitedBroadcast:
		return &classBroadcast
	case a.IsLinkLocalUnicast():
		return &classLinkLocal
	}
	return nil
}

// Special reports whether a belongs to a class that is never a service
// VIP nor a service backend — not an IP, IPv4-mapped IPv6, unspecified,
// loopback, multicast, 255.255.255.255, link-local — with its reason code
// and what it is ("loopback address"); reason is "" otherwise. It depends
// on a alone: Guard.Check refuses these first, whatever it protects, and
// the conversion of EndpointSlices refuses such backends with it.
func Special(a netip.Addr) (reason model.Reason, what string) {
	if c := classOf(a); c != nil {
		return c.reason, c.what
	}
	return "", ""
}
