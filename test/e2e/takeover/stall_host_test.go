package takeover

import (
	"testing"
	"time"
)

func TestDuringStalls(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	sp := func(a, b float64) span { return span{at(a), at(b)} }
	stalls := []span{sp(10, 11.5), sp(20, 20.2)}
	for _, tc := range []struct {
		name    string
		failure span
		want    int
	}{
		{"a timeout spanning a stall", sp(9, 12), 1},
		{"a timeout starting in a stall", sp(11, 14), 1},
		{"a timeout ending as a stall begins", sp(7, 10), 0},
		{"a failure between stalls: the proxy's", sp(12, 15), 0},
		{"a failure after every stall", sp(30, 33), 0},
	} {
		if got := duringStalls([]span{tc.failure}, stalls); got != tc.want {
			t.Errorf("%s: duringStalls = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := duringStalls([]span{sp(9, 12)}, nil); got != 0 {
		t.Errorf("no stalls: duringStalls = %d, want 0", got)
	}
}

func TestBedFailures(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	sp := func(a, b float64) span { return span{at(a), at(b)} }
	failures := []span{sp(1, 4), sp(10, 13), sp(20, 23)}
	stalls := []span{sp(11, 12.5)}
	bed := []span{sp(1, 4), sp(10, 13)} // the capture put these two on the bed
	// sp(10, 13) is already excused by the stall: counted once, there.
	if got := bedFailures(failures, stalls, bed); got != 1 {
		t.Errorf("bedFailures = %d, want 1 (the failure the capture excused outside any stall)", got)
	}
	if got := bedFailures(failures, nil, nil); got != 0 {
		t.Errorf("no verdicts: bedFailures = %d, want 0", got)
	}
}
