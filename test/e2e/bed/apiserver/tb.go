package apiserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// errFatal is what serverTB panics with when StartTestServer calls Fatal or
// Skip; New recovers it and returns the message as an error.
var errFatal = errors.New("kube-apiserver test server failed")

// serverTB is the ktesting.TB that StartTestServer logs to and registers its
// cleanups with. It is owned by one Server rather than by a *testing.T, so a
// server can outlive a single test (RunMain, Shared) and its verbose
// per-test log output is discarded unless logging is enabled.
type serverTB struct {
	log     io.Writer
	tempDir string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	tmpCount int
}

func (tb *serverTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

// runCleanups calls the registered cleanups, last registered first.
func (tb *serverTB) runCleanups() {
	tb.mu.Lock()
	fs := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (tb *serverTB) Error(args ...any) { tb.Log(args...); tb.Fail() }
func (tb *serverTB) Errorf(format string, args ...any) {
	tb.Logf(format, args...)
	tb.Fail()
}
func (tb *serverTB) Fail() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = true
}
func (tb *serverTB) FailNow() { tb.Fail(); panic(errFatal) }
func (tb *serverTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}
func (tb *serverTB) Fatal(args ...any) {
	tb.Fail()
	panic(fmt.Errorf("%w: %s", errFatal, fmt.Sprint(args...)))
}
func (tb *serverTB) Fatalf(format string, args ...any) {
	tb.Fail()
	panic(fmt.Errorf("%w: %s", errFatal, fmt.Sprintf(format, args...)))
}
func (tb *serverTB) Helper()                          {}
func (tb *serverTB) Log(args ...any)                  { fmt.Fprintln(tb.log, args...) }
func (tb *serverTB) Logf(format string, args ...any)  { fmt.Fprintf(tb.log, format+"\n", args...) }
func (tb *serverTB) Name() string                     { return "ipvs-proxy-e2e-apiserver" }
func (tb *serverTB) Setenv(key, value string)         { _ = os.Setenv(key, value) }
func (tb *serverTB) Skip(args ...any)                 { tb.Fatal(append([]any{"skip: "}, args...)...) }
func (tb *serverTB) SkipNow()                         { tb.Fatal("skip") }
func (tb *serverTB) Skipf(format string, args ...any) { tb.Fatalf("skip: "+format, args...) }
func (tb *serverTB) Skipped() bool                    { return false }
func (tb *serverTB) TempDir() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.tmpCount++
	dir, err := os.MkdirTemp(tb.tempDir, fmt.Sprintf("tb%d-", tb.tmpCount))
	if err != nil {
		panic(fmt.Errorf("%w: temp dir: %v", errFatal, err))
	}
	return dir
}
