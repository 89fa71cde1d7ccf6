// Package prefault maps fresh memory in bulk before it is written.
//
// A simulation's records (estimate's tensor and node chunks, the
// allocator's block slab) are new memory from the operating system the
// first time a process needs them, and each of their pages costs a page
// fault at its first write. On a virtual machine a fault is expensive:
// on the 2-core VM of docs/performance.md, 12 µs per 4 KiB page, so the
// 4 MB a GPT-2 XL estimate touches cost 13 ms of the first estimate's 18.
// Asking the kernel to map a fresh chunk's pages in one call costs about
// a third of that. The memory's contents do not change: fresh pages are
// zero either way.
package prefault
