package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/memplan/memplan/model"
)

func importCmd() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "write the spec for a transformers config.json",
		ArgsUsage: "CONFIG",
		Description: `Reads a Hugging Face transformers config.json (model_type gpt2, llama,
mistral, qwen2, qwen3, gemma, phi3, bert or roberta) and writes the equivalent
memplan spec, with a training section to edit. The training flags fill it.

Example:
   memplan import config.json > specs/my-model.yaml
   memplan import config.json --batch 8 --seq 4096 --precision bf16 -o specs/my-model.yaml
   memplan estimate --hf config.json --batch 8 --seq 4096`,
		Flags: append(overrideFlags(), &cli.StringFlag{Name: "o", Usage: "write to this file instead of standard output"}),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{"import: want one CONFIG argument"}
			}
			o := overrides(c)
			if o.Batch == 0 {
				o.Batch = 1
			}
			spec, err := model.LoadHF(c.Args().First(), o)
			if err != nil {
				return err
			}
			t := spec.Training
			training := map[string]any{"batch": t.Batch, "seq": t.Seq, "precision": t.Precision,
				"optimizer": t.Optimizer.String(), "checkpointing": t.Checkpointing.String(), "attention": t.Attention}
			y, err := spec.Model.SpecYAML(spec.Name, spec.HFType, training)
			if err != nil {
				return err
			}
			y = append(y, []byte(fmt.Sprintf("device: %s\n", spec.Device.Name))...)
			if out := c.String("o"); out != "" {
				if err := os.WriteFile(out, y, 0o644); err != nil {
					return fmt.Errorf("write spec: %w", err)
				}
				fmt.Fprintf(c.App.ErrWriter, "memplan: wrote %s (%s parameters)\n", out, commas(spec.Params()))
				return nil
			}
			_, err = c.App.Writer.Write(y)
			return err
		},
	}
}
