package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
)

// Read decodes an event stream, one JSON object per line (blank lines are
// skipped); a line that is not an event is an error naming its number.
func Read(r io.Reader) ([]dev.Event, error) {
	var out []dev.Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e dev.Event
		if err := json.Unmarshal(line, &e); err != nil || e.Event == "" || e.Time.IsZero() {
			if err == nil {
				err = errors.New("no event or time field")
			}
			return nil, fmt.Errorf("line %d is not an event of opzero dev --events=json: %w", n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// The wake reasons, in the order of their rows, and their colours.
var (
	reasons      = []string{dev.WakeCreate, dev.WakeUpdate, dev.WakeDelete, dev.WakeSweep, dev.WakeWakeup, dev.WakeExternal}
	reasonColour = map[string]string{dev.WakeCreate: "#1f77b4", dev.WakeUpdate: "#ff7f0e", dev.WakeDelete: "#8c564b",
		dev.WakeSweep: "#9467bd", dev.WakeWakeup: "#17becf", dev.WakeExternal: "#7f7f7f"}
)

const (
	colourOK, colourFailed, colourInstances = "#2ca02c", "#d62728", "#1f77b4"
	width, left, right                      = 960, 120, 24
	instHeight, rowHeight                   = 64, 18
)

// service is what one Service's panel shows.
type service struct {
	name       string
	steps      []step // instance count changes, in time order
	cold       []dev.Event
	zero       []dev.Event
	startFails []dev.Event
	deliveries map[string][]dev.Event // by wake reason
	reconciled []dev.Event
	failed     []dev.Event
}

type step struct {
	at time.Time
	n  int
}

// SVG draws the session of events; it needs at least one event that
// concerns a Knative Service.
func SVG(events []dev.Event) ([]byte, error) {
	if len(events) == 0 {
		return nil, errors.New("no events: record a session with opzero dev --events=json --events-file FILE")
	}
	events = slices.Clone(events)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	t0, t1 := events[0].Time, events[len(events)-1].Time
	if !t1.After(t0) {
		t1 = t0.Add(time.Second)
	}
	last := t1
	t1 = t1.Add(t1.Sub(t0) / 40) // room after the last event: a scale to zero there shows
	svcs := collect(events)
	if len(svcs) == 0 {
		return nil, errors.New("the events name no Knative Service: nothing to draw")
	}
	c := &canvas{t0: t0, t1: t1, last: last}
	c.header(events, svcs)
	for _, s := range svcs {
		c.panel(s)
	}
	return c.finish(), nil
}

// collect sorts the events into one service per Knative Service, in the
// order the ready event names them, then first seen.
func collect(events []dev.Event) []*service {
	var order []*service
	by := map[string]*service{}
	get := func(name string) *service {
		if s, ok := by[name]; ok {
			return s
		}
		s := &service{name: name, deliveries: map[string][]dev.Event{}}
		by[name] = s
		order = append(order, s)
		return s
	}
	alive := map[string]map[int]bool{}
	for _, e := range events {
		for _, se := range e.Services {
			get(se.Name)
		}
		if e.Service == "" {
			continue
		}
		s := get(e.Service)
		if alive[s.name] == nil {
			alive[s.name] = map[int]bool{}
		}
		switch e.Event {
		case dev.EventProcessStarted:
			alive[s.name][e.PID] = true
			s.steps = append(s.steps, step{e.Time, len(alive[s.name])})
			if e.ColdStart {
				s.cold = append(s.cold, e)
			}
		case dev.EventProcessStopped:
			if alive[s.name][e.PID] {
				delete(alive[s.name], e.PID)
				s.steps = append(s.steps, step{e.Time, len(alive[s.name])})
			}
		case dev.EventScaledToZero:
			s.zero = append(s.zero, e)
		case dev.EventError:
			s.startFails = append(s.startFails, e)
		case dev.EventDelivery:
			w := e.Wake
			if reasonColour[w] == "" {
				w = dev.WakeExternal
			}
			s.deliveries[w] = append(s.deliveries[w], e)
		case dev.EventReconciled:
			s.reconciled = append(s.reconciled, e)
		case dev.EventReconcileFailed:
			s.failed = append(s.failed, e)
		}
	}
	return order
}

// canvas accumulates the SVG body; y grows as panels are added.
type canvas struct {
	t0, t1 time.Time
	last   time.Time // the last event (t1 leaves room after it)
	y      float64
	b      strings.Builder
}

func (c *canvas) x(t time.Time) float64 {
	return left + float64(t.Sub(c.t0))/float64(c.t1.Sub(c.t0))*(width-left-right)
}

func (c *canvas) printf(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

func (c *canvas) header(events []dev.Event, svcs []*service) {
	d := c.last.Sub(c.t0).Round(100 * time.Millisecond)
	c.printf(`<text x="%d" y="22" font-size="15" font-weight="bold">opzero dev session: %s, %s from %s</text>`+"\n",
		12, plural(len(svcs), "Knative Service"), d, c.t0.Format("2006-01-02 15:04:05"))
	x := 12.0
	item := func(label, mark string) {
		c.printf(`<g transform="translate(%.1f,40)">%s<text x="9" y="4">%s</text></g>`+"\n", x, mark, esc(label))
		x += 22 + 6.4*float64(len(label))
	}
	item("instances", fmt.Sprintf(`<rect x="-4" y="-4" width="8" height="8" fill="%s" fill-opacity="0.3" stroke="%s"/>`, colourInstances, colourInstances))
	item("cold start", coldMark(0, 0))
	item("scale to zero", zeroMark(0, 0))
	for _, r := range reasons {
		item(r, fmt.Sprintf(`<circle r="4" fill="%s"/>`, reasonColour[r]))
	}
	item("failed answer", fmt.Sprintf(`<circle r="4" fill="white" stroke="%s" stroke-width="2"/>`, colourFailed))
	item("reconciled", fmt.Sprintf(`<rect x="-1" y="-6" width="2" height="12" fill="%s"/>`, colourOK))
	item("reconcile failed", fmt.Sprintf(`<rect x="-1" y="-6" width="2" height="12" fill="%s"/>`, colourFailed))
	c.y = 60
}

// panel draws one Service: its title, the instances, the delivery rows,
// the reconcile rows, and the time axis.
func (c *canvas) panel(s *service) {
	n := 0
	for _, ds := range s.deliveries {
		n += len(ds)
	}
	ok, failed := 0, 0
	for _, e := range s.reconciled {
		ok += e.Reconciled
	}
	for _, e := range s.failed {
		failed += e.Failed
	}
	c.y += 22
	c.printf(`<text x="8" y="%.1f" font-size="14" font-weight="bold">%s</text><text x="%d" y="%.1f" fill="#444">%s, %s (%d failed), %s, %s</text>`+"\n",
		c.y, esc(s.name), left+8+8*len(s.name), c.y, plural(n, "delivery"), plural(ok+failed, "reconcile"), failed,
		plural(len(s.cold), "cold start"), plural(len(s.zero), "scale to zero"))
	c.y += 10
	top := c.y
	c.instances(s)
	for _, r := range reasons {
		if len(s.deliveries[r]) > 0 {
			c.deliveryRow(s.name, r, s.deliveries[r])
		}
	}
	c.reconcileRow(s.name, "reconciled", "reconciled", colourOK, s.reconciled, func(e dev.Event) string {
		return fmt.Sprintf("%s reconciled %d key(s) for %s %s: %s", e.Time.Format("15:04:05.000"), e.Reconciled, e.Kind, e.Key, e.Result)
	})
	c.reconcileRow(s.name, "reconcile-failed", "failed", colourFailed, s.failed, func(e dev.Event) string {
		return fmt.Sprintf("%s %d reconcile(s) failed (%d): %s", e.Time.Format("15:04:05.000"), e.Failed, e.Code, e.Message)
	})
	c.axis(top)
}

// instances draws the instance count as a filled step line, with the cold
// starts, the scale-to-zero moments and the failed starts on it.
func (c *canvas) instances(s *service) {
	peak := 1
	for _, st := range s.steps {
		peak = max(peak, st.n)
	}
	base := c.y + instHeight
	y := func(n int) float64 { return base - float64(n)/float64(peak)*(instHeight-8) }
	c.printf(`<text x="%d" y="%.1f" text-anchor="end">instances</text>`, left-8, base-instHeight/2+4)
	c.printf(`<text x="%d" y="%.1f" text-anchor="end" fill="#888">%d</text><text x="%d" y="%.1f" text-anchor="end" fill="#888">0</text>`+"\n",
		left-2, y(peak)+4, peak, left-2, base+4)
	c.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ccc"/>`+"\n", left, base, width-right, base)
	counts := []string{"0"}
	d := fmt.Sprintf("M%.1f,%.1f", c.x(c.t0), y(0))
	for _, st := range s.steps {
		d += fmt.Sprintf(" H%.1f V%.1f", c.x(st.at), y(st.n))
		if strconv.Itoa(st.n) != counts[len(counts)-1] {
			counts = append(counts, strconv.Itoa(st.n))
		}
	}
	d += fmt.Sprintf(" H%.1f", c.x(c.t1))
	c.printf(`<g class="instances" data-service="%s" data-counts="%s" data-peak="%d">`, esc(s.name), strings.Join(counts, " "), peak)
	c.printf(`<path d="%s V%.1f H%.1f Z" fill="%s" fill-opacity="0.25" stroke="none"/>`, d, y(0), c.x(c.t0), colourInstances)
	c.printf(`<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/></g>`+"\n", d, colourInstances)
	c.group("cold-starts", s.name, s.cold, func(e dev.Event) string {
		return fmt.Sprintf(`<g>%s<title>%s cold start: pid %d</title></g>`, coldMark(c.x(e.Time), base), e.Time.Format("15:04:05.000"), e.PID)
	})
	c.group("scale-to-zero", s.name, s.zero, func(e dev.Event) string {
		return fmt.Sprintf(`<g>%s<title>%s scaled to zero</title></g>`, zeroMark(c.x(e.Time), base-instHeight+8), e.Time.Format("15:04:05.000"))
	})
	c.group("start-failures", s.name, s.startFails, func(e dev.Event) string {
		x := c.x(e.Time)
		return fmt.Sprintf(`<path d="M%.1f,%.1f l8,8 m0,-8 l-8,8" stroke="%s" stroke-width="2"><title>%s %s</title></path>`,
			x-4, base-12, colourFailed, e.Time.Format("15:04:05.000"), esc(e.Message))
	})
	c.y = base + 8
}

func (c *canvas) deliveryRow(svc, reason string, ds []dev.Event) {
	c.y += rowHeight
	c.printf(`<text x="%d" y="%.1f" text-anchor="end">%s</text><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n",
		left-8, c.y+4, esc(reason), left, c.y, width-right, c.y)
	c.printf(`<g class="deliveries" data-reason="%s" data-service="%s">`, esc(reason), esc(svc))
	for _, e := range ds {
		fill, stroke := reasonColour[reason], "none"
		if e.Code < 200 || e.Code > 299 {
			fill, stroke = "white", colourFailed
		}
		c.printf(`<circle class="delivery" data-code="%d" cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" stroke-width="2"><title>%s</title></circle>`,
			e.Code, c.x(e.Time), c.y, fill, stroke, esc(dev.DeliveryLine(e)))
	}
	c.printf("</g>\n")
}

func (c *canvas) reconcileRow(svc, class, label, colour string, es []dev.Event, title func(dev.Event) string) {
	c.y += rowHeight
	c.printf(`<text x="%d" y="%.1f" text-anchor="end">%s</text><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n",
		left-8, c.y+4, label, left, c.y, width-right, c.y)
	c.group(class, svc, es, func(e dev.Event) string {
		return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="2" height="12" fill="%s"><title>%s</title></rect>`, c.x(e.Time)-1, c.y-6, colour, esc(title(e)))
	})
}

// group writes one series as a <g> of one mark per event.
func (c *canvas) group(class, svc string, es []dev.Event, mark func(dev.Event) string) {
	c.printf(`<g class="%s" data-service="%s">`, class, esc(svc))
	for _, e := range es {
		c.b.WriteString(mark(e))
	}
	c.printf("</g>\n")
}

// axis draws the time axis under a panel, with grid lines up to top.
func (c *canvas) axis(top float64) {
	c.y += 14
	span := c.t1.Sub(c.t0).Seconds()
	stepS := niceStep(span)
	for s := 0.0; s <= span+1e-9; s += stepS {
		x := c.x(c.t0.Add(time.Duration(s * float64(time.Second))))
		c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/><text x="%.1f" y="%.1f" text-anchor="middle" fill="#888">%s</text>`+"\n",
			x, top, x, c.y-8, x, c.y+6, strconv.FormatFloat(s, 'f', -1, 64)+"s")
	}
	c.y += 10
}

// niceStep is a tick interval that gives at most 12 ticks over span seconds.
func niceStep(span float64) float64 {
	for _, s := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600} {
		if span/s <= 12 {
			return s
		}
	}
	return 7200
}

func (c *canvas) finish() []byte {
	var out bytes.Buffer
	h := int(c.y) + 10
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, h, width, h)
	fmt.Fprintf(&out, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	out.WriteString(c.b.String())
	out.WriteString("</svg>\n")
	return out.Bytes()
}

func coldMark(x, y float64) string {
	return fmt.Sprintf(`<path d="M%.1f,%.1f l-5,9 h10 Z" fill="%s"/>`, x, y-9, colourInstances)
}

func zeroMark(x, y float64) string {
	return fmt.Sprintf(`<path d="M%.1f,%.1f l-5,-9 h10 Z" fill="#555"/>`, x, y)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	switch {
	case strings.HasSuffix(what, "y"):
		what = strings.TrimSuffix(what, "y") + "ies"
	case strings.HasPrefix(what, "scale to"):
		what = "scales to zero"
	default:
		what += "s"
	}
	return strconv.Itoa(n) + " " + what
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}
