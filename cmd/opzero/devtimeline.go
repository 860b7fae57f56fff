package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/devenv/timeline"
)

func newDevTimelineCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "timeline <events file>",
		Short: "Draw a recorded opzero dev session as an SVG timeline",
		Long: `timeline reads the event stream of an opzero dev session (written by
'opzero dev --events=json --events-file FILE', or by 'make demo') and draws the
session as an SVG picture. For each Knative Service it shows the instances
over time, each cold start and each scale to zero, the deliveries in one row
per wake reason (create, update, delete, sweep, wakeup, external; a failed
answer is a red ring), and the reconciles the answers reported, green, and
the failed ones, red. Hovering over a mark in a browser shows its details.

The events file may be - for standard input. The stream of a session that
still runs is drawn up to its last event. 'opzero dev --timeline FILE' draws
the same picture when the session stops, without an events file.`,
		Example: `  opzero dev -f manifests.yaml --events=json --events-file session.jsonl
  opzero dev timeline session.jsonl -o session.svg`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fmt.Errorf("reading the events: %w", err)
				}
				defer f.Close()
				in = f
			}
			events, err := timeline.Read(in)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			svg, err := timeline.SVG(events)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if output == "-" {
				_, err = cmd.OutOrStdout().Write(svg)
				return err
			}
			if err := os.WriteFile(output, svg, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d events)\n", output, len(events))
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "timeline.svg", "write the picture to this file, or - for standard output")
	return cmd
}

// checkTimelinePath refuses a --timeline file whose folder does not exist,
// before the session starts (the picture is written when it stops).
func checkTimelinePath(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--timeline %s: folder %s does not exist; create it or choose another file", path, dir)
	}
	return nil
}

// writeTimeline draws the events recorded during the session to path.
func writeTimeline(path string, recorded *bytes.Buffer, out io.Writer) {
	events, err := timeline.Read(bytes.NewReader(recorded.Bytes()))
	var svg []byte
	if err == nil {
		svg, err = timeline.SVG(events)
	}
	if err == nil {
		err = os.WriteFile(path, svg, 0o644)
	}
	if err != nil {
		fmt.Fprintf(out, "opzero dev: no timeline written to %s: %v\n", path, err)
		return
	}
	fmt.Fprintf(out, "opzero dev: wrote the session's timeline to %s\n", path)
}
