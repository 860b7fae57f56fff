package main

import (
	"fmt"
	"sort"
	"strings"
)

func fmedian(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fstats(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f (%.1f-%.1f)", fmedian(s), s[0], s[len(s)-1])
}

// rssSVG plots median RSS against the ConfigMap count, one line per operator
// (the serverless ones at steady state: write).
func rssSVG(rss map[string]map[int][]float64) string {
	const w, h, m = 640, 360, 60
	counts := []int{0, 2000, 10000}
	maxY := 1.0
	for _, byN := range rss {
		for _, v := range byN {
			if y := fmedian(v); y > maxY {
				maxY = y
			}
		}
	}
	maxY *= 1.15
	x := func(n int) float64 { return m + float64(n)/10000*(w-2*m) }
	y := func(v float64) float64 { return h - m - v/maxY*(h-2*m) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="24" font-size="14">RSS (MiB) against ConfigMaps present (serverless: after 200 more reconciles)</text>`+"\n", m)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", m, h-m, w-m, h-m, m, m, m, h-m)
	for _, n := range counts {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%d</text>`+"\n", x(n), h-m+18, n)
	}
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%.0f</text><line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>`+"\n", m-6, y(v)+4, v, m, y(v), w-m, y(v))
	}
	colors := map[string]string{"controller-runtime": "#d62728", "opzero": "#2ca02c", "opzero-notrim": "#bcbd22", "opzero-linked": "#98df8a", "opzero-classic": "#1f77b4", "opzero-before": "#7f7f7f"}
	ly := m
	for _, op := range operators {
		if _, ok := rss[op]; !ok {
			continue
		}
		var pts []string
		for _, n := range counts {
			if v, ok := rss[op][n]; ok {
				pts = append(pts, fmt.Sprintf("%.0f,%.0f", x(n), y(fmedian(v))))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[op], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", w-m-250, ly, colors[op], label(op))
		ly += 16
	}
	b.WriteString("</svg>\n")
	return b.String()
}
