//go:build !cu && (windows || (linux && !nodriver))

package probe

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuda is the CUDA driver API, loaded at run time with no cgo, so that one
// binary, built without a C toolchain, runs on machines with and without a
// driver and reports a missing one as an error. The library is
// libcuda.so.1 on Linux (cuda_linux.go; dlopen links glibc dynamically,
// docs/probe.md) and nvcuda.dll on Windows (cuda_windows.go); purego calls
// it with the platform's C calling convention.
type cuda struct {
	cuInit             func(uint32) int32
	cuDriverGetVersion func(*int32) int32
	cuDeviceGetCount   func(*int32) int32
	cuDeviceGet        func(*int32, int32) int32
	cuDeviceGetName    func(*byte, int32, int32) int32
	cuPrimaryRetain    func(*uintptr, int32) int32
	cuPrimaryRelease   func(int32) int32
	cuCtxSetCurrent    func(uintptr) int32
	cuMemGetInfo       func(*uint64, *uint64) int32
	cuMemAlloc         func(*uint64, uint64) int32
	cuMemFree          func(uint64) int32
	cuGetErrorString   func(int32, **byte) int32
}

// Open loads the CUDA driver and initialises it. A missing library or a
// failing cuInit is a *DriverError carrying the loader's or driver's text.
// The OS thread is locked while the library is loaded and initialised;
// contexts are bound to a thread by NewSession.
func Open() (Driver, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sym, err := openLib()
	if err != nil {
		return nil, &DriverError{Lib: libcuda, Msg: err.Error()}
	}
	c := &cuda{}
	syms := []struct {
		fn   any
		name string
	}{
		{&c.cuInit, "cuInit"}, {&c.cuDriverGetVersion, "cuDriverGetVersion"}, {&c.cuDeviceGetCount, "cuDeviceGetCount"},
		{&c.cuDeviceGet, "cuDeviceGet"}, {&c.cuDeviceGetName, "cuDeviceGetName"},
		{&c.cuPrimaryRetain, "cuDevicePrimaryCtxRetain"}, {&c.cuPrimaryRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&c.cuCtxSetCurrent, "cuCtxSetCurrent"}, {&c.cuMemGetInfo, "cuMemGetInfo_v2"},
		{&c.cuMemAlloc, "cuMemAlloc_v2"}, {&c.cuMemFree, "cuMemFree_v2"}, {&c.cuGetErrorString, "cuGetErrorString"},
	}
	for _, s := range syms {
		// Look each symbol up first: an old driver lacks the _v2 names.
		addr, err := sym(s.name)
		if err != nil || addr == 0 {
			return nil, &DriverError{Lib: libcuda, Msg: fmt.Sprintf("symbol %s missing (driver too old? need CUDA %d.%d or later)", s.name, MinDriverVersion/1000, MinDriverVersion%1000/10)}
		}
		purego.RegisterFunc(s.fn, addr)
	}
	if r := c.cuInit(0); r != 0 {
		return nil, &DriverError{Lib: libcuda, Msg: "cuInit: " + c.errString(r)}
	}
	v, err := c.Version()
	if err != nil {
		return nil, err
	}
	if v < MinDriverVersion {
		return nil, &DriverError{Lib: libcuda, Msg: fmt.Sprintf("driver supports CUDA %d.%d; the probe needs %d.%d or later", v/1000, v%1000/10, MinDriverVersion/1000, MinDriverVersion%1000/10)}
	}
	return c, nil
}

func (c *cuda) errString(r int32) string {
	var p *byte
	if c.cuGetErrorString(r, &p) != 0 || p == nil {
		return fmt.Sprintf("CUDA error %d", r)
	}
	return fmt.Sprintf("%s (CUDA error %d)", cString(p), r)
}

// cString copies a NUL-terminated string owned by the driver.
func cString(p *byte) string {
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

func (c *cuda) check(what string, r int32) error {
	if r == 0 {
		return nil
	}
	if r == 2 { // CUDA_ERROR_OUT_OF_MEMORY
		return fmt.Errorf("%s: %s: %w", what, c.errString(r), ErrOutOfMemory)
	}
	return fmt.Errorf("%s: %s", what, c.errString(r))
}

func (c *cuda) Version() (int, error) {
	var v int32
	return int(v), c.check("cuDriverGetVersion", c.cuDriverGetVersion(&v))
}

func (c *cuda) DeviceCount() (int, error) {
	var n int32
	return int(n), c.check("cuDeviceGetCount", c.cuDeviceGetCount(&n))
}

func (c *cuda) device(i int) (int32, error) {
	var d int32
	return d, c.check(fmt.Sprintf("cuDeviceGet(%d)", i), c.cuDeviceGet(&d, int32(i)))
}

func (c *cuda) DeviceName(i int) (string, error) {
	d, err := c.device(i)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	if err := c.check("cuDeviceGetName", c.cuDeviceGetName(&buf[0], int32(len(buf)), d)); err != nil {
		return "", err
	}
	return cString(&buf[0]), nil
}

type cudaCtx struct {
	c   *cuda
	dev int32
}

func (c *cuda) OpenContext(i int) (Context, error) {
	d, err := c.device(i)
	if err != nil {
		return nil, err
	}
	var ctx uintptr
	if err := c.check("cuDevicePrimaryCtxRetain", c.cuPrimaryRetain(&ctx, d)); err != nil {
		return nil, err
	}
	if err := c.check("cuCtxSetCurrent", c.cuCtxSetCurrent(ctx)); err != nil {
		c.cuPrimaryRelease(d)
		return nil, err
	}
	return &cudaCtx{c: c, dev: d}, nil
}

func (x *cudaCtx) MemInfo() (int64, int64, error) {
	var free, total uint64
	err := x.c.check("cuMemGetInfo", x.c.cuMemGetInfo(&free, &total))
	return int64(free), int64(total), err
}

func (x *cudaCtx) Alloc(n int64) (uintptr, error) {
	var p uint64
	if err := x.c.check(fmt.Sprintf("cuMemAlloc(%d)", n), x.c.cuMemAlloc(&p, uint64(n))); err != nil {
		return 0, err
	}
	return uintptr(p), nil
}

func (x *cudaCtx) Free(p uintptr) error { return x.c.check("cuMemFree", x.c.cuMemFree(uint64(p))) }

func (x *cudaCtx) Close() error {
	return x.c.check("cuDevicePrimaryCtxRelease", x.c.cuPrimaryRelease(x.dev))
}
