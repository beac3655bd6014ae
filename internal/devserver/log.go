package devserver

import (
	"context"
	"log/slog"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverLogger hands the server's warnings and errors to an slog.Logger. Below warn the server
// reports every shard, queue and service it starts and stops. Stop raises min to error: while
// the services stop one by one, the ones still running warn about each one gone.
type serverLogger struct {
	l     *slog.Logger
	min   *slog.LevelVar
	fatal func() // Options.OnFatal
}

var _ log.Logger = serverLogger{}

func (s serverLogger) Debug(msg string, tags ...tag.Tag) { s.log(slog.LevelDebug, msg, tags) }
func (s serverLogger) Info(msg string, tags ...tag.Tag)  { s.log(slog.LevelInfo, msg, tags) }
func (s serverLogger) Warn(msg string, tags ...tag.Tag)  { s.log(slog.LevelWarn, msg, tags) }
func (s serverLogger) Error(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// DPanic, Panic and Fatal log errors too: the server is embedded in a worker or a test binary,
// which an error of the dev server must not take down. Fatal then calls Options.OnFatal, if any.
func (s serverLogger) DPanic(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }
func (s serverLogger) Panic(msg string, tags ...tag.Tag)  { s.log(slog.LevelError, msg, tags) }
func (s serverLogger) Fatal(msg string, tags ...tag.Tag) {
	s.log(slog.LevelError, msg, tags)
	if s.fatal != nil {
		s.fatal()
	}
}

func (s serverLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	if level < s.min.Level() {
		return
	}
	attrs := make([]slog.Attr, len(tags))
	for i, t := range tags {
		attrs[i] = slog.Any(t.Key(), t.Value())
	}
	s.l.LogAttrs(context.Background(), level, msg, attrs...)
}
