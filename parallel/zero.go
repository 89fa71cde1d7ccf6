package parallel

import (
	"fmt"
	"sort"
)

// Partition is how ZeroRedundancyOptimizer splits the parameters over ranks.
type Partition struct {
	// Ranks lists, per rank, the indices (into the numels given to
	// ZeroPartition) of the parameters that rank owns, in assignment order.
	Ranks [][]int
	// Numel is the number of parameter elements each rank owns: its
	// optimizer state is Numel times the state's bytes per element.
	Numel []int64
}

// ZeroPartition reproduces torch.distributed.optim.ZeroRedundancyOptimizer's
// _partition_parameters (torch 2.11, one parameter group): the parameters,
// sorted by element count largest first (a stable sort, so equal sizes keep
// their order), go one by one to the rank with the fewest elements so far,
// the lowest rank on a tie. numels are the parameters' element counts in
// model.parameters() order (a tied weight once).
func ZeroPartition(numels []int64, world int) (Partition, error) {
	if world < 1 {
		return Partition{}, fmt.Errorf("zero partition: world size %d, want at least 1", world)
	}
	idx := make([]int, len(numels))
	for i, n := range numels {
		if n < 0 {
			return Partition{}, fmt.Errorf("zero partition: parameter %d has %d elements", i, n)
		}
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return numels[idx[a]] > numels[idx[b]] })
	p := Partition{Ranks: make([][]int, world), Numel: make([]int64, world)}
	for _, i := range idx {
		r := 0
		for k := 1; k < world; k++ {
			if p.Numel[k] < p.Numel[r] {
				r = k
			}
		}
		p.Ranks[r] = append(p.Ranks[r], i)
		p.Numel[r] += numels[i]
	}
	return p, nil
}

// Busiest returns the rank that owns the most elements (the lowest such
// rank) and its element count: the rank whose optimizer state is largest.
func (p Partition) Busiest() (rank int, numel int64) {
	for r, n := range p.Numel {
		if n > numel {
			rank, numel = r, n
		}
	}
	return rank, numel
}

// Spread is the busiest rank's element count minus the least loaded one's.
func (p Partition) Spread() int64 {
	if len(p.Numel) == 0 {
		return 0
	}
	lo, hi := p.Numel[0], p.Numel[0]
	for _, n := range p.Numel {
		lo, hi = min(lo, n), max(hi, n)
	}
	return hi - lo
}
