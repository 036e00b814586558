package harness

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatal is a testing.TB that records Fatalf and ends the goroutine, as
// Fatalf does.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs wait with a fatal and returns what it failed with, "" when
// it returned.
func failure(wait func(testing.TB)) string {
	f := &fatal{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(f)
	}()
	<-done
	return f.msg
}

func TestWaitForReturnsOnceCondHolds(t *testing.T) {
	calls := 0
	msg := failure(func(tb testing.TB) {
		WaitFor(tb, "third call", time.Minute, time.Millisecond, func() error {
			if calls++; calls < 3 {
				return errNotYet
			}
			return nil
		})
	})
	if msg != "" || calls != 3 {
		t.Fatalf("failed with %q after %d calls, want a return after 3", msg, calls)
	}
}

func TestWaitForTimeoutNamesTheLastError(t *testing.T) {
	msg := failure(func(tb testing.TB) {
		WaitUntil(tb, "never", 20*time.Millisecond, time.Millisecond, func() bool { return false })
	})
	if !strings.Contains(msg, "never: not within 20ms: not yet") {
		t.Fatalf("failed with %q", msg)
	}
}

func TestWaitForGivesUpAtOnce(t *testing.T) {
	start := time.Now()
	msg := failure(func(tb testing.TB) {
		WaitFor(tb, "the proxy's sync", time.Minute, time.Millisecond, func() error {
			return fmt.Errorf("%w: the proxy exited", ErrGiveUp)
		})
	})
	if !strings.Contains(msg, "the proxy exited") || time.Since(start) > 10*time.Second {
		t.Fatalf("failed with %q after %v, want the give-up at once", msg, time.Since(start))
	}
}
