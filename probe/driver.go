// Package probe asks a real GPU what it will give a training job: it
// replays the caching allocator's segments that the estimator plans for a
// batch with raw driver allocations, grows the batch until the device sits
// inside a target fill, and reports what the device actually allowed.
//
// The driver is an interface with three implementations: the CUDA driver
// loaded at run time with no cgo (Open, the default build: libcuda.so.1 on
// Linux, nvcuda.dll on Windows, and on macOS, which has no CUDA, an error
// that says so), the same through gorgonia.org/cu (build tag cu, Linux),
// and a fake device for tests.
package probe

import (
	"errors"
	"fmt"
)

// Driver is the part of the CUDA driver API the probe uses. Calls that
// take a context must run on the goroutine that created it, locked to its
// OS thread (Run does this).
type Driver interface {
	// Version is the driver's CUDA version, e.g. 13000.
	Version() (int, error)
	DeviceCount() (int, error)
	DeviceName(index int) (string, error)
	// OpenContext makes the device's primary context current, as PyTorch
	// does.
	OpenContext(index int) (Context, error)
}

// Context is a device context that is current on the calling thread.
type Context interface {
	// MemInfo is cuMemGetInfo: free and total bytes of the device.
	MemInfo() (free, total int64, err error)
	Alloc(bytes int64) (uintptr, error)
	Free(ptr uintptr) error
	Close() error
}

// DriverError says the CUDA driver could not be used. Lib is the library,
// Msg what the loader or driver said.
type DriverError struct {
	Lib string
	Msg string
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cannot use the CUDA driver (%s): %s", e.Lib, e.Msg)
}

// Hint is the advice printed under the error.
func (e *DriverError) Hint() string {
	return noGPUHint
}

// noGPUHint is the advice under every error that says the probe cannot
// reach a GPU.
const noGPUHint = "the probe needs an NVIDIA GPU and its driver; memplan estimate, tune and check need no GPU"

// NoCUDAError is returned by Open on an operating system that has no CUDA
// driver at all (macOS): the probe cannot run there, but everything that
// predicts can.
type NoCUDAError struct {
	// OS is the operating system as people name it ("macOS").
	OS string
}

func (e *NoCUDAError) Error() string {
	return fmt.Sprintf("no CUDA on %s: NVIDIA ships no CUDA driver for it, so the probe cannot run here", e.OS)
}

// Hint is the advice printed under the error.
func (e *NoCUDAError) Hint() string {
	return "memplan estimate, tune and check need no GPU; run memplan probe (or --probe) on a Linux or Windows machine with an NVIDIA GPU"
}

// NoLoaderError is returned by Open in a binary built with -tags nodriver
// on Linux: fully static, it has no dynamic loader to load the driver
// library with (docs/probe.md), but everything that predicts works.
type NoLoaderError struct{}

func (e *NoLoaderError) Error() string {
	return "this memplan was built with -tags nodriver (a static binary without the C library), so it cannot load " + libcuda
}

// Hint is the advice printed under the error.
func (e *NoLoaderError) Hint() string {
	return "memplan estimate, tune and check need no GPU; to probe, use a memplan built without -tags nodriver on the GPU node"
}

// osName is the name people use for a GOOS value.
func osName(goos string) string {
	switch goos {
	case "darwin":
		return "macOS"
	case "ios":
		return "iOS"
	}
	return goos
}

// IndexError is a device index the machine does not have.
type IndexError struct{ Index, Count int }

func (e *IndexError) Error() string {
	return fmt.Sprintf("device index %d: this machine has %d CUDA device(s)", e.Index, e.Count)
}

// Hint is the advice printed under the error.
func (e *IndexError) Hint() string {
	return fmt.Sprintf("--device-index takes 0 to %d; nvidia-smi -L lists the devices", max(e.Count-1, 0))
}

// ErrOutOfMemory is returned (wrapped) by Alloc when the device is full.
var ErrOutOfMemory = errors.New("out of device memory")

// MinDriverVersion is the oldest driver API version the probe supports
// (cuMemGetInfo_v2 and cuDevicePrimaryCtxRelease_v2 exist from 11.0).
const MinDriverVersion = 11000
