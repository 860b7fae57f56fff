package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// svgSeries reads a timeline back as XML: for each series <g> (by class,
// the Service's series only), its attributes and how many marks it holds.
type svgSeries struct {
	attrs map[string]string
	marks int
}

func readSVG(t *testing.T, b []byte) map[string]svgSeries {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	out := map[string]svgSeries{}
	var open []string // class of each open element ("" if none)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the timeline is not XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			class, attrs := "", map[string]string{}
			for _, a := range tok.Attr {
				attrs[a.Name.Local] = a.Value
			}
			if tok.Name.Local == "g" && attrs["data-service"] != "" {
				class = attrs["class"]
				if r := attrs["data-reason"]; r != "" {
					class += "/" + r
				}
				out[class] = svgSeries{attrs: attrs}
			}
			if len(open) > 0 && open[len(open)-1] != "" { // a mark directly in a series
				s := out[open[len(open)-1]]
				s.marks++
				out[open[len(open)-1]] = s
			}
			open = append(open, class)
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
	if len(out) == 0 {
		t.Fatalf("no series in the timeline:\n%s", b)
	}
	return out
}

// TestDevTimelineCommand: opzero dev timeline draws a recorded stream to
// -o (the series of its Service are there); a missing file and a file
// that is not an event stream are errors that name them, and write nothing.
func TestDevTimelineCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newRootCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	svg := filepath.Join(dir, "t.svg")
	if out, err := run("dev", "timeline", "../../internal/devenv/timeline/testdata/small.jsonl", "-o", svg); err != nil || !strings.Contains(out, "wrote "+svg) {
		t.Fatalf("opzero dev timeline: %v\n%s", err, out)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if s := readSVG(t, b); s["instances"].attrs["data-counts"] != "0 1 0 1 2 1 0" || s["cold-starts"].marks != 2 || s["deliveries/update"].marks != 1 {
		t.Errorf("series %+v", s)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"time\":\"2026-11-23T13:00:00Z\",\"event\":\"ready\"}\nnot an event\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{filepath.Join(dir, "missing.jsonl"): "missing.jsonl", bad: "line 2"} {
		out := filepath.Join(dir, "none.svg")
		if _, err := run("dev", "timeline", file, "-o", out); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", file, err, want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a picture was written", file)
		}
	}
}

// TestDevTimeline is the user's path to the picture: opzero dev -v
// --timeline with a 1 s idle period; a new ConfigMap is delivered to the
// operator at zero instances (the -v line says create, the instance, cold
// start, 200), it scales to zero, Ctrl-C; the timeline written at exit
// shows the instances going 0 1 0 with a cold start and a scale to zero,
// and is the picture 'opzero dev timeline' draws from the events file.
func TestDevTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx := context.Background()
	dir := t.TempDir()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })
	root, _ := controlplane.RepoRoot()
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, filepath.Join(root, "examples/configwatcher/config/crd")); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "opzero")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	svg, events := filepath.Join(dir, "session.svg"), filepath.Join(dir, "session.jsonl")
	cmd := exec.Command(exe, "dev", "-f", filepath.Join(root, "internal/devenv/dev/testdata/configwatcher.yaml"), "--kubeconfig", plane.Kubeconfig,
		"--build-dir", root, "--cache-dir", filepath.Join(dir, "cache"), "--log-dir", filepath.Join(dir, "logs"), "--idle", "1s",
		"--no-status", "-v", "--events=json", "--events-file", events, "--timeline", svg)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitOutput(t, out, "opzero dev: ready", done)
	bin, _ := controlplane.BinDir()
	create := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", plane.Kubeconfig, "create", "configmap", "poke", "--from-literal=a=b")
	if b, err := create.CombinedOutput(); err != nil {
		t.Fatalf("kubectl: %v\n%s", err, b)
	}
	waitOutput(t, out, "scaled to zero", done)
	if !strings.Contains(out.String(), ": create ConfigMap default/poke -> pid ") || !strings.Contains(out.String(), " (cold start), 200 in ") {
		t.Errorf("no -v line for the ConfigMap's delivery with its cold start and 200:\n%s", out.String())
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("opzero dev exit after SIGINT: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("opzero dev still runs 30s after SIGINT\n%s", out.String())
	}
	if !strings.Contains(out.String(), "wrote the session's timeline to "+svg) {
		t.Fatalf("no timeline written:\n%s", out.String())
	}
	atExit, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	s := readSVG(t, atExit)
	if inst := s["instances"]; !strings.HasPrefix(inst.attrs["data-counts"], "0 1 0") || inst.attrs["data-service"] != "default/configwatcher" {
		t.Errorf("instances series %+v: want 0 1 0 for default/configwatcher", inst)
	}
	if s["cold-starts"].marks < 1 || s["scale-to-zero"].marks < 1 || s["deliveries/create"].marks < 1 {
		t.Errorf("series %+v: want a cold start, a scale to zero and a create", s)
	}
	redraw := filepath.Join(dir, "redraw.svg")
	if b, err := exec.Command(exe, "dev", "timeline", events, "-o", redraw).CombinedOutput(); err != nil {
		t.Fatalf("opzero dev timeline: %v\n%s", err, b)
	}
	if b, _ := os.ReadFile(redraw); !bytes.Equal(b, atExit) {
		t.Error("the timeline drawn from the events file differs from the one written at exit")
	}
	if dst := os.Getenv("OPZERO_TIMELINE_OUT"); dst != "" { // keep the session (docs/images)
		_ = os.WriteFile(dst, atExit, 0o644)
		b, _ := os.ReadFile(events)
		_ = os.WriteFile(strings.TrimSuffix(dst, ".svg")+".jsonl", b, 0o644)
	}
}
