package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"

	"github.com/memplan/memplan/internal/units"
)

// HTML writes one self-contained page: per spec an SVG chart of the fill
// at the spec's batch per device, one of the largest batch per device, and
// the memory breakdown as stacked bars; then a sortable table of every
// cell. It loads nothing from the network.
func HTML(w io.Writer, r *Report) error {
	return page().Execute(w, r)
}

// segment is one part of a stacked bar.
type segment struct {
	Name, Color string
	Bytes       func(Breakdown) int64
}

var segments = []segment{
	{"parameters", "#4e79a7", func(b Breakdown) int64 { return b.Parameters }},
	{"gradients", "#f28e2b", func(b Breakdown) int64 { return b.Gradients }},
	{"optimizer", "#e15759", func(b Breakdown) int64 { return b.Optimizer }},
	{"activations", "#76b7b2", func(b Breakdown) int64 { return b.Activations }},
	{"transient", "#59a14f", func(b Breakdown) int64 { return b.Transient }},
	{"allocator", "#edc948", func(b Breakdown) int64 { return b.Allocator }},
	{"context", "#b07aa1", func(b Breakdown) int64 { return b.Context }},
	{"communication", "#9c755f", func(b Breakdown) int64 { return b.Communication }},
}

const (
	chartW, barH, labelW = 420, 18, 100
)

func svgOpen(b *strings.Builder, class, title string, rows int) float64 {
	h := float64(rows*(barH+6) + 40)
	fmt.Fprintf(b, `<svg class="chart %s" role="img" aria-label="%s" width="%d" height="%.0f" viewBox="0 0 %d %.0f" xmlns="http://www.w3.org/2000/svg">`,
		class, template.HTMLEscapeString(title), chartW, h, chartW, h)
	fmt.Fprintf(b, `<text x="0" y="14" class="ct">%s</text>`, template.HTMLEscapeString(title))
	return h
}

func y(i int) int { return 24 + i*(barH+6) }

// fillChart draws the fill at the spec's batch per device, with the
// target's edge as a line.
func fillChart(r *Report, row Row) template.HTML {
	var b strings.Builder
	h := svgOpen(&b, "fill", "fill at the spec's batch", len(row.Cells))
	span := float64(chartW - labelW - 60)
	scale := 1.2 // up to 120% of the device
	for i, c := range row.Cells {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="lb">%s</text>`, labelW-6, y(i)+13, template.HTMLEscapeString(c.Device))
		if c.Error != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" class="err">error</text>`, labelW, y(i)+13)
			continue
		}
		f := min(c.Fill, scale)
		color := map[string]string{"fits": "#59a14f", "above-target": "#edc948", "does-not-fit": "#e15759"}[c.Verdict]
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %.1f%%</title></rect>`,
			labelW, y(i), span*f/scale, barH, color, template.HTMLEscapeString(c.Device), 100*c.Fill)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="v">%.0f%%</text>`, float64(labelW)+span*f/scale+4, y(i)+13, 100*c.Fill)
	}
	for _, edge := range []struct {
		at    float64
		label string
		dx    float64
		align string
	}{{1, "100%", 2, "start"}, {r.Band.Hi, "target", -2, "end"}} {
		x := float64(labelW) + span*edge.at/scale
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="20" y2="%.0f" class="edge"/>`, x, x, h-4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="el" text-anchor="%s">%s</text>`, x+edge.dx, h-1, edge.align, edge.label)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// batchChart draws the largest batch per device.
func batchChart(row Row) template.HTML {
	var b strings.Builder
	svgOpen(&b, "batch", "largest batch inside the target", len(row.Cells))
	var top int64 = 1
	for _, c := range row.Cells {
		top = max(top, c.MaxBatch)
	}
	span := float64(chartW - labelW - 80)
	for i, c := range row.Cells {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="lb">%s</text>`, labelW-6, y(i)+13, template.HTMLEscapeString(c.Device))
		wd := span * float64(c.MaxBatch) / float64(top)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#4e79a7"/>`, labelW, y(i), wd, barH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="v">%s</text>`, float64(labelW)+wd+4, y(i)+13, template.HTMLEscapeString(short(c)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// breakdownChart draws the device total at the spec's batch as stacked
// bars, one per device, on one scale.
func breakdownChart(row Row) template.HTML {
	var b strings.Builder
	svgOpen(&b, "breakdown", "memory at the spec's batch, per GPU", len(row.Cells))
	var top int64 = 1
	for _, c := range row.Cells {
		top = max(top, c.DeviceTotal)
	}
	span := float64(chartW - labelW - 70)
	for i, c := range row.Cells {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="lb">%s</text>`, labelW-6, y(i)+13, template.HTMLEscapeString(c.Device))
		x := float64(labelW)
		for _, s := range segments {
			v := s.Bytes(c.Breakdown)
			if v <= 0 {
				continue
			}
			wd := span * float64(v) / float64(top)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`,
				x, y(i), wd, barH, s.Color, s.Name, units.Format(v))
			x += wd
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="v">%s</text>`, x+4, y(i)+13, units.GiB2(c.DeviceTotal))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// page is parsed on first use, not at start-up: every memplan command links
// the report package (docs/performance.md).
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"fillChart": fillChart, "batchChart": batchChart, "breakdownChart": breakdownChart,
		"segments": func() []segment { return segments },
		"pct":      func(f float64) string { return fmt.Sprintf("%.1f", 100*f) },
		"gib":      units.GiB2,
		"short":    short,
		"date":     func(r *Report) string { return r.Generated.Format("2006-01-02 15:04 UTC") },
		"cost": func(c Cell) string {
			if c.CostPerHour == 0 {
				return ""
			}
			return fmt.Sprintf("%.2f", c.CostPerHour)
		},
	}).Parse(pageHTML))
})
