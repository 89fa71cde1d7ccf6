package estimate

import "sync"

// Routing of a randomly initialised router (docs/moe.md §3): each token
// picks top_k distinct experts uniformly at random, independently of the
// other tokens. The draw is deterministic (SplitMix64 from a fixed seed),
// so every estimate of the same configuration gets the same counts.

// routedCounts returns how many of the tokens·k routed (token, slot) pairs
// each of the experts receives under random routing.
func routedCounts(tokens, experts, k int64) []int64 {
	rng := splitMix64(0x6d656d706c616e ^ uint64(tokens)<<20 ^ uint64(experts)<<8 ^ uint64(k))
	perm := make([]int64, experts)
	for i := range perm {
		perm[i] = int64(i)
	}
	counts := make([]int64, experts)
	for t := int64(0); t < tokens; t++ {
		// A partial Fisher–Yates shuffle: the first k entries are a
		// uniformly random k-subset, whatever order perm was left in.
		for j := int64(0); j < k; j++ {
			r := j + rng.below(experts-j)
			perm[j], perm[r] = perm[r], perm[j]
			counts[perm[j]]++
		}
	}
	return counts
}

// busiestShare is the most routed pairs any of ep ranks receives when
// tokens (over all ranks) are routed at random and rank r holds experts
// [r·E/ep, (r+1)·E/ep). Draws are cached: they depend only on the
// arguments.
func busiestShare(tokens, experts, k, ep int64) int64 {
	key := [4]int64{tokens, experts, k, ep}
	if v, ok := shareCache.Load(key); ok {
		return v.(int64)
	}
	counts := routedCounts(tokens, experts, k)
	per := experts / ep
	var most int64
	for r := int64(0); r < ep; r++ {
		var n int64
		for _, c := range counts[r*per : (r+1)*per] {
			n += c
		}
		most = max(most, n)
	}
	shareCache.Store(key, most)
	return most
}

var shareCache sync.Map

// splitMix64 is Steele, Lea and Flood's SplitMix64 generator.
type splitMix64 uint64

func (s *splitMix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// below returns a number in [0, n): Lemire's multiply-shift, whose bias
// (n/2³²) is negligible for expert counts.
func (s *splitMix64) below(n int64) int64 {
	return int64((s.next() >> 32) * uint64(n) >> 32)
}
