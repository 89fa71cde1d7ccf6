package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/memplan/memplan/model"
)

// unmeasuredNote prints on w that the spec's bitsandbytes parts (an int8 or
// nf4 base, an 8-bit or paged optimizer) are modelled from source and
// unmeasured (docs/lora.md §6-§7), as estimate's notes and
// Result.Unmeasured say. Commands that print no notes of their own (tune, check, plan,
// probe, report) call it once.
func unmeasuredNote(w io.Writer, spec *model.Spec) {
	var what []string
	t := spec.Training
	if t.Quant != "" {
		what = append(what, "the "+t.Quant+" base")
	}
	switch t.Optimizer.Name {
	case model.Adam8bit, model.PagedAdamW8bit, model.PagedAdamW32bit:
		what = append(what, t.Optimizer.Name)
	}
	if len(what) > 0 {
		fmt.Fprintf(w, "memplan: note: %s: modelled from bitsandbytes' source, unmeasured (docs/lora.md §6-§7)\n", strings.Join(what, " and "))
	}
}
