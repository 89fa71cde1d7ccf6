// Package alloc simulates PyTorch's CUDA caching allocator and its
// PYTORCH_CUDA_ALLOC_CONF settings.
//
// An Allocator replays the decisions of c10/cuda/CUDACachingAllocator.cpp
// for a sequence of Malloc and Free calls: request rounding (512 B, or
// roundup_power2_divisions), the small and large pools, best-fit reuse of
// cached blocks per stream, splitting and merging, segment sizes from
// cudaMalloc or pages of expandable segments, max_split_size_mb, and the
// out-of-memory path under a memory limit (garbage collection, oversize
// blocks, then the whole cache freed and the allocation retried). It
// reports memory_allocated, memory_reserved, the segments, and the
// fragmentation at the peak.
//
// Equal-size cached blocks are ordered by the address a model of the CUDA
// driver's placement gives their segment (address.go, the default
// OrderAddress), or with Config.SegmentOrder set to OrderAge by the age of
// their segment (docs/allocator.md §8 compares the two).
//
// Parse reads a PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF value with
// PyTorch's syntax and checks every key and value.
//
// The free pools are treaps over a slab of blocks indexed by int32, so an
// operation costs O(log n) in the number of cached blocks and allocates
// nothing on the heap once the slab has grown; Reset reuses the slab for
// the next simulation. docs/allocator.md gives the model with its sources.
package alloc
