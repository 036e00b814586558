// Package logging builds the proxy's zap logger from --log-level,
// --logging-format and --v and routes client-go's klog and moby/ipvs's
// logrus output into it, so that every line the process writes has one
// format. It owns process-wide logger globals (zap's, klog's, logrus's);
// it never writes anywhere but stderr.
package logging

import (
	"errors"
	"fmt"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// Formats accepted by --logging-format (alias --log-format).
const (
	FormatJSON    = "json"
	FormatConsole = "console"
	// FormatText is kube-proxy's name for a human-readable format: the
	// console encoder here.
	FormatText = "text"
)

// ErrFormat is returned for a --log-format other than json or console.
var ErrFormat = errors.New("unknown log format")

// Options are the logging flags.
type Options struct {
	// Level is --log-level: debug, info, warn, error.
	Level string
	// Format is --logging-format: json, or console (text).
	Format string
	// Verbosity is kube-proxy's --v: above 0 it lowers the level to zap
	// level -Verbosity, where klog's V(Verbosity) lines (logr's mapping)
	// and the proxy's debug lines are logged.
	Verbosity int
}

// New builds a logger writing to stderr.
func New(o Options) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(o.Level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", o.Level, err)
	}
	if v := zapcore.Level(-min(o.Verbosity, 127)); o.Verbosity > 0 && v < lvl {
		lvl = v
	}
	var cfg zap.Config
	switch o.Format {
	case FormatJSON, "":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case FormatConsole, FormatText:
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
	default:
		return nil, fmt.Errorf("--log-format %q: %w (want json or text)", o.Format, ErrFormat)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.DisableStacktrace = lvl > zapcore.DebugLevel
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	return cfg.Build()
}

// Install makes log the process-wide zap logger and routes klog (client-go's
// logging) into it under the name "klog", and logrus (moby/ipvs's) under
// "logrus". klog verbosity levels map to zap
// levels as logr does: V(n) is zap level -n (V(0) info, V(1) debug), shown
// when --v is at least n.
func Install(log *zap.Logger) {
	zap.ReplaceGlobals(log)
	installLogrus(log)
	klog.SetLogger(zapr.NewLoggerWithOptions(log.Named("klog").WithOptions(zap.AddCallerSkip(1)),
		zapr.ErrorKey("err")))
}
