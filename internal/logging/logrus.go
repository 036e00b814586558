package logging

import (
	"io"

	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logrusHook writes logrus entries (moby/ipvs logs through logrus) to a
// zap logger, so that every line has the process's format.
type logrusHook struct{ log *zap.Logger }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusHook) Fire(e *logrus.Entry) error {
	lvl := zapcore.DebugLevel
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel:
		lvl = zapcore.ErrorLevel
	case logrus.WarnLevel:
		lvl = zapcore.WarnLevel
	case logrus.InfoLevel:
		lvl = zapcore.InfoLevel
	}
	ce := h.log.Check(lvl, e.Message)
	if ce == nil {
		return nil
	}
	fields := make([]zap.Field, 0, len(e.Data))
	for k, v := range e.Data {
		fields = append(fields, zap.Any(k, v))
	}
	ce.Write(fields...)
	return nil
}

// installLogrus routes logrus's standard logger into log under the name
// "logrus": its own output is discarded, every entry goes through the hook
// at the level zap has enabled.
func installLogrus(log *zap.Logger) {
	std := logrus.StandardLogger()
	std.SetOutput(io.Discard)
	std.ReplaceHooks(logrus.LevelHooks{})
	std.AddHook(logrusHook{log.Named("logrus")})
	std.SetLevel(logrus.TraceLevel)
	if !log.Core().Enabled(zapcore.DebugLevel) {
		std.SetLevel(logrus.InfoLevel)
	}
}
