package operator_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/opzero/opzero/operator"
)

// TestFlagHelpReadsRight: every flag BindFlags adds shows a type name in
// -h (the flag package shows the first `word` of a usage as the type:
// "-wakeup-sink opzero wakeup-source"), and its usage keeps its words.
func TestFlagHelpReadsRight(t *testing.T) {
	types := map[string]bool{"": true, "string": true, "int": true, "duration": true, "value": true, "uint": true, "float": true}
	var o operator.Options
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	o.BindFlags(fs)
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		typ, usage := flag.UnquoteUsage(f)
		if !types[typ] || strings.Contains(f.Usage, "`") {
			t.Errorf("-%s: -h shows type %q (a backquoted word of its usage?): %q", f.Name, typ, f.Usage)
		}
		if !strings.Contains(help.String(), usage[:min(len(usage), 40)]) {
			t.Errorf("-%s: -h does not show its usage %q", f.Name, usage)
		}
	})
	if n < 10 {
		t.Fatalf("checked %d flags", n)
	}
}

// TestBindFlagsLeavesTheProjectsOwn: in a kubebuilder project's main,
// BindFlags (called after the project's flags) adds only what the project
// does not have, so -h shows one flag per setting: the project's
// --metrics-bind-address, --health-probe-bind-address and --leader-elect,
// no opzero --metrics-addr, --health-addr, --disable-leader-election
// or --leader-election-namespace; a flag of the same name stays the
// project's (no panic).
func TestBindFlagsLeavesTheProjectsOwn(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	// kubebuilder v4's cmd/main.go, and a project flag of the same name as one of opzero's
	var metricsAddr, probeAddr, certPath, backoff string
	var leaderElect, secure, http2 bool
	fs.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	fs.BoolVar(&leaderElect, "leader-elect", false, "Enable leader election for controller manager.")
	fs.BoolVar(&secure, "metrics-secure", true, "serve metrics over HTTPS")
	fs.StringVar(&certPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	fs.BoolVar(&http2, "enable-http2", false, "enable HTTP/2")
	fs.StringVar(&backoff, "backoff-base", "project's", "the project's own flag of that name")

	var o operator.Options
	o.BindFlags(fs)
	for _, gone := range []string{"metrics-addr", "health-addr", "disable-leader-election", "leader-election-namespace"} {
		if fs.Lookup(gone) != nil {
			t.Errorf("-%s is bound next to the project's own flag for it", gone)
		}
	}
	for _, kept := range []string{"mode", "audience", "wakeup-sink", "max-concurrent-reconciles", "events-addr"} {
		if fs.Lookup(kept) == nil {
			t.Errorf("-%s is missing: the project has no flag for it", kept)
		}
	}
	if err := fs.Parse([]string{"--mode=classic", "--leader-elect", "--backoff-base=x", "--health-probe-bind-address=:9"}); err != nil {
		t.Fatal(err)
	}
	if o.Mode != operator.Classic || !leaderElect || backoff != "x" || probeAddr != ":9" || o.BackoffBase != 0 {
		t.Errorf("parsed mode %q, leader-elect %v, the project's backoff-base %q, probe %q, opzero's backoff %v",
			o.Mode, leaderElect, backoff, probeAddr, o.BackoffBase)
	}

	// Without the project's flags (an opzero main), every flag is bound.
	all := flag.NewFlagSet("operator", flag.ContinueOnError)
	var o2 operator.Options
	o2.BindFlags(all)
	for _, f := range []string{"metrics-addr", "health-addr", "disable-leader-election", "leader-election-namespace", "backoff-base"} {
		if all.Lookup(f) == nil {
			t.Errorf("an opzero main: -%s is missing", f)
		}
	}
}

// TestBindPFlagsLeavesTheProjectsOwn: a cobra/pflag project's flags are
// seen as the standard library's are: its --leader-elect, probe and
// metrics flags stand in for opzero's, which are not added; opzero's
// others are, parse in pflag's --name=value form and set the Options.
func TestBindPFlagsLeavesTheProjectsOwn(t *testing.T) {
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	var metricsAddr, probeAddr string
	var leaderElect bool
	fs.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	fs.BoolVar(&leaderElect, "leader-elect", false, "Enable leader election.")
	var o operator.Options
	o.BindPFlags(fs)
	for _, gone := range []string{"metrics-addr", "health-addr", "disable-leader-election", "leader-election-namespace"} {
		if fs.Lookup(gone) != nil {
			t.Errorf("--%s is bound next to the project's own flag for it", gone)
		}
	}
	for _, kept := range []string{"mode", "audience", "wakeup-sink", "max-concurrent-reconciles"} {
		if fs.Lookup(kept) == nil {
			t.Errorf("--%s is missing: the project has no flag for it", kept)
		}
	}
	if err := fs.Parse([]string{"--mode=classic", "--leader-elect", "--audience", "op", "--max-concurrent-reconciles=3"}); err != nil {
		t.Fatal(err)
	}
	if o.Mode != operator.Classic || o.Audience != "op" || o.MaxConcurrentReconciles != 3 || !leaderElect {
		t.Errorf("parsed mode %q, audience %q, concurrency %d, the project's leader-elect %v", o.Mode, o.Audience, o.MaxConcurrentReconciles, leaderElect)
	}
	if u := fs.FlagUsages(); !strings.Contains(u, "--wakeup-sink") || !strings.Contains(u, "--leader-elect") {
		t.Errorf("-h lists:\n%s\nwant the project's flags and opzero's", u)
	}
}

// TestOldFlagNamesStillWork: a flag's old name (--health-probe-addr, which
// generated manifests and running Deployments pass) sets what the new one
// (--health-addr) sets, on a standard flag set and on a pflag one, and
// help shows only the new name.
func TestOldFlagNamesStillWork(t *testing.T) {
	var o operator.Options
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	o.BindFlags(fs)
	var help bytes.Buffer
	fs.SetOutput(&help)
	if err := fs.Parse([]string{"--health-probe-addr=:9", "-h"}); err != flag.ErrHelp {
		t.Fatalf("parse: %v", err)
	}
	if o.HealthProbeAddr != ":9" {
		t.Errorf("--health-probe-addr=:9 set %q", o.HealthProbeAddr)
	}
	if h := help.String(); !strings.Contains(h, "--health-addr string") || strings.Contains(h, "health-probe-addr") {
		t.Errorf("-h shows the old name, or not the new one:\n%s", h)
	}

	var p operator.Options
	pfs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	p.BindPFlags(pfs)
	if err := pfs.Parse([]string{"--health-probe-addr", ":7", "--async"}); err != nil {
		t.Fatal(err)
	}
	if p.HealthProbeAddr != ":7" || !p.Async {
		t.Errorf("pflag: --health-probe-addr :7 --async set %q, %v", p.HealthProbeAddr, p.Async)
	}
	if u := pfs.FlagUsages(); strings.Contains(u, "health-probe-addr") || !strings.Contains(u, "--mode string") {
		t.Errorf("pflag -h shows the old name, or --mode's type wrong:\n%s", u)
	}

	// A project with its own flag of the old name keeps it.
	proj := flag.NewFlagSet("manager", flag.ContinueOnError)
	mine := proj.String("health-probe-addr", "mine", "the project's own")
	var q operator.Options
	q.BindFlags(proj)
	if err := proj.Parse([]string{"--health-probe-addr=x"}); err != nil || *mine != "x" || q.HealthProbeAddr != "" {
		t.Errorf("the project's --health-probe-addr: %v, %q, opzero's %q", err, *mine, q.HealthProbeAddr)
	}
}
