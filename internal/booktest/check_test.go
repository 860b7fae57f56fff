package booktest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// checkLine checks a command line that is not run: each command of it (a
// pipeline's, a list's) resolves. make: its targets exist. opzero (and
// bin/opzero, sudo ...): the CLI parses it (its subcommand and flags) with
// --help added. go run / go test: the package exists, and so does each test
// a -run pattern names. Other commands are not checked.
func checkLine(root, cli, line string) error {
	for _, words := range commands(line) {
		if err := checkCommand(root, cli, words); err != nil {
			return err
		}
	}
	return nil
}

func checkCommand(root, cli string, w []string) error {
	for len(w) > 0 && (w[0] == "sudo" || w[0] == "time" || isAssignment(w[0])) {
		w = w[1:]
	}
	if len(w) == 0 {
		return nil
	}
	switch {
	case w[0] == "make":
		mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
		if err != nil {
			return err
		}
		for _, a := range w[1:] {
			if strings.HasPrefix(a, "-") || isAssignment(a) {
				continue
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(a) + `:`).Match(mk) {
				return fmt.Errorf("the Makefile has no target %s", a)
			}
		}
	case w[0] == "opzero" || w[0] == "bin/opzero":
		return checkOpzero(cli, w[1:])
	case w[0] == "go" && len(w) > 1 && (w[1] == "run" || w[1] == "test"):
		return checkGo(root, w[1], w[2:])
	}
	return nil
}

// checkOpzero runs the CLI with args and --help (before a "--", after
// which arguments go to the operator): cobra parses the flags and finds the
// subcommand, then prints help instead of running. A word left over where
// the command found has subcommands is an unknown one.
func checkOpzero(cli string, args []string) error {
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	withHelp := append(append(append([]string{}, args[:i]...), "--help"), args[i:]...)
	out, err := exec.Command(cli, withHelp...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("opzero %s: %v\n%s", strings.Join(withHelp, " "), err, out)
	}
	m := regexp.MustCompile(`(?m)^Usage:\n  (opzero[a-z -]*?)(?: \[flags\]| \[command\]| [^a-z]|$)`).FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("opzero %s printed no usage line:\n%s", strings.Join(withHelp, " "), out)
	}
	path := strings.Fields(string(m[1]))[1:]
	if strings.Contains(string(out), "Available Commands:") {
		for _, a := range args[:i] {
			if strings.HasPrefix(a, "-") {
				break
			}
			if !slices.Contains(path, a) {
				return fmt.Errorf("opzero %s: %q is not a subcommand of opzero %s", strings.Join(args, " "), a, strings.Join(path, " "))
			}
		}
	}
	return nil
}

// checkGo checks go run PKG and go test [-run PATTERN] PKG...: the
// packages exist in the checkout, and each TestName the pattern names is a
// test of one of them.
func checkGo(root, verb string, args []string) error {
	var pkgs, tests []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-run" && i+1 < len(args):
			i++
			tests = regexp.MustCompile(`Test\w+`).FindAllString(args[i], -1)
		case strings.HasPrefix(a, "-run="):
			tests = regexp.MustCompile(`Test\w+`).FindAllString(a, -1)
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, strings.TrimSuffix(a, "/..."))
			if verb == "run" {
				i = len(args) // the rest are the program's arguments
			}
		case strings.HasPrefix(a, "-") && verb == "test" && i+1 < len(args) && slices.Contains([]string{"-bench", "-benchtime", "-timeout", "-soak", "-count", "-tags", "-fuzz", "-fuzztime"}, a):
			i++
		}
	}
	if len(pkgs) == 0 {
		return errors.New("go " + verb + " names no package of the checkout (./...)")
	}
	for _, p := range pkgs {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			return fmt.Errorf("no package %s", p)
		}
	}
	for _, name := range tests {
		found := false
		for _, p := range pkgs {
			if testExists(filepath.Join(root, p), name) == nil {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no test %s in %v", name, pkgs)
		}
	}
	return nil
}

// testExists says whether the package in dir has a test function name.
func testExists(dir, name string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	re := regexp.MustCompile(`(?m)^func ` + name + `\(`)
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && re.Match(b) {
			return nil
		}
	}
	return fmt.Errorf("no func %s in %s", name, dir)
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	return ok && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(name)
}

// commands splits a shell line into its simple commands' words: quotes
// are honoured (and removed), a comment ends the line, |, ||, &&, ; and &
// separate commands, and a $(...) substitution is one opaque word.
func commands(line string) [][]string {
	var out [][]string
	var words []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	end := func() {
		flush()
		if len(words) > 0 {
			out = append(out, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			depth, j := 0, i+1
			for ; j < len(line); j++ {
				if line[j] == '(' {
					depth++
				} else if line[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			cur.WriteString("$(...)")
			inWord, i = true, j
		case c == '#' && !inWord:
			end()
			return out
		case c == ' ' || c == '\t' || c == '\n' || c == '\\' && i+1 < len(line) && line[i+1] == '\n':
			flush()
		case c == '|' || c == ';' || c == '&' || c == '(' || c == ')':
			end()
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	end()
	return out
}

// TestCheckLineCatchesDrift: the check of lines that are not run is not
// vacuous: a renamed flag, subcommand, make target, package or test fails
// it, the lines as the book has them pass.
func TestCheckLineCatchesDrift(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cli := buildCLI(t, root)
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"make test   # every test", true},
		{"make tests", false},
		{"sudo bin/opzero cluster up --knative   # Knative too", true},
		{"sudo bin/opzero cluster up --knativ", false},
		{"bin/opzero clustr up", false},
		{"bin/opzero manifests --operator ./examples/configwatcher -o deploy/ -- --answer=admitted", true},
		{"opzero manifests ./cmd | opzero dev -f - --otel", true},
		{"opzero manifests ./cmd | opzero dev -f - --otl", false},
		{"KUBEBUILDER_ASSETS=$(opzero install --print-dir controlplane) go test ./internal/standin", true},
		{"go test -race -run 'TestFaultSoak$' ./internal/devenv/dev -v -soak=10m", true},
		{"go test -race -run 'TestFaultSoaked$' ./internal/devenv/dev", false},
		{"go run ./bench/suite -only scaleout", true},
		{"go run ./bench/suit -only scaleout", false},
	} {
		err := checkLine(root, cli, tc.line)
		if (err == nil) != tc.ok {
			t.Errorf("%q: checked ok %v, want %v (%v)", tc.line, err == nil, tc.ok, err)
		}
	}
}
