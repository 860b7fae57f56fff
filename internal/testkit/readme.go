package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// untilCtrlC marks a README command that runs until Ctrl-C.
const untilCtrlC = "runs until Ctrl-C"

// RunReadme runs README command lines as written, one bash script in dir
// with env, stopping at the first that fails (which fails the test, with
// the output). A line whose comment says "runs until Ctrl-C" runs in its own
// process group until its output shows ready, is then sent SIGINT as
// Ctrl-C would send it, and must end within a minute. It returns the output.
func RunReadme(t testing.TB, dir string, env []string, ready string, lines []string) string {
	t.Helper()
	return RunBlocks(t, dir, env, ready, []Block{{Path: "README.md", Lang: "sh", Mark: MarkRun, Terminal: 1, Lines: lines}})
}

// RunBlocks runs blocks as a reader types them: one bash script in dir with
// env, the lines in order, stopping at the first that fails (which fails
// the test, with the output). A line whose comment says "runs until Ctrl-C"
// runs in its own process group until its output shows ready. If it ends
// its block and terminal=2 blocks follow, those run then, as in a second
// terminal (a shell of their own, started in dir with env: nothing the
// first terminal exported or cd'd into), and the line is sent SIGINT, as
// Ctrl-C in the first terminal would, once they have run; else it is sent
// SIGINT at once. It must end within a minute of that. Nothing the script
// started outlives it. RunBlocks returns the output.
func RunBlocks(t testing.TB, dir string, env []string, ready string, blocks []Block) string {
	t.Helper()
	logs := t.TempDir()
	var script strings.Builder
	script.WriteString("set -euo pipefail\nset -m\nexport -p > \"$READMELOGS/env0\"\nbg=()\n" +
		"trap 'for p in \"${bg[@]}\"; do kill -KILL -$p 2>/dev/null || true; done' EXIT\n")
	for bi := 0; bi < len(blocks); bi++ {
		b := blocks[bi]
		if b.Terminal == 2 {
			t.Fatalf("%s: a terminal=2 block follows no command that runs until Ctrl-C", b.Where())
		}
		for i, line := range b.Lines {
			fmt.Fprintf(&script, "echo %s\n", shellQuote("$ "+line))
			if !strings.Contains(line, untilCtrlC) {
				script.WriteString(line + "\n")
				continue
			}
			log := fmt.Sprintf("\"$READMELOGS/%d-%d.log\"", bi, i)
			fmt.Fprintf(&script, `{ %s
} > %[2]s 2>&1 &
pid=$!
bg+=($pid)
for _ in $(seq 3000); do grep -qF %[3]q %[2]s && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if ! grep -qF %[3]q %[2]s; then cat %[2]s; echo "not ready: no %[3]q"; exit 1; fi
`, line, log, ready)
			// terminal=2 blocks after the block this line ends
			var second []string
			for i == len(b.Lines)-1 && bi+1 < len(blocks) && blocks[bi+1].Terminal == 2 {
				bi++
				second = append(second, blocks[bi].Lines...)
			}
			if len(second) > 0 {
				t2 := filepath.Join(logs, fmt.Sprintf("terminal2-%d.sh", bi))
				var s2 strings.Builder
				s2.WriteString("set -euo pipefail\n")
				for _, l := range second {
					fmt.Fprintf(&s2, "echo %s\n%s\n", shellQuote("[second terminal] $ "+l), l)
				}
				if err := os.WriteFile(t2, []byte(s2.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&script, "if ! (cd %s && env -i bash -c 'set -a; source \"$0\"; set +a; exec bash \"$1\"' \"$READMELOGS/env0\" %s); then cat %s; echo \"the second terminal's commands failed\"; exit 1; fi\n",
					shellQuote(dir), shellQuote(t2), log)
			}
			fmt.Fprintf(&script, `kill -INT -$pid
for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then cat %[1]s; echo "still running a minute after Ctrl-C"; exit 1; fi
wait $pid || true
cat %[1]s
`, log)
		}
	}
	path := filepath.Join(logs, "readme.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	cmd.Dir, cmd.Env = dir, append(env, "READMELOGS="+logs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the commands of %s, as written, in %s: %v\n%s", blocks[0].Where(), dir, err, Tail(out, 80))
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
