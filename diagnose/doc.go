// Package diagnose reads the evidence PyTorch leaves after a CUDA
// out-of-memory error and says which problem the job has: memory pressure
// (the job needs more than the device has), fragmentation (the allocator
// holds enough free memory, but in pieces too small for the request), a
// leak (allocated memory grows step over step) or another process holding
// device memory.
//
// Evidence comes from four kinds of file, each detected by its content
// (Read): a log with the torch.OutOfMemoryError message, the JSON of
// torch.cuda.memory_stats() (one dump, or JSON lines, one per step), the
// text of torch.cuda.memory_summary(), and a snapshot pickle from
// torch.cuda.memory._dump_snapshot(). Gzipped files are read as they are.
// Diagnose merges what the files say, optionally with memplan's prediction
// for the described job, into a Verdict. The rules and their thresholds are
// in docs/diagnose.md.
package diagnose
