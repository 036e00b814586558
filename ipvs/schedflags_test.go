package ipvs

import (
	"errors"
	"testing"
)

func TestParseSchedulerFlags(t *testing.T) {
	for _, c := range []struct {
		sched, list string
		want        Flags
		bad         bool
	}{
		{"mh", "mh-fallback,mh-port", FlagSchedSH1 | FlagSchedSH2, false},
		{"mh", " mh-port ", FlagSchedSH2, false},
		{"mh", "mh-fallback, ", FlagSchedSH1, false},
		{"sh", "sh-port,sh-fallback", FlagSchedSH1 | FlagSchedSH2, false},
		{"sh", "", 0, false},
		{"mh", "sh-port", 0, true},
		{"sh", "mh-fallback", 0, true},
		{"mh", "flag-3", 0, true},
		{"mh", "MH-PORT", 0, true},
		{"rr", "flag-1", 0, true},
		{"rr", "mh-port", 0, true},
	} {
		got, err := ParseSchedulerFlags(c.sched, c.list)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("%s %q: %#x, %v; want %#x, error %v", c.sched, c.list, got, err, c.want, c.bad)
		}
		if err != nil && !errors.Is(err, ErrSchedulerFlag) {
			t.Errorf("%s %q: %v does not wrap ErrSchedulerFlag", c.sched, c.list, err)
		}
	}
}

// TestSchedulerFlagsRoundTrip: what ParseSchedulerFlags reads,
// AppendSchedulerFlags writes back as ipvsadm -b lists it.
func TestSchedulerFlagsRoundTrip(t *testing.T) {
	for _, s := range []string{"mh-fallback", "mh-port", "mh-fallback,mh-port"} {
		f, err := ParseSchedulerFlags("mh", s)
		if got := string(AppendSchedulerFlags(nil, "mh", f)); err != nil || got != s {
			t.Errorf("%q: %q, %v", s, got, err)
		}
	}
	if got := string(AppendSchedulerFlags(nil, "rr", FlagSchedSH1|FlagSched3)); got != "flag-1,flag-3" {
		t.Errorf("rr: %q", got)
	}
}
