package console

import (
	"fmt"
	"html"
	"html/template"
	"strings"

	"github.com/hookrelay/hookrelay/internal/ops"
)

// Chart sizes: one bar per minute of the hour.
const (
	chartBar    = 3
	chartHeight = 28
)

// chart draws a route's last hour as an inline SVG: a bar per minute,
// delivered attempts in one colour with failed ones stacked on them,
// scaled to the busiest minute. Only numbers and the escaped route name go
// into it; its colours come from the stylesheet (the CSP allows no inline
// style).
func chart(a *ops.RouteActivity) template.HTML {
	if a == nil {
		return ""
	}
	var top int64
	for _, m := range a.Minutes {
		top = max(top, m.Delivered+m.Failed)
	}
	label := fmt.Sprintf("%s, last hour: %d delivered, %d failed attempts; busiest minute %d", a.Route, a.Delivered, a.Failed, top)
	var b strings.Builder
	width := chartBar * len(a.Minutes)
	fmt.Fprintf(&b, `<svg class="chart" role="img" width="%d" height="%d" viewBox="0 0 %d %d" aria-label="%s"><title>%s</title>`,
		width, chartHeight, width, chartHeight, html.EscapeString(label), html.EscapeString(label))
	fmt.Fprintf(&b, `<rect class="base" x="0" y="%d" width="%d" height="1"/>`, chartHeight-1, width)
	if top > 0 {
		scale := float64(chartHeight-1) / float64(top)
		for i, m := range a.Minutes {
			x := i * chartBar
			ok := float64(m.Delivered) * scale
			bad := float64(m.Failed) * scale
			if m.Delivered > 0 {
				fmt.Fprintf(&b, `<rect class="ok" x="%d" y="%.1f" width="%d" height="%.1f"/>`, x, float64(chartHeight-1)-ok, chartBar-1, ok)
			}
			if m.Failed > 0 {
				fmt.Fprintf(&b, `<rect class="bad" x="%d" y="%.1f" width="%d" height="%.1f"/>`, x, float64(chartHeight-1)-ok-bad, chartBar-1, bad)
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and escaped text only, built above
}

// ratio shows a success ratio as a percentage, "-" when nothing was
// attempted.
func ratio(r float64) string {
	if r < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", r*100)
}
