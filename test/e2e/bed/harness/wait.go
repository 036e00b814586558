package harness

import (
	"errors"
	"testing"
	"time"
)

// ErrGiveUp, wrapped in the error of a WaitFor condition, ends the wait at
// once: what is awaited can no longer come (a process it needs has exited).
var ErrGiveUp = errors.New("gave up")

// errNotYet is what WaitUntil's condition reports while it does not hold.
var errNotYet = errors.New("not yet")

// WaitFor calls cond every interval until it returns nil and returns how
// long that took. It fails the test with what and cond's last error when
// timeout passes first, or at once when cond's error wraps ErrGiveUp.
func WaitFor(t testing.TB, what string, timeout, interval time.Duration, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if errors.Is(err, ErrGiveUp) {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

// WaitUntil is WaitFor for a condition that only holds or not.
func WaitUntil(t testing.TB, what string, timeout, interval time.Duration, cond func() bool) time.Duration {
	t.Helper()
	return WaitFor(t, what, timeout, interval, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}
