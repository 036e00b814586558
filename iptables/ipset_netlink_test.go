package iptables

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

func TestIPSetErrors(t *testing.T) {
	for _, tt := range []struct {
		errno syscall.Errno
		is    error
		text  string
	}{
		{syscall.ENOENT, ErrSetNotFound, ""},
		{syscall.EEXIST, ErrSetExists, ""},
		// ipset destroy of a set an iptables rule holds.
		{syscall.Errno(nl.IPSET_ERR_BUSY), ErrSetReferenced, "busy"},
		{syscall.Errno(nl.IPSET_ERR_REFERENCED), ErrSetReferenced, "referenced"},
		// ipset add to a hash set holding maxelem entries.
		{syscall.Errno(nl.IPSET_ERR_TYPE_SPECIFIC), ErrKernel, "maxelem"},
		{syscall.Errno(nl.IPSET_ERR_TYPE_MISMATCH), ErrKernel, "type mismatch"},
	} {
		err := ipsetErr(tt.errno)
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("errno %d: %v, want %v containing %q", int(tt.errno), err, tt.is, tt.text)
		}
	}
}
