package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/opzero/opzero/internal/devenv/dev"
)

// openEvents opens the stream of --events=json: standard output by
// default (the human log then goes to standard error, so the two never
// mix), or --events-file (a path; /dev/fd/N for an inherited descriptor).
// It returns the writer (nil without --events, unless record is set: the
// events then go there too, for --timeline), where the human log goes,
// and a func that closes what it opened.
func (f *devFlags) openEvents(cmd *cobra.Command, record *bytes.Buffer) (*dev.EventWriter, io.Writer, func(), error) {
	out := cmd.OutOrStdout()
	tee := func(w io.Writer) *dev.EventWriter {
		switch {
		case record == nil:
			return dev.NewEventWriter(w)
		case w == nil:
			return dev.NewEventWriter(record)
		}
		return dev.NewEventWriter(io.MultiWriter(w, record))
	}
	switch f.events {
	case "":
		return tee(nil), out, func() {}, nil
	case "json":
	default:
		return nil, nil, nil, fmt.Errorf("--events=%s: the only format is json (one JSON object per line)", f.events)
	}
	if f.eventsFile == "" || f.eventsFile == "-" {
		return tee(out), cmd.ErrOrStderr(), func() {}, nil
	}
	file, err := os.OpenFile(f.eventsFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--events-file: %w", err)
	}
	return tee(file), out, func() { file.Close() }, nil
}
