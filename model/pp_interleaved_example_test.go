package model_test

import (
	"fmt"

	"github.com/memplan/memplan/model"
)

// The compute actions of rank 1 of two under ScheduleInterleaved1F1B, with
// two stages per rank (stages 1 and 3) and four micro-batches: two warm-up
// forwards, then a forward and a backward in turn, then the last
// backwards.
func ExampleInterleavedOrder() {
	order, err := model.InterleavedOrder(1, 2, 2, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(order)
	// Output: [1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3]
}
