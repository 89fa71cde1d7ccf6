// Package measured holds the numbers memplan took from real GPUs rather
// than from PyTorch's source: the CUDA context, the kernel modules loaded
// lazily, the cuBLAS workspaces, the memory the driver keeps, the devices'
// usable memory and the cuDNN workspace tables. Each carries where it was
// measured (date, device, driver and library versions) and the file of
// record, so that a number can be re-measured when the software changes.
//
// The estimator (package estimate), the device catalog (package model) and
// the probe read them from here; docs/formulas.md §D and §F explain how
// they are used, docs/pytorch-memory.md §2 and §5 how they were measured.
package measured

import "github.com/memplan/memplan/internal/units"

// Provenance says where a number was measured.
type Provenance struct {
	// Date is the day of the measurement, YYYY-MM-DD (or YYYY-MM where the
	// day was not recorded).
	Date string `json:"date"`
	// Device is the GPU as the driver names it.
	Device string `json:"device"`
	// Driver is the NVIDIA driver version; CUDA the CUDA version it
	// supports; Torch and CuDNN the libraries of the measuring run (empty
	// when none ran).
	Driver string `json:"driver"`
	CUDA   string `json:"cuda"`
	Torch  string `json:"torch,omitempty"`
	CuDNN  string `json:"cudnn,omitempty"`
	// Source is the file of record inside the repo: the measurements, or
	// the document that reports them.
	Source string `json:"source"`
}

// Bytes is a measured size.
type Bytes struct {
	Bytes int64 `json:"bytes"`
	// How says what was measured, in a phrase.
	How string     `json:"how"`
	On  Provenance `json:"measured_on"`
}

// H100 is the machine of the 2026-11-22 measurements: one H100 80GB HBM3,
// driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130.
var H100 = Provenance{
	Date: "2026-11-22", Device: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", CUDA: "13.0",
	Torch: "2.11.0+cu130", Source: "bench/results/2026-11-22-h100.jsonl",
}

// H200 is the machine the H200's usable memory was read on.
var H200 = Provenance{
	Date: "2026-11", Device: "NVIDIA H200", Driver: "580.159.04", CUDA: "13.0",
	Source: "docs/pytorch-memory.md §2",
}

// with returns p with another file of record.
func (p Provenance) with(source string) Provenance { p.Source = source; return p }

// Overheads outside PyTorch's caching allocator, and the cuBLAS
// workspaces inside it.
var (
	// CUDAContext is the bare primary context (cuInit and
	// cuDevicePrimaryCtxRetain, no modules): 552,402,944 B measured,
	// rounded up to 527 MiB.
	CUDAContext = Bytes{527 * units.MiB, "cuMemGetInfo total - free after creating the primary context",
		H100.with("docs/pytorch-memory.md §2")}
	// ModulesBase is the kernel modules a training step loads lazily:
	// device use minus max_memory_reserved was 751 MiB (context included)
	// in every fp32-only run.
	ModulesBase = Bytes{224 * units.MiB, "device use - max_memory_reserved - context, fp32 runs (38 runs)",
		H100.with("bench/results/2026-11-22-h100.jsonl")}
	// ModulesHalf is what half-precision GEMMs load on top: 767 MiB in
	// every run with them.
	ModulesHalf = Bytes{16 * units.MiB, "the same with half-precision GEMMs, less ModulesBase",
		H100.with("bench/results/2026-11-22-h100.jsonl")}
	// HopperCublas is the cuBLAS workspace on sm90, per (handle, stream):
	// PyTorch's CublasHandlePool.cpp sets 4096 KiB × 8; measured +32 MiB
	// at the first GEMM.
	HopperCublas = Bytes{32 * units.MiB, "memory_allocated after the first GEMM",
		H100.with("docs/pytorch-memory.md §2")}
	// DefaultCublas is the cuBLAS workspace on other GPUs (4096 KiB × 2 +
	// 16 KiB × 8). It is PyTorch's default from its source, not measured:
	// the provenance is the H100 reading of the same code.
	DefaultCublas = Bytes{8*units.MiB + 128*units.KiB, "PyTorch's default for GPUs other than sm90 (source, not measured)",
		H100.with("docs/pytorch-memory.md §2")}
	// DriverReserve is what the driver keeps out of cuMemGetInfo's total
	// on the H100: nvidia-smi's 81559 MiB less cuMemGetInfo's 81079 MiB.
	// The catalog subtracts it from data-sheet totals.
	DriverReserve = Bytes{480 * units.MiB, "nvidia-smi total - cuMemGetInfo total",
		H100.with("docs/pytorch-memory.md §2")}
)

// AllocGranularity is the unit cuMemAlloc takes device memory in: a 2 MiB
// + 1 B request consumes 4 MiB of cuMemGetInfo's free memory. The probe
// assumes it until it has measured the device's own.
var AllocGranularity = Bytes{2 * units.MiB, "cuMemGetInfo free before - after one cuMemAlloc",
	H100.with("docs/pytorch-memory.md §5")}

// Usable memory (cuMemGetInfo's total) of the GPUs it was read on.
var (
	H100Memory = Bytes{85_017_493_504, "cuMemGetInfo total", H100.with("docs/pytorch-memory.md §2")}
	// H200Memory is 139.80 GiB; the data sheet less DriverReserve would
	// have said 139.93 GiB (the H200's driver seems to keep about 615 MiB).
	H200Memory = Bytes{150_109_880_320, "cuMemGetInfo total", H200}
)

// CudnnHopper is where the cuDNN workspace table for sm90
// (estimate/data/cudnn-ws-h100.jsonl, whose first line records the same)
// was measured, by bench/torch/convws.py.
var CudnnHopper = Provenance{
	Date: "2026-11-22", Device: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", CUDA: "13.0",
	Torch: "2.11.0+cu130", CuDNN: "9.19.0", Source: "bench/results/2026-11-22-h100-convws.jsonl",
}

// CudnnHopper1D is where the 1-D rows of that table
// (estimate/data/cudnn-ws-h100-1d.jsonl, whose first line records the same)
// were measured, by bench/torch/convws.py --dims 1.
var CudnnHopper1D = Provenance{
	Date: "2026-11-23", Device: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", CUDA: "13.0",
	Torch: "2.11.0+cu130", CuDNN: "9.19.0", Source: "bench/results/2026-11-23-h100-convws-1d.jsonl",
}

// CudnnHopperSpec is where the rows of that table for the bundled specs'
// own convolutions (estimate/data/cudnn-ws-h100-spec.jsonl: those of
// specs/cnn-groupnorm.yaml) were measured, by bench/torch/convws.py --spec.
var CudnnHopperSpec = Provenance{
	Date: "2026-11-23", Device: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", CUDA: "13.0",
	Torch: "2.11.0+cu130", CuDNN: "9.19.0", Source: "bench/results/2026-11-23-h100-convws-cnn-gn.jsonl",
}

// cudnnH200 is the machine the H200's cuDNN rows were measured on
// (eighteenth session), with bench/torch/convws.py.
var cudnnH200 = Provenance{
	Date: "2026-11-27", Device: "NVIDIA H200", Driver: "580.159.04", CUDA: "13.0",
	Torch: "2.11.0+cu130", CuDNN: "9.19.0",
}

// The H200's rows of the sm90 table (the H100's architecture), measured
// where the H100's rows end (docs/formulas.md §F):
var (
	// CudnnHopperSpecLarge: specs/cnn-groupnorm.yaml's convolutions at
	// batches of 1,024 to 4,685 (estimate/data/cudnn-ws-h200-spec-large.jsonl),
	// several of which stop growing with the batch;
	CudnnHopperSpecLarge = cudnnH200.with("bench/results/2026-11-27-h200-cnn-large/convws.jsonl")
	// CudnnHopperLarge: the ResNets' and ViT's at batches of 1,536 to
	// 3,072 (estimate/data/cudnn-ws-h200-large.jsonl), several of which
	// take workspaces past 2³¹ elements that their smaller batches do not;
	CudnnHopperLarge = cudnnH200.with("bench/results/2026-11-27-h200-convws-large/convws.jsonl")
	// CudnnHopperFP16: the ResNets' and ViT's in fp16, amp-fp16's
	// (estimate/data/cudnn-ws-h200-fp16.jsonl), which cuDNN chooses for
	// apart from bf16;
	CudnnHopperFP16 = cudnnH200.with("bench/results/2026-11-27-h200-convws-fp16/convws-fp16.jsonl")
	// CudnnHopperFP16Spec: the CNN's in fp16
	// (estimate/data/cudnn-ws-h200-fp16-spec.jsonl).
	CudnnHopperFP16Spec = cudnnH200.with("bench/results/2026-11-27-h200-convws-fp16/convws-fp16-spec.jsonl")
)

// All lists the measured sizes by name, for documentation and tests.
func All() map[string]Bytes {
	return map[string]Bytes{
		"CUDAContext": CUDAContext, "ModulesBase": ModulesBase, "ModulesHalf": ModulesHalf,
		"HopperCublas": HopperCublas, "DefaultCublas": DefaultCublas, "DriverReserve": DriverReserve,
		"AllocGranularity": AllocGranularity,
		"H100Memory":       H100Memory, "H200Memory": H200Memory,
	}
}
