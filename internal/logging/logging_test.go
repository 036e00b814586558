package logging

import (
	"errors"
	"testing"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		o   Options
		err error
	}{
		{Options{Level: "info", Format: "json"}, nil},
		{Options{Level: "debug", Format: "console"}, nil},
		{Options{Level: "warn"}, nil},
		{Options{Level: "info", Format: "xml"}, ErrFormat},
	} {
		_, err := New(tc.o)
		if !errors.Is(err, tc.err) {
			t.Errorf("New(%+v) = %v, want %v", tc.o, err, tc.err)
		}
	}
	if _, err := New(Options{Level: "loud", Format: "json"}); err == nil {
		t.Error("New with level loud: no error")
	}
}
