package model

import (
	"sort"
	"strings"

	"github.com/memplan/memplan/internal/measured"
	"github.com/memplan/memplan/internal/units"
)

// Vendor of a GPU.
const (
	NVIDIA = "nvidia"
	AMD    = "amd"
)

// Device is the GPU a job is planned for.
type Device struct {
	// Name is the catalog key ("h100-80gb") or the name given in the spec.
	Name string `json:"name"`
	// Product is the marketing name ("NVIDIA H100 80GB HBM3").
	Product string `json:"product,omitempty"`
	// Memory is the memory a process can use: the total that cuMemGetInfo
	// reports, which excludes what the driver keeps for itself.
	Memory int64 `json:"memory_bytes"`
	// Arch is the compute architecture ("hopper", "ampere", ...); it decides
	// library workspace sizes.
	Arch   string `json:"arch,omitempty"`
	Vendor string `json:"vendor,omitempty"`
	// SMs and ThreadsPerSM size PyTorch's reduction kernels, whose global
	// scratch buffers depend on them.
	SMs          int `json:"sms,omitempty"`
	ThreadsPerSM int `json:"threads_per_sm,omitempty"`
	// Measured is true when Memory was read off a real device rather than
	// derived from the data sheet; MeasuredOn then says where. (MeasuredOn
	// is left out of the JSON of an estimate, whose schema it would change:
	// memplan devices prints it.)
	Measured   bool                 `json:"measured"`
	MeasuredOn *measured.Provenance `json:"-"`
}

// Hopper reports whether the device is an sm90 part (H100, H200), where
// cuBLAS reserves a larger workspace.
func (d Device) Hopper() bool { return d.Arch == "hopper" }

// driverReserve is what the NVIDIA driver keeps out of cuMemGetInfo's total
// on a data-center part: 81559 MiB (nvidia-smi) vs 81079 MiB (cuMemGetInfo)
// on the H100 (internal/measured, docs/pytorch-memory.md §2).
var driverReserve = measured.DriverReserve.Bytes

// smi is a data sheet's total (nvidia-smi's MiB) less the driver reserve.
func smi(mib int64) int64 { return mib*units.MiB - driverReserve }

// measuredDevice is d with the memory read off a real device.
func measuredDevice(d Device, m measured.Bytes) Device {
	on := m.On
	d.Memory, d.Measured, d.MeasuredOn = m.Bytes, true, &on
	return d
}

// catalog is keyed by the lower-case name users type. Memory is the
// cuMemGetInfo total: measured where Measured is set (H100, H200),
// otherwise the nvidia-smi total from the data sheet less the 480 MiB
// driver reserve measured on the H100. The probe (memplan probe) reads the
// real value on a node.
var catalog = map[string]Device{
	"a100-40gb":  {Product: "NVIDIA A100 40GB", Memory: smi(40960), Arch: "ampere", Vendor: NVIDIA, SMs: 108, ThreadsPerSM: 2048},
	"a100-80gb":  {Product: "NVIDIA A100 80GB", Memory: smi(81920), Arch: "ampere", Vendor: NVIDIA, SMs: 108, ThreadsPerSM: 2048},
	"h100-80gb":  measuredDevice(Device{Product: "NVIDIA H100 80GB HBM3", Arch: "hopper", Vendor: NVIDIA, SMs: 132, ThreadsPerSM: 2048}, measured.H100Memory),
	"h200-141gb": measuredDevice(Device{Product: "NVIDIA H200", Arch: "hopper", Vendor: NVIDIA, SMs: 132, ThreadsPerSM: 2048}, measured.H200Memory),
	"l4":         {Product: "NVIDIA L4 24GB", Memory: smi(23034), Arch: "ada", Vendor: NVIDIA, SMs: 58, ThreadsPerSM: 1536},
	"l40s":       {Product: "NVIDIA L40S 48GB", Memory: smi(46068), Arch: "ada", Vendor: NVIDIA, SMs: 142, ThreadsPerSM: 1536},
	"a10g":       {Product: "NVIDIA A10G 24GB", Memory: smi(23028), Arch: "ampere", Vendor: NVIDIA, SMs: 80, ThreadsPerSM: 1536},
	"t4":         {Product: "NVIDIA T4 16GB", Memory: smi(15360), Arch: "turing", Vendor: NVIDIA, SMs: 40, ThreadsPerSM: 1024},
	"v100-16gb":  {Product: "NVIDIA V100 16GB", Memory: smi(16384), Arch: "volta", Vendor: NVIDIA, SMs: 80, ThreadsPerSM: 2048},
	"v100-32gb":  {Product: "NVIDIA V100 32GB", Memory: smi(32768), Arch: "volta", Vendor: NVIDIA, SMs: 80, ThreadsPerSM: 2048},
	"rtx-4090":   {Product: "NVIDIA GeForce RTX 4090 24GB", Memory: smi(24564), Arch: "ada", Vendor: NVIDIA, SMs: 128, ThreadsPerSM: 1536},
	"mi300x":     {Product: "AMD Instinct MI300X 192GB", Memory: 192 * units.GiB, Arch: "cdna3", Vendor: AMD, SMs: 304, ThreadsPerSM: 2048},
}

// aliases map other spellings to catalog keys.
var aliases = map[string]string{
	"a100": "a100-80gb", "a100-40": "a100-40gb", "a100-80": "a100-80gb",
	"h100": "h100-80gb", "h100-80": "h100-80gb", "h200": "h200-141gb",
	"v100": "v100-32gb", "v100-16": "v100-16gb", "v100-32": "v100-32gb",
	"4090": "rtx-4090", "rtx4090": "rtx-4090",
	"mi300x-192gb": "mi300x", "mi300x-192": "mi300x",
}

// DeviceAliases returns the other names LookupDevice accepts, sorted, each
// as [alias, catalog name].
func DeviceAliases() [][2]string {
	out := make([][2]string, 0, len(aliases))
	for a, n := range aliases {
		out = append(out, [2]string{a, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// LookupDevice finds a device in the catalog by name, case-insensitively.
func LookupDevice(name string) (Device, bool) {
	k := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[k]; ok {
		k = a
	}
	d, ok := catalog[k]
	if ok {
		d.Name = k
	}
	return d, ok
}

// Devices returns the catalog, sorted by name.
func Devices() []Device {
	out := make([]Device, 0, len(catalog))
	for k, d := range catalog {
		d.Name = k
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DeviceNames lists the catalog keys, sorted.
func DeviceNames() []string {
	var n []string
	for _, d := range Devices() {
		n = append(n, d.Name)
	}
	return n
}
