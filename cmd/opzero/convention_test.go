package main

import (
	"bytes"
	"flag"
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

	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/hub/hubcmd"
	"github.com/opzero/opzero/internal/metacontroller"
	"github.com/opzero/opzero/internal/wakeup/sourcecmd"
	"github.com/opzero/opzero/operator"
)

// A site is one flag of one of opzero's command lines: binary is opzero
// (the CLI), operator (operator.Options.BindFlags), opzero-hub,
// wakeup-source or opzero-metacontroller (every binary under cmd/); cmd
// is the command (the binary's name but for the CLI).
type site struct {
	binary, cmd string
	f           *pflag.Flag
}

func (s site) String() string { return s.cmd + " --" + s.f.Name }

// commandLines are the flags of every opzero command line and each
// command's help as printed.
func commandLines(t *testing.T) (flags []site, helps map[string]string) {
	t.Helper()
	helps = map[string]string{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		var help bytes.Buffer
		c.SetOut(&help)
		c.SetErr(&help)
		if err := c.Help(); err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		helps[c.CommandPath()] = help.String()
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				flags = append(flags, site{"opzero", c.CommandPath(), f})
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if help, ok := helps["opzero manifests"]; ok {
		helps["opzero manifests --help-files"] = help + manifestsFiles
	}

	std := func(binary string, bind func(*flag.FlagSet)) {
		fs := flag.NewFlagSet(binary, flag.ContinueOnError)
		bind(fs)
		p := clihelp.PFlags(fs)
		p.VisitAll(func(f *pflag.Flag) { flags = append(flags, site{binary, binary, f}) })
		helps[binary] = clihelp.FlagUsages(p)
	}
	std("operator", func(fs *flag.FlagSet) { new(operator.Options).BindFlags(fs) })
	std("opzero-hub", func(fs *flag.FlagSet) { new(hubcmd.Flags).Bind(fs) })
	std("wakeup-source", func(fs *flag.FlagSet) { new(sourcecmd.Flags).Bind(fs) })
	std("opzero-metacontroller", func(fs *flag.FlagSet) { new(metacontroller.Flags).Bind(fs) })
	// opzero-metacontroller's -help is its own (Bind sets it): its head too
	fs := flag.NewFlagSet("opzero-metacontroller", flag.ContinueOnError)
	new(metacontroller.Flags).Bind(fs)
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.Usage()
	helps["opzero-metacontroller -help"] = help.String()
	return flags, helps
}

// sameIdea are flags of different command lines that mean one thing: the
// name of each must be the first's (or end with it: the hub's
// --webhook-max-in-flight is the operator's --max-in-flight for its
// webhooks). A rename of one alone fails.
var sameIdea = []struct {
	idea  string
	sites []string // "<cmd> --<flag>"
}{
	{"where health (and the always-on processes' metrics) are served",
		[]string{"operator --health-addr", "opzero-metacontroller --health-addr", "opzero-hub --health-addr", "wakeup-source --health-addr", "opzero hub run --health-addr", "opzero wakeup-source --health-addr"}},
	{"this instance's name in the Leases it holds",
		[]string{"operator --instance-id", "opzero-metacontroller --instance-id", "opzero-hub --instance-id", "opzero hub run --instance-id"}},
	{"requests handled at once, more answered 429",
		[]string{"operator --max-in-flight", "opzero-metacontroller --max-in-flight", "opzero-hub --webhook-max-in-flight"}},
	{"how long an idle operator keeps running before it goes to zero",
		[]string{"opzero manifests --idle", "opzero dev --idle", "opzero hub adopt --idle"}},
	{"the service account whose tokens are sent",
		[]string{"opzero-hub --service-account", "wakeup-source --service-account"}},
	{"the OIDC audience",
		[]string{"operator --audience", "opzero manifests --audience", "wakeup-source --audience"}},
	{"the kubeconfig of the cluster to use",
		[]string{"opzero dev --kubeconfig", "opzero hub adopt --kubeconfig", "opzero-metacontroller --kubeconfig"}},
	{"where Prometheus metrics are served", []string{"operator --metrics-addr"}},
}

// synonyms are names for an idea that one of the names above already has
// (or the -addr suffix of every listen address): a flag named so, shown in
// help, is a second name; keep it only as a hidden alias.
var synonyms = []struct {
	re, want string
}{
	{`^(health-probe-addr|probe-addr|healthz-addr|health-address|health-probe-bind-address)$`, "health-addr"},
	{`^(replica-id|replica-name|pod-name|identity|holder-identity)$`, "instance-id"},
	{`(^|-)(in-flight|max-inflight|inflight|max-requests)$`, "max-in-flight"},
	{`^(idle-after|idle-timeout|scale-down-delay|idle-period)$`, "idle"},
	{`^(sa|serviceaccount|service-account-name)$`, "service-account"},
	{`^(kube-config|kubeconfig-path)$`, "kubeconfig"},
	{`^metrics-(bind-)?address$`, "metrics-addr"},
	{`-(bind-address|listen|listen-address|port-addr)$`, "<thing>-addr"},
}

// TestFlagConvention keeps the one convention of opzero's command lines
// (package clihelp): one name per idea, the same name with one type;
// old names hidden aliases of a flag that is shown; each default stated
// once, as "(default X)" at the end; every line of help within
// clihelp.Width columns but commands to type and a word longer than a line.
func TestFlagConvention(t *testing.T) {
	flags, helps := commandLines(t)
	if len(flags) < 80 || len(helps) < 20 {
		t.Fatalf("found %d flags in %d helps: the walk missed command lines", len(flags), len(helps))
	}
	for _, err := range conventionErrors(flags, helps) {
		t.Error(err)
	}
	// every binary of cmd/ is one of the command lines checked
	covered := map[string]bool{}
	for _, s := range flags {
		covered[s.binary] = true
	}
	dirs, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !covered[d.Name()] {
			t.Errorf("cmd/%s: a binary whose flags commandLines does not check: add it", d.Name())
		}
	}
}

// conventionErrors says what in flags and helps breaks the convention.
func conventionErrors(flags []site, helps map[string]string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	at := map[string]site{}
	byName := map[string][]site{}
	for _, s := range flags {
		at[s.String()] = s
		if !s.f.Hidden {
			byName[s.f.Name] = append(byName[s.f.Name], s)
		}
	}

	for _, idea := range sameIdea {
		want := strings.TrimPrefix(idea.sites[0][strings.LastIndex(idea.sites[0], " --"):], " --")
		for _, where := range idea.sites {
			cmd, name, _ := strings.Cut(where, " --")
			if s, ok := at[where]; !ok || s.f.Hidden {
				bad("%s: no flag --%s shown for %s (named otherwise? name it --%s, the old name a hidden alias)", cmd, name, idea.idea, want)
			} else if !strings.HasSuffix(s.f.Name, want) {
				bad("%s: %s is --%s here but --%s in %s", cmd, idea.idea, s.f.Name, want, idea.sites[0])
			}
		}
	}

	for _, s := range flags {
		if s.f.Hidden {
			of, ok := clihelp.PAliasOf(s.f)
			target, shown := at[s.cmd+" --"+of]
			switch {
			case !ok:
				bad("%s: hidden, but not an old name of a flag (clihelp.Alias, clihelp.PAlias)", s)
			case !shown || target.f.Hidden:
				bad("%s: the old name of --%s, which %s does not show", s, of, s.cmd)
			case fmt.Sprintf("%p", unwrap(s.f.Value)) != fmt.Sprintf("%p", unwrap(target.f.Value)):
				bad("%s: the old name of --%s sets another value", s, of)
			}
			continue
		}
		for _, syn := range synonyms {
			if regexp.MustCompile(syn.re).MatchString(s.f.Name) && !strings.HasSuffix(s.f.Name, syn.want) {
				bad("%s: a second name for what opzero names --%s: rename it, keeping this name as a hidden alias", s, syn.want)
			}
		}
		errs = append(errs, usageErrors(s)...)
	}

	for name, sites := range byName {
		short := map[string]string{} // shorthand: where (the CLI's commands)
		for _, s := range sites {
			if _, std := s.f.Value.(interface{ Unwrap() flag.Value }); s.binary == "opzero" && !std { // a standard flag set has none
				short[s.f.Shorthand] = s.cmd
			}
		}
		for _, s := range sites[1:] {
			if kind(s.f) != kind(sites[0].f) {
				bad("--%s is a %s in %s and a %s in %s: one name, one meaning", name, sites[0].f.Value.Type(), sites[0].cmd, s.f.Value.Type(), s.cmd)
			}
		}
		if len(short) > 1 {
			var where []string
			for sh, cmd := range short {
				where = append(where, fmt.Sprintf("%q in %s", sh, cmd))
			}
			slices.Sort(where)
			bad("--%s has shorthands %s: one name, one shorthand", name, strings.Join(where, ", "))
		}
	}

	for cmd, help := range helps {
		if err := widthError(help); err != nil {
			bad("%s: %v", cmd, err)
		}
	}
	return errs
}

// kind is the kind of value f takes: text for a string (one or
// repeatable), else its type.
func kind(f *pflag.Flag) string {
	switch t := f.Value.Type(); t {
	case "string", "stringArray", "strings":
		return "text"
	default:
		return t
	}
}

// unwrap is the Value behind clihelp's adapters of standard flags.
func unwrap(v any) any {
	for {
		u, ok := v.(interface{ Unwrap() flag.Value })
		if !ok {
			return v
		}
		v = u.Unwrap()
	}
}

// handDefault is a default written into a usage, in the one form.
var handDefault = regexp.MustCompile(`\(default ([^)]*(?:\([^)]*\)[^)]*)*)\)$`)

// usageErrors says how s's usage breaks the convention: a default stated
// twice (by hand and by the flag library, which states a non-zero
// default itself) or in another form ("default: X", "; default X", "(the
// default)", "(default X)" before the end), or a usage ending in a period.
func usageErrors(s site) []error {
	var errs []error
	u := s.f.Usage
	if strings.HasSuffix(u, ".") {
		errs = append(errs, fmt.Errorf("%s: usage ends with a period: %q", s, u))
	}
	hand := handDefault.FindStringSubmatch(u)
	if hand != nil && !zero(s.f) {
		errs = append(errs, fmt.Errorf("%s: default stated twice: by hand (%s) and by the flag library (%s)", s, hand[0], s.f.DefValue))
	}
	rest := u
	if hand != nil {
		rest = strings.TrimSuffix(u, hand[0])
	}
	if m := regexp.MustCompile(`(?i)\bdefault:|[;,]\s*default\b|\(default\b|\bthe default\)|, the default\b|\(the default`).FindString(rest); m != "" {
		errs = append(errs, fmt.Errorf("%s: a default stated as %q: state it once, as \"(default X)\" at the end: %q", s, m, u))
	}
	return errs
}

// zero says whether f's default is its type's zero value, which the flag
// libraries do not print.
func zero(f *pflag.Flag) bool {
	return slices.Contains([]string{"", "0", "0s", "false", "[]", "<nil>"}, f.DefValue)
}

// widthError finds a line of help wider than clihelp.Width, but those of
// the Usage and Examples sections (commands, typed as they are) and a
// single word longer than a line.
func widthError(help string) error {
	section := ""
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			section = line
		}
		if len(line) <= clihelp.Width || section == "Usage:" || section == "Examples:" || section == "Example:" ||
			!strings.Contains(strings.TrimSpace(line), " ") {
			continue
		}
		return fmt.Errorf("a line of %d columns (at most %d): %q", len(line), clihelp.Width, line)
	}
	return nil
}

// TestFlagConventionCatches: the convention test fails on what it is
// for: a second name for an idea, a rename in one binary only, an alias
// shown or of nothing, a default stated twice or in another form, a
// line too wide.
func TestFlagConventionCatches(t *testing.T) {
	flags, helps := commandLines(t)
	if errs := conventionErrors(flags, helps); len(errs) > 0 {
		t.Fatalf("the command lines break the convention already: %v", errs)
	}
	add := func(binary, cmd string, f *pflag.Flag) []site {
		return append(slices.Clip(flags), site{binary, cmd, f})
	}
	str := func(name, def, usage string) *pflag.Flag {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		fs.String(name, def, usage)
		return fs.Lookup(name)
	}
	renamed := func(where, name string) []site {
		out := slices.Clone(flags)
		for i, s := range out {
			if s.String() == where {
				f := *s.f
				f.Name = name
				out[i].f = &f
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		flags []site
		helps map[string]string
		want  string
	}{
		{"a second name for an idea", add("opzero", "opzero dev", str("health-probe-addr", "", "where probes are served")), helps, "a second name for what opzero names --health-addr"},
		{"a listen address not -addr", add("opzero-hub", "opzero-hub", str("events-bind-address", "", "where events are taken")), helps, "--<thing>-addr"},
		{"renamed in one binary", renamed("opzero-hub --instance-id", "holder"), helps, "no flag --instance-id shown"},
		{"renamed in opzero-metacontroller", renamed("opzero-metacontroller --kubeconfig", "kube-config"), helps, "no flag --kubeconfig shown"},
		{"an alias shown", add("opzero", "opzero dev", str("idle-after", "", "old name of --idle")), helps, "a second name for what opzero names --idle"},
		{"an alias of nothing", add("opzero", "opzero dev", func() *pflag.Flag { f := str("x", "", "old name of --nothing"); f.Hidden = true; return f }()), helps, "does not show"},
		{"a default twice", add("opzero", "opzero dev", str("y", "a", "the y (default a)")), helps, "default stated twice"},
		{"a default with a colon", add("opzero", "opzero dev", str("y", "", "the y (default: a)")), helps, `"(default X)" at the end`},
		{"a default mid-usage", add("opzero", "opzero dev", str("y", "", "the y (default a); more")), helps, `"(default X)" at the end`},
		{"a usage with a period", add("opzero", "opzero dev", str("y", "", "The y.")), helps, "ends with a period"},
		{"the same name, another type", add("opzero", "opzero dev", func() *pflag.Flag {
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			fs.String("buckets", "", "which ones") // the hub's is an int
			return fs.Lookup("buckets")
		}()), helps, "one name, one meaning"},
		{"a shorthand missing", add("opzero", "opzero x", str("kustomize", "", "a folder")), helps, "one name, one shorthand"},
		{"a line too wide", flags, map[string]string{"opzero x": "Flags:\n  " + strings.Repeat("word ", 20)}, "a line of"},
	} {
		errs := conventionErrors(tc.flags, tc.helps)
		if !strings.Contains(fmt.Sprint(errs), tc.want) {
			t.Errorf("%s: errors %v, want one saying %q", tc.name, errs, tc.want)
		}
	}
}

// flagToken is a flag as the book quotes it, in backquotes: `--name`,
// `--name=VALUE`, `--name VALUE` or a shorthand `-o VALUE`.
var flagToken = regexp.MustCompile("`(?:--([a-z][a-z0-9-]*)|-([a-zA-Z]))(?:[= ]([^`]*))?`")

// value is a default as the book writes it: in backquotes, or a word
// (a number, a duration, $VAR, :8082, a name).
const value = "(`[^`]+`|\\d[\\d.]* ?(?:ms|s|min|m|h)\\b|[$:]?[\\w<][\\w.:/$<>-]*)"

// The forms in which the book states a flag's default, read in the
// clause after the flag (up to the next flag or the sentence's end), or,
// for byDefaultBefore, just before it:
var (
	theDefault      = regexp.MustCompile(`^\s*\(the default\b`)                                    // `--mode=serverless` (the default)
	valueThen       = regexp.MustCompile(`^:\s*` + value + `\s*\(the default\b`)                   // `--webhook-certs`: `secret` (the default, ...)
	defaultIs       = regexp.MustCompile(`(?:^|[(,;]|\s)default:?\s+(?:is\s+)?` + value)           // `--x` (default 30s), `--x`, default `:8082`
	byDefault       = regexp.MustCompile(`(?:^|[(,;:]|\s)` + value + `\s+by default\b`)            // `--x` (8 by default), (off by default)
	bare            = regexp.MustCompile(`^\s*[(,]\s*(\d[\d.]*(?: ?(?:ms|s|min|m|h))?)\s*[);]`)    // `--rounds` (3), `--timeout` (30 s; ...): a number alone is the default
	defaultsTo      = regexp.MustCompile(`^\s*(?:\([^)]*\)\s*)?defaults to\s+` + value)            // `--x` defaults to 1s
	byDefaultBefore = regexp.MustCompile(`(?i)\bby default,? \($|\bby default,? $|\bdefault is $`) // By default (`--webhooks=hub`, ...)
	defaultBefore   = regexp.MustCompile(`\((\d[\w.]*), $`)                                        // (32, `--webhook-max-in-flight`; ...)
	mentionsDefault = regexp.MustCompile(`\bdefaults?\b`)
)

// unread are the clauses after a flag that speak of a default that is
// not the flag's value (the page's own wording, checked by reading): a
// clause that names a default in no form above fails the test, so that
// a new wording is either read or listed here.
var unread = []string{
	"recorded on the Leases it holds; the default in a pod", // --advertise-address: the default is the pod's address (scale-out.md states it)
	"the default wiring", "the default build", "leaves opzero's setting at its default",
	"controller-runtime's default folder",           // --mode=webhooks: where the certificate is mounted
	"a test keeps the defaults they state equal to", // contributing.md on -h: this test
}

// valueLike says whether w, the word taken as a default, is a value
// rather than prose ("the default wiring", "default the pod IP").
func valueLike(w string) bool {
	return strings.HasPrefix(w, "`") || strings.HasPrefix(w, "$") || strings.HasPrefix(w, ":") ||
		regexp.MustCompile(`^\d`).MatchString(w) || slices.Contains([]string{"true", "false", "off", "on", "none"}, w)
}

// TestBookDefaultsMatchHelp: every default the README and the pages of
// docs/ state for a flag (in prose, in any of the forms above, or in a
// table with a default column) is the one --help states (by hand, or the
// flag library from the flag's default), of a flag of that name of some
// opzero command line (every binary of cmd/ and the operator's flags):
// changing a default without the page fails, and so does a default
// stated in a form the test does not read.
func TestBookDefaultsMatchHelp(t *testing.T) {
	flags, _ := commandLines(t)
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md")
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		found, unreadable := bookDefaults(string(b))
		for _, u := range unreadable {
			t.Errorf("%s: %q speaks of a default in a form TestBookDefaultsMatchHelp does not read: write it as \"`--flag` (default X)\", or list it in unread", filepath.Base(page), u)
		}
		for _, c := range found {
			checked++
			t.Logf("%s: --%s default %q (%q)", filepath.Base(page), c.flag, c.value, c.text)
			if err := defaultInHelp(flags, c.flag, c.value); err != nil {
				t.Errorf("%s: %q: %v", filepath.Base(page), c.text, err)
			}
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d stated defaults: the pages' wording changed? see bookDefaults", checked)
	}
}

// TestBookDefaultsCatches: the book's defaults test fails on a page whose
// default differs from --help, in each form the book uses, and on a
// default it cannot read.
func TestBookDefaultsCatches(t *testing.T) {
	flags, _ := commandLines(t)
	for _, tc := range []struct {
		page       string
		flag, want string // the default read
		match      bool   // whether --help agrees
	}{
		{"`--lease-keep-idle` (default 1s)", "lease-keep-idle", "1s", true},
		{"`--lease-keep-idle` (default 2s)", "lease-keep-idle", "2s", false},
		{"`--lease-keep-idle` (default 2 s)", "lease-keep-idle", "2 s", false},
		{"its `--max-concurrent-reconciles` (9 by default).", "max-concurrent-reconciles", "9", false},
		{"`--events-addr`, default `:8083`", "events-addr", ":8083", false},
		{"- `--mode=classic` (the default): a Deployment", "mode", "classic", false},
		{"`-o dir` (the default) writes", "o", "dir", false},
		{"`-o -` (the default) writes", "o", "-", true},
		{"the certificate, `--webhook-certs`: `cert-manager` (the default, ...)", "webhook-certs", "cert-manager", false},
		{"By default (`--webhooks=always-on`, serverless) they", "webhooks", "always-on", false},
		{"`--backoff-cap` defaults to 10m.", "backoff-cap", "10m", false},
		{"`--metrics-addr=:9090` serves them (on by default in serverless mode).", "metrics-addr", "on", false},
		{"`--metrics-addr=:9090` serves them (off by default in serverless mode).", "metrics-addr", "off", true},
		{"(33, `--webhook-max-in-flight`; more get 429)", "webhook-max-in-flight", "33", false},
		{"the hub's `--buckets` and\n`--flush` (default\n3s) span lines", "flush", "3s", false},
		{"| flag | default |\n|---|---|\n| `--retry` | 6 |", "retry", "6", false},
		{"| flag | default |\n|---|---|\n| `--retry` | 5 |", "retry", "5", true},
		{"`--instance-id` (default `$POD_NAME`, else the host name)", "instance-id", "$POD_NAME", true},
		{"`--cold-start-delay` (default 1s: the local process start)", "cold-start-delay", "1s", false},
		{"up to `--rounds` (4), reading", "rounds", "4", false},
		{"within `--timeout` (30 s; it is left behind)", "timeout", "30 s", true},
		{"renewed every third of `--lease-duration`, 16 s) while", "lease-duration", "16 s", false},
	} {
		found, unreadable := bookDefaults(tc.page)
		if len(found) != 1 || len(unreadable) > 0 || found[0].flag != tc.flag || found[0].value != tc.want {
			t.Errorf("%q: read %v (unreadable %q), want --%s default %q", tc.page, found, unreadable, tc.flag, tc.want)
			continue
		}
		if err := defaultInHelp(flags, tc.flag, tc.want); (err == nil) != tc.match {
			t.Errorf("%q: against --help: %v, want agreeing %v", tc.page, err, tc.match)
		}
	}
	if _, unreadable := bookDefaults("`--idle` keeps the default of Knative"); len(unreadable) != 1 {
		t.Errorf("a default in a form it does not read: unreadable %q, want it", unreadable)
	}
	if found, unreadable := bookDefaults("```sh\nopzero dev `--idle` (default 9s)\n```\n"); len(found)+len(unreadable) > 0 {
		t.Errorf("a fenced block is not prose: read %v, %q", found, unreadable)
	}
}

type bookDefault struct{ flag, value, text string }

// bookDefaults are the defaults text states for flags, paragraph by
// paragraph (a sentence may span lines) and table cell by cell, and in
// tables with a default column; fenced blocks are left out. unreadable
// are the clauses after a flag that speak of a default in no form it
// reads (and not listed in unread).
func bookDefaults(text string) (found []bookDefault, unreadable []string) {
	var paras []string
	fenced := false
	var para []string
	flush := func() {
		if p := strings.Join(strings.Fields(strings.Join(para, " ")), " "); p != "" {
			paras = append(paras, p)
		}
		para = nil
	}
	defaultCol, flagCol := -1, -1 // of the table being read
	cells := func(row string) []string {
		c := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		return c
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			fenced = !fenced
			flush()
		case fenced:
		case strings.HasPrefix(trimmed, "|"):
			flush()
			row := cells(trimmed)
			switch {
			case regexp.MustCompile(`^\|[-:| ]+\|$`).MatchString(trimmed):
			case defaultCol < 0 && flagCol < 0 && !strings.Contains(trimmed, "`"): // a header
				for i, c := range row {
					if regexp.MustCompile(`(?i)^defaults?$`).MatchString(c) {
						defaultCol = i
					}
				}
				flagCol = 0
			default:
				if defaultCol >= 0 && defaultCol < len(row) {
					if m := flagToken.FindStringSubmatch(row[flagCol]); m != nil && m[3] == "" {
						found = append(found, bookDefault{m[1] + m[2], strings.Trim(row[defaultCol], "`"), trimmed})
						continue
					}
				}
				paras = append(paras, row...)
			}
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			flush()
			defaultCol, flagCol = -1, -1
		default:
			para = append(para, line)
		}
	}
	flush()
	for _, p := range paras {
		f, u := paraDefaults(p)
		found, unreadable = append(found, f...), append(unreadable, u...)
	}
	return found, unreadable
}

// paraDefaults are the defaults one paragraph states, each read from the
// clause after a flag (up to the next flag or the end of the sentence,
// at most 90 characters) or the words just before it.
func paraDefaults(p string) (found []bookDefault, unreadable []string) {
	toks := flagToken.FindAllStringSubmatchIndex(p, -1)
	for i, at := range toks {
		group := func(g int) string {
			if at[2*g] < 0 {
				return ""
			}
			return p[at[2*g]:at[2*g+1]]
		}
		name, tokValue := group(1)+group(2), group(3)
		end := len(p)
		if i+1 < len(toks) {
			end = toks[i+1][0]
		}
		clause := p[at[1]:end]
		if j := regexp.MustCompile(`\.(\s|$)`).FindStringIndex(clause); j != nil {
			clause = clause[:j[0]]
		}
		if len(clause) > 90 {
			clause = clause[:90]
		}
		before := p[max(0, at[0]-20):at[0]]
		text := strings.TrimSpace(p[max(0, at[0]-12):at[1]] + clause)
		add := func(v string) {
			found = append(found, bookDefault{name, strings.TrimRight(strings.Trim(v, "`"), ":;,"), text})
		}
		switch m := []string(nil); {
		case tokValue != "" && (theDefault.MatchString(clause) || byDefaultBefore.MatchString(before)):
			add(tokValue)
		case defaultBefore.MatchString(before):
			add(defaultBefore.FindStringSubmatch(before)[1])
		case tokValue == "" && valueThen.MatchString(clause):
			add(valueThen.FindStringSubmatch(clause)[1])
		case tokValue == "" && func() bool { m = defaultsTo.FindStringSubmatch(clause); return m != nil }():
			add(m[1])
		case func() bool { m = defaultIs.FindStringSubmatch(clause); return m != nil && valueLike(m[1]) }():
			add(m[1])
		case func() bool { m = byDefault.FindStringSubmatch(clause); return m != nil && valueLike(m[1]) }():
			add(m[1])
		case tokValue == "" && bare.MatchString(clause):
			add(bare.FindStringSubmatch(clause)[1])
		case mentionsDefault.MatchString(clause) && !slices.ContainsFunc(unread, func(u string) bool { return strings.Contains(clause, u) }):
			unreadable = append(unreadable, text)
		}
	}
	return found, unreadable
}

// defaultInHelp says whether value is the default --help states for a
// flag named name (or with that shorthand) of some command line.
func defaultInHelp(flags []site, name, value string) error {
	var seen []string
	for _, s := range flags {
		if (s.f.Name != name && (len(name) != 1 || s.f.Shorthand != name)) || s.f.Hidden {
			continue
		}
		help := s.f.DefValue
		if m := handDefault.FindStringSubmatch(s.f.Usage); m != nil && zero(s.f) {
			help = m[1]
		}
		if sameValue(value, help) {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%s: %q", s, help))
	}
	if seen == nil {
		return fmt.Errorf("no command line has a flag --%s", name)
	}
	return fmt.Errorf("the page says the default is %q; --help says %s", value, strings.Join(seen, ", "))
}

// sameValue compares a default a page states with the one help states:
// durations as durations (1 s, 1s and 1000ms agree), numbers as numbers,
// "off" as a zero value, else the help's first word (its "$POD_NAME,
// else the host name" starts with the page's $POD_NAME).
func sameValue(page, help string) bool {
	norm := func(s string) string {
		s = strings.Trim(strings.TrimSpace(s), "`\"'")
		s = regexp.MustCompile(`^(\d+(?:\.\d+)?) ?(ms|s|min|m|h)$`).ReplaceAllString(s, "$1$2")
		return strings.Replace(s, "min", "m", 1)
	}
	p, h := norm(page), norm(help)
	if p == "off" || p == "none" {
		return slices.Contains([]string{"", "0", "0s", "false", "none", "off"}, h)
	}
	if a, err := time.ParseDuration(p); err == nil {
		b, err := time.ParseDuration(h)
		if err != nil && h == "0" {
			b, err = 0, nil
		}
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(p, 64); err == nil {
		b, err := strconv.ParseFloat(strings.Fields(h + " x")[0], 64)
		return err == nil && a == b
	}
	first := strings.TrimRight(strings.Fields(h + " ")[0], ",;")
	placeholders := func(s string) string {
		return strings.ToLower(regexp.MustCompile(`\$([A-Za-z_]+)`).ReplaceAllString(s, "<$1>"))
	}
	return p == h || p == first || strings.Trim(first, `"`) == p || strings.Contains(placeholders(h), placeholders(p))
}
