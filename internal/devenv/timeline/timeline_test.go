package timeline_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/timeline"
)

// element is what the tests read back from a picture: every element with
// its attributes and its <title>, in document order.
type element struct {
	name  string
	attrs map[string]string
	title string
	kids  []*element
}

func parse(t *testing.T, b []byte) *element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	root := &element{name: "document"}
	stack := []*element{root}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not XML: %v", err)
		}
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			e := &element{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			top.kids = append(top.kids, e)
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if top.name == "title" && len(stack) > 1 {
				stack[len(stack)-2].title += string(tok)
			}
		}
	}
	if len(root.kids) != 1 || root.kids[0].name != "svg" || root.kids[0].attrs["width"] == "" {
		t.Fatalf("root %+v: want one <svg> with a width", root.kids)
	}
	return root.kids[0]
}

// series finds the <g> of class for service (and reason, for deliveries).
func (e *element) series(class, service, reason string) *element {
	if e.name == "g" && e.attrs["class"] == class && e.attrs["data-service"] == service && (reason == "" || e.attrs["data-reason"] == reason) {
		return e
	}
	for _, k := range e.kids {
		if s := k.series(class, service, reason); s != nil {
			return s
		}
	}
	return nil
}

func render(t *testing.T, file string) (*element, []byte) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := timeline.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := timeline.SVG(events)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, b), b
}

// TestSeriesOfASession: a recorded stream (two cold starts, a scale-up to
// two instances, two scales to zero; a create, an update answered 500, a
// sweep, a wakeup whose reconcile failed) is drawn as those series: the
// instance counts 0 1 0 1 2 1 0, two cold-start and two scale-to-zero
// marks, one delivery per reason row (the failed one marked by its code),
// two reconciled and two failed marks, each mark with its title.
func TestSeriesOfASession(t *testing.T) {
	svg, _ := render(t, "testdata/small.jsonl")
	const svc = "ns/op"
	inst := svg.series("instances", svc, "")
	if inst == nil || inst.attrs["data-counts"] != "0 1 0 1 2 1 0" || inst.attrs["data-peak"] != "2" {
		t.Fatalf("instances series %+v: want counts 0 1 0 1 2 1 0, peak 2", inst)
	}
	for class, n := range map[string]int{"cold-starts": 2, "scale-to-zero": 2, "reconciled": 2, "reconcile-failed": 2, "start-failures": 0} {
		g := svg.series(class, svc, "")
		if g == nil || len(g.kids) != n {
			t.Errorf("series %s: %+v, want %d marks", class, g, n)
			continue
		}
		for _, k := range g.kids {
			if k.title == "" {
				t.Errorf("a %s mark has no title", class)
			}
		}
	}
	for reason, code := range map[string]string{"create": "200", "update": "500", "sweep": "200", "wakeup": "200"} {
		g := svg.series("deliveries", svc, reason)
		if g == nil || len(g.kids) != 1 || g.kids[0].attrs["data-code"] != code {
			t.Errorf("deliveries %s: %+v, want one answered %s", reason, g, code)
			continue
		}
		if title := g.kids[0].title; !strings.Contains(title, "ns/op: "+reason) {
			t.Errorf("deliveries %s: title %q, want its -v line", reason, title)
		}
	}
	if g := svg.series("deliveries", svc, "delete"); g != nil {
		t.Errorf("a delete row without a delete: %+v", g)
	}
	if c := svg.series("deliveries", svc, "create").kids[0]; !strings.Contains(c.title, "(cold start)") {
		t.Errorf("the create paid the cold start; title %q", c.title)
	}
}

// TestSameStreamSameBytes: the picture depends on the events only.
func TestSameStreamSameBytes(t *testing.T) {
	_, a := render(t, "testdata/small.jsonl")
	_, b := render(t, "testdata/small.jsonl")
	if !bytes.Equal(a, b) {
		t.Error("two renderings of one stream differ")
	}
}

// TestBadInput: a line that is not an event names its number; no events,
// or none about a Service, is an error that says what to record.
func TestBadInput(t *testing.T) {
	_, err := timeline.Read(strings.NewReader(`{"time":"2026-11-23T13:00:00Z","event":"ready"}` + "\n\nnot json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("bad line: %v, want an error naming line 3", err)
	}
	if _, err := timeline.Read(strings.NewReader(`{"foo":1}`)); err == nil {
		t.Error("an object that is not an event: no error")
	}
	if _, err := timeline.SVG(nil); err == nil || !strings.Contains(err.Error(), "--events=json") {
		t.Errorf("no events: %v", err)
	}
	events, _ := timeline.Read(strings.NewReader(`{"time":"2026-11-23T13:00:00Z","event":"stopped"}`))
	if _, err := timeline.SVG(events); err == nil {
		t.Error("no Service: no error")
	}
}
