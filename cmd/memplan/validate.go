package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func validateCmd() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a spec without estimating",
		ArgsUsage: "SPEC",
		Description: `Reads SPEC and reports every problem as file:line: message, with exit code 2;
prints "ok" and the parameter count when the spec is valid.

Example:
   memplan validate specs/llama-3-8b.yaml`,
		Flags: overrideFlags(),
		Action: func(c *cli.Context) error {
			spec, err := loadSpec(c)
			if err != nil {
				return err
			}
			for _, n := range spec.Notes {
				fmt.Fprintf(c.App.ErrWriter, "memplan: note: %s\n", n)
			}
			fmt.Fprintf(c.App.Writer, "%s: ok (%s, %s parameters)\n", spec.File, spec.Model.Type, commas(spec.Params()))
			return nil
		},
	}
}
