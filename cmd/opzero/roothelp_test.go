package main

import (
	"regexp"
	"testing"
)

// TestRootHelpNamesEveryCommand: the root help's summary names each
// command a user can run, in parentheses, as it names the others.
func TestRootHelpNamesEveryCommand(t *testing.T) {
	root := newRootCmd()
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if !regexp.MustCompile(`\((?:[a-z\s,-]+,\s)?` + regexp.QuoteMeta(c.Name()) + `(?:[,\s][a-z\s,-]+)?\)`).MatchString(root.Long) {
			t.Errorf("opzero --help does not say what %q is for (name it in parentheses in the root command's Long)", c.Name())
		}
	}
}
