package parallel

import "fmt"

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
	var out []int64
	var open int64
	limit := firstBytes
	for i, b := range gradBytes {
		if b < 0 {
			return nil, fmt.Errorf("ddp buckets: gradient %d has %d bytes", i, b)
		}
		open += b
		if open >= limit {
			out = append(out, open)
			open, limit = 0, capBytes
		}
	}
	if open > 0 {
		out = append(out, open)
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
