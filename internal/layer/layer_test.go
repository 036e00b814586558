package layer_test

import (
	"errors"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

type failure struct{ err error }

func (f failure) Error() string { return "f: " + f.err.Error() }
func (f failure) Unwrap() error { return f.err }

func TestJoin(t *testing.T) {
	if err := layer.Join([]failure(nil)); err != nil {
		t.Fatalf("no failures: %v", err)
	}
	a, b := errors.New("a"), errors.New("b")
	err := layer.Join([]failure{{a}, {b}})
	if !errors.Is(err, a) || !errors.Is(err, b) {
		t.Fatalf("%v hides a cause", err)
	}
	if got, want := err.Error(), "f: a\nf: b"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

type id string

func (i id) String() string { return string(i) }

func TestResult(t *testing.T) {
	var r layer.Result[id]
	if r.Err() != nil {
		t.Fatal("an empty result has an error")
	}
	cause := errors.New("EEXIST")
	r.Fail("bind 10.96.0.10/32 on kube-ipvs0", cause)
	if err := r.Err(); !errors.Is(err, cause) || err.Error() != "bind 10.96.0.10/32 on kube-ipvs0: EEXIST" {
		t.Fatalf("%v: want the identity, then the cause", err)
	}
}

func TestDrift(t *testing.T) {
	var d layer.Drift
	d.Add("address", 0)
	if d != nil || d.Total() != 0 {
		t.Fatalf("%v: nothing counted allocates nothing", d)
	}
	d.Add("address", 2)
	d.Merge(layer.Drift{"address": 1, "ipset": 3})
	if d["address"] != 3 || d["ipset"] != 3 || d.Total() != 6 {
		t.Fatalf("%v, total %d", d, d.Total())
	}
}
