//go:build cu

package probe

// This backend links the CUDA driver through gorgonia.org/cu (cgo), on
// Linux. Build it with `go build -tags cu` against cuda.h and libcuda:
// .ci/cuda-headers.sh fetches both and prints the cgo variables
// (docs/probe.md, "Drivers"). gorgonia.org/cu calls cuInit in its
// package init and exits the process if that fails, so a binary built this
// way cannot start on a machine without the driver: the default build loads
// the driver at run time instead (cuda.go).

import (
	"errors"
	"fmt"

	"gorgonia.org/cu"
)

// libcuda names the driver in errors.
const libcuda = "gorgonia.org/cu"

type cuDriver struct{}

// Open returns the gorgonia.org/cu driver. The driver was initialised by
// that package's init; Open checks its version.
func Open() (Driver, error) {
	v := cu.Version()
	if v < 0 {
		return nil, &DriverError{Lib: libcuda, Msg: "cuDriverGetVersion failed"}
	}
	if v < MinDriverVersion {
		return nil, &DriverError{Lib: libcuda, Msg: fmt.Sprintf("driver supports CUDA %d.%d; the probe needs %d.%d or later",
			v/1000, v%1000/10, MinDriverVersion/1000, MinDriverVersion%1000/10)}
	}
	return cuDriver{}, nil
}

func (cuDriver) Version() (int, error) { return cu.Version(), nil }

func (cuDriver) DeviceCount() (int, error) { return cu.NumDevices() }

func (cuDriver) DeviceName(i int) (string, error) {
	d, err := cu.GetDevice(i)
	if err != nil {
		return "", err
	}
	return d.Name()
}

type cuCtx struct{ dev cu.Device }

func (cuDriver) OpenContext(i int) (Context, error) {
	d, err := cu.GetDevice(i)
	if err != nil {
		return nil, err
	}
	ctx, err := d.RetainPrimaryCtx()
	if err != nil {
		return nil, err
	}
	if err := cu.SetCurrentContext(ctx); err != nil {
		d.ReleasePrimaryCtx()
		return nil, err
	}
	return &cuCtx{dev: d}, nil
}

func (c *cuCtx) MemInfo() (int64, int64, error) { return cu.MemInfo() }

func (c *cuCtx) Alloc(n int64) (uintptr, error) {
	p, err := cu.MemAlloc(n)
	if err != nil {
		if errors.Is(err, cu.OutOfMemory) {
			return 0, fmt.Errorf("cuMemAlloc(%d): %v: %w", n, err, ErrOutOfMemory)
		}
		return 0, err
	}
	return uintptr(p), nil
}

func (c *cuCtx) Free(p uintptr) error { return cu.MemFree(cu.DevicePtr(p)) }

func (c *cuCtx) Close() error { return c.dev.ReleasePrimaryCtx() }
