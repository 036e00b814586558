package main

import (
	"fmt"
	"os"
	"testing"
)

// fatal is what tb panics with when test/ktest calls Fatal; step
// recovers it and reports the step as failed.
type fatal struct{ msg string }

func (f fatal) Error() string { return f.msg }

// tb gives test/ktest the few testing.TB methods it calls (Helper,
// Fatal, Fatalf, Cleanup, Logf) outside a test binary. The embedded
// interface is nil: a method ktest does not call would panic, which step
// reports as a failure rather than hiding it.
type tb struct {
	testing.TB
	cleanups []func()
}

func (t *tb) Helper()                           {}
func (t *tb) Name() string                      { return "demo" }
func (t *tb) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *tb) Fatal(args ...any)                 { panic(fatal{fmt.Sprint(args...)}) }
func (t *tb) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }
func (t *tb) Errorf(format string, args ...any) { t.Fatalf(format, args...) }
func (t *tb) Error(args ...any)                 { t.Fatal(args...) }
func (t *tb) Log(args ...any)                   { fmt.Fprintln(os.Stdout, args...) }
func (t *tb) Logf(format string, args ...any)   { fmt.Fprintf(os.Stdout, format+"\n", args...) }

// cleanup runs the registered cleanups, last first.
func (t *tb) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}
