package nlconn

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// message builds an RTM_NEWADDR body as the kernel sends it: struct
// ifaddrmsg, then each attribute padded to 4 bytes.
func message(family, bits byte, index uint32, attrs ...attr) []byte {
	m := make([]byte, ifaddrmsgLen)
	m[0], m[1] = family, bits
	binary.NativeEndian.PutUint32(m[4:], index)
	for _, a := range attrs {
		h := make([]byte, rtattrLen)
		binary.NativeEndian.PutUint16(h[0:], uint16(rtattrLen+len(a.value)))
		binary.NativeEndian.PutUint16(h[2:], a.typ)
		m = append(append(m, h...), a.value...)
		for len(m)%4 != 0 {
			m = append(m, 0)
		}
	}
	return m
}

type attr struct {
	typ   uint16
	value []byte
}

const ifaLabel, ifaCacheinfo = 3, 6

func TestParseAddr(t *testing.T) {
	v4 := netip.MustParseAddr("10.96.0.10").AsSlice()
	peer := netip.MustParseAddr("192.0.2.1").AsSlice()
	v6 := netip.MustParseAddr("fd00::a").AsSlice()
	for _, tc := range []struct {
		name string
		msg  []byte
		want Addr
		ok   bool
	}{
		{"IPv4 with a label and cache info after it",
			message(afInet, 32, 7, attr{ifaAddress, v4}, attr{ifaLocal, v4}, attr{ifaLabel, []byte("kube-ipvs0\x00")}, attr{ifaCacheinfo, make([]byte, 16)}),
			Addr{7, netip.MustParsePrefix("10.96.0.10/32")}, true},
		{"point to point: the local address, not the peer",
			message(afInet, 24, 3, attr{ifaAddress, peer}, attr{ifaLocal, v4}),
			Addr{3, netip.MustParsePrefix("10.96.0.10/24")}, true},
		{"IPv6 has IFA_ADDRESS alone",
			message(afInet6, 128, 7, attr{ifaAddress, v6}),
			Addr{7, netip.MustParsePrefix("fd00::a/128")}, true},
		{"another family is skipped", message(17, 0, 7), Addr{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := parseAddr(tc.msg)
			if err != nil || ok != tc.ok || got != tc.want {
				t.Fatalf("parseAddr = %v, %v, %v; want %v, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseAddrMalformed(t *testing.T) {
	v4 := netip.MustParseAddr("10.96.0.10").AsSlice()
	long := message(afInet, 32, 7, attr{ifaLocal, v4})
	binary.NativeEndian.PutUint16(long[ifaddrmsgLen:], 200)
	for name, msg := range map[string][]byte{
		"shorter than ifaddrmsg":             {afInet, 32, 0},
		"attribute longer than the message":  long,
		"no address":                         message(afInet, 32, 7, attr{ifaLabel, []byte("eth0\x00")}),
		"an IPv6 address in an IPv4 message": message(afInet, 32, 7, attr{ifaLocal, netip.MustParseAddr("fd00::a").AsSlice()}),
		"prefix longer than the address":     message(afInet, 33, 7, attr{ifaLocal, v4}),
	} {
		if _, _, err := parseAddr(msg); !errors.Is(err, ErrAddrMessage) {
			t.Errorf("%s: err = %v, want ErrAddrMessage", name, err)
		}
	}
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		f     AddrFilter
		index int
		want  bool
	}{
		{AddrFilter{}, 5, true},
		{AddrFilter{Link: 5}, 5, true},
		{AddrFilter{Link: 5}, 6, false},
		{AddrFilter{Except: 5}, 5, false},
		{AddrFilter{Except: 5}, 6, true},
	} {
		if got := tc.f.wants(tc.index); got != tc.want {
			t.Errorf("%+v.wants(%d) = %v", tc.f, tc.index, got)
		}
	}
}
