package operator_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"

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
