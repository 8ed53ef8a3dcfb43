package console

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
)

// Plots are drawn on the server as inline SVG: no script, nothing fetched.
// Every bar or point carries a <title> with its label and value (shown on
// hover), and the page lists the same numbers in a table beside the plot.

type point struct {
	Label string
	Value float64
	OK    bool // false: no value for this point (e.g. a share without decisions)
}

type plot struct {
	Title string
	SVG   template.HTML
	Rows  []point // the numbers, for the table (points with a value only)
	Fmt   string
}

// Format renders a row's value.
func (p plot) Format(v float64) string { return fmt.Sprintf(p.Fmt, v) }

const (
	plotW, plotH           = 560.0, 150.0
	padL, padR, padT, padB = 48.0, 8.0, 16.0, 22.0
)

func axes(b *strings.Builder, top float64, format string, pts []point, xLabels bool) {
	innerH := plotH - padT - padB
	for _, f := range []float64{0, 0.5, 1} {
		y := padT + innerH*(1-f)
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, y, plotW-padR, y)
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-4, y+4, html.EscapeString(tickLabel(format, top*f)))
	}
	if xLabels && len(pts) > 0 {
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%.1f">%s</text>`, padL, plotH-6, html.EscapeString(pts[0].Label))
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, plotW-padR, plotH-6, html.EscapeString(pts[len(pts)-1].Label))
	}
}

// tickLabel formats an axis value; a count axis shows halves as decimals.
func tickLabel(format string, v float64) string {
	if format == "%.0f" && v != math.Trunc(v) {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf(format, v)
}

// niceTop is the axis maximum: the largest value rounded up to 1, 2 or 5
// times a power of ten.
func niceTop(maxV float64) float64 {
	if maxV <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(maxV)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= maxV {
			return m * p
		}
	}
	return 10 * p
}

// rows are the points a plot's numbers table lists: every point with a
// value when zeros matter (a share: OK means it has a denominator, and 0 %
// is data) or the plot has at most 12 points, else the non-zero ones (a
// count's empty hours).
func rows(pts []point, zeros bool) []point {
	var out []point
	for _, p := range pts {
		if p.OK && (p.Value != 0 || zeros || len(pts) <= 12) {
			out = append(out, p)
		}
	}
	return out
}

// barPlot draws one bar per point; top 0 scales to the data. Up to 12
// points are categories: each bar gets its label and value.
func barPlot(title string, pts []point, format string, top float64) plot {
	if top == 0 {
		for _, p := range pts {
			top = max(top, p.Value)
		}
		top = niceTop(top)
	}
	cat := len(pts) <= 12
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="plot" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, plotW, plotH, html.EscapeString(title))
	axes(&b, top, format, pts, !cat)
	innerW, innerH := plotW-padL-padR, plotH-padT-padB
	w := innerW / float64(max(len(pts), 1))
	for i, p := range pts {
		if !p.OK {
			continue
		}
		h := innerH * min(p.Value/top, 1)
		x := padL + float64(i)*w
		val := html.EscapeString(fmt.Sprintf(format, p.Value))
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s</title></rect>`,
			x+w*0.12, padT+innerH-h, max(w*0.76, 1), max(h, 0), html.EscapeString(p.Label), val)
		if cat {
			fmt.Fprintf(&b, `<text class="val" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x+w/2, padT+innerH-h-3, val)
			fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x+w/2, plotH-6, html.EscapeString(p.Label))
		}
	}
	b.WriteString(`</svg>`)
	return plot{Title: title, SVG: template.HTML(b.String()), Rows: rows(pts, false), Fmt: format}
}

// linePlot draws points joined where consecutive points have values, with
// a dashed reference line at ref (ref < 0: none). Its numbers list every
// point with a value, 0 included: a line plots shares, whose points
// without a denominator are the ones not OK.
func linePlot(title string, pts []point, format string, top, ref float64) plot {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="plot" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, plotW, plotH, html.EscapeString(title))
	axes(&b, top, format, pts, true)
	innerW, innerH := plotW-padL-padR, plotH-padT-padB
	xAt := func(i int) float64 { return padL + innerW*(float64(i)+0.5)/float64(max(len(pts), 1)) }
	yAt := func(v float64) float64 { return padT + innerH*(1-min(max(v/top, 0), 1)) }
	if ref >= 0 {
		label := html.EscapeString(fmt.Sprintf(format, ref))
		fmt.Fprintf(&b, `<line class="ref" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"><title>%s</title></line>`, padL, yAt(ref), plotW-padR, yAt(ref), label)
		fmt.Fprintf(&b, `<text class="reflabel" x="%.1f" y="%.1f">%s</text>`, padL+4, yAt(ref)-3, label)
	}
	var path strings.Builder
	pen := false
	for i, p := range pts {
		if !p.OK {
			pen = false
			continue
		}
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, xAt(i), yAt(p.Value))
		pen = true
	}
	if path.Len() > 0 {
		fmt.Fprintf(&b, `<path class="line" d="%s"/>`, strings.TrimSpace(path.String()))
	}
	for i, p := range pts {
		if !p.OK {
			continue
		}
		cls := "dot"
		if ref >= 0 && p.Value <= ref {
			cls = "dot low"
		}
		fmt.Fprintf(&b, `<circle class="%s" cx="%.1f" cy="%.1f" r="3"><title>%s: %s</title></circle>`, cls, xAt(i), yAt(p.Value), html.EscapeString(p.Label), html.EscapeString(fmt.Sprintf(format, p.Value)))
	}
	b.WriteString(`</svg>`)
	return plot{Title: title, SVG: template.HTML(b.String()), Rows: rows(pts, true), Fmt: format}
}

// intervalPlot draws estimates with their 95 % intervals on one axis.
type estimate struct {
	Name            string
	Value, Lo, Hi   float64
	Highlight, Base bool
}

func intervalPlot(title string, es []estimate) template.HTML {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, e := range es {
		for _, v := range []float64{e.Value, e.Lo, e.Hi} {
			if finite(v) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 0) {
		return ""
	}
	lo, hi = min(lo, 0), max(hi, 0)
	if hi-lo < 1e-9 {
		hi = lo + 1
	}
	const rowH, left, right = 22.0, 190.0, 560.0
	height := rowH*float64(len(es)) + 24
	xAt := func(v float64) float64 { return left + (right-left-10)*(v-lo)/(hi-lo) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="plot" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, right, height, html.EscapeString(title))
	fmt.Fprintf(&b, `<line class="ref0" x1="%.1f" y1="0" x2="%.1f" y2="%.1f"/>`, xAt(0), xAt(0), height-18)
	fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">0 MXN</text>`, xAt(0), height-4)
	for i, e := range es {
		y := rowH*float64(i) + 14
		cls := "est"
		if e.Highlight {
			cls = "est main"
		}
		name := html.EscapeString(isolate(e.Name))
		fmt.Fprintf(&b, `<text class="name" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, left-8, y+4, html.EscapeString(isolate(clip(e.Name, nameRunes))))
		if !finite(e.Value) {
			fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f">n/a</text>`, left, y+4)
			continue
		}
		if finite(e.Lo) && finite(e.Hi) {
			fmt.Fprintf(&b, `<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, cls, xAt(e.Lo), y, xAt(e.Hi), y)
		}
		fmt.Fprintf(&b, `<circle class="%s" cx="%.1f" cy="%.1f" r="4"><title>%s: %s MXN [%s, %s]</title></circle>`, cls, xAt(e.Value), y, name, mxnText(e.Value), mxnText(e.Lo), mxnText(e.Hi))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// nameRunes is how many characters of an estimate's name fit left of the
// interval plot's axis; a longer name (an action's nombre has up to 256)
// is clipped there, and given whole in the hover text and the table.
const nameRunes = 30

// clip cuts s to at most n runes, the last an ellipsis when it cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// isolate wraps text that may come from a tenant (an action name) in
// FSI ... PDI, so that a bidi control in it cannot reorder what follows it
// in the same line, such as the figures of a hover text.
func isolate(s string) string { return "\u2068" + s + "\u2069" }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
