package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/opzero/opzero/internal/controllergen"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// flagTypes are the type names pflag shows for the kinds of flag the CLI
// uses ("" for a bool).
var flagTypes = map[string]bool{"": true, "string": true, "int": true, "duration": true, "strings": true,
	"stringArray": true, "uint": true, "float": true}

// TestFlagHelpReadsRight renders every command's help and checks each
// flag's line: its type is a type name, not a word pflag took from a
// backquoted phrase of the usage (UnquoteUsage shows the first `word` as
// the type: "--kubeconfig opzero controlplane up"), and the usage keeps its
// words.
func TestFlagHelpReadsRight(t *testing.T) {
	var walk func(*cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		var help bytes.Buffer
		c.SetOut(&help)
		c.SetErr(&help)
		if err := c.Help(); err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		text := strings.Join(strings.Fields(help.String()), " ") // the usage is wrapped
		check := func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			n++
			typ, usage := pflag.UnquoteUsage(f)
			if !flagTypes[typ] {
				t.Errorf("%s --%s: help shows type %q (a backquoted word of its usage?): %q", c.CommandPath(), f.Name, typ, f.Usage)
			}
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage has a backquote, which pflag turns into the type: %q", c.CommandPath(), f.Name, f.Usage)
			}
			line := "--" + f.Name
			if typ != "" {
				line += " " + typ
			}
			if !strings.Contains(text, line) || !strings.Contains(text, strings.Join(strings.Fields(usage), " ")) {
				t.Errorf("%s: help does not show %q with %q:\n%s", c.CommandPath(), line, usage, text)
			}
		}
		c.LocalFlags().VisitAll(check)
		c.InheritedFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if n < 30 {
		t.Fatalf("checked %d flags; the walk missed commands", n)
	}
}

// TestBackquoteWouldBeCaught: the check above is not vacuous.
func TestBackquoteWouldBeCaught(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("kubeconfig", "", "default the plane of `opzero controlplane up`")
	typ, _ := pflag.UnquoteUsage(fs.Lookup("kubeconfig"))
	if flagTypes[typ] {
		t.Fatalf("type %q passed", typ)
	}
}

// statedDefault finds a default written into a flag's usage, "(default
// X)" or "; default: X": pflag appends "(default <DefValue>)" itself, so a
// default the usage states by hand is the one that can disagree with the
// flag.
var statedDefault = regexp.MustCompile(`[(;]\s*default:?\s+([^;,)]+)`)

// TestHelpDefaultsMatchFlags: every default -h states is the one the code
// has. pflag prints "(default X)" from the flag's own default, so that part
// cannot lie; what can is written by hand:
//
//   - a default stated in a flag's usage: either symbolic (it names where
//     the value comes from: $KUBECONFIG, opzero:<namespace>:<name>, "the
//     working directory") or equal to the flag's default;
//   - a figure of a command's help that stands for a value in the code
//     (helpClaims): the scale-to-zero period opzero dev plays, the build
//     times opzero install quotes;
//   - every version a help text names (a pinned module's, or
//     controller-gen's), and every set opzero install knows in its usage
//     line and long text.
func TestHelpDefaultsMatchFlags(t *testing.T) {
	helps := map[string]string{}
	checked := 0
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		var help bytes.Buffer
		c.SetOut(&help)
		c.SetErr(&help)
		if err := c.Help(); err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		helps[c.CommandPath()] = strings.Join(strings.Fields(help.String()), " ") // unwrapped
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			for _, m := range statedDefault.FindAllStringSubmatch(f.Usage, -1) {
				checked++
				if err := sameDefault(f, strings.TrimSpace(m[1])); err != nil {
					t.Errorf("%s --%s: %v (usage %q)", c.CommandPath(), f.Name, err, f.Usage)
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if checked < 10 {
		t.Fatalf("checked %d stated defaults; the walk missed flags", checked)
	}

	for _, c := range helpClaims {
		text, ok := helps[c.cmd]
		if !ok {
			t.Errorf("no command %q", c.cmd)
			continue
		}
		ms := regexp.MustCompile(c.re).FindAllStringSubmatch(text, -1)
		if len(ms) == 0 {
			t.Errorf("%s -h no longer says %q: change helpClaims with the text", c.cmd, c.re)
		}
		want := c.want(t)
		for _, m := range ms {
			if m[1] != want {
				t.Errorf("%s -h says %q where the code has %s", c.cmd, m[0], want)
			}
		}
	}

	pins := pinnedVersions(t)
	version := regexp.MustCompile(`\bv\d+\.\d+\.\d+\b`)
	for cmd, text := range helps {
		for _, v := range version.FindAllString(text, -1) {
			if !pins[v] {
				t.Errorf("%s -h names %s, which no pinned module requires (nor is it controller-gen's %s)", cmd, v, controllergen.Version)
			}
		}
	}

	install := helps["opzero install"]
	for _, set := range pinned.Sets {
		if !regexp.MustCompile(`(?s)Usage:.*\b`+set+`\b`).MatchString(install) ||
			!regexp.MustCompile(`The\s+`+set+`\s+set`).MatchString(install) && set != "controlplane" && set != "knative" {
			t.Errorf("opzero install -h does not name the set %s in its usage line and its text", set)
		}
	}
}

// helpClaims are the figures of help texts that stand for a value in the
// code: the text matched by re, its group 1 compared with want.
var helpClaims = []struct {
	cmd, re string
	want    func(t *testing.T) string
}{
	{"opzero dev", `window annotation, else (\S+)`, func(*testing.T) string { return seconds(dev.DefaultIdle) }},
	{"opzero manifests", `Knative's defaults, (\S+) or more`, func(*testing.T) string { return seconds(dev.DefaultIdle) }},
	{"opzero install", `about (\d+) minutes for the control plane`, buildMinutes("controlplane")},
	{"opzero install", `(\d+) for\s+Knative's adapters`, buildMinutes("knative")},
	{"opzero install", `(\d+) for\s+otelcol`, buildMinutes("otelcol")},
	{"opzero install", `(\d+) for\s+the\s+cluster\s+set`, buildMinutes("cluster")},
	{"opzero install", `(\d+) for\s+knative-cluster`, buildMinutes("knative-cluster")},
	{"opzero cluster up", `knative-cluster\s+set:\s+about\s+(\d+)\s+minutes`, buildMinutes("knative-cluster")},
}

// seconds writes d as help texts do: 60s, not 1m0s.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s" }

func buildMinutes(set string) func(t *testing.T) string {
	return func(t *testing.T) string {
		m, err := pinned.BuildMinutes(set)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(m)
	}
}

// sameDefault says whether stated, a default written in f's usage, is f's
// default: a symbolic one (a variable, a placeholder, or words saying where
// the value comes from) passes, and so does any where the flag's own is its
// type's zero value (the default is computed when the flag is read, as
// --idle's 0: the hub's 1m); a value must equal the flag's.
func sameDefault(f *pflag.Flag, stated string) error {
	first := strings.Fields(stated)[0]
	switch {
	case slices.Contains([]string{"", "0", "0s", "false", "[]"}, f.DefValue):
		return nil
	case strings.HasPrefix(stated, "$") || strings.Contains(stated, "<"):
		return nil
	case slices.Contains([]string{"the", "a", "an", "not", "all", "every", "none"}, first):
		return nil
	}
	v := strings.Trim(first, `"'`)
	same := v == f.DefValue
	switch f.Value.Type() {
	case "duration":
		a, errA := time.ParseDuration(v)
		b, errB := time.ParseDuration(f.DefValue)
		same = errA == nil && errB == nil && a == b
	case "int", "uint", "float64":
		a, errA := strconv.ParseFloat(v, 64)
		b, errB := strconv.ParseFloat(f.DefValue, 64)
		same = errA == nil && errB == nil && a == b
	}
	if !same {
		return fmt.Errorf("-h states the default %q, the flag's is %q", v, f.DefValue)
	}
	return nil
}

// pinnedVersions are the versions the pinned modules require, and
// controller-gen's.
func pinnedVersions(t *testing.T) map[string]bool {
	files, err := filepath.Glob("../../internal/devenv/pinned/modules/*/go.mod.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("the pinned modules' go.mod files: %v %v", files, err)
	}
	vs := map[string]bool{controllergen.Version: true}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range regexp.MustCompile(`\sv\d+\.\d+\.\d+\b`).FindAllString(string(b), -1) {
			vs[strings.TrimSpace(v)] = true
		}
	}
	return vs
}
