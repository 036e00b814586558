package cluster_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestLogOptions: the query kubelet's /containerLogs gets from the API
// server, as the bed reads it: tailLines and limitBytes select, the options
// a plain log file cannot honour are refused naming themselves.
func TestLogOptions(t *testing.T) {
	log := []byte("one\ntwo\nthree\n")
	for _, tc := range []struct {
		query, want, err string
	}{
		{query: "", want: "one\ntwo\nthree\n"},
		{query: "previous=false&follow=false", want: "one\ntwo\nthree\n"},
		{query: "tailLines=2", want: "two\nthree\n"},
		{query: "tailLines=0", want: ""},
		{query: "tailLines=9", want: "one\ntwo\nthree\n"},
		{query: "limitBytes=5", want: "one\nt"},
		{query: "tailLines=2&limitBytes=3", want: "two"},
		{query: "follow=true", err: "follow=true"},
		{query: "previous=1", err: "previous=true"},
		{query: "timestamps=true", err: "timestamps=true"},
		{query: "sinceSeconds=10", err: "sinceSeconds"},
		{query: "tailLines=-1", err: "tailLines"},
		{query: "limitBytes=x", err: "limitBytes"},
		{query: "follow=maybe", err: "follow"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		o, err := cluster.ParseLogOptions(q)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error naming %q", tc.query, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.query, err)
			continue
		}
		if got := string(o.Select(log)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.query, got, tc.want)
		}
	}
}

// TestParseLogPath: kubelet's /containerLogs/NAMESPACE/POD/CONTAINER, and
// nothing else.
func TestParseLogPath(t *testing.T) {
	if p, ok := cluster.ParseLogPath("/containerLogs/ns/pod/c"); !ok || p != (cluster.LogPath{Namespace: "ns", Pod: "pod", Container: "c"}) {
		t.Errorf("ParseLogPath: %+v %v", p, ok)
	}
	for _, bad := range []string{"/containerLogs/ns/pod", "/containerLogs/ns//c", "/containerLogs/ns/pod/c/x"} {
		if p, ok := cluster.ParseLogPath(bad); ok {
			t.Errorf("ParseLogPath(%q) = %+v, want refused", bad, p)
		}
	}
}
