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
