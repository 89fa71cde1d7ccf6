package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

func devicesCmd() *cli.Command {
	return &cli.Command{
		Name:  "devices",
		Usage: "list the built-in GPU catalog",
		Description: `Lists the GPUs a spec's device or --device may name, then the other
names they go by. Memory is what a process can use (cuMemGetInfo's total):
measured where marked (with the date and driver; the JSON form has
measured_on), otherwise the data sheet's total less the 480 MiB the driver
keeps.

Example:
   memplan devices
   memplan devices --format json`,
		Flags: []cli.Flag{formatFlag},
		Action: func(c *cli.Context) error {
			f, err := format(c)
			if err != nil {
				return err
			}
			ds := model.Devices()
			if f == "json" {
				rows := make([]deviceRow, len(ds))
				for i, d := range ds {
					rows[i] = deviceRow{d, d.MeasuredOn}
				}
				return writeJSON(c.App.Writer, rows)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPRODUCT\tMEMORY\tARCH\tSOURCE")
			for _, d := range ds {
				src := "data sheet"
				if on := d.MeasuredOn; on != nil {
					src = fmt.Sprintf("measured %s, driver %s", on.Date, on.Driver)
				} else if d.Measured {
					src = "measured"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.Product, units.GiB2(d.Memory), d.Arch, src)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return printAliases(c.App.Writer)
		},
	}
}

// deviceRow is a catalog entry as memplan devices --format json prints it:
// the device, and where its memory was measured.
type deviceRow struct {
	model.Device
	MeasuredOn *measured.Provenance `json:"measured_on,omitempty"`
}

// printAliases lists the other names the catalog's devices go by, wrapped
// for an 80-column terminal.
func printAliases(w io.Writer) error {
	line := "\nalso accepted:"
	var b strings.Builder
	as := model.DeviceAliases()
	for i, a := range as {
		item := fmt.Sprintf(" %s (%s)", a[0], a[1])
		if i < len(as)-1 {
			item += ","
		}
		if len(line)+len(item) > 80 {
			b.WriteString(line + "\n")
			line = " "
		}
		line += item
	}
	b.WriteString(line + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}
