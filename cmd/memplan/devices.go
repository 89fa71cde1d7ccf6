package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/internal/units"
	"github.com/memplan/memplan/model"
)

func devicesCmd() *cli.Command {
	return &cli.Command{
		Name:  "devices",
		Usage: "list the built-in GPU catalog",
		Description: `Lists the GPUs a spec's device or --device may name. Memory is what a process
can use (cuMemGetInfo's total): measured where marked, otherwise the data
sheet's total less the 480 MiB the driver keeps.

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
				return writeJSON(c.App.Writer, ds)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPRODUCT\tMEMORY\tARCH\tSOURCE")
			for _, d := range ds {
				src := "data sheet"
				if d.Measured {
					src = "measured"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.Product, units.GiB2(d.Memory), d.Arch, src)
			}
			return tw.Flush()
		},
	}
}
