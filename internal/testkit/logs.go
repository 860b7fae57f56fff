package testkit

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// LogWriter is an io.Writer that sends each write to t.Log, without its
// trailing newline: where a process under test writes its output. Writes
// after the test's cleanups have run (a goroutine of the code under test
// that outlived it) are dropped: t.Log would panic then.
func LogWriter(t testing.TB) io.Writer {
	w := &logWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

type logWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool // the test has ended
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

// Tail is the last n lines of b.
func Tail(b []byte, n int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// LogTails logs the last n lines of every file matching each of globs, for
// a test that failed and must show what the processes it ran wrote.
func LogTails(t testing.TB, n int, globs ...string) {
	t.Helper()
	for _, g := range globs {
		matches, _ := filepath.Glob(g)
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil {
				t.Logf("%s: %v", m, err)
				continue
			}
			t.Logf("%s:\n%s", m, Tail(b, n))
		}
	}
}
