package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/memplan/memplan/internal/shellquote"
	"github.com/memplan/memplan/internal/units"
)

// Formats lists the formats Write accepts.
var Formats = []string{"text", "json", "csv", "markdown", "html"}

// Write renders r in the named format.
func Write(w io.Writer, r *Report, format string) error {
	switch format {
	case "text":
		return Text(w, r)
	case "json":
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(r)
	case "csv":
		return CSV(w, r)
	case "markdown":
		return Markdown(w, r)
	case "html":
		return HTML(w, r)
	}
	return fmt.Errorf("format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// short is what a cell shows in a narrow column: the largest batch, the
// GPUs needed, or the error.
func short(c Cell) string {
	switch {
	case c.Error != "":
		return "error"
	case c.MaxBatch > 0 && c.GPUs > 1:
		return fmt.Sprintf("b%d×%d", c.MaxBatch, c.GPUs)
	case c.MaxBatch > 0:
		return fmt.Sprintf("b%d", c.MaxBatch)
	case c.GPUs == 1:
		return "b1 w/ fix"
	case c.GPUs > 0:
		return fmt.Sprintf("%d GPUs", c.GPUs)
	}
	return "no fit"
}

// textCols is how many device columns one text table holds, so a table
// stays inside 100 columns.
const textCols = 7

// Text writes one block per spec, devices as columns, at most textCols
// devices per table.
func Text(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "target %.0f-%.0f%% of device memory, less a %.1f%% safety margin\n",
		100*r.Band.Lo, 100*r.Band.Hi, 100*r.Margin)
	for _, row := range r.Rows {
		fmt.Fprintf(w, "\n%s (%s)\n", row.Spec, row.Path)
		if row.Error != "" {
			// One line per message, all under the row (a spec with several
			// bad fields reports each on its own line).
			fmt.Fprintf(w, "  error: %s\n", strings.ReplaceAll(row.Error, "\n", "\n         "))
			continue
		}
		for k := 0; k < len(row.Cells); k += textCols {
			cells := row.Cells[k:min(k+textCols, len(row.Cells))]
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			line := func(name string, f func(Cell) string) {
				fmt.Fprintf(tw, "  %s\t", name)
				for _, c := range cells {
					fmt.Fprintf(tw, "%s\t", f(c))
				}
				fmt.Fprintln(tw)
			}
			line("", func(c Cell) string { return c.Device })
			line("fill at batch", func(c Cell) string {
				if c.Error != "" {
					return "-"
				}
				return fmt.Sprintf("%.0f%%", 100*c.Fill)
			})
			line("largest batch", short)
			if r.hasCost() {
				line("$/hour", func(c Cell) string {
					if c.CostPerHour == 0 {
						return "-"
					}
					return fmt.Sprintf("%.2f", c.CostPerHour)
				})
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, c := range row.Cells {
			switch {
			case c.Error != "":
				fmt.Fprintf(w, "  %s: error: %s\n", c.Device, c.Error)
			case c.Fix != nil:
				fmt.Fprintf(w, "  %s: %s (%s per GPU)\n", c.Device, c.Fix.Change, units.Format(c.Fix.DeviceTotal))
			case c.Planned:
				for _, l := range wrapWords(c.Device+": "+c.Layout, "  ", "    ", 98) {
					fmt.Fprintln(w, l)
				}
			}
		}
		if none, cmd := planHint(row, r.planFlags); cmd != "" {
			for _, l := range wrapWords(noFitLine(none)+cmd, "  ", "    ", 98) {
				fmt.Fprintln(w, l)
			}
		}
	}
	return nil
}

func (r *Report) hasCost() bool {
	for _, row := range r.Rows {
		for _, c := range row.Cells {
			if c.CostPerHour > 0 {
				return true
			}
		}
	}
	return false
}

// header and record are the flat form CSV and Markdown share: one line per
// spec and device, exact integers.
var header = []string{"spec", "path", "device", "batch", "device_total_bytes", "fill", "verdict",
	"max_batch", "gpus", "layout", "fix_device_total_bytes", "cost_per_hour", "error"}

func records(r *Report) [][]string {
	var out [][]string
	for _, row := range r.Rows {
		for _, c := range row.Cells {
			fixTotal := ""
			if c.Fix != nil {
				fixTotal = fmt.Sprint(c.Fix.DeviceTotal)
			}
			cost := ""
			if c.CostPerHour > 0 {
				cost = fmt.Sprintf("%.4f", c.CostPerHour)
			}
			out = append(out, []string{row.Spec, row.Path, c.Device, fmt.Sprint(c.Batch), fmt.Sprint(c.DeviceTotal),
				fmt.Sprintf("%.4f", c.Fill), c.Verdict, fmt.Sprint(c.MaxBatch), fmt.Sprint(c.GPUs), c.Layout,
				fixTotal, cost, c.Error})
		}
	}
	return out
}

// CSV writes one line per spec and device.
func CSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	if err := cw.WriteAll(records(r)); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// Markdown writes a table per spec, one line per device.
func Markdown(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "Target %.0f–%.0f%% of device memory, less a %.1f%% safety margin. memplan %s, %s.\n",
		100*r.Band.Lo, 100*r.Band.Hi, 100*r.Margin, r.Version, r.Generated.Format("2006-01-02 15:04 UTC"))
	for _, row := range r.Rows {
		fmt.Fprintf(w, "\n### %s\n\n", md(row.Spec))
		if row.Error != "" {
			fmt.Fprintf(w, "Error: %s\n", md(row.Error))
			continue
		}
		fmt.Fprintln(w, "| device | fill at batch | largest batch | GPUs | layout |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---|")
		for _, c := range row.Cells {
			if c.Error != "" {
				fmt.Fprintf(w, "| %s | error: %s | | | |\n", c.Device, md(c.Error))
				continue
			}
			fmt.Fprintf(w, "| %s | %.1f%% (batch %d) | %d | %d | %s |\n", c.Device, 100*c.Fill, c.Batch, c.MaxBatch, c.GPUs, md(c.Layout))
		}
		if none, cmd := planHint(row, r.planFlags); cmd != "" {
			fmt.Fprintf(w, "\n%s`%s`\n", md(noFitLine(none)), cmd)
		}
	}
	return nil
}

// planHint returns, for a row with devices that nothing tried fits (and
// that the report did not plan itself: Options.GlobalBatch), those devices
// and the memplan plan command that searches tensor and pipeline layouts
// for the first with the report's overrides (flags: Options.PlanFlags;
// docs/report.md); none and "" otherwise.
func planHint(row Row, flags string) (none []string, cmd string) {
	for _, c := range row.Cells {
		if c.Error == "" && c.Fix == nil && c.GPUs == 0 && !c.Planned {
			none = append(none, c.Device)
		}
	}
	if len(none) == 0 {
		return nil, ""
	}
	arg := shellquote.Quote(row.Path)
	if row.HF {
		arg = "--hf " + arg
	}
	cmd = fmt.Sprintf("memplan plan %s --device %s --global-batch N", arg, shellquote.Quote(none[0]))
	if flags != "" {
		cmd += " " + flags
	}
	return none, cmd
}

// noFitLine introduces planHint's command.
func noFitLine(none []string) string {
	return fmt.Sprintf("nothing tried fits (ZeRO and offload, up to %d GPUs) on %s; for tensor and pipeline layouts: ", maxGPUs, strings.Join(none, ", "))
}

func md(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }

// wrapWords breaks text at spaces into lines of at most width characters
// (a longer word gets a line of its own), the first line starting with
// first, the others with indent.
func wrapWords(text, first, indent string, width int) []string {
	var lines []string
	line := first
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
			line += word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = indent + word
		default:
			line += " " + word
		}
	}
	return append(lines, line)
}
