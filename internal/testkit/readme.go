package testkit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// untilCtrlC marks a README command that runs until Ctrl-C.
const untilCtrlC = "runs until Ctrl-C"

// ReadmeBlock returns the command lines of the ```sh block that follows the
// line <!-- readme-test: name --> in the Markdown file path.
func ReadmeBlock(path, name string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	marker := "<!-- readme-test: " + name + " -->"
	var lines []string
	state := 0 // 0 before the marker, 1 before the fence, 2 in the block
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case state == 0 && strings.TrimSpace(line) == marker:
			state = 1
		case state == 1 && strings.HasPrefix(line, "```sh"):
			state = 2
		case state == 1 && strings.TrimSpace(line) != "":
			return nil, fmt.Errorf("%s: %s is not followed by a ```sh block", path, marker)
		case state == 2 && strings.HasPrefix(line, "```"):
			if len(lines) == 0 {
				return nil, fmt.Errorf("%s: the block after %s is empty", path, marker)
			}
			return lines, sc.Err()
		case state == 2 && strings.TrimSpace(line) != "":
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no ```sh block after %s", path, marker)
}

// RunReadme runs README command lines as written, one bash script in dir
// with env, stopping at the first that fails (which fails the test, with
// the output). A line whose comment says "runs until Ctrl-C" runs in its own
// process group until its output shows ready, is then sent SIGINT as
// Ctrl-C would send it, and must end within a minute. It returns the output.
func RunReadme(t testing.TB, dir string, env []string, ready string, lines []string) string {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\nset -m\n")
	for i, line := range lines {
		fmt.Fprintf(&script, "echo %s\n", shellQuote("$ "+line))
		if !strings.Contains(line, untilCtrlC) {
			script.WriteString(line + "\n")
			continue
		}
		log := fmt.Sprintf("\"$READMELOGS/%d.log\"", i)
		fmt.Fprintf(&script, `{ %s
} > %[2]s 2>&1 &
pid=$!
for _ in $(seq 3000); do grep -qF %[3]q %[2]s && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if ! grep -qF %[3]q %[2]s; then cat %[2]s; echo "not ready: no %[3]q"; kill -KILL -$pid 2>/dev/null || true; exit 1; fi
kill -INT -$pid
for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then cat %[2]s; echo "still running a minute after Ctrl-C"; kill -KILL -$pid; exit 1; fi
wait $pid || true
cat %[2]s
`, line, log, ready)
	}
	logs := t.TempDir()
	path := filepath.Join(logs, "readme.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	cmd.Dir, cmd.Env = dir, append(env, "READMELOGS="+logs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands, as written, in %s: %v\n%s", dir, err, Tail(out, 80))
	}
	return string(out)
}

// ReadmeEnv is a new user's environment for RunReadme: HOME is a fresh
// folder in which ~/src/opzero is the checkout root, Go installs into a
// bin folder that leads PATH, and Go's caches, the module proxy settings and
// opzero's cache are this user's, so nothing is downloaded or built again.
func ReadmeEnv(t testing.TB, root string) []string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(home, "src", "opzero")); err != nil {
		t.Fatal(err)
	}
	gobin := filepath.Join(home, "go-bin")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "HOME", "PATH", "GOBIN", "KUBECONFIG", "KUBEBUILDER_ASSETS", "OPZERO_BIN_DIR", "GOFLAGS", "XDG_CACHE_HOME":
			continue
		}
		env = append(env, kv)
	}
	for _, v := range []string{"GOPATH", "GOCACHE", "GOMODCACHE", "GOENV", "GOPROXY", "GONOSUMDB", "GOSUMDB"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	return append(env, "HOME="+home, "GOBIN="+gobin, "XDG_CACHE_HOME="+cache, "GOTOOLCHAIN=local",
		"PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// shellQuote quotes s for bash, literally.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
