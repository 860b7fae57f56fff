package clihelp_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/opzero/opzero/internal/clihelp"
)

// TestAliasSetsTheFlagAndIsHidden: an old name sets what the new one
// sets, on the standard flag set and through PFlags (bools without a
// value too), and help shows only the new name; flag.Func shows as a
// string, not pflag's "func".
func TestAliasSetsTheFlagAndIsHidden(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	addr := fs.String("health-addr", "", "where health is served")
	on := fs.Bool("early", false, "send early")
	var mode string
	fs.Func("mode", "how to run", func(s string) error { mode = s; return nil })
	clihelp.Alias(fs, "health-probe-addr", "health-addr")
	clihelp.Alias(fs, "early-delivery", "early")
	if err := fs.Parse([]string{"--health-probe-addr=:1", "--early-delivery", "--mode=m"}); err != nil {
		t.Fatal(err)
	}
	if *addr != ":1" || !*on || mode != "m" {
		t.Errorf("standard: addr %q, early %v, mode %q", *addr, *on, mode)
	}
	if of, ok := clihelp.AliasOf(fs.Lookup("health-probe-addr")); !ok || of != "health-addr" {
		t.Errorf("AliasOf = %q, %v", of, ok)
	}

	p := clihelp.PFlags(fs)
	if err := p.Parse([]string{"--health-probe-addr", ":2", "--early-delivery=false"}); err != nil {
		t.Fatal(err)
	}
	if *addr != ":2" || *on {
		t.Errorf("pflag: addr %q, early %v", *addr, *on)
	}
	var help bytes.Buffer
	clihelp.Print(&help, fs)
	h := help.String()
	if strings.Contains(h, "health-probe-addr") || strings.Contains(h, "early-delivery") ||
		!strings.Contains(h, "      --health-addr string\n") || !strings.Contains(h, "      --mode string\n") || !strings.Contains(h, "      --early\n") {
		t.Errorf("help:\n%s", h)
	}
}

// TestHideAliasesOnlyForTheFlagPackagesUsage: a flag set's default Usage
// is replaced by one that leaves aliases out; a program's own is kept.
func TestHideAliasesOnlyForTheFlagPackagesUsage(t *testing.T) {
	fs := flag.NewFlagSet("op", flag.ContinueOnError)
	fs.String("health-addr", "", "where health is served")
	clihelp.Alias(fs, "health-probe-addr", "health-addr")
	clihelp.HideAliases(fs)
	var out bytes.Buffer
	fs.SetOutput(&out)
	if err := fs.Parse([]string{"-h"}); err != flag.ErrHelp {
		t.Fatal(err)
	}
	if h := out.String(); !strings.HasPrefix(h, "Usage of op:\n      --health-addr string") || strings.Contains(h, "probe") {
		t.Errorf("help:\n%s", h)
	}

	own := flag.NewFlagSet("op", flag.ContinueOnError)
	called := false
	own.Usage = func() { called = true }
	clihelp.HideAliases(own)
	own.SetOutput(&out)
	_ = own.Parse([]string{"-h"})
	if !called {
		t.Error("the program's own Usage was replaced")
	}
}

// TestFlagUsagesWrap: a flag's usage and default go under its name,
// wrapped to Width; a word longer than a line stays whole; a computed
// default is the one Get gives until the flag is set (even to "").
func TestFlagUsagesWrap(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Duration("recheck", 5*time.Minute, strings.Repeat("how often it checks again ", 6))
	fs.String("url", "", "https://"+strings.Repeat("x", 90))
	h := clihelp.FlagUsages(fs)
	for _, line := range strings.Split(strings.TrimSuffix(h, "\n"), "\n") {
		if len(line) > clihelp.Width && strings.Contains(strings.TrimSpace(line), " ") {
			t.Errorf("a line of %d columns: %q", len(line), line)
		}
	}
	if !strings.Contains(h, "      --recheck duration\n        how often") || !strings.Contains(h, "(default 5m0s)") {
		t.Errorf("help:\n%s", h)
	}

	std := flag.NewFlagSet("x", flag.ContinueOnError)
	ns := "env"
	c := clihelp.NewComputed(std, "lease-namespace", func() string { return ns }, "where (default $POD_NAMESPACE)")
	if c.Get() != "env" {
		t.Errorf("unset: %q", c.Get())
	}
	if err := std.Parse([]string{"--lease-namespace="}); err != nil || c.Get() != "" {
		t.Errorf("set to empty: %q, %v", c.Get(), err)
	}
	if f := clihelp.PFlag(std.Lookup("lease-namespace")); f.Value.Type() != "string" || f.DefValue != "" {
		t.Errorf("type %q, default %q", f.Value.Type(), f.DefValue)
	}
}
