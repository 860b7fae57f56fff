package adopt

import "github.com/go-logr/logr"

// Logger wraps l so that the key/value pairs added with WithValues can be
// read back (Value). controller-runtime's builder derives each controller's
// logger from the manager's with "controllerGroup" and "controllerKind": the
// kind given to For, which is how an adopted controller's primary kind is
// found. Logging itself is l's, unchanged.
func Logger(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		l = logr.Discard()
	}
	inner := l.GetSink()
	if d, ok := inner.(logr.CallDepthLogSink); ok {
		inner = d.WithCallDepth(1) // this wrapper's frame
	}
	return logr.New(&kvSink{inner: inner})
}

// Value returns the last value logged with WithValues under key by a
// logger derived from Logger.
func Value(l logr.Logger, key string) (string, bool) {
	s, ok := l.GetSink().(*kvSink)
	if !ok {
		return "", false
	}
	for i := len(s.kv) - 2; i >= 0; i -= 2 {
		if k, _ := s.kv[i].(string); k == key {
			v, ok := s.kv[i+1].(string)
			return v, ok
		}
	}
	return "", false
}

type kvSink struct {
	inner logr.LogSink
	kv    []any
}

// Init does nothing: the inner sink was initialized by its own logger.
func (s *kvSink) Init(logr.RuntimeInfo) {}

func (s *kvSink) Enabled(level int) bool { return s.inner != nil && s.inner.Enabled(level) }

func (s *kvSink) Info(level int, msg string, kv ...any) {
	if s.inner != nil {
		s.inner.Info(level, msg, kv...)
	}
}

func (s *kvSink) Error(err error, msg string, kv ...any) {
	if s.inner != nil {
		s.inner.Error(err, msg, kv...)
	}
}

func (s *kvSink) WithValues(kv ...any) logr.LogSink {
	out := &kvSink{kv: append(append([]any(nil), s.kv...), kv...)}
	if s.inner != nil {
		out.inner = s.inner.WithValues(kv...)
	}
	return out
}

func (s *kvSink) WithName(name string) logr.LogSink {
	out := &kvSink{kv: s.kv}
	if s.inner != nil {
		out.inner = s.inner.WithName(name)
	}
	return out
}

func (s *kvSink) WithCallDepth(depth int) logr.LogSink {
	out := &kvSink{kv: s.kv, inner: s.inner}
	if d, ok := s.inner.(logr.CallDepthLogSink); ok {
		out.inner = d.WithCallDepth(depth)
	}
	return out
}
