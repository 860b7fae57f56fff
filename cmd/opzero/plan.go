package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/plan"
)

// exitCode is an error that is only an exit code: main exits with it
// and prints nothing (what there was to say is printed).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newPlanCmd() *cobra.Command {
	var req plan.Request
	var out string
	var timeout time.Duration
	var verbose bool
	cmd := &cobra.Command{
		Use:   "plan <operator package or binary> [<name> | <Kind>/<name>] [-n namespace] [-l selector] [-o text|json|diff] [-- <operator args>]",
		Short: "Say what an operator would change in the cluster, before it changes anything",
		Long: `plan builds the operator's main package (or takes a built binary) and runs it
with OPZERO_PLAN set: instead of serving, it reconciles every object of its
primary kinds that the arguments name once, against the cluster of
KUBECONFIG, with every write sent as server-side dry-run (dryRun=All:
admission webhooks and defaulting run as for real), and prints, per object,
what it would create, update (the fields that would change; managedFields,
resourceVersion, generation, uid and creationTimestamp left out), patch and
delete, which Events it would record and which requeues it would ask for.

Nothing is written: no status, no finalizer, no Lease, no Wakeup, no Event.
The operator's client refuses, before it leaves the process, any write that
is not dry-run. A client the reconciler builds from rt.GetConfig() has its
writes sent as dry-run too, and the plan says the reconcile used it; other
external calls (a database, a cloud API) would happen: a reconciler skips
them when operator.Planning(ctx) is true, and HTTP calls through Go's default
transport with the reconcile's context are reported.

Follow-on effects are planned in rounds (--rounds): a write that would bring
another reconcile (an owned object's change to its owner, a watched object's
change through the map function, a primary's change that generation-aware
skipping lets through) reconciles that object in the next round, reading
what the plan would have written; each such read is said (inexact). Objects
that would reconcile again after the last round are listed: the plan stops
there.

One object that panics, hangs (--timeout), cannot be read (forbidden) or is
deleted during the plan is reported on its own; the plan goes on.

Exit status, as kubectl diff: 0 nothing would change, 2 something would, 1 the
plan failed for some object or could not run.`,
		Example: `  opzero plan ./examples/configwatcher                    # every ConfigWatcher of the cluster
  opzero plan ./examples/configwatcher -n prod -l team=a -o diff
  opzero plan ./bin/configwatcher-v2 ConfigWatcher/web -n prod -o json > plan.json
  opzero plan ./cmd/myoperator --rounds 5 -- --max-concurrent-reconciles=4`,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := positional(cmd, args); len(n) < 1 || len(n) > 2 {
				return fmt.Errorf("want the operator (a Go package or a binary) and at most one object name, got %d argument(s) (operator arguments go after --)", len(n))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			pos := positional(cmd, args)
			if len(pos) == 2 {
				req.Name = pos[1]
			}
			switch out {
			case plan.FormatText, plan.FormatJSON, plan.FormatDiff:
			default:
				return fmt.Errorf("-o %s: want text, json or diff", out)
			}
			if req.Rounds < 1 {
				return fmt.Errorf("--rounds %d: at least 1", req.Rounds)
			}
			req.Timeout = plan.Duration(timeout)
			dir, err := os.Getwd()
			if err != nil {
				return err
			}
			o := plan.RunOptions{Operator: pos[0], Dir: dir, Args: operatorArgs(cmd, args)}
			if verbose {
				o.Stderr = cmd.ErrOrStderr()
			}
			rep, err := plan.Run(cmd.Context(), o, req)
			if err != nil {
				return err
			}
			if err := plan.Print(cmd.OutOrStdout(), rep, out); err != nil {
				return err
			}
			if c := rep.ExitCode(); c != 0 {
				return exitCode(c)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&req.Namespace, "namespace", "n", "", "plan only the objects of this namespace (default every namespace)")
	f.StringVarP(&req.Selector, "selector", "l", "", "plan only the primary objects matching this label selector")
	f.BoolVar(&req.Watched, "watched", false, "also plan the objects every object of a watched kind maps to (the map functions), for operators whose keys are not their primary objects' names: opzero-metacontroller's parents")
	f.IntVar(&req.Rounds, "rounds", plan.DefaultRounds, "at most this many rounds of follow-on reconciles (1: only the objects named)")
	f.DurationVar(&timeout, "timeout", plan.DefaultTimeout, "bound on one object's reconcile; one that takes longer is reported and left behind")
	f.StringVarP(&out, "output", "o", plan.FormatText, "text (per object), json (the whole plan, for a CI job to keep) or diff (a field diff per write)")
	f.BoolVarP(&verbose, "verbose", "v", false, "show the operator's logs on standard error")
	return cmd
}
