package parallel

import (
	"fmt"
	"sort"
)

// DDP's bucket limits (torch 2.11): dist._DEFAULT_FIRST_BUCKET_BYTES and
// the default bucket_cap_mb=25.
const (
	DDPFirstBucketBytes int64 = 1 << 20
	DDPBucketCapBytes   int64 = 25 << 20
)

// DDPBuckets reproduces the reducer's compute_bucket_assignment_by_size for
// one dtype and device: gradients are appended to the open bucket in the
// given order, and a bucket closes as soon as its size reaches its limit
// (first the first-bucket limit, then capBytes for every later one), so a
// bucket can exceed its limit by up to one gradient. gradBytes are the
// gradients' sizes in the order they are bucketed and the result is the
// buckets' sizes in bytes, in that order.
//
// At construction (and for the whole first iteration when
// find_unused_parameters is False) DDP uses one bucket holding every
// gradient; after the first backward it rebuilds the buckets in the order
// the gradients became ready, which for a plain stack is close to reverse
// parameter order (ReverseOrder). The buckets are flat tensors in the
// gradients' dtype allocated on the default stream and kept for the whole
// run, so unless gradient_as_bucket_view=True they add the total gradient
// bytes once, whatever their split.
func DDPBuckets(gradBytes []int64, firstBytes, capBytes int64) ([]int64, error) {
	if firstBytes <= 0 || capBytes <= 0 {
		return nil, fmt.Errorf("ddp buckets: limits %d and %d bytes, want positive", firstBytes, capBytes)
	}
	buckets, err := AssignBuckets(gradBytes, nil, []int64{firstBytes, capBytes}, true)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(buckets))
	for i, b := range buckets {
		for _, k := range b {
			out[i] += gradBytes[k]
		}
	}
	return out, nil
}

// BroadcastBucketBytes is the bucket size of DDP's initial broadcast of the
// module's parameters and buffers (DistributedDataParallel's
// broadcast_bucket_size, 250 MiB).
const BroadcastBucketBytes int64 = 250 << 20

// AssignBuckets is c10d's compute_bucket_assignment_by_size
// (torch/csrc/distributed/c10d/reducer.cpp): tensors of bytes[i] and kind
// keys[i] (dtype and device; nil means one kind) are appended in order to
// their kind's open bucket, which closes as soon as it holds at least its
// limit (limits[0] for a kind's first bucket, then each next limit, the
// last repeating). Buckets still open at the end follow. With ready set the
// input is the gradient-ready order and the buckets keep the order they
// closed in (the reducer's rebuild); otherwise they are sorted by the
// smallest index they hold (the construction and broadcast_coalesced). The
// result lists each bucket's tensor indices.
func AssignBuckets(bytes []int64, keys []int, limits []int64, ready bool) ([][]int, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("bucket assignment: no size limits")
	}
	for _, l := range limits {
		if l <= 0 {
			return nil, fmt.Errorf("bucket assignment: limit %d bytes, want positive", l)
		}
	}
	if keys != nil && len(keys) != len(bytes) {
		return nil, fmt.Errorf("bucket assignment: %d keys for %d tensors", len(keys), len(bytes))
	}
	type open struct {
		idx   []int
		size  int64
		limit int
	}
	var out [][]int
	var kinds []int
	opens := map[int]*open{}
	for i, b := range bytes {
		if b < 0 {
			return nil, fmt.Errorf("bucket assignment: tensor %d has %d bytes", i, b)
		}
		k := 0
		if keys != nil {
			k = keys[i]
		}
		o := opens[k]
		if o == nil {
			o = &open{}
			opens[k] = o
			kinds = append(kinds, k)
		}
		o.idx = append(o.idx, i)
		o.size += b
		if o.size >= limits[o.limit] {
			out = append(out, o.idx)
			o.idx, o.size = nil, 0
			o.limit = min(o.limit+1, len(limits)-1)
		}
	}
	// The reducer walks its map of open buckets; with one kind (the only
	// case measured) the order cannot matter, and first-seen is used.
	for _, k := range kinds {
		if o := opens[k]; len(o.idx) > 0 {
			out = append(out, o.idx)
		}
	}
	if !ready {
		sort.SliceStable(out, func(a, b int) bool { return out[a][0] < out[b][0] })
	}
	return out, nil
}

// ReverseOrder returns a reversed copy of sizes: DDP's bucketing order
// before it has seen which gradients become ready first.
func ReverseOrder(sizes []int64) []int64 {
	out := make([]int64, len(sizes))
	for i, s := range sizes {
		out[len(sizes)-1-i] = s
	}
	return out
}
