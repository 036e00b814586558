//go:build linux

package nodeenv

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestIsMainTable: the route watch tells the main table's events from the
// others by struct rtmsg's rtm_table alone.
func TestIsMainTable(t *testing.T) {
	rtmsg := func(table byte) []byte {
		m := make([]byte, unix.SizeofRtMsg)
		m[0], m[4] = unix.AF_INET, table
		return m
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want bool
	}{
		{"main", rtmsg(unix.RT_TABLE_MAIN), true},
		{"local (a kube-ipvs0 address's route)", rtmsg(unix.RT_TABLE_LOCAL), false},
		{"a table above 255 (RT_TABLE_COMPAT, the table in RTA_TABLE)", rtmsg(unix.RT_TABLE_COMPAT), false},
		{"shorter than rtmsg", rtmsg(unix.RT_TABLE_MAIN)[:4], false},
	} {
		if got := isMainTable(tc.msg); got != tc.want {
			t.Errorf("%s: isMainTable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
