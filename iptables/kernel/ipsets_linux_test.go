package kernel

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

func TestIPSetErrors(t *testing.T) {
	for _, tt := range []struct {
		errno syscall.Errno
		is    error
		text  string
	}{
		{syscall.ENOENT, iptables.ErrSetNotFound, ""},
		{syscall.EEXIST, iptables.ErrSetExists, ""},
		// ipset destroy of a set an iptables rule holds.
		{syscall.Errno(nl.IPSET_ERR_BUSY), iptables.ErrSetReferenced, "busy"},
		{syscall.Errno(nl.IPSET_ERR_REFERENCED), iptables.ErrSetReferenced, "referenced"},
		// ipset add to a hash set holding maxelem entries.
		{syscall.Errno(nl.IPSET_ERR_TYPE_SPECIFIC), iptables.ErrKernel, "maxelem"},
		{syscall.Errno(nl.IPSET_ERR_TYPE_MISMATCH), iptables.ErrKernel, "type mismatch"},
	} {
		err := ipsetErr(tt.errno)
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("errno %d: %v, want %v containing %q", int(tt.errno), err, tt.is, tt.text)
		}
	}
}

func TestParseEntryRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		set iptables.IPSet
		e   iptables.Entry
	}{
		{iptables.IPSet{Type: iptables.TypeHashIP, Family: iptables.FamilyIPv6}, iptables.Entry{IP: netip.MustParseAddr("fd00::1")}},
		{iptables.IPSet{Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4}, iptables.Entry{IP: netip.MustParseAddr("10.0.0.1"), Protocol: model.SCTP, Port: 7}},
		{iptables.IPSet{Type: iptables.TypeHashIPPortIP, Family: iptables.FamilyIPv4}, iptables.Entry{IP: netip.MustParseAddr("10.0.0.1"), Protocol: model.UDP, Port: 53, Net: netip.MustParsePrefix("10.0.0.1/32")}},
		{iptables.IPSet{Type: iptables.TypeHashIPPortNet, Family: iptables.FamilyIPv6}, iptables.Entry{IP: netip.MustParseAddr("fd00::1"), Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("2001:db8::/32")}},
		{iptables.IPSet{Type: iptables.TypeBitmapPort}, iptables.Entry{Port: 30000}},
	} {
		a, err := entryAttr(tc.set, tc.e)
		if err != nil {
			t.Fatalf("%s: %v", tc.set.Type, err)
		}
		raw := a.Serialize()
		got := parseEntry(tc.set.Type, raw[4:])
		if got != iptables.Canonical(tc.set.Type, tc.e) {
			t.Errorf("%s: round trip %+v, want %+v", tc.set.Type, got, tc.e)
		}
	}
}
