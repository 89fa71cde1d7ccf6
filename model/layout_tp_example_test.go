package model_test

import (
	"fmt"
	"log"

	"github.com/memplan/memplan/model"
)

// One rank of Llama-3.2-1B under 2-way tensor parallelism with sequence
// parallelism: its parameters, and the collectives between its layers.
func ExampleModel_LowerRank() {
	spec, err := model.Load("../specs/llama-3.2-1b.yaml", model.Overrides{TP: 2, SP: true})
	if err != nil {
		log.Fatal(err)
	}
	ls, err := spec.Model.LowerRank(&spec.Training)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("parameters per rank:", model.Params(ls), "of", spec.Params())
	block := ls[2].Body[0].Body // the first residual: attention
	for _, l := range block {
		if c, ok := l.Spec.(*model.Collective); ok {
			fmt.Println(l.Kind, c.Op)
			continue
		}
		fmt.Println(l.Kind)
	}
	// Output:
	// parameters per rank: 617940992 of 1235814400
	// rmsnorm
	// collective all_gather_seq
	// attention
	// collective reduce_scatter_seq
}
