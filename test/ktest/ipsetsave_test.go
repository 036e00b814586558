package ktest

import "testing"

func TestFilesOnly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"passwd: files\nprotocols:      db files\nservices: db files\n", "passwd: files\nprotocols: files\nservices: db files\n"},
		{"passwd: files\n", "passwd: files\nprotocols: files\n"},
		{"", "protocols: files\n"},
		{"hosts: files", "hosts: files\nprotocols: files\n"},
	} {
		if got := string(filesOnly([]byte(tc.in))); got != tc.want {
			t.Errorf("filesOnly(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
