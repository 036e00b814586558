package logging

import (
	"errors"
	"io"
	"testing"

	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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

// TestVerbosity: kube-proxy's --v lowers the level to zap level -v, where
// klog's V(v) lines and the proxy's debug lines are logged.
func TestVerbosity(t *testing.T) {
	for _, tc := range []struct {
		v             int
		debug, klogV2 bool
	}{
		{0, false, false},
		{1, true, false},
		{2, true, true},
	} {
		log, err := New(Options{Level: "info", Format: FormatText, Verbosity: tc.v})
		if err != nil {
			t.Fatal(err)
		}
		if got := log.Core().Enabled(zapcore.DebugLevel); got != tc.debug {
			t.Errorf("--v=%d: debug enabled %v, want %v", tc.v, got, tc.debug)
		}
		if got := log.Core().Enabled(zapcore.Level(-2)); got != tc.klogV2 {
			t.Errorf("--v=%d: klog V(2) enabled %v, want %v", tc.v, got, tc.klogV2)
		}
	}
	// --v never raises the level --log-level sets.
	log, _ := New(Options{Level: "debug", Verbosity: 0})
	if !log.Core().Enabled(zapcore.DebugLevel) {
		t.Error("--log-level debug --v=0: debug disabled")
	}
}

// TestLogrus: logrus lines (moby/ipvs's) come out of zap, in its format,
// and not out of logrus's own writer.
func TestLogrus(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	Install(zap.New(core))
	logrus.WithField("service", "10.96.0.1:80").Error("Failed to get ipvs service")
	logrus.Debug("below the level")
	if logs.Len() != 1 {
		t.Fatalf("zap got %d entries, want 1: %v", logs.Len(), logs.All())
	}
	e := logs.All()[0]
	if e.Message != "Failed to get ipvs service" || e.Level != zapcore.ErrorLevel || e.LoggerName != "logrus" ||
		e.ContextMap()["service"] != "10.96.0.1:80" {
		t.Errorf("entry %+v", e)
	}
	if logrus.StandardLogger().Out != io.Discard {
		t.Error("logrus still writes itself")
	}
}
