package operator

import (
	"flag"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// TestStandInFlagsAreSaid: each project flag found in place of one of
// opzero's is said at start; the project's --max-concurrent-reconciles
// (the same meaning) sets opzero's concurrency; a same-named flag of
// another meaning leaves opzero's default and says so.
func TestStandInFlagsAreSaid(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var metrics, backoff string
	var workers int
	fs.StringVar(&metrics, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	fs.IntVar(&workers, "max-concurrent-reconciles", 1, "workers per controller")
	fs.StringVar(&backoff, "backoff-base", "", "the project's own")
	var o Options
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--max-concurrent-reconciles=4", "--backoff-base=slow"}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	o.applyStandIns(log)
	out := strings.Join(lines, "\n")
	if o.MaxConcurrentReconciles != 4 {
		t.Errorf("MaxConcurrentReconciles %d, want the project's --max-concurrent-reconciles=4", o.MaxConcurrentReconciles)
	}
	for _, want := range []string{`"project"="--metrics-bind-address" "opzero"="--metrics-addr"`, `"flag"="--max-concurrent-reconciles" "value"="4"`,
		`keeps its default (set it in operator.Options)" "flag"="--backoff-base"`} {
		if !strings.Contains(out, want) {
			t.Errorf("start logs lack %s:\n%s", want, out)
		}
	}
	if o.BackoffBase != 0 {
		t.Errorf("opzero's backoff base %v: the project's --backoff-base is its own", o.BackoffBase)
	}
}
